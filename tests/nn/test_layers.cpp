// SPDX-License-Identifier: MIT
// Linear, Embedding, LayerNorm, RMSNorm, dropout, pooling: gradient checks, PyTorch goldens, module registry.
#include "../gradcheck_util.hpp"
#include "../golden_util.hpp"

#include <attn/nn.hpp>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

using attn::Dims;
using attn::dyn;
using attn::Shape;
using attn::Tape;
using attn::Tensor;
using V = std::vector<attn::Var<double>>;
namespace nn = attn::nn;

using testutil::check_gradients;

namespace {
attn::Rng rng(77);
Tensor<double> rnd(Dims d, double lo = -1, double hi = 1) { return attn::random_tensor(rng, d, lo, hi); }
using golden::copy_param;

template <class T>
struct LinearNet : nn::Module {
  nn::Linear<7, 4, T> fc{this, "fc"};
};
}  // namespace

TEST_CASE("gradcheck: layer_norm, masked_mean, masked_max, dropout") {
  check_gradients("layer_norm", [](Tape& t, V& x) { return nn::layer_norm(t, x[0], x[1], x[2], 1e-5); }, {rnd({2, 3, 6}), rnd({6}), rnd({6})});
  check_gradients("layer_norm without bias", [](Tape& t, V& x) { return nn::layer_norm(t, x[0], x[1], std::decay_t<decltype(x[1])>{}, 1e-5); },
                  {rnd({2, 3, 6}), rnd({6})});
  check_gradients("layer_norm without scale or shift", [](Tape& t, V& x) {
    return nn::layer_norm(t, x[0], attn::Var<double>{}, attn::Var<double>{}, 1e-5);
  }, {rnd({2, 3, 6})});
  auto mask = Tensor<double>::from({2, 3}, {1, 1, 0, 0, 0, 0});
  check_gradients("masked_mean", [&](Tape& t, V& x) { return nn::masked_mean(t, x[0], attn::KeepMask(mask)); }, {rnd({2, 3, 4})});
  auto mask2 = Tensor<double>::from({2, 3}, {1, 0, 1, 1, 1, 0});
  check_gradients("masked_max", [&](Tape& t, V& x) { return nn::masked_max(t, x[0], attn::KeepMask(mask2)); }, {rnd({2, 3, 4})});
  check_gradients("dropout", [](Tape& t, V& x) { return nn::dropout(t, x[0], 0.3, true); }, {rnd({4, 5})});
}

TEST_CASE("gradcheck: rms_norm, with and without a scale, eps that matters") {
  check_gradients("rms_norm", [](Tape& t, V& x) { return nn::rms_norm(t, x[0], x[1], 1e-6); }, {rnd({2, 3, 6}), rnd({6})});
  check_gradients("rms_norm, eps 0.5", [](Tape& t, V& x) { return nn::rms_norm(t, x[0], x[1], 0.5); }, {rnd({4, 5}), rnd({5})});
  check_gradients("rms_norm without scale", [](Tape& t, V& x) { return nn::rms_norm(t, x[0], attn::Var<double>{}, 1e-6); },
                  {rnd({3, 7})});
}

TEST_CASE("masked pooling: a fully padded sample pools to zeros") {
  attn::NoGrad ng;
  attn::Var<double> x(rnd({2, 3, 4}));
  auto mask = Tensor<double>::from({2, 3}, {1, 1, 1, 0, 0, 0});
  auto m = nn::masked_mean(ng, x, attn::KeepMask(mask)).value();
  auto mx = nn::masked_max(ng, x, attn::KeepMask(mask)).value();
  for (std::size_t j = 0; j < 4; ++j) {
    CHECK(m(1, j) == 0.0);
    CHECK(mx(1, j) == 0.0);
    CHECK(m(0, j) == Approx((x.value()(0, 0, j) + x.value()(0, 1, j) + x.value()(0, 2, j)) / 3));
  }
}

TEST_CASE("masked_max: ties send the gradient to the first arg-max, and a NaN is the maximum (torch.max over a dimension)") {
  attn::Tape tape;
  attn::Var<double> x(Tensor<double>::from({1, 4, 2}, {2, 1, 2, std::nan(""), 1, 3, 5, 0}), true);
  auto m = nn::masked_max(tape, x, attn::Lengths{3});  // position 3 is padding
  const auto v = m.value();
  CHECK(v(0, 0) == 2.0);
  CHECK(std::isnan(v(0, 1)));
  tape.backward(attn::sum(tape, m));
  CHECK(x.grad().to_vector() == std::vector<double>{1, 0, 0, 1, 0, 0, 0, 0});
}

TEST_CASE("dropout: identity in eval mode, zeroes about p of the elements in training") {
  attn::NoGrad ng(5);
  attn::Var<float> x(Tensor<float>::full({100, 100}, 1.0f));
  auto y = nn::dropout(ng, x, 0.25, false);
  CHECK(y.data() == x.data());
  auto z = nn::dropout(ng, x, 0.25, true).value();
  std::size_t zeros = 0;
  for (std::size_t i = 0; i < z.numel(); ++i) {
    if (z[i] == 0) ++zeros;
    else CHECK(z[i] == Approx(1 / 0.75));
  }
  CHECK(zeros > 2300);
  CHECK(zeros < 2700);
  // p = 1 zeroes everything, gradient 0 (torch accepts it); p outside [0, 1] is refused.
  attn::Tape tape;
  attn::Var<float> w(Tensor<float>::full({3, 4}, 2.0f), true);
  auto all = nn::dropout(tape, w, 1.0, true);
  for (float v : all.value().to_vector()) CHECK(v == 0.0f);
  tape.backward(attn::sum(tape, all));
  for (float g : w.grad().to_vector()) CHECK(g == 0.0f);
  CHECK_NOTHROW(nn::Dropout(nullptr, "d", 1.0));
  CHECK_THROWS_AS(nn::dropout(ng, x, 1.5, true), attn::ArgumentError);
  CHECK_THROWS_AS(nn::Dropout(nullptr, "d", -0.1), attn::ArgumentError);
}

TEST_CASE("module: named parameters use PyTorch names, parameter count") {
  LinearNet<float> net;
  auto np = net.named_parameters();
  REQUIRE(np.size() == 2);
  CHECK(np[0].first == "fc.weight");
  CHECK(np[1].first == "fc.bias");
  CHECK(net.parameter_count() == 7 * 4 + 4);
  CHECK(net.parameters<float>().size() == 2);
  CHECK_THROWS_AS(net.parameters<double>(), attn::ArgumentError);
}

TEST_CASE("module: a parameter's value and gradient by its PyTorch name, as dict(model.named_parameters())[name]") {
  auto f = golden::load("linear");
  LinearNet<double> net;
  copy_param<double>(net.fc.weight, f, "weight");
  copy_param<double>(net.fc.bias, f, "bias");
  Tape tape;
  attn::Var<double, Shape<dyn, dyn, 7>> x(golden::tensor<double>(f, "x"), true);
  auto y = net.fc(tape, x);
  tape.backward(y, golden::tensor<double>(f, "dout"));
  // The same storage as the layer's own members, so the gradient is PyTorch's.
  auto w = net.parameter<double>("fc.weight");
  CHECK(w.data() == net.fc.weight.data());
  golden::expect_close(f, "grad.weight", w.grad(), 1e-12);
  golden::expect_close(f, "grad.bias", net.parameter<double>("fc.bias").grad(), 1e-12);
  const auto by_name = net.named_parameter_vars<double>();
  REQUIRE(by_name.size() == 2);
  golden::expect_close(f, "grad.bias", by_name.at("fc.bias").grad(), 1e-12);
  CHECK_THROWS_WITH(net.parameter<double>("fc.weights"),
                    Catch::Contains("no parameter 'fc.weights'") && Catch::Contains("fc.weight, fc.bias"));
  CHECK_THROWS_WITH(net.parameter<float>("fc.weight"), Catch::Contains("'fc.weight' has another element type"));
  CHECK_THROWS_AS(net.named_parameter_vars<float>(), attn::ArgumentError);
}

namespace {
// One of each layer that draws its parameters when constructed.
struct EveryLayer : nn::Module {
  nn::Linear<4, 3> fc{this, "fc"};
  nn::Embedding<4> emb{this, "emb", 6, {.padding_idx = 0}};
  nn::LayerNorm<4> norm{this, "norm"};
  nn::LSTM<4, 3> lstm{this, "lstm"};
  nn::BiLSTM<4, 3> bilstm{this, "bilstm"};
  nn::Attention<2, 4> attn{this, "attn"};
  nn::TransformerEncoderLayer<2, 4> layer{this, "layer", {.dim_feedforward = 8}};
};
std::vector<float> all_values(const nn::Module& m) {
  std::vector<float> v;
  for (auto& [name, p] : m.named_parameters()) {
    std::vector<float> x(p->numel());
    p->copy_to_host(x.data());
    v.insert(v.end(), x.begin(), x.end());
  }
  return v;
}
bool all_zero(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(), [](float x) { return x == 0.0f; });
}
}  // namespace

TEST_CASE("module: skip_init leaves every layer's parameters at zero, and init draws them as usual") {
  const EveryLayer drawn;
  const auto usual = all_values(drawn);
  REQUIRE(!all_zero(usual));
  auto skipped = nn::skip_init<EveryLayer>();  // not movable: constructed in place
  CHECK(all_values(skipped).size() == usual.size());
  CHECK(all_zero(all_values(skipped)));
  {
    nn::SkipInit outer;
    {
      nn::SkipInit inner;  // nests
    }
    CHECK_FALSE(nn::init_on_construction());
    const EveryLayer inside;
    CHECK(all_zero(all_values(inside)));
  }
  CHECK(nn::init_on_construction());
  const EveryLayer after;  // the scope is over: drawn again, the same values
  CHECK(all_values(after) == usual);
  EveryLayer reference;
  reference.init(5);
  skipped.init(5);  // Module::init draws whatever the construction did
  CHECK(all_values(skipped) == all_values(reference));
}

namespace {
struct Expert : nn::Module {
  Expert(nn::Module* parent, std::string name) : nn::Module(parent, std::move(name)) {}
  nn::Linear<4, 4> fc{this, "fc"};
};
struct TwoExperts : nn::Module {
  Expert e0{this, "e0"}, e1{this, "e1"};
  nn::Linear<4, 4> fc{this, "fc"};
};
std::vector<float> values_of(const nn::Module& m, const std::string& name) {
  for (auto& [n, p] : m.named_parameters())
    if (n == name) {
      std::vector<float> x(p->numel());
      p->copy_to_host(x.data());
      return x;
    }
  FAIL("no parameter " << name);
  return {};
}
struct Named : nn::Module {
  Named(nn::Module* parent, std::string name) : nn::Module(parent, std::move(name)) {}
  void add(const std::string& name) { register_parameter<float>(name, {2}); }
};
}  // namespace

TEST_CASE("module: layers of the same name under different parents start apart, a path seeds them, the same path the same values") {
  const TwoExperts m;
  CHECK(m.e0.fc.path() == "e0.fc");
  CHECK(m.e0.path() == "e0");
  CHECK(m.path().empty());
  const auto a = values_of(m, "e0.fc.weight"), b = values_of(m, "e1.fc.weight"), top = values_of(m, "fc.weight");
  CHECK(a != b);  // torch draws each independently; the local name "fc" alone gave them the same values
  CHECK(a != top);
  // A child of a root seeds from its own name, as a root layer of that name does.
  const nn::Linear<4, 4> alone(nullptr, "fc");
  CHECK(values_of(alone, "weight") == top);
  const TwoExperts again;
  CHECK(values_of(again, "e1.fc.weight") == b);
  // The encoder's layers are deep copies of one, as torch's: layers.1 starts as layers.0.
  const nn::TransformerEncoder<2, 4> enc(nullptr, "enc", {.num_layers = 3, .layer = {.dim_feedforward = 8}});
  for (const char* p : {"self_attn.in_proj_weight", "linear1.weight", "linear2.bias", "norm1.weight"}) {
    INFO(p);
    CHECK(values_of(enc, std::string("layers.2.") + p) == values_of(enc, std::string("layers.0.") + p));
  }
}

TEST_CASE("module: a repeated, empty or dotted child or parameter name is refused, a destroyed child leaves its parent") {
  Named root(nullptr, "");
  root.add("w");
  CHECK_THROWS_WITH(root.add("w"), Catch::Contains("'w' would repeat a name"));
  CHECK_THROWS_WITH(root.add(""), Catch::Contains("non-empty and hold no '.'"));
  CHECK_THROWS_WITH(root.add("a.b"), Catch::Contains("got 'a.b'"));
  CHECK_THROWS_WITH(Named(&root, "w"), Catch::Contains("a child module named 'w'"));
  {
    Named child(&root, "head");
    CHECK_THROWS_WITH(Named(&root, "head"), Catch::Contains("'head' would repeat"));
    child.add("v");
    CHECK_THROWS_WITH(child.add("v"), Catch::Contains("nn::Module 'head'"));
    CHECK(root.named_parameters().size() == 2);
  }
  CHECK(root.named_parameters().size() == 1);  // the child left when destroyed
  CHECK(root.children().empty());
  // Replaced, as `self.head = nn.Linear(...)`: one child, one set of names.
  auto head = std::make_unique<nn::Linear<2, 3>>(&root, "head");
  head.reset();
  head = std::make_unique<nn::Linear<2, 3>>(&root, "head");
  const auto names = root.named_parameters();
  REQUIRE(names.size() == 3);
  CHECK(names[1].first == "head.weight");
  CHECK(names[1].second->numel() == 6);
  // A child that outlives its parent forgets it.
  auto parent = std::make_unique<Named>(nullptr, "p");
  auto orphan = std::make_unique<Named>(parent.get(), "c");
  parent.reset();
  orphan.reset();  // no access to the destroyed parent (ASan)
}

namespace {
struct Block : nn::Module {
  Block(Module* parent, std::string name, double eps) : Module(parent, std::move(name)), norm(this, "norm", eps) {}
  nn::Linear<4, 4, double> fc{this, "fc"};
  nn::LayerNorm<4, double> norm;
  template <attn::Context C>
  attn::Var<double> operator()(C& ctx, const attn::Var<double>& x) const { return norm(ctx, attn::Var<double>(fc(ctx, x))); }
};
struct Stack : nn::Module {
  Stack(std::size_t n) : Module(nullptr, "") {
    while (blocks.size() < n) blocks.emplace_back(1e-5);
  }
  nn::Linear<3, 4, double> embed{this, "embed"};
  nn::ModuleList<Block> blocks{this, "blocks"};
  nn::ModuleList<nn::Linear<4, 2, double>> heads{this, "heads", 2};
};
}  // namespace

TEST_CASE("ModuleList: torch.nn.ModuleList's names (blocks.0.fc.weight), order, iteration, init and a checked index") {
  Stack s(3);
  REQUIRE(s.blocks.size() == 3);
  CHECK(s.heads.size() == 2);
  std::vector<std::string> names;
  for (const auto& [n, p] : s.named_parameters()) names.push_back(n);
  const std::vector<std::string> torch_names = {
      "embed.weight",        "embed.bias",          "blocks.0.fc.weight", "blocks.0.fc.bias", "blocks.0.norm.weight", "blocks.0.norm.bias",
      "blocks.1.fc.weight",  "blocks.1.fc.bias",    "blocks.1.norm.weight", "blocks.1.norm.bias", "blocks.2.fc.weight", "blocks.2.fc.bias",
      "blocks.2.norm.weight", "blocks.2.norm.bias", "heads.0.weight",     "heads.0.bias",     "heads.1.weight",       "heads.1.bias"};
  CHECK(names == torch_names);
  CHECK(s.blocks[1].path() == "blocks.1");
  CHECK(&s.blocks.at(2) == &s.blocks.back());
  CHECK_THROWS_WITH(s.blocks.at(3), Catch::Contains("nn::ModuleList 'blocks': index 3 is past its 3 modules"));
  // Each block starts from its own path's values; init(seed) redraws them in registration order.
  CHECK(s.blocks[0].fc.weight.value().to_vector() != s.blocks[1].fc.weight.value().to_vector());
  s.init(9);
  Stack t(3);
  t.init(9);
  for (std::size_t i = 0; i < 3; ++i) CHECK(s.blocks[i].fc.weight.value().to_vector() == t.blocks[i].fc.weight.value().to_vector());
  // Iteration visits the modules in order, as a range of M&.
  attn::NoGrad ng;
  attn::Var<double> h = s.embed(ng, attn::Var<double>(rnd({2, 3})));
  const auto x0 = h;
  for (const Block& b : s.blocks) h = b(ng, h);
  attn::Var<double> g = x0;
  for (std::size_t i = 0; i < s.blocks.size(); ++i) g = s.blocks[i](ng, g);
  CHECK(h.value().to_vector() == g.value().to_vector());
  std::size_t count = 0;
  for (auto it = s.heads.begin(); it != s.heads.end(); ++it) count += it->out_features();
  CHECK(count == 4);
  CHECK(std::distance(s.blocks.begin(), s.blocks.end()) == 3);
  // eval() reaches the list's modules; a list destroyed leaves its parent.
  s.eval();
  CHECK_FALSE(s.blocks[2].training());
  const std::size_t before = s.children().size();
  {
    nn::ModuleList<Block> extra(&s, "extra", 2, 1e-5);
    CHECK(s.named_parameters().size() == names.size() + 8);
  }
  CHECK(s.children().size() == before);
  CHECK(s.named_parameters().size() == names.size());
}

TEST_CASE("golden: Linear matches torch.nn.Linear (float32 and float64)") {
  auto f = golden::load("linear");
  auto run = [&](auto tag, double tol) {
    using T = decltype(tag);
    LinearNet<T> net;
    copy_param<T>(net.fc.weight, f, "weight");
    copy_param<T>(net.fc.bias, f, "bias");
    Tape tape;
    attn::Var<T, Shape<dyn, dyn, 7>> x(golden::tensor<T>(f, "x"), true);
    auto y = net.fc(tape, x);
    static_assert(std::is_same_v<typename decltype(y)::shape_type, Shape<dyn, dyn, 4>>);
    golden::expect_close(f, "out", y.value(), tol);
    tape.backward(y, golden::tensor<T>(f, "dout"));
    golden::expect_close(f, "grad.x", x.grad(), tol);
    golden::expect_close(f, "grad.weight", net.fc.weight.grad(), tol);
    golden::expect_close(f, "grad.bias", net.fc.bias.grad(), tol);
  };
  run(float{}, 1e-5);
  run(double{}, 1e-12);
}

TEST_CASE("golden: LayerNorm matches torch.nn.LayerNorm") {
  auto f = golden::load("layernorm");
  auto run = [&](auto tag, double tol) {
    using T = decltype(tag);
    nn::LayerNorm<8, T> ln(nullptr, "ln");
    copy_param<T>(ln.weight, f, "weight");
    copy_param<T>(ln.bias, f, "bias");
    Tape tape;
    attn::Var<T, Shape<dyn, dyn, 8>> x(golden::tensor<T>(f, "x"), true);
    auto y = ln(tape, x);
    golden::expect_close(f, "out", y.value(), tol);
    tape.backward(y, golden::tensor<T>(f, "dout"));
    golden::expect_close(f, "grad.x", x.grad(), tol);
    golden::expect_close(f, "grad.weight", ln.weight.grad(), tol);
    golden::expect_close(f, "grad.bias", ln.bias.grad(), tol);
  };
  run(float{}, 1e-5);
  run(double{}, 1e-10);
}

TEST_CASE("LayerNorm: a negative or NaN eps is refused, naming the layer") {
  CHECK_THROWS_WITH(nn::LayerNorm<4>(nullptr, "ln", -1e-5), Catch::Contains("nn::LayerNorm 'ln': eps must be a finite value >= 0"));
  CHECK_THROWS_AS(nn::LayerNorm<4>(nullptr, "ln", std::nan("")), attn::ArgumentError);
  CHECK_NOTHROW(nn::LayerNorm<4>(nullptr, "ln", 0.0));
}

TEST_CASE("LayerNorm without bias: torch's bias=False, the shift of a zero bias, no 'bias' parameter") {
  nn::LayerNorm<6, double> with(nullptr, "with"), without(nullptr, "without", 1e-5, false);
  CHECK(with.named_parameters().size() == 2);
  REQUIRE(without.named_parameters().size() == 1);
  CHECK(without.named_parameters()[0].first == "weight");
  CHECK_FALSE(without.bias.defined());
  const auto w = rnd({6});
  std::copy_n(w.data(), 6, const_cast<double*>(with.weight.raw().data()));
  std::copy_n(w.data(), 6, const_cast<double*>(without.weight.raw().data()));
  Tape tape;
  attn::Var<double> x(rnd({2, 3, 6}), true), x2(Tensor<double>(x.value()), true);
  auto a = with(tape, x), b = without(tape, x2);
  for (std::size_t i = 0; i < a.value().numel(); ++i) CHECK(b.value().data()[i] == a.value().data()[i]);
  const auto g = rnd({2, 3, 6});
  tape.backward(a, g);
  Tape tape2;
  auto b2 = without(tape2, x2);
  tape2.backward(b2, g);
  for (std::size_t i = 0; i < x.grad().numel(); ++i) CHECK(x2.grad().data()[i] == x.grad().data()[i]);
  for (std::size_t i = 0; i < 6; ++i) CHECK(without.weight.grad().data()[i] == with.weight.grad().data()[i]);
}

TEST_CASE("LayerNorm(elementwise_affine = false): no parameters, the values and input gradient of weight 1 and bias 0") {
  nn::LayerNorm<6, double> affine(nullptr, "affine"), plain(nullptr, "plain", 1e-5, true, false);
  CHECK(plain.named_parameters().empty());
  CHECK_FALSE(plain.weight.defined());
  CHECK_FALSE(plain.bias.defined());
  Tape tape;
  attn::Var<double> x(rnd({2, 3, 6}), true), x2(Tensor<double>(x.value()), true);
  auto a = affine(tape, x), b = plain(tape, x2);
  const auto g = rnd({2, 3, 6});
  tape.backward(a, g);
  Tape tape2;
  tape2.backward(plain(tape2, x2), g);
  for (std::size_t i = 0; i < a.value().numel(); ++i) CHECK(b.value().data()[i] == a.value().data()[i]);
  for (std::size_t i = 0; i < x.grad().numel(); ++i) CHECK(x2.grad().data()[i] == x.grad().data()[i]);
  // Each row comes out with mean 0 and (biased) variance 1 / (1 + eps / var).
  for (std::size_t r = 0; r < 6; ++r) {
    double m = 0;
    for (std::size_t c = 0; c < 6; ++c) m += b.value().data()[r * 6 + c];
    CHECK(m == Approx(0).margin(1e-12));
  }
  CHECK_THROWS_WITH(attn::layer_norm(tape, x, attn::Var<double>(rnd({5})), attn::Var<double>{}, 1e-5),
                    Catch::Contains("vs weight (5) and bias (none)"));
}

TEST_CASE("golden: RMSNorm matches torch.nn.RMSNorm, eps=None with a weight and eps=0.01 without") {
  auto f = golden::load("rmsnorm");
  auto run = [&](auto tag, double tol) {
    using T = decltype(tag);
    nn::RMSNorm<8, T> norm(nullptr, "norm");  // torch's eps=None: the type's epsilon
    CHECK(norm.eps() == double(std::numeric_limits<T>::epsilon()));
    copy_param<T>(norm.weight, f, "weight");
    Tape tape;
    attn::Var<T, Shape<dyn, dyn, 8>> x(golden::tensor<T>(f, "x"), true);
    auto y = norm(tape, x);
    golden::expect_close(f, "out", y.value(), tol);
    tape.backward(y, golden::tensor<T>(f, "dout"));
    golden::expect_close(f, "grad.x", x.grad(), tol);
    golden::expect_close(f, "grad.weight", norm.weight.grad(), tol);
  };
  run(float{}, 1e-5);
  run(double{}, 1e-12);
  auto g = golden::load("rmsnorm_eps_plain");
  auto run_plain = [&](auto tag, double tol) {
    using T = decltype(tag);
    nn::RMSNorm<dyn, T> norm(nullptr, "norm", 6, std::stod(g.metadata.at("eps")), false);
    CHECK(norm.named_parameters().empty());
    Tape tape;
    attn::Var<T> x(golden::tensor<T>(g, "x"), true);
    auto y = norm(tape, x);
    golden::expect_close(g, "out", y.value(), tol);
    tape.backward(y, golden::tensor<T>(g, "dout"));
    golden::expect_close(g, "grad.x", x.grad(), tol);
  };
  run_plain(float{}, 1e-5);
  run_plain(double{}, 1e-12);
}

TEST_CASE("RMSNorm: each row's mean square is 1 / (1 + eps / ms), the width and eps are checked, naming the layer") {
  nn::RMSNorm<6, double> norm(nullptr, "rms", 1e-3);
  REQUIRE(norm.named_parameters().size() == 1);
  CHECK(norm.named_parameters()[0].first == "weight");
  CHECK(norm.normalized_size() == 6);
  attn::NoGrad ng;
  const auto xt = rnd({4, 6}, -3, 3);
  const attn::Var<double> x(xt);
  const auto y = norm(ng, x).value();
  for (std::size_t r = 0; r < 4; ++r) {
    double ms = 0, ys = 0;
    for (std::size_t c = 0; c < 6; ++c) {
      const double xv = xt.data()[r * 6 + c], yv = y.data()[r * 6 + c];
      ms += xv * xv / 6;
      ys += yv * yv / 6;
    }
    CHECK(ys == Approx(ms / (ms + 1e-3)).epsilon(1e-12));
  }
  CHECK_THROWS_WITH(norm(ng, attn::Var<double>(rnd({2, 5}))), Catch::Contains("nn::RMSNorm 'rms': input shape (2, 5) does not end in 6"));
  CHECK_THROWS_WITH(nn::RMSNorm<4>(nullptr, "r", -1.0), Catch::Contains("nn::RMSNorm 'r': eps must be a finite value >= 0"));
  CHECK_THROWS_AS(nn::RMSNorm<4>(nullptr, "r", std::nan("")), attn::ArgumentError);
  CHECK_THROWS_WITH((nn::RMSNorm<dyn>(nullptr, "r", 0)), Catch::Contains("the normalised width must be positive"));
  CHECK_THROWS_WITH(attn::rms_norm(ng, x, attn::Var<double>(rnd({5})), 1e-6), Catch::Contains("rms_norm: input (4, 6) vs weight (5)"));
  CHECK_THROWS_AS(attn::rms_norm(ng, x, attn::Var<double>{}, -1.0), attn::ArgumentError);
  nn::RMSNorm<6, float> f32(nullptr, "f32");
  CHECK(f32.eps() == double(std::numeric_limits<float>::epsilon()));
}

TEST_CASE("golden: Embedding with padding_idx matches torch.nn.Embedding") {
  auto f = golden::load("embedding");
  nn::Embedding<4, double> emb(nullptr, "emb", 11, {.padding_idx = 0});
  copy_param<double>(emb.weight, f, "weight");
  Tape tape;
  auto ids = golden::tensor<std::int64_t>(f, "ids");
  auto y = emb(tape, ids);
  golden::expect_close(f, "out", y.value(), 1e-15);
  tape.backward(y, golden::tensor<double>(f, "dout"));
  golden::expect_close(f, "grad.weight", emb.weight.grad(), 1e-12);
}

TEST_CASE("golden: Embedding with max_norm renormalises the looked-up rows as torch.nn.Embedding, 2-, 1- and infinity norm") {
  auto f = golden::load("embedding_max_norm");
  const auto ids = golden::tensor<std::int64_t>(f, "ids");
  for (const auto& [prefix, max_norm, norm_type] :
       {std::tuple{"p2.", 1.5, 2.0}, std::tuple{"p1.", 2.0, 1.0}, std::tuple{"pinf.", 1.0, std::numeric_limits<double>::infinity()}}) {
    INFO(prefix);
    auto run = [&, prefix = std::string(prefix), max_norm = max_norm, norm_type = norm_type](auto tag, double tol) {
      using T = decltype(tag);
      nn::Embedding<4, T> emb(nullptr, "emb", 10, {.max_norm = max_norm, .norm_type = norm_type});
      copy_param<T>(emb.weight, f, prefix + "weight");
      Tape tape;
      auto y = emb(tape, ids);
      golden::expect_close(f, prefix + "weight_after", emb.weight.value(), tol);  // rows 0, 5, 7, 8, 9 (p2) rescaled; 4 and unused 6 not
      golden::expect_close(f, prefix + "out", y.value(), tol);
      tape.backward(y, golden::tensor<T>(f, "dout"));
      golden::expect_close(f, prefix + "grad.weight", emb.weight.grad(), tol);
    };
    run(float{}, 1e-6);
    run(double{}, 1e-12);
  }
  // An id outside the table is refused before any row changes; bad options are refused.
  nn::Embedding<4, double> emb(nullptr, "emb", 10, {.max_norm = 0.5});
  const auto before = emb.weight.raw().to_vector();
  Tape tape;
  CHECK_THROWS_AS(emb(tape, Tensor<std::int64_t>::from({3}, {1, 2, 10})), attn::ShapeError);
  CHECK(emb.weight.raw().to_vector() == before);
  CHECK_THROWS_WITH((nn::Embedding<4>(nullptr, "e", 10, {.max_norm = 0.0})), Catch::Contains("nn::Embedding 'e': max_norm must be positive"));
  CHECK_THROWS_WITH((nn::Embedding<4>(nullptr, "e", 10, {.max_norm = 1.0, .norm_type = 0.0})), Catch::Contains("norm_type must be positive"));
  CHECK_THROWS_AS((nn::Embedding<4>(nullptr, "e", 10, {.max_norm = 1.0, .norm_type = std::nan("")})), attn::ArgumentError);
}

TEST_CASE("Embedding with max_norm: lookups from several threads never see a row half rescaled") {
  // Each round refills the table (row norms near 37), then 4 threads look every row up at once:
  // each call rescales the rows to max_norm and reads them. Were the calls to interleave, one would
  // read a row another is halfway through rescaling (elements 150 times too large), or rescale it
  // a second time from a half-rescaled norm. Every row any call returns must have norm max_norm.
  constexpr std::size_t D = 4096, rows = 8, threads = 4, rounds = 30;
  constexpr double max_norm = 0.25;
  nn::Embedding<D> emb(nullptr, "emb", rows, {.max_norm = max_norm});
  std::vector<std::int64_t> all;
  for (std::size_t r = 0; r < rows; ++r) all.push_back(static_cast<std::int64_t>(r));
  const auto ids = Tensor<std::int64_t>::from({rows}, all);
  std::vector<std::size_t> off(threads, 0);
  std::barrier sync(threads + 1);
  std::vector<std::thread> pool;
  for (std::size_t w = 0; w < threads; ++w)
    pool.emplace_back([&, w] {
      attn::NoGrad ng;
      for (std::size_t r = 0; r < rounds; ++r) {
        sync.arrive_and_wait();  // the table has been refilled
        const auto out = emb(ng, ids).value().to_vector();
        for (std::size_t i = 0; i < rows; ++i) {
          double n = 0;
          for (std::size_t j = 0; j < D; ++j) n += double(out[i * D + j]) * double(out[i * D + j]);
          off[w] += std::abs(std::sqrt(n) / max_norm - 1) > 1e-5;
        }
        sync.arrive_and_wait();  // every call has returned
      }
    });
  attn::Rng fill(5);
  for (std::size_t r = 0; r < rounds; ++r) {
    float* w = const_cast<float*>(emb.weight.raw().data());
    for (std::size_t k = 0; k < rows * D; ++k) w[k] = float(fill.uniform() * 2 - 1);
    emb.weight.data()->mark_value_written();
    sync.arrive_and_wait();
    sync.arrive_and_wait();
  }
  for (auto& t : pool) t.join();
  for (std::size_t w = 0; w < threads; ++w) CHECK(off[w] == 0);
}

TEST_CASE("Embedding: a negative padding_idx counts from the end as torch's, and out of range is an error") {
  nn::Embedding<3, double> emb(nullptr, "emb", 5, {.padding_idx = -1});
  CHECK(emb.padding_row() == 4);
  for (std::size_t j = 0; j < 3; ++j) CHECK(emb.weight.value().data()[4 * 3 + j] == 0.0);
  CHECK(emb.weight.value().data()[0] != 0.0);
  Tape tape;
  auto y = emb(tape, Tensor<std::int64_t>::from({3}, {4, 1, 4}));
  tape.backward(attn::sum(tape, y));
  for (std::size_t j = 0; j < 3; ++j) {
    CHECK(emb.weight.grad().data()[4 * 3 + j] == 0.0);  // the padding row takes no gradient
    CHECK(emb.weight.grad().data()[1 * 3 + j] == 1.0);
  }
  CHECK(nn::Embedding<3, double>(nullptr, "e", 5, {.padding_idx = -5}).padding_row() == 0);
  CHECK(nn::Embedding<3, double>(nullptr, "e", 5).padding_row() == -1);
  CHECK_THROWS_WITH((nn::Embedding<3, double>(nullptr, "e", 5, {.padding_idx = -6})), Catch::Contains("padding_idx -6 outside the table of 5"));
  CHECK_THROWS_AS((nn::Embedding<3, double>(nullptr, "e", 5, {.padding_idx = 5})), attn::ArgumentError);
}

TEST_CASE("golden: cross-entropy with class weights matches torch, with and without label smoothing") {
  auto f = golden::load("cross_entropy_weighted");
  const auto wt = golden::tensor<double>(f, "weight");
  const std::vector<double> w(wt.data(), wt.data() + wt.numel());
  REQUIRE(w.size() == 5);
  for (const auto& setting : {std::pair<std::string, double>{"", 0.0}, {"_ls", 0.2}}) {
    const std::string tag = setting.first;  // named copies: lambdas cannot capture structured bindings before clang 16
    const double ls = setting.second;
    INFO("label smoothing " << ls);
    auto run = [&](auto type_tag, double tol) {
      using T = decltype(type_tag);
      Tape tape;
      attn::Var<T> logits(golden::tensor<T>(f, "logits"), true);
      auto loss = attn::cross_entropy(tape, logits, golden::tensor<std::int64_t>(f, "targets"), {.label_smoothing = ls, .weight = w});
      golden::expect_close(f, "loss" + tag, loss.value(), tol);
      tape.backward(loss);
      golden::expect_close(f, "grad.logits" + tag, logits.grad(), tol);
    };
    run(float{}, 1e-5);
    run(double{}, 1e-12);
  }
  // Weights that do not fit are refused before anything is computed.
  Tape tape;
  attn::Var<double> logits(golden::tensor<double>(f, "logits"), true);
  const auto targets = golden::tensor<std::int64_t>(f, "targets");
  CHECK_THROWS_WITH(attn::cross_entropy(tape, logits, targets, {.weight = {1.0, 2.0}}), Catch::Contains("2 class weights for 5 classes"));
  CHECK_THROWS_WITH(attn::cross_entropy(tape, logits, targets, {.weight = {1.0, -1.0, 1.0, 1.0, 1.0}}),
                    Catch::Contains("class weight 1 is -1.000000; weights must be finite and >= 0"));
  CHECK_THROWS_WITH(attn::cross_entropy(tape, logits, targets, {.weight = {1.0, 1.0, std::nan(""), 1.0, 1.0}}),
                    Catch::Contains("class weight 2 is nan"));
  // Every counted row of weight 0: the loss is 0, as when every row is ignored.
  const auto zero = attn::cross_entropy(tape, logits, targets, {.weight = {0.0, 0.0, 0.0, 0.0, 0.0}});
  CHECK(zero.value().to_vector()[0] == 0.0);
}

TEST_CASE("golden: cross-entropy with ignore_index and label smoothing matches torch") {
  for (std::string name : {"cross_entropy", "cross_entropy_ls"}) {
    auto f = golden::load(name);
    const double ls = name == "cross_entropy" ? 0.0 : 0.1;
    auto run = [&](auto tag, double tol) {
      using T = decltype(tag);
      Tape tape;
      attn::Var<T> logits(golden::tensor<T>(f, "logits"), true);
      auto loss = attn::cross_entropy(tape, logits, golden::tensor<std::int64_t>(f, "targets"), {.label_smoothing = ls});
      golden::expect_close(f, "loss", loss.value(), tol);
      tape.backward(loss);
      golden::expect_close(f, "grad.logits", logits.grad(), tol);
    };
    run(float{}, 1e-5);
    run(double{}, 1e-12);
  }
}

TEST_CASE("golden: masked_mean and masked_max match torch's mean and max(1).values over the real positions, values and gradients") {
  auto f = golden::load("pooling");
  const auto len = golden::tensor<std::int64_t>(f, "lengths");
  std::vector<int> lengths;
  for (std::size_t i = 0; i < len.numel(); ++i) lengths.push_back(int(len[i]));
  Tape tape;
  attn::Var<double> x(golden::tensor<double>(f, "x"), true);
  const attn::Var<double> up_mean(golden::tensor<double>(f, "upstream_mean"), false), up_max(golden::tensor<double>(f, "upstream_max"), false);
  auto mean = nn::masked_mean(tape, x, attn::Lengths(lengths));
  auto mx = nn::masked_max(tape, x, attn::Lengths(lengths));
  golden::expect_close(f, "mean", mean.value(), 1e-12);
  golden::expect_close(f, "max", mx.value(), 1e-12);
  tape.backward(attn::add(tape, attn::sum(tape, attn::mul(tape, mean, up_mean)), attn::sum(tape, attn::mul(tape, mx, up_max))));
  golden::expect_close(f, "grad.x", x.grad(), 1e-12);
}

TEST_CASE("Linear with run-time widths: a static twin's parameters, values and gradients, and the widths it checks") {
  // Out at run time (a vocabulary's size), both at run time, against Linear<4, 3> of the same name.
  nn::Linear<4, 3, double> fixed(nullptr, "fc");
  nn::Linear<4, dyn, double> out_dyn(nullptr, "fc", 3);
  nn::Linear<dyn, dyn, double> both_dyn(nullptr, "fc", 4, 3);
  nn::Linear<dyn, 3, double> in_dyn(nullptr, "fc", 4, 3, {.bias = false});
  CHECK(out_dyn.weight.dims() == Dims{3, 4});
  CHECK(both_dyn.bias.dims() == Dims{3});
  CHECK(out_dyn.in_features() == 4);
  CHECK(out_dyn.out_features() == 3);
  CHECK(in_dyn.named_parameters().size() == 1);
  // The same drawing as the static layer's (torch's default, fan-in 4, seeded by the name).
  CHECK(out_dyn.weight.value().to_vector() == fixed.weight.value().to_vector());
  CHECK(both_dyn.bias.value().to_vector() == fixed.bias.value().to_vector());
  CHECK(in_dyn.weight.value().to_vector() == fixed.weight.value().to_vector());

  const auto x = rnd({2, 5, 4});
  const auto dout = rnd({2, 5, 3});
  auto run = [&](const auto& layer) {
    Tape tape;
    attn::Var<double, Shape<dyn, dyn, 4>> xv(x, true);
    auto y = layer(tape, xv);
    tape.backward(y, dout);
    return std::tuple{y.value().to_vector(), xv.grad().to_vector(), layer.weight.grad().to_vector()};
  };
  const auto want = run(fixed);
  CHECK(run(out_dyn) == want);
  CHECK(run(both_dyn) == want);
  {
    const auto [y, gx, gw] = run(in_dyn);  // no bias: the outputs differ by it, the gradients do not
    CHECK(gx == std::get<1>(want));
    CHECK(gw == std::get<2>(want));
  }

  attn::NoGrad ng;
  CHECK_THROWS_WITH(out_dyn(ng, attn::Var<double, attn::AnyShape>(rnd({2, 5}))), Catch::Contains("nn::Linear 'fc': input shape (2, 5) does not end in 4"));
  CHECK_THROWS_WITH((nn::Linear<4, dyn>(nullptr, "zero", 0)), Catch::Contains("nn::Linear 'zero': in_features and out_features must be positive"));
  CHECK_THROWS_WITH((nn::Linear<dyn, 3>(nullptr, "mismatch", 4, 5)), Catch::Contains("out_features 5 differs from the static Out 3"));
  CHECK_THROWS_WITH((nn::Linear<4, dyn>(nullptr, "mismatch", 5, 3)), Catch::Contains("in_features 5 differs from the static In 4"));
  CHECK_THROWS_AS((nn::Linear<dyn, dyn>(nullptr, "zero", 0, 3)), attn::ArgumentError);
}

TEST_CASE("LayerNorm and Embedding with run-time widths: their static twins' values and gradients, and the widths they check") {
  nn::LayerNorm<6, double> fixed_norm(nullptr, "norm", 1e-5);
  nn::LayerNorm<dyn, double> norm(nullptr, "norm", 6, 1e-5);
  nn::LayerNorm<dyn, double> bare(nullptr, "bare", 6, 1e-5, true, false);
  CHECK(norm.normalized_size() == 6);
  CHECK(norm.weight.dims() == Dims{6});
  CHECK(bare.named_parameters().empty());
  const auto x = rnd({3, 6});
  const auto dout = rnd({3, 6});
  auto run_norm = [&](const auto& layer) {
    Tape tape;
    attn::Var<double, Shape<dyn, 6>> xv(x, true);
    auto y = layer(tape, xv);
    tape.backward(y, dout);
    return std::tuple{y.value().to_vector(), xv.grad().to_vector(), layer.weight.grad().to_vector()};
  };
  CHECK(run_norm(norm) == run_norm(fixed_norm));

  nn::Embedding<5, double> fixed_emb(nullptr, "emb", 7, {.padding_idx = 2});
  nn::Embedding<dyn, double> emb(nullptr, "emb", 7, 5, {.padding_idx = 2});
  CHECK(emb.embedding_dim() == 5);
  CHECK(emb.weight.dims() == Dims{7, 5});
  CHECK(emb.weight.value().to_vector() == fixed_emb.weight.value().to_vector());  // padding row zero in both
  const auto ids = Tensor<std::int64_t>::from({2, 3}, {1, 2, 6, 0, 2, 1});
  auto run_emb = [&](const auto& layer) {
    Tape tape;
    auto y = layer(tape, ids);
    tape.backward(y, rnd({2, 3, 5}));
    return std::pair{y.value().to_vector(), layer.weight.grad().to_vector()};
  };
  attn::Rng saved = rng;
  const auto want = run_emb(fixed_emb);
  rng = saved;  // the same upstream gradient
  CHECK(run_emb(emb) == want);
  nn::Embedding<dyn, double> capped(nullptr, "capped", 7, 5, {.max_norm = 0.5});
  attn::NoGrad ng;
  const auto rows = capped(ng, ids).value().to_vector();
  for (std::size_t i = 0; i < 6; ++i) {
    double n = 0;
    for (std::size_t j = 0; j < 5; ++j) n += rows[i * 5 + j] * rows[i * 5 + j];
    CHECK(std::sqrt(n) <= 0.5 + 1e-9);
  }

  CHECK_THROWS_WITH(norm(ng, attn::Var<double, attn::AnyShape>(rnd({3, 5}))), Catch::Contains("nn::LayerNorm 'norm': input shape (3, 5) does not end in 6"));
  CHECK_THROWS_WITH(bare(ng, attn::Var<double, attn::AnyShape>(rnd({3, 5}))), Catch::Contains("does not end in 6"));
  CHECK_THROWS_WITH((nn::LayerNorm<dyn>(nullptr, "zero", 0)), Catch::Contains("nn::LayerNorm 'zero': the normalised width must be positive"));
  CHECK_THROWS_WITH((nn::Embedding<dyn>(nullptr, "zero", 7, 0)), Catch::Contains("nn::Embedding 'zero': embedding_dim must be positive"));
}
