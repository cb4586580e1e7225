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

/// The pack of `kind` kept with d if it is current, else nullptr.
template <class P, class T, class B>
std::shared_ptr<const P> current_pack(VarData<T, B>& d, PackKind kind) {
  std::lock_guard<std::mutex> lock(derived_mutex());
  if (d.derived.kind == int(kind) && d.derived.writes == d.value_writes && d.derived.data)
    return std::static_pointer_cast<const P>(d.derived.data);
  return nullptr;
}

/// Keeps pack as d's current pack of `kind`.
template <class P, class T, class B>
void keep_pack(VarData<T, B>& d, PackKind kind, std::shared_ptr<const P> pack) {
  std::lock_guard<std::mutex> lock(derived_mutex());
  d.derived = {int(kind), d.value_writes, std::move(pack)};
}

/// d's current pack of `kind`, made by make() (returning a P) and kept when there is none.
template <class P, class T, class B, class Make>
std::shared_ptr<const P> derived_pack(VarData<T, B>& d, PackKind kind, Make&& make) {
  if (auto p = current_pack<P>(d, kind)) return p;
  auto p = std::make_shared<const P>(make());
  keep_pack<P>(d, kind, p);
  return p;
}

/// The int8 pack of W^T for a float weight W (out, in) on the CPU.
inline std::shared_ptr<const kernels::PackedInt8> int8_weight(VarData<float, cpu>& w) {
  return derived_pack<kernels::PackedInt8>(w, PackKind::int8_wt, [&] {
    kernels::PackedInt8 p;
    p.quantize(int(w.value.dims().v[1]), int(w.value.dims().v[0]), w.value.data(), int(w.value.dims().v[1]));
    return p;
  });
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
