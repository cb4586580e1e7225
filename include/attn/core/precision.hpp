// SPDX-License-Identifier: MIT
// The precision attn's products run in, as a scope on the calling thread (torch.autocast's model):
// under Precision::bf16 the linear op (nn::Linear, the attention projections), the LSTM's products
// and the flash attention's score and value tiles multiply bfloat16 operands with float sums on the
// CPU, while parameters, their gradients, optimizer state, softmax, layer norm and losses stay float.
// The same module runs either way; the choice is made where the model is called, and each op keeps
// it for its own backward.
//   attn::Tape tape;
//   {
//     attn::PrecisionScope bf16(attn::Precision::bf16);
//     loss = attn::cross_entropy(tape, model.forward(tape, ids, lengths), labels);   // products in bf16
//   }
//   tape.backward(loss);                               // each op's backward in the precision it ran in
// On a CPU without AVX512-BF16 the linear and LSTM products multiply the rounded operands with the
// FP32 GEMM (the same numbers, FP32's speed) and the attention tiles stay FP32; CUDA ops run FP32
// under either.
#pragma once
#include <string>
#include <string_view>

#include "error.hpp"

namespace attn {

enum class Precision { fp32, bf16, int8 };

inline const char* precision_name(Precision p) {
  return p == Precision::bf16 ? "bf16" : p == Precision::int8 ? "int8" : "fp32";
}

/// "fp32", "bf16" or "int8"; ArgumentError naming `what` and the accepted values otherwise.
inline Precision parse_precision(std::string_view s, std::string_view what = "precision") {
  if (s == "fp32" || s == "float32" || s == "float") return Precision::fp32;
  if (s == "bf16" || s == "bfloat16") return Precision::bf16;
  if (s == "int8" || s == "qint8") return Precision::int8;
  throw ArgumentError(std::string(what) + ": unknown precision '" + std::string(s) + "' (expected fp32, bf16 or int8)");
}

namespace detail {
inline Precision& precision_slot() {
  thread_local Precision p = Precision::fp32;
  return p;
}
}  // namespace detail

/// The precision this thread's ops run in now (fp32 outside every PrecisionScope).
inline Precision precision() { return detail::precision_slot(); }

/// Sets this thread's precision for a scope, restoring the previous one at its end.
class PrecisionScope {
 public:
  explicit PrecisionScope(Precision p) : previous_(detail::precision_slot()) { detail::precision_slot() = p; }
  ~PrecisionScope() { detail::precision_slot() = previous_; }
  PrecisionScope(const PrecisionScope&) = delete;
  PrecisionScope& operator=(const PrecisionScope&) = delete;

 private:
  Precision previous_;
};

}  // namespace attn
