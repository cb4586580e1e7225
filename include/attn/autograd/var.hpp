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
  Tensor<T, AnyShape, B> value;
  Tensor<T, AnyShape, B> grad;  // empty until something accumulates into it
  bool requires_grad = false;

  /// Row-sparse gradients (a (rows, dim) table looked up by ids, nn::Embedding with .sparse):
  /// while only row scatters have accumulated into grad since the last zero_grad(), grad_rows
  /// lists the rows that may be non-zero and every other row is zero, so optimizers, clipping
  /// and zero_grad() touch those rows only. Any other accumulation makes the gradient dense.
  bool sparse_rows = false;
  bool grad_dense = false;
  std::vector<std::size_t> grad_rows;
  std::vector<std::uint8_t> row_marked;
  /// Counts the accesses through grad_ref() and grad_ref_rows(), the ways backward steps write
  /// gradients (dist::DataParallel checks with it that no step touches a gradient it has already
  /// started to all-reduce).
  std::uint64_t grad_writes = 0;
  /// Counts the writes to value made by the library: optimizer steps, loading a state dict,
  /// parameter broadcasts, initialisers (like PyTorch's tensor version counter). Code that writes
  /// a value through its raw data calls mark_value_written(). What is computed from a value and
  /// kept (nn::LstmInputTables) records the count and refuses to be used once it has moved.
  std::uint64_t value_writes = 0;
  void mark_value_written() noexcept { ++value_writes; }
  /// A form of value that a kernel keeps for reuse (a weight packed in int8 or bf16 for inference),
  /// valid while value_writes is what it was when it was made. Read and written only through
  /// detail::derived_pack (autograd/packed_weights.hpp), under its lock.
  struct Derived {
    int kind = 0;
    std::uint64_t writes = 0;
    std::shared_ptr<const void> data;
  };
  Derived derived;

  /// The gradient, allocated as zeros on first use. The caller may write anywhere in it.
  Tensor<T, AnyShape, B>& grad_ref() {
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
    overwrite = grad.empty();
    if (overwrite) grad = Tensor<T, AnyShape, B>(value.dims());
    return grad_ref();
  }

  /// The gradient for a scatter into the rows named by ids (padding_idx excluded); with
  /// sparse_rows, records them. ids are in B's memory: a device backend copies them to the host to
  /// record the rows (one wait for the device per call while the gradient is row-sparse).
  template <class I>
  Tensor<T, AnyShape, B>& grad_ref_rows(const I* ids, std::size_t n, long long padding_idx) {
    if (grad.empty()) grad = Tensor<T, AnyShape, B>::zeros(value.dims());
    ++grad_writes;
    if (sparse_rows && !grad_dense && value.rank() == 2) {
      if constexpr (B::host_accessible) {
        mark_rows(ids, n, padding_idx);
      } else {
        std::vector<I> host(n);
        B::template to_host<I>(host.data(), ids, n);
        mark_rows(host.data(), n, padding_idx);
      }
      return grad;
    }
    grad_dense = true;
    return grad;
  }

  /// True when grad is allocated and zero outside grad_rows.
  bool grad_is_row_sparse() const noexcept { return sparse_rows && !grad_dense && !grad.empty(); }

  /// Calls f(offset, count) for the spans of grad that may be non-zero: the recorded rows of a
  /// row-sparse gradient, otherwise the whole buffer (nothing when grad is empty).
  template <class F>
  void for_each_grad_span(F&& f) const {
    if (grad.empty()) return;
    if (grad_is_row_sparse()) {
      const std::size_t dim = value.dims()[1];
      for (auto r : grad_rows) f(r * dim, dim);
    } else {
      f(std::size_t{0}, grad.numel());
    }
  }

  /// Clears the gradient. A row-sparse one keeps its buffer and zeroes only its recorded rows (a
  /// device backend clears the whole buffer in one fill rather than one per row).
  void zero_grad() {
    if (grad_is_row_sparse()) {
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
  }

 private:
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
  Tensor<T, S, B> grad() const {
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
