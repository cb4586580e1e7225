// SPDX-License-Identifier: MIT
// Safetensors files: named tensors as raw little-endian bytes, read with strict validation and
// written atomically, byte-compatible with the reference `safetensors` writer (Rust/Python).
//   auto f = attn::io::read_safetensors("model.safetensors");  auto w = f.at("head.weight").to_vector<float>();
//   attn::io::write_safetensors("out.safetensors", f.tensors, {{"format", "pt"}});
//   attn::io::SafetensorsReader r("big.safetensors");  // the header only; tensors read on demand
//
// Layout: u64 little-endian N, N bytes of UTF-8 JSON
//   {"__metadata__": {str: str}, "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
// (space-padded to a multiple of 8), then the data buffer; offsets are relative to the buffer start
// and the tensors must tile the buffer exactly. Every violation is a FormatError naming the file and
// byte offset; nothing proportional to a declared size is allocated before it is checked against
// the real size.
#pragma once
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <ranges>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "../core/utf8.hpp"
#include "atomic_file.hpp"

namespace attn::io {

static_assert(std::endian::native == std::endian::little,
              "safetensors: tensor bytes are stored little-endian; big-endian hosts are not supported");

/// Element types attn reads and writes. The enumerator order is the reference's alignment order;
/// writers place tensors by descending order, then by name.
enum class DType : std::uint8_t { BOOL, U8, I8, I16, F16, BF16, I32, F32, F64, I64 };

inline constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;  // the reference reader's limit
inline constexpr int kMaxJsonDepth = 64;                        // deeper JSON in a header is rejected

constexpr std::size_t dtype_size(DType t) noexcept {
  switch (t) {
    case DType::BOOL: case DType::U8: case DType::I8: return 1;
    case DType::I16: case DType::F16: case DType::BF16: return 2;
    case DType::I32: case DType::F32: return 4;
    case DType::F64: case DType::I64: return 8;
  }
  return 1;
}

constexpr bool is_floating(DType t) noexcept {
  return t == DType::F16 || t == DType::BF16 || t == DType::F32 || t == DType::F64;
}

inline constexpr std::array<std::string_view, 10> kDTypeNames = {"BOOL", "U8",  "I8",  "I16", "F16",
                                                                 "BF16", "I32", "F32", "F64", "I64"};

constexpr std::string_view dtype_name(DType t) noexcept { return kDTypeNames[static_cast<std::size_t>(t)]; }

constexpr std::optional<DType> dtype_from_name(std::string_view s) noexcept {
  for (std::size_t i = 0; i < kDTypeNames.size(); ++i)
    if (kDTypeNames[i] == s) return static_cast<DType>(i);
  return std::nullopt;
}

/// IEEE binary16 -> float (exact).
inline float half_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24
    const float v = std::ldexp(static_cast<float>(mant), -24);
    return std::bit_cast<float>(std::bit_cast<std::uint32_t>(v) | sign);
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));  // inf, NaN (payload kept)
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

/// float -> IEEE binary16, round to nearest even; overflow gives inf, NaN a quiet NaN.
inline std::uint16_t float_to_half(float f) noexcept {
  std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  std::uint16_t h;
  if (x >= 0x47800000u) {  // >= 65536: inf or NaN ([65520, 65536) rounds to inf below)
    h = x > 0x7f800000u ? 0x7e00 : 0x7c00;
  } else if (x < 0x38800000u) {  // below 2^-14: the FPU's float addition rounds to the subnormal grid
    const float magic = std::bit_cast<float>(126u << 23);  // 0.5: its ulp is 2^-24, the f16 subnormal step
    h = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(std::bit_cast<float>(x) + magic) - (126u << 23));
  } else {  // rebias the exponent (127 -> 15) and round the 13 dropped bits to nearest even
    x += (static_cast<std::uint32_t>(15 - 127) << 23) + 0xfffu + ((x >> 13) & 1u);
    h = static_cast<std::uint16_t>(x >> 13);
  }
  return static_cast<std::uint16_t>(h | sign);
}

/// bfloat16 -> float (exact).
inline float bfloat16_to_float(std::uint16_t b) noexcept { return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16); }

/// float -> bfloat16, round to nearest even; NaN gives a quiet NaN.
inline std::uint16_t float_to_bfloat16(float f) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

namespace detail {

inline std::optional<std::size_t> checked_numel(std::span<const std::size_t> shape) noexcept {
  std::size_t n = 1;
  for (std::size_t d : shape) {
    if (d != 0 && n > std::numeric_limits<std::size_t>::max() / d) return std::nullopt;
    n *= d;
  }
  return n;
}

inline std::string shape_str(std::span<const std::size_t> shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Index of the first byte that is not part of well-formed UTF-8, or nullopt.
inline std::optional<std::size_t> utf8_error(std::string_view s) noexcept {
  const std::size_t i = utf8::first_invalid_utf8(s);
  if (i == std::string_view::npos) return std::nullopt;
  return i;
}

// The dtype whose bytes are exactly T's, if any (lets conversions between them be one memcpy).
template <class T>
constexpr std::optional<DType> native_dtype() noexcept {
  if constexpr (std::is_same_v<T, float>) return DType::F32;
  else if constexpr (std::is_same_v<T, double>) return DType::F64;
  else if constexpr (std::is_same_v<T, std::int64_t>) return DType::I64;
  else if constexpr (std::is_same_v<T, std::int32_t>) return DType::I32;
  else if constexpr (std::is_same_v<T, std::int16_t>) return DType::I16;
  else if constexpr (std::is_same_v<T, std::int8_t>) return DType::I8;
  else if constexpr (std::is_same_v<T, std::uint8_t>) return DType::U8;
  else return std::nullopt;
}

template <class U>
U load_le(const std::byte* p) noexcept {
  U v;
  std::memcpy(&v, p, sizeof(U));
  return v;
}

inline std::int64_t load_integer(DType t, const std::byte* p) noexcept {
  switch (t) {
    case DType::BOOL: return load_le<std::uint8_t>(p) != 0;
    case DType::U8: return load_le<std::uint8_t>(p);
    case DType::I8: return load_le<std::int8_t>(p);
    case DType::I16: return load_le<std::int16_t>(p);
    case DType::I32: return load_le<std::int32_t>(p);
    default: return load_le<std::int64_t>(p);
  }
}

template <class T>
T decode_element(DType t, const std::byte* p) {
  if constexpr (std::is_floating_point_v<T>) {
    switch (t) {
      case DType::F64: return static_cast<T>(load_le<double>(p));
      case DType::F32: return static_cast<T>(load_le<float>(p));
      case DType::F16: return static_cast<T>(half_to_float(load_le<std::uint16_t>(p)));
      case DType::BF16: return static_cast<T>(bfloat16_to_float(load_le<std::uint16_t>(p)));
      default: return static_cast<T>(load_integer(t, p));
    }
  } else {
    if (is_floating(t))
      throw ArgumentError("to_vector: " + std::string(dtype_name(t)) + " data cannot become integers without rounding");
    const std::int64_t v = load_integer(t, p);
    if (!std::in_range<T>(v))
      throw ArgumentError("to_vector: value " + std::to_string(v) + " does not fit the requested integer type");
    return static_cast<T>(v);
  }
}

template <class T>
void encode_element(DType t, T v, std::byte* p) {
  auto store = [p](auto x) { std::memcpy(p, &x, sizeof x); };
  if constexpr (std::is_floating_point_v<T>) {
    switch (t) {
      case DType::F64: return store(static_cast<double>(v));
      case DType::F32: return store(static_cast<float>(v));
      case DType::F16: return store(float_to_half(static_cast<float>(v)));
      case DType::BF16: return store(float_to_bfloat16(static_cast<float>(v)));
      default:
        throw ArgumentError("from_values: floating values cannot be stored as " + std::string(dtype_name(t)));
    }
  } else {
    using I = std::conditional_t<std::is_same_v<T, bool>, int, T>;  // std::in_range excludes bool
    const auto iv = static_cast<I>(v);
    auto fits = [&](auto zero) {
      if (!std::in_range<decltype(zero)>(iv))
        throw ArgumentError("from_values: " + std::to_string(iv) + " does not fit " + std::string(dtype_name(t)));
      return static_cast<decltype(zero)>(iv);
    };
    switch (t) {
      case DType::F64: return store(static_cast<double>(iv));
      case DType::F32: return store(static_cast<float>(iv));
      case DType::F16: return store(float_to_half(static_cast<float>(iv)));
      case DType::BF16: return store(float_to_bfloat16(static_cast<float>(iv)));
      case DType::BOOL:
        if (iv != 0 && iv != 1) throw ArgumentError("from_values: BOOL takes 0 and 1, not " + std::to_string(iv));
        return store(static_cast<std::uint8_t>(iv));
      case DType::U8: return store(fits(std::uint8_t{}));
      case DType::I8: return store(fits(std::int8_t{}));
      case DType::I16: return store(fits(std::int16_t{}));
      case DType::I32: return store(fits(std::int32_t{}));
      case DType::I64: return store(fits(std::int64_t{}));
    }
  }
}

}  // namespace detail

/// One tensor as stored: element type, row-major shape (empty = scalar) and its raw bytes.
struct TensorRecord {
  DType dtype = DType::F32;
  std::vector<std::size_t> shape;
  std::vector<std::byte> bytes;

  /// Product of the extents (1 for a scalar). Throws ArgumentError on overflow.
  std::size_t numel() const {
    const auto n = detail::checked_numel(shape);
    if (!n) throw ArgumentError("TensorRecord: the element count of shape " + detail::shape_str(shape) + " overflows");
    return *n;
  }

  /// The elements converted to T (float, double or an integer type). Floating T accepts every
  /// dtype; integer T accepts integer and BOOL dtypes and throws ArgumentError when a value does
  /// not fit (floating data is never silently truncated to integers).
  template <class T>
  std::vector<T> to_vector() const {
    static_assert(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>, "to_vector<T>: T must be a number type");
    const std::size_t n = numel();
    if (bytes.size() != n * dtype_size(dtype))
      throw ArgumentError("TensorRecord::to_vector: " + std::to_string(bytes.size()) + " bytes for " +
                          std::to_string(n) + " elements of " + std::string(dtype_name(dtype)));
    std::vector<T> out(n);
    if (detail::native_dtype<T>() == dtype) {  // same representation: one copy
      if (n != 0) std::memcpy(out.data(), bytes.data(), bytes.size());
      return out;
    }
    for (std::size_t i = 0; i < n; ++i) out[i] = detail::decode_element<T>(dtype, bytes.data() + i * dtype_size(dtype));
    return out;
  }

  /// Encodes `values` (row-major, numel(shape) of them) as `dtype`. float/double may go to any
  /// floating dtype (F16/BF16 round to nearest even); integers may go to any dtype but must fit
  /// (BOOL takes 0 and 1). Throws ArgumentError otherwise.
  template <std::ranges::contiguous_range R>
  static TensorRecord from_values(DType dtype, std::vector<std::size_t> shape, const R& values) {
    using T = std::remove_cv_t<std::ranges::range_value_t<R>>;
    static_assert(std::is_arithmetic_v<T>, "from_values: values must be numbers");
    TensorRecord r{dtype, std::move(shape), {}};
    const std::size_t n = r.numel();
    if (std::ranges::size(values) != n)
      throw ArgumentError("TensorRecord::from_values: " + std::to_string(std::ranges::size(values)) +
                          " values for shape " + detail::shape_str(r.shape));
    r.bytes.resize(n * dtype_size(dtype));
    const T* src = std::ranges::data(values);
    if (detail::native_dtype<T>() == dtype) {  // same representation: one copy
      if (n != 0) std::memcpy(r.bytes.data(), src, r.bytes.size());
      return r;
    }
    for (std::size_t i = 0; i < n; ++i) detail::encode_element(dtype, src[i], r.bytes.data() + i * dtype_size(dtype));
    return r;
  }
};

using TensorMap = std::map<std::string, TensorRecord>;
using MetadataMap = std::map<std::string, std::string>;

/// A tensor to be written without a copy of its bytes in memory: its dtype, its shape, its size
/// in bytes and a reader that fills `dst` with `count` bytes from byte `offset` of its data
/// (write_safetensors calls it in chunks of at most kWriteChunkBytes). io::save writes a model's
/// parameters this way, straight from their storage.
struct TensorSource {
  DType dtype = DType::F32;
  std::vector<std::size_t> shape;
  std::size_t size = 0;  // bytes
  std::function<void(std::size_t offset, std::size_t count, std::byte* dst)> read;
};
using SourceMap = std::map<std::string, TensorSource>;

/// The largest piece of a TensorSource that write_safetensors holds in memory at once.
inline constexpr std::size_t kWriteChunkBytes = std::size_t(16) << 20;

/// The content of a safetensors file: tensors by name and the free-form "__metadata__" strings.
struct SafetensorsFile {
  std::string source;  // path or buffer name, used in error messages
  TensorMap tensors;
  MetadataMap metadata;

  bool contains(const std::string& name) const { return tensors.count(name) != 0; }
  /// The tensor called `name`; a missing one is an IoError naming the file and the tensor.
  const TensorRecord& at(const std::string& name) const {
    auto it = tensors.find(name);
    if (it == tensors.end()) throw IoError(source, "no tensor named '" + name + "'");
    return it->second;
  }
};

namespace detail {

// Reads the 8-byte prefix and checks N against the hard limit and the real size.
inline std::uint64_t header_length(std::span<const std::byte> prefix, std::uint64_t file_size, const std::string& name) {
  if (file_size < 8)
    throw FormatError::at_offset(name, file_size, "file is " + std::to_string(file_size) +
                                                      " bytes, too short for the 8-byte header length");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | std::to_integer<std::uint64_t>(prefix[static_cast<std::size_t>(i)]);
  if (n > kMaxHeaderBytes)
    throw FormatError::at_offset(name, 0, "header length " + std::to_string(n) + " exceeds the limit of " +
                                              std::to_string(kMaxHeaderBytes) + " bytes");
  if (n > file_size - 8)
    throw FormatError::at_offset(name, 0, "header length " + std::to_string(n) + " exceeds the " +
                                              std::to_string(file_size - 8) + " bytes after the length field");
  return n;
}

// serde_json's escaping, so that our headers match the reference writer byte for byte.
inline void append_json_string(std::string& out, std::string_view s) {
  static constexpr char hex[] = "0123456789abcdef";
  out += '"';
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (u < 0x20) {
          out += "\\u00";
          out += hex[u >> 4];
          out += hex[u & 0xf];
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

inline std::size_t byte_size(const TensorRecord& t) { return t.bytes.size(); }
inline std::size_t byte_size(const TensorSource& t) { return t.size; }

// Reference order: descending dtype alignment rank, then name (bytewise). Map: TensorMap or SourceMap.
template <class Map>
std::vector<const typename Map::value_type*> write_order(const Map& tensors) {
  std::vector<const typename Map::value_type*> order;
  order.reserve(tensors.size());
  for (const auto& kv : tensors) order.push_back(&kv);
  std::stable_sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    return a->second.dtype > b->second.dtype;
  });  // stable: names are already sorted within each dtype
  return order;
}

// The padded JSON header for `tensors` in write_order; validates names and byte counts.
template <class Entry>
std::string make_header(const std::vector<const Entry*>& order, const MetadataMap& metadata) {
  auto check_text = [](const std::string& s, const char* what) {
    if (const auto bad = utf8_error(s))
      throw ArgumentError("write_safetensors: " + std::string(what) + " is not valid UTF-8 (byte " +
                          std::to_string(*bad) + ")");
  };
  std::string h = "{";
  if (!metadata.empty()) {
    h += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      check_text(k, "a metadata key");
      check_text(v, "a metadata value");
      if (!first) h += ',';
      first = false;
      append_json_string(h, k);
      h += ':';
      append_json_string(h, v);
    }
    h += '}';
  }
  std::uint64_t offset = 0;
  for (const auto* kv : order) {
    const auto& [name, t] = *kv;
    check_text(name, "a tensor name");
    if (name == "__metadata__") throw ArgumentError("write_safetensors: '__metadata__' is reserved, not a tensor name");
    const auto numel = checked_numel(t.shape);
    const std::size_t bytes = byte_size(t);
    if (!numel || *numel > std::numeric_limits<std::size_t>::max() / dtype_size(t.dtype) ||
        bytes != *numel * dtype_size(t.dtype))
      throw ArgumentError("write_safetensors: tensor '" + name + "' has " + std::to_string(bytes) +
                          " bytes, but shape " + shape_str(t.shape) + " of " + std::string(dtype_name(t.dtype)) +
                          " needs " + (numel ? std::to_string(*numel * dtype_size(t.dtype)) : "too many"));
    if (h.size() > 1) h += ',';
    append_json_string(h, name);
    h += ":{\"dtype\":\"";
    h += dtype_name(t.dtype);
    h += "\",\"shape\":[";
    for (std::size_t i = 0; i < t.shape.size(); ++i) {
      if (i) h += ',';
      h += std::to_string(t.shape[i]);
    }
    h += "],\"data_offsets\":[" + std::to_string(offset) + ',' + std::to_string(offset + bytes) + "]}";
    offset += bytes;
  }
  h += '}';
  h.append((8 - h.size() % 8) % 8, ' ');  // the data buffer starts 8-byte aligned
  return h;
}

inline std::array<std::byte, 8> le_u64(std::uint64_t v) {
  std::array<std::byte, 8> b{};
  for (std::size_t i = 0; i < 8; ++i) b[i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
  return b;
}

inline std::string_view as_text(std::span<const std::byte> b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

// A tensor entry of the header; `at` is the header index of its '{' (file offset - 8).
struct HeaderEntry {
  std::string name;
  DType dtype = DType::F32;
  std::vector<std::size_t> shape;
  std::uint64_t begin = 0, end = 0;
  std::size_t at = 0;
};

struct ParsedHeader {
  std::vector<HeaderEntry> entries;  // after parse_header: sorted by offset, tiling the buffer
  MetadataMap metadata;
};

// A tensor name for a message: JSON-quoted (so control characters stay visible) and shortened.
inline std::string show_name(std::string_view s) {
  std::string q;
  append_json_string(q, s.substr(0, 200));
  return s.size() > 200 ? q + "..." : q;
}

// Strict recursive-descent JSON reader for the header's known structure. Values of unknown tensor
// fields are skipped with bounded recursion (kMaxJsonDepth), so hostile nesting cannot overflow
// the stack. Every error is a FormatError at the file offset (8 + index) where it was found.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& name) : s_(text), name_(name) {}

  ParsedHeader parse() {
    ParsedHeader out;
    std::map<std::string, std::size_t> names;
    bool seen_metadata = false;
    ws();
    if (!eat('{')) fail("the header must be a JSON object");
    members("the header object", [&](std::string key, std::size_t key_at) {
      if (key == "__metadata__") {
        if (seen_metadata) fail_at(key_at, "duplicate \"__metadata__\"");
        seen_metadata = true;
        if (!eat_literal("null")) parse_metadata(out.metadata);  // the reference accepts null
      } else {
        if (!names.emplace(key, key_at).second) fail_at(key_at, "duplicate tensor name " + show_name(key));
        out.entries.push_back(parse_entry(std::move(key)));
      }
    });
    ws();
    if (i_ != s_.size()) fail("unexpected characters after the header object");
    return out;
  }

 private:
  [[noreturn]] void fail_at(std::size_t at, const std::string& what) const {
    throw FormatError::at_offset(name_, 8 + at, "safetensors header: " + what);
  }
  [[noreturn]] void fail(const std::string& what) const { fail_at(i_, what); }

  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  bool eat(char c) {
    if (i_ < s_.size() && s_[i_] == c) return ++i_, true;
    return false;
  }
  bool eat_literal(std::string_view lit) {
    if (s_.substr(i_, lit.size()) != lit) return false;
    i_ += lit.size();
    return true;
  }
  bool digit() const { return i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9'; }

  // Reads `"key": value, ...}` after an opening '{'; on_member reads each value.
  template <class F>
  void members(const char* where, F&& on_member) {
    ws();
    if (eat('}')) return;
    for (;;) {
      ws();
      const std::size_t key_at = i_;
      std::string key = string();
      ws();
      if (!eat(':')) fail(std::string("expected ':' in ") + where);
      ws();
      on_member(std::move(key), key_at);
      ws();
      if (eat(',')) continue;
      if (eat('}')) return;
      fail(std::string("expected ',' or '}' in ") + where);
    }
  }

  std::uint32_t hex4() {
    if (s_.size() - i_ < 4) fail("truncated \\u escape");
    std::uint32_t v = 0;
    for (int k = 0; k < 4; ++k, ++i_) {
      const char c = s_[i_];
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) fail("invalid hex digit in \\u escape");
      v = v * 16 + static_cast<std::uint32_t>(d);
    }
    return v;
  }

  std::string string() {
    if (!eat('"')) fail("expected a JSON string");
    std::string out;
    for (;;) {
      if (i_ >= s_.size()) fail("unterminated string");
      const auto c = static_cast<unsigned char>(s_[i_]);
      if (c == '"') return ++i_, out;
      if (c < 0x20) fail("unescaped control character in a string");
      if (c != '\\') {
        out += s_[i_++];  // multi-byte sequences were validated as UTF-8 beforehand
        continue;
      }
      const std::size_t esc = i_++;
      if (i_ >= s_.size()) fail("unterminated string");
      switch (s_[i_++]) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          std::uint32_t cp = hex4();
          if (cp >= 0xdc00 && cp <= 0xdfff) fail_at(esc, "unpaired UTF-16 surrogate in \\u escape");
          if (cp >= 0xd800 && cp <= 0xdbff) {
            if (!eat_literal("\\u")) fail_at(esc, "unpaired UTF-16 surrogate in \\u escape");
            const std::uint32_t low = hex4();
            if (low < 0xdc00 || low > 0xdfff) fail_at(esc, "unpaired UTF-16 surrogate in \\u escape");
            cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
          }
          auto put = [&](std::uint32_t b) { out += static_cast<char>(static_cast<unsigned char>(b)); };
          if (cp < 0x80) {
            put(cp);
          } else if (cp < 0x800) {
            put(0xc0 | (cp >> 6)), put(0x80 | (cp & 0x3f));
          } else if (cp < 0x10000) {
            put(0xe0 | (cp >> 12)), put(0x80 | ((cp >> 6) & 0x3f)), put(0x80 | (cp & 0x3f));
          } else {
            put(0xf0 | (cp >> 18)), put(0x80 | ((cp >> 12) & 0x3f)), put(0x80 | ((cp >> 6) & 0x3f)), put(0x80 | (cp & 0x3f));
          }
          break;
        }
        default: fail_at(esc, "invalid escape sequence in a string");
      }
    }
  }

  // A JSON number that must be a non-negative integer below 2^64.
  std::uint64_t uint(const std::string& what) {
    const std::size_t at = i_;
    if (i_ < s_.size() && s_[i_] == '-') fail(what + " must not be negative");
    if (!digit()) fail(what + " must hold non-negative integers");
    if (s_[i_] == '0' && i_ + 1 < s_.size() && s_[i_ + 1] >= '0' && s_[i_ + 1] <= '9') fail("invalid JSON number (leading zero)");
    std::uint64_t v = 0;
    for (; digit(); ++i_) {
      const auto d = static_cast<std::uint64_t>(s_[i_] - '0');
      if (v > (std::numeric_limits<std::uint64_t>::max() - d) / 10) fail_at(at, what + " has a value above 2^64-1");
      v = v * 10 + d;
    }
    if (i_ < s_.size() && (s_[i_] == '.' || s_[i_] == 'e' || s_[i_] == 'E')) fail_at(at, what + " must hold integers, not fractions");
    return v;
  }

  std::vector<std::uint64_t> uint_array(const std::string& what) {
    if (!eat('[')) fail(what + " must be an array of integers");
    std::vector<std::uint64_t> v;
    ws();
    if (eat(']')) return v;
    for (;;) {
      ws();
      v.push_back(uint(what));
      ws();
      if (eat(',')) continue;
      if (eat(']')) return v;
      fail("expected ',' or ']' in " + what);
    }
  }

  void parse_metadata(MetadataMap& m) {
    if (!eat('{')) fail("\"__metadata__\" must be an object of strings");
    members("\"__metadata__\"", [&](std::string key, std::size_t key_at) {
      if (i_ >= s_.size() || s_[i_] != '"') fail("\"__metadata__\" value for " + show_name(key) + " must be a string");
      if (!m.emplace(key, string()).second) fail_at(key_at, "duplicate \"__metadata__\" key " + show_name(key));
    });
  }

  HeaderEntry parse_entry(std::string name) {
    HeaderEntry e;
    e.name = std::move(name);
    e.at = i_;
    const std::string who = "tensor " + show_name(e.name);
    if (!eat('{')) fail("the entry of " + who + " must be a JSON object");
    bool has_dtype = false, has_shape = false, has_offsets = false;
    members("the entry of a tensor", [&](std::string key, std::size_t key_at) {
      auto once = [&](bool& seen) {
        if (seen) fail_at(key_at, "duplicate field \"" + key + "\" in " + who);
        seen = true;
      };
      if (key == "dtype") {
        once(has_dtype);
        const std::size_t at = i_;
        if (i_ >= s_.size() || s_[i_] != '"') fail("\"dtype\" of " + who + " must be a string");
        const std::string d = string();
        const auto t = dtype_from_name(d);
        if (!t) fail_at(at, "unsupported dtype " + show_name(d) + " of " + who + " (supported: F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL)");
        e.dtype = *t;
      } else if (key == "shape") {
        once(has_shape);
        for (std::uint64_t d : uint_array("\"shape\" of " + who)) e.shape.push_back(static_cast<std::size_t>(d));
      } else if (key == "data_offsets") {
        once(has_offsets);
        const std::size_t at = i_;
        const auto v = uint_array("\"data_offsets\" of " + who);
        if (v.size() != 2) fail_at(at, "\"data_offsets\" of " + who + " must hold exactly 2 integers, not " + std::to_string(v.size()));
        e.begin = v[0], e.end = v[1];
      } else {
        skip_value(3);  // unknown fields are ignored, as by the reference reader
      }
    });
    if (!has_dtype || !has_shape || !has_offsets)
      fail_at(e.at, "the entry of " + who + " lacks \"" + (!has_dtype ? "dtype" : !has_shape ? "shape" : "data_offsets") + "\"");
    return e;
  }

  void skip_value(int depth) {
    if (depth > kMaxJsonDepth) fail("JSON nesting deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    ws();
    if (eat('{')) return members("a JSON object", [&](std::string, std::size_t) { skip_value(depth + 1); });
    if (eat('[')) {
      ws();
      if (eat(']')) return;
      for (;;) {
        skip_value(depth + 1);
        ws();
        if (eat(',')) continue;
        if (eat(']')) return;
        fail("expected ',' or ']' in a JSON array");
      }
    }
    if (i_ < s_.size() && s_[i_] == '"') return (void)string();
    if (eat_literal("true") || eat_literal("false") || eat_literal("null")) return;
    // number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
    eat('-');
    if (!digit()) fail("invalid JSON value");
    if (!eat('0')) while (digit()) ++i_;
    if (eat('.')) {
      if (!digit()) fail("invalid JSON number");
      while (digit()) ++i_;
    }
    if (eat('e') || eat('E')) {
      if (!eat('+')) eat('-');
      if (!digit()) fail("invalid JSON number");
      while (digit()) ++i_;
    }
  }

  std::string_view s_;
  const std::string& name_;
  std::size_t i_ = 0;
};

// Parses and validates a header against the real data-buffer size: sizes agree with shape and
// dtype, and the tensors tile [0, buffer_size) with no gap, overlap, truncation or trailing bytes.
inline ParsedHeader parse_header(std::string_view text, std::uint64_t buffer_size, const std::string& name) {
  if (const auto bad = utf8_error(text)) throw FormatError::at_offset(name, 8 + *bad, "safetensors header is not valid UTF-8");
  ParsedHeader h = HeaderParser(text, name).parse();
  const std::uint64_t data_start = 8 + text.size();
  for (const auto& e : h.entries) {
    const std::string who = "tensor " + show_name(e.name);
    const std::size_t es = dtype_size(e.dtype);
    const auto numel = checked_numel(e.shape);
    if (!numel || *numel > std::numeric_limits<std::size_t>::max() / es)
      throw FormatError::at_offset(name, 8 + e.at, who + ": the byte size of shape " + shape_str(e.shape) + " overflows");
    if (e.begin > e.end)
      throw FormatError::at_offset(name, 8 + e.at, who + ": data_offsets [" + std::to_string(e.begin) + ", " +
                                                       std::to_string(e.end) + "] begin after they end");
    if (e.end - e.begin != *numel * es)
      throw FormatError::at_offset(name, 8 + e.at, who + ": data_offsets [" + std::to_string(e.begin) + ", " +
                                                       std::to_string(e.end) + "] hold " + std::to_string(e.end - e.begin) +
                                                       " bytes, but shape " + shape_str(e.shape) + " of " +
                                                       std::string(dtype_name(e.dtype)) + " needs " + std::to_string(*numel * es));
  }
  std::stable_sort(h.entries.begin(), h.entries.end(),
                   [](const HeaderEntry& a, const HeaderEntry& b) { return std::pair(a.begin, a.end) < std::pair(b.begin, b.end); });
  std::uint64_t cursor = 0;  // <= buffer_size throughout, so data_start + cursor cannot wrap
  for (std::size_t k = 0; k < h.entries.size(); ++k) {
    const auto& e = h.entries[k];
    if (e.begin > cursor)
      throw FormatError::at_offset(name, data_start + cursor, "data bytes [" + std::to_string(cursor) + ", " +
                                                                  std::to_string(e.begin) + ") belong to no tensor (gap before tensor " +
                                                                  show_name(e.name) + ")");
    if (e.begin < cursor)
      throw FormatError::at_offset(name, data_start + e.begin, "tensor " + show_name(e.name) + " overlaps tensor " +
                                                                   show_name(h.entries[k - 1].name) + " in the data buffer");
    if (e.end > buffer_size)
      throw FormatError::at_offset(name, data_start + buffer_size,
                                   "truncated file: tensor " + show_name(e.name) + " ends at data offset " + std::to_string(e.end) +
                                       ", but the data buffer holds only " + std::to_string(buffer_size) + " bytes");
    cursor = e.end;
  }
  if (cursor < buffer_size)
    throw FormatError::at_offset(name, data_start + cursor, std::to_string(buffer_size - cursor) +
                                                                " trailing bytes after the last tensor's data");
  return h;
}

}  // namespace detail

/// Parses a whole safetensors file held in memory. `name` is used in error messages.
inline SafetensorsFile parse_safetensors(std::span<const std::byte> file, std::string name) {
  const std::uint64_t n = detail::header_length(file, file.size(), name);
  const std::uint64_t data_start = 8 + n;
  const auto header = detail::parse_header(detail::as_text(file.subspan(8, n)), file.size() - data_start, name);
  SafetensorsFile out;
  out.metadata = header.metadata;
  for (const auto& e : header.entries) {
    auto bytes = file.subspan(data_start + e.begin, e.end - e.begin);  // in range: checked by parse_header
    out.tensors.emplace(e.name, TensorRecord{e.dtype, e.shape, {bytes.begin(), bytes.end()}});
  }
  out.source = std::move(name);
  return out;
}

/// The largest piece of tensor data SafetensorsReader::for_each_chunk holds in memory at once.
inline constexpr std::size_t kReadChunkBytes = std::size_t(4) << 20;

/// A safetensors file opened for reading: its header read and validated against the file's real
/// size (read_safetensors' checks, every one), its data read on demand, straight into the caller's
/// memory or in bounded chunks. io::load and the optimizer and average loaders read checkpoints
/// this way, so that a file is never held in memory beside its destination. The file stays open
/// (and so keeps the content it had, when it is replaced by a rename) until the reader is destroyed.
///   attn::io::SafetensorsReader r("model.safetensors");
///   const auto& e = r.at("head.weight");  std::vector<float> w(e.numel());  r.read(e, 0, e.size, w.data());
class SafetensorsReader {
 public:
  /// Where one tensor's bytes lie in the file.
  struct Entry {
    DType dtype = DType::F32;
    std::vector<std::size_t> shape;
    std::uint64_t offset = 0;  // of its first byte, from the start of the file
    std::uint64_t size = 0;    // bytes
    std::size_t numel() const noexcept { return static_cast<std::size_t>(size / dtype_size(dtype)); }
  };

  /// Opens `path` and reads its header. Throws IoError when the file cannot be read and
  /// FormatError (with the byte offset) when the header is malformed or disagrees with the size.
  explicit SafetensorsReader(const std::filesystem::path& path) : source_(path.string()) {
    // Checked before opening too: open() on a FIFO would wait for a writer.
    if (struct stat pre {}; ::stat(path.c_str(), &pre) == 0 && !S_ISREG(pre.st_mode)) throw IoError(source_, "not a regular file");
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) throw IoError(source_, std::string("cannot open for reading: ") + std::strerror(errno));
    try {
      struct stat st {};
      if (::fstat(fd_, &st) != 0) throw IoError(source_, std::string("cannot stat: ") + std::strerror(errno));
      if (!S_ISREG(st.st_mode)) throw IoError(source_, "not a regular file");
      const auto file_size = static_cast<std::uint64_t>(st.st_size);
      std::array<std::byte, 8> prefix{};
      if (file_size >= 8) read_at(0, 8, prefix.data());
      const std::uint64_t n = detail::header_length(prefix, file_size, source_);
      std::vector<std::byte> text(n);  // n <= kMaxHeaderBytes and <= file size
      read_at(8, n, text.data());
      auto header = detail::parse_header(detail::as_text(text), file_size - 8 - n, source_);
      metadata_ = std::move(header.metadata);
      for (auto& e : header.entries) {  // sorted by offset and tiling the buffer
        auto it = tensors_.emplace(std::move(e.name), Entry{e.dtype, std::move(e.shape), 8 + n + e.begin, e.end - e.begin}).first;
        order_.push_back(&*it);
      }
    } catch (...) {
      ::close(fd_);
      throw;
    }
  }
  ~SafetensorsReader() {
    if (fd_ >= 0) ::close(fd_);
  }
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  /// The path, as used in error messages.
  const std::string& source() const noexcept { return source_; }
  const MetadataMap& metadata() const noexcept { return metadata_; }
  /// The tensors by name.
  const std::map<std::string, Entry>& tensors() const noexcept { return tensors_; }
  /// The tensors in the order of their data in the file: reading them in this order is one
  /// sequential pass.
  const std::vector<const std::pair<const std::string, Entry>*>& in_file_order() const noexcept { return order_; }
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  /// The tensor called `name`; a missing one is an IoError naming the file and the tensor.
  const Entry& at(const std::string& name) const {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) throw IoError(source_, "no tensor named '" + name + "'");
    return it->second;
  }

  /// Reads `count` bytes from byte `offset` of `e`'s data into `dst` (`e` must be one of this
  /// reader's entries). Throws ArgumentError for a range outside the tensor, IoError when the read
  /// fails and FormatError (with the offset) when the file has shrunk since it was opened.
  void read(const Entry& e, std::uint64_t offset, std::uint64_t count, void* dst) const {
    if (offset > e.size || count > e.size - offset)
      throw ArgumentError("SafetensorsReader::read: bytes [" + std::to_string(offset) + ", " + std::to_string(offset + count) +
                          ") are outside the tensor's " + std::to_string(e.size));
    read_at(e.offset + offset, count, static_cast<std::byte*>(dst));
  }

  /// Calls fn(const std::byte* bytes, std::uint64_t offset, std::size_t count) on `e`'s data in
  /// order, in pieces of at most kReadChunkBytes that hold whole elements, read into one buffer
  /// (so at most that much of it is in memory). fn may return bool: false stops the pass.
  template <class F>
  void for_each_chunk(const Entry& e, F&& fn) const {
    const std::size_t width = dtype_size(e.dtype);
    const std::size_t piece = static_cast<std::size_t>(std::min<std::uint64_t>(e.size, kReadChunkBytes / width * width));
    std::vector<std::byte> buf(piece);
    for (std::uint64_t off = 0; off < e.size; off += piece) {
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(piece, e.size - off));
      read_at(e.offset + off, n, buf.data());
      if constexpr (std::is_same_v<std::invoke_result_t<F&, const std::byte*, std::uint64_t, std::size_t>, bool>) {
        if (!fn(static_cast<const std::byte*>(buf.data()), off, n)) return;
      } else {
        fn(static_cast<const std::byte*>(buf.data()), off, n);
      }
    }
  }

  /// The tensor as a TensorRecord (a copy of its bytes in memory).
  TensorRecord record(const Entry& e) const {
    TensorRecord r{e.dtype, e.shape, std::vector<std::byte>(static_cast<std::size_t>(e.size))};
    read_at(e.offset, e.size, r.bytes.data());
    return r;
  }

 private:
  // pread until `count` bytes are in: a short read at the end of the file means it shrank.
  void read_at(std::uint64_t pos, std::uint64_t count, std::byte* dst) const {
    std::uint64_t got = 0;
    while (got < count) {
      const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(count - got, std::uint64_t(1) << 30));
      const ssize_t r = ::pread(fd_, dst + got, want, static_cast<off_t>(pos + got));
      if (r < 0) {
        if (errno == EINTR) continue;
        throw IoError(source_, "read failed at byte offset " + std::to_string(pos + got) + ": " + std::strerror(errno));
      }
      if (r == 0) throw FormatError::at_offset(source_, pos + got, "unexpected end of file (the file shrank while being read)");
      got += static_cast<std::uint64_t>(r);
    }
  }

  int fd_ = -1;
  std::string source_;
  MetadataMap metadata_;
  std::map<std::string, Entry> tensors_;
  std::vector<const std::pair<const std::string, Entry>*> order_;
};

/// Reads and validates a safetensors file. Throws IoError when the file cannot be read and
/// FormatError (with the byte offset) when its content is malformed.
inline SafetensorsFile read_safetensors(const std::filesystem::path& path) {
  const SafetensorsReader r(path);
  SafetensorsFile out;
  out.metadata = r.metadata();
  for (const auto* kv : r.in_file_order()) out.tensors.emplace(kv->first, r.record(kv->second));  // one sequential pass
  out.source = r.source();
  return out;
}

/// The bytes of a safetensors file for `tensors` and `metadata`, laid out like the reference
/// writer: tensors ordered by descending dtype alignment then name, metadata keys sorted.
inline std::vector<std::byte> serialize_safetensors(const TensorMap& tensors, const MetadataMap& metadata = {}) {
  const auto order = detail::write_order(tensors);
  const std::string header = detail::make_header(order, metadata);
  std::size_t total = 8 + header.size();
  for (const auto* kv : order) total += kv->second.bytes.size();
  std::vector<std::byte> out(total);
  std::byte* p = out.data();
  auto put = [&p](const void* src, std::size_t n) {
    if (n != 0) std::memcpy(p, src, n);
    p += n;
  };
  put(detail::le_u64(header.size()).data(), 8);
  put(header.data(), header.size());
  for (const auto* kv : order) put(kv->second.bytes.data(), kv->second.bytes.size());
  return out;
}

/// Writes `tensors` to `path` atomically (temporary file in the same directory, fsync, rename):
/// on any error the temporary is removed and an existing file at `path` is left as it was.
/// Throws ArgumentError for an invalid record and IoError when writing fails.
inline void write_safetensors(const std::filesystem::path& path, const TensorMap& tensors,
                              const MetadataMap& metadata = {}) {
  const auto order = detail::write_order(tensors);
  const std::string header = detail::make_header(order, metadata);  // validates before touching the disk
  AtomicFile file(path);
  file.write(detail::le_u64(header.size()));
  file.write(header);
  for (const auto* kv : order) file.write(kv->second.bytes);
  file.commit();
}

/// Writes the tensors of `sources` to `path` atomically, as write_safetensors(path, TensorMap)
/// would write the same bytes, holding at most kWriteChunkBytes of tensor data in memory at once.
/// A reader that throws leaves an existing file at `path` as it was.
inline void write_safetensors(const std::filesystem::path& path, const SourceMap& sources, const MetadataMap& metadata = {}) {
  const auto order = detail::write_order(sources);
  const std::string header = detail::make_header(order, metadata);  // validates before touching the disk
  for (const auto* kv : order)
    if (kv->second.size && !kv->second.read)
      throw ArgumentError("write_safetensors: tensor '" + kv->first + "' has no reader");
  std::size_t largest = 0;
  for (const auto* kv : order) largest = std::max(largest, kv->second.size);
  std::vector<std::byte> chunk(std::min(largest, kWriteChunkBytes));
  AtomicFile file(path);
  file.write(detail::le_u64(header.size()));
  file.write(header);
  for (const auto* kv : order) {
    const TensorSource& t = kv->second;
    for (std::size_t off = 0; off < t.size; off += chunk.size()) {
      const std::size_t n = std::min(chunk.size(), t.size - off);
      t.read(off, n, chunk.data());
      file.write(std::span<const std::byte>(chunk.data(), n));
    }
  }
  file.commit();
}

}  // namespace attn::io
