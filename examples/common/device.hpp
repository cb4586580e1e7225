// SPDX-License-Identifier: MIT
// --device of the example programs: cpu (attn::cpu) or cuda (attn::cuda). A program built without
// the CUDA backend, or run where no CUDA device works, refuses cuda with an error that says which.
//   examples::add_device_option(app, o.device);   // options.cpp (cli.hpp)
//   examples::require_device(o.device);           // main(), before any data is read
//   const auto logits = examples::to_host(model.forward(ctx, batch).value());   // a host copy for reading
#pragma once
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <attn/core/error.hpp>
#include <attn/core/tensor.hpp>

namespace examples {

#if defined(ATTN_EXAMPLES_CUDA)
/// Why attn::cuda cannot run here ("" when it can): attn::cuda::unavailable_reason(), from a
/// translation unit compiled by nvcc (cuda_probe.cu).
std::string cuda_unavailable_reason();
#endif

/// Throws attn::Error unless `device` can run here: "attn was built without CUDA" or "no CUDA
/// device: <why>".
inline void require_device(const std::string& device) {
  if (device == "cpu") return;
  if (device != "cuda") throw attn::ArgumentError("--device: '" + device + "' is not cpu or cuda");
#if defined(ATTN_EXAMPLES_CUDA)
  const std::string why = cuda_unavailable_reason();
  if (!why.empty()) throw attn::Error("--device cuda: no CUDA device: " + why);
#else
  throw attn::Error("--device cuda: attn was built without CUDA (configure with -DATTN_CUDA=ON where nvcc is installed)");
#endif
}

/// t as a host tensor: t itself on the CPU backend, else a copy (which waits for the device).
template <class T, class S, class B>
attn::Tensor<T, attn::AnyShape, attn::cpu> to_host(const attn::Tensor<T, S, B>& t) {
  return t.template to<attn::cpu>().erased();
}

}  // namespace examples
