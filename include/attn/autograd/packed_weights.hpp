// SPDX-License-Identifier: MIT
// Weights packed for the CPU's reduced-precision kernels, kept with the parameter they came from:
// a weight quantized to int8 (kernels::PackedInt8) or rounded to bf16 (kernels::PackedBf16) for
// inference is made on first use and reused while the parameter's value is unchanged (its
// value_writes count, which optimizer steps, loads and initialisers advance). nn::quantize_dynamic
// makes them ahead of the first call; io::load_quantized installs int8 values read from a file.
// Safe to call from several threads at once (one lock; the packing itself runs outside it).
#pragma once
#include <memory>
#include <mutex>
#include <utility>

#include "../backend/cpu/gemm_bf16.hpp"
#include "../backend/cpu/gemm_int8.hpp"
#include "var.hpp"

namespace attn::detail {

/// What a VarData::Derived holds.
enum class PackKind : int {
  none = 0,
  int8_wt = 1,  // PackedInt8 of W^T (In, Out) for a weight W (Out, In)
  bf16_wt = 2,  // PackedBf16 of W^T (In, Out) for a weight W (Out, In)
};

inline std::mutex& derived_mutex() {
  static std::mutex m;
  return m;
}

/// d's slot for packs of `kind`.
template <class T, class B>
typename VarData<T, B>::Derived& pack_slot(VarData<T, B>& d, PackKind kind) {
  const int k = int(kind) - 1;
  if (k < 0 || k >= VarData<T, B>::kDerivedKinds) throw ArgumentError("attn::detail::pack_slot: no slot for this kind of pack");
  return d.derived[k];
}

/// The pack of `kind` kept with d if it is current, else nullptr; `writes` receives d's write count
/// read under the lock (what a pack made now from the value stands for).
template <class P, class T, class B>
std::shared_ptr<const P> current_pack(VarData<T, B>& d, PackKind kind, std::uint64_t* writes = nullptr) {
  std::lock_guard<std::mutex> lock(derived_mutex());
  if (writes) *writes = d.value_writes;
  const auto& slot = pack_slot(d, kind);
  if (slot.writes == d.value_writes && slot.data) return std::static_pointer_cast<const P>(slot.data);
  return nullptr;
}

/// Keeps pack as d's pack of `kind`, made from the value as of write count `writes`.
template <class P, class T, class B>
void keep_pack(VarData<T, B>& d, PackKind kind, std::shared_ptr<const P> pack, std::uint64_t writes) {
  std::lock_guard<std::mutex> lock(derived_mutex());
  pack_slot(d, kind) = {writes, std::move(pack)};
}

/// d's current pack of `kind`, made by make() (returning a P) and kept when there is none. The pack
/// is stamped with the write count read before make() ran, so a write made while it was being made
/// leaves it stale (made again at the next call) rather than taken for the new value. A stale pack
/// for which still_valid(pack) holds (the value's write count advanced without a change that
/// matters to the pack) is stamped again and kept instead.
template <class P, class T, class B, class Make, class StillValid>
std::shared_ptr<const P> derived_pack(VarData<T, B>& d, PackKind kind, Make&& make, StillValid&& still_valid) {
  std::uint64_t writes = 0;
  if (auto p = current_pack<P>(d, kind, &writes)) return p;
  std::shared_ptr<const P> stale;
  {
    std::lock_guard<std::mutex> lock(derived_mutex());
    stale = std::static_pointer_cast<const P>(pack_slot(d, kind).data);
  }
  if (stale && still_valid(*stale)) {
    keep_pack<P>(d, kind, stale, writes);
    return stale;
  }
  auto p = std::make_shared<const P>(make());
  keep_pack<P>(d, kind, p, writes);
  return p;
}
template <class P, class T, class B, class Make>
std::shared_ptr<const P> derived_pack(VarData<T, B>& d, PackKind kind, Make&& make) {
  return derived_pack<P>(d, kind, std::forward<Make>(make), [](const P&) { return false; });
}

/// Whether W (n, k) is exactly what pack dequantizes to: W(j, p) == float(q) * scale_j bit for bit,
/// the values io::load_quantized sets.
inline bool dequantizes_to(const kernels::PackedInt8& pack, const float* w, int n, int k) {
  if (pack.n() != n || pack.k() != k) return false;
  const float* s = pack.scales();
  for (int j = 0; j < n; ++j)
    for (int p = 0; p < k; ++p)
      if (w[std::size_t(j) * std::size_t(k) + std::size_t(p)] != float(pack.at(p, j)) * s[j]) return false;
  return true;
}

/// The int8 pack of W^T for a float weight W (out, in) on the CPU. A stale pack whose dequantized
/// values are still W's, bit for bit (the write count advanced without a change: a DataParallel
/// broadcast, a pair of Ema swaps, a load of the same values), is kept: quantizing those values
/// afresh would move each channel's scale by up to 1/255 and lose the file's int8 values.
inline std::shared_ptr<const kernels::PackedInt8> int8_weight(VarData<float, cpu>& w) {
  const int n = int(w.value.dims().v[0]), k = int(w.value.dims().v[1]);
  return derived_pack<kernels::PackedInt8>(
      w, PackKind::int8_wt,
      [&] {
        kernels::PackedInt8 p;
        p.quantize(k, n, w.value.data(), k);
        return p;
      },
      [&](const kernels::PackedInt8& stale) { return dequantizes_to(stale, w.value.data(), n, k); });
}

/// The bf16 pack of W^T for a float weight W (out, in) on the CPU.
inline std::shared_ptr<const kernels::PackedBf16> bf16_weight(VarData<float, cpu>& w) {
  return derived_pack<kernels::PackedBf16>(w, PackKind::bf16_wt, [&] {
    kernels::PackedBf16 p;
    p.pack(Trans::yes, int(w.value.dims().v[1]), int(w.value.dims().v[0]), w.value.data(), int(w.value.dims().v[1]));
    return p;
  });
}

}  // namespace attn::detail
