// SPDX-License-Identifier: MIT
// Multi-head scaled dot-product self-attention on a fused QKV tensor, as one op with a hand-written
// backward over each backend's kernels (backend/cpu/attention.hpp, backend/cuda/attention.cuh): a
// tiled online-softmax ("flash") kernel with O(T) memory, and a naive kernel that keeps the
// (B, H, T, T) weights.   qkv (B, T, 3*D) -> (B, T, D), heads merged. An optional sparse pattern
// (sliding window, causal, global tokens; AttentionPattern) makes the flash kernel O(T w).
//   auto o = attn::self_attention(ctx, qkv, {.heads = 8, .key_mask = mask});
//   auto l = attn::self_attention(ctx, qkv, {.heads = 8, .window = 128, .global_tokens = 1});  // Longformer-style
#pragma once
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "../backend/attention_problem.hpp"
#include "../backend/element_math.hpp"
#include "../backend/kernels.hpp"
#include "../core/precision.hpp"
#include "var.hpp"

namespace attn {

namespace detail {
/// The weights after attention dropout, as torch's need_weights returns them in training: w (B, H,
/// T, T) times the kernels' own mask (elem::dropout_factor of ((b H + h) T + i) T + j), in a new
/// tensor (w itself is kept for backward). Through the host on a device backend: only a caller
/// that asks for the weights of a training step with dropout pays it.
template <class T, class B>
Tensor<T, AnyShape, B> dropped_weights(const Tensor<T, AnyShape, B>& w, const kernels::MhaProblem<T>& p) {
  const auto threshold = static_cast<std::uint32_t>(p.dropout * double(1u << 24));
  const T keep = T(1.0 / (1.0 - p.dropout));
  const std::size_t n = w.numel();
  Tensor<T, AnyShape, B> out(w.dims());
  if constexpr (B::host_accessible) {
    const T* src = w.data();
    T* dst = out.data();
    for (std::size_t i = 0; i < n; ++i) dst[i] = src[i] * elem::dropout_factor(p.seed, i, threshold, keep);
  } else {
    std::vector<T> h(n);
    B::template to_host<T>(h.data(), w.data(), n);
    for (std::size_t i = 0; i < n; ++i) h[i] *= elem::dropout_factor(p.seed, i, threshold, keep);
    B::template from_host<T>(out.data(), h.data(), n);
  }
  return out;
}
}  // namespace detail

/// Which kernel self_attention runs. `automatic`: flash, unless the weights are requested or the
/// backend cannot run flash at this head width (a CUDA device whose blocks have too little shared
/// memory: kernels::mha_flash_supported); then naive, whose memory is O(T^2).
enum class AttentionKernel { automatic, flash, naive };

/// The inputs of self_attention besides qkv.
template <class T, class B = cpu>
struct AttentionArgs {
  std::size_t heads = 1;
  Tensor<T, AnyShape, B> key_mask = {};   // (B, T): != 0 a real token, 0 padding (gets no weight); empty: none
  Tensor<T, AnyShape, B> attn_mask = {};  // (T, T): added to the scores, may hold -inf; empty: none
  // Sparse pattern (AttentionPattern), applied with the masks above, never as a T x T tensor:
  std::optional<std::int64_t> window = {};  // >= 1: query i sees keys j with |i - j| <= window; empty: every key
  bool causal = false;                      // query i sees keys j <= i (with window: j in [i - window, i])
  std::size_t global_tokens = 0;            // positions 0..global_tokens-1 see, and are seen by, every position
  Tensor<T, AnyShape, B> global_mask = {};  // (B, T): != 0 marks a global token at a chosen position (as
                                            // Longformer's global_attention_mask); empty: none
  double dropout = 0;                // probability of dropping each attention weight; pass 0 outside training
  AttentionKernel kernel = AttentionKernel::automatic;
  // CPU flash kernel: query rows after each sample's last real key are not computed; their output is
  // zero and passes no gradient (for callers that drop those rows, as nn::PaddedRows::zero).
  bool skip_padded_queries = false;
  Tensor<T, AnyShape, B>* weights = nullptr;  // if set, receives the softmax weights (B, H, T, T) (naive kernel)
  AttentionStats* stats = nullptr;
};

namespace detail {
template <class S>
struct attention_out_shape {
  static constexpr std::size_t w = shapes::back<S, 0>;
  static_assert(S::rank == 3, "self_attention: qkv must be (batch, time, 3*D)");
  static_assert(w == dyn || w % 3 == 0, "self_attention: the last extent of qkv must be 3*D");
  using type = shapes::replace_back_t<S, w == dyn ? dyn : w / 3>;
};
template <>
struct attention_out_shape<AnyShape> { using type = AnyShape; };
}  // namespace detail

/// Multi-head self-attention: qkv (B, T, 3*D) holds Q, K, V (each D = heads * head_dim wide, head h
/// at columns h*head_dim..); returns softmax(Q K^T / sqrt(head_dim) + attn_mask, padded keys
/// excluded) V per head, heads merged: (B, T, D). window, causal, global_tokens and global_mask hide
/// further scores as AttentionPattern::visible says; the flash kernel then skips the hidden tiles
/// (work and memory O(T w) plus O(T g) for g global tokens; a chosen global position costs the
/// tiles of 128 positions around it). A query row with no visible key gives zero
/// weights and a zero output. Queries at padded positions are computed like any other, unless
/// skip_padded_queries asks the flash kernel to leave those after the last real key at zero.
template <Context C, class T, class S, class B>
auto self_attention(C& ctx, const Var<T, S, B>& qkv, const AttentionArgs<T, B>& a) {
  using SO = typename detail::attention_out_shape<S>::type;
  const Dims& d = qkv.dims();
  if (d.n != 3 || d.v[2] % 3 != 0 || a.heads == 0 || (d.v[2] / 3) % a.heads != 0)
    throw ShapeError("self_attention: qkv " + d.str() + " must be (batch, time, 3*D) with D divisible by heads = " +
                     std::to_string(a.heads));
  const std::size_t nb = d.v[0], n = d.v[1], D = d.v[2] / 3;
  if (!a.key_mask.empty() && !(a.key_mask.dims() == Dims{nb, n}))
    shape_mismatch("self_attention", "key_mask must be (batch, time)", a.key_mask.dims(), Dims{nb, n});
  if (!a.attn_mask.empty() && !(a.attn_mask.dims() == Dims{n, n}))
    shape_mismatch("self_attention", "attn_mask must be (time, time)", a.attn_mask.dims(), Dims{n, n});
  if (a.window && *a.window < 1)
    throw ArgumentError("self_attention: window must be >= 1 (keys within window positions on each side of a query), got " +
                        std::to_string(*a.window));
  if (!a.global_mask.empty() && !(a.global_mask.dims() == Dims{nb, n}))
    shape_mismatch("self_attention", "global_mask must be (batch, time)", a.global_mask.dims(), Dims{nb, n});
  if (a.global_tokens > n)
    throw ArgumentError("self_attention: global_tokens = " + std::to_string(a.global_tokens) + " exceeds the sequence length " +
                        std::to_string(n));
  if (!(a.dropout >= 0 && a.dropout < 1)) throw ArgumentError("self_attention: dropout must be in [0, 1), got " + std::to_string(a.dropout));
  if (a.kernel == AttentionKernel::flash && a.weights)
    throw ArgumentError("self_attention: the flash kernel does not form the weights; use the naive kernel");

  kernels::MhaProblem<T> p;
  p.batch = nb;
  p.time = n;
  p.heads = a.heads;
  p.head_dim = D / a.heads;
  // automatic: flash, unless the weights are asked for or the backend cannot run flash at this
  // head width (a CUDA device with too little shared memory per block).
  const bool flash_runs = nb == 0 || n == 0 || kernels::mha_flash_supported(B{}, p);
  if (a.kernel == AttentionKernel::flash && !flash_runs)
    throw ArgumentError("self_attention: this device cannot run the flash kernel at head_dim " + std::to_string(p.head_dim) +
                        " (too little shared memory per block); use AttentionKernel::naive or automatic");
  const bool naive = a.kernel == AttentionKernel::naive || a.weights || !flash_runs;
  p.qkv = qkv.raw().data();
  p.key_mask = a.key_mask.empty() ? nullptr : a.key_mask.data();
  p.attn_mask = a.attn_mask.empty() ? nullptr : a.attn_mask.data();
  p.global_mask = a.global_mask.empty() ? nullptr : a.global_mask.data();
  p.scale = T(1.0 / std::sqrt(double(p.head_dim)));
  p.dropout = a.dropout;
  p.seed = a.dropout > 0 ? ctx.rng().next() : 0;
  p.skip_padded_queries = a.skip_padded_queries;
  p.pattern = AttentionPattern::of(a.window, a.causal, a.global_tokens);
  // Under Precision::bf16 the CPU flash kernels multiply bfloat16 tiles (float sums); the backward
  // keeps the forward's choice. The naive kernel, double and CUDA stay in T.
  if constexpr (std::is_same_v<T, float> && std::is_same_v<B, cpu>) p.bf16 = !naive && precision() == Precision::bf16;

  Tape* tape = detail::tape_of(ctx);
  const bool rg = detail::needs_grad(tape, qkv);
  // On the CPU, a dense flash problem whose scores take no more memory than qkv itself (H T <= 3 D,
  // short sequences) keeps them for backward, which then skips one tile product in five.
  Tensor<T, AnyShape, B> out(Dims{nb, n, D}), saved, scores;
  if constexpr (std::is_same_v<B, cpu>)
    if (rg && !naive && !p.pattern.active() && p.pattern.global == 0 && a.global_mask.empty() && a.heads * n <= 3 * D) {
      scores = Tensor<T, AnyShape, B>(Dims{nb, a.heads, n, n});
      p.scores = scores.data();
    }
  if (a.stats) a.stats->note(out.numel() * sizeof(T));
  if (naive) {
    saved = Tensor<T, AnyShape, B>(Dims{nb, a.heads, n, n});
    kernels::mha_naive_forward(B{}, p, out.data(), saved.data(), a.stats);
    if (a.weights) *a.weights = p.dropout > 0 ? detail::dropped_weights(saved, p) : saved;
  } else {
    saved = Tensor<T, AnyShape, B>(Dims{nb, a.heads, n});
    kernels::mha_flash_forward(B{}, p, out.data(), saved.data(), a.stats);
  }
  if (a.stats) {
    // A checkpoint's tracing run keeps nothing: its recomputation counts what backward keeps.
    if (!(tape && tape->tracing())) a.stats->saved_bytes += (saved.numel() + scores.numel()) * sizeof(T);
    a.stats->note((saved.numel() + scores.numel()) * sizeof(T));
  }

  auto o = detail::make_out<SO>(tape, std::move(out), rg);
  if (rg) {
    tape->push(o.data(), {qkv.data().get()}, [qd = qkv.data(), od = o.data(), p, naive, saved, scores, km = a.key_mask, am = a.attn_mask, gm = a.global_mask, stats = a.stats] {
      if (od->grad.empty() || !qd->requires_grad) return;
      auto q = p;  // the pointers of the problem, re-read from the captured tensors
      q.qkv = qd->value.data();
      q.key_mask = km.empty() ? nullptr : km.data();
      q.attn_mask = am.empty() ? nullptr : am.data();
      q.global_mask = gm.empty() ? nullptr : gm.data();
      q.scores = scores.empty() ? nullptr : const_cast<T*>(scores.data());
      if (naive) {
        kernels::mha_naive_backward(B{}, q, saved.data(), od->grad.data(), qd->grad_ref().data(), stats);
      } else if constexpr (std::is_same_v<B, cpu>) {
        // A first gradient is written, not added: the kernel clears each (b, h) slice as it starts
        // on it, instead of a pass over the whole buffer beforehand.
        T* g = qd->grad_to_write(q.clear_grad).data();
        kernels::mha_flash_backward(B{}, q, od->value.data(), od->grad.data(), saved.data(), g, stats);
      } else {
        kernels::mha_flash_backward(B{}, q, od->value.data(), od->grad.data(), saved.data(), qd->grad_ref().data(), stats);
      }
    });
  }
  return o;
}

}  // namespace attn
