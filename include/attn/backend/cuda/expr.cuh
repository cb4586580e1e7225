// SPDX-License-Identifier: MIT
// Device evaluation of attn's lazy element-wise expressions (core/expr.hpp) for attn::cuda: one
// kernel writes a strided destination from a bound expression, with broadcasting.
//   attn::cuda_detail::assign(dev, out, dims, strides, e.bind(dims));   // what `cuda_tensor = a * b + 1.f` runs
#pragma once
#include <cstddef>
#include <type_traits>

#include "../../core/shape.hpp"
#include "runtime.cuh"

namespace attn::cuda_detail {

/// The destination of an assignment: extents and strides (elements), rank <= max_rank. Copied to
/// the kernel by value.
struct AssignGeometry {
  std::size_t dims[max_rank];
  std::size_t strides[max_rank];
  std::size_t rank;
  std::size_t numel;
};

// out (dims, strides) = e, one element per step of a grid-stride loop. Each element's index is
// decoded from its row-major position, its row evaluator fetched for the leading axes (as the
// host loop does per row) and read at the last axis. An element reads only the sources' elements
// at its own position (broadcast axes read one element), so out may alias a source read at the
// same position, as in `g = g + x`.
// (nvcc's 64-bit division takes a 32-bit fast path when both operands fit, as they do here
// for any tensor under 4G elements.)
template <class T, class Bound>
__global__ void assign_kernel(T* out, AssignGeometry g, Bound e) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const int r = static_cast<int>(g.rank);
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < g.numel; i += stride) {
    std::size_t idx[max_rank] = {};
    std::size_t rem = i, off = 0;
    for (int a = r - 1; a >= 0; --a) {
      const std::size_t q = rem / g.dims[a];
      idx[a] = rem - q * g.dims[a];
      rem = q;
      off += idx[a] * g.strides[a];
    }
    out[off] = e.row(idx)[r ? idx[r - 1] : 0];
  }
}

/// Enqueues assign_kernel on dev's stream.
template <class T, class Bound>
void assign(const DeviceState& dev, T* out, const Dims& dims, const Dims& strides, const Bound& e) {
  static_assert(std::is_trivially_copyable_v<Bound>,
                "attn::cuda: an element-wise expression is copied to the device, so its functors must be trivially copyable");
  AssignGeometry g{};
  g.rank = dims.n;
  g.numel = dims.numel();
  for (std::size_t a = 0; a < dims.n; ++a) {
    g.dims[a] = dims.v[a];
    g.strides[a] = strides.v[a];
  }
  if (g.numel == 0) return;
  assign_kernel<T, Bound><<<grid_blocks(g.numel, dev), block_threads, 0, dev.stream>>>(out, g, e);
  check_launch("cuda: element-wise expression (assign_kernel) launch");
}

}  // namespace attn::cuda_detail
