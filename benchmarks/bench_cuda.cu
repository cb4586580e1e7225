// SPDX-License-Identifier: MIT
// bench --device cuda: the reference cases R1-R5 with their models on attn::cuda (compiled by nvcc).
// Each timed iteration ends with attn::cuda::synchronize(), so a median covers the device's work;
// peak_gpu_mb is the most memory attn's stream-ordered pool held during the timed case beyond what
// it held before (cudaMemPoolAttrUsedMemHigh).
#include <attn/cuda.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "models.hpp"

namespace bench {

using nlohmann::json;

namespace {

using clk = std::chrono::steady_clock;

struct CudaTiming {
  double median_ms = 0, samples_per_s = 0;
};

/// 5 warm-ups, then the median of `iters` timed runs of f, each waited for.
CudaTiming time_on_device(const std::function<void()>& f, std::size_t samples, int iters) {
  for (int i = 0; i < 5; ++i) f();
  attn::cuda::synchronize();
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = clk::now();
    f();
    attn::cuda::synchronize();
    ms.push_back(std::chrono::duration<double, std::milli>(clk::now() - t0).count());
  }
  std::nth_element(ms.begin(), ms.begin() + std::ptrdiff_t(ms.size() / 2), ms.end());
  const double med = ms[ms.size() / 2];
  return {med, double(samples) / (med / 1000)};
}

cudaMemPool_t device_pool() {
  int dev = 0;
  cudaMemPool_t pool{};
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetDefaultMemPool(&pool, dev) != cudaSuccess) return nullptr;
  return pool;
}
std::uint64_t pool_attribute(cudaMemPoolAttr a) {
  std::uint64_t v = 0;
  if (cudaMemPool_t pool = device_pool()) (void)cudaMemPoolGetAttribute(pool, a, &v);
  return v;
}
void reset_pool_peak() {
  std::uint64_t zero = 0;
  if (cudaMemPool_t pool = device_pool()) (void)cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero);
}

template <class Model>
CudaTiming train_on_device(Model& model, const BatchOn<attn::cuda>& b, int iters) {
  attn::optim::Adam<float, attn::cuda> opt(model, {.lr = 1e-3});
  attn::Tape tape;
  return time_on_device(
      [&] {
        auto loss = attn::cross_entropy(tape, model.forward(tape, b), b.labels);
        tape.backward(loss);
        opt.step();
        opt.zero_grad();
        tape.clear();
      },
      b.lengths.size(), iters);
}

/// Forward + backward of a layer over x (b, t, 256) with a fixed output gradient (R3, R5).
template <class F>
CudaTiming layer_on_device(attn::Rng& rng, std::size_t b, std::size_t t, int iters, const std::function<void()>& zero_grad, F&& f) {
  using Ten = attn::Tensor<float, attn::AnyShape, attn::cuda>;
  std::vector<float> xv(b * t * 256), sv(b * t * 256);
  for (auto& v : xv) v = float(rng.uniform(-1, 1));
  for (auto& v : sv) v = float(rng.uniform(-1, 1));
  attn::Var<float, Shape<dyn, dyn, 256>, attn::cuda> x(Ten::from({b, t, 256}, std::span<const float>(xv)), true);
  const Ten seed = Ten::from({b, t, 256}, std::span<const float>(sv));
  attn::Tape tape;
  return time_on_device(
      [&] {
        auto y = f(tape, x);
        tape.backward(y, seed);
        zero_grad();
        x.data()->grad = {};
        tape.clear();
      },
      b, iters);
}

}  // namespace

/// One case on the current CUDA device; its JSON record (as bench::run_case's, with peak_gpu_mb).
json run_case_cuda(const std::string& name, int iters) {
  using attn::cuda;
  attn::Rng rng(2024);
  json j{{"case", name}, {"impl", "attn"}, {"device", "cuda"}, {"precision", "fp32"}};
  attn::cuda::synchronize();
  const std::uint64_t held = pool_attribute(cudaMemPoolAttrUsedMemCurrent);
  reset_pool_peak();
  CudaTiming t;
  double flops = 0;
  if (name == "R1-h1" || name == "R1-h8") {
    const auto b = to_backend<cuda>(make_batch(rng, 20000, 2, std::vector<int>(32, 256)));
    if (name == "R1-h1") {
      R1<1, cuda> m;
      t = train_on_device(m, b, iters);
    } else {
      R1<8, cuda> m;
      t = train_on_device(m, b, iters);
    }
    flops = 3 * (attention_flops(1, 256, 128) + 2.0 * 128 * 2);
    j["mode"] = "train";
  } else if (name == "R2-h4" || name == "R2-h8") {
    const auto b = to_backend<cuda>(make_batch(rng, 6000, 15, std::vector<int>(64, 48)));
    if (name == "R2-h4") {
      R2<4, cuda> m;
      t = train_on_device(m, b, iters);
    } else {
      R2<8, cuda> m;
      t = train_on_device(m, b, iters);
    }
    flops = 3 * (bilstm_flops(1, 48, 128, 128) + attention_flops(1, 48, 256) + 2.0 * 256 * 15);
    j["mode"] = "train";
  } else if (name.rfind("R3-T", 0) == 0) {
    const std::size_t T = std::stoul(name.substr(4));
    nn::Attention<8, 256, float, cuda> layer(nullptr, "attn");
    const auto mask = attn::KeepMask(attn::Tensor<float, attn::AnyShape, cuda>::full({4, T}, 1.0f));
    t = layer_on_device(rng, 4, T, iters, [&] { layer.zero_grad(); }, [&](attn::Tape& tape, const auto& x) { return layer(tape, x, mask); });
    flops = 3 * attention_flops(1, double(T), 256);
    j["mode"] = "train";
  } else if (name.rfind("R5-T", 0) == 0) {
    constexpr std::int64_t w = 256;
    const std::size_t T = std::stoul(name.substr(4));
    nn::Attention<8, 256, float, cuda> layer(nullptr, "attn", {.window = w});
    t = layer_on_device(rng, 1, T, iters, [&] { layer.zero_grad(); }, [&](attn::Tape& tape, const auto& x) { return layer(tape, x); });
    flops = 3 * attention_flops(1, double(T), 256, band_pairs(double(T), double(w)));
    j["mode"] = "train";
    j["window"] = w;
  } else if (name == "R4-b1" || name == "R4-b64") {
    R2<4, cuda> m;
    m.eval();
    std::vector<BatchOn<cuda>> batches;
    if (name == "R4-b1") {
      for (int l : kR4Lengths) batches.push_back(to_backend<cuda>(make_batch(rng, 6000, 15, {l})));
    } else {
      batches.push_back(to_backend<cuda>(make_batch(rng, 6000, 15, kR4Lengths)));
    }
    t = time_on_device(
        [&] {
          for (auto& b : batches) {
            attn::NoGrad ctx;
            (void)m.forward(ctx, b);
          }
        },
        kR4Lengths.size(), iters);
    j["mode"] = "infer";
  } else {
    throw attn::ArgumentError("bench --device cuda: unknown case '" + name + "' (R1-h1 R1-h8 R2-h4 R2-h8 R3-T<n> R4-b1 R4-b64 R5-T<n>)");
  }
  j["median_ms"] = t.median_ms;
  j["samples_per_s"] = t.samples_per_s;
  if (flops > 0) j["gflops"] = flops * t.samples_per_s / 1e9;
  const std::uint64_t high = pool_attribute(cudaMemPoolAttrUsedMemHigh);
  j["peak_gpu_mb"] = double(high > held ? high - held : 0) / (1024.0 * 1024.0);
  return j;
}

/// Why attn::cuda cannot run here ("" when it can).
std::string cuda_unavailable_reason() { return attn::cuda::unavailable_reason(); }

}  // namespace bench
