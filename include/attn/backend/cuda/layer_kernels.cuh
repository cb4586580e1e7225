// SPDX-License-Identifier: MIT
// Kernels of the loss and layer functions for attn::cuda, overloads of cpu/layer_kernels.hpp:
// cross-entropy over log-probabilities, layer and RMS normalisation (one warp per row, statistics
// in double as on the CPU) and masked mean/max pooling over time (one thread per output column,
// adding in the CPU's order).
//   attn::kernels::layer_norm_forward(attn::cuda{}, x, gamma, beta, rows, d, 1e-5, y, xhat, rstd);
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "../cuda.hpp"
#include "../element_math.hpp"
#include "warp.cuh"

namespace attn::cuda_detail {

// row_loss (n) = -(1 - eps) logp[i, t_i] - eps mean_j logp[i, j] in double (0 for ignored rows),
// one warp per row of logp (n, c).
template <class T, class I>
__global__ void cross_entropy_rows_kernel(const T* logp, const I* targets, std::size_t n, std::size_t c, long long ignore_index,
                                          T eps, double* row_loss) {
  const unsigned lane = threadIdx.x % warp_size;
  const std::size_t warps = static_cast<std::size_t>(gridDim.x) * (blockDim.x / warp_size);
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * (blockDim.x / warp_size) + threadIdx.x / warp_size; i < n; i += warps) {
    const long long t = static_cast<long long>(targets[i]);
    if (t == ignore_index) {
      if (lane == 0) row_loss[i] = 0;
      continue;
    }
    const T* lp = logp + i * c;
    double s = 0;
    if (eps != T(0)) {
      for (std::size_t j = lane; j < c; j += warp_size) s += lp[j];
      s = warp_sum(s);
    }
    if (lane == 0) row_loss[i] = elem::cross_entropy_row(lp[t], s, double(eps), c);
  }
}

// dlogits (n, c) += dloss[0] / count * (exp(logp) - q), q = (1 - eps) onehot(t) + eps / c, on rows not ignored.
template <class T, class I>
__global__ void cross_entropy_backward_kernel(const T* logp, const I* targets, std::size_t n, std::size_t c, long long ignore_index,
                                              T eps, const T* dloss, std::size_t count, T* dlogits) {
  const T scale = dloss[0] / T(count);
  const std::size_t total = n * c, stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t e = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const std::size_t i = e / c, j = e - i * c;
    const long long t = static_cast<long long>(targets[i]);
    if (t == ignore_index) continue;
    dlogits[e] = elem::cross_entropy_grad(dlogits[e], logp[e], static_cast<long long>(j) == t, scale, eps, c);
  }
}

// One warp per row of X (rows, d): mean and biased variance in double, then xhat, y, rstd. With
// center false (RMS norm) no mean: the mean square for the variance. Bt null: no shift.
template <class T>
__global__ void layer_norm_forward_kernel(const T* X, const T* G, const T* Bt, std::size_t rows, std::size_t d, double eps, T* y,
                                          T* xhat, T* rstd, bool center) {
  const unsigned lane = threadIdx.x % warp_size;
  const std::size_t warps = static_cast<std::size_t>(gridDim.x) * (blockDim.x / warp_size);
  for (std::size_t r = static_cast<std::size_t>(blockIdx.x) * (blockDim.x / warp_size) + threadIdx.x / warp_size; r < rows;
       r += warps) {
    const T* xr = X + r * d;
    double mu = 0, var = 0;
    if (center) {
      for (std::size_t j = lane; j < d; j += warp_size) mu += xr[j];
      mu = warp_sum(mu) / double(d);
    }
    for (std::size_t j = lane; j < d; j += warp_size) var += (xr[j] - mu) * (xr[j] - mu);
    const T rs = elem::layer_norm_rstd<T>(warp_sum(var), d, eps);
    if (lane == 0) rstd[r] = rs;
    T* hr = xhat + r * d;
    T* yr = y + r * d;
    for (std::size_t j = lane; j < d; j += warp_size) {
      const T h = elem::layer_norm_xhat(xr[j], mu, rs);
      hr[j] = h;
      yr[j] = Bt ? h * G[j] + Bt[j] : h * G[j];
    }
  }
}

// dx += rstd (gg - mean(gg) - xhat mean(gg xhat)), gg = gy * gamma, one warp per row; with center
// false (RMS norm) without the mean(gg) term.
template <class T>
__global__ void layer_norm_dx_kernel(const T* gy, const T* H, const T* Gm, const T* rstd, std::size_t rows, std::size_t d, T* dx,
                                     bool center) {
  const unsigned lane = threadIdx.x % warp_size;
  const std::size_t warps = static_cast<std::size_t>(gridDim.x) * (blockDim.x / warp_size);
  for (std::size_t r = static_cast<std::size_t>(blockIdx.x) * (blockDim.x / warp_size) + threadIdx.x / warp_size; r < rows;
       r += warps) {
    double m1 = 0, m2 = 0;
    for (std::size_t j = lane; j < d; j += warp_size) {
      const double gg = elem::layer_norm_gg(gy[r * d + j], Gm[j]);
      m1 += gg;
      m2 += gg * H[r * d + j];
    }
    m1 = center ? warp_sum(m1) / double(d) : 0.0;
    m2 = warp_sum(m2) / double(d);
    for (std::size_t j = lane; j < d; j += warp_size)
      dx[r * d + j] += elem::layer_norm_dx(rstd[r], gy[r * d + j], Gm[j], m1, m2, H[r * d + j]);
  }
}

// dg (d) += column sums of gy * H, db (d) += column sums of gy, over rows (rows, d): 32 columns per
// block, 8 rows of threads over blockIdx.y's chunk of rows; chunks add atomically when split.
template <class T>
__global__ void layer_norm_params_kernel(const T* gy, const T* H, std::size_t rows, std::size_t d, std::size_t chunk, T* dg, T* db,
                                         bool atomic) {
  __shared__ T part_g[8][33];
  __shared__ T part_b[8][33];
  const std::size_t j = static_cast<std::size_t>(blockIdx.x) * 32 + threadIdx.x;
  const std::size_t r0 = static_cast<std::size_t>(blockIdx.y) * chunk, r1 = r0 + chunk < rows ? r0 + chunk : rows;
  T sg = 0, sb = 0;
  if (j < d)
    for (std::size_t r = r0 + threadIdx.y; r < r1; r += 8) {
      const T g = gy[r * d + j];
      sg += g * H[r * d + j];
      sb += g;
    }
  part_g[threadIdx.y][threadIdx.x] = sg;
  part_b[threadIdx.y][threadIdx.x] = sb;
  __syncthreads();
  if (threadIdx.y != 0 || j >= d) return;
  sg = 0;
  sb = 0;
  for (int k = 0; k < 8; ++k) {
    sg += part_g[k][threadIdx.x];
    sb += part_b[k][threadIdx.x];
  }
  if (atomic) {
    if (dg) atomicAdd(dg + j, sg);
    if (db) atomicAdd(db + j, sb);
  } else {
    if (dg) dg[j] += sg;
    if (db) db[j] += sb;
  }
}

// Launches layer_norm_params_kernel over rows (rows, d): enough blocks of rows to fill the device,
// adding atomically when the rows are split.
template <class T>
void norm_params(const DeviceState& dev, const T* gy, const T* H, std::size_t rows, std::size_t d, T* dg, T* db, const char* what) {
  const std::size_t bx = (d + 31) / 32, target = 4 * static_cast<std::size_t>(dev.multiprocessors);
  std::size_t splits = (target + bx - 1) / bx, most = (rows + 63) / 64;
  splits = splits < most ? splits : most;
  splits = splits < 1 ? 1 : splits > 65535 ? 65535 : splits;
  const std::size_t chunk = (rows + splits - 1) / splits;
  layer_norm_params_kernel<T><<<dim3(static_cast<unsigned>(bx), static_cast<unsigned>(splits)), dim3(32, 8), 0, dev.stream>>>(
      gy, H, rows, d, chunk, dg, db, splits > 1);
  check_launch(what);
}

// out (b, d), inv (b): one thread per (i, j), adding unmasked x[i, s, j] in order of s.
template <class T>
__global__ void masked_mean_forward_kernel(const T* x, const T* mask, std::size_t b, std::size_t t, std::size_t d, T* out, T* inv) {
  const std::size_t total = b * d, stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t e = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const std::size_t i = e / d, j = e - i * d;
    double cnt = 0;
    for (std::size_t s = 0; s < t; ++s) cnt += mask[i * t + s] != T(0);
    const T w = cnt > 0 ? T(1.0 / cnt) : T(0);
    if (j == 0) inv[i] = w;
    T o = 0;
    for (std::size_t s = 0; s < t; ++s)
      if (mask[i * t + s] != T(0)) o += x[(i * t + s) * d + j];
    out[e] = o * w;
  }
}

// gx (b, t, d) += g[i, j] inv[i] where mask[i, s] != 0, one thread per element of gx.
template <class T>
__global__ void masked_mean_backward_kernel(const T* g, const T* mask, const T* inv, std::size_t b, std::size_t t, std::size_t d,
                                            T* gx) {
  const std::size_t total = b * t * d, stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t e = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const std::size_t row = e / d, j = e - row * d, i = row / t;
    if (mask[row] == T(0)) continue;
    gx[e] += g[i * d + j] * inv[i];
  }
}

// out (b, d), arg (b, d): one thread per (i, j), the first maximum over unmasked s (a NaN is the
// maximum, as in torch.max over a dimension).
template <class T>
__global__ void masked_max_forward_kernel(const T* x, const T* mask, std::size_t b, std::size_t t, std::size_t d, T* out,
                                          std::int64_t* arg) {
  const std::size_t total = b * d, stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t e = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const std::size_t i = e / d, j = e - i * d;
    T best = 0;
    std::int64_t a = -1;
    for (std::size_t s = 0; s < t; ++s) {
      if (mask[i * t + s] == T(0)) continue;
      const T v = x[(i * t + s) * d + j];
      if (a < 0 || v > best || (v != v && best == best)) {
        best = v;
        a = static_cast<std::int64_t>(s);
      }
    }
    out[e] = best;
    arg[e] = a;
  }
}

// gx[i, arg[i, j], j] += g[i, j]: one thread per (i, j); each writes its own element of gx.
template <class T>
__global__ void masked_max_backward_kernel(const T* g, const std::int64_t* arg, std::size_t b, std::size_t t, std::size_t d, T* gx) {
  const std::size_t total = b * d, stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t e = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const std::size_t i = e / d, j = e - i * d;
    if (arg[e] >= 0) gx[(i * t + static_cast<std::size_t>(arg[e])) * d + j] += g[e];
  }
}

}  // namespace attn::cuda_detail

namespace attn::kernels {

/// As the cpu overload, with logp and targets on the device: the row losses are summed on the host
/// in row order (one wait for the device).
template <class T, class I>
double cross_entropy_forward(cuda, const T* logp, const I* targets, std::size_t n, std::size_t c, long long ignore_index, T eps) {
  using namespace cuda_detail;
  if (n == 0) return 0;
  const DeviceState& dev = current_device();
  double* rows = cuda::allocate<double>(n);
  struct Free {
    double* p;
    std::size_t n;
    ~Free() { cuda::deallocate(p, n); }
  } free_rows{rows, n};
  cross_entropy_rows_kernel<T, I><<<row_blocks(n), rows_per_block * warp_size, 0, dev.stream>>>(logp, targets, n, c, ignore_index,
                                                                                                  eps, rows);
  check_launch("cuda cross_entropy: cross_entropy_rows_kernel launch");
  std::vector<double> host(n);
  cuda::to_host(host.data(), rows, n);
  double total = 0;
  for (std::size_t i = 0; i < n; ++i) total += host[i];
  return total;
}

template <class T, class I>
void cross_entropy_backward(cuda, const T* logp, const I* targets, std::size_t n, std::size_t c, long long ignore_index, T eps,
                            const T* dloss, std::size_t count, T* dlogits) {
  using namespace cuda_detail;
  if (n == 0 || c == 0 || count == 0) return;
  const DeviceState& dev = current_device();
  cross_entropy_backward_kernel<T, I><<<grid_blocks(n * c, dev), block_threads, 0, dev.stream>>>(logp, targets, n, c, ignore_index, eps,
                                                                                                 dloss, count, dlogits);
  check_launch("cuda cross_entropy: cross_entropy_backward_kernel launch");
}

template <class T>
void layer_norm_forward(cuda, const T* X, const T* G, const T* Bt, std::size_t rows, std::size_t d, double eps, T* y, T* xhat,
                        T* rstd) {
  using namespace cuda_detail;
  if (rows == 0 || d == 0) return;
  const DeviceState& dev = current_device();
  layer_norm_forward_kernel<T><<<row_blocks(rows), rows_per_block * warp_size, 0, dev.stream>>>(X, G, Bt, rows, d, eps, y, xhat, rstd,
                                                                                                true);
  check_launch("cuda layer_norm: layer_norm_forward_kernel launch");
}

template <class T>
void layer_norm_backward(cuda, const T* gy, const T* H, const T* Gm, const T* rstd, std::size_t rows, std::size_t d, T* dx, T* dg,
                         T* db) {
  using namespace cuda_detail;
  if (rows == 0 || d == 0) return;
  const DeviceState& dev = current_device();
  if (dg || db) norm_params(dev, gy, H, rows, d, dg, db, "cuda layer_norm: layer_norm_params_kernel launch");
  if (dx) {
    layer_norm_dx_kernel<T><<<row_blocks(rows), rows_per_block * warp_size, 0, dev.stream>>>(gy, H, Gm, rstd, rows, d, dx, true);
    check_launch("cuda layer_norm: layer_norm_dx_kernel launch");
  }
}

template <class T>
void rms_norm_forward(cuda, const T* X, const T* G, std::size_t rows, std::size_t d, double eps, T* y, T* xhat, T* rstd) {
  using namespace cuda_detail;
  if (rows == 0 || d == 0) return;
  const DeviceState& dev = current_device();
  layer_norm_forward_kernel<T><<<row_blocks(rows), rows_per_block * warp_size, 0, dev.stream>>>(X, G, static_cast<const T*>(nullptr), rows,
                                                                                                d, eps, y, xhat, rstd, false);
  check_launch("cuda rms_norm: layer_norm_forward_kernel launch");
}

template <class T>
void rms_norm_backward(cuda, const T* gy, const T* H, const T* Gm, const T* rstd, std::size_t rows, std::size_t d, T* dx, T* dg) {
  using namespace cuda_detail;
  if (rows == 0 || d == 0) return;
  const DeviceState& dev = current_device();
  if (dg) norm_params(dev, gy, H, rows, d, dg, static_cast<T*>(nullptr), "cuda rms_norm: layer_norm_params_kernel launch");
  if (dx) {
    layer_norm_dx_kernel<T><<<row_blocks(rows), rows_per_block * warp_size, 0, dev.stream>>>(gy, H, Gm, rstd, rows, d, dx, false);
    check_launch("cuda rms_norm: layer_norm_dx_kernel launch");
  }
}

template <class T>
void masked_mean_forward(cuda, const T* x, const T* mask, std::size_t b, std::size_t t, std::size_t d, T* out, T* inv) {
  using namespace cuda_detail;
  if (b == 0 || d == 0) return;
  const DeviceState& dev = current_device();
  masked_mean_forward_kernel<T><<<grid_blocks(b * d, dev), block_threads, 0, dev.stream>>>(x, mask, b, t, d, out, inv);
  check_launch("cuda masked_mean: masked_mean_forward_kernel launch");
}

template <class T>
void masked_mean_backward(cuda, const T* g, const T* mask, const T* inv, std::size_t b, std::size_t t, std::size_t d, T* gx) {
  using namespace cuda_detail;
  if (b == 0 || t == 0 || d == 0) return;
  const DeviceState& dev = current_device();
  masked_mean_backward_kernel<T><<<grid_blocks(b * t * d, dev), block_threads, 0, dev.stream>>>(g, mask, inv, b, t, d, gx);
  check_launch("cuda masked_mean: masked_mean_backward_kernel launch");
}

template <class T>
void masked_max_forward(cuda, const T* x, const T* mask, std::size_t b, std::size_t t, std::size_t d, T* out, std::int64_t* arg) {
  using namespace cuda_detail;
  if (b == 0 || d == 0) return;
  const DeviceState& dev = current_device();
  masked_max_forward_kernel<T><<<grid_blocks(b * d, dev), block_threads, 0, dev.stream>>>(x, mask, b, t, d, out, arg);
  check_launch("cuda masked_max: masked_max_forward_kernel launch");
}

template <class T>
void masked_max_backward(cuda, const T* g, const std::int64_t* arg, std::size_t b, std::size_t t, std::size_t d, T* gx) {
  using namespace cuda_detail;
  if (b == 0 || d == 0) return;
  const DeviceState& dev = current_device();
  masked_max_backward_kernel<T><<<grid_blocks(b * d, dev), block_threads, 0, dev.stream>>>(g, arg, b, t, d, gx);
  check_launch("cuda masked_max: masked_max_backward_kernel launch");
}

}  // namespace attn::kernels
