// SPDX-License-Identifier: MIT
// dist::DataParallel: PyTorch-DDP-style data parallelism for one nn::Module replicated on every rank
// (rank 0's parameters broadcast, gradients in flat buckets averaged across ranks without copies).
//   attn::dist::DataParallel<float> ddp(model, comm);  ddp.zero_grad(); ...; ddp.backward(tape, loss); opt.step();
#pragma once
#include <algorithm>
#include <chrono>
#include <climits>
#include <concepts>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "../autograd/var.hpp"
#include "../backend/kernels.hpp"
#include "../nn/module.hpp"
#include "communicator.hpp"
#include "grad_buckets.hpp"

namespace attn::dist {

/// What DataParallel needs from a communicator (dist::Communicator for host memory over MPI,
/// dist::NcclCommunicator for CUDA memory): rank and size, a batch of non-blocking operations
/// that wait() completes under a watchdog, in-place all-reduce and broadcast started into such a
/// batch, and an all-gather of one integer per rank.
template <class C, class T>
concept Collectives = requires(const C& c, T* p, std::size_t n, typename C::pending_type& pend) {
  { c.rank() } -> std::convertible_to<int>;
  { c.size() } -> std::convertible_to<int>;
  { C::device_memory } -> std::convertible_to<bool>;
  { c.pending(std::string{}) } -> std::same_as<typename C::pending_type>;
  c.start_all_reduce(p, n, ReduceOp::mean, pend);
  c.start_broadcast(p, n, 0, pend);
  { c.template all_gather<std::uint64_t>(std::uint64_t{}) } -> std::same_as<std::vector<std::uint64_t>>;
  pend.wait();
};

/// A communicator that can also gather variable-length data from every rank
/// (Communicator::start_all_gather_v), which row-sparse tables are reduced with.
template <class C, class T>
concept GathersRows = requires(const C& c, const T* p, T* o, const std::vector<std::uint64_t>& counts, typename C::pending_type& pend) {
  c.start_all_gather_v(p, std::size_t{}, o, counts, std::size_t{}, pend);
};

struct DataParallelOptions {
  /// Bytes per gradient bucket (PyTorch's bucket_cap_mb = 25).
  std::size_t bucket_cap_bytes = std::size_t(25) << 20;
  /// Bytes of the first bucket, the output layer's (PyTorch: 1 MiB).
  std::size_t first_bucket_cap_bytes = std::size_t(1) << 20;
  /// Copy the root's parameters to every rank at construction.
  bool broadcast_parameters = true;
  int root = 0;
  /// After the first backward(tape, loss), lay the buckets out again in the order in which that
  /// pass completed the gradients (PyTorch DDP's bucket rebuild), so that a bucket's all-reduce can
  /// start as early as its gradients allow, whatever the modules' registration order. Done only
  /// when every rank saw the same order.
  bool rebuild_buckets = true;
  /// Reduce row-sparse tables (nn::Embedding{.sparse = true}, host backends) by gathering every
  /// rank's rows and summing them (each rank sends only the rows its batch looked up, as PyTorch
  /// DDP does for sparse gradients), instead of all-reducing the whole table in a bucket. false:
  /// such a table lives in a bucket like any other parameter.
  bool gather_sparse = true;
};

/// Measurements of the last all_reduce_gradients().
struct ReduceStats {
  double seconds = 0;          // launch to completion of all bucket all-reduces
  std::size_t bytes = 0;       // bucket bytes this rank contributed (padding included), and gather_sparse tables all-reduced whole (with their row marks)
  std::size_t buckets = 0;
  std::size_t reattached = 0;  // gradients found outside their bucket and copied back in
  std::size_t overlapped = 0;  // buckets whose all-reduce started while backward was still running
  double backward_seconds = 0; // backward(tape, loss): the tape's backward pass alone
  std::size_t gathered_rows = 0;   // rows of row-sparse tables this rank sent (DataParallelOptions::gather_sparse)
  std::size_t gathered_bytes = 0;  // their bytes, row indices included
};

/// Wraps a model's parameters of element type T on backend B (all of the model's parameters must
/// be of that type; frozen ones, requires_grad == false, are left out of the gradient buckets, but
/// broadcast and checked with the others, as torch's DDP does). Every rank builds the same
/// model and calls the same methods in the same order. The communicator must outlive the wrapper.
///
/// A training step:
///   ddp.zero_grad();                                   // zero the buckets (not opt.zero_grad())
///   auto loss = cross_entropy(tape, model.forward(tape, local_batch...), labels);
///   ddp.backward(tape, loss);                          // tape.backward + averaged gradients
///   opt.step(); tape.clear();
///
/// With each rank's loss the mean over its own equally sized shard, the averaged gradient is the
/// gradient of the mean over the global batch, so N ranks on batches of b follow one process on
/// batches of N b (up to rounding). Gradient accumulation: run several backward passes and call
/// all_reduce_gradients() once (tape.backward alone between them, as PyTorch's no_sync()).
///
/// Row-sparse tables (nn::Embedding{.sparse = true}) on a host backend are in no bucket: each rank
/// gathers every rank's looked-up rows and sums them into a compact gradient of their union
/// (DataParallelOptions::gather_sparse; docs/distributed.md).
///
/// Zero-copy: the gradients live in the buckets (GradBuckets) and the all-reduces run on them in
/// place. An optimizer's zero_grad() drops the gradient tensors; that still gives correct results
/// (the next all_reduce_gradients copies them back into their buckets, counted in
/// ReduceStats::reattached) but costs a copy per parameter, so use DataParallel::zero_grad().
///
/// Difference from one process: after all_reduce_gradients every parameter has a gradient (zeros
/// where no rank's loss reached it), where one process would leave it empty and the optimizers
/// would skip it. Models whose every parameter takes part in the loss behave identically.
///
/// Overlap: backward(tape, loss) starts each bucket's all-reduce as soon as the tape has run the
/// last step that can add to any of its gradients (Tape::backward with a BackwardObserver; each
/// recorded step lists the Vars it writes gradients into), while the backward pass goes on. Buckets
/// start strictly in bucket order, the same on every rank, as collectives must; bucket 0 holds the
/// output layer, whose gradients are complete first. Between steps the communicator is given a
/// chance to progress (MPI_Testall). ReduceStats::overlapped counts the buckets started before the
/// last backward step. A step that writes a gradient after its bucket has started would be a bug in
/// that op's recording; it is detected (VarData::grad_writes) and thrown as an attn::Error.
template <class T = float, class B = cpu, class Comm = Communicator>
  requires Collectives<Comm, T>
class DataParallel {
  static_assert(B::host_accessible || Comm::device_memory,
                "dist::DataParallel: this communicator reduces host memory; for the cuda backend use dist::NcclCommunicator");
  static_assert(!(B::host_accessible && Comm::device_memory),
                "dist::DataParallel: this communicator reduces device memory; for a host backend use dist::Communicator");
  /// Whether row-sparse tables can be reduced by gathering their rows (host memory, and a
  /// communicator with start_all_gather_v).
  static constexpr bool gathers_rows = B::host_accessible && GathersRows<Comm, T>;

 public:
  DataParallel(const nn::Module& model, const Comm& comm, DataParallelOptions opt = {}) : comm_(&comm), opt_(opt) {
    if (opt_.root < 0 || opt_.root >= comm.size())
      throw ArgumentError("dist::DataParallel: root " + std::to_string(opt_.root) + " is not a rank of a job of " + std::to_string(comm.size()));
    auto named = model.named_parameters();
    auto vars = model.parameters<T, B>();  // throws ArgumentError on another element type or backend
    std::vector<std::pair<std::string, std::shared_ptr<VarData<T, B>>>> list, bucketed;
    std::unordered_set<const void*> seen;  // a tied parameter is reduced once
    std::vector<std::pair<std::string, std::shared_ptr<VarData<T, B>>>> frozen;
    for (std::size_t k = 0; k < vars.size(); ++k) {
      const auto& d = vars[k].data();
      if (!seen.insert(d.get()).second) continue;
      if (!d->requires_grad) {  // no gradient to reduce, but the same values on every rank
        frozen.push_back({named[k].first, d});
        frozen_.push_back(vars[k]);
        continue;
      }
      const bool gather = gathers_rows && opt_.gather_sparse && d->sparse_rows && d->value.rank() == 2;
      gathered_.push_back(gather ? 1 : 0);
      list.push_back({named[k].first, d});
      if (!gather) bucketed.push_back(list.back());
      params_.push_back(vars[k]);
      names_.push_back(named[k].first);
      leaves_.push_back(d.get());
      index_.push_back({d.get(), params_.size() - 1});
    }
    std::sort(index_.begin(), index_.end());
    check_same_model(list, frozen);
    if (opt_.broadcast_parameters) broadcast_parameters(opt_.root);
    buckets_ = GradBuckets<T, B>(bucketed, opt_.bucket_cap_bytes, opt_.first_bucket_cap_bytes);
    gathers_.resize(params_.size());
    map_buckets();
  }

  DataParallel(const DataParallel&) = delete;  // two wrappers would fight over the gradients
  DataParallel& operator=(const DataParallel&) = delete;
  DataParallel(DataParallel&&) noexcept = default;
  DataParallel& operator=(DataParallel&&) noexcept = default;

  /// Zeroes the gradients in place (the buckets), keeping them where the all-reduce expects them.
  /// A row-sparse gradient (the union of every rank's rows after the last all-reduce) has only its
  /// recorded rows zeroed, not its whole slice; a gathered table's (gather_sparse) is cleared as by
  /// its own zero_grad().
  void zero_grad() {
    buckets_.zero([](const VarData<T, B>& d) { return d.grad_is_row_sparse(); });
    for (std::size_t k = 0; k < params_.size(); ++k) {  // row-sparse bookkeeping starts over with the zeroed buckets
      auto& d = *params_[k].data();
      if (gathered_[k] || d.grad_is_row_sparse()) {
        d.zero_grad();  // the recorded rows zeroed in place (a bucket's gradient stays in it), or the compact rows dropped
        continue;
      }
      std::fill(d.row_marked.begin(), d.row_marked.end(), std::uint8_t{0});
      d.grad_rows.clear();
      d.grad_dense = false;
    }
  }

  /// Replaces every rank's gradients by their mean over all ranks, in place (after one or more
  /// tape.backward calls; no overlap).
  void all_reduce_gradients() {
    const auto t0 = std::chrono::steady_clock::now();
    stats_ = {};
    stats_.reattached = buckets_.attach(true);
    auto pending = start_pending();
    for (auto& b : buckets_.buckets()) comm_->start_all_reduce(b.data(), b.numel(), ReduceOp::mean, pending);
    finish(pending, t0);
  }

  /// tape.backward(loss) with each bucket's all-reduce started as soon as its gradients are
  /// complete, then waits for them: afterwards every rank holds the mean gradient.
  template <class S>
  void backward(Tape& tape, const Var<T, S, B>& loss) {
    const auto t0 = std::chrono::steady_clock::now();
    stats_ = {};
    stats_.reattached = buckets_.attach(true);  // backward then accumulates into the buckets
    auto pending = start_pending();
    Overlap ov(*this, pending);
    tape.backward(loss, std::span<const void* const>(leaves_), ov);
    stats_.backward_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ov.launch_ready(true);  // anything left (none when every step lists its inputs)
    for (std::size_t k = 0; k < params_.size(); ++k)
      if (!gathered_[k] && params_[k].data()->grad_writes != ov.writes_at_start[k])
        throw Error("dist::DataParallel: the gradient of '" + names_[k] +
                    "' was written after its bucket's all-reduce had started; an op recorded a backward step "
                    "without listing that Var among its inputs (Tape::push)");
    finish(pending, t0);
    if (opt_.rebuild_buckets && !layout_settled_) {
      layout_settled_ = true;
      rebuild_buckets(ov.ready_order);
    }
  }

  /// True once the buckets follow the gradients' completion order (see
  /// DataParallelOptions::rebuild_buckets).
  bool buckets_rebuilt() const noexcept { return rebuilt_; }

  /// Overwrites every rank's parameter values with the root's, the frozen ones' too.
  void broadcast_parameters(int root = 0) {
    auto pending = comm_->pending("parameter broadcast from rank " + std::to_string(root));
    for (auto* group : {&params_, &frozen_})
      for (auto& v : *group) comm_->start_broadcast(const_cast<T*>(v.raw().data()), v.numel(), root, pending);
    pending.wait();
    for (auto* group : {&params_, &frozen_})
      for (auto& v : *group) v.data()->mark_value_written();
  }

  const std::vector<Var<T, AnyShape, B>>& params() const noexcept { return params_; }
  const GradBuckets<T, B>& buckets() const noexcept { return buckets_; }
  const ReduceStats& last_stats() const noexcept { return stats_; }
  const Comm& comm() const noexcept { return *comm_; }
  int rank() const { return comm_->rank(); }
  int world_size() const { return comm_->size(); }
  bool is_main() const { return comm_->rank() == 0; }

 private:
  /// Every rank must hold the same parameters (names, order, shapes), or the buckets would not line
  /// up and the all-reduces would mix unrelated numbers. Compared by a hash gathered from all ranks;
  /// every rank sees all hashes, so all of them throw together.
  void check_same_model(const std::vector<std::pair<std::string, std::shared_ptr<VarData<T, B>>>>& list,
                        const std::vector<std::pair<std::string, std::shared_ptr<VarData<T, B>>>>& frozen) const {
    std::uint64_t h = 1469598103934665603ULL;
    auto mix = [&h](std::uint64_t x) {
      for (int i = 0; i < 8; ++i) h = (h ^ ((x >> (8 * i)) & 0xff)) * 1099511628211ULL;
    };
    mix(list.size());
    mix(sizeof(T));
    for (std::size_t k = 0; k < list.size(); ++k) {
      const auto& [name, d] = list[k];
      // A table gathered or row-sparse on one rank and not on another would misalign the collectives.
      mix(gathered_[k]);
      mix(d->sparse_rows ? 1 : 0);
      mix(nn::name_seed(name));
      mix(d->value.dims().n);
      for (std::size_t a = 0; a < d->value.dims().n; ++a) mix(d->value.dims().v[a]);
    }
    mix(frozen.size());
    for (const auto& [name, d] : frozen) {
      mix(nn::name_seed(name));
      mix(d->value.dims().n);
      for (std::size_t a = 0; a < d->value.dims().n; ++a) mix(d->value.dims().v[a]);
    }
    const auto all = comm_->template all_gather<std::uint64_t>(h);
    for (std::size_t r = 0; r < all.size(); ++r)
      if (all[r] != all[0])
        throw Error("dist::DataParallel: rank " + std::to_string(r) + " holds a model with other parameters (names, order, shapes or sparse gradients) than rank 0 (" +
                    std::to_string(list.size()) + " parameters here on rank " + std::to_string(comm_->rank()) +
                    "); every rank must build the same model");
  }

  typename Comm::pending_type start_pending() const {
    return comm_->pending("gradient all-reduce of " + std::to_string(buckets_.size()) + " buckets (" + std::to_string(buckets_.bytes()) +
                          " bytes)");
  }

  /// Starts the row-mark reductions and the gathers of row-sparse tables, waits for everything, and
  /// rebuilds the row-sparse gradients.
  void finish(typename Comm::pending_type& pending, std::chrono::steady_clock::time_point t0) {
    // Row-sparse gradients in buckets (nn::Embedding{.sparse = true} without gather_sparse): the
    // mean holds every rank's rows, so the row lists become their union (max of the per-row marks),
    // and the optimizers' lazy update touches exactly the rows one process on the global batch
    // would have touched.
    auto& sparse = sparse_;  // members, so that a step allocates nothing here once they have grown
    auto& dense_flags = dense_flags_;
    sparse.clear();
    dense_flags.clear();
    for (std::size_t k = 0; k < params_.size(); ++k) {
      auto& d = *params_[k].data();
      if (gathered_[k] || !d.sparse_rows || d.value.rank() != 2) continue;
      d.row_marked.resize(d.value.dims()[0], 0);
      sparse.push_back(&d);
      dense_flags.push_back(d.grad_dense ? 1 : 0);
    }
    if constexpr (B::host_accessible) {
      for (auto* d : sparse) comm_->start_all_reduce(d->row_marked.data(), d->row_marked.size(), ReduceOp::max, pending);
      if (!sparse.empty()) comm_->start_all_reduce(dense_flags.data(), dense_flags.size(), ReduceOp::max, pending);
    } else if (!sparse.empty()) {
      // A device communicator reduces device memory: the flags and every table's marks, packed
      // into one buffer there, and copied back after the wait.
      marks_host_.assign(dense_flags.begin(), dense_flags.end());
      for (auto* d : sparse) marks_host_.insert(marks_host_.end(), d->row_marked.begin(), d->row_marked.end());
      if (marks_device_.numel() != marks_host_.size()) marks_device_ = Tensor<std::uint8_t, AnyShape, B>(Dims{marks_host_.size()});
      marks_device_.copy_from_host(std::span<const std::uint8_t>(marks_host_));
      comm_->start_all_reduce(marks_device_.data(), marks_host_.size(), ReduceOp::max, pending);
    }
    start_gathers(pending);
    pending.wait();
    if constexpr (!B::host_accessible) {
      if (!sparse.empty()) {
        marks_device_.copy_to_host(std::span<std::uint8_t>(marks_host_));
        std::size_t at = 0;
        for (auto& f : dense_flags) f = marks_host_[at++];
        for (auto* d : sparse) {
          std::copy_n(marks_host_.begin() + std::ptrdiff_t(at), d->row_marked.size(), d->row_marked.begin());
          at += d->row_marked.size();
        }
      }
    }
    for (std::size_t k = 0; k < params_.size(); ++k)
      if (!gathered_[k]) params_[k].data()->grad_dense = true;
    for (std::size_t k = 0; k < sparse.size(); ++k) {
      auto& d = *sparse[k];
      if (dense_flags[k]) continue;  // some rank accumulated densely: dense everywhere
      d.grad_dense = false;
      d.grad_rows.clear();
      for (std::size_t r = 0; r < d.row_marked.size(); ++r)
        if (d.row_marked[r]) d.grad_rows.push_back(r);
    }
    finish_gathers();
    stats_.bytes = buckets_.bytes() + whole_table_bytes_;
    stats_.buckets = buckets_.size();
    stats_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  /// A row-sparse table reduced by gathering (gather_sparse): this rank's rows and their values are
  /// sent to every rank, and each rank sums all of them, rank by rank, into a compact gradient of
  /// the union of the rows (VarData's compact form), then divides by the rank count: the mean, as
  /// the all-reduce of a whole table would give, in the order rank 0's rows first, so that every
  /// rank holds the same gradient. If any rank accumulated densely into the table, the whole table
  /// is all-reduced instead and is dense everywhere. If the rows of all ranks together would take
  /// more bytes than the table (many ranks, or a small or much-used table; every rank receives all
  /// of them), the whole table is all-reduced with its row marks instead (`whole`), as a bucketed
  /// table is: the same mean over the union of the rows, still row-sparse.
  struct Gather {
    std::vector<std::uint64_t> counts;  // per rank: rows sent, or kDense
    std::vector<std::int64_t> rows, all_rows;
    std::vector<T> values, all_values;
    std::size_t total = 0;
    bool dense = false;
    bool whole = false;
  };
  static constexpr std::uint64_t kDense = ~std::uint64_t(0);

  void start_gathers(typename Comm::pending_type& pending) {
    whole_table_bytes_ = 0;
    if constexpr (gathers_rows) {
      for (std::size_t k = 0; k < params_.size(); ++k) {
        if (!gathered_[k]) continue;
        auto& d = *params_[k].data();
        auto& g = gathers_[k];
        const std::size_t dim = d.value.dims()[1];
        const std::size_t n = d.grad_is_row_sparse() ? d.grad_rows.size() : 0;
        g.counts = comm_->template all_gather<std::uint64_t>(d.grad_dense ? kDense : std::uint64_t(n));
        g.dense = std::find(g.counts.begin(), g.counts.end(), kDense) != g.counts.end();
        if (g.dense) {
          T* p = d.grad_ref().data();  // whole-table (zeros where this rank has no gradient)
          comm_->start_all_reduce(p, d.value.numel(), ReduceOp::mean, pending);
          whole_table_bytes_ += d.value.numel() * sizeof(T);
          continue;
        }
        g.total = 0;
        for (auto c : g.counts) g.total += static_cast<std::size_t>(c);
        const std::size_t table_rows = d.value.dims()[0];
        g.whole = g.total > std::size_t(INT_MAX) ||
                  g.total * (sizeof(std::int64_t) + dim * sizeof(T)) > d.value.numel() * sizeof(T) + table_rows;
        if (g.whole) {  // the same decision on every rank: all hold the counts
          if (d.row_marked.size() != table_rows) d.row_marked.assign(table_rows, 0);
          T* p = d.grad_ref().data();  // this rank's rows in a whole-table buffer, marked in row_marked
          comm_->start_all_reduce(p, d.value.numel(), ReduceOp::mean, pending);
          comm_->start_all_reduce(d.row_marked.data(), table_rows, ReduceOp::max, pending);
          whole_table_bytes_ += d.value.numel() * sizeof(T) + table_rows;
          continue;
        }
        g.rows.assign(d.grad_rows.begin(), d.grad_rows.begin() + std::ptrdiff_t(n));
        const T* values = d.grad_row_values();
        if (!d.grad_compact) {  // the whole-table form (Var::grad() made it): its rows, packed
          g.values.resize(n * dim);
          kernels::copy_rows(B{}, n, dim, values, dim, g.rows.data(), g.values.data(), dim, nullptr, false);
          values = g.values.data();
        }
        g.all_rows.resize(g.total);
        g.all_values.resize(g.total * dim);
        comm_->start_all_gather_v(g.rows.data(), n, g.all_rows.data(), g.counts, 1, pending);
        comm_->start_all_gather_v(values, n, g.all_values.data(), g.counts, dim, pending);
        stats_.gathered_rows += n;
        stats_.gathered_bytes += n * (sizeof(std::int64_t) + dim * sizeof(T));
      }
    } else {
      (void)pending;
    }
  }

  void finish_gathers() {
    if constexpr (gathers_rows) {
      for (std::size_t k = 0; k < params_.size(); ++k) {
        if (!gathered_[k] || gathers_[k].dense) continue;
        auto& d = *params_[k].data();
        auto& g = gathers_[k];
        if (g.whole) {  // the mean of the whole table: row-sparse again, on the union of the rows
          d.grad_dense = false;
          d.grad_rows.clear();
          for (std::size_t r = 0; r < d.row_marked.size(); ++r)
            if (d.row_marked[r]) d.grad_rows.push_back(r);
          d.grad_materialized = true;  // zero_grad() drops the buffer: the next step is compact again
          continue;
        }
        const std::size_t dim = d.value.dims()[1], total = g.total;
        d.zero_grad();
        // Even with no row (every id padding, or the table unused), a gradient with no rows, as the
        // buckets leave every parameter with a gradient.
        const T* src = g.all_values.data();
        d.scatter_into_rows(g.all_rows.data(), total, -1,
                            [&](T* dst, const auto* idx, long long skip) { kernels::scatter_add_rows(B{}, dst, dim, idx, total, src, skip); });
        const T scale = T(1) / T(comm_->size());
        d.for_each_grad_span([&](T* p, std::size_t count) { kernels::scale(B{}, p, count, scale); });
      }
    }
  }

  /// Rebuilds the buckets so that bucket 0 holds the first gradients completed by the observed
  /// pass, when all ranks observed the same order (a collective: every rank calls it together).
  /// The current gradients, already averaged, move into the new buckets.
  void rebuild_buckets(const std::vector<std::size_t>& ready_order) {
    std::uint64_t h = 1469598103934665603ULL;
    for (auto k : ready_order) h = (h ^ (k + 1)) * 1099511628211ULL;
    if (ready_order.size() != params_.size()) h = 0;
    const auto all = comm_->template all_gather<std::uint64_t>(h);
    for (auto x : all)
      if (x != all[0] || x == 0) return;  // the ranks disagree (data-dependent graphs): keep the layout
    std::vector<std::pair<std::string, std::shared_ptr<VarData<T, B>>>> list;  // GradBuckets fills from the end
    for (auto it = ready_order.rbegin(); it != ready_order.rend(); ++it)
      if (!gathered_[*it]) list.push_back({names_[*it], params_[*it].data()});
    buckets_ = GradBuckets<T, B>(list, opt_.bucket_cap_bytes, opt_.first_bucket_cap_bytes);
    map_buckets();
    rebuilt_ = true;
  }

  void map_buckets() {
    bucket_of_.assign(params_.size(), std::size_t(-1));  // no elements, no bucket: never waited for
    for (std::size_t b = 0; b < buckets_.size(); ++b)
      for (auto& e : buckets_.buckets()[b].entries) bucket_of_[index_of(e.var.get())] = b;
  }

  /// Starts bucket all-reduces, in bucket order, as the tape reports their gradients complete.
  struct Overlap final : BackwardObserver {
    Overlap(DataParallel& dp, typename Comm::pending_type& pending) : dp(dp), pending(pending) {
      left.resize(dp.buckets_.size());
      for (std::size_t b = 0; b < left.size(); ++b) left[b] = dp.buckets_.buckets()[b].entries.size();
      writes_at_start.resize(dp.params_.size());
      for (std::size_t k = 0; k < dp.params_.size(); ++k) writes_at_start[k] = dp.params_[k].data()->grad_writes;
    }
    void leaf_ready(std::size_t k) override {
      ready_order.push_back(k);
      const std::size_t b = dp.bucket_of_[k];
      if (b < left.size()) --left[b];
      launch_ready(false);
    }
    void step_done(std::size_t index) override {
      remaining = index;
      if (index > 0 && next > 0) {
        if constexpr (requires { pending.progress(); }) pending.progress();
      }
    }
    /// Starts every bucket, in order, whose gradients are all complete (all of them with force).
    void launch_ready(bool force) {
      auto& bs = dp.buckets_.buckets();
      for (; next < bs.size() && (force || left[next] == 0); ++next) {
        if (remaining > 0) ++dp.stats_.overlapped;
        // From here on the bucket's gradients must not change: their writes are frozen.
        for (auto& e : bs[next].entries) {
          const std::size_t k = dp.index_of(e.var.get());
          writes_at_start[k] = e.var->grad_writes;
        }
        dp.comm_->start_all_reduce(bs[next].data(), bs[next].numel(), ReduceOp::mean, pending);
      }
    }
    DataParallel& dp;
    typename Comm::pending_type& pending;
    std::vector<std::size_t> left;  // per bucket: gradients not yet complete
    std::vector<std::uint64_t> writes_at_start;
    std::vector<std::size_t> ready_order;  // parameters in the order the tape completed them
    std::size_t next = 0;                                   // first bucket not yet started
    std::size_t remaining = std::numeric_limits<std::size_t>::max();  // backward steps still to run
  };

  std::size_t index_of(const void* p) const {
    auto it = std::lower_bound(index_.begin(), index_.end(), std::pair<const void*, std::size_t>{p, 0});
    return it->second;
  }

  const Comm* comm_;
  DataParallelOptions opt_;
  std::vector<Var<T, AnyShape, B>> params_;
  std::vector<Var<T, AnyShape, B>> frozen_;  // requires_grad == false: broadcast, never reduced
  std::vector<std::string> names_;
  std::vector<const void*> leaves_;                         // params_' VarData, for the tape
  std::vector<std::pair<const void*, std::size_t>> index_;  // VarData -> index in params_, sorted
  std::vector<std::size_t> bucket_of_;                      // index in params_ -> bucket
  std::vector<VarData<T, B>*> sparse_;                      // finish(): row-sparse gradients of this step
  std::vector<std::uint8_t> dense_flags_;                   // finish(): per sparse_, whether it was accumulated densely
  std::vector<std::uint8_t> marks_host_;                    // finish() on a device backend: dense_flags_ and the marks, packed
  Tensor<std::uint8_t, AnyShape, B> marks_device_;          // ... and their device copy, all-reduced (max)
  std::vector<std::uint8_t> gathered_;                      // per params_: a row-sparse table reduced by gathering
  std::vector<Gather> gathers_;                             // per params_: its buffers (kept between steps)
  std::size_t whole_table_bytes_ = 0;                       // gathered tables all-reduced whole this step
  bool layout_settled_ = false, rebuilt_ = false;
  GradBuckets<T, B> buckets_;
  ReduceStats stats_;
};

}  // namespace attn::dist
