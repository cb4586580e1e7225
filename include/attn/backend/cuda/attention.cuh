// SPDX-License-Identifier: MIT
// Multi-head self-attention kernels for attn::cuda, overloads of the cpu ones in
// backend/cpu/attention.hpp with the same math, layouts and dropout hash: a fused flash kernel
// (tiled, online softmax, O(T) memory; backward in two passes, dQ and dK/dV, recomputing the
// scores) and a naive reference on cuBLAS that keeps the (B, H, T, T) weights. A sparse pattern
// (MhaProblem::pattern) is honoured element by element through AttentionPattern::visible, the
// cpu kernels' definition, and the flash kernels visit only the tiles the pattern's ranges reach
// (kernels::mha::key_tiles / query_tiles, shared with the cpu kernels): O(T w) work under a window
// of w, O(T) memory. With chosen global positions (global_mask) they visit every tile.
//   attn::kernels::mha_flash_forward(attn::cuda{}, problem, out, lse, stats);   // problem: kernels::MhaProblem<T>
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

#include "../../core/error.hpp"
#include "../attention_problem.hpp"
#include "../cuda.hpp"
#include "../element_math.hpp"
#include "softmax.cuh"
#include "warp.cuh"

namespace attn::cuda_detail {

/// What the kernels read of a kernels::MhaProblem<T>, passed by value. qkv (B, T, 3D): Q, K, V of
/// head h at columns h*hd, D + h*hd, 2D + h*hd of each token's row.
template <class T>
struct MhaArgs {
  int batch = 0, time = 0, heads = 0, head_dim = 0;
  const T* qkv = nullptr;
  const T* key_mask = nullptr;   // (B, T): 0 = padding, or null
  const T* attn_mask = nullptr;  // (T, T) added to the scores, or null
  const T* global_mask = nullptr;  // (B, T): != 0 a chosen global token of the pattern, or null
  AttentionPattern pattern = {};
  T scale = 1;
  bool drop = false;
  std::uint64_t seed = 0;
  std::uint32_t threshold = 0;  // drop when the 24-bit hash < threshold
  T keep = 1;                   // 1 / (1 - p)
  __host__ __device__ std::size_t dim() const { return std::size_t(heads) * head_dim; }
  __host__ __device__ std::size_t ld() const { return 3 * dim(); }
};

template <class T, class Problem>
MhaArgs<T> mha_args(const Problem& p) {
  if (p.batch > 65535 || p.heads > 65535 || p.time > (std::size_t(1) << 30) || p.head_dim > 4096)
    throw ArgumentError("cuda attention: batch " + std::to_string(p.batch) + ", heads " + std::to_string(p.heads) + ", time " +
                        std::to_string(p.time) + ", head_dim " + std::to_string(p.head_dim) + " exceed the kernels' limits");
  MhaArgs<T> a;
  a.batch = int(p.batch);
  a.time = int(p.time);
  a.heads = int(p.heads);
  a.head_dim = int(p.head_dim);
  a.qkv = p.qkv;
  a.key_mask = p.key_mask;
  a.attn_mask = p.attn_mask;
  a.global_mask = p.global_mask;
  a.pattern = p.pattern;
  a.scale = p.scale;
  a.drop = p.dropout > 0;
  a.seed = p.seed;
  a.threshold = static_cast<std::uint32_t>(p.dropout * double(1u << 24));
  a.keep = a.drop ? T(1.0 / (1.0 - p.dropout)) : T(1);
  return a;
}

/// Dropout factor of weight idx = ((b*H + h)*T + i)*T + j: 0 or 1/(1-p), elem::dropout_factor as
/// the cpu kernels' DropMask, so both backends and both kernels drop the same weights.
template <class T>
__device__ inline T mha_drop(const MhaArgs<T>& a, std::uint64_t idx) {
  return elem::dropout_factor(a.seed, idx, a.threshold, a.keep);
}

/// Score bias of key j for query i of sample b: attn_mask[i, j], -inf for a padded key or one the
/// pattern hides.
template <class T>
__device__ inline T mha_bias(const MhaArgs<T>& a, int b, int i, int j) {
  T s = a.attn_mask ? a.attn_mask[std::size_t(i) * a.time + j] : T(0);
  const T* g = a.global_mask ? a.global_mask + std::size_t(b) * a.time : nullptr;
  if (!a.pattern.visible(std::size_t(i), std::size_t(j), g && g[i] != T(0), g && g[j] != T(0))) s += -std::numeric_limits<T>::infinity();
  if (a.key_mask && a.key_mask[std::size_t(b) * a.time + j] == T(0)) s += -std::numeric_limits<T>::infinity();
  return s;
}

// Tiling of the flash kernels: a block of 4 warps owns 16 rows (4 per warp: queries, or keys in
// the dK/dV pass) and walks over tiles of 32 rows of the other side, one per lane, staged in
// shared memory with a padded stride (hd + 1) so that lane l reading row l is conflict-free.
inline constexpr int mha_warps = 4;
inline constexpr int mha_rows = 4;                       // own rows per warp
inline constexpr int mha_own = mha_warps * mha_rows;     // own rows per block
inline constexpr int mha_tile = 32;                      // other rows per tile (one per lane)

/// Shared memory of a flash block: two tiles (32 x (hd+1)), `own` own-row buffers (16 x hd) and
/// `vectors` per-warp vectors of 32. Each kernel asks for what it uses: the forward 2 buffers
/// (Q, O) and 1 vector, the dQ pass 3 (Q, dO, dQ) and 1, the dK/dV pass 4 (K, V, dK, dV) and 2;
/// so a forward at head_dim 128 in float (49,920 bytes) runs on a device whose opt-in limit is 64 KiB.
template <class T>
std::size_t mha_smem_bytes(int hd, int own, int vectors) {
  return (std::size_t(2) * mha_tile * (hd + 1) + std::size_t(own) * mha_own * hd + std::size_t(vectors) * mha_warps * mha_tile) * sizeof(T);
}
inline constexpr int mha_forward_own = 2, mha_forward_vectors = 1;
inline constexpr int mha_dq_own = 3, mha_dq_vectors = 1;
inline constexpr int mha_dkv_own = 4, mha_dkv_vectors = 2;

/// The shared memory of the largest flash kernel (the dK/dV pass) at head width hd, so that a
/// problem the forward can run never meets a backward that cannot.
template <class T>
std::size_t mha_flash_smem_bytes(int hd) {
  return mha_smem_bytes<T>(hd, mha_dkv_own, mha_dkv_vectors);
}

extern __shared__ __align__(16) unsigned char mha_smem[];

// dst[r][c] (row stride dst_ld) = src row (r0 + r) columns [0, hd) (row stride src_ld), or 0 past
// the last row n; rows r < rows. All threads of the block take part.
template <class T>
__device__ inline void mha_load(T* dst, int dst_ld, const T* src, std::size_t src_ld, int r0, int rows, int n, int hd) {
  for (int e = threadIdx.x; e < rows * hd; e += blockDim.x) {
    const int r = e / hd, c = e - r * hd;
    dst[r * dst_ld + c] = r0 + r < n ? src[std::size_t(r0 + r) * src_ld + c] : T(0);
  }
}

// The tiles of the other side (mha_tile rows each) that own rows [r0, r0 + mha_own) reach through
// the pattern: every tile without one, or with chosen global positions (any tile may hold one).
// Queries own: key tiles; keys own: query tiles. The same for every thread of the block.
template <class T>
__device__ inline kernels::mha::TileRuns mha_tiles(const MhaArgs<T>& a, int r0, bool queries_own) {
  const std::size_t n = std::size_t(a.time), lo = std::size_t(r0), hi = lo + mha_own < n ? lo + mha_own : n;
  if (!a.pattern.active() || a.global_mask) return kernels::mha::tile_runs(0, n, 0, 0, mha_tile);
  return queries_own ? kernels::mha::key_tiles(a.pattern, n, lo, hi, mha_tile) : kernels::mha::query_tiles(a.pattern, n, lo, hi, mha_tile);
}

// Forward: grid (ceil(T/16), H, B). Own rows: queries i0..i0+15, with q in Qs and the output
// accumulator in Os; key tiles K, V. Online softmax per row: running max m and sum l (registers,
// the same on every lane); out = O / l, lse = m + log l (+inf and out 0 for a row with no visible key).
template <class T>
__global__ void __launch_bounds__(mha_warps * 32) mha_flash_forward_kernel(MhaArgs<T> a, T* out, T* lse) {
  using std::exp;
  constexpr T inf = std::numeric_limits<T>::infinity();
  const int n = a.time, hd = a.head_dim, b = blockIdx.z, h = blockIdx.y, i0 = blockIdx.x * mha_own;
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  const std::size_t ld = a.ld(), D = a.dim();
  T* Ks = reinterpret_cast<T*>(mha_smem);
  T* Vs = Ks + mha_tile * (hd + 1);
  T* Qs = Vs + mha_tile * (hd + 1);
  T* Os = Qs + mha_own * hd;
  T* Ps = Os + mha_own * hd + w * mha_tile;  // this warp's weights of the current tile
  const T* base = a.qkv + std::size_t(b) * n * ld + std::size_t(h) * hd;
  mha_load(Qs, hd, base, ld, i0, mha_own, n, hd);
  for (int e = threadIdx.x; e < mha_own * hd; e += blockDim.x) Os[e] = T(0);
  __syncthreads();  // Qs and Os are read across warps, also when no key tile runs
  T m[mha_rows], l[mha_rows];
  for (int r = 0; r < mha_rows; ++r) m[r] = -inf, l[r] = T(0);
  const kernels::mha::TileRuns runs = mha_tiles(a, i0, true);
  for (std::size_t kt = runs.begin(); kt < runs.end(); kt = runs.next(kt)) {
    const int j0 = int(kt) * mha_tile;
    __syncthreads();  // the previous tile is no longer read
    mha_load(Ks, hd + 1, base + D, ld, j0, mha_tile, n, hd);
    mha_load(Vs, hd + 1, base + 2 * D, ld, j0, mha_tile, n, hd);
    __syncthreads();
    const int j = j0 + lane;
    for (int r = 0; r < mha_rows; ++r) {
      const int row = w * mha_rows + r, i = i0 + row;
      if (i >= n) break;  // uniform over the warp
      T s = -inf;
      if (j < n) {
        T dot = 0;
        for (int c = 0; c < hd; ++c) dot += Qs[row * hd + c] * Ks[lane * (hd + 1) + c];
        s = a.scale * dot + mha_bias(a, b, i, j);
      }
      const auto step = elem::online_softmax_step(m[r], warp_max(s));
      if (step.m_new == -inf) continue;  // nothing visible in this row yet
      const T alpha = step.alpha;
      T p = exp(s - step.m_new);
      l[r] = l[r] * alpha + warp_sum(p);
      m[r] = step.m_new;
      if (a.drop && j < n) p *= mha_drop(a, ((std::size_t(b) * a.heads + h) * n + i) * std::size_t(n) + j);
      Ps[lane] = p;
      __syncwarp();
      for (int c = lane; c < hd; c += 32) {
        T acc = Os[row * hd + c] * alpha;
        for (int k = 0; k < mha_tile; ++k) acc += Ps[k] * Vs[k * (hd + 1) + c];
        Os[row * hd + c] = acc;
      }
      __syncwarp();
    }
  }
  for (int r = 0; r < mha_rows; ++r) {
    const int row = w * mha_rows + r, i = i0 + row;
    if (i >= n) break;
    const T inv = l[r] > T(0) ? T(1) / l[r] : T(0);
    T* o = out + (std::size_t(b) * n + i) * D + std::size_t(h) * hd;
    for (int c = lane; c < hd; c += 32) o[c] = Os[row * hd + c] * inv;
    if (lane == 0) lse[(std::size_t(b) * a.heads + h) * n + i] = elem::log_sum_exp(m[r], l[r]);
  }
}

// Dd (B, H, T) = rowsum(dO * O) per head, one warp per (b, h, i).
template <class T>
__global__ void mha_rowdot_kernel(MhaArgs<T> a, const T* out, const T* dout, T* Dd) {
  const std::size_t rows = std::size_t(a.batch) * a.heads * a.time, D = a.dim();
  const int hd = a.head_dim, lane = threadIdx.x % 32;
  const std::size_t warps = std::size_t(gridDim.x) * (blockDim.x / 32);
  for (std::size_t q = std::size_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; q < rows; q += warps) {
    const std::size_t i = q % a.time, bh = q / a.time, h = bh % a.heads, b = bh / a.heads;
    const std::size_t off = (b * a.time + i) * D + h * hd;
    T acc = 0;
    for (int c = lane; c < hd; c += 32) acc += dout[off + c] * out[off + c];
    acc = warp_sum(acc);
    if (lane == 0) Dd[q] = acc;
  }
}

// Backward, dQ pass: grid (ceil(T/16), H, B), own rows queries (q in Qs, dO in dOs, dQ in Gs),
// key tiles K, V. P = exp(S - L), dP = dO V^T, dS = P (dP Z - D); dQ += scale dS K.
template <class T>
__global__ void __launch_bounds__(mha_warps * 32) mha_flash_dq_kernel(MhaArgs<T> a, const T* dout, const T* lse, const T* Dd, T* dqkv) {
  using std::exp;
  constexpr T inf = std::numeric_limits<T>::infinity();
  const int n = a.time, hd = a.head_dim, b = blockIdx.z, h = blockIdx.y, i0 = blockIdx.x * mha_own;
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  const std::size_t ld = a.ld(), D = a.dim(), stat = (std::size_t(b) * a.heads + h) * n;
  T* Ks = reinterpret_cast<T*>(mha_smem);
  T* Vs = Ks + mha_tile * (hd + 1);
  T* Qs = Vs + mha_tile * (hd + 1);
  T* dOs = Qs + mha_own * hd;
  T* Gs = dOs + mha_own * hd;
  T* Ps = Gs + mha_own * hd + w * mha_tile;
  const T* base = a.qkv + std::size_t(b) * n * ld + std::size_t(h) * hd;
  mha_load(Qs, hd, base, ld, i0, mha_own, n, hd);
  mha_load(dOs, hd, dout + std::size_t(b) * n * D + std::size_t(h) * hd, D, i0, mha_own, n, hd);
  for (int e = threadIdx.x; e < mha_own * hd; e += blockDim.x) Gs[e] = T(0);
  __syncthreads();  // read across warps, also when no tile runs
  const kernels::mha::TileRuns runs = mha_tiles(a, i0, true);
  for (std::size_t kt = runs.begin(); kt < runs.end(); kt = runs.next(kt)) {
    const int j0 = int(kt) * mha_tile;
    __syncthreads();
    mha_load(Ks, hd + 1, base + D, ld, j0, mha_tile, n, hd);
    mha_load(Vs, hd + 1, base + 2 * D, ld, j0, mha_tile, n, hd);
    __syncthreads();
    const int j = j0 + lane;
    for (int r = 0; r < mha_rows; ++r) {
      const int row = w * mha_rows + r, i = i0 + row;
      if (i >= n) break;
      const T L = lse[stat + i];
      if (L == inf) continue;  // no visible key: P = 0
      T ds = 0;
      if (j < n) {
        T qk = 0, dp = 0;
        for (int c = 0; c < hd; ++c) {
          qk += Qs[row * hd + c] * Ks[lane * (hd + 1) + c];
          dp += dOs[row * hd + c] * Vs[lane * (hd + 1) + c];
        }
        const T p = exp(a.scale * qk + mha_bias(a, b, i, j) - L);
        const T z = a.drop ? mha_drop(a, (stat + i) * std::size_t(n) + j) : T(1);
        ds = elem::attention_score_grad(p, dp * z, Dd[stat + i]);
      }
      Ps[lane] = ds;
      __syncwarp();
      for (int c = lane; c < hd; c += 32) {
        T acc = 0;
        for (int k = 0; k < mha_tile; ++k) acc += Ps[k] * Ks[k * (hd + 1) + c];
        Gs[row * hd + c] += acc;
      }
      __syncwarp();
    }
  }
  for (int r = 0; r < mha_rows; ++r) {
    const int row = w * mha_rows + r, i = i0 + row;
    if (i >= n) break;
    T* dq = dqkv + (std::size_t(b) * n + i) * ld + std::size_t(h) * hd;
    for (int c = lane; c < hd; c += 32) dq[c] += a.scale * Gs[row * hd + c];
  }
}

// Backward, dK/dV pass: grid (ceil(T/16), H, B), own rows keys j (k in Ks_, v in Vs_, dK in GKs,
// dV in GVs), query tiles Q, dO with lse and D of each query in registers.
// dV += (P Z)^T dO; dK += scale dS^T Q.
template <class T>
__global__ void __launch_bounds__(mha_warps * 32) mha_flash_dkv_kernel(MhaArgs<T> a, const T* dout, const T* lse, const T* Dd, T* dqkv) {
  using std::exp;
  constexpr T inf = std::numeric_limits<T>::infinity();
  const int n = a.time, hd = a.head_dim, b = blockIdx.z, h = blockIdx.y, j0 = blockIdx.x * mha_own;
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  const std::size_t ld = a.ld(), D = a.dim(), stat = (std::size_t(b) * a.heads + h) * n;
  T* Qt = reinterpret_cast<T*>(mha_smem);
  T* dOt = Qt + mha_tile * (hd + 1);
  T* Kown = dOt + mha_tile * (hd + 1);
  T* Vown = Kown + mha_own * hd;
  T* GK = Vown + mha_own * hd;
  T* GV = GK + mha_own * hd;
  T* Ps = GV + mha_own * hd + w * mha_tile;
  T* Ss = GV + mha_own * hd + mha_warps * mha_tile + w * mha_tile;
  const T* base = a.qkv + std::size_t(b) * n * ld + std::size_t(h) * hd;
  const T* dO = dout + std::size_t(b) * n * D + std::size_t(h) * hd;
  mha_load(Kown, hd, base + D, ld, j0, mha_own, n, hd);
  mha_load(Vown, hd, base + 2 * D, ld, j0, mha_own, n, hd);
  for (int e = threadIdx.x; e < 2 * mha_own * hd; e += blockDim.x) GK[e] = T(0);  // GK and GV
  __syncthreads();  // read across warps, also when no query tile runs
  const kernels::mha::TileRuns runs = mha_tiles(a, j0, false);
  for (std::size_t qt = runs.begin(); qt < runs.end(); qt = runs.next(qt)) {
    const int q0 = int(qt) * mha_tile;
    __syncthreads();
    mha_load(Qt, hd + 1, base, ld, q0, mha_tile, n, hd);
    mha_load(dOt, hd + 1, dO, D, q0, mha_tile, n, hd);
    __syncthreads();
    const int i = q0 + lane;
    const T L = i < n ? lse[stat + i] : inf;
    const T Di = i < n ? Dd[stat + i] : T(0);
    for (int r = 0; r < mha_rows; ++r) {
      const int row = w * mha_rows + r, j = j0 + row;
      if (j >= n) break;
      if (a.key_mask && a.key_mask[std::size_t(b) * n + j] == T(0)) continue;  // a padded key gets no weight (uniform over the warp)
      T pz = 0, ds = 0;
      if (L != inf) {
        T qk = 0, dp = 0;
        for (int c = 0; c < hd; ++c) {
          qk += Qt[lane * (hd + 1) + c] * Kown[row * hd + c];
          dp += dOt[lane * (hd + 1) + c] * Vown[row * hd + c];
        }
        const T p = exp(a.scale * qk + mha_bias(a, b, i, j) - L);
        const T z = a.drop ? mha_drop(a, (stat + i) * std::size_t(n) + j) : T(1);
        pz = p * z;
        ds = elem::attention_score_grad(p, dp * z, Di);
      }
      Ps[lane] = pz;
      Ss[lane] = ds;
      __syncwarp();
      for (int c = lane; c < hd; c += 32) {
        T gv = 0, gk = 0;
        for (int k = 0; k < mha_tile; ++k) {
          gv += Ps[k] * dOt[k * (hd + 1) + c];
          gk += Ss[k] * Qt[k * (hd + 1) + c];
        }
        GV[row * hd + c] += gv;
        GK[row * hd + c] += gk;
      }
      __syncwarp();
    }
  }
  for (int r = 0; r < mha_rows; ++r) {
    const int row = w * mha_rows + r, j = j0 + row;
    if (j >= n) break;
    T* dk = dqkv + (std::size_t(b) * n + j) * ld + D + std::size_t(h) * hd;
    for (int c = lane; c < hd; c += 32) {
      dk[c] += a.scale * GK[row * hd + c];
      dk[D + c] += GV[row * hd + c];
    }
  }
}

// Naive: P (B, H, T, T) += attn_mask + key padding and pattern bias, element by element.
template <class T>
__global__ void mha_mask_scores_kernel(MhaArgs<T> a, T* P) {
  const std::size_t n = a.time, total = std::size_t(a.batch) * a.heads * n * n;
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  for (std::size_t e = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const std::size_t j = e % n, i = e / n % n, b = e / (n * n * a.heads);
    P[e] += mha_bias(a, int(b), int(i), int(j));
  }
}

// Naive dropout: pz = P * Z; dp *= Z when dp is given (flat index = the weight's index).
template <class T>
__global__ void mha_drop_weights_kernel(MhaArgs<T> a, const T* P, T* pz, T* dp) {
  const std::size_t n = a.time, total = std::size_t(a.batch) * a.heads * n * n;
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  for (std::size_t e = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const T z = mha_drop(a, e);
    pz[e] = P[e] * z;
    if (dp) dp[e] *= z;
  }
}

// Naive: dp (rows, n) = P * (dp - rowsum(P * dp)) in place (the softmax Jacobian), one warp per row.
template <class T>
__global__ void mha_softmax_jacobian_kernel(const T* P, T* dp, std::size_t rows, std::size_t n) {
  const int lane = threadIdx.x % 32;
  const std::size_t warps = std::size_t(gridDim.x) * (blockDim.x / 32);
  for (std::size_t r = std::size_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; r < rows; r += warps) {
    const T* pr = P + r * n;
    T* gr = dp + r * n;
    T s = 0;
    for (std::size_t j = lane; j < n; j += 32) s += pr[j] * gr[j];
    s = warp_sum(s);
    for (std::size_t j = lane; j < n; j += 32) gr[j] = pr[j] * (gr[j] - s);
  }
}

/// Launches a flash kernel on grid (ceil(T/16), H, B), opting into more than 48 KiB of shared
/// memory when the head dimension needs it.
template <class T, class Kernel, class... Args>
void mha_launch(const char* what, Kernel kernel, std::size_t smem, const MhaArgs<T>& a, Args... args) {
  const DeviceState& dev = current_device();
  if (smem > 48 * 1024) {
    if (smem > std::size_t(dev.smem_optin))
      throw ArgumentError(std::string("cuda attention: head_dim ") + std::to_string(a.head_dim) + " needs " + std::to_string(smem) +
                          " bytes of shared memory per block; this device has " + std::to_string(dev.smem_optin));
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)), "cuda attention: cudaFuncSetAttribute");
  }
  const dim3 grid(unsigned((a.time + mha_own - 1) / mha_own), unsigned(a.heads), unsigned(a.batch));
  kernel<<<grid, mha_warps * 32, smem, dev.stream>>>(a, args...);
  check_launch(what);
}

/// Device scratch for the length of one call.
template <class T>
struct MhaScratch {
  T* p = nullptr;
  std::size_t n = 0;
  explicit MhaScratch(std::size_t count) : p(cuda::allocate<T>(count)), n(count) {}
  MhaScratch(const MhaScratch&) = delete;
  MhaScratch& operator=(const MhaScratch&) = delete;
  ~MhaScratch() { cuda::deallocate(p, n); }
};

}  // namespace attn::cuda_detail

namespace attn::kernels {

/// Whether the current device runs the flash kernels of p: each block keeps tiles of the head
/// width in shared memory (the dK/dV pass 66,816 bytes at head_dim 128 in float, more than a
/// Turing GPU's 64 KiB). self_attention's automatic choice takes the naive kernel where not.
template <class T>
bool mha_flash_supported(cuda, const MhaProblem<T>& p) {
  return cuda_detail::mha_flash_smem_bytes<T>(int(p.head_dim)) <= std::size_t(cuda_detail::current_device().smem_optin);
}

/// Flash forward, as mha_flash_forward(cpu, ...): out (B, T, D), lse (B, H, T) on the device.
template <class T>
void mha_flash_forward(cuda, const MhaProblem<T>& p, T* out, T* lse, AttentionStats* stats) {
  using namespace cuda_detail;
  if (p.batch == 0 || p.time == 0 || p.heads == 0 || p.head_dim == 0) return;
  const MhaArgs<T> a = mha_args<T>(p);
  const std::size_t smem = mha_smem_bytes<T>(a.head_dim, mha_forward_own, mha_forward_vectors);
  if (stats) stats->note(smem);
  mha_launch<T>("cuda attention: mha_flash_forward_kernel launch", mha_flash_forward_kernel<T>, smem, a, out, lse);
}

/// Flash backward, as mha_flash_backward(cpu, ...): accumulates into dqkv (B, T, 3D). Two passes
/// over the key/query tiles (dQ, then dK and dV), each owning its outputs, so no atomics.
template <class T>
void mha_flash_backward(cuda, const MhaProblem<T>& p, const T* out, const T* dout, const T* lse, T* dqkv, AttentionStats* stats) {
  using namespace cuda_detail;
  if (p.batch == 0 || p.time == 0 || p.heads == 0 || p.head_dim == 0) return;
  const MhaArgs<T> a = mha_args<T>(p);
  const std::size_t rows = p.batch * p.heads * p.time;
  MhaScratch<T> Dd(rows);
  if (stats) {
    stats->note(rows * sizeof(T));
    stats->note(mha_smem_bytes<T>(a.head_dim, mha_dkv_own, mha_dkv_vectors));  // the larger of the two passes
  }
  const DeviceState& dev = current_device();
  mha_rowdot_kernel<T><<<row_blocks(rows), rows_per_block * warp_size, 0, dev.stream>>>(a, out, dout, Dd.p);
  check_launch("cuda attention: mha_rowdot_kernel launch");
  mha_launch<T>("cuda attention: mha_flash_dq_kernel launch", mha_flash_dq_kernel<T>, mha_smem_bytes<T>(a.head_dim, mha_dq_own, mha_dq_vectors),
                a, dout, lse, static_cast<const T*>(Dd.p), dqkv);
  mha_launch<T>("cuda attention: mha_flash_dkv_kernel launch", mha_flash_dkv_kernel<T>,
                mha_smem_bytes<T>(a.head_dim, mha_dkv_own, mha_dkv_vectors), a, dout, lse, static_cast<const T*>(Dd.p), dqkv);
}

/// Naive forward, as mha_naive_forward(cpu, ...): weights (B, H, T, T) = softmax(scale Q K^T +
/// masks) (a row with no visible key all zeros), out = (weights * Z) V, on cuBLAS.
template <class T>
void mha_naive_forward(cuda, const MhaProblem<T>& p, T* out, T* weights, AttentionStats* stats) {
  using namespace cuda_detail;
  if (p.batch == 0 || p.time == 0 || p.heads == 0 || p.head_dim == 0) return;
  const MhaArgs<T> a = mha_args<T>(p);
  const int n = a.time, hd = a.head_dim, H = a.heads;
  const std::size_t ld = a.ld(), D = a.dim(), nn = std::size_t(n) * n, total = std::size_t(a.batch) * H * nn;
  const DeviceState& dev = current_device();
  for (int b = 0; b < a.batch; ++b) {
    const T* Q = p.qkv + std::size_t(b) * n * ld;
    cuda::gemm_strided_batched<T>(Trans::no, Trans::yes, n, n, hd, a.scale, Q, int(ld), hd, Q + D, int(ld), hd, T(0),
                                  weights + std::size_t(b) * H * nn, n, (long long)nn, H);
  }
  if (p.key_mask || p.attn_mask || p.pattern.active()) {
    mha_mask_scores_kernel<T><<<grid_blocks(total, dev), block_threads, 0, dev.stream>>>(a, weights);
    check_launch("cuda attention: mha_mask_scores_kernel launch");
  }
  kernels::softmax_rows(cuda{}, weights, weights, std::size_t(a.batch) * H * n, std::size_t(n), false);
  const T* Pd = weights;
  MhaScratch<T> pz(a.drop ? total : 0);
  if (a.drop) {
    if (stats) stats->note(total * sizeof(T));
    mha_drop_weights_kernel<T><<<grid_blocks(total, dev), block_threads, 0, dev.stream>>>(a, weights, pz.p, static_cast<T*>(nullptr));
    check_launch("cuda attention: mha_drop_weights_kernel launch");
    Pd = pz.p;
  }
  for (int b = 0; b < a.batch; ++b) {
    const T* V = p.qkv + std::size_t(b) * n * ld + 2 * D;
    cuda::gemm_strided_batched<T>(Trans::no, Trans::no, n, hd, n, T(1), Pd + std::size_t(b) * H * nn, n, (long long)nn, V, int(ld), hd,
                                  T(0), out + std::size_t(b) * n * D, int(D), hd, H);
  }
}

/// Naive backward, as mha_naive_backward(cpu, ...), from the saved weights: accumulates into dqkv.
template <class T>
void mha_naive_backward(cuda, const MhaProblem<T>& p, const T* weights, const T* dout, T* dqkv, AttentionStats* stats) {
  using namespace cuda_detail;
  if (p.batch == 0 || p.time == 0 || p.heads == 0 || p.head_dim == 0) return;
  const MhaArgs<T> a = mha_args<T>(p);
  const int n = a.time, hd = a.head_dim, H = a.heads;
  const std::size_t ld = a.ld(), D = a.dim(), nn = std::size_t(n) * n, total = std::size_t(a.batch) * H * nn;
  const DeviceState& dev = current_device();
  MhaScratch<T> dp(total), pz(a.drop ? total : 0);
  if (stats) stats->note((a.drop ? 2 : 1) * total * sizeof(T));
  for (int b = 0; b < a.batch; ++b) {  // dP = dO V^T
    cuda::gemm_strided_batched<T>(Trans::no, Trans::yes, n, n, hd, T(1), dout + std::size_t(b) * n * D, int(D), hd,
                                  p.qkv + std::size_t(b) * n * ld + 2 * D, int(ld), hd, T(0), dp.p + std::size_t(b) * H * nn, n,
                                  (long long)nn, H);
  }
  const T* Pd = weights;
  if (a.drop) {
    mha_drop_weights_kernel<T><<<grid_blocks(total, dev), block_threads, 0, dev.stream>>>(a, weights, pz.p, dp.p);
    check_launch("cuda attention: mha_drop_weights_kernel launch");
    Pd = pz.p;
  }
  for (int b = 0; b < a.batch; ++b) {  // dV += (P Z)^T dO
    cuda::gemm_strided_batched<T>(Trans::yes, Trans::no, n, hd, n, T(1), Pd + std::size_t(b) * H * nn, n, (long long)nn,
                                  dout + std::size_t(b) * n * D, int(D), hd, T(1), dqkv + std::size_t(b) * n * ld + 2 * D, int(ld), hd, H);
  }
  mha_softmax_jacobian_kernel<T><<<row_blocks(std::size_t(a.batch) * H * n), rows_per_block * warp_size, 0, dev.stream>>>(
      weights, dp.p, std::size_t(a.batch) * H * n, std::size_t(n));
  check_launch("cuda attention: mha_softmax_jacobian_kernel launch");
  for (int b = 0; b < a.batch; ++b) {  // dQ += scale dS K; dK += scale dS^T Q
    const T* Q = p.qkv + std::size_t(b) * n * ld;
    T* dQ = dqkv + std::size_t(b) * n * ld;
    const T* dS = dp.p + std::size_t(b) * H * nn;
    cuda::gemm_strided_batched<T>(Trans::no, Trans::no, n, hd, n, a.scale, dS, n, (long long)nn, Q + D, int(ld), hd, T(1), dQ, int(ld), hd, H);
    cuda::gemm_strided_batched<T>(Trans::yes, Trans::no, n, hd, n, a.scale, dS, n, (long long)nn, Q, int(ld), hd, T(1), dQ + D, int(ld),
                                  hd, H);
  }
}

}  // namespace attn::kernels
