// SPDX-License-Identifier: MIT
// AtomicFile: write a file so that readers see either the old content or the complete new one. The
// one atomic writer of the library: io/ (safetensors, checkpoints) and data/ (write_file_atomic,
// vocabularies) both write through it.
//   attn::AtomicFile f("model.safetensors");  f.write(bytes);  f.commit();   // no commit: old file kept
// POSIX only (open/fsync/rename); the temporary lives beside the target so rename() never crosses devices.
#pragma once
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "error.hpp"
#include "fault.hpp"

namespace attn {

/// A temporary file next to `target` that replaces `target` on commit(). Until commit() succeeds the
/// target is untouched; a failed write, a failed commit or destruction without commit removes the
/// temporary. A target that is a symbolic link keeps it: the file it points to is replaced (the
/// temporary lives beside that file). A target that exists keeps its permission bits (and, where
/// the process may, its owner and group). Not copyable; one writer per object.
class AtomicFile {
 public:
  explicit AtomicFile(std::filesystem::path target) : target_(std::move(target)) {
    if (target_.filename().empty()) throw IoError(target_.string(), "not a file path");
    dest_ = target_;
    std::error_code ec;
    if (std::filesystem::is_symlink(std::filesystem::symlink_status(target_, ec))) {
      dest_ = std::filesystem::weakly_canonical(target_, ec);
      if (ec || dest_.filename().empty()) throw IoError(target_.string(), "cannot resolve the symbolic link: " + ec.message());
    }
    struct stat existing {};
    const bool exists = ::stat(dest_.c_str(), &existing) == 0 && S_ISREG(existing.st_mode);
    const std::filesystem::path dir = dest_.parent_path();
    const auto stamp = static_cast<unsigned long long>(std::chrono::steady_clock::now().time_since_epoch().count());
    // The name is hidden and starts with the target's so that strays are recognisable; a long one
    // is cut to 100 bytes plus a hash of the whole, so that the temporary's name stays within
    // NAME_MAX (255) wherever the target's does.
    std::string base = dest_.filename().string();
    if (base.size() > 100) {
      char hash[17];
      std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(std::hash<std::string>{}(base)));
      base = base.substr(0, 100) + "~" + hash;
    }
    // O_EXCL makes the name ours; the pid and clock only make collisions (and retries) unlikely.
    for (int attempt = 0; attempt < 100 && fd_ < 0; ++attempt) {
      std::string leaf = ".";
      leaf += base;
      leaf += ".tmp-";
      leaf += std::to_string(::getpid());
      leaf += '-';
      leaf += std::to_string(stamp + static_cast<unsigned long long>(attempt));
      temp_ = dir / leaf;
      fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);  // umask applies, like fopen
      if (fd_ < 0 && errno != EEXIST) fail("cannot create temporary file " + temp_.string());
    }
    if (fd_ < 0) fail("cannot create a unique temporary file in " + dir.string());
    if (exists) {
      // The mode bits are the existing file's, not the umask's; the owner too where the process
      // may give a file away. Both best effort: a file system without POSIX permissions refuses
      // them, and they mean nothing there.
      (void)!::fchown(fd_, existing.st_uid, existing.st_gid);
      (void)!::fchmod(fd_, existing.st_mode & 07777);
    }
    file_ = ::fdopen(fd_, "wb");
    if (file_ == nullptr) {
      const int err = errno;
      discard();
      errno = err;
      fail("fdopen failed");
    }
  }

  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  ~AtomicFile() { discard(); }

  /// Appends bytes to the temporary file. Throws IoError (and drops the temporary) on failure.
  void write(std::span<const std::byte> bytes) {
    if (file_ == nullptr) throw IoError(target_.string(), "write after commit or failure");
    if (bytes.empty()) return;
    if (std::fwrite(bytes.data(), 1, bytes.size(), file_) != bytes.size()) {
      const int err = errno;
      discard();
      errno = err;
      fail("write failed");
    }
  }
  void write(std::string_view text) { write(std::as_bytes(std::span<const char>(text.data(), text.size()))); }

  /// Flushes, fsyncs and renames the temporary onto the target, then fsyncs the directory (best
  /// effort: some file systems refuse fsync on directories, and the rename has happened by then).
  void commit() {
    if (file_ == nullptr) throw IoError(target_.string(), "commit after commit or failure");
    if (std::fflush(file_) != 0 || ::fsync(fd_) != 0) {
      const int err = errno;
      discard();
      errno = err;
      fail("flush/fsync failed");
    }
    const int close_rc = std::fclose(file_);
    file_ = nullptr;
    fd_ = -1;
    fault_point();  // the temporary is complete, the target not yet replaced
    if (close_rc != 0 || std::rename(temp_.c_str(), dest_.c_str()) != 0) {
      const int err = errno;
      discard();
      errno = err;
      fail(close_rc != 0 ? "close failed" : "cannot rename " + temp_.string() + " onto it");
    }
    temp_.clear();
    fault_point();  // the target replaced
    const std::filesystem::path dir = dest_.parent_path().empty() ? "." : dest_.parent_path();
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      (void)::fsync(dfd);
      ::close(dfd);
    }
  }

  const std::filesystem::path& target() const noexcept { return target_; }
  /// The temporary's path while the file is open; empty after commit.
  const std::filesystem::path& temp_path() const noexcept { return temp_; }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw IoError(target_.string(), what + ": " + std::strerror(errno));
  }

  // Closes and unlinks the temporary, if any. Never throws.
  void discard() noexcept {
    if (file_ != nullptr) {
      std::fclose(file_);
    } else if (fd_ >= 0) {
      ::close(fd_);
    }
    file_ = nullptr;
    fd_ = -1;
    if (!temp_.empty()) {
      ::unlink(temp_.c_str());
      temp_.clear();
    }
  }

  std::filesystem::path target_;  // as the caller named it (messages)
  std::filesystem::path dest_;    // the file replaced: the target, or the file its symbolic link names
  std::filesystem::path temp_;
  int fd_ = -1;
  std::FILE* file_ = nullptr;
};

}  // namespace attn
