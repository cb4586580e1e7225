// SPDX-License-Identifier: MIT
// Op-level timing of the CPU backend: where a training step's time goes, by op and shape, without
// an external profiler. Off unless enabled: ATTN_PROFILE=1 in the environment (the table is then
// printed to stderr when the program exits), or attn::profile::enable() in code.
//   ATTN_PROFILE=1 build/benchmarks/bench --case R1-h1
//   attn::profile::enable(); ...; attn::profile::report(stdout);   // or entries(), reset()
// Recorded: cpu::gemm (each call, by transposition and m x n x k) and cpu::gemm_strided_batched
// (batch x m x n x k, its products inner), the linear op's row-split GEMMs,
// the attention kernels (flash and naive, forward and backward, by batch x heads x T x head dim),
// the LSTM layer's passes and cells, layer norm, softmax rows, the embedding's gather and gradient,
// the masked mean and the optimizers' updates. Each record is a call's wall time on the thread that
// made it. A call made inside another recorded op or inside an OpenMP parallel region is "inner": it
// is counted on each thread that made it (two threads of a row-split GEMM give two calls), and only
// the outer ops' times add up to the time the program spent in recorded ops (summed over the
// program's own threads where several of them run ops at once). GFLOP/s is shown where
// the op has an exact FLOP count: the GEMMs (2 m n k) and the flash kernels (their tile products, by
// the tiles they computed). A disabled profile costs one relaxed atomic load per call; an enabled
// one well under a microsecond per call, so only the smallest ops (an LSTM cell of a few rows) read
// high.
#pragma once
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace attn::profile {

/// One op and shape: the calls recorded over every thread.
struct Entry {
  std::string op;
  std::vector<long long> shape;  // the op's extents, as its report line prints them (m x n x k, ...)
  bool inner = false;            // made inside another recorded op or a parallel region
  long long calls = 0;
  double seconds = 0;  // summed over the calls (and so over the threads that made them)
  double flops = 0;    // 0: the op has no FLOP count
};

namespace detail {

struct Key {
  std::string_view op;
  bool f64;
  bool inner;
  int dims;
  std::array<long long, 4> shape;
  bool operator<(const Key& o) const {
    return std::tie(op, f64, inner, dims, shape) < std::tie(o.op, o.f64, o.inner, o.dims, o.shape);
  }
};
struct Stat {
  long long calls = 0;
  double seconds = 0, flops = 0;
};
/// One thread's records. Its mutex is the recording thread's own but for entries() and reset().
struct ThreadLog {
  std::mutex mu;
  std::map<Key, Stat> stats;
};

inline bool env_enabled() {
  const char* e = std::getenv("ATTN_PROFILE");
  return e && *e && std::string_view(e) != "0";
}

/// Appends printf-style output to s, however long it is.
__attribute__((format(printf, 2, 3))) inline void appendf(std::string& s, const char* f, ...) {
  std::va_list a, b;
  va_start(a, f);
  va_copy(b, a);
  const int n = std::vsnprintf(nullptr, 0, f, a);
  va_end(a);
  if (n > 0) {
    const std::size_t old = s.size();
    s.resize(old + std::size_t(n) + 1);
    std::vsnprintf(s.data() + old, std::size_t(n) + 1, f, b);
    s.resize(old + std::size_t(n));
  }
  va_end(b);
}

struct Registry;
inline void print(Registry& r, std::FILE* out);

/// Every thread's log. A log outlives its thread (a pool thread's records stay); an exited thread's
/// log is handed to the next new thread (spare), so that a program that makes a thread per task
/// keeps as many logs as it ever ran threads at once.
struct Registry {
  std::mutex mu;
  std::vector<std::unique_ptr<ThreadLog>> logs;
  std::vector<ThreadLog*> spare;
};
/// The registry, never destroyed: a thread may record while the program exits (a static's
/// destructor, a detached or still-joining thread), after the report is printed. With ATTN_PROFILE
/// set, the report is printed at exit (std::atexit, registered when the registry is made: before
/// the destructors of statics made earlier, after those of statics made later).
inline Registry& registry() {
  static Registry& r = [] () -> Registry& {
    Registry* p = new Registry;
    if (env_enabled()) std::atexit([] { print(registry(), stderr); });
    return *p;
  }();
  return r;
}
inline std::atomic<bool>& flag() {
  static std::atomic<bool> on{env_enabled()};
  return on;
}
inline ThreadLog& thread_log() {
  thread_local ThreadLog* log = nullptr;  // trivially destructible: valid to read until the thread ends
  if (!log) {
    {
      Registry& r = registry();
      const std::lock_guard<std::mutex> lock(r.mu);
      if (!r.spare.empty()) {
        log = r.spare.back();
        r.spare.pop_back();
      } else {
        r.logs.push_back(std::make_unique<ThreadLog>());
        log = r.logs.back().get();
      }
    }
    // Hands the log back when the thread ends. A record made after that (by another thread_local's
    // destructor) takes a log again, which then stays with the registry.
    struct Release {
      ~Release() {
        if (!log) return;
        Registry& r = registry();
        const std::lock_guard<std::mutex> lock(r.mu);
        r.spare.push_back(log);
        log = nullptr;
      }
    };
    thread_local Release release;
  }
  return *log;
}
/// Recorded ops open on this thread: a call made inside one is inner.
inline int& depth() {
  thread_local int d = 0;
  return d;
}

}  // namespace detail

/// Whether calls are being recorded.
inline bool enabled() noexcept { return detail::flag().load(std::memory_order_relaxed); }
/// Starts (or stops) recording; what was recorded stays until reset().
inline void enable(bool on = true) noexcept {
  detail::flag().store(on, std::memory_order_relaxed);
}

/// Times one call from construction to destruction when the profile is enabled (checked once, at
/// construction): an op, up to 4 extents, and whether its elements are double (the report appends
/// " double"). set_flops() gives the call's FLOP count. The op's name must outlive the profile (a
/// string literal): the logs keep the pointer, not a copy.
///   const auto prof = attn::profile::Scope::of<T>("layer norm forward", rows, d);
class Scope {
 public:
  Scope(const char* op, std::initializer_list<long long> shape, bool f64 = false, bool record = true) noexcept
      : on_(record && enabled()) {
    if (!on_) return;
    op_ = op ? op : "?";
    f64_ = f64;
    dims_ = int(std::min<std::size_t>(shape.size(), 4));
    std::copy_n(shape.begin(), dims_, shape_.begin());
#if defined(_OPENMP)
    inner_ = detail::depth() > 0 || omp_in_parallel();
#else
    inner_ = detail::depth() > 0;
#endif
    ++detail::depth();
    t0_ = std::chrono::steady_clock::now();
  }
  /// A scope for an op on elements of type T with these extents (integers of any type).
  template <class T, class... I>
  static Scope of(const char* op, I... extents) noexcept {
    return of_if<T>(true, op, extents...);
  }
  /// As of<T>, recording only when `record` (a host backend's op; a device's returns before its work ends).
  template <class T, class... I>
  static Scope of_if(bool record, const char* op, I... extents) noexcept {
    static_assert(sizeof...(I) <= 4, "profile::Scope: at most 4 extents");
    return Scope(op, {static_cast<long long>(extents)...}, std::is_same_v<T, double>, record);
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;
  ~Scope() {
    if (!on_) return;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    --detail::depth();
    try {
      detail::ThreadLog& log = detail::thread_log();
      const std::lock_guard<std::mutex> lock(log.mu);
      detail::Stat& st = log.stats[detail::Key{op_, f64_, inner_, dims_, shape_}];
      ++st.calls;
      st.seconds += s;
      st.flops += flops_;
    } catch (...) {  // out of memory for a record: the profile misses this call, the program goes on
    }
  }
  void set_flops(double f) noexcept { flops_ = f; }

 private:
  bool on_;
  bool f64_ = false;
  bool inner_ = false;
  int dims_ = 0;
  const char* op_ = "";
  double flops_ = 0;
  std::array<long long, 4> shape_{};
  std::chrono::steady_clock::time_point t0_{};
};

namespace detail {
/// The order of entries(): outer ops first, each group by total time.
inline bool outer_first_by_time(const Entry& a, const Entry& b) {
  return a.inner != b.inner ? !a.inner : a.seconds > b.seconds;
}

inline std::vector<Entry> collect(Registry& r) {
  std::map<Key, Stat> all;
  {
    const std::lock_guard<std::mutex> lock(r.mu);
    for (auto& log : r.logs) {
      const std::lock_guard<std::mutex> l(log->mu);
      for (const auto& [k, v] : log->stats) {
        Stat& s = all[k];
        s.calls += v.calls;
        s.seconds += v.seconds;
        s.flops += v.flops;
      }
    }
  }
  std::vector<Entry> out;
  for (const auto& [k, v] : all)
    out.push_back(Entry{std::string(k.op) + (k.f64 ? " double" : ""), std::vector<long long>(k.shape.begin(), k.shape.begin() + k.dims), k.inner, v.calls,
                        v.seconds, v.flops});
  std::stable_sort(out.begin(), out.end(), outer_first_by_time);
  return out;
}
inline std::string format(const std::vector<Entry>& es);
}  // namespace detail

/// Everything recorded so far, merged over the threads: outer ops first, each group by total time.
inline std::vector<Entry> entries() { return detail::collect(detail::registry()); }

/// Forgets what was recorded (recording goes on if enabled).
inline void reset() {
  detail::Registry& r = detail::registry();
  const std::lock_guard<std::mutex> lock(r.mu);
  for (auto& log : r.logs) {
    const std::lock_guard<std::mutex> l(log->mu);
    log->stats.clear();
  }
}

/// Two tables of entries(), each op over all its shapes and then by shape (the 40 outer and 20 inner
/// entries with the most time): calls, total and per-call milliseconds, the share of the outer
/// ops' total time (outer ops only), and GFLOP/s where counted.
inline std::string report_string() { return detail::format(entries()); }

inline void report(std::FILE* out = stderr) { std::fputs(report_string().c_str(), out); }

inline std::string detail::format(const std::vector<Entry>& es) {
  double outer = 0;
  for (const Entry& e : es)
    if (!e.inner) outer += e.seconds;
  // The same ops over all their shapes (a program with varying batch shapes records many), in the
  // order of entries(): outer first, each group by total time.
  std::vector<Entry> ops;
  for (const Entry& e : es) {
    auto it = std::find_if(ops.begin(), ops.end(), [&](const Entry& o) { return o.op == e.op && o.inner == e.inner; });
    if (it == ops.end()) {
      ops.push_back(Entry{e.op, {}, e.inner, 0, 0, 0});
      it = ops.end() - 1;
    }
    it->calls += e.calls, it->seconds += e.seconds, it->flops += e.flops;
  }
  std::stable_sort(ops.begin(), ops.end(), outer_first_by_time);
  std::string s = "attn profile: each call's wall time on its thread; inner: inside another recorded op or a parallel\n"
                  "region, counted on each thread that made it (not part of the outer total)\n";
  const auto row = [&](const Entry& e, const char* shape) {
    std::string op, share, rate;
    appendf(op, "%s%s%s", e.inner ? "  " : "", e.op.c_str(), e.inner ? " (inner)" : "");
    if (!e.inner && outer > 0) appendf(share, "%.1f%%", 100.0 * e.seconds / outer);
    if (e.flops > 0 && e.seconds > 0) appendf(rate, "%.1f", e.flops / e.seconds * 1e-9);
    appendf(s, "%-34s %-20s %9lld %11.3f %10.4f %7s %9s\n", op.c_str(), shape, e.calls, e.seconds * 1e3,
            e.calls ? e.seconds * 1e3 / double(e.calls) : 0.0, share.c_str(), rate.c_str());
  };
  appendf(s, "%-34s %-20s %9s %11s %10s %7s %9s\n", "op, all shapes", "", "calls", "total ms", "ms/call", "share", "GFLOP/s");
  for (const Entry& e : ops) row(e, "");
  // By shape: the 40 outer and 20 inner entries with the most time; entries() has them all.
  appendf(s, "%-34s %-20s %9s %11s %10s %7s %9s\n", "op", "shape", "calls", "total ms", "ms/call", "share", "GFLOP/s");
  std::size_t shown[2] = {0, 0}, left = 0;
  for (const Entry& e : es) {
    if (shown[e.inner] == (e.inner ? 20u : 40u)) {
      ++left;
      continue;
    }
    ++shown[e.inner];
    std::string shape;
    for (std::size_t i = 0; i < e.shape.size(); ++i) appendf(shape, i ? "x%lld" : "%lld", e.shape[i]);
    row(e, shape.c_str());
  }
  if (left) appendf(s, "(%zu more op and shape entries; attn::profile::entries() lists them all)\n", left);
  appendf(s, "outer total %.3f ms\n", outer * 1e3);
  return s;
}

inline void detail::print(Registry& r, std::FILE* out) {
  try {
    std::fputs(format(collect(r)).c_str(), out);
  } catch (...) {
  }
}

}  // namespace attn::profile
