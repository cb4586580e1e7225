// SPDX-License-Identifier: MIT
// Rotary position embeddings (RoFormer's RoPE) as both backends' kernels apply them
// (backend/cpu/rotary.hpp, backend/cuda/rotary.cuh): the problem's layout and the value of one
// output element. The op is attn::rotary (autograd/rotary.hpp).
//   attn::kernels::RotaryProblem p{.rows = b * t, .time = t, .width = w, .columns = 2 * d, .head_dim = hd, .dim = hd};
#pragma once
#include <cstddef>

#include "../core/host_device.hpp"

namespace attn::kernels {

/// x is (rows, width) row-major, rows = batch * time; row r is at table row r % time. The first
/// `columns` columns are groups of head_dim (one head's vector each); in each group the first
/// `dim` features (even) turn in pairs, feature pair i by the angle of table column i: pairs (i,
/// i + dim / 2) (GPT-NeoX's and Hugging Face Llama's rotate_half), or (2 i, 2 i + 1) when
/// interleaved (RoFormer's, GPT-J's). Every other column passes through.
struct RotaryProblem {
  std::size_t rows = 0, time = 0, width = 0, columns = 0, head_dim = 0, dim = 0;
  bool interleaved = false;
};

/// Output element (r, c) of y = R x (inverse: Rᵀ x, the backward), from the (time, dim / 2)
/// tables of cos and sin of the angles.
template <class T>
ATTN_HD T rotary_element(const RotaryProblem& p, const T* cos, const T* sin, const T* x, std::size_t r, std::size_t c, bool inverse) {
  const T v = x[r * p.width + c];
  if (c >= p.columns) return v;
  const std::size_t j = c % p.head_dim;
  if (j >= p.dim) return v;
  const std::size_t half = p.dim / 2, group = c - j;
  std::size_t i = 0, partner = 0;
  bool first = true;
  if (p.interleaved) {
    i = j / 2, partner = group + (j ^ 1), first = (j & 1) == 0;
  } else {
    first = j < half, i = first ? j : j - half, partner = group + (first ? j + half : j - half);
  }
  const std::size_t at = (r % p.time) * half + i;
  const T cs = cos[at], sn = inverse ? -sin[at] : sin[at];
  const T u = x[r * p.width + partner];
  // (a, b) -> (a cos - b sin, b cos + a sin); the second of a pair sees its partner as a.
  return first ? v * cs - u * sn : v * cs + u * sn;
}

}  // namespace attn::kernels
