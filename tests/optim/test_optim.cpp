// Adam, AdamW and SGD with momentum against PyTorch's three-step goldens; clipping; schedules.
#include "../golden_util.hpp"

using attn::Tensor;
namespace optim = attn::optim;

namespace {
template <class T>
optim::NamedParams<T, attn::cpu> one_param(const attn::io::SafetensorsFile& f) {
  optim::NamedParams<T, attn::cpu> p;
  p.names = {"p"};
  p.vars.emplace_back(golden::tensor<T>(f, "param_init"), true);
  return p;
}
template <class T>
void set_grad(const attn::Var<T>& v, const Tensor<T>& g) {
  v.data()->grad = g.clone();
}
}  // namespace

TEST_CASE("golden: Adam and AdamW match torch.optim over three steps") {
  for (std::string name : {"adam", "adamw"}) {
    auto f = golden::load(name);
    auto run = [&](auto tag, double tol) {
      using T = decltype(tag);
      auto params = one_param<T>(f);
      optim::Adam<T> opt(params, {.lr = 0.01, .weight_decay = 0.1, .decoupled = name == "adamw"});
      for (int s = 1; s <= 3; ++s) {
        set_grad(params.vars[0], golden::tensor<T>(f, "grad_step" + std::to_string(s)));
        opt.step();
        golden::expect_close(f, "param_step" + std::to_string(s), params.vars[0].value(), tol);
        golden::expect_close(f, "exp_avg_step" + std::to_string(s), opt.exp_avg(0), tol);
        golden::expect_close(f, "exp_avg_sq_step" + std::to_string(s), opt.exp_avg_sq(0), tol);
      }
    };
    run(float{}, 1e-6);
    run(double{}, 1e-12);
  }
}

TEST_CASE("golden: SGD with momentum and weight decay matches torch.optim.SGD") {
  auto f = golden::load("sgd_momentum");
  auto params = one_param<double>(f);
  optim::Sgd<double> opt(params, {.lr = std::stod(f.metadata.at("lr")), .momentum = 0.9, .weight_decay = 0.01});
  for (int s = 1; s <= 3; ++s) {
    set_grad(params.vars[0], golden::tensor<double>(f, "grad_step" + std::to_string(s)));
    opt.step();
    golden::expect_close(f, "param_step" + std::to_string(s), params.vars[0].value(), 1e-12);
    golden::expect_close(f, "momentum_buffer_step" + std::to_string(s), opt.momentum_buffer(0), 1e-12);
  }
}

TEST_CASE("clip_grad_norm scales the joint norm down to max_norm and reports the norm before") {
  std::vector<attn::Var<double>> ps{attn::Var<double>(Tensor<double>::zeros({2}), true), attn::Var<double>(Tensor<double>::zeros({1}), true)};
  ps[0].data()->grad = Tensor<double>::from({2}, {3, 0});
  ps[1].data()->grad = Tensor<double>::from({1}, {4});
  CHECK(optim::clip_grad_norm(ps, 1.0) == Approx(5.0));
  CHECK(ps[0].grad()[0] == Approx(3.0 / 5));
  CHECK(ps[1].grad()[0] == Approx(4.0 / 5));
  CHECK(optim::clip_grad_norm(ps, 10.0) == Approx(1.0).epsilon(1e-5));
  CHECK(ps[1].grad()[0] == Approx(4.0 / 5));
}

TEST_CASE("schedules: linear warm-up then cosine or linear decay") {
  optim::WarmupSchedule s{.base_lr = 1.0, .warmup = 10, .total = 110, .min_lr = 0.1};
  CHECK(s(0) == Approx(0.1));
  CHECK(s(9) == Approx(1.0));
  CHECK(s(10) == Approx(1.0));
  CHECK(s(60) == Approx(0.55));
  CHECK(s(110) == Approx(0.1));
  CHECK(s(500) == Approx(0.1));
  s.decay = optim::WarmupSchedule::Decay::linear;
  CHECK(s(35) == Approx(0.1 + 0.9 * 0.75));
}
