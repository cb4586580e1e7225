// SPDX-License-Identifier: MIT
// attn's benchmark harness for the reference models of benchmarks/README.md, side by side with the
// PyTorch peer. Each case runs in a fresh process (for its peak RSS); attn and the peer are
// interleaved per case; the table gives samples/s, the attn/peer ratio and peak RSS, and for R1, R3
// and R5 the GFLOP/s as a fraction of the machine's FP32 GEMM ceiling.
// The ceiling is the machine's, not attn's: the best 2048^3 SGEMM rate among every GEMM at hand, each
// in its own process at the widest ISA it has: the BLAS attn links in each of its x86-64
// sub-configurations, Eigen's product, OpenBLAS (libopenblas.so.0) with its core type named, and
// oneDNN's dnnl_sgemm (libdnnl.so.2), the last two loaded at run time where installed.
//   bench --all [--peer "benchmarks/peer/run-peer.sh"] [--iters 20] [--cases R6 R6-ckpt]
//   bench --case R1-h8 [--iters 20]          # one case, one JSON line
//   bench --all --precision bf16 --peer ...  # attn under PrecisionScope(bf16), the peer under autocast
//   bench --all --precision int8 --peer ...  # R4 with quantize_dynamic on both sides
//   bench --ceiling                          # every GEMM's rate, the best named
#include <dlfcn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>

#include <attn/backend/cpu/blas.hpp>
#include <attn/backend/cpu/ceiling.hpp>

#include "models.hpp"
#include "onednn.hpp"

using nlohmann::json;
using clk = std::chrono::steady_clock;

namespace bench {

#if defined(ATTN_BENCH_CUDA)
/// bench_cuda.cu: one case with its model on attn::cuda, and why CUDA cannot run here ("" if it can).
json run_case_cuda(const std::string& name, int iters);
std::string cuda_unavailable_reason();
#endif

/// --device cuda: the cases on a GPU, each in a fresh process, as a table of samples/s, GFLOP/s and
/// the GPU memory attn's pool held (no peer: the PyTorch peer runs on the CPU).
inline int run_all_cuda(const std::string& self, const std::vector<std::string>& cases, int iters);

struct Timing {
  double median_ms;
  double samples_per_s;
  double step_pool_peak_mb = -1;  // fwd_bwd_case: the most host-pool memory a step held beyond what was held before it
  double saved_mb = -1;           // fwd_bwd_case: what the pool held beyond that after forward: the tape's saved values
  double saved_peak_mb = -1;      // fwd_bwd_case: the most it held when a backward pass began (a checkpoint's recomputation included)
};

/// 5 warm-ups, then the median of `iters` timed runs of f (which processes `samples` samples).
inline Timing time_it(const std::function<void()>& f, std::size_t samples, int iters, int warmup = 5) {
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    auto t0 = clk::now();
    f();
    ms.push_back(std::chrono::duration<double, std::milli>(clk::now() - t0).count());
  }
  // The median as Python's statistics.median (the peer's): the mean of the middle two for an even count.
  std::sort(ms.begin(), ms.end());
  const std::size_t n = ms.size();
  const double med = n % 2 ? ms[n / 2] : (ms[n / 2 - 1] + ms[n / 2]) / 2;
  return {med, double(samples) / (med / 1000)};
}

template <class Model>
Timing train_case(Model& model, const Batch& b, int iters) {
  attn::optim::Adam<float> opt(model, {.lr = 1e-3});
  attn::Tape tape;
  return time_it(
      [&] {
        auto loss = attn::cross_entropy(tape, model.forward(tape, b), b.labels);
        tape.backward(loss);
        opt.step();
        opt.zero_grad();
        tape.clear();
      },
      b.lengths.size(), iters);
}

/// Forward + backward of a layer (no optimizer): x (b, t, 256) with its gradient, a fixed output
/// gradient `seed`; `f(tape, x)` runs the forward. R3, R5 and R6.
template <class F>
Timing fwd_bwd_case(attn::Rng& rng, std::size_t b, std::size_t t, int iters, const std::function<void()>& zero_grad, F&& f) {
  Tensor<float> xv({b, t, 256});
  for (std::size_t i = 0; i < xv.numel(); ++i) xv[i] = float(rng.uniform(-1, 1));
  attn::Var<float, Shape<dyn, dyn, 256>> xin(xv, true);
  Tensor<float> seed({b, t, 256});
  for (std::size_t i = 0; i < seed.numel(); ++i) seed[i] = float(rng.uniform(-1, 1));
  attn::Tape tape;
  // The step's own peak in attn's host pool (activations kept for backward, gradients, scratch),
  // over what the parameters, input and seed already hold.
  const std::size_t held = attn::cpu::pool_stats().in_use_bytes;
  attn::cpu::reset_pool_peak();
  std::size_t saved = 0;
  Timing timing = time_it(
      [&] {
        auto y = f(tape, xin);
        saved = std::max(saved, attn::cpu::pool_stats().in_use_bytes - held);
        tape.backward(y, seed);
        zero_grad();
        xin.data()->grad = {};
        tape.clear();
      },
      b, iters);
  timing.step_pool_peak_mb = double(attn::cpu::pool_stats().peak_bytes - held) / (1024.0 * 1024.0);
  timing.saved_mb = double(saved) / (1024.0 * 1024.0);
  timing.saved_peak_mb = double(attn::cpu::pool_stats().saved_peak_bytes - held) / (1024.0 * 1024.0);
  return timing;
}

inline const char* kCaseNames =
    "R1-h1 R1-h8 R2-h4 R2-h8 R2-gru-h4 R3-T<n> (R3-T512 R3-T1024 R3-T2048 in --all; R3-T4096 on cuda) R4-b1 R4-b64 R5-T1024 R5-T4096 R5-T16384 "
    "R6 R6-ckpt";

/// The process's resident set now, in MB (Linux's /proc/self/statm; 0 where it cannot be read).
inline double current_rss_mb() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long size = 0, resident = 0;
  const int n = std::fscanf(f, "%lu %lu", &size, &resident);
  std::fclose(f);
  return n == 2 ? double(resident) * double(::sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0) : 0;
}

/// Runs one case in this process; returns its JSON record. Besides the peak RSS, the record gives
/// `base_rss_mb`, the RSS when the case began (the program and its libraries, before the model and
/// the data), and `rss_over_base_mb`, the peak above it: what the case itself took, comparable with
/// the peer's figure of the same name (whose base holds Python and libtorch, about 0.5 GB).
inline json run_case(const std::string& name, int iters, attn::Precision precision) {
  const double base_rss = current_rss_mb();
  attn::Rng rng(2024);
  const attn::PrecisionScope scope(precision);
  json j{{"case", name}, {"impl", "attn"}, {"threads", attn::cpu::threads()}, {"precision", attn::precision_name(precision)}};
  Timing t{};
  double flops = 0;  // per sample, for the ceiling fraction
  if (name == "R1-h1" || name == "R1-h8") {
    auto b = make_batch(rng, 20000, 2, std::vector<int>(32, 256));
    if (name == "R1-h1") {
      R1<1> m;
      t = train_case(m, b, iters);
    } else {
      R1<8> m;
      t = train_case(m, b, iters);
    }
    flops = 3 * (attention_flops(1, 256, 128) + 2.0 * 128 * 2);  // forward + backward ~ 3x forward
    j["mode"] = "train";
  } else if (name == "R2-h4" || name == "R2-h8") {
    auto b = make_batch(rng, 6000, 15, std::vector<int>(64, 48));
    if (name == "R2-h4") {
      R2<4> m;
      t = train_case(m, b, iters);
    } else {
      R2<8> m;
      t = train_case(m, b, iters);
    }
    flops = 3 * (bilstm_flops(1, 48, 128, 128) + attention_flops(1, 48, 256) + 2.0 * 256 * 15);
    j["mode"] = "train";
  } else if (name == "R2-gru-h4") {
    auto b = make_batch(rng, 6000, 15, std::vector<int>(64, 48));
    R2<4, attn::cpu, true> m;
    t = train_case(m, b, iters);
    flops = 3 * (bigru_flops(1, 48, 128, 128) + attention_flops(1, 48, 256) + 2.0 * 256 * 15);
    j["mode"] = "train";
    j["rnn"] = "gru";
  } else if (name.rfind("R3-T", 0) == 0) {
    const std::size_t T = std::stoul(name.substr(4));
    nn::Attention<8, 256> layer(nullptr, "attn");
    const auto mask = attn::KeepMask(Tensor<float>::full({4, T}, 1.0f));
    t = fwd_bwd_case(rng, 4, T, iters, [&] { layer.zero_grad(); }, [&](attn::Tape& tape, const auto& x) { return layer(tape, x, mask); });
    flops = 3 * attention_flops(1, double(T), 256);
    j["mode"] = "train";
  } else if (name == "R5-T1024" || name == "R5-T4096" || name == "R5-T16384") {
    // Local attention: each query sees the 256 keys on either side (and itself), B = 1, no padding mask.
    constexpr std::int64_t w = 256;
    const std::size_t T = std::stoul(name.substr(4));
    nn::Attention<8, 256> layer(nullptr, "attn", {.window = w});
    t = fwd_bwd_case(rng, 1, T, iters, [&] { layer.zero_grad(); }, [&](attn::Tape& tape, const auto& x) { return layer(tape, x); });
    flops = 3 * attention_flops(1, double(T), 256, band_pairs(double(T), double(w)));  // the band's products only
    j["mode"] = "train";
    j["window"] = w;
  } else if (name == "R6" || name == "R6-ckpt") {
    // A 4-layer pre-norm encoder, no dropout; R6-ckpt recomputes each layer during backward.
    const bool ckpt = name == "R6-ckpt";
    nn::TransformerEncoder<8, 256> enc(
        nullptr, "encoder",
        {.num_layers = 4, .layer = {.dim_feedforward = 1024, .dropout = 0.0, .norm_first = true}, .checkpoint = ckpt});
    t = fwd_bwd_case(rng, 4, 2048, iters, [&] { enc.zero_grad(); }, [&](attn::Tape& tape, const auto& x) { return enc(tape, x); });
    j["mode"] = "train";
    j["checkpoint"] = ckpt;
  } else if (name == "R4-b1" || name == "R4-b64") {
    R2<4> m;
    m.eval();
    if (precision == attn::Precision::int8) {  // quantize_dynamic, once, outside the timed passes
      const auto q = attn::nn::quantize_dynamic(m);
      j["int8_weights"] = q.weights;
    }
    std::vector<Batch> batches;
    if (name == "R4-b1") {
      for (int l : kR4Lengths) batches.push_back(make_batch(rng, 6000, 15, {l}));
    } else {
      batches.push_back(make_batch(rng, 6000, 15, kR4Lengths));
    }
    t = time_it(
        [&] {
          for (auto& b : batches) {
            attn::NoGrad ctx;
            auto y = m.forward(ctx, b);
            (void)y;
          }
        },
        kR4Lengths.size(), iters);
    j["mode"] = "infer";
  } else {
    throw attn::ArgumentError("bench: unknown case '" + name + "' (" + kCaseNames + ")");
  }
  j["median_ms"] = t.median_ms;
  j["samples_per_s"] = t.samples_per_s;
  if (t.step_pool_peak_mb >= 0) j["step_pool_peak_mb"] = t.step_pool_peak_mb;
  if (t.saved_mb >= 0) j["saved_after_forward_mb"] = t.saved_mb;
  if (t.saved_peak_mb >= 0) j["saved_peak_mb"] = t.saved_peak_mb;
  if (flops > 0) j["gflops"] = flops * t.samples_per_s / 1e9;
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  j["peak_rss_mb"] = double(ru.ru_maxrss) / 1024.0;
  j["base_rss_mb"] = base_rss;
  j["rss_over_base_mb"] = double(ru.ru_maxrss) / 1024.0 - base_rss;
  return j;
}

/// A row-major single-precision C (n, n) = A B, n x n x n, from one of the GEMMs at hand.
struct GemmImpl {
  std::string label;
  std::function<void(int, const float*, const float*, float*)> run;
};

/// "attn": cpu::gemm as attn is configured (its BLAS, else Eigen); "eigen": Eigen's product as compiled
/// here; "openblas", "onednn": the shared library loaded now. Throws with the reason when unavailable.
inline GemmImpl load_gemm(const std::string& impl) {
  if (impl == "attn") {
    return {attn::cpu_gemm_description(), [](int n, const float* a, const float* b, float* c) {
              attn::cpu::gemm<float>(attn::Trans::no, attn::Trans::no, n, n, n, 1.f, a, n, b, n, 0.f, c, n);
            }};
  }
  if (impl == "eigen") {
    using M = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    return {attn::eigen_gemm_description(), [](int n, const float* a, const float* b, float* c) {
              Eigen::Map<M> cm(c, n, n);
              cm.noalias() = Eigen::Map<const M>(a, n, n) * Eigen::Map<const M>(b, n, n);
            }};
  }
  if (impl == "openblas") {
    // RTLD_DEEPBIND: OpenBLAS's own symbols before the BLAS attn links (both export sgemm_).
    void* h = ::dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (!h) throw std::runtime_error(std::string("cannot load libopenblas.so.0: ") + ::dlerror());
    using Sgemm = void (*)(const char*, const char*, const int*, const int*, const int*, const float*, const float*, const int*,
                           const float*, const int*, const float*, float*, const int*);
    auto sgemm = reinterpret_cast<Sgemm>(::dlsym(h, "sgemm_"));
    auto core = reinterpret_cast<char* (*)()>(::dlsym(h, "openblas_get_corename"));
    auto threads = reinterpret_cast<void (*)(int)>(::dlsym(h, "openblas_set_num_threads"));
    if (!sgemm || !core) throw std::runtime_error("libopenblas.so.0 lacks sgemm_ or openblas_get_corename");
    if (threads) threads(attn::cpu::threads());
    return {fmt::format("OpenBLAS ({})", core()), [sgemm](int n, const float* a, const float* b, float* c) {
              const float one = 1, zero = 0;
              sgemm("N", "N", &n, &n, &n, &one, b, &n, a, &n, &zero, c, &n);  // row-major C = A B as C^T = B^T A^T
            }};
  }
  if (impl == "onednn") {
    const OneDnn dnnl;
    if (!dnnl.loaded()) throw std::runtime_error(dnnl.error);
    return {dnnl.name + " (dnnl_sgemm)", [sgemm = dnnl.sgemm](int n, const float* a, const float* b, float* c) {
              if (sgemm('N', 'N', n, n, n, 1.f, a, n, b, n, 0.f, c, n) != 0) throw std::runtime_error("dnnl_sgemm failed");
            }};
  }
  throw std::runtime_error("unknown GEMM '" + impl + "' (attn, eigen, openblas, onednn)");
}

/// One candidate for the ceiling: an implementation, in a process started with `env` set.
struct GemmCandidate {
  std::string impl, env;
};

/// The GEMMs worth trying on this machine: attn's as configured; where BLIS runs attn's float GEMMs
/// (not oneDNN), each x86-64 sub-configuration the CPU runs (BLIS 0.9's numbering: 0 skx, 3 haswell,
/// 6 zen3); Eigen; OpenBLAS at its own choice and with the core type of the widest ISA named; oneDNN.
inline std::vector<GemmCandidate> gemm_candidates() {
  const auto& f = attn::cpu::features();
  std::vector<GemmCandidate> c = {{"attn", ""}};
#if defined(ATTN_BLAS_BLIS) && !defined(ATTN_GEMM_DNNL)
  if (f.avx512) c.push_back({"attn", "BLIS_ARCH_TYPE=0"});
  if (f.avx2_fma) c.push_back({"attn", "BLIS_ARCH_TYPE=3"});
  if (f.amd && f.avx2_fma) c.push_back({"attn", "BLIS_ARCH_TYPE=6"});
#endif
  c.push_back({"eigen", ""});
  c.push_back({"openblas", ""});
  if (f.avx512) c.push_back({"openblas", "OPENBLAS_CORETYPE=SkylakeX"});
  if (f.avx2_fma) c.push_back({"openblas", "OPENBLAS_CORETYPE=Haswell"});
  if (f.amd && f.avx2_fma) c.push_back({"openblas", "OPENBLAS_CORETYPE=Zen"});
  c.push_back({"onednn", ""});
  return c;
}

/// The CPU's model name from /proc/cpuinfo ("" where there is none).
inline std::string cpu_model() {
  std::FILE* f = std::fopen("/proc/cpuinfo", "r");
  if (!f) return "";
  char line[512];
  std::string model;
  while (std::fgets(line, sizeof line, f)) {
    std::string l = line;
    if (l.rfind("model name", 0) == 0) {
      model = l.substr(l.find(':') + 2);
      if (!model.empty() && model.back() == '\n') model.pop_back();
      break;
    }
  }
  std::fclose(f);
  return model;
}

/// Runs a command, returns the last line of its stdout that parses as a JSON object.
inline json run_json(const std::string& cmd) {
  std::FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return json();
  std::string out;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  ::pclose(p);
  json last;
  std::size_t pos = 0;
  while (pos < out.size()) {
    auto e = out.find('\n', pos);
    auto line = out.substr(pos, e == std::string::npos ? std::string::npos : e - pos);
    if (!line.empty() && line[0] == '{') {
      try {
        last = json::parse(line);
      } catch (...) {
      }
    }
    if (e == std::string::npos) break;
    pos = e + 1;
  }
  return last;
}

}  // namespace bench

namespace bench {
inline int run_all_cuda(const std::string& self, const std::vector<std::string>& cases, int iters) {
  fmt::print("attn on CUDA (FP32), {} timed iterations per case\n{:<10} {:>6} {:>12} {:>10} {:>12}\n", iters, "case", "mode",
             "attn smp/s", "GFLOP/s", "peak GPU MB");
  json rows = json::array();
  int failed = 0;
  for (auto& c : cases) {
    json a = run_json(fmt::format("{} --device cuda --case {} --iters {}", self, c, iters));
    if (!a.is_object()) {
      fmt::print(stderr, "bench: case {} gave no result (its error is above)\n", c);
      ++failed;
      continue;
    }
    fmt::print("{:<10} {:>6} {:>12.1f} {:>10} {:>12.0f}\n", c, a.value("mode", "?"), a.value("samples_per_s", 0.0),
               a.contains("gflops") ? fmt::format("{:.0f}", a.value("gflops", 0.0)) : "", a.value("peak_gpu_mb", 0.0));
    std::fflush(stdout);
    rows.push_back(a);
  }
  fmt::print("\n{}\n", json{{"device", "cuda"}, {"rows", rows}}.dump());
  return failed ? 1 : 0;
}
}  // namespace bench

int main(int argc, char** argv) {
  std::string one, peer;
  int iters = 20;
  bool all = false, gemm = false, ceiling_only = false;
  std::string gemm_impl = "attn", precision_arg = "fp32", device = "cpu";
  // R6 and R6-ckpt (seconds per step on 2 cores) only when named in --cases.
  std::vector<std::string> cases = {"R1-h1",    "R1-h8", "R2-h4",  "R2-h8",    "R2-gru-h4", "R3-T512",  "R3-T1024",
                                    "R3-T2048", "R4-b1", "R4-b64", "R5-T1024", "R5-T4096",  "R5-T16384"};
  CLI::App app{"attn benchmarks: the reference models of benchmarks/README.md, against the PyTorch peer"};
  app.add_option("--case", one, "run one case in this process and print its JSON record");
  app.add_flag("--all", all, "run every case (each in a fresh process) and print the table");
  auto* cases_opt = app.add_option("--cases", cases,
                 std::string("cases for --all, of ") + bench::kCaseNames + " (default: all but R6 and R6-ckpt, which take minutes)");
  app.add_option("--peer", peer, "peer command, run per case with '--case X --mode M --json --iters N --precision P --threads T' appended (T: attn's "
                 "threads); its '--gemm --json --threads T' joins the ceiling's candidates (empty: no peer)");
  app.add_option("--iters", iters, "timed iterations per case (after 5 warm-ups)")->check(CLI::Range(1, 1000000));
  app.add_option("--precision", precision_arg,
                 "fp32, bf16 or int8: the products of attn's linear ops and LSTMs in bf16 (attn::PrecisionScope; the peer runs "
                 "torch.autocast bf16), or int8 for the inference cases R4-b1 and R4-b64 (nn::quantize_dynamic; the peer "
                 "runs torch's quantize_dynamic)");
  app.add_option("--device", device, "cpu, or cuda: the cases R1-R5 with their models on attn::cuda (a build with the CUDA backend, a GPU)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_flag("--gemm", gemm, "print one GEMM's FP32 2048^3 rate (--gemm-impl) as JSON and exit");
  app.add_option("--gemm-impl", gemm_impl, "the GEMM for --gemm: attn, eigen, openblas or onednn");
  app.add_flag("--ceiling", ceiling_only, "measure every GEMM at hand (each in its own process), print them and the best, and exit");
  CLI11_PARSE(app, argc, argv);
  attn::cpu::set_threads(0);
  try {
    const attn::Precision precision = attn::parse_precision(precision_arg, "--precision");
    if (precision == attn::Precision::int8) {
      if (cases_opt->count() == 0) cases = {"R4-b1", "R4-b64"};  // the inference cases
      for (const auto& c : one.empty() ? cases : std::vector<std::string>{one})
        if (c != "R4-b1" && c != "R4-b64")
          throw attn::ArgumentError("bench: --precision int8 runs the inference cases R4-b1 and R4-b64 only, not " + c);
      if (gemm) throw attn::ArgumentError("bench: --gemm measures the FP32 GEMM; gemm_shapes gives the int8 rates");
    }
    if (device == "cuda") {
#if defined(ATTN_BENCH_CUDA)
      if (const std::string why = bench::cuda_unavailable_reason(); !why.empty())
        throw attn::Error("--device cuda: no CUDA device: " + why);
      if (precision != attn::Precision::fp32) throw attn::ArgumentError("bench --device cuda: the CUDA backend computes in FP32");
      if (!one.empty()) {
        fmt::print("{}\n", bench::run_case_cuda(one, iters).dump());
        return 0;
      }
      if (!all) throw attn::ArgumentError("bench --device cuda: give --case NAME or --all");
      if (cases_opt->count() == 0)
        cases = {"R1-h1", "R1-h8", "R2-h4", "R2-h8", "R3-T512", "R3-T1024", "R3-T2048", "R3-T4096", "R4-b1", "R4-b64", "R5-T4096", "R5-T16384"};
      return bench::run_all_cuda(argv[0], cases, iters);
#else
      throw attn::Error("--device cuda: attn was built without CUDA (configure with -DATTN_CUDA=ON where nvcc is installed)");
#endif
    }
    if (gemm) {
      const auto impl = bench::load_gemm(gemm_impl);
      const double rate = attn::gemm_gflops(impl.run);  // 256^3 ... 2048^3, the 2048^3 median
      fmt::print("{}\n", json{{"gemm_gflops", rate}, {"impl", impl.label}, {"threads", attn::cpu::threads()}}.dump());
      return 0;
    }
    if (!one.empty()) {
      fmt::print("{}\n", bench::run_case(one, iters, precision).dump());
      return 0;
    }
    if (!all && !ceiling_only) {
      fmt::print(stderr, "bench: give --case NAME, --all or --ceiling (see --help)\n");
      return 2;
    }
    const std::string self = argv[0];
    fmt::print("{} ({} threads), attn kernels {} (machine: {}), GEMM {}, precision {}\n", bench::cpu_model(), attn::cpu::threads(),
               attn::isa_name(attn::cpu::isa()), attn::isa_name(attn::cpu::isa_supported()), attn::cpu_gemm_description(),
               attn::precision_name(precision));
    // The machine's FP32 GEMM ceiling: the best of every GEMM at hand, each in a fresh process.
    double ceil_gflops = 0;
    std::string ceil_label;
    json gemms = json::array();
    for (const auto& c : bench::gemm_candidates()) {
      const std::string cmd = (c.env.empty() ? "" : c.env + " ") + self + " --gemm --gemm-impl " + c.impl + " 2>/dev/null";
      const json r = bench::run_json(cmd);
      if (!r.contains("gemm_gflops")) continue;  // not installed here
      const double g = r.value("gemm_gflops", 0.0);
      const std::string label = r.value("impl", c.impl) + (c.env.empty() ? "" : ", " + c.env);
      fmt::print("  GEMM 2048^3 {:>7.1f} GFLOP/s  {}\n", g, label);
      gemms.push_back({{"impl", label}, {"gemm_gflops", g}});
      if (g > ceil_gflops) ceil_gflops = g, ceil_label = label;
    }
    if (!peer.empty()) {  // the GEMM the peer's products run on (torch.mm: MKL or oneDNN)
      const json r = bench::run_json(fmt::format("{} --gemm --json --threads {} 2>/dev/null", peer, attn::cpu::threads()));
      if (r.is_object() && r.contains("gflops") && r.value("threads", -1) == attn::cpu::threads()) {
        const double g = r.value("gflops", 0.0);
        const std::string label = "the peer's torch.mm";
        fmt::print("  GEMM 2048^3 {:>7.1f} GFLOP/s  {}\n", g, label);
        gemms.push_back({{"impl", label}, {"gemm_gflops", g}});
        if (g > ceil_gflops) ceil_gflops = g, ceil_label = label;
      }
    }
    fmt::print("FP32 GEMM ceiling: {:.1f} GFLOP/s ({})\n\n", ceil_gflops, ceil_label);
    if (ceiling_only) {
      fmt::print("{}\n", json{{"ceiling_gflops", ceil_gflops}, {"ceiling_impl", ceil_label}, {"gemms", gemms}}.dump());
      return 0;
    }
    // RSS: the peak, and (+) the peak above the RSS the case began with (run_case's base_rss_mb).
    fmt::print("{:<10} {:>6} {:>12} {:>12} {:>8} {:>14} {:>14} {:>10}  {}\n", "case", "mode", "attn smp/s", "peer smp/s", "ratio",
               "attn RSS (+)", "peer RSS (+)", "of ceiling", "peer impl");
    json rows = json::array();
    for (auto& c : cases) {
      json a = bench::run_json(fmt::format("{} --case {} --iters {} --precision {}", self, c, iters, precision_arg));
      if (!a.is_object()) {
        fmt::print(stderr, "bench: case {} gave no result (its error is above)\n", c);
        a = json::object();
      }
      json p = json::object();  // stays empty without a peer
      if (!peer.empty()) {
        // The peer runs on as many threads as attn (run-peer.sh sets OMP_NUM_THREADS and torch's
        // threads from --threads); a result on another number is not compared.
        p = bench::run_json(fmt::format("{} --case {} --mode {} --json --iters {} --precision {} --threads {}", peer, c,
                                        a.value("mode", "train") == "infer" ? "infer" : "train", iters, precision_arg,
                                        attn::cpu::threads()));
        if (!p.is_object()) {
          fmt::print(stderr, "bench: the peer gave no result for case {} (its error is above)\n", c);
          p = json::object();
        } else if (p.value("threads", -1) != attn::cpu::threads()) {
          fmt::print(stderr, "bench: the peer ran case {} on {} threads, attn on {}: not compared\n", c,
                     p.contains("threads") ? p["threads"].dump() : "an unknown number of", attn::cpu::threads());
          p = json::object();
        }
      }
      const double as = a.value("samples_per_s", 0.0), ps = p.value("samples_per_s", 0.0);
      const auto rss = [](const json& r) {
        return r.contains("peak_rss_mb") ? fmt::format("{:.0f}M (+{:.0f})", r.value("peak_rss_mb", 0.0), r.value("rss_over_base_mb", 0.0))
                                         : std::string("-");
      };
      fmt::print("{:<10} {:>6} {:>12.1f} {:>12} {:>8} {:>14} {:>14} {:>10}  {}\n", c, a.value("mode", "?"), as,
                 ps > 0 ? fmt::format("{:.1f}", ps) : "-", ps > 0 ? fmt::format("{:.2f}x", as / ps) : "-", rss(a), rss(p),
                 a.contains("gflops") && ceil_gflops > 0 ? fmt::format("{:.0f}%", 100 * a.value("gflops", 0.0) / ceil_gflops) : "",
                 p.value("impl", ""));
      std::fflush(stdout);
      rows.push_back({{"attn", a}, {"peer", p}});
    }
    fmt::print("\n{}\n", json{{"ceiling_gflops", ceil_gflops}, {"ceiling_impl", ceil_label}, {"gemms", gemms}, {"isa", attn::isa_name(attn::cpu::isa())}, {"precision", attn::precision_name(precision)}, {"rows", rows}}.dump());
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
