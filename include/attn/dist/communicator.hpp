// SPDX-License-Identifier: MIT
// dist::Communicator: broadcast, sum/mean all-reduce, all-gather and barrier over MPI on host memory,
// non-blocking underneath, every wait bounded by a watchdog that aborts the job; MPI errors -> attn::Error.
//   attn::dist::Communicator comm;  comm.all_reduce(std::span(grads), attn::dist::ReduceOp::mean);
#pragma once
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "environment.hpp"

namespace attn::dist {

enum class ReduceOp { sum, mean, max };

namespace detail {

template <class T>
MPI_Datatype mpi_type() {
  if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
  else if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
  else if constexpr (std::is_same_v<T, std::int32_t>) return MPI_INT32_T;
  else if constexpr (std::is_same_v<T, std::int64_t>) return MPI_INT64_T;
  else if constexpr (std::is_same_v<T, std::uint64_t>) return MPI_UINT64_T;
  else if constexpr (std::is_same_v<T, std::uint8_t>) return MPI_UINT8_T;
  else static_assert(sizeof(T) == 0, "attn::dist: no MPI datatype for this element type");
}

/// The watchdog limit: ATTN_DIST_TIMEOUT (seconds, > 0) when set, else 300 s.
inline std::chrono::milliseconds default_timeout() {
  if (const char* s = std::getenv("ATTN_DIST_TIMEOUT")) {
    char* end = nullptr;
    const double v = std::strtod(s, &end);
    if (end == s || *end != '\0' || !(v > 0) || v > 1e7)
      throw ArgumentError(std::string("attn::dist: ATTN_DIST_TIMEOUT must be a positive number of seconds, got '") + s + "'");
    return std::chrono::milliseconds(static_cast<long long>(v * 1000));
  }
  return std::chrono::seconds(300);
}

}  // namespace detail

struct CommunicatorOptions {
  /// How long any wait may take before the job is aborted; 0: ATTN_DIST_TIMEOUT or 300 s.
  std::chrono::milliseconds timeout{0};
  /// Largest element count of one MPI call; longer buffers are split (MPI counts are int). Not for
  /// start_all_gather_v, which is one call counted in units (rows) of at most INT_MAX.
  std::size_t max_message_elements = std::size_t(1) << 30;
};

class Communicator;

/// Non-blocking collectives in flight, completed together by wait(). The buffers they read and
/// write must stay alive and untouched until then. Destroying a Pending waits for it (bounded by
/// the watchdog), so buffers are never released under a running collective.
class Pending {
 public:
  Pending(const Communicator& comm, std::string what) : comm_(&comm), what_(std::move(what)) {}
  Pending(Pending&& o) noexcept
      : comm_(o.comm_),
        what_(std::move(o.what_)),
        reqs_(std::move(o.reqs_)),
        after_(std::move(o.after_)),
        counts_(std::move(o.counts_)),
        bytes_(o.bytes_) {
    o.reqs_.clear();
    o.after_.clear();
  }
  Pending& operator=(Pending&&) = delete;
  Pending(const Pending&) = delete;
  ~Pending() {
    if (!reqs_.empty()) wait_impl(false);
  }

  /// Waits for every operation. Past the communicator's timeout the job is aborted (abort_job):
  /// a peer that died or stopped issuing collectives can never complete them.
  void wait() { wait_impl(true); }
  /// Lets MPI advance the operations in flight without blocking (Open MPI moves non-blocking
  /// collectives forward only inside MPI calls). True when all of them have completed; wait()
  /// is still required to finish them.
  bool progress();
  bool empty() const noexcept { return reqs_.empty() && after_.empty(); }
  std::size_t size() const noexcept { return reqs_.size(); }
  /// Bytes sent by this rank's operations (the volume counted in the performance notes).
  std::size_t bytes() const noexcept { return bytes_; }

 private:
  friend class Communicator;
  void wait_impl(bool may_throw);

  const Communicator* comm_;
  std::string what_;
  std::vector<MPI_Request> reqs_;
  std::vector<std::function<void()>> after_;  // run once all requests are complete (mean scaling)
  std::vector<std::vector<int>> counts_;      // counts and displacements the requests read until complete
  std::size_t bytes_ = 0;
};

/// A duplicate of MPI_COMM_WORLD (attn's messages never mix with the application's) with
/// MPI_ERRORS_RETURN set. Host memory only: for device buffers use dist::NcclCommunicator.
/// Not thread-safe; every rank must issue the same collectives in the same order.
class Communicator {
 public:
  static constexpr bool device_memory = false;
  using pending_type = Pending;

  explicit Communicator(CommunicatorOptions opt = {}) : opt_(opt) {
    if (!detail::mpi_running()) throw Error("attn::dist::Communicator: MPI is not initialised (make a dist::Environment first)");
    if (opt_.timeout.count() <= 0) opt_.timeout = detail::default_timeout();
    if (opt_.max_message_elements == 0 || opt_.max_message_elements > std::size_t(INT_MAX))
      throw ArgumentError("attn::dist::Communicator: max_message_elements must be in [1, INT_MAX]");
    detail::check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
    detail::check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    detail::check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    detail::check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  }
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  ~Communicator() {
    if (comm_ != MPI_COMM_NULL && detail::mpi_running()) MPI_Comm_free(&comm_);
  }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  /// True on rank 0: the rank that logs and writes files.
  bool is_main() const noexcept { return rank_ == 0; }
  std::chrono::milliseconds timeout() const noexcept { return opt_.timeout; }
  MPI_Comm native() const noexcept { return comm_; }

  /// An empty batch of non-blocking operations; `what` names them in timeout messages.
  Pending pending(std::string what) const { return Pending(*this, std::move(what)); }

  /// Starts an in-place all-reduce of data[0, n) (sum or max; mean divides the sum by size() on
  /// completion).
  template <class T>
  void start_all_reduce(T* data, std::size_t n, ReduceOp op, Pending& into) const {
    for (std::size_t off = 0; off < n; off += opt_.max_message_elements) {
      const int cnt = static_cast<int>(std::min(opt_.max_message_elements, n - off));
      MPI_Request r = MPI_REQUEST_NULL;
      detail::check_mpi(MPI_Iallreduce(MPI_IN_PLACE, data + off, cnt, detail::mpi_type<T>(), op == ReduceOp::max ? MPI_MAX : MPI_SUM, comm_, &r),
                        "MPI_Iallreduce");
      into.reqs_.push_back(r);
    }
    into.bytes_ += n * sizeof(T);
    if (op == ReduceOp::mean && size_ > 1) {
      if constexpr (std::is_integral_v<T>) {  // truncated, as NCCL's average of integers (1 / size would be 0)
        into.after_.push_back([data, n, size = T(size_)] {
          for (std::size_t i = 0; i < n; ++i) data[i] /= size;
        });
      } else {
        const T scale = T(1) / T(size_);
        into.after_.push_back([data, n, scale] {
          for (std::size_t i = 0; i < n; ++i) data[i] *= scale;
        });
      }
    }
  }
  /// Starts a broadcast of data[0, n) from rank root to every rank.
  template <class T>
  void start_broadcast(T* data, std::size_t n, int root, Pending& into) const {
    check_root("broadcast", root);
    for (std::size_t off = 0; off < n; off += opt_.max_message_elements) {
      const int cnt = static_cast<int>(std::min(opt_.max_message_elements, n - off));
      MPI_Request r = MPI_REQUEST_NULL;
      detail::check_mpi(MPI_Ibcast(data + off, cnt, detail::mpi_type<T>(), root, comm_, &r), "MPI_Ibcast");
      into.reqs_.push_back(r);
    }
    into.bytes_ += n * sizeof(T);
  }

  /// Starts gathering every rank's data[0, n * unit) into out, in rank order: rank r contributes
  /// counts[r] * unit elements (counts as all_gather returned every rank's n; n == counts[rank()]),
  /// and out holds the sum of counts times unit. Counts are in units of `unit` elements (a row), so
  /// the total may exceed INT_MAX elements as long as it is at most INT_MAX rows; beyond that,
  /// ArgumentError before anything starts.
  template <class T>
  void start_all_gather_v(const T* data, std::size_t n, T* out, const std::vector<std::uint64_t>& counts, std::size_t unit,
                          Pending& into) const {
    if (counts.size() != std::size_t(size_) || counts[std::size_t(rank_)] != n)
      throw ArgumentError("attn::dist::Communicator::start_all_gather_v: counts must hold every rank's n (" + std::to_string(n) +
                          " here on rank " + std::to_string(rank_) + ")");
    if (unit == 0 || unit > std::size_t(INT_MAX))
      throw ArgumentError("attn::dist::Communicator::start_all_gather_v: unit " + std::to_string(unit) + " is outside [1, INT_MAX]");
    std::vector<int> cnt(counts.size()), displ(counts.size());
    std::uint64_t total = 0;
    for (std::size_t r = 0; r < counts.size(); ++r) {
      if (counts[r] > std::uint64_t(INT_MAX) || total > std::uint64_t(INT_MAX))
        throw ArgumentError("attn::dist::Communicator::start_all_gather_v: more than INT_MAX units (" + std::to_string(counts[r]) +
                            " from rank " + std::to_string(r) + " after " + std::to_string(total) + ")");
      cnt[r] = static_cast<int>(counts[r]);
      displ[r] = static_cast<int>(total);
      total += counts[r];
    }
    MPI_Datatype row = MPI_DATATYPE_NULL;
    detail::check_mpi(MPI_Type_contiguous(static_cast<int>(unit), detail::mpi_type<T>(), &row), "MPI_Type_contiguous");
    if (const int crc = MPI_Type_commit(&row); crc != MPI_SUCCESS) {
      MPI_Type_free(&row);
      detail::check_mpi(crc, "MPI_Type_commit");
    }
    into.counts_.push_back(std::move(cnt));
    into.counts_.push_back(std::move(displ));
    const int* c = into.counts_[into.counts_.size() - 2].data();
    const int* d = into.counts_.back().data();
    MPI_Request r = MPI_REQUEST_NULL;
    const int rc = MPI_Iallgatherv(data, static_cast<int>(n), row, out, c, d, row, comm_, &r);
    MPI_Type_free(&row);  // allowed while the operation is pending: it completes normally
    detail::check_mpi(rc, "MPI_Iallgatherv");
    into.reqs_.push_back(r);
    into.bytes_ += n * unit * sizeof(T);
  }

  template <class T>
  void all_reduce(std::span<T> data, ReduceOp op = ReduceOp::sum) const {
    Pending p = pending("all_reduce of " + std::to_string(data.size()) + " elements");
    start_all_reduce(data.data(), data.size(), op, p);
    p.wait();
  }
  template <class T>
  void broadcast(std::span<T> data, int root = 0) const {
    Pending p = pending("broadcast of " + std::to_string(data.size()) + " elements from rank " + std::to_string(root));
    start_broadcast(data.data(), data.size(), root, p);
    p.wait();
  }
  /// One value from every rank, in rank order.
  template <class T>
  std::vector<T> all_gather(T value) const {
    std::vector<T> out(static_cast<std::size_t>(size_));
    Pending p = pending("all_gather");
    MPI_Request r = MPI_REQUEST_NULL;
    detail::check_mpi(MPI_Iallgather(&value, 1, detail::mpi_type<T>(), out.data(), 1, detail::mpi_type<T>(), comm_, &r), "MPI_Iallgather");
    p.reqs_.push_back(r);
    p.wait();
    return out;
  }
  /// Returns when every rank has entered barrier() (bounded by the watchdog).
  void barrier() const {
    Pending p = pending("barrier");
    MPI_Request r = MPI_REQUEST_NULL;
    detail::check_mpi(MPI_Ibarrier(comm_, &r), "MPI_Ibarrier");
    p.reqs_.push_back(r);
    p.wait();
  }

 private:
  void check_root(const char* op, int root) const {
    if (root < 0 || root >= size_)
      throw ArgumentError(std::string("attn::dist::Communicator::") + op + ": root " + std::to_string(root) + " is not a rank of a job of " +
                          std::to_string(size_));
  }

  CommunicatorOptions opt_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
};

/// Polls MPI_Testall. MPI's non-blocking collectives progress only inside MPI calls (Open MPI's
/// libnbc moves a large buffer as many fragments, each needing a call), so the loop calls in
/// continuously, yielding the core between calls, for the first second; a wait that lasts longer
/// is waiting on a slow or dead peer, and then sleeps between polls until the watchdog fires.
inline bool Pending::progress() {
  if (reqs_.empty()) return true;
  int done = 0;
  const int rc = MPI_Testall(static_cast<int>(reqs_.size()), reqs_.data(), &done, MPI_STATUSES_IGNORE);
  if (rc != MPI_SUCCESS) {
    reqs_.clear();
    after_.clear();
    detail::check_mpi(rc, what_ + " (MPI_Testall)");
  }
  if (done) reqs_.clear();
  return done != 0;
}

inline void Pending::wait_impl(bool may_throw) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  const auto deadline = start + comm_->timeout();
  while (!reqs_.empty()) {
    int done = 0;
    const int rc = MPI_Testall(static_cast<int>(reqs_.size()), reqs_.data(), &done, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) {
      reqs_.clear();
      after_.clear();
      if (!may_throw) abort_job(what_ + " failed in MPI_Testall while unwinding; aborting the job", 1);
      detail::check_mpi(rc, what_ + " (MPI_Testall)");
    }
    if (done) {
      reqs_.clear();
      break;
    }
    const auto now = clock::now();
    if (now > deadline)
      abort_job(what_ + " did not complete within " + std::to_string(comm_->timeout().count() / 1000.0) +
                    " s (watchdog: a peer rank has failed or stopped issuing this collective); aborting the job",
                3);
    if (now - start < std::chrono::seconds(1)) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  counts_.clear();
  for (auto& f : after_) f();
  after_.clear();
}

}  // namespace attn::dist
