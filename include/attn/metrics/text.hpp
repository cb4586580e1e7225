// SPDX-License-Identifier: MIT
// Column layout for the metrics' text tables: padding by characters (UTF-8 code points) and fixed
// decimals, with the standard library only, so that the metrics need no formatting library.
//   out += text::cat(text::right("precision", 9), " ", text::fixed(0.8123, 4));
#pragma once
#include <cstdio>
#include <string>
#include <string_view>

namespace attn::metrics::text {

/// The concatenation of the parts, appended in order (one allocation).
template <class... Parts>
std::string cat(const Parts&... parts) {
  std::string out;
  out.reserve((std::string_view(parts).size() + ... + 0));
  (out.append(std::string_view(parts)), ...);
  return out;
}

/// Characters in s: UTF-8 code points (bytes that do not continue a sequence).
inline std::size_t width(std::string_view s) noexcept {
  std::size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

/// s right-aligned (left-padded with spaces) in w characters; longer strings are kept whole.
inline std::string right(std::string_view s, std::size_t w) {
  const std::size_t n = width(s);
  std::string out(n < w ? w - n : 0, ' ');
  out.append(s);
  return out;
}

/// s left-aligned (right-padded with spaces) in w characters; longer strings are kept whole.
inline std::string left(std::string_view s, std::size_t w) {
  const std::size_t n = width(s);
  std::string out(s);
  out.append(n < w ? w - n : 0, ' ');
  return out;
}

/// v with `digits` decimals ("%.*f"): 0.8123 -> "0.8123"; "nan" and "inf" as printf writes them.
inline std::string fixed(double v, int digits) {
  char buf[64];
  const int n = std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  if (n >= 0 && std::size_t(n) < sizeof buf) return std::string(buf, std::size_t(n));
  std::string big(std::size_t(n) + 1, '\0');  // |v| beyond 1e60
  std::snprintf(big.data(), big.size(), "%.*f", digits, v);
  big.pop_back();
  return big;
}

}  // namespace attn::metrics::text
