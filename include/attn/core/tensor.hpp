// SPDX-License-Identifier: MIT
// Tensor<T, Shape, Backend>: owning, reference-counted storage on one backend; TensorView: a
// non-owning strided window. Static extents are checked when a tensor is made.
//   attn::Tensor<float, attn::Shape<attn::dyn, 128>> x({batch, 128});   // uninitialised
//   auto y = attn::Tensor<float, attn::Shape<attn::dyn, 128>>::zeros({batch, 128});
#pragma once
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "backend_concept.hpp"
#include "error.hpp"
#include "pool.hpp"
#include "shape.hpp"

namespace attn {

template <class T, class S = AnyShape, class B = cpu>
class TensorView;

/// Dense, row-major, contiguous tensor owning (a share of) its storage. Copies share storage;
/// clone() copies the elements. T is float or double (or an integer type for ids and masks).
template <class T, class S = AnyShape, class B = cpu>
class Tensor {
 public:
  using value_type = T;
  using shape_type = S;
  using backend = B;

  /// An empty tensor (rank 0, no storage).
  Tensor() = default;

  /// Uninitialised storage for dims, which must fit S.
  explicit Tensor(const Dims& d) : dims_(d) {
    check_dims<S>("Tensor", d);
    std::size_t n = d.numel();
    T* p = B::template allocate<T>(n);
    // The control block comes from the host pool too (if that throws, the deleter frees p).
    data_ = std::shared_ptr<T>(p, [n](T* q) { B::template deallocate<T>(q, n); }, detail::PoolAllocator<T>{});
  }

  static Tensor zeros(const Dims& d) { return full(d, T(0)); }
  static Tensor full(const Dims& d, T v) {
    Tensor t(d);
    B::template fill<T>(t.data(), t.numel(), v);
    return t;
  }
  /// Copies host values (row-major) into a new tensor of dims d.
  static Tensor from(const Dims& d, std::span<const T> host) {
    if (host.size() != d.numel())
      throw ShapeError("Tensor::from: " + std::to_string(host.size()) + " values for shape " + d.str());
    Tensor t(d);
    B::template from_host<T>(t.data(), host.data(), host.size());
    return t;
  }
  static Tensor from(const Dims& d, std::initializer_list<T> host) { return from(d, std::span<const T>(host.begin(), host.size())); }
  /// Wraps storage that shares ownership with `owner` (used for reshapes and slices).
  static Tensor alias(std::shared_ptr<T> data, const Dims& d) {
    check_dims<S>("Tensor", d);
    Tensor t;
    t.data_ = std::move(data);
    t.dims_ = d;
    return t;
  }

  /// Converts from a tensor of another static shape (run-time check against S).
  template <class S2>
    requires(!std::is_same_v<S2, S>)
  explicit Tensor(const Tensor<T, S2, B>& o) : data_(o.storage()), dims_(o.dims()) {
    check_dims<S>("Tensor conversion", dims_);
  }

  /// Allocates once and evaluates a lazy element-wise expression into the new tensor.
  template <class E>
    requires requires(const E& e) { e.bind(Dims{}); typename E::is_expression; }
  Tensor(const E& e);  // defined in expr.hpp
  /// Evaluates a lazy expression into this tensor's existing storage, without temporaries.
  template <class E>
    requires requires(const E& e) { e.bind(Dims{}); typename E::is_expression; }
  Tensor& operator=(const E& e);  // defined in expr.hpp

  T* data() noexcept { return data_.get(); }
  const T* data() const noexcept { return data_.get(); }
  const std::shared_ptr<T>& storage() const noexcept { return data_; }
  const Dims& dims() const noexcept { return dims_; }
  std::size_t rank() const noexcept { return dims_.n; }
  std::size_t size(std::size_t axis) const noexcept { return dims_.v[axis]; }
  std::size_t numel() const noexcept { return data_ ? dims_.numel() : 0; }
  bool empty() const noexcept { return !data_; }

  TensorView<T, S, B> view() noexcept { return {data(), dims_, contiguous_strides(dims_)}; }
  TensorView<const T, S, B> view() const noexcept { return {data(), dims_, contiguous_strides(dims_)}; }
  TensorView<const T, S, B> cview() const noexcept { return view(); }

  /// Element access (host backends only), no bounds check.
  template <class... I>
  T& operator()(I... i) noexcept {
    static_assert(B::host_accessible, "Tensor::operator(): element access needs a host-accessible backend");
    return data_.get()[offset(i...)];
  }
  template <class... I>
  const T& operator()(I... i) const noexcept {
    static_assert(B::host_accessible, "Tensor::operator(): element access needs a host-accessible backend");
    return data_.get()[offset(i...)];
  }
  /// Flat element access (host backends only).
  T& operator[](std::size_t i) noexcept {
    static_assert(B::host_accessible, "Tensor::operator[]: element access needs a host-accessible backend");
    return data_.get()[i];
  }
  const T& operator[](std::size_t i) const noexcept {
    static_assert(B::host_accessible, "Tensor::operator[]: element access needs a host-accessible backend");
    return data_.get()[i];
  }

  /// A deep copy.
  Tensor clone() const {
    Tensor t(dims_);
    B::template copy<T>(t.data(), data(), numel());
    return t;
  }
  /// The elements, copied to the host.
  std::vector<T> to_vector() const {
    std::vector<T> v(numel());
    if (!v.empty()) B::template to_host<T>(v.data(), data(), v.size());
    return v;
  }
  /// The tensor on backend B2, as torch's `.to(device)`: this tensor itself (the same storage) when
  /// B2 is B, else a copy on B2 (through the host when neither side is it; waits for a device).
  template <class B2>
  Tensor<T, S, B2> to() const {
    if constexpr (std::is_same_v<B2, B>) {
      return *this;
    } else {
      Tensor<T, S, B2> t(dims_);
      if (numel() == 0) return t;
      if constexpr (B::host_accessible) {
        t.copy_from_host(std::span<const T>(data(), numel()));
      } else if constexpr (B2::host_accessible) {
        copy_to_host(std::span<T>(t.data(), numel()));
      } else {
        const std::vector<T> v = to_vector();
        t.copy_from_host(std::span<const T>(v));
      }
      return t;
    }
  }
  /// Same storage, new dims (same element count); S2 checked at run time.
  template <class S2 = AnyShape>
  Tensor<T, S2, B> reshape(const Dims& d) const {
    if (d.numel() != dims_.numel()) shape_mismatch("Tensor::reshape", "element count differs", dims_, d);
    return Tensor<T, S2, B>::alias(data_, d);
  }
  /// The same tensor with its static shape forgotten.
  Tensor<T, AnyShape, B> erased() const { return Tensor<T, AnyShape, B>::alias(data_, dims_); }
  void fill(T v) { B::template fill<T>(data(), numel(), v); }
  /// Sets the count elements from offset (row-major) to v.
  void fill(T v, std::size_t offset, std::size_t count) {
    check_range("Tensor::fill", offset, count);
    B::template fill<T>(data() + offset, count, v);
  }
  /// Copies host values into the elements from offset on (row-major), on any backend.
  void copy_from_host(std::span<const T> host, std::size_t offset = 0) {
    check_range("Tensor::copy_from_host", offset, host.size());
    if (!host.empty()) B::template from_host<T>(data() + offset, host.data(), host.size());
  }
  /// Copies the elements from offset on (row-major) into host memory, on any backend.
  void copy_to_host(std::span<T> host, std::size_t offset = 0) const {
    check_range("Tensor::copy_to_host", offset, host.size());
    if (!host.empty()) B::template to_host<T>(host.data(), data() + offset, host.size());
  }

 private:
  void check_range(const char* what, std::size_t offset, std::size_t count) const {
    if (offset > numel() || count > numel() - offset)
      throw ShapeError(std::string(what) + ": elements [" + std::to_string(offset) + ", " + std::to_string(offset) + " + " +
                       std::to_string(count) + ") outside a tensor of " + std::to_string(numel()) + " (" + dims_.str() + ")");
  }
  template <class... I>
  std::size_t offset(I... i) const noexcept {
    std::size_t idx[] = {static_cast<std::size_t>(i)...};
    std::size_t off = 0;
    for (std::size_t a = 0; a < sizeof...(I); ++a) off = off * dims_.v[a] + idx[a];
    return off;
  }
  std::shared_ptr<T> data_;
  Dims dims_;
};

/// A non-owning, strided view of tensor memory. Cheap to copy; valid while the storage lives.
template <class T, class S, class B>
class TensorView {
 public:
  using value_type = std::remove_const_t<T>;
  using shape_type = S;
  using backend = B;

  TensorView() = default;
  TensorView(T* p, const Dims& d, const Dims& strides) : p_(p), dims_(d), strides_(strides) { check_dims<S>("TensorView", d); }
  TensorView(T* p, const Dims& d) : TensorView(p, d, contiguous_strides(d)) {}
  /// Non-const view converts to const view. (The target type is spelt through U so that a const
  /// view's class does not declare a conversion to itself, which Clang warns about.)
  template <class U = T>
    requires(!std::is_const_v<U>)
  operator TensorView<const std::remove_const_t<U>, S, B>() const { return {p_, dims_, strides_}; }

  T* data() const noexcept { return p_; }
  const Dims& dims() const noexcept { return dims_; }
  const Dims& strides() const noexcept { return strides_; }
  std::size_t rank() const noexcept { return dims_.n; }
  std::size_t size(std::size_t axis) const noexcept { return dims_.v[axis]; }
  std::size_t numel() const noexcept { return dims_.numel(); }
  bool contiguous() const noexcept { return strides_ == contiguous_strides(dims_); }

  template <class... I>
  T& operator()(I... i) const noexcept {
    std::size_t idx[] = {static_cast<std::size_t>(i)...};
    std::size_t off = 0;
    for (std::size_t a = 0; a < sizeof...(I); ++a) off += idx[a] * strides_.v[a];
    return p_[off];
  }
  /// A view with axes a and b swapped (no copy).
  TensorView<T, AnyShape, B> transpose(std::size_t a, std::size_t b) const {
    Dims d = dims_, s = strides_;
    std::swap(d.v[a], d.v[b]);
    std::swap(s.v[a], s.v[b]);
    return {p_, d, s};
  }

 private:
  T* p_ = nullptr;
  Dims dims_;
  Dims strides_;
};

template <class T>
struct is_tensor : std::false_type {};
template <class T, class S, class B>
struct is_tensor<Tensor<T, S, B>> : std::true_type {};
template <class T>
struct is_tensor_view : std::false_type {};
template <class T, class S, class B>
struct is_tensor_view<TensorView<T, S, B>> : std::true_type {};

}  // namespace attn
