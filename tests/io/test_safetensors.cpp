// SPDX-License-Identifier: MIT
// Safetensors reader/writer: round trips, files from Python's `safetensors`, hostile bytes, atomic writes.
#include <catch2/catch.hpp>

#include <attn/io/safetensors.hpp>

#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>

namespace fs = std::filesystem;
using attn::io::DType;
using attn::io::TensorMap;
using attn::io::TensorRecord;

namespace {

// Scratch files live under one pid-qualified directory (parallel test processes do not collide),
// removed when the test program exits.
const fs::path& scratch_root() {
  static const struct Root {
    fs::path path = fs::temp_directory_path() / ("attn_io_" + std::to_string(::getpid()));
    ~Root() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  } root;
  return root.path;
}

// A fresh directory per test case.
fs::path scratch(const std::string& name) {
  const fs::path dir = scratch_root() / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::vector<std::byte> slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> b(c.size());
  std::memcpy(b.data(), c.data(), c.size());
  return b;
}

void spit(const fs::path& p, const std::vector<std::byte>& b) {
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

std::vector<std::string> listing(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// u64 header length + header text + data bytes: the raw material of the hostile cases.
std::vector<std::byte> file_bytes(const std::string& header, std::size_t data_bytes = 0, std::uint64_t declared = ~0ull) {
  const std::uint64_t n = declared == ~0ull ? header.size() : declared;
  std::vector<std::byte> b;
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<std::byte>((n >> (8 * i)) & 0xff));
  for (char c : header) b.push_back(static_cast<std::byte>(c));
  b.resize(b.size() + data_bytes, std::byte{0x5a});
  return b;
}

std::string entry(const std::string& name, const std::string& dtype, const std::string& shape, const std::string& offsets) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":" + offsets + "}";
}

// Both entry points must reject `bytes` with a FormatError that names the source and the byte
// offset and contains `what`; returns the offset.
std::uint64_t rejected(const std::vector<std::byte>& bytes, const std::string& what) {
  static int counter = 0;
  const fs::path dir = scratch("hostile");
  const fs::path path = dir / ("case" + std::to_string(counter++) + ".safetensors");
  spit(path, bytes);
  std::uint64_t where = 0;
  try {
    attn::io::read_safetensors(path);
    FAIL("read_safetensors accepted a file that must fail with: " << what);
  } catch (const attn::FormatError& e) {
    INFO(e.what());
    CHECK(e.kind() == attn::FormatError::Kind::offset);
    CHECK_THAT(e.what(), Catch::Contains(path.string()) && Catch::Contains("byte offset") && Catch::Contains(what));
    where = e.where();
  }
  try {
    attn::io::parse_safetensors(bytes, "memory-buffer");
    FAIL("parse_safetensors accepted a buffer that must fail with: " << what);
  } catch (const attn::FormatError& e) {
    INFO(e.what());
    CHECK_THAT(e.what(), Catch::Contains("memory-buffer") && Catch::Contains("byte offset") && Catch::Contains(what));
    CHECK(e.where() == where);
  }
  return where;
}

// The content of tests/fixtures/io/python_small.safetensors, built here (see make_fixtures.py).
TensorMap small_tensors() {
  using V = std::vector<double>;
  using I = std::vector<std::int64_t>;
  TensorMap t;
  t["layer.weight"] = TensorRecord::from_values(DType::F32, {2, 3}, V{1.5, -2.25, 3.0, std::ldexp(1.0, -20), 65504.0, -0.0});
  t["layer.bias"] = TensorRecord::from_values(DType::F64, {3}, V{0.1, -1e300, 3.141592653589793});
  t["ids"] = TensorRecord::from_values(DType::I64, {4}, I{0, -1, std::int64_t{1} << 40, std::numeric_limits<std::int64_t>::min()});
  t["counts"] = TensorRecord::from_values(DType::I32, {2, 2}, I{1, -2, 2147483647, -2147483648LL});
  t["half"] = TensorRecord::from_values(DType::F16, {6}, V{1.0, -2.5, 65504.0, std::ldexp(1.0, -24), 0.333251953125, -INFINITY});
  t["brain"] = TensorRecord::from_values(DType::BF16, {4}, V{1.0, -3.140625, std::ldexp(1.0, -133), 3.3895313892515355e38});
  t["short"] = TensorRecord::from_values(DType::I16, {3}, I{-32768, 0, 32767});
  t["tiny"] = TensorRecord::from_values(DType::I8, {3}, I{-128, 0, 127});
  t["bytes"] = TensorRecord::from_values(DType::U8, {3}, I{0, 128, 255});
  t["mask"] = TensorRecord::from_values(DType::BOOL, {3}, I{1, 0, 1});
  t["scalar"] = TensorRecord::from_values(DType::F32, {}, V{42.0});
  t["empty"] = TensorRecord::from_values(DType::F32, {0, 4}, V{});
  return t;
}

}  // namespace

TEST_CASE("safetensors: round trip of every dtype, scalars, empty tensors and metadata") {
  const fs::path dir = scratch("roundtrip");
  TensorMap t = small_tensors();
  t["f16.from_float"] = TensorRecord::from_values(DType::F16, {2, 2}, std::vector<float>{0.5f, -1.0f, 1e-3f, 3e4f});
  t["wide\"name\n\xc3\xa9"] = TensorRecord::from_values(DType::F64, {1, 1, 2}, std::vector<double>{1e-310, 2.5});
  const attn::io::MetadataMap meta{{"format", "pt"}, {"note", "quote\" backslash\\ tab\t ctl\x01 \xe4\xb8\xad"}, {"", ""}};
  const fs::path path = dir / "model.safetensors";
  attn::io::write_safetensors(path, t, meta);

  const auto bytes = slurp(path);
  CHECK(bytes == attn::io::serialize_safetensors(t, meta));
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  CHECK(n % 8 == 0);  // the data buffer starts 8-byte aligned

  for (const auto& back : {attn::io::read_safetensors(path), attn::io::parse_safetensors(bytes, "buf")}) {
    CHECK(back.metadata == meta);
    REQUIRE(back.tensors.size() == t.size());
    for (const auto& [name, rec] : t) {
      INFO(name);
      REQUIRE(back.contains(name));
      const auto& got = back.at(name);
      CHECK(got.dtype == rec.dtype);
      CHECK(got.shape == rec.shape);
      CHECK(got.bytes == rec.bytes);
    }
  }
  const auto back = attn::io::read_safetensors(path);
  CHECK(back.at("layer.weight").to_vector<float>() == std::vector<float>{1.5f, -2.25f, 3.0f, std::ldexp(1.0f, -20), 65504.0f, -0.0f});
  CHECK(back.at("f16.from_float").to_vector<double>() ==
        std::vector<double>{0.5, -1.0, 0.0010004043579101562, 30000.0});  // 1e-3 rounded to half precision
  CHECK(back.at("ids").to_vector<std::int64_t>()[3] == std::numeric_limits<std::int64_t>::min());
  CHECK(back.at("scalar").numel() == 1);
  CHECK(back.at("empty").numel() == 0);
  CHECK_THROWS_WITH(back.at("missing"), Catch::Contains(path.string()) && Catch::Contains("'missing'"));
  CHECK(listing(dir) == std::vector<std::string>{"model.safetensors"});  // no temporary left behind
}

TEST_CASE("safetensors: element conversions check ranges and never truncate floats to integers") {
  using V = std::vector<std::int64_t>;
  const auto i64 = TensorRecord::from_values(DType::I64, {3}, V{1, -5, std::int64_t{1} << 40});
  CHECK(i64.to_vector<double>() == std::vector<double>{1, -5, 1099511627776.0});
  CHECK(i64.to_vector<float>() == std::vector<float>{1, -5, 1099511627776.0f});
  CHECK_THROWS_AS(i64.to_vector<std::int32_t>(), attn::ArgumentError);
  CHECK(TensorRecord::from_values(DType::I32, {2}, V{7, -7}).to_vector<std::int64_t>() == V{7, -7});
  CHECK(TensorRecord::from_values(DType::U8, {1}, V{255}).to_vector<int>() == std::vector<int>{255});
  CHECK(TensorRecord::from_values(DType::BOOL, {2}, V{0, 1}).to_vector<float>() == std::vector<float>{0, 1});
  CHECK_THROWS_AS(TensorRecord::from_values(DType::F32, {1}, std::vector<float>{1}).to_vector<std::int64_t>(), attn::ArgumentError);
  CHECK_THROWS_AS(TensorRecord::from_values(DType::I32, {1}, std::vector<float>{1}), attn::ArgumentError);
  CHECK_THROWS_AS(TensorRecord::from_values(DType::I8, {1}, V{128}), attn::ArgumentError);
  CHECK_THROWS_AS(TensorRecord::from_values(DType::U8, {1}, V{-1}), attn::ArgumentError);
  CHECK_THROWS_AS(TensorRecord::from_values(DType::BOOL, {1}, V{2}), attn::ArgumentError);
  CHECK_THROWS_AS(TensorRecord::from_values(DType::F32, {2, 2}, std::vector<float>{1, 2, 3}), attn::ArgumentError);
  const TensorRecord huge{DType::F32, {std::size_t{1} << 40, std::size_t{1} << 40}, {}};
  CHECK_THROWS_AS(huge.numel(), attn::ArgumentError);
}

TEST_CASE("safetensors: half and bfloat16 conversions are exact both ways") {
  for (std::uint32_t h = 0; h <= 0xffff; ++h) {
    const auto bits = static_cast<std::uint16_t>(h);
    const float f = attn::io::half_to_float(bits);
    const float b = attn::io::bfloat16_to_float(bits);
    if (std::isnan(f)) {
      CHECK(std::isnan(attn::io::half_to_float(attn::io::float_to_half(f))));
    } else if (attn::io::float_to_half(f) != bits) {
      FAIL_CHECK("half " << h << " -> " << f << " -> " << attn::io::float_to_half(f));
    }
    if (std::isnan(b)) {
      CHECK(std::isnan(attn::io::bfloat16_to_float(attn::io::float_to_bfloat16(b))));
    } else if (attn::io::float_to_bfloat16(b) != bits) {
      FAIL_CHECK("bfloat16 " << h << " -> " << b << " -> " << attn::io::float_to_bfloat16(b));
    }
  }
  CHECK(attn::io::half_to_float(0x0001) == std::ldexp(1.0f, -24));
  CHECK(attn::io::half_to_float(0x7bff) == 65504.0f);
  CHECK(attn::io::half_to_float(0xfc00) == -INFINITY);
}

TEST_CASE("safetensors: float16/bfloat16 rounding matches PyTorch (ties, subnormals, overflow)") {
  const auto f = attn::io::read_safetensors(fs::path(ATTN_TEST_DATA_DIR) / "fixtures/io/python_rounding.safetensors");
  const auto src = f.at("src").to_vector<float>();
  REQUIRE(src.size() > 500);
  const auto ours16 = TensorRecord::from_values(DType::F16, f.at("src").shape, src);
  const auto oursbf = TensorRecord::from_values(DType::BF16, f.at("src").shape, src);
  const auto torch16 = f.at("f16").to_vector<float>(), torch_bf = f.at("bf16").to_vector<float>();
  const auto torch16_as_f32 = f.at("f16_as_f32").to_vector<float>();
  const auto ours16_f = ours16.to_vector<float>(), oursbf_f = oursbf.to_vector<float>();
  int mismatches = 0;
  for (std::size_t i = 0; i < src.size(); ++i) {
    if (std::isnan(src[i])) {  // PyTorch's NaN bit patterns differ between its scalar and vector paths
      CHECK((std::isnan(ours16_f[i]) && std::isnan(oursbf_f[i]) && std::isnan(torch16[i])));
      continue;
    }
    const bool same = std::memcmp(&ours16.bytes[2 * i], &f.at("f16").bytes[2 * i], 2) == 0 &&
                      std::memcmp(&oursbf.bytes[2 * i], &f.at("bf16").bytes[2 * i], 2) == 0 &&
                      std::bit_cast<std::uint32_t>(torch16[i]) == std::bit_cast<std::uint32_t>(torch16_as_f32[i]);
    if (!same && ++mismatches < 10)
      FAIL_CHECK("value " << i << " = " << src[i] << ": ours " << ours16_f[i] << " / " << oursbf_f[i] << ", torch "
                          << torch16[i] << " / " << torch_bf[i]);
  }
  CHECK(mismatches == 0);
}

TEST_CASE("safetensors: reads a file written by Python's safetensors and writes the same bytes") {
  const fs::path path = fs::path(ATTN_TEST_DATA_DIR) / "fixtures/io/python_small.safetensors";
  const auto f = attn::io::read_safetensors(path);
  CHECK(f.metadata == attn::io::MetadataMap{{"format", "pt"}});
  const TensorMap want = small_tensors();
  REQUIRE(f.tensors.size() == want.size());
  for (const auto& [name, rec] : want) {
    INFO(name);
    CHECK(f.at(name).dtype == rec.dtype);
    CHECK(f.at(name).shape == rec.shape);
    CHECK(f.at(name).bytes == rec.bytes);
  }
  CHECK(f.at("layer.bias").to_vector<double>() == std::vector<double>{0.1, -1e300, 3.141592653589793});
  CHECK(f.at("counts").to_vector<std::int64_t>() == std::vector<std::int64_t>{1, -2, 2147483647, -2147483648LL});
  CHECK(f.at("half").to_vector<float>() ==
        std::vector<float>{1.0f, -2.5f, 65504.0f, std::ldexp(1.0f, -24), 0.333251953125f, -INFINITY});
  CHECK(f.at("brain").to_vector<float>() == std::vector<float>{1.0f, -3.140625f, std::ldexp(1.0f, -133), 3.3895313892515355e38f});
  CHECK(f.at("short").to_vector<int>() == std::vector<int>{-32768, 0, 32767});
  CHECK(f.at("tiny").to_vector<int>() == std::vector<int>{-128, 0, 127});
  CHECK(f.at("bytes").to_vector<int>() == std::vector<int>{0, 128, 255});
  CHECK(f.at("mask").to_vector<int>() == std::vector<int>{1, 0, 1});
  CHECK(f.at("scalar").shape.empty());
  CHECK(f.at("scalar").to_vector<float>() == std::vector<float>{42.0f});
  CHECK(f.at("empty").shape == std::vector<std::size_t>{0, 4});

  // Byte compatibility: same tensor order, JSON spelling and padding as the reference writer.
  const auto original = slurp(path);
  CHECK(attn::io::serialize_safetensors(f.tensors, f.metadata) == original);
  CHECK(attn::io::serialize_safetensors(want, f.metadata) == original);

  // For a manual check in Python: ATTN_IO_EXPORT_DIR=/tmp/x <this test>, then
  // python3 tests/fixtures/io/make_fixtures.py --check /tmp/x/attn_written.safetensors
  if (const char* out = std::getenv("ATTN_IO_EXPORT_DIR"))
    attn::io::write_safetensors(fs::path(out) / "attn_written.safetensors", want, {{"format", "pt"}});
}

TEST_CASE("safetensors: accepts what the reference reader accepts") {
  const std::string t = entry("a", "F32", "[1]", "[0,4]");
  CHECK(attn::io::parse_safetensors(file_bytes("{}"), "b").tensors.empty());
  CHECK(attn::io::parse_safetensors(file_bytes(" \t\n{" + t + "}  \r\n ", 4), "b").tensors.size() == 1);
  CHECK(attn::io::parse_safetensors(file_bytes("{\"__metadata__\":null," + t + "}", 4), "b").metadata.empty());
  const auto unknown = attn::io::parse_safetensors(
      file_bytes("{\"a\":{\"extra\":[{\"x\":[1.5e-3,-0,true,null,\"s\\u00e9\\ud83d\\ude00\"]}],\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4), "b");
  CHECK(unknown.at("a").shape == std::vector<std::size_t>{1});
  const auto esc = attn::io::parse_safetensors(file_bytes("{" + entry("\\u00e9\\n\\/", "U8", "[0]", "[0,0]") + "}"), "b");
  CHECK(esc.contains("\xc3\xa9\n/"));
  // Zero-size tensors may share an offset with their neighbour; order in the header is free.
  const auto z = attn::io::parse_safetensors(
      file_bytes("{" + entry("b", "F32", "[1]", "[4,8]") + "," + entry("z", "F32", "[0,7]", "[4,4]") + "," + t + "}", 8), "b");
  CHECK(z.tensors.size() == 3);
}

TEST_CASE("safetensors: hostile files are FormatErrors with file name and byte offset") {
  const std::string a = entry("a", "F32", "[1]", "[0,4]");
  auto one = [](const std::string& e) { return "{" + e + "}"; };

  SECTION("length field and header size") {
    CHECK(rejected(std::vector<std::byte>(5), "too short") == 5);
    CHECK(rejected(file_bytes("{}", 0, 1000), "exceeds the 2 bytes") == 0);
    CHECK(rejected(file_bytes("{}", 0, 100'000'001), "exceeds the limit") == 0);
    rejected(file_bytes("{}", 0, ~0ull - 1), "exceeds the limit");
    rejected(file_bytes(""), "must be a JSON object");
  }
  SECTION("not UTF-8, not JSON") {
    CHECK(rejected(file_bytes("{\"a\xff\":1}"), "not valid UTF-8") == 8 + 3);
    rejected(file_bytes("{\"\xc0\xaf\":1}"), "not valid UTF-8");          // overlong '/'
    rejected(file_bytes("{\"\xed\xa0\x80\":1}"), "not valid UTF-8");      // encoded surrogate
    rejected(file_bytes("{\"a\":{\"dtype\":\"F32\",}}"), "expected a JSON string");
    CHECK(rejected(file_bytes("{\"a\" 1}"), "expected ':'") == 8 + 5);
    rejected(file_bytes("{" + a), "expected ',' or '}'");
    rejected(file_bytes(one(a) + "x", 4), "unexpected characters after");
    rejected(file_bytes("{\"a"), "unterminated string");
    rejected(file_bytes("{\"a\\q\":1}"), "invalid escape");
    rejected(file_bytes("{\"a\\ud800\":1}"), "unpaired UTF-16 surrogate");
    rejected(file_bytes("{\"a\\u12\"}"), "hex digit");
    rejected(file_bytes("{\"a\tb\":1}"), "control character");
    rejected(file_bytes("{\"a\":{\"x\":01,\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4), "");
    rejected(file_bytes("{\"a\":{\"x\":tru,\"dtype\":\"F32\"}}"), "invalid JSON value");
  }
  SECTION("deep nesting is rejected, not a stack overflow") {
    rejected(file_bytes(std::string(1'000'000, '[')), "must be a JSON object");
    rejected(file_bytes("{\"a\":" + std::string(1'000'000, '{')), "expected a JSON string");
    const std::string deep = "{\"a\":{\"x\":" + std::string(1'000'000, '[');
    rejected(file_bytes(deep), "nesting deeper than 64");
    std::string objects = "{\"a\":{\"x\":";
    for (int i = 0; i < 100'000; ++i) objects += "{\"k\":";
    rejected(file_bytes(objects), "nesting deeper than 64");
  }
  SECTION("entries that are not tensor objects") {
    rejected(file_bytes("[]"), "must be a JSON object");
    rejected(file_bytes("{\"a\":5}"), "entry of tensor \"a\" must be a JSON object");
    rejected(file_bytes("{\"a\":[0,4]}"), "must be a JSON object");
    rejected(file_bytes("{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4), "lacks \"dtype\"");
    rejected(file_bytes("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4), "lacks \"shape\"");
    rejected(file_bytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4), "lacks \"data_offsets\"");
    rejected(file_bytes("{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4), "duplicate field");
    rejected(file_bytes("{\"a\":{\"dtype\":32,\"shape\":[1],\"data_offsets\":[0,4]}}", 4), "must be a string");
    rejected(file_bytes("{\"__metadata__\":{\"k\":1}}"), "must be a string");
    rejected(file_bytes("{\"__metadata__\":[]}"), "must be an object of strings");
    rejected(file_bytes("{\"__metadata__\":{},\"__metadata__\":{}}"), "duplicate \"__metadata__\"");
    rejected(file_bytes("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}"), "duplicate \"__metadata__\" key");
  }
  SECTION("dtype and shape") {
    rejected(file_bytes(one(entry("a", "F8_E4M3", "[1]", "[0,1]")), 1), "unsupported dtype \"F8_E4M3\"");
    rejected(file_bytes(one(entry("a", "F32", "[-1]", "[0,4]")), 4), "must not be negative");
    rejected(file_bytes(one(entry("a", "F32", "[1.5]", "[0,4]")), 4), "not fractions");
    rejected(file_bytes(one(entry("a", "F32", "[1e0]", "[0,4]")), 4), "not fractions");
    rejected(file_bytes(one(entry("a", "F32", "[\"1\"]", "[0,4]")), 4), "non-negative integers");
    rejected(file_bytes(one(entry("a", "F32", "1", "[0,4]")), 4), "must be an array");
    rejected(file_bytes(one(entry("a", "F32", "[18446744073709551616]", "[0,4]")), 4), "above 2^64-1");
    CHECK(rejected(file_bytes(one(entry("a", "F32", "[4294967296,4294967296]", "[0,0]"))), "overflows") == 8 + 5);
    rejected(file_bytes(one(entry("a", "F32", "[4611686018427387904]", "[0,0]"))), "overflows");  // 2^62 * 4 bytes
  }
  SECTION("data_offsets") {
    rejected(file_bytes(one(entry("a", "F32", "[1]", "[4]")), 4), "exactly 2 integers, not 1");
    rejected(file_bytes(one(entry("a", "F32", "[1]", "[0,4,8]")), 8), "exactly 2 integers, not 3");
    rejected(file_bytes(one(entry("a", "F32", "[1]", "[-4,0]")), 4), "must not be negative");
    rejected(file_bytes(one(entry("a", "F32", "[1]", "[0,4.0]")), 4), "not fractions");
    rejected(file_bytes(one(entry("a", "F32", "[1]", "{}")), 4), "must be an array");
    rejected(file_bytes(one(entry("a", "F32", "[0]", "[8,4]")), 4), "begin after they end");
    rejected(file_bytes(one(entry("a", "F32", "[2]", "[0,4]")), 4), "hold 4 bytes, but shape [2] of F32 needs 8");
    const std::string h = one(entry("a", "F32", "[250]", "[0,1000]"));
    CHECK(rejected(file_bytes(h, 4), "truncated file") == 8 + h.size() + 4);
    const std::string two = "{" + a + "," + entry("b", "F32", "[1]", "[2,6]") + "}";
    CHECK(rejected(file_bytes(two, 6), "overlaps tensor \"a\"") == 8 + two.size() + 2);
    const std::string gap = "{" + a + "," + entry("b", "F32", "[1]", "[8,12]") + "}";
    CHECK(rejected(file_bytes(gap, 12), "data bytes [4, 8) belong to no tensor") == 8 + gap.size() + 4);
    rejected(file_bytes(one(entry("a", "F32", "[1]", "[4,8]")), 8), "data bytes [0, 4) belong to no tensor");
    rejected(file_bytes("{" + a + "," + entry("a", "F32", "[1]", "[4,8]") + "}", 8), "duplicate tensor name \"a\"");
  }
  SECTION("truncated and padded files") {
    const auto good = attn::io::serialize_safetensors(small_tensors(), {{"format", "pt"}});
    REQUIRE_NOTHROW(attn::io::parse_safetensors(good, "good"));
    auto cut = good;
    cut.pop_back();
    CHECK(rejected(cut, "truncated file") == cut.size());
    rejected(std::vector<std::byte>(good.begin(), good.begin() + 100), "exceeds");  // inside the header
    auto longer = good;
    longer.resize(good.size() + 3);
    CHECK(rejected(longer, "3 trailing bytes") == good.size());
  }
}

TEST_CASE("safetensors: read errors that are not format errors") {
  const fs::path dir = scratch("ioerrors");
  CHECK_THROWS_WITH(attn::io::read_safetensors(dir / "absent.safetensors"),
                    Catch::Contains("absent.safetensors") && Catch::Contains("cannot open"));
  CHECK_THROWS_WITH(attn::io::read_safetensors(dir), Catch::Contains("not a regular file"));
  CHECK_THROWS_WITH(attn::io::SafetensorsReader(dir / "absent.safetensors"), Catch::Contains("absent.safetensors") && Catch::Contains("cannot open"));
  CHECK_THROWS_WITH(attn::io::SafetensorsReader(dir), Catch::Contains("not a regular file"));
}

TEST_CASE("safetensors: SafetensorsReader reads the header, then tensors on demand, in ranges and in chunks") {
  const fs::path dir = scratch("reader");
  TensorMap t = small_tensors();
  // Larger than one read chunk, with an element count that does not divide it.
  const std::size_t big_n = attn::io::kReadChunkBytes / sizeof(double) * 2 + 3;
  std::vector<double> big(big_n);
  for (std::size_t i = 0; i < big_n; ++i) big[i] = double(i) * 0.5 - 7.0;
  t["big"] = TensorRecord::from_values(DType::F64, {big_n}, big);
  attn::io::write_safetensors(dir / "r.safetensors", t, {{"epoch", "3"}});

  const attn::io::SafetensorsReader r(dir / "r.safetensors");
  CHECK(r.source() == (dir / "r.safetensors").string());
  CHECK(r.metadata() == attn::io::MetadataMap{{"epoch", "3"}});
  REQUIRE(r.tensors().size() == t.size());
  std::uint64_t next = r.in_file_order().front()->second.offset;  // the order tiles the data buffer
  for (const auto* kv : r.in_file_order()) {
    CHECK(kv->second.offset == next);
    next += kv->second.size;
    const auto& want = t.at(kv->first);
    CHECK(kv->second.dtype == want.dtype);
    CHECK(kv->second.shape == want.shape);
    CHECK(r.record(kv->second).bytes == want.bytes);
  }
  CHECK(next == fs::file_size(dir / "r.safetensors"));

  const auto& e = r.at("big");
  CHECK(e.numel() == big_n);
  std::vector<double> part(5);
  r.read(e, 100 * sizeof(double), 5 * sizeof(double), part.data());
  CHECK(part == std::vector<double>(big.begin() + 100, big.begin() + 105));
  CHECK_THROWS_AS(r.read(e, e.size - 8, 16, part.data()), attn::ArgumentError);
  CHECK_THROWS_WITH(r.at("absent"), Catch::Contains("r.safetensors") && Catch::Contains("no tensor named 'absent'"));

  std::vector<double> got;
  std::size_t chunks = 0;
  r.for_each_chunk(e, [&](const std::byte* b, std::uint64_t offset, std::size_t n) {
    CHECK(offset == got.size() * sizeof(double));
    CHECK(n % sizeof(double) == 0);
    CHECK(n <= attn::io::kReadChunkBytes);
    const std::size_t k = got.size();
    got.resize(k + n / sizeof(double));
    std::memcpy(got.data() + k, b, n);
    ++chunks;
  });
  CHECK(chunks == 3);
  CHECK(got == big);
  chunks = 0;  // a callback returning false ends the pass
  r.for_each_chunk(e, [&](const std::byte*, std::uint64_t, std::size_t) { return ++chunks < 2; });
  CHECK(chunks == 2);
}

TEST_CASE("safetensors: SafetensorsReader says so when the file shrinks after it was opened") {
  const fs::path dir = scratch("shrink");
  TensorMap t;
  t["w"] = TensorRecord::from_values(DType::F32, {64}, std::vector<float>(64, 1.0f));
  attn::io::write_safetensors(dir / "s.safetensors", t);
  const attn::io::SafetensorsReader r(dir / "s.safetensors");
  const auto& e = r.at("w");
  fs::resize_file(dir / "s.safetensors", e.offset + 40);  // the same file, cut inside the tensor
  std::vector<float> v(64);
  try {
    r.read(e, 0, e.size, v.data());
    FAIL("a read past the new end of the file succeeded");
  } catch (const attn::FormatError& err) {
    CHECK_THAT(err.what(), Catch::Contains("s.safetensors") && Catch::Contains("the file shrank while being read"));
    CHECK(err.where() == e.offset + 40);
  }
}

TEST_CASE("safetensors: writes are atomic and failures leave the old file and no temporary") {
  const fs::path dir = scratch("atomic");
  const fs::path path = dir / "m.safetensors";
  const TensorMap good = small_tensors();
  attn::io::write_safetensors(path, good);
  const auto before = slurp(path);

  SECTION("an invalid record is refused before the disk is touched") {
    TensorMap bad = good;
    bad["layer.weight"].bytes.pop_back();
    CHECK_THROWS_WITH(attn::io::write_safetensors(path, bad), Catch::Contains("layer.weight") && Catch::Contains("needs 24"));
    TensorMap reserved = good;
    reserved["__metadata__"] = good.at("scalar");
    CHECK_THROWS_AS(attn::io::write_safetensors(path, reserved), attn::ArgumentError);
    CHECK_THROWS_AS(attn::io::write_safetensors(path, good, {{"k", "\xff"}}), attn::ArgumentError);
  }
  SECTION("a write that fails midway (file size limit) keeps the old file") {
    TensorMap big = good;
    big["big"] = TensorRecord{DType::U8, {1 << 20}, std::vector<std::byte>(1 << 20)};
    rlimit old{};
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &old) == 0);
    auto* old_handler = std::signal(SIGXFSZ, SIG_IGN);  // get EFBIG instead of being killed
    rlimit low = old;
    low.rlim_cur = 64 * 1024;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &low) == 0);
    CHECK_THROWS_WITH(attn::io::write_safetensors(path, big), Catch::Contains(path.string()) && Catch::Contains("failed"));
    ::setrlimit(RLIMIT_FSIZE, &old);
    std::signal(SIGXFSZ, old_handler);
  }
  SECTION("a failed rename (target is a directory) removes the temporary") {
    const fs::path sub = dir / "sub.safetensors";
    fs::create_directory(sub);
    fs::create_directory(sub / "keep");  // non-empty, so rename() cannot replace it
    CHECK_THROWS_WITH(attn::io::write_safetensors(sub, good), Catch::Contains("sub.safetensors") && Catch::Contains("rename"));
    CHECK(fs::is_directory(sub / "keep"));
    fs::remove_all(sub);
  }
  SECTION("a missing directory is an IoError") {
    CHECK_THROWS_AS(attn::io::write_safetensors(dir / "no/such/dir/m.safetensors", good), attn::IoError);
  }
  SECTION("an AtomicFile dropped without commit leaves nothing") {
    {
      attn::io::AtomicFile f(path);
      f.write(std::string_view("partial"));
      CHECK(fs::exists(f.temp_path()));
    }
  }
  CHECK(slurp(path) == before);
  CHECK(listing(dir) == std::vector<std::string>{"m.safetensors"});
}

TEST_CASE("safetensors: replacing a file keeps its permissions, writes through a symbolic link, and takes a long name") {
  const fs::path dir = scratch("replace");
  TensorMap t;
  t["w"] = TensorRecord::from_values(DType::F32, {4}, std::vector<float>{1, 2, 3, 4});
  const mode_t old_mask = ::umask(022);
  const fs::path p = dir / "private.safetensors";
  attn::io::write_safetensors(p, t);
  fs::permissions(p, fs::perms::owner_read | fs::perms::owner_write);
  attn::io::write_safetensors(p, t);
  CHECK((fs::status(p).permissions() & fs::perms::all) == (fs::perms::owner_read | fs::perms::owner_write));
  fs::permissions(p, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read |
                         fs::perms::group_write);
  attn::io::write_safetensors(p, t);
  CHECK((fs::status(p).permissions() & fs::perms::all) ==
        (fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::group_write | fs::perms::others_read));
  ::umask(old_mask);

  // latest -> epoch3.safetensors: the link stays, the file it names gets the new content.
  attn::io::write_safetensors(dir / "epoch3.safetensors", t);
  fs::create_symlink("epoch3.safetensors", dir / "latest.safetensors");
  TensorMap t2;
  t2["w"] = TensorRecord::from_values(DType::F32, {2}, std::vector<float>{5, 6});
  attn::io::write_safetensors(dir / "latest.safetensors", t2);
  CHECK(fs::is_symlink(dir / "latest.safetensors"));
  CHECK(attn::io::read_safetensors(dir / "epoch3.safetensors").tensors.at("w").shape == std::vector<std::size_t>{2});

  // A name of 240 bytes (NAME_MAX is 255): the temporary's name must fit too.
  const fs::path longp = dir / (std::string(225, 'a') + ".safetensors");
  attn::io::write_safetensors(longp, t);
  CHECK(attn::io::read_safetensors(longp).tensors.at("w").shape == std::vector<std::size_t>{4});
  std::size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir)) files += e.path().filename().string().rfind(".", 0) == 0 ? 100 : 1;
  CHECK(files == 4);  // private, epoch3, latest, the long one; no temporary left
}
