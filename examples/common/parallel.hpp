// SPDX-License-Identifier: MIT
// Data-parallel training for the example programs. Started by `mpirun -np N` (and built with MPI),
// every rank takes its share of each global batch of N x --batch samples, gradients are averaged
// in place by attn::dist::DataParallel, and only rank 0 prints, shows progress and writes files.
// Started directly, or built without MPI, it is one process and every call reduces to the plain
// single-process step.
//   examples::Parallel par(argc, argv);  ...  par.attach(model);
//   par.zero_grad(opt); auto loss = ...(tape, model.forward(tape, par.shard(global_batch)));
//   par.backward(tape, loss); opt.step();
#pragma once
#include <attn/attn.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <span>
#include <string>
#include <vector>

#if defined(ATTN_EXAMPLES_MPI)
#include <attn/dist.hpp>
#endif

#include "progress.hpp"

namespace examples {

/// True when an MPI launcher (mpirun, or a PMI/PMIx-based one such as srun) started this process.
inline bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(v)) return true;
  return false;
}

class Parallel {
 public:
  /// Initialises MPI when launched by mpirun; otherwise, a single process.
  Parallel(int& argc, char**& argv) {
#if defined(ATTN_EXAMPLES_MPI)
    if (launched_by_mpi()) {
      env_.emplace(argc, argv);
      comm_.emplace();
      rank_ = comm_->rank();
      world_ = comm_->size();
    }
#else
    (void)argc, (void)argv;
    if (launched_by_mpi() && std::getenv("OMPI_COMM_WORLD_SIZE") && std::string(std::getenv("OMPI_COMM_WORLD_SIZE")) != "1")
      throw attn::ArgumentError("started by mpirun with several processes, but this program was built without MPI "
                                "(install libopenmpi-dev and rebuild)");
#endif
    if (rank_ != 0) {
      Progress::enabled() = false;
      if (!std::freopen("/dev/null", "w", stdout)) std::fclose(stdout);  // only rank 0 reports
    }
  }

  int rank() const noexcept { return rank_; }
  int world() const noexcept { return world_; }
  /// The process that prints and writes files.
  bool main() const noexcept { return rank_ == 0; }

  /// Makes the model data-parallel: rank 0's parameters are broadcast, gradients bucketed.
  template <class Model>
  void attach(Model& model) {
#if defined(ATTN_EXAMPLES_MPI)
    if (comm_ && world_ > 1) {
      if constexpr (requires { typename Model::backend; } && !Model::backend::host_accessible)
        throw attn::ArgumentError("data-parallel training of a model on " + std::string(Model::backend::name) +
                                  " is not supported by the example programs: run one process");
      else
        ddp_.emplace(model, *comm_);
    }
#else
    (void)model;
#endif
  }
  /// Drops the data-parallel wrapper (before the model it wraps is destroyed).
  void detach() {
#if defined(ATTN_EXAMPLES_MPI)
    ddp_.reset();
#endif
  }

  template <class Opt>
  void zero_grad(Opt& opt) {
#if defined(ATTN_EXAMPLES_MPI)
    if (ddp_) return ddp_->zero_grad();
#endif
    opt.zero_grad();
  }

  /// tape.backward(loss), then (data-parallel) the mean of every rank's gradients.
  template <class V>
  void backward(attn::Tape& tape, const V& loss) {
    tape.backward(loss);
#if defined(ATTN_EXAMPLES_MPI)
    if (ddp_) {
      ddp_->all_reduce_gradients();
      const auto& s = ddp_->last_stats();
      ++exchange_.steps;
      exchange_.bytes += s.bytes;
      exchange_.gathered_rows += s.gathered_rows;
      exchange_.gathered_bytes += s.gathered_bytes;
      exchange_.seconds += s.seconds;
    }
#endif
  }

  /// The loss of the whole global batch: the ranks' mean losses weighted by their samples
  /// (data-parallel; `loss` itself for one process). Every rank gets the same value, so a loss that
  /// is non-finite on one rank is non-finite on all, and the non-finite guard skips or stops on
  /// every rank alike (a rank that skipped alone would leave the copies of the model apart).
  double global_loss(double loss, std::size_t samples) const {
#if defined(ATTN_EXAMPLES_MPI)
    if (comm_ && world_ > 1) {
      double v[2] = {loss * double(samples), double(samples)};
      comm_->all_reduce(std::span<double>(v, 2));
      return v[0] / v[1];
    }
#endif
    (void)samples;
    return loss;
  }

  /// What this rank exchanged per step since the last call, as one line (data-parallel; empty for
  /// one process): the bucket all-reduces and the rows of row-sparse tables gathered.
  std::string take_exchange_summary() {
    const Exchange e = exchange_;
    exchange_ = {};
    if (e.steps == 0) return {};
    const double n = double(e.steps);
    return fmt::format("gradient exchange per step: {:.2f} MB all-reduced, {:.0f} rows ({:.2f} MB) of sparse tables gathered, {:.1f} ms",
                       double(e.bytes) / n / 1e6, double(e.gathered_rows) / n, double(e.gathered_bytes) / n / 1e6, 1e3 * e.seconds / n);
  }

  /// This rank's contiguous share of a global batch (the shares differ by at most one sample).
  /// Empty when the batch has fewer samples than ranks; skip_batch() says so on every rank.
  std::vector<std::size_t> shard(const std::vector<std::size_t>& global) const {
    const std::size_t n = global.size(), w = std::size_t(world_), r = std::size_t(rank_);
    const std::size_t begin = n * r / w, end = n * (r + 1) / w;
    return {global.begin() + std::ptrdiff_t(begin), global.begin() + std::ptrdiff_t(end)};
  }
  /// True (on every rank alike) when a global batch is too small to give each rank a sample.
  bool skip_batch(std::size_t global_size) const noexcept { return global_size < std::size_t(world_); }

  /// Waits until every process gets here (data-parallel; a no-op for one process).
  void barrier() const {
#if defined(ATTN_EXAMPLES_MPI)
    if (comm_ && world_ > 1) comm_->barrier();
#endif
  }

  /// After a caught error: a data-parallel job must end on every rank, not leave the others
  /// waiting in a collective. Returns code when this is a single process.
  int fail(int code, const std::string& why) const {
#if defined(ATTN_EXAMPLES_MPI)
    if (env_ && world_ > 1) env_->abort(code, why);
#else
    (void)why;
#endif
    return code;
  }

 private:
  struct Exchange {
    std::size_t steps = 0, bytes = 0, gathered_rows = 0, gathered_bytes = 0;
    double seconds = 0;
  };
  Exchange exchange_;
  int rank_ = 0, world_ = 1;
#if defined(ATTN_EXAMPLES_MPI)
  std::optional<attn::dist::Environment> env_;
  std::optional<attn::dist::Communicator> comm_;
  std::optional<attn::dist::DataParallel<float>> ddp_;
#endif
};

}  // namespace examples
