// SPDX-License-Identifier: MIT
// Reductions over host tensors: whole-tensor and along one axis.
//   float total = attn::sum(t);  auto col = attn::sum_axis(t, 0);   // (N, M) -> (M)
#pragma once
#include <algorithm>
#include <limits>

#include "tensor.hpp"

namespace attn {

namespace detail {
template <class T, class S, class B>
void require_host(const Tensor<T, S, B>&) {
  static_assert(B::host_accessible, "attn reductions: use the backend's kernels for device tensors");
}
}  // namespace detail

/// Sum of all elements, accumulated in double for float inputs.
template <class T, class S, class B>
T sum(const Tensor<T, S, B>& t) {
  detail::require_host(t);
  double acc = 0;
  const T* p = t.data();
  for (std::size_t i = 0, n = t.numel(); i < n; ++i) acc += p[i];
  return static_cast<T>(acc);
}
template <class T, class S, class B>
T mean(const Tensor<T, S, B>& t) {
  if (t.numel() == 0) throw ShapeError("mean: empty tensor");
  return static_cast<T>(static_cast<double>(sum(t)) / static_cast<double>(t.numel()));
}
template <class T, class S, class B>
T max(const Tensor<T, S, B>& t) {
  detail::require_host(t);
  if (t.numel() == 0) throw ShapeError("max: empty tensor");
  return *std::max_element(t.data(), t.data() + t.numel());
}
template <class T, class S, class B>
T min(const Tensor<T, S, B>& t) {
  detail::require_host(t);
  if (t.numel() == 0) throw ShapeError("min: empty tensor");
  return *std::min_element(t.data(), t.data() + t.numel());
}
/// Index of the largest element of each row of a (rows, cols) view of t (last axis = cols).
template <class T, class S, class B>
std::vector<std::size_t> argmax_rows(const Tensor<T, S, B>& t) {
  detail::require_host(t);
  const std::size_t cols = t.rank() ? t.dims().back() : 1;
  const std::size_t rows = cols ? t.numel() / cols : 0;
  std::vector<std::size_t> out(rows);
  for (std::size_t r = 0; r < rows; ++r) {
    const T* p = t.data() + r * cols;
    out[r] = static_cast<std::size_t>(std::max_element(p, p + cols) - p);
  }
  return out;
}

/// Sum along `axis`; the result drops that axis.
template <class T, class S, class B>
Tensor<T, AnyShape, B> sum_axis(const Tensor<T, S, B>& t, std::size_t axis) {
  detail::require_host(t);
  const Dims& d = t.dims();
  if (axis >= d.n) throw ShapeError("sum_axis: axis " + std::to_string(axis) + " out of range for shape " + d.str());
  std::size_t outer = 1, inner = 1;
  for (std::size_t i = 0; i < axis; ++i) outer *= d.v[i];
  for (std::size_t i = axis + 1; i < d.n; ++i) inner *= d.v[i];
  const std::size_t n = d.v[axis];
  Dims od;
  for (std::size_t i = 0; i < d.n; ++i)
    if (i != axis) od.push_back(d.v[i]);
  auto out = Tensor<T, AnyShape, B>::zeros(od);
  for (std::size_t o = 0; o < outer; ++o)
    for (std::size_t k = 0; k < n; ++k) {
      const T* src = t.data() + (o * n + k) * inner;
      T* dst = out.data() + o * inner;
      for (std::size_t i = 0; i < inner; ++i) dst[i] += src[i];
    }
  return out;
}

}  // namespace attn
