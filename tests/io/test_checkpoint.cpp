// SPDX-License-Identifier: MIT
// Module and optimizer checkpoints: round trips, strict name/shape/dtype checks listing every
// difference, atomic replacement, and a file written by PyTorch loading into attn modules.
#include "../golden_util.hpp"
#include "../temp_dir.hpp"

#include <attn/io/checkpoint.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

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
/// One backward pass of a cross-entropy through m.fc on a constant batch of value x (emb unused).
void fc_backward(const Small& m, float x) {
  attn::Tape tape;
  attn::Var<float> in(attn::Tensor<float>::full({4, 3}, x));
  tape.backward(attn::cross_entropy(tape, m.fc(tape, in), attn::Tensor<std::int64_t>::from({4}, {0, 1, 1, 0})));
}
/// m from init(1) after one Adam step (lr 0.01) on a batch of value 0.1, the Adam state saved to `file`.
void save_one_adam_step(Small& m, const fs::path& file) {
  m.init(1);
  attn::optim::Adam<float> opt(m, {.lr = 0.01f});
  fc_backward(m, 0.1f);
  opt.step();
  attn::io::save_optimizer(opt, file);
}
/// n optimizer steps of `opt` on m, step s on a batch of value 0.1 (s + 1).
template <class Optimizer>
void train_steps(Small& m, Optimizer& opt, int n) {
  for (int s = 0; s < n; ++s) {
    fc_backward(m, 0.1f * float(s + 1));
    opt.step();
    opt.zero_grad();
  }
}
}  // namespace

TEST_CASE("checkpoint: save then load restores every parameter exactly") {
  TempDir tmp;
  const auto& dir = tmp.path();
  Small a, b;
  a.init(1);
  b.init(2);
  attn::io::save(a, dir / "m.safetensors", {{"note", "x"}});
  auto meta = attn::io::load(b, dir / "m.safetensors");
  CHECK(meta.at("note") == "x");
  auto pa = a.parameters<float>(), pb = b.parameters<float>();
  for (std::size_t k = 0; k < pa.size(); ++k)
    for (std::size_t i = 0; i < pa[k].numel(); ++i) CHECK(pa[k].raw()[i] == pb[k].raw()[i]);
}

TEST_CASE("checkpoint: a file that does not fit is refused with every difference listed, model untouched") {
  TempDir tmp;
  const auto& dir = tmp.path();
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
}

TEST_CASE("checkpoint: Adam state round trip resumes identically") {
  TempDir tmp;
  const auto& dir = tmp.path();
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
}

TEST_CASE("checkpoint: SGD momentum buffers round trip and resume identically, and a file that does not fit changes nothing") {
  TempDir tmp;
  const auto& dir = tmp.path();
  const attn::optim::SgdOptions o{.lr = 0.1, .momentum = 0.9, .nesterov = true};
  Small a;
  a.init(3);
  attn::optim::Sgd<float> oa(a, o);
  train_steps(a, oa, 2);
  attn::io::save(a, dir / "a.safetensors");
  attn::io::save_optimizer(oa, dir / "a.sgd.safetensors");
  train_steps(a, oa, 2);

  Small b;
  attn::optim::Sgd<float> ob(b, o);
  attn::io::load(b, dir / "a.safetensors");
  const auto md = attn::io::load_optimizer(ob, dir / "a.sgd.safetensors");
  CHECK(md.at("optimizer") == "sgd");
  CHECK(ob.state().size() == 2);  // fc.weight and fc.bias; emb had no gradient, so no buffer
  CHECK(ob.momentum_buffer(2).empty());
  train_steps(b, ob, 2);
  for (std::size_t i = 0; i < 6; ++i) CHECK(a.fc.weight.raw()[i] == b.fc.weight.raw()[i]);
  // Without the buffers the resumed run differs (the test can tell).
  Small c;
  attn::optim::Sgd<float> oc(c, o);
  attn::io::load(c, dir / "a.safetensors");
  train_steps(c, oc, 2);
  CHECK(c.fc.weight.raw()[0] != a.fc.weight.raw()[0]);

  // Another momentum, or an Adam state file: refused, the optimizer unchanged.
  Small d;
  attn::optim::Sgd<float> od(d, {.lr = 0.1, .momentum = 0.5});
  CHECK_THROWS_WITH(attn::io::load_optimizer(od, dir / "a.sgd.safetensors"), Catch::Contains("metadata 'momentum' is '0.9'"));
  CHECK(od.state().empty());
  attn::optim::Adam<float> adam(d, {.lr = 0.1});
  fc_backward(d, 0.5f);
  adam.step();
  attn::io::save_optimizer(adam, dir / "adam.safetensors");
  attn::optim::Sgd<float> oe(d, o);
  CHECK_THROWS_AS(attn::io::load_optimizer(oe, dir / "adam.safetensors"), attn::FormatError);
  CHECK_THROWS_WITH(attn::io::load_optimizer(oe, dir / "adam.safetensors"),
                    Catch::Contains("metadata has no 'optimizer'") && Catch::Contains("0 of them momentum buffers"));
  CHECK(oe.state().empty());
}

namespace {
std::vector<char> file_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}
// A model with one tensor of several write chunks (the last one partial) and small ones.
struct Big : nn::Module {
  nn::Embedding<5> table{this, "table", attn::io::kWriteChunkBytes / 4 / 5 * 2 + 7};
  nn::Linear<5, 3> fc{this, "fc"};
};
}  // namespace

TEST_CASE("checkpoint: save streams the parameters and writes the bytes of their copies") {
  TempDir tmp;
  const auto& dir = tmp.path();
  Big m;
  m.init(4);
  REQUIRE(m.table.weight.numel() * sizeof(float) > 2 * attn::io::kWriteChunkBytes);
  attn::io::save(m, dir / "streamed.safetensors", {{"k", "v"}});
  attn::io::write_safetensors(dir / "copied.safetensors", attn::io::state_dict(m), {{"k", "v"}});
  const auto streamed = file_bytes(dir / "streamed.safetensors"), copied = file_bytes(dir / "copied.safetensors");
  REQUIRE(streamed.size() > 2 * attn::io::kWriteChunkBytes);
  CHECK(streamed == copied);
  Big back;
  attn::io::load(back, dir / "streamed.safetensors");
  CHECK(std::memcmp(back.table.weight.raw().data(), m.table.weight.raw().data(), m.table.weight.numel() * sizeof(float)) == 0);

  // The optimizer's moments are streamed too: the same bytes as their copies.
  attn::optim::Adam<float> opt(m, {.lr = 0.1});
  for (auto& [name, t] : opt.state()) t.data()[t.numel() - 1] = 0.5f;  // not all zeros
  attn::io::save_optimizer(opt, dir / "opt.safetensors");
  attn::io::TensorMap moments;
  for (auto& [name, t] : opt.state()) moments.emplace(name, attn::io::TensorRecord::from_values(attn::io::DType::F32, {t.numel()}, t.to_vector()));
  const auto f = attn::io::read_safetensors(dir / "opt.safetensors");
  REQUIRE(f.tensors.size() == moments.size());
  for (auto& [name, r] : moments) CHECK(f.at(name).bytes == r.bytes);
}

TEST_CASE("checkpoint: a reader that fails mid-file leaves the existing file as it was") {
  TempDir tmp;
  const auto& dir = tmp.path();
  Small a;
  a.init(5);
  attn::io::save(a, dir / "keep.safetensors");
  const auto before = file_bytes(dir / "keep.safetensors");
  attn::io::SourceMap src;
  int calls = 0;
  src.emplace("x", attn::io::TensorSource{attn::io::DType::F32, {3 * attn::io::kWriteChunkBytes / 4}, 3 * attn::io::kWriteChunkBytes,
                                          [&calls](std::size_t, std::size_t n, std::byte* dst) {
                                            if (++calls == 2) throw attn::IoError("device", "copy failed");
                                            std::memset(dst, 0, n);
                                          }});
  CHECK_THROWS_AS(attn::io::write_safetensors(dir / "keep.safetensors", src), attn::IoError);
  CHECK(calls == 2);
  CHECK(file_bytes(dir / "keep.safetensors") == before);
  CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator()) == 1);  // no temporary left
  // A size that does not match the shape, or a missing reader, is refused before anything is written.
  attn::io::SourceMap wrong;
  wrong.emplace("x", attn::io::TensorSource{attn::io::DType::F32, {3}, 8, [](std::size_t, std::size_t, std::byte*) {}});
  CHECK_THROWS_AS(attn::io::write_safetensors(dir / "keep.safetensors", wrong), attn::ArgumentError);
  attn::io::SourceMap unread;
  unread.emplace("x", attn::io::TensorSource{attn::io::DType::F32, {3}, 12, {}});
  CHECK_THROWS_AS(attn::io::write_safetensors(dir / "keep.safetensors", unread), attn::ArgumentError);
  CHECK(file_bytes(dir / "keep.safetensors") == before);
}

TEST_CASE("checkpoint: a failed save leaves the existing file as it was") {
  TempDir tmp;
  const auto& dir = tmp.path();
  Small a;
  attn::io::save(a, dir / "keep.safetensors");
  auto size = fs::file_size(dir / "keep.safetensors");
  attn::io::TensorMap bad;
  bad.emplace("x", attn::io::TensorRecord{attn::io::DType::F32, {3}, std::vector<std::byte>(5)});  // 5 bytes for 3 floats
  CHECK_THROWS(attn::io::write_safetensors(dir / "keep.safetensors", bad));
  CHECK(fs::file_size(dir / "keep.safetensors") == size);
  CHECK_NOTHROW(attn::io::load(a, dir / "keep.safetensors"));
}

TEST_CASE("checkpoint: a NaN or infinite value is refused naming the tensor, model untouched") {
  TempDir tmp;
  const auto& dir = tmp.path();
  Small a, b;
  a.init(1);
  b.init(2);
  auto sd = attn::io::state_dict(a);
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    auto rec = sd.at("emb.weight");
    std::memcpy(rec.bytes.data() + 4 * sizeof(float), &bad, sizeof bad);
    auto copy = sd;
    copy.at("emb.weight") = rec;
    attn::io::write_safetensors(dir / "bad.safetensors", copy);
    const float before = b.emb.weight.raw()[0];
    CHECK_THROWS_AS(attn::io::load(b, dir / "bad.safetensors"), attn::FormatError);
    CHECK_THROWS_WITH(attn::io::load(b, dir / "bad.safetensors"),
                      Catch::Contains("bad.safetensors") && Catch::Contains("'emb.weight': non-finite value") &&
                          Catch::Contains("element 4"));
    CHECK(b.emb.weight.raw()[0] == before);
  }
}

TEST_CASE("checkpoint: a file changed in place between the check and the read is an error that says so") {
  // io::load and the state loaders check a file in one pass and read it into the destination in a
  // second; attn's own files are replaced by a rename (an open file keeps its content), but a file
  // rewritten in place in between must not bring a NaN in unnoticed.
  TempDir tmp;
  const auto& dir = tmp.path();
  Small a;
  a.init(1);
  attn::io::save(a, dir / "m.safetensors");
  const attn::io::SafetensorsReader r(dir / "m.safetensors");
  const auto& e = r.at("emb.weight");
  {
    std::fstream f(dir / "m.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    f.seekp(static_cast<std::streamoff>(e.offset + 2 * sizeof(float)));
    f.write(reinterpret_cast<const char*>(&nan), sizeof nan);
  }
  std::vector<float> dst(e.numel());
  try {
    attn::io::detail::read_checked<float, attn::cpu>(r, "emb.weight", dst.data(), dst.size(), "the model");
    FAIL("a NaN written after the check was read without an error");
  } catch (const attn::FormatError& err) {
    CHECK_THAT(err.what(), Catch::Contains("m.safetensors") && Catch::Contains("the file changed while it was being read") &&
                               Catch::Contains("'emb.weight': non-finite value (NaN or infinity) at element 2") &&
                               Catch::Contains("the model is partially loaded"));
    CHECK(err.where() == e.offset + 2 * sizeof(float));
  }
}

TEST_CASE("checkpoint: load reads a parameter larger than one read chunk exactly") {
  TempDir tmp;
  const auto& dir = tmp.path();
  struct Wide : nn::Module {
    nn::Embedding<64> emb{this, "emb", attn::io::kReadChunkBytes / (64 * sizeof(float)) * 2 + 3};  // two chunks and a bit
  } a, b;
  a.init(1);
  b.init(2);
  attn::io::save(a, dir / "w.safetensors", {{"epoch", "7"}});
  const auto meta = attn::io::load(b, dir / "w.safetensors");
  CHECK(meta.at("epoch") == "7");
  CHECK(b.emb.weight.raw().to_vector() == a.emb.weight.raw().to_vector());
}

TEST_CASE("checkpoint: load_optimizer checks 'step' and the moments before it modifies the optimizer") {
  TempDir tmp;
  const auto& dir = tmp.path();
  Small a;
  save_one_adam_step(a, dir / "o.safetensors");
  const auto good = attn::io::read_safetensors(dir / "o.safetensors");
  Small b;
  b.init(2);
  attn::optim::Adam<float> ob(b, {.lr = 0.01f});
  const auto moments_before = [&] {
    std::vector<float> v;
    for (auto& [name, t] : ob.state())
      for (float x : t.to_vector()) v.push_back(x);
    return v;
  };
  const auto before = moments_before();
  for (const std::string step : {"9223372036854775807", "9007199254740993", "-1", "1.5", "x"}) {
    auto meta = good.metadata;
    meta["step"] = step;
    attn::io::write_safetensors(dir / "s.safetensors", good.tensors, meta);
    CHECK_THROWS_WITH(attn::io::load_optimizer(ob, dir / "s.safetensors"), Catch::Contains("metadata 'step'") && Catch::Contains(step));
    CHECK(ob.steps() == 0);
    CHECK(moments_before() == before);
  }
  auto tensors = good.tensors;
  auto& rec = tensors.begin()->second;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(rec.bytes.data(), &nan, sizeof nan);
  attn::io::write_safetensors(dir / "n.safetensors", tensors, good.metadata);
  CHECK_THROWS_WITH(attn::io::load_optimizer(ob, dir / "n.safetensors"),
                    Catch::Contains("'" + tensors.begin()->first + "': non-finite value"));
  CHECK(moments_before() == before);
  attn::io::load_optimizer(ob, dir / "o.safetensors");
  CHECK(ob.steps() == 1);
}

TEST_CASE("checkpoint: each parameter's own Adam step count round trips, and is checked") {
  TempDir tmp;
  const auto& dir = tmp.path();
  Small a;
  a.init(1);
  attn::optim::Adam<float> oa(a, {.lr = 0.01f});
  // Two steps in which only the weight has a gradient, then one in which both have.
  for (int s = 0; s < 3; ++s) {
    fc_backward(a, 0.1f);
    if (s < 2) a.fc.bias.data()->grad = {};
    oa.step();
    oa.zero_grad();
  }
  // fc.weight 3 steps, fc.bias 1, emb.weight (not used) none.
  REQUIRE(oa.param_steps() == std::vector<long long>{3, 1, 0});
  attn::io::save_optimizer(oa, dir / "o.safetensors");
  const auto good = attn::io::read_safetensors(dir / "o.safetensors");
  CHECK(good.metadata.count("param_steps"));
  Small b;
  attn::optim::Adam<float> ob(b, {.lr = 0.01f});
  attn::io::load_optimizer(ob, dir / "o.safetensors");
  CHECK(ob.steps() == 3);
  CHECK(ob.param_steps() == oa.param_steps());
  for (const std::string bad : {"1", "1,2", "1,2,3,3", "1,x,2", "4,1,0", "-1,3,0", "3,1,"}) {
    auto meta = good.metadata;
    meta["param_steps"] = bad;
    attn::io::write_safetensors(dir / "p.safetensors", good.tensors, meta);
    attn::optim::Adam<float> oc(b, {.lr = 0.01f});
    INFO(bad);
    CHECK_THROWS_WITH(attn::io::load_optimizer(oc, dir / "p.safetensors"), Catch::Contains("metadata 'param_steps'"));
    CHECK(oc.steps() == 0);
  }
  // A file without per-parameter counts (every parameter stepped every time): all at 'step'.
  auto meta = good.metadata;
  meta.erase("param_steps");
  attn::io::write_safetensors(dir / "q.safetensors", good.tensors, meta);
  attn::optim::Adam<float> od(b, {.lr = 0.01f});
  attn::io::load_optimizer(od, dir / "q.safetensors");
  CHECK(od.param_steps() == std::vector<long long>{3, 3, 3});
}

TEST_CASE("checkpoint: an in-memory record whose bytes do not hold its shape is refused, model untouched") {
  Small m;
  m.init(1);
  const std::vector<float> before = m.fc.weight.raw().to_vector();
  auto sd = attn::io::state_dict(m);
  for (const std::size_t size : {std::size_t(0), std::size_t(4), std::size_t(6 * 4 + 4)}) {
    auto broken = sd;
    broken.at("fc.weight").bytes.resize(size);
    INFO(size);
    CHECK_THROWS_WITH(attn::io::load_state_dict(m, attn::io::SafetensorsFile{"mem", broken, {}}),
                      Catch::Contains("'fc.weight': " + std::to_string(size) + " bytes") && Catch::Contains("needs 24"));
    CHECK(m.fc.weight.raw().to_vector() == before);
  }
}

TEST_CASE("checkpoint: an Adam file with a negative second moment is refused, the optimizer unchanged") {
  TempDir tmp;
  const auto& dir = tmp.path();
  Small a;
  save_one_adam_step(a, dir / "o.safetensors");
  auto file = attn::io::read_safetensors(dir / "o.safetensors");
  const float minus_one = -1.0f, minus_zero = -0.0f;
  std::memcpy(file.tensors.at("fc.weight.exp_avg_sq").bytes.data() + 2 * sizeof(float), &minus_one, sizeof(float));
  attn::io::write_safetensors(dir / "neg.safetensors", file.tensors, file.metadata);
  attn::optim::Adam<float> ob(a, {.lr = 0.01f});
  CHECK_THROWS_WITH(attn::io::load_optimizer(ob, dir / "neg.safetensors"),
                    Catch::Contains("'fc.weight.exp_avg_sq': negative value at element 2"));
  CHECK(ob.steps() == 0);
  // -0.0 is a second moment of zero.
  std::memcpy(file.tensors.at("fc.weight.exp_avg_sq").bytes.data() + 2 * sizeof(float), &minus_zero, sizeof(float));
  attn::io::write_safetensors(dir / "zero.safetensors", file.tensors, file.metadata);
  attn::io::load_optimizer(ob, dir / "zero.safetensors");
  CHECK(ob.steps() == 1);
}

TEST_CASE("checkpoint: save_optimizer drops a caller's stale 'param_steps' when every count is 'step'") {
  TempDir tmp;
  const auto& dir = tmp.path();
  Small a;
  a.init(1);
  attn::optim::Adam<float> oa(a, {.lr = 0.01f});
  attn::io::MetadataMap md{{"param_steps", "3,1,0"}, {"note", "kept"}};
  fc_backward(a, 0.1f);
  a.emb.weight.data()->grad = attn::Tensor<float>::zeros({5, 3});  // every parameter has a gradient
  oa.step();
  attn::io::save_optimizer(oa, dir / "o.safetensors", md);
  const auto file = attn::io::read_safetensors(dir / "o.safetensors");
  CHECK(file.metadata.count("param_steps") == 0);
  CHECK(file.metadata.at("note") == "kept");
  attn::optim::Adam<float> ob(a, {.lr = 0.01f});
  attn::io::load_optimizer(ob, dir / "o.safetensors");
  CHECK(ob.param_steps() == std::vector<long long>{1, 1, 1});
}

TEST_CASE("checkpoint: momentum buffers for an SGD without momentum are a FormatError naming the file") {
  TempDir tmp;
  const auto& dir = tmp.path();
  Small a;
  a.init(1);
  attn::optim::Sgd<float> with(a, {.lr = 0.1, .momentum = 0.9});
  train_steps(a, with, 1);
  attn::io::save_optimizer(with, dir / "m.safetensors");
  auto file = attn::io::read_safetensors(dir / "m.safetensors");
  file.metadata["momentum"] = "0";
  attn::io::write_safetensors(dir / "m0.safetensors", file.tensors, file.metadata);
  attn::optim::Sgd<float> without(a, {.lr = 0.1});
  CHECK_THROWS_AS(attn::io::load_optimizer(without, dir / "m0.safetensors"), attn::FormatError);
  CHECK_THROWS_WITH(attn::io::load_optimizer(without, dir / "m0.safetensors"),
                    Catch::Contains("m0.safetensors") && Catch::Contains("momentum 0 and keeps none"));
  CHECK(without.state().empty());
}

TEST_CASE("checkpoint: SGD and EMA metadata read back under a locale with a decimal comma") {
  TempDir tmp;
  const auto& dir = tmp.path();
  Small a;
  a.init(1);
  attn::optim::Sgd<float> sgd(a, {.lr = 0.1, .momentum = 0.9});
  train_steps(a, sgd, 1);
  attn::optim::Ema<float> ema(a, {.decay = 0.999});
  ema.update();
  attn::io::save_optimizer(sgd, dir / "sgd.safetensors");
  attn::io::save_ema(ema, dir / "ema.safetensors");
  const std::string old = std::setlocale(LC_NUMERIC, nullptr);
  bool comma = false;
  for (const char* name : {"de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8", "fr_FR.utf8"})
    if (std::setlocale(LC_NUMERIC, name)) {
      comma = true;
      break;
    }
  if (!comma) {
    SUCCEED("no locale with a decimal comma installed");
    return;
  }
  attn::optim::Sgd<float> sgd2(a, {.lr = 0.1, .momentum = 0.9});
  attn::optim::Ema<float> ema2(a, {.decay = 0.999});
  CHECK_NOTHROW(attn::io::load_optimizer(sgd2, dir / "sgd.safetensors"));
  CHECK_NOTHROW(attn::io::load_ema(ema2, dir / "ema.safetensors"));
  std::setlocale(LC_NUMERIC, old.c_str());
  CHECK(sgd2.state().size() == 2);
  CHECK(ema2.updates() == 1);
}
