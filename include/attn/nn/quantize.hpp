// SPDX-License-Identifier: MIT
// Dynamic int8 quantization of a model for inference, torch.ao.quantization.quantize_dynamic with
// per-channel weights (activations differ: quantized per row over 0..255 at run time, where torch
// quantizes per tensor over 0..127 with reduce_range; kernels/gemm_int8.hpp): every product weight (ParameterSlot::product_weight: nn::Linear's weight,
// nn::Attention's fused in_proj_weight and out_proj, the LSTMs', GRUs' and cells' weight_ih / weight_hh, the encoder's
// feed-forward) is quantized to int8 per output channel (symmetric, scale max|w| / 127.5) and kept
// with its parameter. The model itself is unchanged: its float values stay, it runs fp32 or bf16
// as before, and under a PrecisionScope of Precision::int8 its products take the int8 weights with
// activations quantized per row at run time (kernels::gemm_int8). Embeddings, biases, layer norm,
// softmax and the attention core stay float.
//   attn::nn::quantize_dynamic(model);                 // once, after training or loading
//   attn::PrecisionScope int8(attn::Precision::int8);
//   attn::NoGrad ctx;  auto logits = model.forward(ctx, batch);
// A weight written later (an optimizer step, io::load) is quantized again on its next int8 use.
// io::save_quantized / io::load_quantized keep the int8 values in a safetensors file.
#pragma once
#include <cstddef>
#include <string>

#include "../autograd/packed_weights.hpp"
#include "module.hpp"

namespace attn {

/// How the CPU's products run in precision p at the current kernel level, for a program's start-up
/// line: "fp32", "bf16 (vdpbf16ps)", "bf16 (through the FP32 GEMM)", "int8 (vpdpbusd)", "int8 (through
/// the FP32 GEMM)".
inline std::string precision_route(Precision p) {
  if (p == Precision::bf16) return kernels::bf16_native() ? "bf16 (vdpbf16ps)" : "bf16 (through the FP32 GEMM)";
  if (p == Precision::int8) return kernels::int8_native() ? "int8 (vpdpbusd)" : "int8 (through the FP32 GEMM)";
  return "fp32";
}

}  // namespace attn

namespace attn::nn {

/// What quantize_dynamic did: how many weights, and their bytes in float and in int8 (values,
/// scales and the column sums the kernels use; on a CPU level without vpdpbusd also the values as
/// floats that the FP32 route multiplies, so more than the float weights there).
struct QuantizeReport {
  std::size_t weights = 0;
  std::size_t float_bytes = 0;
  std::size_t int8_bytes = 0;
};

namespace detail {
/// The float CPU parameter behind a slot, or nullptr for another element type or backend.
inline VarData<float, cpu>* float_cpu_data(ParameterSlot* p) {
  auto* tp = dynamic_cast<TypedParameter<float, cpu>*>(p);
  return tp ? tp->var.data().get() : nullptr;
}
}  // namespace detail

/// Quantizes every float CPU product weight of `model` to int8 (see the top of this file).
/// Throws ArgumentError naming the parameter and channel when a weight holds a NaN or an infinity,
/// and naming the parameter when a float product weight is on another backend (a model on CUDA).
inline QuantizeReport quantize_dynamic(const Module& model) {
  QuantizeReport r;
  for (auto& [name, p] : model.named_parameters()) {
    if (!p->product_weight || p->dims().n != 2) continue;
    VarData<float, cpu>* d = detail::float_cpu_data(p);
    if (!d && p->dtype() == DType::f32)
      throw ArgumentError("quantize_dynamic: '" + name + "' is on " + p->backend_name() +
                          ": dynamic int8 inference runs on the CPU backend (load the weights into a model on attn::cpu)");
    if (!d) continue;
    try {
      const auto pack = attn::detail::int8_weight(*d);
      r.int8_bytes += pack->bytes();
    } catch (const ArgumentError& e) {
      throw ArgumentError("quantize_dynamic: '" + name + "': " + e.what());
    }
    ++r.weights;
    r.float_bytes += p->numel() * sizeof(float);
  }
  return r;
}

}  // namespace attn::nn
