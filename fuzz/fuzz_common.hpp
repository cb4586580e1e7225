// SPDX-License-Identifier: MIT
// Helpers shared by the libFuzzer targets: invariant checks that crash (so libFuzzer records the
// input), a per-process scratch directory for readers that take a path, and error-message checks.
//   fuzz::require(v.size() >= 2, "a vocabulary holds <pad> and <unk>");
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include <fcntl.h>
#include <unistd.h>

#include <attn/core/error.hpp>

namespace fuzz {

/// Aborts with `what` when an invariant fails; libFuzzer then saves the input as a crash.
inline void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz invariant violated: %s\n", what);
    std::abort();
  }
}

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

/// A directory private to this process, removed at exit. Readers that take a path get the fuzz
/// input through a file in it; /dev/shm is preferred so each run costs no disk I/O.
inline const std::filesystem::path& scratch_dir() {
  static const struct Dir {
    std::filesystem::path path;
    Dir() {
      std::error_code ec;
      std::filesystem::path base = std::filesystem::is_directory("/dev/shm", ec) && ::access("/dev/shm", W_OK) == 0
                                       ? std::filesystem::path("/dev/shm")
                                       : std::filesystem::temp_directory_path();
      path = base / ("attn-fuzz-" + std::to_string(::getpid()));
      std::filesystem::remove_all(path, ec);
      std::filesystem::create_directories(path);
    }
    ~Dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  } dir;
  return dir.path;
}

/// Replaces the file at `path` with exactly `bytes`.
inline void write_file(const std::filesystem::path& path, std::string_view bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  require(fd >= 0, "cannot create a scratch file");
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ::ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    require(n > 0, "cannot write a scratch file");
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
}

/// A FormatError must name the file first and give a line (1-based, at most `max_line`) or a
/// byte offset (at most `max_offset`), as the error contract in attn/core/error.hpp says.
inline void check_format_error(const attn::FormatError& e, const std::string& path, attn::FormatError::Kind kind,
                               std::uint64_t max_where) {
  const std::string_view what = e.what();
  require(what.starts_with(path + ": "), "FormatError message does not start with the file name");
  require(e.path() == path, "FormatError::path() is not the file read");
  require(e.kind() == kind, "FormatError reports the wrong kind of position (line vs byte offset)");
  if (kind == attn::FormatError::Kind::line) {
    require(e.where() >= 1 && e.where() <= max_where, "FormatError line number out of range");
    require(what.substr(path.size() + 2).starts_with("line "), "FormatError message lacks 'line N'");
  } else {
    require(e.where() <= max_where, "FormatError byte offset beyond the end of the input");
    require(what.substr(path.size() + 2).starts_with("byte offset "), "FormatError message lacks 'byte offset N'");
  }
}

/// Number of lines for_each_line visits in `text` (a final line without '\n' counts).
inline std::uint64_t line_count(std::string_view text) {
  std::uint64_t n = 0;
  for (char c : text) n += c == '\n' ? 1 : 0;
  return n + (text.empty() || text.back() == '\n' ? 0 : 1);
}

}  // namespace fuzz
