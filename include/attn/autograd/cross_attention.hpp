// SPDX-License-Identifier: MIT
// Multi-head scaled dot-product cross-attention: queries from one sequence (B, Tq, D), keys and
// values from another (B, Tk, D), as torch's scaled_dot_product_attention on split heads. Built
// from autograd ops (batched products, masked softmax, dropout) on any backend; the tape keeps
// several (B, H, Tq, Tk) tensors until backward (the scores, the masked scores, the weights, with
// dropout its mask and the dropped weights), so its memory is O(Tq Tk), a few times the naive
// self-attention kernel's.
//   auto o = attn::cross_attention(ctx, q, k, v, {.heads = 8, .key_mask = memory_mask});
#pragma once
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "dropout.hpp"
#include "elementwise.hpp"
#include "matmul.hpp"
#include "shape_ops.hpp"
#include "softmax.hpp"
#include "var.hpp"

namespace attn {

/// The inputs of cross_attention besides q, k and v.
template <class T, class B = cpu>
struct CrossAttentionArgs {
  std::size_t heads = 1;
  Tensor<T, AnyShape, B> key_mask = {};   // (B, Tk): != 0 a real key, 0 padding (gets no weight); empty: none
  // Added to the scores, may hold -inf: (Tq, Tk) for every sample and head, or (B * heads, Tq, Tk)
  // per sample and head (torch's 3-D attn_mask, sample b's head h at b * heads + h); empty: none
  Tensor<T, AnyShape, B> attn_mask = {};
  double dropout = 0;                         // probability of dropping each weight; pass 0 outside training
  Tensor<T, AnyShape, B>* weights = nullptr;  // if set, receives the weights (B, heads, Tq, Tk) after dropout
};

/// Multi-head cross-attention: q (B, Tq, D), k and v (B, Tk, D), D = heads * head_dim, head h at
/// columns h*head_dim..; returns softmax(Q K^T / sqrt(head_dim) + attn_mask, padded keys excluded)
/// V per head, heads merged: (B, Tq, D), q's shape. A query row with no visible key gets zero
/// weights and a zero output (never NaN), as in self_attention. With dropout the weights are
/// dropped from the context's random stream. The weights handed out are those backward reads:
/// treat them as read-only.
template <Context C, class T, class SQ, class SK, class SV, class B>
Var<T, SQ, B> cross_attention(C& ctx, const Var<T, SQ, B>& q, const Var<T, SK, B>& k, const Var<T, SV, B>& v,
                              const CrossAttentionArgs<T, B>& a) {
  if constexpr (!std::is_same_v<SQ, AnyShape>) static_assert(SQ::rank == 3, "cross_attention: q must be (batch, Tq, D)");
  const Dims &dq = q.dims(), &dk = k.dims(), &dv = v.dims();
  if (dq.n != 3 || a.heads == 0 || dq.v[2] % a.heads != 0)
    throw ShapeError("cross_attention: q " + dq.str() + " must be (batch, Tq, D) with D divisible by heads = " + std::to_string(a.heads));
  const std::size_t nb = dq.v[0], tq = dq.v[1], D = dq.v[2], H = a.heads, hd = D / H;
  if (dk.n != 3 || dk.v[0] != nb || dk.v[2] != D)
    throw ShapeError("cross_attention: k " + dk.str() + " must be (batch, Tk, D) with q's batch " + std::to_string(nb) + " and D " +
                     std::to_string(D));
  const std::size_t tk = dk.v[1];
  if (!(dv == dk)) shape_mismatch("cross_attention", "v must have k's shape", dv, dk);
  if (nb == 0 || tq == 0 || tk == 0) throw ShapeError("cross_attention: empty batch, queries or keys: q " + dq.str() + ", k " + dk.str());
  if (!a.key_mask.empty() && !(a.key_mask.dims() == Dims{nb, tk}))
    shape_mismatch("cross_attention", "key_mask must be (batch, Tk)", a.key_mask.dims(), Dims{nb, tk});
  const bool per_head = !a.attn_mask.empty() && a.attn_mask.rank() == 3;
  if (!a.attn_mask.empty() && !(a.attn_mask.dims() == Dims{tq, tk}) && !(a.attn_mask.dims() == Dims{nb * H, tq, tk}))
    shape_mismatch("cross_attention", "attn_mask must be (Tq, Tk) or (batch * heads, Tq, Tk)", a.attn_mask.dims(),
                   a.attn_mask.rank() == 3 ? Dims{nb * H, tq, tk} : Dims{tq, tk});
  if (!(a.dropout >= 0 && a.dropout < 1)) throw ArgumentError("cross_attention: dropout must be in [0, 1), got " + std::to_string(a.dropout));

  // (B, T, D) -> (B, H, T, head_dim); the scale goes on q, before the copies, as torch's
  // multi_head_attention_forward scales q before its product.
  auto heads_of = [&](const auto& x, std::size_t t) { return permute(ctx, reshape(ctx, x, Dims{nb, t, H, hd}), {0, 2, 1, 3}); };
  auto qh = heads_of(scale(ctx, q, T(1) / std::sqrt(T(hd))), tq);
  auto kh = heads_of(k, tk);
  auto vh = heads_of(v, tk);
  Var<T, AnyShape, B> s = matmul_nt(ctx, qh, kh);  // (B, H, Tq, Tk)
  if (!a.attn_mask.empty())
    s = add(ctx, s, Var<T, AnyShape, B>(per_head ? a.attn_mask.reshape(Dims{nb, H, tq, tk}) : a.attn_mask.reshape(Dims{1, 1, tq, tk}), false));
  if (!a.key_mask.empty()) {
    std::vector<T> keep(nb * tk), pad(nb * tk);
    a.key_mask.copy_to_host(std::span<T>(keep));
    for (std::size_t i = 0; i < keep.size(); ++i) pad[i] = keep[i] == T(0) ? T(1) : T(0);
    s = masked_fill(ctx, s, Tensor<T, AnyShape, B>::from(Dims{nb, 1, 1, tk}, std::span<const T>(pad)),
                    -std::numeric_limits<T>::infinity());
  }
  auto w = softmax(ctx, s);  // a row of -inf only gives zeros
  if (a.dropout > 0) w = dropout(ctx, w, a.dropout, true);
  if (a.weights) *a.weights = w.raw();
  auto o = matmul(ctx, w, vh);  // (B, H, Tq, head_dim)
  return reshape<SQ>(ctx, permute(ctx, o, {0, 2, 1, 3}), Dims{nb, tq, D});
}

}  // namespace attn
