// SPDX-License-Identifier: MIT
// Small file helpers for the data readers: a size-limited whole-file read, an atomic write
// (attn::AtomicFile) and a line splitter that handles a UTF-8 BOM and CRLF endings.
//   std::string s = attn::data::read_file(p, 1 << 20);  attn::data::write_file_atomic(p, s);
#pragma once
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/atomic_file.hpp"
#include "../core/error.hpp"

namespace attn::data {

namespace fs = std::filesystem;

namespace detail {
inline std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

/// Closes a POSIX file descriptor on scope exit.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};
}  // namespace detail

/// Reads the whole file. Throws IoError naming the path when it cannot be opened or read, is
/// not a regular file, or holds more than `max_bytes` bytes (checked while reading, so a file
/// that grows, or a device such as /dev/zero, cannot exhaust memory).
inline std::string read_file(const fs::path& path, std::uintmax_t max_bytes) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is rejected below.
  detail::Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  if (f.fd < 0) throw IoError(path.string(), "cannot open: " + detail::errno_text(errno));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) throw IoError(path.string(), "cannot stat: " + detail::errno_text(errno));
  if (S_ISDIR(st.st_mode)) throw IoError(path.string(), "is a directory, expected a file");
  if (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)) throw IoError(path.string(), "is a pipe or socket, expected a regular file");
  if (const int fl = ::fcntl(f.fd, F_GETFL); fl >= 0) ::fcntl(f.fd, F_SETFL, fl & ~O_NONBLOCK);
  const auto too_big = [&] {
    return IoError(path.string(), "file is larger than the limit of " + std::to_string(max_bytes) + " bytes");
  };
  if (S_ISREG(st.st_mode) && static_cast<std::uintmax_t>(st.st_size) > max_bytes) throw too_big();
  std::string out;
  if (S_ISREG(st.st_mode)) out.reserve(static_cast<std::size_t>(st.st_size));
  char buf[1 << 16];
  for (;;) {
    const ::ssize_t n = ::read(f.fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw IoError(path.string(), "read failed: " + detail::errno_text(errno));
    }
    if (n == 0) break;
    if (out.size() + static_cast<std::uintmax_t>(n) > max_bytes) throw too_big();
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

/// Replaces `path` with `content` so that readers see either the old file or the whole new one
/// (attn::AtomicFile: a temporary beside it, fsync, rename, then the directory fsynced). On failure
/// the temporary is removed and IoError names `path`.
inline void write_file_atomic(const fs::path& path, std::string_view content) {
  AtomicFile file(path);
  file.write(content);
  file.commit();
}

/// The UTF-8 byte order mark, which some editors put at the start of text files.
inline constexpr std::string_view utf8_bom = "\xEF\xBB\xBF";

/// Calls `fn(line_number, line)` for each line of `text` (numbers start at 1). A leading UTF-8
/// BOM is dropped; lines end at '\n', and a '\r' before it is dropped (CRLF files). A final line
/// without '\n' is still visited; a trailing '\n' does not add an empty last line.
template <class Fn>
void for_each_line(std::string_view text, Fn&& fn) {
  if (text.starts_with(utf8_bom)) text.remove_prefix(utf8_bom.size());
  std::uint64_t line_no = 0;
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (line.ends_with('\r')) line.remove_suffix(1);
    fn(++line_no, line);
  }
}

}  // namespace attn::data
