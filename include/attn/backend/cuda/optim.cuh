// SPDX-License-Identifier: MIT
// The optimizers' kernels for attn::cuda, overloads of cpu/optim_kernels.hpp and of cpu's
// adam_update: Adam's dense update, SparseAdam's update of looked-up rows, SGD, the sum of squares
// and the scaling of gradient-norm clipping, the finiteness check and the moving average's fold and
// swap. Each element gets the CPU loop's formula in the same order of operations (nvcc may contract
// a multiply and an add into one FMA, so results agree to rounding, not bit for bit).
//   const double ss = attn::kernels::sum_squares(attn::cuda{}, g, n);   // waits for the device
#pragma once
#include <algorithm>
#include <cstddef>
#include <vector>

#include "../cpu/optim_kernels.hpp"
#include "../cuda.hpp"
#include "scratch.cuh"
#include "warp.cuh"

namespace attn::cuda_detail {

template <class T>
__global__ void adam_dense_kernel(std::size_t n, T* p, const T* g, T* m, T* v, kernels::vec::AdamStep<T> s) {
  const T decay = s.decoupled ? T(1) - s.lr * s.weight_decay : T(1);
  const T l2 = s.decoupled ? T(0) : s.weight_decay;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const T pi = p[i] * decay;
    const T gi = g[i] + l2 * pi;
    const T mi = m[i] + (gi - m[i]) * s.one_minus_beta1;
    const T vi = v[i] * s.beta2 + s.one_minus_beta2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - s.step_size * mi / (expr::Sqrt{}(vi) / s.bc2_sqrt + s.eps);
  }
}

// One thread per element of the listed rows (rows on the device).
template <class T>
__global__ void sparse_adam_rows_kernel(const std::size_t* rows, std::size_t nr, std::size_t dim, T* p, const T* g, bool g_packed, T* m,
                                        T* v, kernels::vec::SparseAdamStep<T> s) {
  const std::size_t total = nr * dim, stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t e = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const std::size_t r = e / dim;
    const std::size_t j = rows[r] * dim + (e - r * dim);
    const T gi = g[g_packed ? e : j];
    m[j] += (gi - m[j]) * s.one_minus_beta1;
    v[j] += (gi * gi - v[j]) * s.one_minus_beta2;
    p[j] -= s.step_size * (m[j] / (expr::Sqrt{}(v[j]) + s.eps));
  }
}

template <class T>
__global__ void sgd_kernel(std::size_t n, T* p, const T* g, T* buf, kernels::vec::SgdStep<T> s) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    T gi = g[i] + s.weight_decay * p[i];
    if (buf) {
      buf[i] = s.first ? gi : s.momentum * buf[i] + (T(1) - s.dampening) * gi;
      gi = s.nesterov ? gi + s.momentum * buf[i] : buf[i];
    }
    p[i] -= s.lr * gi;
  }
}

// out[0] += sum of squares (double), a block sum per block then one atomic add.
template <class T>
__global__ void sum_squares_kernel(const T* p, std::size_t n, double* out) {
  double s = 0;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    s += double(p[i]) * double(p[i]);
  s = block_sum(s);
  if (threadIdx.x == 0) atomicAdd(out, s);
}

// flag[0] = 1 when an element is NaN or infinite.
template <class T>
__global__ void non_finite_kernel(const T* p, std::size_t n, unsigned* flag) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    if (!::isfinite(double(p[i]))) {
      *flag = 1u;
      return;
    }
}

template <class T>
__global__ void swap_kernel(std::size_t n, T* a, T* b) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const T t = a[i];
    a[i] = b[i];
    b[i] = t;
  }
}

template <class T>
struct ScaleBy {
  T c;
  __device__ T operator()(T a) const { return a * c; }
};
template <class T>
struct Fold {  // d avg + e p
  T d, e;
  __device__ T operator()(T avg, T p) const { return d * avg + e * p; }
};

}  // namespace attn::cuda_detail

namespace attn::kernels {

template <class T>
void adam_update(cuda, std::size_t n, T* p, const T* g, T* m, T* v, const vec::AdamStep<T>& s) {
  using namespace cuda_detail;
  if (n == 0) return;
  const DeviceState& dev = current_device();
  adam_dense_kernel<T><<<grid_blocks(n, dev), block_threads, 0, dev.stream>>>(n, p, g, m, v, s);
  check_launch("cuda optim: adam_dense_kernel launch");
}

/// rows: host memory (the rows a row-sparse gradient recorded); copied to the device here. g as on
/// the CPU (cpu/optim_kernels.hpp).
template <class T>
void sparse_adam_rows(cuda, const std::size_t* rows, std::size_t nr, std::size_t dim, T* p, const T* g, bool g_packed, T* m, T* v,
                      const vec::SparseAdamStep<T>& s) {
  using namespace cuda_detail;
  if (nr == 0 || dim == 0) return;
  const DeviceState& dev = current_device();
  DeviceScratch<std::size_t> d_rows(nr);
  cuda::from_host(d_rows.get(), rows, nr);
  sparse_adam_rows_kernel<T><<<grid_blocks(nr * dim, dev), block_threads, 0, dev.stream>>>(d_rows.get(), nr, dim, p, g, g_packed, m, v, s);
  check_launch("cuda optim: sparse_adam_rows_kernel launch");
}

template <class T>
void sgd_update(cuda, std::size_t n, T* p, const T* g, T* buf, const vec::SgdStep<T>& s) {
  using namespace cuda_detail;
  if (n == 0) return;
  const DeviceState& dev = current_device();
  sgd_kernel<T><<<grid_blocks(n, dev), block_threads, 0, dev.stream>>>(n, p, g, buf, s);
  check_launch("cuda optim: sgd_kernel launch");
}

/// Waits for the device (the sum comes back to the host).
template <class T>
double sum_squares(cuda, const T* p, std::size_t n) {
  const GradSpan<T> span{p, n};
  return sum_squares(cuda{}, &span, 1);
}

/// The sum of squares over several spans (every parameter's gradient) in one accumulator: one wait
/// for the device in all.
template <class T>
double sum_squares(cuda, const GradSpan<T>* spans, std::size_t count) {
  using namespace cuda_detail;
  if (std::none_of(spans, spans + count, [](const GradSpan<T>& s) { return s.n != 0; })) return 0.0;  // no scratch, no wait
  const DeviceState& dev = current_device();
  DeviceScratch<double> out(1, 0.0);
  for (std::size_t k = 0; k < count; ++k) {
    if (spans[k].n == 0) continue;
    sum_squares_kernel<T><<<grid_blocks(spans[k].n, dev), block_threads, 0, dev.stream>>>(spans[k].p, spans[k].n, out.get());
    check_launch("cuda optim: sum_squares_kernel launch");
  }
  return out.read();
}

template <class T>
void scale(cuda, T* p, std::size_t n, T c) {
  if (n == 0) return;
  cuda::map(n, p, cuda_detail::ScaleBy<T>{c}, static_cast<const T*>(p));
}

/// Waits for the device.
template <class T>
bool all_finite(cuda, const T* p, std::size_t n) {
  const GradSpan<T> span{p, n};
  return first_non_finite(cuda{}, &span, 1) == 1;
}

/// The index of the first span holding a NaN or an infinity, count when none does: one flag per
/// span, read back with one wait for the device in all.
template <class T>
std::size_t first_non_finite(cuda, const GradSpan<T>* spans, std::size_t count) {
  using namespace cuda_detail;
  if (std::none_of(spans, spans + count, [](const GradSpan<T>& s) { return s.n != 0; })) return count;  // no scratch, no wait
  const DeviceState& dev = current_device();
  DeviceScratch<unsigned> flags(count, 0u);
  for (std::size_t k = 0; k < count; ++k) {
    if (spans[k].n == 0) continue;
    non_finite_kernel<T><<<grid_blocks(spans[k].n, dev), block_threads, 0, dev.stream>>>(spans[k].p, spans[k].n, flags.get() + k);
    check_launch("cuda optim: non_finite_kernel launch");
  }
  const auto bad = flags.read_all();
  for (std::size_t k = 0; k < count; ++k)
    if (bad[k]) return k;
  return count;
}

template <class T>
void ema_update(cuda, std::size_t n, T* avg, const T* p, T d, T e) {
  if (n == 0) return;
  cuda::map(n, avg, cuda_detail::Fold<T>{d, e}, static_cast<const T*>(avg), p);
}

template <class T>
void swap_values(cuda, std::size_t n, T* a, T* b) {
  using namespace cuda_detail;
  if (n == 0) return;
  const DeviceState& dev = current_device();
  swap_kernel<T><<<grid_blocks(n, dev), block_threads, 0, dev.stream>>>(n, a, b);
  check_launch("cuda optim: swap_kernel launch");
}

}  // namespace attn::kernels
