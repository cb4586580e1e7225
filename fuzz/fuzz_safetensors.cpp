// SPDX-License-Identifier: MIT
// libFuzzer target: safetensors bytes through the readers (in memory, from a file, on demand).
// Contract checked: the two readers agree (same tensors or the same FormatError message), every
// error names the file and a byte offset inside it, accepted files convert to numbers and survive
// a serialize/parse round trip unchanged. Anything else (other exceptions, sanitizer reports,
// an invariant failure) is a crash.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <attn/io/safetensors.hpp>

#include "fuzz_common.hpp"

namespace {

using attn::io::SafetensorsFile;

bool same_content(const SafetensorsFile& a, const SafetensorsFile& b) {
  if (a.metadata != b.metadata || a.tensors.size() != b.tensors.size()) return false;
  for (auto ia = a.tensors.begin(), ib = b.tensors.begin(); ia != a.tensors.end(); ++ia, ++ib)
    if (ia->first != ib->first || ia->second.dtype != ib->second.dtype || ia->second.shape != ib->second.shape ||
        ia->second.bytes != ib->second.bytes)
      return false;
  return true;
}

// What a reader made of the input: the parsed file or the error message.
struct Outcome {
  std::optional<SafetensorsFile> file;
  std::string error;
};

template <class F>
Outcome run_reader(F&& read, const std::string& path, std::size_t size) {
  Outcome o;
  try {
    o.file = read();
  } catch (const attn::FormatError& e) {
    fuzz::check_format_error(e, path, attn::FormatError::Kind::offset, size);
    o.error = e.what();
  }
  return o;
}

void check_accepted(const SafetensorsFile& f) {
  for (const auto& [name, t] : f.tensors) {
    const std::size_t n = t.numel();
    fuzz::require(t.bytes.size() == n * attn::io::dtype_size(t.dtype), "tensor byte count disagrees with its shape");
    fuzz::require(t.to_vector<double>().size() == n, "to_vector<double> has the wrong size");
    fuzz::require(t.to_vector<float>().size() == n, "to_vector<float> has the wrong size");
    try {
      fuzz::require(t.to_vector<std::int64_t>().size() == n, "to_vector<int64_t> has the wrong size");
      fuzz::require(!attn::io::is_floating(t.dtype) || n == 0, "floating data converted to integers");
      (void)t.to_vector<std::int8_t>();  // may not fit: ArgumentError, never UB
    } catch (const attn::ArgumentError&) {
    }
  }
  // Canonical re-serialization parses back to the same content, and is a fixed point.
  const auto bytes = attn::io::serialize_safetensors(f.tensors, f.metadata);
  const SafetensorsFile again = attn::io::parse_safetensors(bytes, "round-trip");
  fuzz::require(same_content(f, again), "serialize/parse round trip changed the content");
  fuzz::require(attn::io::serialize_safetensors(again.tensors, again.metadata) == bytes,
                "serialization is not canonical");
}

// The on-demand reader (io::load's) on an accepted file: the same metadata and tensors, its
// in-file order tiling the data, and each tensor's chunks and ranges giving its bytes.
void check_reader(const SafetensorsFile& f, const std::filesystem::path& path) {
  const attn::io::SafetensorsReader r(path);
  fuzz::require(r.metadata() == f.metadata, "SafetensorsReader: other metadata");
  fuzz::require(r.tensors().size() == f.tensors.size() && r.in_file_order().size() == f.tensors.size(),
                "SafetensorsReader: another tensor count");
  std::uint64_t next = r.in_file_order().empty() ? 0 : r.in_file_order().front()->second.offset;
  for (const auto* kv : r.in_file_order()) {
    const auto& e = kv->second;
    const auto& want = f.at(kv->first);
    fuzz::require(e.offset == next, "SafetensorsReader: the in-file order does not tile the data");
    next += e.size;
    fuzz::require(e.dtype == want.dtype && e.shape == want.shape && e.size == want.bytes.size() && e.numel() == want.numel(),
                  "SafetensorsReader: another dtype, shape or size");
    std::vector<std::byte> got;
    r.for_each_chunk(e, [&](const std::byte* b, std::uint64_t offset, std::size_t n) {
      fuzz::require(offset == got.size() && n % attn::io::dtype_size(e.dtype) == 0, "SafetensorsReader: a chunk out of place");
      got.insert(got.end(), b, b + n);
    });
    fuzz::require(got == want.bytes, "SafetensorsReader: the chunks differ from the tensor's bytes");
    if (e.size >= 2) {  // an inner range
      std::vector<std::byte> mid(static_cast<std::size_t>(e.size - 2));
      r.read(e, 1, mid.size(), mid.data());
      fuzz::require(std::equal(mid.begin(), mid.end(), want.bytes.begin() + 1), "SafetensorsReader: a range differs");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  const std::filesystem::path path = fuzz::scratch_dir() / "input.safetensors";
  const std::string name = path.string();

  const Outcome mem = run_reader([&] { return attn::io::parse_safetensors(bytes, name); }, name, size);
  fuzz::write_file(path, fuzz::as_text(data, size));
  const Outcome file = run_reader([&] { return attn::io::read_safetensors(path); }, name, size);

  fuzz::require(mem.file.has_value() == file.file.has_value(), "in-memory and file readers disagree on acceptance");
  fuzz::require(mem.error == file.error, "in-memory and file readers report different errors");
  if (mem.file) {
    fuzz::require(same_content(*mem.file, *file.file), "in-memory and file readers return different tensors");
    check_accepted(*mem.file);
    check_reader(*mem.file, path);
  }
  return 0;
}
