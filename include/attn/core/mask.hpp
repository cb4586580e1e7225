// SPDX-License-Identifier: MIT
// Which positions of a padded (batch, time) input hold real tokens, with the convention in the type:
//   attn::Lengths{5, 3}        sample b's real tokens are positions [0, lengths[b]) (what an LSTM takes)
//   attn::KeepMask(m)          m (batch, time): true / 1 = a real token
//   attn::PaddingMask(m)       m (batch, time): true / 1 = padding (torch's key_padding_mask)
// m may hold bool, uint8 or any arithmetic type, with the values 0 and 1 only: anything else (such
// as torch's additive float key_padding_mask of 0 and -inf) is an ArgumentError, never a silent
// reading. nn::Attention and nn::masked_mean / masked_max take any of the three, nn::LSTM and
// nn::BiLSTM take Lengths or a mask whose real tokens come first, so that one description serves a
// whole model. A bare tensor in a mask's place is a compile error.
#pragma once
#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "error.hpp"
#include "pool.hpp"
#include "tensor.hpp"

namespace attn {

namespace mask_detail {
/// An integer tensor (batch) of lengths, e.g. int64 from a data loader, on any backend, copied to
/// the host; each must lie in [1, max] (`max_what` names the bound in the message).
template <std::integral I, class S, class B>
PoolVector<int> lengths_from_tensor(const Tensor<I, S, B>& t, std::size_t max, const char* who, const char* max_what) {
  if (t.rank() != 1)
    throw ShapeError(std::string(who) + ": lengths must be a vector (batch), got " + t.dims().str() +
                     (t.rank() == 2 ? "; a (batch, time) mask goes in as attn::KeepMask(m) (1 = real token) or attn::PaddingMask(m) (1 = padding)" : ""));
  PoolVector<I> host(t.numel());
  t.copy_to_host(std::span<I>(host.data(), host.size()));
  PoolVector<int> out(host.size());
  for (std::size_t i = 0; i < host.size(); ++i) {
    if (host[i] < I(1) || static_cast<unsigned long long>(host[i]) > max)
      throw ArgumentError(std::string(who) + ": lengths[" + std::to_string(i) + "] = " + std::to_string(host[i]) +
                          " is outside [1, " + std::to_string(max) + "] (" + max_what + ")");
    out[i] = static_cast<int>(host[i]);
  }
  return out;
}
}  // namespace mask_detail

/// The lengths of a batch's samples, each in [1, time] when used. Held in the host pool, so that a
/// training loop building one per batch allocates nothing once warm.
class Lengths {
 public:
  Lengths() = default;
  Lengths(std::initializer_list<int> l) : v_(l.begin(), l.end()) {}
  explicit Lengths(const std::vector<int>& l) : v_(l.begin(), l.end()) {}
  explicit Lengths(std::span<const int> l) : v_(l.begin(), l.end()) {}
  /// From an integer tensor (batch), e.g. int64, on any backend.
  template <std::integral I, class S, class B>
  explicit Lengths(const Tensor<I, S, B>& t)
      : v_(mask_detail::lengths_from_tensor(t, max_length, "attn::Lengths", "the largest length")) {}

  std::size_t size() const noexcept { return v_.size(); }
  int operator[](std::size_t i) const { return v_[i]; }
  std::span<const int> values() const noexcept { return v_; }

  /// Checks that there is one length per sample of a (batch, time) input, each in [1, time].
  void check(const char* who, std::size_t batch, std::size_t time) const {
    if (v_.size() != batch)
      throw ShapeError(std::string(who) + ": " + std::to_string(v_.size()) + " lengths for a batch of " + std::to_string(batch));
    for (std::size_t i = 0; i < v_.size(); ++i)
      if (v_[i] < 1 || static_cast<std::size_t>(v_[i]) > time)
        throw ArgumentError(std::string(who) + ": lengths[" + std::to_string(i) + "] = " + std::to_string(v_[i]) +
                            " is outside [1, " + std::to_string(time) + "] (the time extent of the input)");
  }

  static constexpr int max_length = 1 << 30;

 private:
  PoolVector<int> v_;
};

/// m (batch, time) with true / 1 for a real token and false / 0 for padding.
template <class E, class S = AnyShape, class B = cpu>
class KeepMask {
 public:
  static_assert(std::is_arithmetic_v<E>, "attn::KeepMask: the mask must hold bool or numbers");
  KeepMask() = default;  // an empty mask, to be assigned
  explicit KeepMask(Tensor<E, S, B> m) : m_(std::move(m)) {}
  const Tensor<E, S, B>& tensor() const noexcept { return m_; }

 private:
  Tensor<E, S, B> m_;
};

/// m (batch, time) with true / 1 for padding and false / 0 for a real token: the convention of
/// torch.nn.MultiheadAttention's key_padding_mask.
template <class E, class S = AnyShape, class B = cpu>
class PaddingMask {
 public:
  static_assert(std::is_arithmetic_v<E>, "attn::PaddingMask: the mask must hold bool or numbers");
  PaddingMask() = default;  // an empty mask, to be assigned
  explicit PaddingMask(Tensor<E, S, B> m) : m_(std::move(m)) {}
  const Tensor<E, S, B>& tensor() const noexcept { return m_; }

 private:
  Tensor<E, S, B> m_;
};

namespace mask_detail {
template <class M>
struct kind {
  static constexpr int value = 0;
};
template <>
struct kind<Lengths> {
  static constexpr int value = 1;
};
template <class E, class S, class B>
struct kind<KeepMask<E, S, B>> {
  static constexpr int value = 2;
  using backend = B;
};
template <class E, class S, class B>
struct kind<PaddingMask<E, S, B>> {
  static constexpr int value = 3;
  using backend = B;
};
template <class>
inline constexpr bool always_false = false;
}  // namespace mask_detail

/// Lengths, KeepMask or PaddingMask: a description of which positions of a padded batch are real.
template <class M>
concept TokenMask = mask_detail::kind<std::remove_cvref_t<M>>::value != 0;

/// True for a bare tensor, which cannot say which of its values means padding (layers reject it
/// at compile time, naming the typed forms). Not for a Var (which has a gradient): a Var in a
/// mask's place is an input of another overload (e.g. cross-attention's key and value).
template <class M>
concept BareMaskTensor = requires(const M& m) {
  typename std::remove_cvref_t<M>::backend;
  m.dims();
  m.data();
} && !TokenMask<M> && !requires(const M& m) { m.grad(); };

namespace mask_detail {

/// m's values on the host (m's own memory on a host backend, else a copy in `copy`), checked to
/// be (batch, time) and to hold 0 and 1 only.
template <class E, class S, class B>
const E* checked_values(const char* who, bool keep, const Tensor<E, S, B>& m, PoolVector<E>& copy, std::size_t batch, std::size_t time) {
  const std::string kind = keep ? "KeepMask" : "PaddingMask";
  if (!(m.dims() == Dims{batch, time})) shape_mismatch(who, kind + " must be (batch, time) of the input", m.dims(), Dims{batch, time});
  const E* v = m.data();
  if constexpr (!B::host_accessible) {
    copy.resize(m.numel());
    m.copy_to_host(std::span<E>(copy.data(), copy.size()));
    v = copy.data();
  }
  if constexpr (!std::is_same_v<E, bool>) {
    for (std::size_t i = 0; i < m.numel(); ++i)
      if (!(v[i] == E(0) || v[i] == E(1)))
        throw ArgumentError(std::string(who) + ": " + kind + " holds " + std::to_string(v[i]) + " at (" + std::to_string(i / time) +
                            ", " + std::to_string(i % time) + "); a mask holds 0 and 1 only (an additive mask of 0 and -inf, "
                            "as torch accepts, must be converted: PaddingMask(m != 0))");
  }
  return v;
}

}  // namespace mask_detail

/// The keep mask (batch, time) in T on backend B (1 = real token) that the kernels read, from any
/// TokenMask, checked against the input's (batch, time). A KeepMask already in T on B is returned
/// as it is (no copy).
template <class T, class B, TokenMask M>
Tensor<T, AnyShape, B> keep_mask(const M& mask, std::size_t batch, std::size_t time, const char* who) {
  using K = mask_detail::kind<std::remove_cvref_t<M>>;
  if constexpr (K::value == 1) {
    mask.check(who, batch, time);
    PoolVector<T> host(batch * time, T(0));
    for (std::size_t b = 0; b < batch; ++b)
      for (std::size_t t = 0; t < static_cast<std::size_t>(mask[b]); ++t) host[b * time + t] = T(1);
    Tensor<T, AnyShape, B> out(Dims{batch, time});
    out.copy_from_host(std::span<const T>(host.data(), host.size()));
    return out;
  } else {
    static_assert(std::is_same_v<typename K::backend, B>, "attn: the mask must live on the layer's backend");
    const auto& m = mask.tensor();
    using E = std::remove_cvref_t<decltype(*m.data())>;
    constexpr bool keep = K::value == 2;
    PoolVector<E> copy;
    const E* v = mask_detail::checked_values(who, keep, m, copy, batch, time);
    if constexpr (keep && std::is_same_v<E, T>) {
      return m.erased();
    } else {
      PoolVector<T> host(m.numel());
      for (std::size_t i = 0; i < host.size(); ++i) host[i] = (v[i] != E(0)) == keep ? T(1) : T(0);
      Tensor<T, AnyShape, B> out(Dims{batch, time});
      out.copy_from_host(std::span<const T>(host.data(), host.size()));
      return out;
    }
  }
}

/// The lengths of a TokenMask whose real tokens come first in each sample (what an LSTM needs);
/// ArgumentError names the first sample with padding before a real token, or with no real token.
template <TokenMask M>
PoolVector<int> mask_lengths(const M& mask, std::size_t batch, std::size_t time, const char* who) {
  using K = mask_detail::kind<std::remove_cvref_t<M>>;
  PoolVector<int> out(batch);
  if constexpr (K::value == 1) {
    mask.check(who, batch, time);
    for (std::size_t b = 0; b < batch; ++b) out[b] = mask[b];
  } else {
    const auto& m = mask.tensor();
    using E = std::remove_cvref_t<decltype(*m.data())>;
    constexpr bool keep = K::value == 2;
    PoolVector<E> copy;
    const E* v = mask_detail::checked_values(who, keep, m, copy, batch, time);
    for (std::size_t b = 0; b < batch; ++b) {
      std::size_t n = 0;
      while (n < time && (v[b * time + n] != E(0)) == keep) ++n;
      for (std::size_t t = n; t < time; ++t)
        if ((v[b * time + t] != E(0)) == keep)
          throw ArgumentError(std::string(who) + ": sample " + std::to_string(b) + " has padding at " + std::to_string(n) +
                              " before a real token at " + std::to_string(t) + "; the real tokens must come first (pass attn::Lengths)");
      if (n == 0) throw ArgumentError(std::string(who) + ": sample " + std::to_string(b) + " has no real token");
      out[b] = static_cast<int>(n);
    }
  }
  return out;
}

}  // namespace attn
