// SPDX-License-Identifier: MIT
// Weights move between PyTorch and attn: a state_dict saved by torch (an nn.MultiheadAttention
// "attn" and a bidirectional nn.LSTM "lstm") loads into the attn modules with the same names, and
// attn writes it back with every tensor bit-identical. The other half (attn's file loading with
// torch's load_state_dict(strict=True)) is `make_goldens.py --check-attn`, run when goldens are made.
#include "../golden_util.hpp"

#include <filesystem>

namespace nn = attn::nn;

namespace {
struct TorchTwin : nn::Module {
  nn::Attention<2, 16> attn{this, "attn"};
  nn::BiLSTM<6, 5> lstm{this, "lstm"};
};
}  // namespace

TEST_CASE("round trip: torch state_dict -> attn -> safetensors is bit-identical") {
  auto src = golden::load("roundtrip_torch");
  TorchTwin model;
  attn::io::load_state_dict(model, src);
  CHECK(model.named_parameters().size() == src.tensors.size());
  const auto out = std::filesystem::temp_directory_path() / ("attn-roundtrip-" + std::to_string(::getpid()) + ".safetensors");
  attn::io::save(model, out);
  auto back = attn::io::read_safetensors(out);
  REQUIRE(back.tensors.size() == src.tensors.size());
  for (auto& [name, rec] : src.tensors) {
    INFO(name);
    REQUIRE(back.contains(name));
    CHECK(back.at(name).dtype == rec.dtype);
    CHECK(back.at(name).shape == rec.shape);
    CHECK(back.at(name).bytes == rec.bytes);
  }
  // The written file carries the same names in the same layout: torch's loader accepts it.
  if (const char* keep = std::getenv("ATTN_ROUNDTRIP_KEEP")) std::filesystem::copy_file(out, keep, std::filesystem::copy_options::overwrite_existing);
  std::filesystem::remove(out);
}
