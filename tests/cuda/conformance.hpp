// SPDX-License-Identifier: MIT
// The backend-conformance suite: each case runs one op, layer or small model forward and backward
// on a backend B with inputs drawn on the host from a seed (so every backend sees the same values),
// and returns every output and gradient as named host arrays. The cases are templates over
// (T, B) in conformance_ops.hpp and conformance_layers.hpp, instantiated for the CPU by g++
// (conformance_cpu_*.cpp) and for CUDA by nvcc (conformance_cuda_*.cu); test_conformance.cu compares.
//   auto want = conformance::run<float, attn::cpu>("matmul", 7), got = conformance::run<float, attn::cuda>("matmul", 7);
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <attn/core/backend_concept.hpp>

namespace conformance {

/// One output or gradient, flattened, as doubles.
struct Array {
  std::string name;
  std::vector<double> values;
};
using Result = std::vector<Array>;

// X(name): the cases of each group, in the order the test runs them.
#define ATTN_CONFORMANCE_OPS(X)                                                                                        \
  X(add_broadcast) X(sub_broadcast) X(mul_broadcast) X(div_broadcast) X(add_large) X(unary_exp) X(unary_log)           \
  X(unary_tanh) X(unary_sigmoid) X(unary_relu) X(unary_gelu) X(activations) X(scalar_affine) X(matmul)                \
  X(matmul_batched)                                                                                                    \
  X(matmul_nt) X(matmul_nt_batched) X(permute) X(transpose) X(reshape) X(slice) X(concat) X(sum_all) X(mean_all)       \
  X(sum_axis_first) X(sum_axis_middle) X(sum_axis_last) X(mean_axis_keepdim) X(softmax) X(softmax_wide) X(log_softmax) \
  X(masked_fill_softmax) X(embedding_i32) X(embedding_i64) X(cross_entropy) X(cross_entropy_smoothing)
#define ATTN_CONFORMANCE_LAYERS(X)                                                                                      \
  X(layer_norm) X(layer_norm_module) X(rms_norm) X(rms_norm_module) X(masked_mean) X(masked_max) X(dropout) X(linear) X(embedding_layer) X(lstm)       \
  X(bilstm) X(gru) X(bigru_stacked) X(bilstm_classifier) X(checkpointed_blocks) X(encoder_rows) X(encoder_global_mask) X(encoder_rms_swiglu) X(attention_compute)        \
  X(attention_zero) X(attention_weights_mask) X(attention_per_head_mask) X(attention_rotary) X(cross_attention) X(decoder_incremental) X(training_steps)              \
  X(checkpoint_roundtrip)
#define ATTN_CONFORMANCE_MODELS(X) X(clue_model) X(imdb_model) X(imdb_model_cls)

#define ATTN_CONFORMANCE_NAME(n) #n,
inline const std::vector<std::string>& ops_cases() {
  static const std::vector<std::string> v = {ATTN_CONFORMANCE_OPS(ATTN_CONFORMANCE_NAME)};
  return v;
}
inline const std::vector<std::string>& layer_cases() {
  static const std::vector<std::string> v = {ATTN_CONFORMANCE_LAYERS(ATTN_CONFORMANCE_NAME)};
  return v;
}
inline const std::vector<std::string>& model_cases() {
  static const std::vector<std::string> v = {ATTN_CONFORMANCE_MODELS(ATTN_CONFORMANCE_NAME)};
  return v;
}
#undef ATTN_CONFORMANCE_NAME

/// Runs op case `name` (one of ops_cases()) on backend B with element type T; inputs from seed.
/// Defined in conformance_ops.hpp; instantiated for float and double on cpu and cuda.
template <class T, class B>
Result run_ops(const std::string& name, std::uint64_t seed);
/// The same for layer_cases() (conformance_layers.hpp).
template <class T, class B>
Result run_layers(const std::string& name, std::uint64_t seed);
/// The same for model_cases() (conformance_models.hpp: the example programs' models), in float.
template <class B>
Result run_models(const std::string& name, std::uint64_t seed);

}  // namespace conformance
