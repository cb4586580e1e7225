// SPDX-License-Identifier: MIT
// nn::Attention<Heads, Dim>: multi-head self-attention, torch.nn.MultiheadAttention(batch_first=True)
// with q = k = v = x and PyTorch's parameter names. One fused QKV GEMM, the flash kernel unless the
// weights are asked for, heads merged, output projection.
//   attn::nn::Attention<8, 128> attention{this, "attn", {.dropout = 0.1}};   auto y = attention(ctx, x, mask);
#pragma once
#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "../autograd/attention.hpp"
#include "../autograd/elementwise.hpp"
#include "init.hpp"
#include "linear.hpp"
#include "module.hpp"

namespace attn::nn {

/// The head count the library suggests for a model width: max(4, hidden / 64).
constexpr std::size_t recommended_heads(std::size_t hidden) { return std::max<std::size_t>(4, hidden / 64); }

/// What the layer returns at padded positions (mask 0).
enum class PaddedRows {
  compute,  // every row is computed, padded queries attending to the real keys: torch.nn.MultiheadAttention's output
  zero,     // padded rows are skipped in both projections and come out as zero (PyTorch's nested-tensor fast
            // path); the rows of real tokens are the same. For models that read only real tokens (masked pooling).
};

struct AttentionOptions {
  double dropout = 0;                        // dropout on the attention weights, in training mode only
  bool bias = true;                          // in_proj_bias and out_proj.bias
  PaddedRows padded = PaddedRows::compute;  // see PaddedRows
};

/// Optional inputs of one forward call.
template <class T, class B = cpu>
struct AttentionExtras {
  Tensor<T, AnyShape, B> attn_mask = {};  // (T, T), added to the scores; may hold -inf (e.g. causal); empty: none
  AttentionKernel kernel = AttentionKernel::automatic;
  AttentionStats* stats = nullptr;   // filled with the attention op's allocations (must outlive backward)
};

/// forward_with_weights' result: the output and the per-head softmax weights (B, Heads, T, T),
/// before attention dropout. The weights are saved for backward: treat them as read-only.
template <class T, class S, std::size_t Heads, class B>
struct AttentionOutput {
  Var<T, S, B> out;
  Tensor<T, Shape<dyn, Heads, dyn, dyn>, B> weights;
};

namespace detail {

/// C (m, n) = A (m, k) op(Bm) + beta C, the rows of A and C split over the threads, one serial GEMM
/// each: no synchronisation inside a GEMM, which a loaded machine punishes.
template <class B, class T>
void gemm_rows(Trans tb, std::size_t m, std::size_t n, std::size_t k, const T* A, const T* Bm, int ldb, T beta, T* C) {
  const int nt = std::is_same_v<B, cpu> && double(m) * n * k > 1e6 ? int(std::min<std::size_t>(cpu::threads(), m / 16)) : 1;
  if (nt <= 1) {
    B::template gemm<T>(Trans::no, tb, int(m), int(n), int(k), T(1), A, int(k), Bm, ldb, beta, C, int(n));
    return;
  }
#if defined(_OPENMP)
#pragma omp parallel for num_threads(nt) schedule(static)
#endif
  for (int c = 0; c < nt; ++c) {
    const std::size_t r0 = m * c / nt, r1 = m * (c + 1) / nt;
    cpu::gemm<T>(Trans::no, tb, int(r1 - r0), int(n), int(k), T(1), A + r0 * k, int(k), Bm, ldb, beta, C + r0 * n, int(n));
  }
}

/// C (m, n) += A^T Bm with A (k, m), Bm (k, n) (a weight gradient: k = batch rows), the k rows split
/// over the threads, each summing into its own (m, n) buffer; thread 0 adds into C directly.
template <class B, class T>
void gemm_tn_accumulate(std::size_t m, std::size_t n, std::size_t k, const T* A, const T* Bm, T* C) {
  const int nt = std::is_same_v<B, cpu> && double(m) * n * k > 1e6 ? int(std::min<std::size_t>(cpu::threads(), k / 64)) : 1;
  if (nt <= 1) {
    B::template gemm<T>(Trans::yes, Trans::no, int(m), int(n), int(k), T(1), A, int(m), Bm, int(n), T(1), C, int(n));
    return;
  }
  Tensor<T, AnyShape, cpu> part(Dims{std::size_t(nt - 1) * m * n});  // from the host pool
#if defined(_OPENMP)
#pragma omp parallel for num_threads(nt) schedule(static)
#endif
  for (int c = 0; c < nt; ++c) {
    const std::size_t r0 = k * c / nt, r1 = k * (c + 1) / nt;
    T* dst = c == 0 ? C : part.data() + std::size_t(c - 1) * m * n;
    cpu::gemm<T>(Trans::yes, Trans::no, int(m), int(n), int(r1 - r0), T(1), A + r0 * m, int(m), Bm + r0 * n, int(n),
                 c == 0 ? T(1) : T(0), dst, int(n));
  }
  for (int c = 1; c < nt; ++c) {
    const T* src = part.data() + std::size_t(c - 1) * m * n;
    for (std::size_t i = 0; i < m * n; ++i) C[i] += src[i];
  }
}

/// The real-token rows of a (B, T) mask (nonzero entries) as flat row indices b*T + t, in order.
/// Returns false, and leaves rows untouched, when every row is real. *prefix tells whether each
/// sample's real tokens come first (a lengths mask: padding only at the end).
template <class T, class SM>
bool real_rows(const Tensor<T, SM, cpu>& mask, Tensor<std::int64_t, AnyShape, cpu>& rows, bool* prefix = nullptr) {
  const std::size_t n = mask.numel(), t = mask.rank() == 2 ? mask.dims().v[1] : n;
  const T* m = mask.data();
  std::size_t count = 0;
  bool pre = true;
  for (std::size_t i = 0; i < n; ++i) {
    count += m[i] != T(0);
    pre = pre && (i % t == 0 || m[i] == T(0) || m[i - 1] != T(0));
  }
  if (prefix) *prefix = pre;
  if (count == n) return false;
  rows = Tensor<std::int64_t, AnyShape, cpu>(Dims{count});
  std::int64_t* r = rows.data();
  for (std::size_t i = 0, k = 0; i < n; ++i)
    if (m[i] != T(0)) r[k++] = static_cast<std::int64_t>(i);
  return true;
}

/// y = x W^T + b as one op: x (..., In), W (Out, In), b (Out) or none -> (..., Out). The bias is the
/// GEMM's initial C; backward: dx += dy W, dW += dy^T x, db += column sums of dy.
/// With a row map (ascending flat indices into x's rows), only those rows are computed, gathered into one
/// packed GEMM; every other row of y is zero (left unwritten when !fill_rest: for a reader that never
/// reads them) and passes no gradient.
template <class SO, class T, class S, class SW, class SB, class B>
Var<T, SO, B> affine_nt(Tape* tape, const Var<T, S, B>& x, const Var<T, SW, B>& w, const Var<T, SB, B>& bias,
                        const Tensor<std::int64_t, AnyShape, cpu>* row_map = nullptr, bool fill_rest = true) {
  static_assert(B::host_accessible, "nn::Attention: the fused projection runs on host-accessible backends");
  using Ten = Tensor<T, AnyShape, B>;
  const std::size_t in = w.size(1), out_w = w.size(0), all_rows = x.numel() / in;
  const Tensor<std::int64_t, AnyShape, cpu> map = row_map ? *row_map : Tensor<std::int64_t, AnyShape, cpu>{};
  const std::int64_t* idx = row_map ? map.data() : nullptr;
  const std::size_t rows = row_map ? map.numel() : all_rows;
  Dims od = x.dims();
  od.v[od.n - 1] = out_w;
  Ten y(od);
  if (idx && fill_rest) {  // zero the rows outside the map (the map is ascending)
    std::size_t next = 0;
    for (std::size_t k = 0; k <= rows; ++k) {
      const std::size_t end = k < rows ? static_cast<std::size_t>(idx[k]) : all_rows;
      if (end > next) B::template fill<T>(y.data() + next * out_w, (end - next) * out_w, T(0));
      next = end + 1;
    }
  }
  // The packed rows of x and y (the tensors themselves without a row map).
  Ten xp, yp;
  const T* X = x.raw().data();
  T* Y = y.data();
  if (idx) {
    xp = Ten({rows, in});
    yp = Ten({rows, out_w});
    kernels::copy_rows(B{}, rows, in, X, in, idx, xp.data(), in, nullptr, false);
    X = xp.data();
    Y = yp.data();
  }
  const bool has_bias = bias.defined();
  if (has_bias)
    for (std::size_t r = 0; r < rows; ++r) B::template copy<T>(Y + r * out_w, bias.raw().data(), out_w);
  gemm_rows<B>(Trans::yes, rows, out_w, in, X, w.raw().data(), int(in), has_bias ? T(1) : T(0), Y);
  if (idx) kernels::copy_rows(B{}, rows, out_w, Y, out_w, nullptr, y.data(), out_w, idx, false);
  xp = {};
  yp = {};
  const bool rg = attn::detail::needs_grad(tape, x, w, bias);
  auto o = attn::detail::make_out<SO>(tape, std::move(y), rg);
  if (rg) {
    tape->push(o.data(), {x.data().get(), w.data().get(), has_bias ? bias.data().get() : nullptr},
               [xd = x.data(), wd = w.data(), bd = has_bias ? bias.data() : nullptr, od = o.data(), rows, in, out_w, map] {
      if (od->grad.empty()) return;
      const std::int64_t* idx = map.empty() ? nullptr : map.data();
      const T* g = od->grad.data();
      const T* X = xd->value.data();
      Ten gp, xp, dxp;
      if (idx) {
        gp = Ten({rows, out_w});
        kernels::copy_rows(B{}, rows, out_w, g, out_w, idx, gp.data(), out_w, nullptr, false);
        g = gp.data();
      }
      if (xd->requires_grad) {
        T* dx = xd->grad_ref().data();
        if (idx) {
          dxp = Ten({rows, in});
          gemm_rows<B>(Trans::no, rows, in, out_w, g, wd->value.data(), int(in), T(0), dxp.data());
          kernels::copy_rows(B{}, rows, in, dxp.data(), in, nullptr, dx, in, idx, true);
          dxp = {};
        } else {
          gemm_rows<B>(Trans::no, rows, in, out_w, g, wd->value.data(), int(in), T(1), dx);
        }
      }
      if (wd->requires_grad) {
        if (idx) {
          xp = Ten({rows, in});
          kernels::copy_rows(B{}, rows, in, X, in, idx, xp.data(), in, nullptr, false);
          X = xp.data();
        }
        gemm_tn_accumulate<B>(out_w, in, rows, g, X, wd->grad_ref().data());
      }
      if (bd && bd->requires_grad) {
        T* db = bd->grad_ref().data();
        for (std::size_t r = 0; r < rows; ++r)
          for (std::size_t c = 0; c < out_w; ++c) db[c] += g[r * out_w + c];
      }
    });
  }
  return o;
}

/// torch's MultiheadAttention.out_proj: a Linear whose bias starts at zero.
template <std::size_t Dim, class T, class B>
class MhaOutProj : public Linear<Dim, Dim, T, B> {
 public:
  MhaOutProj(Module* parent, std::string name, bool bias) : Linear<Dim, Dim, T, B>(parent, std::move(name), {.bias = bias}) {
    Rng rng(name_seed(this->name()));
    MhaOutProj::reset_parameters(rng);
  }
  void reset_parameters(Rng& rng) override {
    init::torch_linear_default(this->weight, rng, Dim);
    if (this->bias.defined()) init::constant(this->bias, T(0));
  }
};

}  // namespace detail

template <std::size_t Heads, std::size_t Dim, class T = float, class B = cpu>
class Attention : public Module {
  static_assert(Heads > 0 && Heads != dyn && Dim > 0 && Dim != dyn, "nn::Attention<Heads, Dim>: Heads and Dim must be static, positive");
  static_assert(Dim % Heads == 0, "nn::Attention<Heads, Dim>: Dim must be divisible by Heads (head_dim = Dim / Heads)");

 public:
  static constexpr std::size_t heads = Heads;
  static constexpr std::size_t dim = Dim;
  static constexpr std::size_t head_dim = Dim / Heads;

  Attention(Module* parent, std::string name, AttentionOptions opt = {})
      : Module(parent, std::move(name)), out_proj(this, "out_proj", opt.bias), opt_(opt) {
    if (!(opt.dropout >= 0 && opt.dropout < 1))
      throw ArgumentError("nn::Attention '" + this->name() + "': dropout must be in [0, 1), got " + std::to_string(opt.dropout));
    in_proj_weight = register_parameter<T, Shape<3 * Dim, Dim>, B>("in_proj_weight", {3 * Dim, Dim});
    if (opt.bias) in_proj_bias = register_parameter<T, Shape<3 * Dim>, B>("in_proj_bias", {3 * Dim});
    Rng rng(name_seed(this->name()));
    reset_parameters(rng);
    out_proj.reset_parameters(rng);
  }

  /// PyTorch's scheme: Xavier uniform in_proj_weight (as one (3 Dim, Dim) matrix), zero in_proj_bias.
  /// out_proj (a child) keeps nn.Linear's default weight and a zero bias.
  void reset_parameters(Rng& rng) override {
    init::xavier_uniform(in_proj_weight, rng);
    if (in_proj_bias.defined()) init::constant(in_proj_bias, T(0));
  }

  /// x (B, T, Dim), mask (B, T) with 1 for a real token and 0 for padding -> (B, T, Dim).
  template <Context C, class S, class SM>
  Var<T, S, B> operator()(C& ctx, const Var<T, S, B>& x, const Tensor<T, SM, B>& mask, AttentionExtras<T, B> extras = {}) const {
    return forward(ctx, x, mask, extras, nullptr);
  }

  /// The same, also returning the softmax weights (B, Heads, T, T) (runs the naive kernel). Under
  /// PaddedRows::zero the rows of padded queries hold uniform weights over the real keys.
  template <Context C, class S, class SM>
  AttentionOutput<T, S, Heads, B> forward_with_weights(C& ctx, const Var<T, S, B>& x, const Tensor<T, SM, B>& mask,
                                                       AttentionExtras<T, B> extras = {}) const {
    if (extras.kernel == AttentionKernel::flash)
      throw ArgumentError("nn::Attention::forward_with_weights: the flash kernel does not form the weights");
    Tensor<T, AnyShape, B> w;
    auto out = forward(ctx, x, mask, extras, &w);
    return {out, Tensor<T, Shape<dyn, Heads, dyn, dyn>, B>(w)};
  }

  Var<T, Shape<3 * Dim, Dim>, B> in_proj_weight;
  Var<T, Shape<3 * Dim>, B> in_proj_bias;  // undefined when !bias
  detail::MhaOutProj<Dim, T, B> out_proj;

 private:
  AttentionOptions opt_;

  template <Context C, class S, class SM>
  Var<T, S, B> forward(C& ctx, const Var<T, S, B>& x, const Tensor<T, SM, B>& mask, const AttentionExtras<T, B>& extras,
                       Tensor<T, AnyShape, B>* weights) const {
    if constexpr (!std::is_same_v<S, AnyShape>) {
      static_assert(S::rank == 3, "nn::Attention: the input must be (batch, time, Dim)");
      static_assert(shapes::may_equal(shapes::back<S, 0>, Dim), "nn::Attention: the input's last extent differs from Dim");
    }
    const Dims& d = x.dims();
    if (d.n != 3 || d.v[2] != Dim)
      throw ShapeError("nn::Attention<" + std::to_string(Heads) + ", " + std::to_string(Dim) + ">: input shape " + d.str() +
                       " is not (batch, time, " + std::to_string(Dim) + ")");
    if (!(mask.dims() == Dims{d.v[0], d.v[1]}))
      shape_mismatch("nn::Attention", "mask must be (batch, time) of the input", mask.dims(), Dims{d.v[0], d.v[1]});
    if (!extras.attn_mask.empty() && !(extras.attn_mask.dims() == Dims{d.v[1], d.v[1]}))
      shape_mismatch("nn::Attention", "attn_mask must be (time, time)", extras.attn_mask.dims(), Dims{d.v[1], d.v[1]});
    Tape* tape = attn::detail::tape_of(ctx);
    // PaddedRows::zero: the projections run on the real rows only. A padded row's Q, K and V are
    // zero (or never read, below); its key is masked and its query's output is dropped by the
    // output projection.
    Tensor<std::int64_t, AnyShape, cpu> rows;
    bool prefix = false;
    const bool packed = opt_.padded == PaddedRows::zero && detail::real_rows(mask, rows, &prefix);
    const Tensor<std::int64_t, AnyShape, cpu>* map = packed ? &rows : nullptr;
    // The flash kernel skipping padded queries never reads the rows after a sample's last real
    // token (which are all its padded rows under a lengths mask): they need not be zeroed.
    const bool flash = !weights && extras.kernel != AttentionKernel::naive;
    // (B, T, Dim) x (3 Dim, Dim)^T -> (B, T, 3 Dim): Q, K, V side by side, each split into heads.
    auto qkv = detail::affine_nt<AnyShape>(tape, x, in_proj_weight, in_proj_bias, map, !(flash && prefix));
    auto o = self_attention(ctx, qkv,
                            AttentionArgs<T, B>{.heads = Heads,
                                                .key_mask = mask.erased(),
                                                .attn_mask = extras.attn_mask,
                                                .dropout = training() ? opt_.dropout : 0.0,
                                                .kernel = extras.kernel,
                                                .skip_padded_queries = packed,
                                                .weights = weights,
                                                .stats = extras.stats});
    return detail::affine_nt<S>(tape, o, out_proj.weight, out_proj.bias, map);
  }
};

}  // namespace attn::nn
