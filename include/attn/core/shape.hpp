// SPDX-License-Identifier: MIT
// Extents known at compile time or at run time (attn::dyn), and the shape algebra of the ops.
//   using X = attn::Shape<attn::dyn, attn::dyn, 128>;   // (batch, time, 128)
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <utility>

#include "error.hpp"

namespace attn {

/// An extent known only at run time.
inline constexpr std::size_t dyn = static_cast<std::size_t>(-1);

/// The largest rank a tensor may have.
inline constexpr std::size_t max_rank = 6;

/// Run-time extents (or strides) of a tensor: up to max_rank values.
struct Dims {
  std::array<std::size_t, max_rank> v{};
  std::size_t n = 0;

  constexpr Dims() = default;
  constexpr Dims(std::initializer_list<std::size_t> l) {
    if (l.size() > max_rank) throw ShapeError("Dims: rank " + std::to_string(l.size()) + " exceeds max_rank");
    for (auto x : l) v[n++] = x;
  }
  static constexpr Dims of_rank(std::size_t r, std::size_t fill = 0) {
    Dims d;
    d.n = r;
    for (std::size_t i = 0; i < r; ++i) d.v[i] = fill;
    return d;
  }
  constexpr std::size_t rank() const noexcept { return n; }
  constexpr std::size_t size() const noexcept { return n; }
  constexpr std::size_t& operator[](std::size_t i) noexcept { return v[i]; }
  constexpr std::size_t operator[](std::size_t i) const noexcept { return v[i]; }
  /// Extent counted from the end: back(0) is the last axis.
  constexpr std::size_t back(std::size_t i = 0) const noexcept { return v[n - 1 - i]; }
  constexpr std::size_t numel() const noexcept {
    std::size_t p = 1;
    for (std::size_t i = 0; i < n; ++i) p *= v[i];
    return p;
  }
  constexpr void push_back(std::size_t x) {
    if (n == max_rank) throw ShapeError("Dims: rank exceeds max_rank");
    v[n++] = x;
  }
  constexpr bool operator==(const Dims& o) const noexcept {
    if (n != o.n) return false;
    for (std::size_t i = 0; i < n; ++i)
      if (v[i] != o.v[i]) return false;
    return true;
  }
  /// "(2, 3, 4)"
  std::string str() const {
    std::string s = "(";
    for (std::size_t i = 0; i < n; ++i) {
      if (i) s += ", ";
      s += v[i] == dyn ? std::string("dyn") : std::to_string(v[i]);
    }
    return s + ")";
  }
};

/// Row-major contiguous strides (in elements) of dims.
constexpr Dims contiguous_strides(const Dims& d) {
  Dims s = Dims::of_rank(d.n);
  std::size_t acc = 1;
  for (std::size_t i = d.n; i-- > 0;) {
    s.v[i] = acc;
    acc *= d.v[i];
  }
  return s;
}

/// A static shape: each extent a number or attn::dyn.
template <std::size_t... E>
struct Shape {
  static constexpr std::size_t rank = sizeof...(E);
  static_assert(rank <= max_rank, "attn::Shape: rank exceeds attn::max_rank");
  static constexpr std::array<std::size_t, rank> extents{E...};
  static constexpr bool fully_static = ((E != dyn) && ...);
  /// The static extents, with dyn where unknown.
  static constexpr Dims dims() { return Dims{E...}; }
};

/// The shape tag of a tensor whose rank is known only at run time (used inside the autograd engine).
struct AnyShape {};

template <class S>
struct is_shape : std::false_type {};
template <std::size_t... E>
struct is_shape<Shape<E...>> : std::true_type {};

template <class S>
concept StaticRankShape = is_shape<S>::value;
template <class S>
concept ShapeLike = is_shape<S>::value || std::is_same_v<S, AnyShape>;

/// "(dyn, dyn, 128)"
template <class S>
std::string shape_string() {
  if constexpr (std::is_same_v<S, AnyShape>) {
    return "(any rank)";
  } else {
    return S::dims().str();
  }
}

/// Checks run-time dims against the static shape S; throws ShapeError naming op.
template <class S>
void check_dims(const char* op, const Dims& d) {
  if constexpr (is_shape<S>::value) {
    bool ok = d.n == S::rank;
    for (std::size_t i = 0; ok && i < d.n; ++i) ok = S::extents[i] == dyn || S::extents[i] == d.v[i];  // d.n == rank here
    if (!ok) throw ShapeError(std::string(op) + ": got shape " + d.str() + ", expected " + shape_string<S>());
  }
}

/// Throws ShapeError "op: what: shape a vs shape b".
[[noreturn]] inline void shape_mismatch(const char* op, const std::string& what, const Dims& a, const Dims& b) {
  throw ShapeError(std::string(op) + ": " + what + ": " + a.str() + " vs " + b.str());
}

namespace shapes {

template <std::size_t I, class S>
inline constexpr std::size_t extent = S::extents[I];

/// Axis counted from the end (0 = last).
template <class S, std::size_t FromBack>
inline constexpr std::size_t back = S::extents[S::rank - 1 - FromBack];

/// True when two extents may be equal at run time.
constexpr bool may_equal(std::size_t a, std::size_t b) { return a == dyn || b == dyn || a == b; }

namespace detail {
template <class S, std::size_t N, class Seq>
struct replace_back_impl;
template <class S, std::size_t N, std::size_t... I>
struct replace_back_impl<S, N, std::index_sequence<I...>> {
  using type = Shape<(I + 1 == S::rank ? N : S::extents[I])...>;
};
template <class S, std::size_t Axis, std::size_t N, class Seq>
struct replace_impl;
template <class S, std::size_t Axis, std::size_t N, std::size_t... I>
struct replace_impl<S, Axis, N, std::index_sequence<I...>> {
  using type = Shape<(I == Axis ? N : S::extents[I])...>;
};
template <class S, std::size_t Axis, class Seq>
struct drop_impl;
template <class S, std::size_t Axis, std::size_t... I>
struct drop_impl<S, Axis, std::index_sequence<I...>> {
  using type = Shape<S::extents[I < Axis ? I : I + 1]...>;
};
template <class S, std::size_t N, class Seq>
struct append_impl;
template <class S, std::size_t N, std::size_t... I>
struct append_impl<S, N, std::index_sequence<I...>> {
  using type = Shape<S::extents[I]..., N>;
};
template <class S, std::size_t Axis, std::size_t N, class Seq>
struct insert_impl;
template <class S, std::size_t Axis, std::size_t N, std::size_t... I>
struct insert_impl<S, Axis, N, std::index_sequence<I...>> {
  using type = Shape<(I == Axis ? N : S::extents[I < Axis ? I : I - 1])...>;
};
template <class S, std::size_t... P>
struct permute_impl {
  using type = Shape<S::extents[P]...>;
};

// Broadcast of two extents aligned from the right; Axis is the output axis (kept in the
// instantiation so that the compiler's note names it).
template <std::size_t Axis, std::size_t A, std::size_t B>
constexpr std::size_t broadcast_extent() {
  static_assert(A == dyn || B == dyn || A == B || A == 1 || B == 1,
                "attn element-wise op: static extents differ at output axis `Axis` and neither is 1");
  if constexpr (A == 1) return B;
  else if constexpr (B == 1) return A;
  else if constexpr (A == dyn) return B == dyn ? dyn : B;
  else return A;
}
template <class SA, class SB, class Seq>
struct broadcast_impl;
template <class SA, class SB, std::size_t... I>
struct broadcast_impl<SA, SB, std::index_sequence<I...>> {
  static constexpr std::size_t R = sizeof...(I);
  static constexpr std::size_t ext(const auto& e, std::size_t r, std::size_t i) {
    // extent of a rank-r shape at output axis i (right-aligned), 1 when absent
    return i + r < R ? 1 : e[i + r - R];
  }
  using type = Shape<broadcast_extent<I, ext(SA::extents, SA::rank, I), ext(SB::extents, SB::rank, I)>()...>;
};

template <class S, std::size_t N>
struct replace_back { using type = typename replace_back_impl<S, N, std::make_index_sequence<S::rank>>::type; };
template <std::size_t N>
struct replace_back<AnyShape, N> { using type = AnyShape; };
template <class S, std::size_t Axis, std::size_t N>
struct replace { using type = typename replace_impl<S, Axis, N, std::make_index_sequence<S::rank>>::type; };
template <std::size_t Axis, std::size_t N>
struct replace<AnyShape, Axis, N> { using type = AnyShape; };
template <class S, std::size_t Axis>
struct drop { using type = typename drop_impl<S, Axis, std::make_index_sequence<S::rank - 1>>::type; };
template <std::size_t Axis>
struct drop<AnyShape, Axis> { using type = AnyShape; };
template <class S, std::size_t N>
struct append { using type = typename append_impl<S, N, std::make_index_sequence<S::rank>>::type; };
template <std::size_t N>
struct append<AnyShape, N> { using type = AnyShape; };
template <class S, std::size_t Axis, std::size_t N>
struct insert { using type = typename insert_impl<S, Axis, N, std::make_index_sequence<S::rank + 1>>::type; };
template <std::size_t Axis, std::size_t N>
struct insert<AnyShape, Axis, N> { using type = AnyShape; };
template <class S, std::size_t... P>
struct permute { using type = typename permute_impl<S, P...>::type; };
template <std::size_t... P>
struct permute<AnyShape, P...> { using type = AnyShape; };
}  // namespace detail

// Each alias maps AnyShape to AnyShape, so code generic over static and run-time-rank shapes
// can use them unconditionally.

/// S with its last extent replaced by N.
template <class S, std::size_t N>
using replace_back_t = typename detail::replace_back<S, N>::type;
/// S with extent Axis replaced by N.
template <class S, std::size_t Axis, std::size_t N>
using replace_t = typename detail::replace<S, Axis, N>::type;
/// S without axis Axis.
template <class S, std::size_t Axis>
using drop_t = typename detail::drop<S, Axis>::type;
/// S with N appended.
template <class S, std::size_t N>
using append_t = typename detail::append<S, N>::type;
/// S with N inserted before axis Axis.
template <class S, std::size_t Axis, std::size_t N>
using insert_t = typename detail::insert<S, Axis, N>::type;
/// S with its axes reordered: result axis i is input axis P[i].
template <class S, std::size_t... P>
using permute_t = typename detail::permute<S, P...>::type;
/// Numpy-style broadcast of two static shapes (right-aligned); mismatched static extents do not compile.
template <class SA, class SB>
using broadcast_t = typename detail::broadcast_impl<SA, SB,
    std::make_index_sequence<(SA::rank > SB::rank ? SA::rank : SB::rank)>>::type;

/// Static extent FromBack axes from the end, or dyn for AnyShape.
template <class S, std::size_t FromBack>
constexpr std::size_t back_or_dyn() {
  if constexpr (std::is_same_v<S, AnyShape>) return dyn;
  else return S::extents[S::rank - 1 - FromBack];
}

/// Product of static extents (dyn if any is dyn).
template <class S>
constexpr std::size_t static_numel() {
  std::size_t p = 1;
  for (auto e : S::extents) {
    if (e == dyn) return dyn;
    p *= e;
  }
  return p;
}

}  // namespace shapes

/// Run-time numpy-style broadcast of two dims; throws ShapeError naming op.
inline Dims broadcast_dims(const char* op, const Dims& a, const Dims& b) {
  std::size_t r = a.n > b.n ? a.n : b.n;
  Dims out = Dims::of_rank(r);
  for (std::size_t i = 0; i < r; ++i) {
    std::size_t ea = i + a.n < r ? 1 : a.v[i + a.n - r];
    std::size_t eb = i + b.n < r ? 1 : b.v[i + b.n - r];
    if (ea != eb && ea != 1 && eb != 1) shape_mismatch(op, "cannot broadcast at axis " + std::to_string(i), a, b);
    out.v[i] = ea == 1 ? eb : ea;
  }
  return out;
}

}  // namespace attn
