// SPDX-License-Identifier: MIT
// Var: a tensor recorded on a Tape (autograd/tape.hpp), with a gradient slot, and the helpers with
// which ops make their outputs and decide whether to record a backward step.
//   attn::Var<float, attn::Shape<attn::dyn, 16>> x(value, /*requires_grad=*/true); x.grad();
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/expr.hpp"
#include "../core/tensor.hpp"
#include "tape.hpp"

namespace attn {

/// What a Var refers to: its value and (once backward reaches it) its gradient.
template <class T, class B>
struct VarData {
  using value_type = T;
  using backend_type = B;
  Tensor<T, AnyShape, B> value;
  Tensor<T, AnyShape, B> grad;  // empty until something accumulates into it
  bool requires_grad = false;

  /// Row-sparse gradients (a (rows, dim) table looked up by ids, nn::Embedding with .sparse):
  /// while only row scatters have accumulated into the gradient since the last zero_grad(),
  /// grad_rows lists the rows that may be non-zero and every other row is zero, so optimizers,
  /// clipping and zero_grad() touch those rows only. Any other accumulation makes it dense.
  ///
  /// Such a gradient has one of two forms. Compact (grad_compact true; host backends, when the
  /// first scatter finds no gradient buffer): grad stays empty and row grad_rows[i]'s gradient is
  /// row i of grad_values (as torch's sparse COO gradient: memory for the rows used, not the
  /// table). In place: grad is the whole table and row_marked flags the rows in grad_rows (device
  /// backends, and a buffer that already existed, such as a dist::DataParallel bucket).
  /// materialize_grad() turns the compact form into the in-place one; Var::grad() does so.
  bool sparse_rows = false;
  bool grad_dense = false;
  std::vector<std::size_t> grad_rows;
  std::vector<std::uint8_t> row_marked;
  bool grad_compact = false;
  /// The compact form's rows: (capacity, dim), rows [0, grad_rows.size()) in use. Kept (not freed)
  /// by zero_grad() for the next step.
  Tensor<T, AnyShape, B> grad_values;
  /// row_slot[r]: r's index in grad_rows in the compact form, or kNoSlot.
  std::vector<std::uint32_t> row_slot;
  static constexpr std::uint32_t kNoSlot = 0xffffffffu;
  /// True while grad is a whole-table buffer that materialize_grad() made from the compact form:
  /// zero_grad() then drops it, so that the next step is compact again.
  bool grad_materialized = false;
  /// Counts the accesses through grad_ref() and scatter_into_rows(), the ways backward steps write
  /// gradients (dist::DataParallel checks with it that no step touches a gradient it has already
  /// started to all-reduce).
  std::uint64_t grad_writes = 0;
  /// Counts the writes to value made by the library: optimizer steps, loading a state dict,
  /// parameter broadcasts, initialisers (like PyTorch's tensor version counter). Code that writes
  /// a value through its raw data calls mark_value_written(). What is computed from a value and
  /// kept (nn::LstmInputTables) records the count and refuses to be used once it has moved.
  std::uint64_t value_writes = 0;
  void mark_value_written() noexcept { ++value_writes; }
  /// Forms of value that kernels keep for reuse (a weight packed in int8 or bf16 for inference), one
  /// slot per kind (detail::PackKind, from 1), each valid while value_writes is what it was when
  /// it was made. Read and written only through detail::derived_pack
  /// (autograd/packed_weights.hpp), under its lock.
  struct Derived {
    std::uint64_t writes = 0;
    std::shared_ptr<const void> data;
  };
  static constexpr int kDerivedKinds = 2;
  Derived derived[kDerivedKinds];

  /// The gradient, allocated as zeros on first use. The caller may write anywhere in it.
  Tensor<T, AnyShape, B>& grad_ref() {
    materialize_grad();
    if (grad.empty()) grad = Tensor<T, AnyShape, B>::zeros(value.dims());
    grad_dense = true;
    ++grad_writes;
    return grad;
  }

  /// The gradient for a step that writes every element of it: when there is none yet it is
  /// allocated without clearing and `overwrite` is set, and the caller must then store (not add)
  /// every element; otherwise it is grad_ref() and the caller adds to it. Saves clearing a buffer
  /// that a product with beta = 0 fills anyway.
  Tensor<T, AnyShape, B>& grad_to_write(bool& overwrite) {
    materialize_grad();
    overwrite = grad.empty();
    if (overwrite) grad = Tensor<T, AnyShape, B>(value.dims());
    return grad_ref();
  }

  /// Adds rows into the gradient: scatter(dst, idx, skip) must add row i of its source into row
  /// idx[i] of dst for the n ids, skipping idx[i] == skip (kernels::scatter_add_rows). ids name
  /// rows of value (padding_idx excluded) and are in B's memory. With sparse_rows the rows are
  /// recorded: in the compact form scatter is handed grad_values and the ids' slots in it; otherwise
  /// the whole-table gradient and ids (a device backend copies ids to the host to record the rows:
  /// one wait for the device per call while the gradient is row-sparse).
  template <class I, class Scatter>
  void scatter_into_rows(const I* ids, std::size_t n, long long padding_idx, Scatter&& scatter) {
    ++grad_writes;
    const bool by_rows = sparse_rows && !grad_dense && value.rank() == 2;
    if constexpr (B::host_accessible) {
      if (by_rows && (grad_compact || (grad.empty() && value.dims()[0] < kNoSlot))) {
        const std::int64_t* slots = compact_slots(ids, n, padding_idx);  // may replace grad_values: first
        scatter(grad_values.data(), slots, -1LL);
        return;
      }
    }
    // The whole-table form (a device backend, a buffer that already exists, a table of 2^32 - 1 rows
    // or more, or a dense gradient).
    if (grad.empty()) grad = Tensor<T, AnyShape, B>::zeros(value.dims());
    if (!by_rows) {
      grad_dense = true;
    } else if constexpr (B::host_accessible) {
      mark_rows(ids, n, padding_idx);
    } else {
      std::vector<I> host(n);
      B::template to_host<I>(host.data(), ids, n);
      mark_rows(host.data(), n, padding_idx);
    }
    scatter(grad.data(), ids, padding_idx);
  }

  /// True when some gradient has been accumulated (in either form).
  bool has_grad() const noexcept { return grad_compact || !grad.empty(); }

  /// True when the gradient is allocated and zero outside grad_rows.
  bool grad_is_row_sparse() const noexcept { return sparse_rows && !grad_dense && has_grad(); }

  /// Calls f(pointer, count) for the spans of the gradient that may be non-zero: each recorded
  /// row of a row-sparse gradient, in the order of grad_rows, in either form (so that sums over
  /// them do not depend on the form), otherwise the whole buffer (nothing when there is none).
  template <class F>
  void for_each_grad_span(F&& f) const {
    for_each_span(*this, f);
  }
  template <class F>
  void for_each_grad_span(F&& f) {
    for_each_span(*this, f);
  }

  /// The rows of a row-sparse gradient's values: row i holds row grad_rows[i] of the table (the
  /// compact form's grad_values, or grad itself, whose row r is row r).
  const T* grad_row_values() const noexcept { return grad_compact ? grad_values.data() : grad.data(); }

  /// Turns a compact gradient into the in-place form (a whole-table buffer, zero outside the
  /// recorded rows, which stay recorded); nothing otherwise. zero_grad() drops that buffer, so the
  /// next step is compact again, unless `keep`: then it stays, zero_grad() zeroes its rows in
  /// place and later steps scatter into it (an optimizer that reads whole tables, a bucket).
  void materialize_grad(bool keep = false) {
    if (!grad_compact) {
      if (keep) grad_materialized = false;
      return;
    }
    const std::size_t rows = value.dims()[0], dim = value.dims()[1];
    grad = Tensor<T, AnyShape, B>::zeros(value.dims());
    row_marked.assign(rows, 0);
    for (std::size_t i = 0; i < grad_rows.size(); ++i) {
      const std::size_t r = grad_rows[i];
      B::template copy<T>(grad.data() + r * dim, grad_values.data() + i * dim, dim);
      row_marked[r] = 1;
      row_slot[r] = kNoSlot;
    }
    grad_compact = false;
    grad_materialized = !keep;
  }

  /// Forgets the gradient, as torch's `grad = None`: zero_grad, then its buffers are freed too.
  /// Optimizers skip a parameter without one (nn::Module::set_requires_grad(false) calls it).
  void drop_grad() {
    zero_grad();
    grad = {};
    grad_values = {};
  }

  /// Clears the gradient. A compact one keeps its row buffer for the next step; an in-place
  /// row-sparse one keeps its buffer and zeroes only its recorded rows (a device backend clears the
  /// whole buffer in one fill rather than one per row), unless materialize_grad() made it.
  void zero_grad() {
    if (grad_compact) {
      for (auto r : grad_rows) row_slot[r] = kNoSlot;
      grad_compact = false;
    } else if (grad_is_row_sparse() && !grad_materialized) {
      if constexpr (!B::host_accessible) B::template fill<T>(grad.data(), grad.numel(), T(0));
      for (auto r : grad_rows) {
        if constexpr (B::host_accessible) B::template fill<T>(grad.data() + r * value.dims()[1], value.dims()[1], T(0));
        row_marked[r] = 0;
      }
    } else {
      grad = {};
      std::fill(row_marked.begin(), row_marked.end(), std::uint8_t{0});
    }
    grad_rows.clear();
    grad_dense = false;
    grad_materialized = false;
  }

 private:
  std::vector<std::int64_t> slots_;  // compact_slots' result, kept for the next call

  /// for_each_grad_span for a const or mutable VarData (pointers to const or mutable elements).
  template <class Self, class F>
  static void for_each_span(Self& self, F& f) {
    if (self.grad_compact) {
      const std::size_t dim = self.value.dims()[1];
      for (std::size_t i = 0; i < self.grad_rows.size(); ++i) f(self.grad_values.data() + i * dim, dim);
    } else if (self.grad.empty()) {
      return;
    } else if (self.grad_is_row_sparse()) {
      const std::size_t dim = self.value.dims()[1];
      for (auto r : self.grad_rows) f(self.grad.data() + r * dim, dim);
    } else {
      f(self.grad.data(), self.grad.numel());
    }
  }

  /// The compact form's slots for host ids[0, n): a new row gets the next slot, zeroed; padding_idx
  /// and out-of-range ids get -1. grad_values grows (doubling, at most to the table) to hold them.
  template <class I>
  const std::int64_t* compact_slots(const I* ids, std::size_t n, long long padding_idx) {
    const std::size_t rows = value.dims()[0], dim = value.dims()[1];
    if (row_slot.size() != rows) row_slot.assign(rows, kNoSlot);
    grad_compact = true;
    const std::size_t before = grad_rows.size();
    slots_.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      const auto r = static_cast<std::size_t>(ids[i]);
      if (static_cast<long long>(ids[i]) == padding_idx || r >= rows) {
        slots_[i] = -1;
        continue;
      }
      if (row_slot[r] == kNoSlot) {
        row_slot[r] = static_cast<std::uint32_t>(grad_rows.size());
        grad_rows.push_back(r);
      }
      slots_[i] = row_slot[r];
    }
    const std::size_t used = grad_rows.size();
    const std::size_t capacity = grad_values.empty() ? 0 : grad_values.dims()[0];
    if (used > capacity) {
      Tensor<T, AnyShape, B> grown(Dims{std::min(rows, std::max(used, 2 * capacity)), dim});
      if (before > 0) B::template copy<T>(grown.data(), grad_values.data(), before * dim);
      grad_values = std::move(grown);
    }
    if (used > before) B::template fill<T>(grad_values.data() + before * dim, (used - before) * dim, T(0));
    return slots_.data();
  }

  /// Records the rows named by host ids[0, n) (padding_idx and out-of-range ids skipped).
  template <class I>
  void mark_rows(const I* ids, std::size_t n, long long padding_idx) {
    const std::size_t rows = value.dims()[0];
    if (row_marked.size() != rows) row_marked.assign(rows, 0);
    for (std::size_t i = 0; i < n; ++i) {
      const auto r = static_cast<std::size_t>(ids[i]);
      if (static_cast<long long>(ids[i]) == padding_idx || r >= rows || row_marked[r]) continue;
      row_marked[r] = 1;
      grad_rows.push_back(r);
    }
  }
};

/// A value in a computation. Copies share the same value and gradient. S is the static shape.
template <class T, class S = AnyShape, class B = cpu>
class Var {
 public:
  using value_type = T;
  using shape_type = S;
  using backend = B;
  using data_type = VarData<T, B>;

  Var() = default;
  /// A leaf holding `value`; requires_grad makes backward fill its gradient.
  template <class S2>
  explicit Var(const Tensor<T, S2, B>& value, bool requires_grad = false) : d_(std::allocate_shared<data_type>(detail::PoolAllocator<data_type>{})) {
    check_dims<S>("Var", value.dims());
    d_->value = value.erased();
    d_->requires_grad = requires_grad;
  }
  /// Wraps existing data (used by ops and modules).
  Var(std::shared_ptr<data_type> d, Tape* tape) : d_(std::move(d)), tape_(tape) {
    if (d_) check_dims<S>("Var", d_->value.dims());
  }
  /// A Var of another static shape converts with a run-time check.
  template <class S2>
    requires(!std::is_same_v<S2, S>)
  Var(const Var<T, S2, B>& o) : Var(o.data(), o.tape()) {}

  /// The value with its static shape.
  Tensor<T, S, B> value() const { return Tensor<T, S, B>::alias(d_->value.storage(), d_->value.dims()); }
  const Tensor<T, AnyShape, B>& raw() const { return d_->value; }
  /// The gradient (empty if backward has not reached this Var).
  /// A compact row-sparse gradient (nn::Embedding with .sparse) is first made whole-table
  /// (VarData::materialize_grad), as torch's sparse_grad.to_dense(): that changes the VarData, so
  /// two threads must not call grad() on one such Var at once. The tensor returned aliases the
  /// gradient until zero_grad(), which drops a buffer made so (a later step is compact again).
  Tensor<T, S, B> grad() const {
    d_->materialize_grad();
    if (d_->grad.empty()) return {};
    return Tensor<T, S, B>::alias(d_->grad.storage(), d_->grad.dims());
  }
  const Dims& dims() const { return d_->value.dims(); }
  std::size_t size(std::size_t axis) const { return d_->value.dims()[axis]; }
  std::size_t rank() const { return d_->value.dims().n; }
  std::size_t numel() const { return d_->value.numel(); }
  bool requires_grad() const { return d_ && d_->requires_grad; }
  bool defined() const { return static_cast<bool>(d_); }
  const std::shared_ptr<data_type>& data() const { return d_; }
  /// The tape of the context that produced this Var (nullptr for leaves and under NoGrad).
  /// Operators (+, -, *, /) record on their operands' tape; to combine leaves only, use the
  /// op's context form (attn::add(ctx, a, b)).
  Tape* tape() const { return tape_; }
  /// The same Var with its static shape forgotten.
  Var<T, AnyShape, B> erased() const { return Var<T, AnyShape, B>(d_, tape_); }
  /// The same Var, detached from any tape: no gradient flows through the result.
  Var detach() const { return Var(value(), false); }

 private:
  std::shared_ptr<data_type> d_;
  Tape* tape_ = nullptr;
};

namespace detail {

/// True when an op's result needs a backward step: recording, and some input wants a gradient.
template <class... V>
bool needs_grad(Tape* tape, const V&... v) {
  return tape != nullptr && (v.requires_grad() || ...);
}

/// Makes the output Var of an op from its computed value.
template <class S, class T, class B, class S2>
Var<T, S, B> make_out(Tape* tape, Tensor<T, S2, B> value, bool requires_grad) {
  auto d = std::allocate_shared<VarData<T, B>>(PoolAllocator<VarData<T, B>>{});
  d->value = value.erased();
  d->requires_grad = requires_grad;
  return Var<T, S, B>(std::move(d), tape);
}

/// The tape of the first of several Vars that has one.
template <class... V>
Tape* common_tape(const V&... v) {
  Tape* t = nullptr;
  ((t = t ? t : v.tape()), ...);
  return t;
}

}  // namespace detail
}  // namespace attn
