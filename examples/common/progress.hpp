// SPDX-License-Identifier: MIT
// A one-line progress bar on stderr: done/total, samples/s, ETA and a running loss. Redraws in
// place on a terminal; on a pipe or file it prints a line every 10%.
#pragma once
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace examples {

class Progress {
 public:
  /// Off on every process but the main one of a data-parallel job.
  static bool& enabled() {
    static bool on = true;
    return on;
  }

  Progress(std::string label, std::size_t total)
      : label_(std::move(label)), total_(total), start_(clock::now()), tty_(::isatty(2) != 0) {}

  void update(std::size_t done, double loss) {
    if (!enabled()) return;
    const double secs = std::chrono::duration<double>(clock::now() - start_).count();
    const double rate = secs > 0 ? double(done) / secs : 0;
    const double eta = rate > 0 ? double(total_ - done) / rate : 0;
    const int pct = total_ ? int(100.0 * double(done) / double(total_)) : 100;
    if (!tty_) {
      if (pct / 10 == last_decile_ && done < total_) return;
      last_decile_ = pct / 10;
    }
    const int width = 24, fill = total_ ? int(width * double(done) / double(total_)) : width;
    std::string bar(std::size_t(fill), '#');
    bar.resize(std::size_t(width), '.');
    std::fprintf(stderr, "%s%s [%s] %3d%% %zu/%zu  %.0f samples/s  ETA %3.0fs  loss %.4f%s", tty_ ? "\r" : "", label_.c_str(),
                 bar.c_str(), pct, done, total_, rate, eta, loss, tty_ ? "" : "\n");
    std::fflush(stderr);
  }
  /// Ends the line; returns the elapsed seconds.
  double finish() {
    if (tty_ && enabled()) std::fputc('\n', stderr);
    return std::chrono::duration<double>(clock::now() - start_).count();
  }

 private:
  using clock = std::chrono::steady_clock;
  std::string label_;
  std::size_t total_;
  clock::time_point start_;
  bool tty_;
  int last_decile_ = -1;
};

}  // namespace examples
