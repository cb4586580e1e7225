// SPDX-License-Identifier: MIT
// attn's caching allocator for host memory: tensor buffers of the cpu backend, the control blocks
// of tensor storage, and VarData. Freed blocks are kept in size classes and handed out again, so
// a training or inference loop whose shapes repeat stops calling the system allocator after its
// first step.
//   attn::cpu::pool_stats().system_allocations;  attn::cpu::empty_cache();
//   attn::cpu::reset_pool_peak(); train_step(); attn::cpu::pool_stats().peak_bytes;
//   attn::cpu::pool_stats().saved_peak_bytes;  // at the start of the largest backward pass
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <new>
#include <vector>
#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace attn {

/// Counters of the host pool (attn::cpu::pool_stats()).
struct PoolStats {
  std::uint64_t requests = 0;            // blocks handed out
  std::uint64_t system_allocations = 0;  // of those, blocks the system allocator had to provide
  std::size_t cached_bytes = 0;          // free blocks kept for reuse
  std::size_t in_use_bytes = 0;          // blocks handed out and not yet given back (block sizes, not requests)
  std::size_t peak_bytes = 0;            // the most in_use_bytes has been since the last reset_pool_peak()
  // The most in_use_bytes has been when a backward pass began (Tape::backward and the other entry
  // points, among them each attn::checkpoint recomputation's own backward) since the last
  // reset_pool_peak(), and at least in_use_bytes at that reset: the values kept for backward at
  // their largest, with whatever else was held then (parameters, gradients already computed).
  // Values are what a tape keeps until a backward pass starts, so this is their peak; peak_bytes
  // adds the gradients and scratch that backward itself allocates.
  std::size_t saved_peak_bytes = 0;
  std::size_t limit_bytes = 0;           // at most this much is kept; beyond it blocks are freed
  bool enabled = false;                  // false: every request goes to the system allocator
  bool huge_pages = false;               // blocks of huge_page_min bytes or more are asked to be huge pages
};

namespace detail {

/// Size classes: multiples of 64 bytes up to 1 KiB, then eight classes per power of two (a block
/// is at most 12.5 % larger than asked for). Each class keeps a singly linked list of its free
/// blocks, threaded through the blocks themselves, so the pool never allocates bookkeeping of its
/// own. All blocks are 64-byte aligned. Thread-safe (one mutex; the lists are touched a few
/// hundred times per training step, not per element).
///
/// The limit on cached bytes is ATTN_CPU_POOL_MB (default 512; 0 turns caching off). Under
/// AddressSanitizer caching is off by default, so that use-after-free stays detectable. A loop
/// whose batches vary in length leaves free blocks in many classes; the limit bounds what they hold.
///
/// On Linux a block of 4 MiB or more starts on a 2 MiB boundary, and the whole 2 MiB pages of its
/// first request are marked for transparent huge pages (madvise MADV_HUGEPAGE; the kernel's
/// default policy, "madvise", backs only such marked memory with them). A training step streams
/// tens of MB of activations, gradients and optimizer state, more than the TLB maps in 4 KiB
/// pages; on a 2-core Zen 5 this took the R1 and R2 training steps 1-5% faster, at 1-2 MB more
/// peak RSS (benchmarks/README.md). ATTN_CPU_POOL_HUGEPAGES=0 turns it off.
class HostPool {
 public:
  static constexpr std::size_t alignment = 64;
  static constexpr std::size_t huge_page = std::size_t(2) << 20;
  static constexpr std::size_t huge_page_min = 2 * huge_page;

  /// The process-wide pool. Never destroyed: tensors with static storage duration may be freed
  /// after every other static object.
  static HostPool& get() {
    static HostPool* pool = new HostPool();
    return *pool;
  }

  void* allocate(std::size_t bytes) {
    std::size_t cls = 0;
    const std::size_t r = round(bytes, cls);
    {
      std::lock_guard<std::mutex> lock(m_);
      ++requests_;
      if (void* p = free_[cls]) {  // always empty when caching is off
        free_[cls] = *static_cast<void**>(p);  // the next free block, stored in this one
        cached_ -= r;
        hand_out(r);
        return p;
      }
      ++system_;
    }
    void* p = system_allocate(r, bytes);
    if (!p) {
      release();  // give the cache back and try once more
      p = system_allocate(r, bytes);
      if (!p) throw std::bad_alloc();
    }
    std::lock_guard<std::mutex> lock(m_);
    hand_out(r);
    return p;
  }

  void deallocate(void* p, std::size_t bytes) noexcept {
    if (!p) return;
    std::size_t cls = 0;
    const std::size_t r = round(bytes, cls);
    {
      std::lock_guard<std::mutex> lock(m_);
      in_use_ -= r;
      if (enabled_ && cached_ + r <= limit_) {
        *static_cast<void**>(p) = free_[cls];  // intrusive list: the pool itself never allocates
        free_[cls] = p;
        cached_ += r;
        return;
      }
    }
    std::free(p);
  }

  /// Frees every cached block.
  void release() noexcept {
    std::lock_guard<std::mutex> lock(m_);
    for (auto& head : free_) {
      while (head) {
        void* next = *static_cast<void**>(head);
        std::free(head);
        head = next;
      }
    }
    cached_ = 0;
  }

  PoolStats stats() const {
    std::lock_guard<std::mutex> lock(m_);
    return {.requests = requests_,
            .system_allocations = system_,
            .cached_bytes = cached_,
            .in_use_bytes = in_use_,
            .peak_bytes = peak_,
            .saved_peak_bytes = saved_peak_,
            .limit_bytes = limit_,
            .enabled = enabled_,
            .huge_pages = huge_};
  }

  /// Starts a new peak: peak_bytes and saved_peak_bytes become the bytes in use now.
  void reset_peak() noexcept {
    std::lock_guard<std::mutex> lock(m_);
    peak_ = in_use_;
    saved_peak_ = in_use_;
  }

  /// A backward pass begins: saved_peak_bytes takes the bytes in use now if they are more.
  void note_backward_start() noexcept {
    std::lock_guard<std::mutex> lock(m_);
    saved_peak_ = std::max(saved_peak_, in_use_);
  }

  /// The block size a request of `bytes` gets, and its class.
  static std::size_t round(std::size_t bytes, std::size_t& cls) noexcept {
    if (bytes <= 1024) {
      const std::size_t r = bytes == 0 ? 64 : (bytes + 63) / 64 * 64;
      cls = r / 64 - 1;  // 0 .. 15
      return r;
    }
    const int e = 63 - __builtin_clzll(static_cast<unsigned long long>(bytes - 1));  // bytes in (2^e, 2^(e+1)]
    const std::size_t step = std::size_t(1) << (e - 3);
    const std::size_t r = (bytes + step - 1) / step * step;
    cls = 16 + std::size_t(e - 10) * 8 + (r / step - 9);
    return r;
  }

 private:
  HostPool() {
#if defined(__SANITIZE_ADDRESS__)
    std::size_t mb = 0;
#else
    std::size_t mb = 512;
#endif
    if (const char* s = std::getenv("ATTN_CPU_POOL_MB"); s && *s) {
      char* end = nullptr;
      const unsigned long long v = std::strtoull(s, &end, 10);
      if (end && *end == '\0') mb = static_cast<std::size_t>(v);  // ill-formed values keep the default
    }
    limit_ = mb << 20;
    enabled_ = mb > 0;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    const char* h = std::getenv("ATTN_CPU_POOL_HUGEPAGES");
    huge_ = !(h && h[0] == '0' && h[1] == '\0');
#endif
  }

  // A block of r bytes from the system allocator for a request of `bytes` (nullptr if it has none):
  // 64-byte aligned, or for r >= huge_page_min with huge pages on, 2 MiB aligned with the whole
  // 2 MiB pages that the request covers marked for transparent huge pages. Not the tail: a huge page
  // is backed in full on its first touch, and the block's size class leaves up to 12.5% of it
  // unused (marking whole blocks raised R4-b64's peak RSS from 60 to 74 MB).
  void* system_allocate(std::size_t r, [[maybe_unused]] std::size_t bytes) const noexcept {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (huge_ && r >= huge_page_min) {
      void* p = nullptr;
      if (::posix_memalign(&p, huge_page, r) != 0) return nullptr;
      if (bytes >= huge_page) ::madvise(p, bytes / huge_page * huge_page, MADV_HUGEPAGE);  // advice: may fail harmlessly
      return p;
    }
#endif
    return std::aligned_alloc(alignment, r);
  }

  // Counts a block of r bytes handed out (m_ held).
  void hand_out(std::size_t r) noexcept {
    in_use_ += r;
    peak_ = std::max(peak_, in_use_);
  }

  static constexpr std::size_t classes = 16 + 54 * 8;  // up to 2^64 bytes
  mutable std::mutex m_;
  std::array<void*, classes> free_{};  // per class: the first free block; each holds the next
  std::size_t cached_ = 0, limit_ = 0;
  std::size_t in_use_ = 0, peak_ = 0;  // handed-out bytes, counted whether caching is on or off
  std::size_t saved_peak_ = 0;         // the most in_use_ at the start of a backward pass
  std::uint64_t requests_ = 0, system_ = 0;
  bool enabled_ = true;
  bool huge_ = false;
};

/// A standard allocator over HostPool, for control blocks and VarData (std::allocate_shared).
template <class T>
struct PoolAllocator {
  static_assert(alignof(T) <= HostPool::alignment, "attn::detail::PoolAllocator: over-aligned type");
  using value_type = T;
  PoolAllocator() noexcept = default;
  template <class U>
  PoolAllocator(const PoolAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) { return static_cast<T*>(HostPool::get().allocate(n * sizeof(T))); }
  void deallocate(T* p, std::size_t n) noexcept { HostPool::get().deallocate(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const PoolAllocator<U>&) const noexcept {
    return true;
  }
};

}  // namespace detail

/// A std::vector whose memory comes from the host pool: for per-call bookkeeping on hot paths
/// (the LSTM's packing plan), so that it stops reaching the system allocator after warm-up.
template <class T>
using PoolVector = std::vector<T, detail::PoolAllocator<T>>;

}  // namespace attn
