// SPDX-License-Identifier: MIT
// Multi-head self-attention kernels of the CPU backend, forward and backward: a tiled online-softmax
// ("flash") kernel with O(T) memory on the register-tiled GEMM of tile_gemm.hpp, and a naive kernel
// that keeps the (B, H, T, T) weights. Twin of cuda/attention.cuh; the op is autograd/attention.hpp.
// With a sparse pattern (MhaProblem::pattern: sliding window, causal, global tokens) the flash
// kernels compute only the tiles the pattern reaches: O(T w) work, no T x T buffer. With
// MhaProblem::bf16 (float) at cpu::isa() >= avx512_bf16 their score and value products take
// bfloat16 operands with float sums (tile_gemm_bf16.hpp); the softmax statistics and accumulators
// stay float.
//   attn::kernels::mha_flash_forward(attn::cpu{}, problem, out, lse, stats);   // problem: kernels::MhaProblem<T>
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "../../core/instantiate.hpp"
#include "../attention_problem.hpp"
#include "../cpu.hpp"
#include "../element_math.hpp"
#include "exp.hpp"
#include "tile_gemm.hpp"
#include "tile_gemm_bf16.hpp"

#if defined(_OPENMP)
#define ATTN_MHA_OMP(x) _Pragma(x)
#else
#define ATTN_MHA_OMP(x)
#endif

namespace attn::kernels {

namespace mha {

inline constexpr std::size_t block_q = 128;  // query rows per tile
inline constexpr std::size_t block_k = 128;  // key columns per tile: tiles of 64 KiB (float)

/// Dropout factor of weight (b*H + h, i, j): 0 or 1/(1-p), elem::dropout_factor's counter-based
/// hash, so that forward and backward, flash and naive, in any tile order, agree on the mask.
template <class T>
struct DropMask {
  std::uint64_t seed = 0;
  std::uint32_t threshold = 0;  // drop when the 24-bit hash < threshold
  T keep = 1;
  bool active = false;
  DropMask(double p, std::uint64_t s) : seed(s) {
    active = p > 0;
    threshold = static_cast<std::uint32_t>(p * double(1u << 24));
    keep = active ? T(1.0 / (1.0 - p)) : T(1);
  }
  T operator()(std::uint64_t idx) const { return elem::dropout_factor(seed, idx, threshold, keep); }
};

/// Working memory of the calling thread, kept between calls (a thread's buffer in `slot` grows to
/// the largest n asked for and is reused), so the kernels allocate nothing once warmed up. The
/// contents are uninitialised. Slots 0-2 hold the masks below, 3-13 the per-thread tiles.
template <class T>
class Scratch {
 public:
  Scratch(std::size_t slot, std::size_t n) {
    thread_local std::vector<T> bufs[14];
    auto& v = bufs[slot];
    if (v.size() < n) v.resize(n);
    p_ = v.data();
    n_ = n;
  }
  T* data() const noexcept { return p_; }
  std::size_t size() const noexcept { return n_; }
  T& operator[](std::size_t i) const noexcept { return p_[i]; }

 private:
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

/// The tiles of one side that a tile of the other side reaches: the runs of the range functions,
/// plus, with chosen global positions, the tiles marked in `extra` (those holding a global
/// position), or every tile when `all` (the tile itself holds one).
struct TileSet {
  TileRuns runs;
  const unsigned char* extra = nullptr;
  std::size_t count = 0;  // tiles of the side
  bool all = false;
  bool has(std::size_t t) const {
    return all || (t >= runs.first[0] && t < runs.last[0]) || (t >= runs.first[1] && t < runs.last[1]) || extra[t];
  }
  std::size_t skip(std::size_t t) const {
    while (t < count && !has(t)) ++t;
    return t;
  }
  std::size_t begin() const { return extra ? skip(0) : runs.begin(); }
  std::size_t end() const { return extra ? count : runs.end(); }
  std::size_t next(std::size_t t) const { return extra ? skip(t + 1) : runs.next(t); }
};

/// Key-padding and attn_mask summaries shared by the kernels (in the calling thread's scratch).
template <class T>
struct Masks {
  Scratch<T> key_bias;            // (B, T): 0 for a real key, -inf for padding; size 0 without key mask
  Scratch<unsigned char> kblock;  // (B, nkb): 0 all padding, 1 mixed, 2 all real
  Scratch<unsigned char> ablock;  // (nqb, nkb): 1 if the attn_mask tile has a finite entry; size 0 without attn_mask
  Scratch<std::size_t> kend;      // (B): 1 + the last real key (0: none); keys from there on are all padding
  Scratch<unsigned char> gq, gk;  // (B, nqb), (B, nkb): 1 if the tile holds a chosen global position; size 0 without global_mask
  std::size_t nqb = 0, nkb = 0, bq = 0, bk = 0;  // tiles and tile sizes of each side

  Masks(const MhaProblem<T>& p, std::size_t bq_, std::size_t bk_)
      : key_bias(0, p.key_mask ? p.batch * p.time : 0),
        kblock(1, p.batch * ((p.time + bk_ - 1) / bk_)),
        ablock(2, p.attn_mask ? ((p.time + bq_ - 1) / bq_) * ((p.time + bk_ - 1) / bk_) : 0),
        kend(0, p.batch),
        gq(3, p.global_mask ? p.batch * ((p.time + bq_ - 1) / bq_) : 0),
        gk(4, p.global_mask ? p.batch * ((p.time + bk_ - 1) / bk_) : 0),
        bq(bq_),
        bk(bk_) {
    const std::size_t n = p.time;
    nqb = (n + bq - 1) / bq;
    nkb = (n + bk - 1) / bk;
    if (p.global_mask) {
      std::fill_n(gq.data(), gq.size(), static_cast<unsigned char>(0));
      std::fill_n(gk.data(), gk.size(), static_cast<unsigned char>(0));
      for (std::size_t b = 0; b < p.batch; ++b)
        for (std::size_t i = 0; i < n; ++i)
          if (p.global_mask[b * n + i] != T(0)) gq[b * nqb + i / bq] = gk[b * nkb + i / bk] = 1;
    }
    std::fill_n(kblock.data(), kblock.size(), static_cast<unsigned char>(2));
    std::fill_n(kend.data(), kend.size(), n);
    if (p.key_mask) {
      for (std::size_t b = 0; b < p.batch; ++b) {
        std::size_t e = n;
        while (e > 0 && p.key_mask[b * n + e - 1] == T(0)) --e;
        kend[b] = e;
        for (std::size_t kb = 0; kb < nkb; ++kb) {
          std::size_t real = 0, j1 = std::min(n, (kb + 1) * bk);
          for (std::size_t j = kb * bk; j < j1; ++j) {
            const bool r = p.key_mask[b * n + j] != T(0);
            key_bias[b * n + j] = r ? T(0) : neg_inf<T>;
            real += r;
          }
          kblock[b * nkb + kb] = real == 0 ? 0 : real == j1 - kb * bk ? 2 : 1;
        }
      }
    }
    if (p.attn_mask)
      for (std::size_t qb = 0; qb < nqb; ++qb)
        for (std::size_t kb = 0; kb < nkb; ++kb) {
          bool live = false;
          for (std::size_t i = qb * bq; i < std::min(n, (qb + 1) * bq) && !live; ++i)
            for (std::size_t j = kb * bk; j < std::min(n, (kb + 1) * bk) && !live; ++j)
              live = p.attn_mask[i * n + j] != neg_inf<T>;
          ablock[qb * nkb + kb] = live;
        }
  }
  std::size_t bytes() const {
    return key_bias.size() * sizeof(T) + kblock.size() + ablock.size() + kend.size() * sizeof(std::size_t) + gq.size() + gk.size();
  }
  /// Whether attn_mask leaves anything of tile (qb, kb) visible.
  bool alive(std::size_t qb, std::size_t kb) const { return ablock.size() == 0 || ablock[qb * nkb + kb]; }
  /// The query rows of sample b that are computed: all, or up to its last real key.
  std::size_t qend(const MhaProblem<T>& p, std::size_t b) const { return p.skip_padded_queries ? kend[b] : p.time; }
  /// Sets the score of key j (row[j - j0]) to -inf for j in [a, e), except the chosen global keys
  /// j <= last (gm[j] != 0).
  static void hide(T* row, std::size_t j0, std::size_t a, std::size_t e, const T* gm, std::size_t last) {
    if (!gm) {
      std::fill(row + (a - j0), row + (e - j0), neg_inf<T>);
      return;
    }
    for (std::size_t j = a; j < e; ++j)
      if (gm[j] == T(0) || j > last) row[j - j0] = neg_inf<T>;
  }
  /// The key tiles that query rows [i0, i1) of sample b (in query tile qb) see.
  TileSet key_tiles(const MhaProblem<T>& p, std::size_t b, std::size_t qb, std::size_t i0, std::size_t i1) const {
    TileSet t{mha::key_tiles(p.pattern, p.time, i0, i1, bk), nullptr, nkb, false};
    if (gq.size()) t.extra = gk.data() + b * nkb, t.all = gq[b * nqb + qb];
    return t;
  }
  /// The query tiles that see keys [j0, j1) of sample b (in key tile kb).
  TileSet query_tiles(const MhaProblem<T>& p, std::size_t b, std::size_t kb, std::size_t j0, std::size_t j1) const {
    TileSet t{mha::query_tiles(p.pattern, p.time, j0, j1, bq), nullptr, nqb, false};
    if (gq.size()) t.extra = gq.data() + b * nqb, t.all = gk[b * nkb + kb];
    return t;
  }
  /// Adds attn_mask and key padding to score tile s (rows i0.., cols j0.., row stride ld), and sets
  /// the scores the pattern hides to -inf: in row i, the columns outside [0, global_keys_end(i)) and
  /// [key_begin(i), key_end(i)), written as at most two runs per row, less the chosen global keys
  /// (global_mask) that row sees; a chosen global row hides only the keys after it, if causal.
  void apply(const MhaProblem<T>& p, std::size_t b, std::size_t kb, T* s, std::size_t ld, std::size_t i0, std::size_t rows,
             std::size_t j0, std::size_t cols) const {
    const std::size_t n = p.time, j1 = j0 + cols;
    const T* kbias = p.key_mask && kblock[b * nkb + kb] != 2 ? key_bias.data() + b * n + j0 : nullptr;
    const AttentionPattern& pat = p.pattern;
    const T* gm = p.global_mask ? p.global_mask + b * n : nullptr;
    for (std::size_t r = 0; r < rows; ++r) {
      T* row = s + r * ld;
      const std::size_t i = i0 + r;
      if (gm && gm[i] != T(0)) {
        if (pat.causal && i + 1 < j1) std::fill(row + (std::max(i + 1, j0) - j0), row + cols, neg_inf<T>);
      } else if (pat.active()) {
        const std::size_t g = std::max(j0, pat.global_keys_end(i, n));
        const std::size_t lo = std::min(j1, pat.key_begin(i)), hi = std::max(g, pat.key_end(i, n));
        if (g < lo) hide(row, j0, g, lo, gm, pat.causal ? i : n);
        if (hi < j1) hide(row, j0, hi, j1, gm, pat.causal ? i : n);
      }
      if (p.attn_mask) {
        const T* a = p.attn_mask + (i0 + r) * n + j0;
ATTN_MHA_OMP("omp simd")
        for (std::size_t j = 0; j < cols; ++j) row[j] += a[j];
      }
      if (kbias) {
ATTN_MHA_OMP("omp simd")
        for (std::size_t j = 0; j < cols; ++j) row[j] += kbias[j];
      }
    }
  }
};

/// The row stride of a scratch tile whose rows hold `cols` values: cols, or cols + 16 when cols is
/// a multiple of 64. Rows 256 bytes apart or a power-of-two multiple of that fall into a few of the
/// L1's 64 sets (512 bytes: 8 sets, 64 lines for a 128-row operand of 128 lines), so the tile
/// products that step down such a tile's rows (B, and A^T) miss the L1 on every row; one more
/// cache line per row spreads them over all sets. On a Zen 3 at head dim 128 this took the
/// backward's products from 65-80 to 83-88 GFLOP/s on one core.
inline std::size_t tile_ld(std::size_t cols) { return cols % 64 == 0 ? cols + 16 : cols; }

/// dst (hd, bc) (row stride ldd) = the transpose of rows [0, bc) of src (row stride ld, hd columns):
/// a key or value tile laid out as the B operand of tile::gemm for S = Q K^T and dP = dO V^T.
template <class T>
void transpose_tile(const T* src, std::size_t ld, std::size_t bc, std::size_t hd, T* dst, std::size_t ldd) {
  tile::transpose(src, ld, bc, hd, dst, ldd);
}

/// Rows [0, rows) of dst (row stride ldd) = those of src (row stride ld), hd wide. Float rows a
/// multiple of 8 wide are copied in AVX registers: a head's row is 64-512 bytes, and a call to
/// memmove per row cost more than the copy.
template <class T>
void strided_copy(const T* src, std::size_t ld, std::size_t rows, std::size_t hd, T* dst, std::size_t ldd) {
#if defined(ATTN_TILE_GEMM_AVX2)
  if constexpr (std::is_same_v<T, float>)
    if (hd % 8 == 0 && tile::available()) return tile::copy_rows_avx2(src, ld, rows, hd, dst, ldd);
#endif
  for (std::size_t r = 0; r < rows; ++r) std::copy_n(src + r * ld, hd, dst + r * ldd);
}

/// dst (rows, hd), row stride tile_ld(hd) = rows [0, rows) of src (row stride ld). The kernels read a
/// head's rows of qkv, out and dout through this copy: rows 3D (or D) floats apart fall into a few
/// L1 sets (a 3 KiB stride meets only 8 of 64), and a tile product that broadcasts from eight such
/// rows, or streams 128 of them as its B operand, runs 10-20% under the same product on a packed tile.
template <class T>
void pack_rows(const T* src, std::size_t ld, std::size_t rows, std::size_t hd, T* dst) {
  strided_copy(src, ld, rows, hd, dst, tile_ld(hd));
}

/// rows [0, rows) of dst (row stride ld) += src (rows, hd), row stride tile_ld(hd): pack_rows' way
/// back, for sums; with `assign`, dst = src instead (dst's old contents are not read: it may be
/// uninitialised).
template <class T>
void add_rows(const T* src, std::size_t rows, std::size_t hd, T* dst, std::size_t ld, bool assign = false) {
  const std::size_t ls = tile_ld(hd);
  if (assign) return strided_copy(src, ls, rows, hd, dst, ld);
  for (std::size_t r = 0; r < rows; ++r) {
    T* d = dst + r * ld;
    const T* a = src + r * ls;
ATTN_MHA_OMP("omp simd")
    for (std::size_t c = 0; c < hd; ++c) d[c] += a[c];
  }
}

/// rows [r0, r1) of dst (row stride ld), hd wide, = 0.
template <class T>
void zero_rows(T* dst, std::size_t r0, std::size_t r1, std::size_t hd, std::size_t ld) {
  for (std::size_t r = r0; r < r1; ++r) std::fill_n(dst + r * ld, hd, T(0));
}

/// A tile product of the flash kernels: tile::gemm, or tile::gemm_bf16 (bfloat16 operands, float
/// sums) when the problem asks for bf16 products (MhaProblem::bf16; float only).
template <class T>
void product(bool bf16, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a, std::size_t ai, std::size_t ak, const T* b,
             std::size_t ldb, bool accumulate, T* c, std::size_t ldc) {
  if constexpr (std::is_same_v<T, float>)
    if (bf16) return tile::gemm_bf16(m, n, k, alpha, a, ai, ak, b, ldb, accumulate, c, ldc);
  tile::gemm<T>(m, n, k, alpha, a, ai, ak, b, ldb, accumulate, c, ldc);
}

/// Whether a problem's tile products run in bf16: asked for (MhaProblem::bf16, float) and the CPU has
/// vdpbf16ps (cpu::isa() >= avx512_bf16). Below that level they stay FP32: rounding P and dS costs a
/// pass over every tile, which no bf16 instruction pays back there (at ATTN_ISA=avx2 on a Zen 5 it
/// made R1 training in bf16 12-16% slower than in FP32, with qkv and dO rounded once up front).
template <class T>
bool bf16_tiles(const MhaProblem<T>& p) {
  if constexpr (std::is_same_v<T, float>) return p.bf16 && tile::bf16_tiles_native();
  else return (void)p, false;
}

inline int threads_for(std::size_t tasks) {
#if defined(_OPENMP)
  return static_cast<int>(std::clamp<std::size_t>(tasks, 1, static_cast<std::size_t>(omp_get_max_threads())));
#else
  (void)tasks;
  return 1;
#endif
}

/// Query tiles per forward task, for `heads` (batch x heads) heads of nqb query tiles: a task runs
/// consecutive query tiles of one head, so that each key tile it reaches is transposed and packed
/// once for all of them rather than once per query tile (16 times over at T = 2048). As many as
/// still leave four tasks per thread, which dynamic scheduling balances over causal or windowed rows.
inline std::size_t query_group(std::size_t heads, std::size_t nqb) {
  const std::size_t want = 4 * static_cast<std::size_t>(threads_for(std::size_t(-1)));
  const std::size_t chunks = std::clamp<std::size_t>((want + heads - 1) / std::max<std::size_t>(heads, 1), 1, std::max<std::size_t>(nqb, 1));
  return (std::max<std::size_t>(nqb, 1) + chunks - 1) / chunks;
}

}  // namespace mha

/// The CPU flash kernels run every problem (their scratch is on the heap).
template <class T>
constexpr bool mha_flash_supported(cpu, const MhaProblem<T>&) {
  return true;
}

/// Flash forward. out (B, T, D) = softmax(Q K^T * scale + masks) V per head, tile by tile with a
/// running row max m and sum l (Milakov & Gimelshein, online softmax); lse (B, H, T) = m + log l,
/// +inf for a row with no visible key (its output is 0). Never forms a T x T matrix.
template <class T>
void mha_flash_forward(cpu, const MhaProblem<T>& p, T* out, T* lse, AttentionStats* stats) {
  using namespace mha;
  auto prof = profile::Scope::of<T>("attention flash forward", p.batch, p.heads, p.time, p.head_dim);
  const std::size_t n = p.time, H = p.heads, hd = p.head_dim, D = p.dim(), ld = p.ld();
  const Masks<T> masks(p, block_q, block_k);
  const std::size_t nqb = masks.nqb, nkb = masks.nkb;
  const std::size_t group = query_group(p.batch * H, nqb), nqc = (nqb + group - 1) / group;
  const long long tasks = static_cast<long long>(p.batch * H * nqc);
  const int nt = threads_for(std::size_t(tasks));
  const DropMask<T> drop(p.dropout, p.seed);
  // Row strides of the scratch tiles: lh for the hd-wide ones (Q_i, V_j, O_i), lk for those with a
  // row per key column or a column per key (S, K_j^T), whatever the tile's bc.
  const std::size_t lh = tile_ld(hd), lk = tile_ld(block_k);
  const std::size_t kvt = std::max(hd * lk, block_k * lh);  // a key tile's slot in the caches below
  const std::size_t cache = nkb * kvt;                       // a head's K^T and V tiles, each made once per task
  const std::size_t per_thread = block_q * lk + 2 * block_q + 2 * lh * block_q + 2 * cache;
  for (int t = 0; stats && t <= nt; ++t) stats->note(t == nt ? masks.bytes() : per_thread * sizeof(T));
  const bool bf16 = bf16_tiles(p);
  std::size_t tiles = 0;
  double area = 0;  // query rows x keys over the tiles computed
ATTN_MHA_OMP("omp parallel num_threads(nt)")
  {
    const Scratch<T> s(3, block_q * lk), m(4, block_q), l(5, block_q), kc(6, cache);
    const Scratch<T> qp(8, lh * block_q), vc(9, cache);  // packed Q_i; the task's K_j^T and packed V_j
    const Scratch<T> oa(7, lh * block_q);                 // O_i's running sum, packed (see below)
    const Scratch<unsigned char> made(5, nkb);            // which key tiles kc and vc hold for this task
ATTN_MHA_OMP("omp for schedule(dynamic) reduction(+ : tiles, area)")
    for (long long task = 0; task < tasks; ++task) {
      const std::size_t b = std::size_t(task) / (H * nqc), h = std::size_t(task) / nqc % H, qc = std::size_t(task) % nqc;
      std::fill_n(made.data(), nkb, static_cast<unsigned char>(0));
      for (std::size_t qb = qc * group; qb < std::min(nqb, (qc + 1) * group); ++qb) {
        const std::size_t i0 = qb * block_q, rows = std::min(block_q, n - i0), kend = masks.kend[b];
        const std::size_t qend = masks.qend(p, b), br = qend > i0 ? std::min(rows, qend - i0) : 0;
        const T *Q = p.qkv + (b * n + i0) * ld + h * hd, *K = p.qkv + b * n * ld + D + h * hd, *V = K + D;
        // O_i (br, hd) sums in oa, row stride hd: a tile of out itself (row stride D, 1 KiB at D = 256)
        // puts its 128 rows in 8 of the L1's 64 sets, and P V_j runs 10-20% slower into it.
        T* O = out + (b * n + i0) * D + h * hd;
        T* L = lse + (b * H + h) * n + i0;
        std::fill_n(oa.data(), br * lh, T(0));
        for (std::size_t r = br; r < rows; ++r) {  // skipped query rows
          std::fill_n(O + r * D, hd, T(0));
          L[r] = std::numeric_limits<T>::infinity();
        }
        if (br == 0) continue;
        std::fill_n(m.data(), br, neg_inf<T>);
        std::fill_n(l.data(), br, T(0));
        const TileSet runs = masks.key_tiles(p, b, qb, i0, i0 + br);
        pack_rows(Q, ld, br, hd, qp.data());
        for (std::size_t kb = runs.begin(); kb < runs.end(); kb = runs.next(kb)) {
          const std::size_t j0 = kb * block_k;
          if (j0 >= kend) break;  // the rest of the keys are padding
          if (!masks.kblock[b * nkb + kb] || !masks.alive(qb, kb)) continue;
          const std::size_t bc = std::min(block_k, kend - j0), ls = tile_ld(bc);
          ++tiles;
          area += double(br * bc);
          T *ktj = kc.data() + kb * kvt, *vpj = vc.data() + kb * kvt;
          if (!made[kb]) {
            transpose_tile(K + j0 * ld, ld, bc, hd, ktj, ls);
            pack_rows(V + j0 * ld, ld, bc, hd, vpj);
            made[kb] = 1;
          }
          // s (br, bc) = scale * Q_i K_j^T + masks
          product<T>(bf16, br, bc, hd, p.scale, qp.data(), lh, 1, ktj, ls, false, s.data(), ls);
          masks.apply(p, b, kb, s.data(), ls, i0, br, j0, bc);
          if (p.scores)  // kept for backward
            strided_copy(s.data(), ls, br, bc, p.scores + ((b * H + h) * n + i0) * n + j0, n);
          for (std::size_t r = 0; r < br; ++r) {
            T* row = s.data() + r * ls;
            const auto step = elem::online_softmax_step(m[r], row_max(row, bc));
            if (step.m_new == neg_inf<T>) {  // nothing visible yet in this row
              std::fill_n(row, bc, T(0));
              continue;
            }
            l[r] = l[r] * step.alpha + exp_shift_sum(row, bc, step.m_new);
            m[r] = step.m_new;
            if (step.alpha != T(1))
              for (std::size_t c = 0; c < hd; ++c) oa[r * lh + c] *= step.alpha;
            if (drop.active) {
              const std::uint64_t base = ((b * H + h) * n + i0 + r) * n + j0;
              for (std::size_t j = 0; j < bc; ++j) row[j] *= drop(base + j);
            }
          }
          // O_i += P V_j: (br, bc) x (bc, hd)
          product<T>(bf16, br, hd, bc, T(1), s.data(), ls, 1, vpj, lh, true, oa.data(), lh);
        }
        for (std::size_t r = 0; r < br; ++r) {
          T* o = O + r * D;
          L[r] = elem::log_sum_exp(m[r], l[r]);
          if (l[r] > T(0)) {
            const T inv = T(1) / l[r];
            for (std::size_t c = 0; c < hd; ++c) o[c] = oa[r * lh + c] * inv;
          } else {
            std::fill_n(o, hd, T(0));
          }
        }
      }
    }
  }
  if (stats) stats->tiles += tiles;
  prof.set_flops(4.0 * area * double(hd));  // S = Q K^T and O += P V over the tiles computed
}

/// Flash backward (FlashAttention-2, Dao 2023): per head, D_i = rowsum(dO_i * O_i); for each key
/// tile j and query tile i, P = exp(S - L) recomputed, dV_j += (P*Z)^T dO_i, dP = (dO_i V_j^T)*Z,
/// dS = P * (dP - D_i), dQ_i += scale dS K_j, dK_j += scale dS^T Q_i (Z: dropout factors).
/// Accumulates into dqkv (B, T, 3D); with p.clear_grad, dqkv's contents are ignored (it may be
/// uninitialised) and it receives the gradient alone. With p.scores (filled by the forward), S is
/// read rather than recomputed: one tile product in five fewer.
template <class T>
void mha_flash_backward(cpu, const MhaProblem<T>& p, const T* out, const T* dout, const T* lse, T* dqkv, AttentionStats* stats) {
  using namespace mha;
  auto prof = profile::Scope::of<T>("attention flash backward", p.batch, p.heads, p.time, p.head_dim);
  const std::size_t n = p.time, H = p.heads, hd = p.head_dim, D = p.dim(), ld = p.ld();
  const Masks<T> masks(p, block_q, block_k);
  const std::size_t nkb = masks.nkb;
  const long long tasks = static_cast<long long>(p.batch * H);
  const int nt = threads_for(std::size_t(tasks));
  const DropMask<T> drop(p.dropout, p.seed);
  const std::size_t rows = masks.nqb * block_q;  // a head's Q and dO rows, packed once per task
  const std::size_t lh = tile_ld(hd), lk = tile_ld(block_k);  // scratch row strides, as in the forward
  const std::size_t per_thread = 2 * block_q * lk + n + 2 * hd * lk + 3 * lh * block_k + 3 * lh * rows;
  for (int t = 0; stats && t <= nt; ++t) stats->note(t == nt ? masks.bytes() : per_thread * sizeof(T));
  const bool bf16 = bf16_tiles(p);
  std::size_t tiles = 0;
  double area = 0;  // query rows x keys over the tiles computed
ATTN_MHA_OMP("omp parallel num_threads(nt)")
  {
    const Scratch<T> pt(3, block_q * lk), dp(4, block_q * lk), Dv(5, n);
    const Scratch<T> kt(6, hd * lk), vt(7, hd * lk);
    const Scratch<T> qp(8, lh * rows), gp(9, lh * rows), kp(10, lh * block_k);  // the head's packed Q and dO; packed K_j
    // The sums of dQ (the head's rows), dK_j and dV_j, contiguous: the head's slices of dqkv have rows
    // 3D floats apart (3 KiB at D = 256), which put a key tile's 128 rows in 8 of the L1's 64 sets
    // and a head's dQ rows in 128 of the L2's 1024: the products into them ran 15-25% slower.
    const Scratch<T> dqa(11, lh * rows), dka(12, lh * block_k), dva(13, lh * block_k);
ATTN_MHA_OMP("omp for schedule(dynamic) reduction(+ : tiles, area)")
    for (long long task = 0; task < tasks; ++task) {
      const std::size_t b = std::size_t(task) / H, h = std::size_t(task) % H;
      const std::size_t qoff = b * n * ld + h * hd, ooff = b * n * D + h * hd;  // Q, K, V at qoff, +D, +2D
      const T *Q = p.qkv + qoff, *K = Q + D, *V = K + D, *O = out + ooff, *dO = dout + ooff;
      T *dQ = dqkv + qoff, *dK = dQ + D, *dV = dK + D;
      const T* L = lse + (b * H + h) * n;
      const std::size_t kend = masks.kend[b], qend = masks.qend(p, b);
      // With p.clear_grad every row of this task's slices of dQ, dK and dV is written once, by its
      // sum (add_rows' assign) or as 0 (rows with no sum), and never read.
      const bool put = p.clear_grad;
      pack_rows(Q, ld, qend, hd, qp.data());
      pack_rows(dO, D, qend, hd, gp.data());
      for (std::size_t i = 0; i < qend; ++i) {  // D_i = rowsum(dO_i * O_i), dO_i from its packed copy
        T acc = 0;
        for (std::size_t c = 0; c < hd; ++c) acc += gp[i * lh + c] * O[i * D + c];
        Dv[i] = acc;
      }
      std::fill_n(dqa.data(), qend * lh, T(0));
      for (std::size_t kb = 0; kb < nkb; ++kb) {
        const std::size_t j0 = kb * block_k;
        if (j0 >= kend) break;  // the rest of the keys are padding: no weight, no gradient
        const std::size_t bc = std::min(block_k, kend - j0), ls = tile_ld(bc);
        if (!masks.kblock[b * nkb + kb]) {
          if (put) {
            zero_rows(dK, j0, j0 + bc, hd, ld);
            zero_rows(dV, j0, j0 + bc, hd, ld);
          }
          continue;
        }
        if (!p.scores) transpose_tile(K + j0 * ld, ld, bc, hd, kt.data(), ls);  // K^T for recomputing the scores
        transpose_tile(V + j0 * ld, ld, bc, hd, vt.data(), ls);
        pack_rows(K + j0 * ld, ld, bc, hd, kp.data());
        std::fill_n(dka.data(), bc * lh, T(0));
        std::fill_n(dva.data(), bc * lh, T(0));
        const TileSet runs = masks.query_tiles(p, b, kb, j0, j0 + bc);
        for (std::size_t qb = runs.begin(); qb < runs.end(); qb = runs.next(qb)) {
          const std::size_t i0 = qb * block_q;
          if (i0 >= qend) break;  // skipped query rows
          if (!masks.alive(qb, kb)) continue;
          const std::size_t br = std::min(block_q, qend - i0);
          ++tiles;
          area += double(br * bc);
          const T *Qi = qp.data() + i0 * lh, *dOi = gp.data() + i0 * lh;
          if (p.scores) {  // the forward's scores of this tile
            strided_copy(p.scores + ((b * H + h) * n + i0) * n + j0, n, br, bc, pt.data(), ls);
          } else {
            product<T>(bf16, br, bc, hd, p.scale, Qi, lh, 1, kt.data(), ls, false, pt.data(), ls);
            masks.apply(p, b, kb, pt.data(), ls, i0, br, j0, bc);
          }
          for (std::size_t r = 0; r < br; ++r) exp_shift_sum(pt.data() + r * ls, bc, L[i0 + r]);
          // dP (br, bc) = dO_i V_j^T
          product<T>(bf16, br, bc, hd, T(1), dOi, lh, 1, vt.data(), ls, false, dp.data(), ls);
          for (std::size_t r = 0; r < br; ++r) {
            T* pr = pt.data() + r * ls;
            T* gr = dp.data() + r * ls;
            const T di = Dv[i0 + r];
            if (drop.active) {
              const std::uint64_t base = ((b * H + h) * n + i0 + r) * n + j0;
              for (std::size_t j = 0; j < bc; ++j) {
                const T z = drop(base + j);
                gr[j] = elem::attention_score_grad(pr[j], gr[j] * z, di);
                pr[j] *= z;
              }
            } else {
ATTN_MHA_OMP("omp simd")
              for (std::size_t j = 0; j < bc; ++j) gr[j] = elem::attention_score_grad(pr[j], gr[j], di);
            }
          }
          // dV_j += P^T dO_i; dQ_i += scale dS K_j; dK_j += scale dS^T Q_i
          product<T>(bf16, bc, hd, br, T(1), pt.data(), 1, ls, dOi, lh, true, dva.data(), lh);
          product<T>(bf16, br, hd, bc, p.scale, dp.data(), ls, 1, kp.data(), lh, true, dqa.data() + i0 * lh, lh);
          product<T>(bf16, bc, hd, br, p.scale, dp.data(), 1, ls, Qi, lh, true, dka.data(), lh);
        }
        add_rows(dka.data(), bc, hd, dK + j0 * ld, ld, put);
        add_rows(dva.data(), bc, hd, dV + j0 * ld, ld, put);
      }
      add_rows(dqa.data(), qend, hd, dQ, ld, put);
      if (put) {
        zero_rows(dQ, qend, n, hd, ld);
        zero_rows(dK, kend, n, hd, ld);
        zero_rows(dV, kend, n, hd, ld);
      }
    }
  }
  if (stats) stats->tiles += tiles;
  // dV, dP, dQ and dK over the tiles computed, and S again unless the forward kept it
  prof.set_flops(2.0 * area * double(hd) * (p.scores ? 4.0 : 5.0));
}

/// Naive forward: per head, weights (B, H, T, T) = softmax(Q K^T * scale + masks) (a row with no
/// visible key is all zeros), out = (weights * Z) V.
template <class T>
void mha_naive_forward(cpu, const MhaProblem<T>& p, T* out, T* weights, AttentionStats* stats) {
  using namespace mha;
  const auto prof = profile::Scope::of<T>("attention naive forward", p.batch, p.heads, p.time, p.head_dim);
  const std::size_t n = p.time, H = p.heads, hd = p.head_dim, D = p.dim(), ld = p.ld();
  const Masks<T> masks(p, n ? n : 1, n ? n : 1);
  const DropMask<T> drop(p.dropout, p.seed);
  const long long tasks = static_cast<long long>(p.batch * H);
  const int nt = threads_for(std::size_t(tasks));
  for (int t = 0; stats && t <= nt; ++t) stats->note(t == nt ? masks.bytes() : drop.active ? n * n * sizeof(T) : 0);
ATTN_MHA_OMP("omp parallel num_threads(nt)")
  {
    std::vector<T> pz(drop.active ? n * n : 0);
ATTN_MHA_OMP("omp for schedule(dynamic)")
    for (long long task = 0; task < tasks; ++task) {
      const std::size_t b = std::size_t(task) / H, h = std::size_t(task) % H;
      const T *Q = p.qkv + b * n * ld + h * hd, *K = Q + D, *V = K + D;
      T* P = weights + std::size_t(task) * n * n;
      cpu::gemm<T>(Trans::no, Trans::yes, int(n), int(n), int(hd), p.scale, Q, int(ld), K, int(ld), T(0), P, int(n));
      masks.apply(p, b, 0, P, n, 0, n, 0, n);
      for (std::size_t i = 0; i < n; ++i) {
        T* row = P + i * n;
        const T mx = row_max(row, n);
        if (mx == neg_inf<T>) {
          std::fill_n(row, n, T(0));
          continue;
        }
        const T inv = T(1) / exp_shift_sum(row, n, mx);
        for (std::size_t j = 0; j < n; ++j) row[j] *= inv;
      }
      const T* Pd = P;
      if (drop.active) {
        for (std::size_t i = 0; i < n * n; ++i) pz[i] = P[i] * drop(std::size_t(task) * n * n + i);
        Pd = pz.data();
      }
      cpu::gemm<T>(Trans::no, Trans::no, int(n), int(hd), int(n), T(1), Pd, int(n), V, int(ld), T(0), out + b * n * D + h * hd,
                   int(D));
    }
  }
}

/// Naive backward from the saved weights P: dV += (P*Z)^T dO, dP = (dO V^T)*Z,
/// dS = P * (dP - rowsum(P * dP)) (softmax Jacobian), dQ += scale dS K, dK += scale dS^T Q.
template <class T>
void mha_naive_backward(cpu, const MhaProblem<T>& p, const T* weights, const T* dout, T* dqkv, AttentionStats* stats) {
  using namespace mha;
  const auto prof = profile::Scope::of<T>("attention naive backward", p.batch, p.heads, p.time, p.head_dim);
  const std::size_t n = p.time, H = p.heads, hd = p.head_dim, D = p.dim(), ld = p.ld();
  const DropMask<T> drop(p.dropout, p.seed);
  const long long tasks = static_cast<long long>(p.batch * H);
  const int nt = threads_for(std::size_t(tasks));
  if (stats)
    for (int t = 0; t < nt; ++t) stats->note((drop.active ? 2 : 1) * n * n * sizeof(T));
ATTN_MHA_OMP("omp parallel num_threads(nt)")
  {
    std::vector<T> dp(n * n), pz(drop.active ? n * n : 0);
ATTN_MHA_OMP("omp for schedule(dynamic)")
    for (long long task = 0; task < tasks; ++task) {
      const std::size_t b = std::size_t(task) / H, h = std::size_t(task) % H;
      const std::size_t qoff = b * n * ld + h * hd;
      const T *Q = p.qkv + qoff, *K = Q + D, *V = K + D, *dO = dout + b * n * D + h * hd;
      T *dQ = dqkv + qoff, *dK = dQ + D, *dV = dK + D;
      const T* P = weights + std::size_t(task) * n * n;
      const T* Pd = P;
      cpu::gemm<T>(Trans::no, Trans::yes, int(n), int(n), int(hd), T(1), dO, int(D), V, int(ld), T(0), dp.data(), int(n));
      if (drop.active) {
        for (std::size_t i = 0; i < n * n; ++i) {
          const T z = drop(std::size_t(task) * n * n + i);
          pz[i] = P[i] * z;
          dp[i] *= z;
        }
        Pd = pz.data();
      }
      cpu::gemm<T>(Trans::yes, Trans::no, int(n), int(hd), int(n), T(1), Pd, int(n), dO, int(D), T(1), dV, int(ld));
      for (std::size_t i = 0; i < n; ++i) {
        const T* pr = P + i * n;
        T* gr = dp.data() + i * n;
        T s = 0;
ATTN_MHA_OMP("omp simd reduction(+ : s)")
        for (std::size_t j = 0; j < n; ++j) s += pr[j] * gr[j];
ATTN_MHA_OMP("omp simd")
        for (std::size_t j = 0; j < n; ++j) gr[j] = pr[j] * (gr[j] - s);
      }
      cpu::gemm<T>(Trans::no, Trans::no, int(n), int(hd), int(n), p.scale, dp.data(), int(n), K, int(ld), T(1), dQ, int(ld));
      cpu::gemm<T>(Trans::yes, Trans::no, int(n), int(hd), int(n), p.scale, dp.data(), int(n), Q, int(ld), T(1), dK, int(ld));
    }
  }
}

}  // namespace attn::kernels

namespace attn {
#define ATTN_INSTANTIATE_CPU_ATTENTION(X, T)                                                                               \
  X template void kernels::mha_flash_forward<T>(cpu, const kernels::MhaProblem<T>&, T*, T*, AttentionStats*);              \
  X template void kernels::mha_flash_backward<T>(cpu, const kernels::MhaProblem<T>&, const T*, const T*, const T*, T*,      \
                                                 AttentionStats*);                                                         \
  X template void kernels::mha_naive_forward<T>(cpu, const kernels::MhaProblem<T>&, T*, T*, AttentionStats*);              \
  X template void kernels::mha_naive_backward<T>(cpu, const kernels::MhaProblem<T>&, const T*, const T*, T*, AttentionStats*);
ATTN_EXTERN_TEMPLATES(ATTN_INSTANTIATE_CPU_ATTENTION)

}  // namespace attn

#undef ATTN_MHA_OMP
