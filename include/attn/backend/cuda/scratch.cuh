// SPDX-License-Identifier: MIT
// Small device buffers for kernels' results (a flag, a sum, an index, one per item), allocated and
// freed in stream order, set on the device without waiting for it, read back with one wait.
//   attn::cuda_detail::DeviceScratch<double> sum(1, 0.0);  kernel<<<...>>>(..., sum.get());  sum.read();
#pragma once
#include <cstddef>
#include <vector>

#include "../cuda.hpp"

namespace attn::cuda_detail {

template <class T>
class DeviceScratch {
 public:
  /// count elements, uninitialised.
  explicit DeviceScratch(std::size_t count) : p_(cuda::allocate<T>(count)), n_(count) {}
  /// count elements, each set to value (enqueued: no wait).
  DeviceScratch(std::size_t count, T value) : DeviceScratch(count) { cuda::fill(p_, n_, value); }
  ~DeviceScratch() { cuda::deallocate(p_, n_); }
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;

  T* get() const noexcept { return p_; }
  std::size_t size() const noexcept { return n_; }
  /// Element i, once the work enqueued before has run (waits for the device).
  T read(std::size_t i = 0) const {
    T v{};
    cuda::to_host(&v, p_ + i, 1);
    return v;
  }
  /// Every element (one wait).
  std::vector<T> read_all() const {
    std::vector<T> v(n_);
    cuda::to_host(v.data(), p_, n_);
    return v;
  }

 private:
  T* p_;
  std::size_t n_;
};

}  // namespace attn::cuda_detail
