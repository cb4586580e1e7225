// SPDX-License-Identifier: MIT
// Rotary position embeddings (RoFormer, Su et al. 2021; "RoPE") on Vars: each head's query and key
// vectors turn in feature pairs by angles proportional to the position, so that their dot product
// depends on the distance of the two positions alone. The loops are kernels::rotary
// (backend/cpu/rotary.hpp, backend/cuda/rotary.cuh); the backward turns the gradient back (Rᵀ).
//   auto qkv2 = attn::rotary(ctx, qkv, {.head_dim = 32, .columns = 2 * 256});   // Q and K of a fused (B, T, 3 * 256)
//   auto q2 = attn::rotary(ctx, q, {.head_dim = 64, .offset = past});            // positions past, past + 1, ...
#pragma once
#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "elementwise.hpp"

namespace attn {

/// attn::rotary's arguments. The angle of feature pair i at position p is p * base^(-2 i / dim)
/// (Hugging Face's inv_freq).
struct RotaryArgs {
  std::size_t head_dim = 0;   // the width of one head's vector (required)
  std::size_t columns = 0;    // the first `columns` columns are rotated, in groups of head_dim; 0: all of them
  std::size_t dim = 0;        // the features of each group that turn (even, <= head_dim; GPT-NeoX's rotary_dim); 0: head_dim
  std::size_t offset = 0;     // the position of time step 0 (an incremental decoder's past length)
  double base = 10000;
  bool interleaved = false;   // pairs (2i, 2i + 1) (RoFormer, GPT-J); false: (i, i + dim / 2) (GPT-NeoX, Llama in Hugging Face)
};

namespace detail {
/// The features of each head that turn (dim, or head_dim where dim is 0) after checking them and the
/// base; who names the caller in the error.
inline std::size_t rotary_dim(std::size_t head_dim, std::size_t dim, double base, const std::string& who) {
  const std::size_t rd = dim ? dim : head_dim;
  if (rd == 0 || rd % 2 != 0 || rd > head_dim)
    throw ArgumentError(who + ": rotary dim " + std::to_string(rd) + " must be even, positive and at most the head width " + std::to_string(head_dim));
  if (!(base > 0) || !std::isfinite(base)) throw ArgumentError(who + ": rotary base must be positive and finite, got " + std::to_string(base));
  return rd;
}

/// The (time, dim / 2) tables of cos and sin of positions offset .. offset + time - 1, in double
/// before rounding to T.
template <class T, class B>
std::pair<Tensor<T, AnyShape, B>, Tensor<T, AnyShape, B>> rotary_tables(std::size_t time, std::size_t dim, std::size_t offset, double base) {
  const std::size_t half = dim / 2;
  std::vector<T> c(time * half), s(time * half);
  for (std::size_t i = 0; i < half; ++i) {
    const double inv_freq = std::pow(base, -double(2 * i) / double(dim));
    for (std::size_t t = 0; t < time; ++t) {
      const double a = double(offset + t) * inv_freq;
      c[t * half + i] = T(std::cos(a)), s[t * half + i] = T(std::sin(a));
    }
  }
  return {Tensor<T, AnyShape, B>::from(Dims{time, half}, std::span<const T>(c)), Tensor<T, AnyShape, B>::from(Dims{time, half}, std::span<const T>(s))};
}
}  // namespace detail

/// x (B, T, W) with each of the first a.columns columns' head_dim-wide groups turned by its
/// position's angles -> (B, T, W). Differentiable in x.
template <Context C, class T, class S, class B>
Var<T, S, B> rotary(C& ctx, const Var<T, S, B>& x, const RotaryArgs& a) {
  const Dims& d = x.dims();
  if (d.n != 3) throw ShapeError("rotary: x must be (batch, time, width), got " + d.str());
  const std::size_t w = d.v[2], cols = a.columns ? a.columns : w;
  if (a.head_dim == 0 || cols > w || cols % a.head_dim != 0)
    throw ArgumentError("rotary: columns " + std::to_string(cols) + " must be a multiple of head_dim " + std::to_string(a.head_dim) +
                        " no wider than x's " + std::to_string(w));
  const std::size_t dim = detail::rotary_dim(a.head_dim, a.dim, a.base, "rotary");
  const kernels::RotaryProblem p{.rows = d.v[0] * d.v[1], .time = d.v[1], .width = w, .columns = cols, .head_dim = a.head_dim, .dim = dim,
                                 .interleaved = a.interleaved};
  const auto tables = detail::rotary_tables<T, B>(d.v[1], dim, a.offset, a.base);
  Tensor<T, AnyShape, B> out(d);
  kernels::rotary(B{}, p, tables.first.data(), tables.second.data(), x.raw().data(), out.data(), false, false);
  Tape* tape = detail::tape_of(ctx);
  const bool rg = detail::needs_grad(tape, x);
  auto o = detail::make_out<S>(tape, std::move(out), rg);
  if (rg) {
    tape->push(o.data(), {x.data().get()}, [xd = x.data(), od = o.data(), p, tables] {
      if (od->grad.empty() || !xd->requires_grad) return;
      kernels::rotary(B{}, p, tables.first.data(), tables.second.data(), od->grad.data(), xd->grad_ref().data(), true, true);
    });
  }
  return o;
}

}  // namespace attn
