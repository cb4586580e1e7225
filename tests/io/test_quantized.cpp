// SPDX-License-Identifier: MIT
// nn::quantize_dynamic and the int8 file (io::save_quantized / io::load_quantized): which weights
// are quantized, int8 inference before and after a round trip (identical), the dequantized float
// model, and bad files refused with nothing changed.
#include <attn/attn.hpp>

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <limits>
#include <vector>

#include "../temp_dir.hpp"

namespace nn = attn::nn;
namespace fs = std::filesystem;
using attn::Precision;

namespace {

/// Embedding, BiLSTM, attention and a classifier: every kind of product weight.
struct Net : nn::Module {
  nn::Embedding<16> emb{this, "emb", 50};
  nn::BiLSTM<16, 12> lstm{this, "lstm"};
  nn::Attention<2, 24> attention{this, "attn"};
  nn::Linear<24, 5> head{this, "head"};
  attn::Tensor<float> forward(const attn::Tensor<std::int32_t>& ids, const std::vector<int>& lengths) const {
    attn::NoGrad ctx;
    auto x = emb(ctx, ids);
    auto h = lstm(ctx, attn::Var<float, attn::Shape<attn::dyn, attn::dyn, 16>>(x), lengths).out;
    auto y = attention(ctx, h, attn::Lengths(lengths));
    return attn::Tensor<float>(head(ctx, nn::masked_mean(ctx, y, attn::Lengths(lengths))).value());
  }
};

attn::Tensor<std::int32_t> ids_of(std::size_t b, std::size_t t) {
  auto ids = attn::Tensor<std::int32_t>::zeros({b, t});
  for (std::size_t i = 0; i < b * t; ++i) ids.data()[i] = std::int32_t(1 + (i * 7) % 49);
  return ids;
}

double max_diff(const attn::Tensor<float>& a, const attn::Tensor<float>& b) {
  REQUIRE(a.numel() == b.numel());
  double d = 0;
  for (std::size_t i = 0; i < a.numel(); ++i) d = std::max(d, double(std::abs(a.data()[i] - b.data()[i])));
  return d;
}

std::vector<float> all_values(const nn::Module& m) {
  std::vector<float> v;
  for (auto& p : m.parameters<float>()) v.insert(v.end(), p.raw().data(), p.raw().data() + p.numel());
  return v;
}

}  // namespace

TEST_CASE("quantize_dynamic: the product weights, int8 inference within a quantization step of fp32, an exact file round trip") {
  Net a;
  a.init(3);
  a.eval();
  const std::vector<int> lengths = {7, 3, 5};
  const auto ids = ids_of(3, 7);
  const auto fp32 = a.forward(ids, lengths);
  const auto report = nn::quantize_dynamic(a);
  // lstm: weight_ih, weight_hh per direction (4); attn: in_proj_weight, out_proj.weight; head.weight.
  CHECK(report.weights == 7);
  // Padded to 32 columns, small layers gain less than 4x; without vpdpbusd the FP32 route also keeps
  // the values as floats, so more bytes than the float weights.
  if (attn::kernels::int8_native())
    CHECK(report.int8_bytes < report.float_bytes);
  else
    CHECK(report.int8_bytes > report.float_bytes);
  attn::Tensor<float> int8;
  {
    const attn::PrecisionScope scope(Precision::int8);
    int8 = a.forward(ids, lengths);
  }
  INFO("int8 vs fp32 " << max_diff(int8, fp32));
  CHECK(max_diff(int8, fp32) > 0);
  CHECK(max_diff(int8, fp32) < 0.05);

  TempDir tmp;
  const auto& dir = tmp.path();
  attn::io::save_quantized(a, dir / "q.safetensors", {{"note", "n"}});
  attn::io::save(a, dir / "f.safetensors");
  CHECK(fs::file_size(dir / "q.safetensors") * 2 < fs::file_size(dir / "f.safetensors") + 4 * 50 * 16 * 2);
  const auto file = attn::io::read_safetensors(dir / "q.safetensors");
  CHECK(file.at("head.weight").dtype == attn::io::DType::I8);
  CHECK(file.at("head.weight.scale").dtype == attn::io::DType::F32);
  CHECK(file.at("lstm.weight_hh_l0_reverse").dtype == attn::io::DType::I8);
  CHECK(file.at("emb.weight").dtype == attn::io::DType::F32);
  CHECK(file.at("head.bias").dtype == attn::io::DType::F32);

  Net b;
  b.init(9);
  b.eval();
  const auto meta = attn::io::load_quantized(b, dir / "q.safetensors");
  CHECK(meta.at("note") == "n");
  {
    const attn::PrecisionScope scope(Precision::int8);
    CHECK(max_diff(b.forward(ids, lengths), int8) == 0);  // the file's int8 values, exactly
  }
  // In fp32 the loaded model runs on the dequantized weights: near the original, not equal.
  const auto deq = b.forward(ids, lengths);
  CHECK(max_diff(deq, fp32) > 0);
  CHECK(max_diff(deq, fp32) < 0.05);
  // Quantizing the loaded model again keeps the file's values (the packs are current).
  nn::quantize_dynamic(b);
  {
    const attn::PrecisionScope scope(Precision::int8);
    CHECK(max_diff(b.forward(ids, lengths), int8) == 0);
  }
  // A bf16 run in between keeps its own packs beside the int8 ones: the file's values stay.
  {
    const attn::PrecisionScope scope(Precision::bf16);
    (void)b.forward(ids, lengths);
  }
  {
    const attn::PrecisionScope scope(Precision::int8);
    CHECK(max_diff(b.forward(ids, lengths), int8) == 0);
  }
  // A write that changes no value (a broadcast, a pair of Ema swaps) keeps them too: quantizing the
  // dequantized values afresh would move each channel's scale.
  for (auto& p : b.parameters<float>()) p.data()->mark_value_written();
  {
    const attn::PrecisionScope scope(Precision::int8);
    CHECK(max_diff(b.forward(ids, lengths), int8) == 0);
  }
  // A real change is quantized afresh.
  for (auto& p : b.parameters<float>()) {
    p.data()->value.data()[0] += 0.25f;
    p.data()->mark_value_written();
  }
  {
    const attn::PrecisionScope scope(Precision::int8);
    CHECK(max_diff(b.forward(ids, lengths), int8) > 0);
  }
}

TEST_CASE("int8 after load_quantized: an encoder layer's forward_rows takes the file's int8 in_proj, as forward does") {
  nn::TransformerEncoderLayer<2, 32> a(nullptr, "layer"), b(nullptr, "layer");
  a.init(3);
  b.init(8);
  a.eval();
  b.eval();
  nn::quantize_dynamic(a);
  TempDir tmp;
  attn::io::save_quantized(a, tmp.path() / "q.safetensors");
  attn::io::load_quantized(b, tmp.path() / "q.safetensors");
  attn::Rng rng(4);
  auto x = attn::Tensor<float>::zeros({2, 6, 32});
  for (std::size_t i = 0; i < x.numel(); ++i) x.data()[i] = float(rng.uniform(-1, 1));
  attn::NoGrad ng;
  const attn::PrecisionScope scope(Precision::int8);
  const auto full = b(ng, attn::Var<float>(x), attn::Lengths{6, 4}).value();
  const auto rows = b.forward_rows(ng, attn::Var<float>(x), attn::Lengths{6, 4}, 1).value();
  double d = 0;
  for (std::size_t s = 0; s < 2; ++s)
    for (std::size_t j = 0; j < 32; ++j) d = std::max(d, double(std::abs(rows(s, 0, j) - full(s, 0, j))));
  INFO("forward_rows vs forward, row 0: " << d);
  CHECK(d < 1e-5);
}

TEST_CASE("load_quantized: a float file, a bad scale, a missing or extra tensor are refused, naming them, with the model unchanged") {
  Net a, b;
  a.init(1);
  b.init(2);
  TempDir tmp;
  const auto& dir = tmp.path();
  attn::io::save(a, dir / "float.safetensors");
  attn::io::save_quantized(a, dir / "q.safetensors");
  const auto before = all_values(b);
  CHECK_THROWS_WITH(attn::io::load_quantized(b, dir / "float.safetensors"),
                    Catch::Contains("float.safetensors") && Catch::Contains("save_quantized") && Catch::Contains("head.weight") &&
                        Catch::Contains("I8"));
  // io::load refuses a quantized file too: the weights are I8.
  CHECK_THROWS_WITH(attn::io::load(b, dir / "q.safetensors"), Catch::Contains("head.weight") && Catch::Contains("I8"));
  auto t = attn::io::read_safetensors(dir / "q.safetensors");
  auto bad = t.tensors;
  auto scale = bad.at("attn.in_proj_weight.scale").to_vector<float>();
  scale[5] = -1.f;
  bad.at("attn.in_proj_weight.scale") = attn::io::TensorRecord::from_values(attn::io::DType::F32, {scale.size()}, scale);
  bad.erase("head.bias");
  bad.emplace("stray", attn::io::TensorRecord::from_values(attn::io::DType::F32, {1}, std::vector<float>{1.f}));
  attn::io::write_safetensors(dir / "bad.safetensors", bad, t.metadata);
  CHECK_THROWS_WITH(attn::io::load_quantized(b, dir / "bad.safetensors"),
                    Catch::Contains("attn.in_proj_weight.scale") && Catch::Contains("element 5") && Catch::Contains("head.bias") &&
                        Catch::Contains("stray"));
  // A scale of the wrong length and a NaN in a float tensor.
  auto bad2 = t.tensors;
  bad2.at("head.weight.scale") = attn::io::TensorRecord::from_values(attn::io::DType::F32, {1}, std::vector<float>{1.f});
  auto bias = bad2.at("head.bias").to_vector<float>();
  bias[0] = std::numeric_limits<float>::quiet_NaN();
  bad2.at("head.bias") = attn::io::TensorRecord::from_values(attn::io::DType::F32, {bias.size()}, bias);
  attn::io::write_safetensors(dir / "bad2.safetensors", bad2, t.metadata);
  CHECK_THROWS_WITH(attn::io::load_quantized(b, dir / "bad2.safetensors"),
                    Catch::Contains("2 differences") && Catch::Contains("'head.weight.scale': shape [1]") &&
                        Catch::Contains("'head.bias': non-finite value"));
  // Scales of zero, NaN, infinity and a tiny negative value, each named with its element (zero and
  // negative ones also with their byte offset).
  for (float s : {0.f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(), -1e-30f}) {
    auto bad3 = t.tensors;
    auto sc = bad3.at("head.weight.scale").to_vector<float>();
    sc[2] = s;
    bad3.at("head.weight.scale") = attn::io::TensorRecord::from_values(attn::io::DType::F32, {sc.size()}, sc);
    attn::io::write_safetensors(dir / "bad3.safetensors", bad3, t.metadata);
    INFO("scale " << s);
    if (std::isfinite(s))
      CHECK_THROWS_WITH(attn::io::load_quantized(b, dir / "bad3.safetensors"),
                        Catch::Contains("'head.weight.scale': element 2 (byte offset ") && Catch::Contains("a scale must be positive"));
    else
      CHECK_THROWS_WITH(attn::io::load_quantized(b, dir / "bad3.safetensors"),
                        Catch::Contains("'head.weight.scale': non-finite value (NaN or infinity) at element 2"));
  }
  CHECK_THROWS_WITH([&] {
    auto bad4 = t.tensors;
    auto sc = bad4.at("head.weight.scale").to_vector<float>();
    sc[0] = -1e-30f;
    bad4.at("head.weight.scale") = attn::io::TensorRecord::from_values(attn::io::DType::F32, {sc.size()}, sc);
    attn::io::write_safetensors(dir / "bad4.safetensors", bad4, t.metadata);
    attn::io::load_quantized(b, dir / "bad4.safetensors");
  }(), Catch::Contains("is -1e-30"));
  // Another scheme's file (the metadata names it) is refused even where the shapes fit.
  auto other = t.metadata;
  other[attn::io::kQuantizationKey] = "int8 per-tensor affine";
  attn::io::write_safetensors(dir / "other.safetensors", t.tensors, other);
  CHECK_THROWS_WITH(attn::io::load_quantized(b, dir / "other.safetensors"), Catch::Contains("another quantization scheme"));
  CHECK(all_values(b) == before);
}

TEST_CASE("save_quantized: product weights that quantize_dynamic cannot take (double) are refused, naming them") {
  struct DoubleNet : nn::Module {
    nn::Linear<4, 3, double> head{this, "head"};
  } m;
  TempDir tmp;
  CHECK_THROWS_WITH(attn::io::save_quantized(m, tmp.path() / "q.safetensors"),
                    Catch::Contains("'head.weight'") && Catch::Contains("F64 on cpu"));
  CHECK_FALSE(fs::exists(tmp.path() / "q.safetensors"));
}
