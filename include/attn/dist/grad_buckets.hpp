// SPDX-License-Identifier: MIT
// dist::GradBuckets: parameters' gradients as aliases of slices of a few flat buffers, so collectives
// run on the gradient memory itself (PyTorch DDP's gradient_as_bucket_view).
//   attn::dist::GradBuckets<float> b(named_vars, 25 << 20, 1 << 20);  b.zero();  tape.backward(loss);  // lands in b
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../autograd/var.hpp"
#include "../core/error.hpp"
#include "../core/tensor.hpp"

namespace attn::dist {

/// Buckets over a list of parameters. The layout is a pure function of the parameters' order and
/// sizes and of the caps, so every rank of a job with the same model gets the same buckets.
///
/// Order: buckets are filled from the last parameter to the first, the order in which a
/// backward pass roughly finishes them (the last layer's gradients are complete first), so bucket
/// 0 holds the output layer. A bucket closes when the next parameter would take it past its cap
/// (bytes); a parameter larger than the cap gets a bucket of its own. The first bucket has its own,
/// usually smaller, cap, as in PyTorch, so that its reduction could start early.
///
/// Inside a bucket, each parameter's slice starts on a 64-byte boundary; the padding is zero and
/// travels with the bucket.
template <class T, class B = cpu>
class GradBuckets {
 public:
  using var_data = VarData<T, B>;

  struct Entry {
    std::string name;
    std::shared_ptr<var_data> var;
    std::size_t offset = 0;  // in elements, within the bucket
    std::size_t numel = 0;
  };
  struct Bucket {
    Tensor<T, AnyShape, B> storage;  // (n): flat, zero padding between slices
    std::vector<Entry> entries;
    std::size_t numel() const noexcept { return storage.numel(); }
    T* data() noexcept { return storage.data(); }
  };

  GradBuckets() = default;
  /// params: (name, data) in the model's registration order. cap_bytes > 0, first_cap_bytes > 0.
  GradBuckets(const std::vector<std::pair<std::string, std::shared_ptr<var_data>>>& params, std::size_t cap_bytes,
              std::size_t first_cap_bytes) {
    if (cap_bytes == 0 || first_cap_bytes == 0) throw ArgumentError("dist::GradBuckets: bucket caps must be positive");
    constexpr std::size_t align = sizeof(T) >= 64 ? 1 : 64 / sizeof(T);
    std::vector<std::vector<Entry>> plan;
    std::size_t fill = 0;  // elements in the open bucket, padding included
    for (std::size_t k = params.size(); k-- > 0;) {
      const auto& [name, var] = params[k];
      if (!var) throw ArgumentError("dist::GradBuckets: parameter '" + name + "' has no data");
      const std::size_t n = var->value.numel();
      if (n == 0) continue;  // nothing to reduce
      const std::size_t cap = (plan.size() <= 1 ? first_cap_bytes : cap_bytes) / sizeof(T);  // of the open bucket
      const std::size_t start = (fill + align - 1) / align * align;
      if (plan.empty() || start + n > cap) {
        plan.emplace_back();
        fill = 0;
      }
      const std::size_t off = (fill + align - 1) / align * align;
      plan.back().push_back({name, var, off, n});
      fill = off + n;
    }
    for (auto& entries : plan) {
      const std::size_t total = entries.back().offset + entries.back().numel;
      Bucket b{Tensor<T, AnyShape, B>::zeros(Dims{total}), std::move(entries)};
      buckets_.push_back(std::move(b));
    }
    attach(true);
  }

  std::vector<Bucket>& buckets() noexcept { return buckets_; }
  const std::vector<Bucket>& buckets() const noexcept { return buckets_; }
  std::size_t size() const noexcept { return buckets_.size(); }
  /// Elements in all buckets, padding included: what one all-reduce of every bucket moves.
  std::size_t numel() const noexcept {
    std::size_t n = 0;
    for (auto& b : buckets_) n += b.numel();
    return n;
  }
  std::size_t bytes() const noexcept { return numel() * sizeof(T); }

  /// True when e's gradient is the alias of its bucket slice.
  static bool attached(const Bucket& b, const Entry& e) noexcept {
    const auto& g = e.var->grad;
    return g.data() == b.storage.data() + e.offset && g.dims() == e.var->value.dims();
  }

  /// Re-points every gradient that no longer aliases its slice (an optimizer's zero_grad drops
  /// the tensor; the next backward would then allocate a fresh one outside the bucket). With
  /// keep_values the detached gradient's values are copied into the slice (an empty one counts as
  /// zeros); without, the slice is left as it is. Returns how many gradients were re-attached.
  std::size_t attach(bool keep_values) {
    std::size_t moved = 0;
    for (auto& b : buckets_)
      for (auto& e : b.entries) {
        if (attached(b, e)) continue;
        T* slice = b.storage.data() + e.offset;
        e.var->materialize_grad(/*keep=*/true);  // a compact row-sparse gradient becomes whole-table first
        auto& g = e.var->grad;
        if (keep_values) {
          if (!g.empty() && g.numel() == e.numel) B::template copy<T>(slice, g.data(), e.numel);
          else B::template fill<T>(slice, e.numel, T(0));
        }
        g = Tensor<T, AnyShape, B>::alias(std::shared_ptr<T>(b.storage.storage(), slice), e.var->value.dims());
        ++moved;
      }
    return moved;
  }

  /// Zeroes every bucket and makes sure every gradient aliases its slice again.
  void zero() {
    attach(false);
    for (auto& b : buckets_) B::template fill<T>(b.storage.data(), b.numel(), T(0));
  }
  /// Zeroes every slice except those whose gradient still aliases it and for which
  /// leave(var_data) is true (the caller zeroes those itself, for example only the rows a
  /// row-sparse gradient used), and re-attaches every gradient. Padding is never written, so it
  /// stays zero.
  template <class Leave>
  void zero(Leave&& leave) {
    for (auto& b : buckets_)
      for (auto& e : b.entries)
        if (!(attached(b, e) && leave(static_cast<const var_data&>(*e.var)))) B::template fill<T>(b.storage.data() + e.offset, e.numel, T(0));
    attach(false);
  }

 private:
  std::vector<Bucket> buckets_;
};

}  // namespace attn::dist
