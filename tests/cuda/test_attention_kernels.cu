// SPDX-License-Identifier: MIT
// The CUDA attention kernels (backend/cuda/attention.cuh) against the CPU ones with the same
// inputs, masks and dropout seed: flash and naive, forward (out, lse / weights) and backward
// (dqkv), float and double, head dims below, at and above a warp, including the opt-in shared
// memory sizes. Then, at T = 4096, the CUDA flash kernel against the CUDA naive one; and
// self_attention's automatic choice on a device whose blocks lack the flash kernel's shared memory.
// Its main (cuda_main.cpp) exits 77 ("SKIPPED: no CUDA device") without a GPU.
#include <catch2/catch.hpp>

#include <attn/autograd/attention.hpp>
#include <attn/backend/kernels.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "attention_reference.hpp"

using attn_test::MhaCase;
using attn_test::MhaData;

namespace {

template <class T>
struct DeviceBuffer {
  T* p = nullptr;
  std::size_t n = 0;
  explicit DeviceBuffer(const std::vector<T>& h) : p(attn::cuda::allocate<T>(h.size())), n(h.size()) {
    attn::cuda::from_host(p, h.data(), n);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { attn::cuda::deallocate(p, n); }
  T* get() const { return n ? p : nullptr; }
  std::vector<T> host() const {
    std::vector<T> h(n);
    attn::cuda::to_host(h.data(), p, n);
    return h;
  }
};

/// The CUDA kernels on case c: as attn_test::cpu_mha.
template <class T>
void cuda_mha(const MhaCase& c, const MhaData<T>& data, bool flash, std::vector<T>& out, std::vector<T>& saved, std::vector<T>& dqkv) {
  DeviceBuffer<T> qkv(data.qkv), km(data.key_mask), am(data.attn_mask), dout(data.dout);
  attn::kernels::MhaProblem<T> p;
  p.batch = c.batch;
  p.time = c.time;
  p.heads = c.heads;
  p.head_dim = c.head_dim;
  p.qkv = qkv.get();
  p.key_mask = km.get();
  p.attn_mask = am.get();
  p.scale = T(1.0 / std::sqrt(double(c.head_dim)));
  p.dropout = c.dropout;
  p.seed = c.seed;
  p.pattern = c.pattern;
  const std::size_t D = c.heads * c.head_dim;
  DeviceBuffer<T> o(std::vector<T>(c.batch * c.time * D, T(0))), g(std::vector<T>(data.qkv.size(), T(0)));
  DeviceBuffer<T> s(std::vector<T>(c.batch * c.heads * c.time * (flash ? 1 : c.time), T(0)));
  attn::AttentionStats stats;
  if (flash) {
    attn::kernels::mha_flash_forward(attn::cuda{}, p, o.p, s.p, &stats);
    attn::kernels::mha_flash_backward(attn::cuda{}, p, o.p, dout.p, s.p, g.p, &stats);
    // O(T) memory: nothing the size of the (T, T) scores.
    CHECK(stats.largest_bytes < std::max<std::size_t>(c.time * c.time * sizeof(T), 300 * 1024));
  } else {
    attn::kernels::mha_naive_forward(attn::cuda{}, p, o.p, s.p, &stats);
    attn::kernels::mha_naive_backward(attn::cuda{}, p, s.p, dout.p, g.p, &stats);
  }
  out = o.host();
  saved = s.host();
  dqkv = g.host();
}

/// Every value within tol * (1 + |want|); equal infinities match.
template <class T>
void check_close(const char* what, const std::vector<T>& got, const std::vector<T>& want, double tol) {
  INFO(what);
  REQUIRE(got.size() == want.size());
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    if (!(g == w || std::abs(g - w) <= tol * (1.0 + std::abs(w))))
      if (bad++ == 0) first = i;
  }
  if (bad) INFO(bad << " of " << got.size() << " differ; first at " << first << ": cuda " << got[first] << ", reference " << want[first]);
  CHECK(bad == 0);
}

/// max |got - want| / max |want| (norm-relative: for long sums, where single small values carry
/// the cancellation error of the whole sum).
template <class T>
double norm_error(const std::vector<T>& got, const std::vector<T>& want) {
  double num = 0, den = 1e-30;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(double(want[i])) && got[i] == want[i]) continue;
    num = std::max(num, std::abs(double(got[i]) - double(want[i])));
    den = std::max(den, std::abs(double(want[i])));
  }
  return num / den;
}

std::string describe(const MhaCase& c) {
  return "B " + std::to_string(c.batch) + " T " + std::to_string(c.time) + " H " + std::to_string(c.heads) + " hd " +
         std::to_string(c.head_dim) + " dropout " + std::to_string(c.dropout) + (c.key_mask ? " key_mask" : "") +
         (c.attn_mask ? " causal" : "") + (c.pattern.active() ? " window " + std::to_string(c.pattern.window) + (c.pattern.causal ? " causal" : "") +
                                                              " global " + std::to_string(c.pattern.global)
                                                        : std::string());
}

const std::vector<MhaCase>& small_cases() {
  static const std::vector<MhaCase> v = {
      {.batch = 2, .time = 5, .heads = 1, .head_dim = 8, .seed = 1},
      {.batch = 3, .time = 77, .heads = 2, .head_dim = 40, .seed = 2, .key_mask = true},
      {.batch = 2, .time = 100, .heads = 4, .head_dim = 16, .dropout = 0.2, .seed = 3, .key_mask = true, .attn_mask = true},
      {.batch = 1, .time = 33, .heads = 1, .head_dim = 64, .seed = 4, .attn_mask = true},
      {.batch = 2, .time = 64, .heads = 2, .head_dim = 128, .dropout = 0.1, .seed = 5, .key_mask = true},
      {.batch = 1, .time = 1, .heads = 3, .head_dim = 5, .seed = 6},
      // Sparse patterns: the CUDA kernels apply visible() per element, the cpu ones skip tiles.
      {.batch = 2, .time = 300, .heads = 2, .head_dim = 16, .dropout = 0.1, .seed = 7, .key_mask = true,
       .pattern = {.window = 16, .causal = false, .global = 3}},
      {.batch = 1, .time = 200, .heads = 1, .head_dim = 32, .seed = 8, .pattern = {.window = 40, .causal = true, .global = 1}},
  };
  return v;
}

}  // namespace

TEMPLATE_TEST_CASE("cuda attention kernels match the cpu kernels", "[cuda][attention]", float, double) {
  using T = TestType;
  const double tol = std::is_same_v<T, float> ? 1e-4 : 1e-10;
  for (const MhaCase& c : small_cases()) {
    for (bool flash : {true, false}) {
      INFO(describe(c) << (flash ? ", flash" : ", naive"));
      const auto data = attn_test::make_mha_data<T>(c);
      std::vector<T> out_c, saved_c, dqkv_c, out_g, saved_g, dqkv_g;
      attn_test::cpu_mha(c, data, flash, out_c, saved_c, dqkv_c);
      cuda_mha(c, data, flash, out_g, saved_g, dqkv_g);
      check_close("out", out_g, out_c, tol);
      check_close(flash ? "lse" : "weights", saved_g, saved_c, tol);
      check_close("dqkv", dqkv_g, dqkv_c, tol);
    }
  }
}

TEST_CASE("cuda flash attention matches the naive kernel at T = 4096", "[cuda][attention]") {
  const MhaCase c{.batch = 3, .time = 4096, .heads = 2, .head_dim = 64, .dropout = 0.1, .seed = 7, .key_mask = true};
  INFO(describe(c));
  const auto data = attn_test::make_mha_data<float>(c);
  std::vector<float> out_f, lse, dqkv_f, out_n, weights, dqkv_n;
  cuda_mha(c, data, true, out_f, lse, dqkv_f);
  cuda_mha(c, data, false, out_n, weights, dqkv_n);
  const double e_out = norm_error(out_f, out_n), e_dqkv = norm_error(dqkv_f, dqkv_n);
  INFO("norm-relative error: out " << e_out << ", dqkv " << e_dqkv);
  CHECK(e_out < 1e-5);
  CHECK(e_dqkv < 1e-4);
  // The fully padded sample (1) attends to nothing: zero output, lse +inf.
  const std::size_t D = c.heads * c.head_dim, n = c.time;
  CHECK(std::all_of(out_f.begin() + n * D, out_f.begin() + 2 * n * D, [](float x) { return x == 0.f; }));
  CHECK(std::isinf(lse[1 * c.heads * n]));
  for (float x : out_f) REQUIRE(std::isfinite(x));
  for (float x : dqkv_f) REQUIRE(std::isfinite(x));
}

TEST_CASE("automatic self_attention runs the naive kernel where the device's blocks lack the flash kernel's shared memory", "[cuda][attention]") {
  using CT = attn::Tensor<float, attn::AnyShape, attn::cuda>;
  const MhaCase c{.batch = 2, .time = 40, .heads = 2, .head_dim = 128, .seed = 3, .key_mask = true};
  const auto data = attn_test::make_mha_data<float>(c);
  const attn::Dims dq{c.batch, c.time, 3 * c.heads * c.head_dim}, dm{c.batch, c.time}, dout{c.batch, c.time, c.heads * c.head_dim};
  const auto run = [&](attn::AttentionKernel kernel) {
    attn::Tape tape;
    attn::Var<float, attn::AnyShape, attn::cuda> x(CT::from(dq, data.qkv), true);
    auto out = attn::self_attention(tape, x, {.heads = c.heads, .key_mask = CT::from(dm, data.key_mask), .kernel = kernel});
    tape.backward(out, CT::from(dout, data.dout));
    return std::pair{out.value().to_vector(), x.grad().to_vector()};
  };
  attn::kernels::MhaProblem<float> p;
  p.batch = c.batch, p.time = c.time, p.heads = c.heads, p.head_dim = c.head_dim;
  const auto naive = run(attn::AttentionKernel::naive);
  const auto flash = run(attn::AttentionKernel::flash);  // this device's blocks have room (66,816 bytes)
  REQUIRE(attn::kernels::mha_flash_supported(attn::cuda{}, p));
  check_close("flash out", flash.first, naive.first, 1e-4);

  // A Turing GPU's 64 KiB per block: the dK/dV pass at head_dim 128 in float does not fit.
  auto& dev = attn::cuda_detail::current_device();
  const int optin = dev.smem_optin;
  dev.smem_optin = 64 * 1024;
  struct Restore {
    int& v;
    int was;
    ~Restore() { v = was; }
  } restore{dev.smem_optin, optin};
  CHECK_FALSE(attn::kernels::mha_flash_supported(attn::cuda{}, p));
  p.head_dim = 64;
  CHECK(attn::kernels::mha_flash_supported(attn::cuda{}, p));
  CHECK_THROWS_AS(run(attn::AttentionKernel::flash), attn::ArgumentError);  // refused before any kernel runs
  const auto automatic = run(attn::AttentionKernel::automatic);
  CHECK(automatic.first == naive.first);
  CHECK(automatic.second == naive.second);
}
