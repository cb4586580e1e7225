// SPDX-License-Identifier: MIT
// dist::Environment: MPI start-up and shut-down for a data-parallel job, checked MPI calls, and the
// fail-fast path: an uncaught exception or a timed-out wait on any rank aborts the whole job.
//   int main(int argc, char** argv) { attn::dist::Environment env(argc, argv); if (env.is_main()) log(...); }
#pragma once
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>

#include "../core/error.hpp"

namespace attn::dist {

namespace detail {

/// Throws attn::Error "attn::dist: <what>: <MPI's message>" unless rc is MPI_SUCCESS. Communicators
/// made by dist:: use MPI_ERRORS_RETURN, so every MPI failure arrives here as a code.
inline void check_mpi(int rc, std::string_view what) {
  if (rc == MPI_SUCCESS) return;
  char buf[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS) len = 0;
  std::string msg = "attn::dist: " + std::string(what) + " failed";
  msg += len > 0 ? ": " + std::string(buf, static_cast<std::size_t>(len)) : " with MPI error code " + std::to_string(rc);
  throw Error(msg);
}

inline bool mpi_running() noexcept {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin;
}

inline int world_rank_or_zero() noexcept {
  int r = 0;
  if (mpi_running()) MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

}  // namespace detail

/// Writes "attn::dist: rank R: why" to stderr and ends every process of the job with exit code
/// `code` (MPI_Abort on MPI_COMM_WORLD; a plain _Exit when MPI is not running). Never returns.
/// This is the only safe reaction once a collective cannot complete: a rank that merely threw
/// would leave its peers blocked in the collective forever.
[[noreturn]] inline void abort_job(std::string_view why, int code = 1) noexcept {
  std::fprintf(stderr, "attn::dist: rank %d: %.*s\n", detail::world_rank_or_zero(), static_cast<int>(why.size()), why.data());
  std::fflush(stderr);
  std::fflush(stdout);
  if (detail::mpi_running()) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

namespace detail {
/// The std::terminate handler installed by Environment: names the exception, then aborts the job.
[[noreturn]] inline void terminate_with_abort() noexcept {
  std::string why = "std::terminate called";
  if (std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      why = std::string("uncaught exception: ") + x.what();
    } catch (...) {
      why = "uncaught exception of a non-standard type";
    }
  }
  abort_job(why + "; aborting the job", 1);
}
}  // namespace detail

/// The rank of this process in MPI_COMM_WORLD (0 when MPI is not running).
inline int world_rank() noexcept { return detail::world_rank_or_zero(); }
/// The number of processes in MPI_COMM_WORLD (1 when MPI is not running).
inline int world_size() noexcept {
  int n = 1;
  if (detail::mpi_running()) MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}
/// True on the one process that should log, print metrics and write checkpoints: world rank 0,
/// or the only process when MPI is not running.
inline bool is_main() noexcept { return world_rank() == 0; }

struct EnvironmentOptions {
  /// Install a std::terminate handler that aborts the whole job (MPI_Abort) after naming the
  /// uncaught exception. Without it an uncaught exception on one rank may leave the others waiting.
  bool abort_on_terminate = true;
};

/// Owns MPI's lifetime for the process (MPI_Init_thread with MPI_THREAD_FUNNELED: OpenMP threads
/// compute, only the thread that made the Environment calls MPI). One per process, made first in
/// main and destroyed last. If MPI was initialised by someone else, it neither initialises nor
/// finalises it.
///
/// Failure contract: an exception that leaves main while the Environment is alive (uncaught, or
/// unwinding through its destructor) aborts the job with a non-zero exit on every rank, so one
/// failing rank never leaves its peers blocked. Catching an exception and returning normally is a
/// normal exit: call abort() in the handler instead (the peers' waits would otherwise end only by
/// their watchdog timeout).
class Environment {
 public:
  Environment(int& argc, char**& argv, EnvironmentOptions opt = {}) { start(&argc, &argv, opt); }
  explicit Environment(EnvironmentOptions opt = {}) { start(nullptr, nullptr, opt); }
  Environment(const Environment&) = delete;
  Environment& operator=(const Environment&) = delete;

  ~Environment() {
    if (std::uncaught_exceptions() > uncaught_at_start_) abort_job("exception in flight at shutdown; aborting the job", 1);
    if (opt_.abort_on_terminate) std::set_terminate(previous_terminate_);
    if (owns_ && detail::mpi_running()) MPI_Finalize();
  }

  int rank() const noexcept { return world_rank(); }
  int size() const noexcept { return world_size(); }
  bool is_main() const noexcept { return rank() == 0; }
  /// Ends the whole job with exit code `code` after printing why (see abort_job).
  [[noreturn]] void abort(int code, std::string_view why) const noexcept { abort_job(why, code); }
  /// The thread support level MPI granted (at least MPI_THREAD_FUNNELED).
  int thread_level() const noexcept { return thread_level_; }

 private:
  void start(int* argc, char*** argv, EnvironmentOptions opt) {
    opt_ = opt;
    int init = 0;
    detail::check_mpi(MPI_Initialized(&init), "MPI_Initialized");
    if (!init) {
      detail::check_mpi(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &thread_level_), "MPI_Init_thread");
      owns_ = true;
    } else {
      detail::check_mpi(MPI_Query_thread(&thread_level_), "MPI_Query_thread");
    }
    if (thread_level_ < MPI_THREAD_FUNNELED) {
      if (owns_) MPI_Finalize();
      throw Error("attn::dist: MPI provides thread level " + std::to_string(thread_level_) +
                  ", attn needs at least MPI_THREAD_FUNNELED (OpenMP threads run beside MPI)");
    }
    if (opt_.abort_on_terminate) previous_terminate_ = std::set_terminate(detail::terminate_with_abort);
    uncaught_at_start_ = std::uncaught_exceptions();
  }

  EnvironmentOptions opt_;
  bool owns_ = false;
  int thread_level_ = 0;
  int uncaught_at_start_ = 0;
  std::terminate_handler previous_terminate_ = nullptr;
};

}  // namespace attn::dist
