// SPDX-License-Identifier: MIT
// Maps a run-time value onto one of a few compile-time instantiations, e.g. a --heads flag onto
// Attention<1>, <2>, <4>, <8> or <16>. An unsupported value is an ArgumentError listing the
// supported ones.
//   attn::dispatch<1, 2, 4, 8, 16>(heads, "--heads", [&]<std::size_t H>() { train<H>(cfg); });
#pragma once
#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>

#include "error.hpp"

namespace attn {

namespace detail {
template <std::size_t First, std::size_t...>
inline constexpr std::size_t first_of = First;
}  // namespace detail

/// The supported values as "1, 2, 4, 8, 16".
template <std::size_t... Values>
std::string supported_values() {
  std::string s;
  ((s += (s.empty() ? "" : ", ") + std::to_string(Values)), ...);
  return s;
}

/// Calls f.template operator()<V>() for the V in Values equal to value; returns its result.
template <std::size_t... Values, class F>
decltype(auto) dispatch(std::size_t value, const char* what, F&& f) {
  using R = decltype(f.template operator()<detail::first_of<Values...>>());
  if constexpr (std::is_void_v<R>) {
    bool found = ((value == Values ? (f.template operator()<Values>(), true) : false) || ...);
    if (!found)
      throw ArgumentError(std::string(what) + ": unsupported value " + std::to_string(value) + " (supported: " +
                          supported_values<Values...>() + ")");
  } else {
    R out{};
    bool found = ((value == Values ? (out = f.template operator()<Values>(), true) : false) || ...);
    if (!found)
      throw ArgumentError(std::string(what) + ": unsupported value " + std::to_string(value) + " (supported: " +
                          supported_values<Values...>() + ")");
    return out;
  }
}

}  // namespace attn
