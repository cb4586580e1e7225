// SPDX-License-Identifier: MIT
// bfloat16: the upper 16 bits of an IEEE float (8 exponent bits, 7 stored mantissa bits), the
// storage type of attn's reduced-precision products. Conversion from float rounds to nearest, ties to
// even, as the AVX512-BF16 instructions and PyTorch's `tensor.to(torch.bfloat16)` do; NaN stays NaN
// (quieted, sign kept) and infinities stay infinite.
//   std::uint16_t h = attn::bf16_bits(0.1f);   // 0x3dcd
//   float back = attn::bf16_value(h);          // 0.10009765625f
// The AVX512-BF16 conversions also read subnormal floats as zero and write no subnormal bf16; the
// scalar ones here keep them. The two agree on every float of magnitude 2^-126 or more.
#pragma once
#include <bit>
#include <cstdint>

namespace attn {

/// The bfloat16 nearest to f (ties to even), as its 16 bits.
constexpr std::uint16_t bf16_bits(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return std::uint16_t((u >> 16) | 0x0040u);  // NaN, quieted
  return std::uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/// The float a bfloat16's bits stand for (exact).
constexpr float bf16_value(std::uint16_t h) { return std::bit_cast<float>(std::uint32_t(h) << 16); }

/// f rounded to the nearest bfloat16, as a float.
constexpr float bf16_round(float f) { return bf16_value(bf16_bits(f)); }

}  // namespace attn
