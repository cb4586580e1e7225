// SPDX-License-Identifier: MIT
// dist::GradBuckets (no MPI): the bucket layout, gradients as views of bucket memory that
// backward fills in place, zeroing, and re-attaching gradients an optimizer dropped.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include <attn/attn.hpp>
#include <attn/dist/grad_buckets.hpp>

using attn::Dims;
using attn::Tensor;
using Buckets = attn::dist::GradBuckets<float>;
using Named = std::vector<std::pair<std::string, std::shared_ptr<attn::VarData<float, attn::cpu>>>>;

namespace {
Named leaves(const std::vector<Dims>& dims) {
  Named out;
  for (std::size_t k = 0; k < dims.size(); ++k) {
    auto d = std::make_shared<attn::VarData<float, attn::cpu>>();
    d->value = Tensor<float>::full(dims[k], 1.f);
    d->requires_grad = true;
    std::string name(1, 'p');  // (not "p" + to_string: g++ 12 -Wrestrict false positive)
    name += std::to_string(k);
    out.push_back({name, d});
  }
  return out;
}
std::vector<std::string> names(const Buckets::Bucket& b) {
  std::vector<std::string> n;
  for (auto& e : b.entries) n.push_back(e.name);
  return n;
}
}  // namespace

TEST_CASE("buckets: filled from the last parameter, closed at the caps, 64-byte aligned slices") {
  // 4 bytes per float: p0 40 B, p1 400 B, p2 12 B, p3 4 B, p4 2000 B.
  auto params = leaves({{10}, {10, 10}, {3}, {1}, {500}});
  Buckets b(params, /*cap*/ 512, /*first cap*/ 64);
  REQUIRE(b.size() == 3);
  CHECK(names(b.buckets()[0]) == std::vector<std::string>{"p4"});  // over the first cap: alone
  CHECK(names(b.buckets()[1]) == std::vector<std::string>{"p3", "p2"});  // p1 would pass 512 B
  CHECK(names(b.buckets()[2]) == std::vector<std::string>{"p1", "p0"});
  CHECK(b.buckets()[1].entries[1].offset == 16);  // p2 starts on the next 64-byte boundary
  CHECK(b.buckets()[1].numel() == 19);
  CHECK(b.buckets()[2].entries[1].offset == 112);
  CHECK(b.numel() == 500 + 19 + 122);
  CHECK(b.bytes() == b.numel() * sizeof(float));
  for (auto& bk : b.buckets())
    for (auto& e : bk.entries) {
      CHECK(Buckets::attached(bk, e));
      CHECK(e.var->grad.dims() == e.var->value.dims());
    }
  // Buckets made later over the same parameters take the gradients over. A tighter cap splits p1 and p0.
  Buckets tight(params, 400, 64);
  REQUIRE(tight.size() == 4);
  CHECK(names(tight.buckets()[3]) == std::vector<std::string>{"p0"});
  // Everything in one bucket when the caps allow.
  CHECK(Buckets(params, 1 << 20, 1 << 20).size() == 1);
  CHECK_THROWS_AS(Buckets(params, 0, 64), attn::ArgumentError);
}

TEST_CASE("buckets: backward accumulates into bucket memory, and zero() clears it in place") {
  struct Net : attn::nn::Module {
    attn::nn::Linear<3, 2> fc{this, "fc"};
  } net;
  Named named;
  for (auto& v : net.parameters<float>()) named.push_back({"x", v.data()});
  Buckets b(named, 1 << 20, 1 << 20);
  REQUIRE(b.size() == 1);
  const float* base = b.buckets()[0].storage.data();
  auto x = attn::Var<float>(Tensor<float>::from({2, 3}, {1, 2, 3, -1, 0.5f, 2}));
  for (int pass = 1; pass <= 2; ++pass) {
    attn::Tape tape;
    tape.backward(attn::sum(tape, net.fc(tape, x)));
    // d(sum)/d(bias) = number of rows, accumulated over passes.
    CHECK(net.fc.bias.grad()[0] == Approx(2.0 * pass));
    CHECK(net.fc.bias.grad().data() >= base);
    CHECK(net.fc.bias.grad().data() < base + b.numel());
  }
  CHECK(b.buckets()[0].storage.data() == base);
  b.zero();
  for (float g : b.buckets()[0].storage.to_vector()) CHECK(g == 0.f);
  CHECK(net.fc.weight.grad().data() >= base);
}

TEST_CASE("buckets: gradients dropped or replaced are re-attached, with or without their values") {
  auto params = leaves({{4}, {2}});
  Buckets b(params, 1 << 20, 1 << 20);
  auto& p0 = *params[0].second;
  auto& p1 = *params[1].second;
  p0.grad = {};                                          // what an optimizer's zero_grad does
  p1.grad = Tensor<float>::from({2}, {5.f, 6.f});        // a fresh tensor outside the bucket
  CHECK_FALSE(Buckets::attached(b.buckets()[0], b.buckets()[0].entries[0]));
  CHECK(b.attach(true) == 2);
  CHECK(p0.grad.to_vector() == std::vector<float>{0, 0, 0, 0});
  CHECK(p1.grad.to_vector() == std::vector<float>{5, 6});
  CHECK(b.attach(true) == 0);
  p1.grad = Tensor<float>::from({2}, {7.f, 8.f});
  b.zero();
  CHECK(p1.grad.to_vector() == std::vector<float>{0, 0});
  for (auto& e : b.buckets()[0].entries) CHECK(Buckets::attached(b.buckets()[0], e));
}
