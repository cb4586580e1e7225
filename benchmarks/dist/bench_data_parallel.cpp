// SPDX-License-Identifier: MIT
// Data-parallel training throughput of the R1 attention classifier (benchmarks/README.md:
// Embedding(20000, 128) + learned positions, Attention<8, 128>, masked mean-pool, Linear(128, 2)),
// with the global batch split over the MPI ranks. Prints samples/s and the all-reduce volume/time.
//   OMP_NUM_THREADS=1 mpirun --bind-to none -np 2 bench_dist_data_parallel --batch 32 --steps 20
// run.sh compares 2 ranks x 1 thread with 1 rank x 2 threads in one run.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include <attn/attn.hpp>
#include <attn/dist.hpp>
#include <attn/nn/attention.hpp>

namespace dist = attn::dist;
namespace nn = attn::nn;
using attn::dyn;

namespace {

constexpr std::size_t dim = 128;

template <std::size_t Heads>
struct Classifier : nn::Module {
  Classifier(std::size_t vocab, std::size_t max_len) : tokens(this, "embed", vocab, {.padding_idx = 0}), positions(this, "pos", max_len) {}
  nn::Embedding<dim> tokens;
  nn::Embedding<dim> positions;
  nn::Attention<Heads, dim> attention{this, "attn"};
  nn::Linear<dim, 2> head{this, "head"};

  /// ids, pos (B, T) int32, mask (B, T) with 1 = real token -> logits (B, 2).
  template <class Ctx>
  auto forward(Ctx& ctx, const attn::Tensor<std::int32_t>& ids, const attn::Tensor<std::int32_t>& pos, const attn::Tensor<float>& mask) {
    auto x = attn::Var<float, attn::Shape<dyn, dyn, dim>>(attn::add(ctx, tokens(ctx, ids), positions(ctx, pos)));
    const attn::KeepMask keep(mask);
    return head(ctx, nn::masked_mean(ctx, attention(ctx, x, keep), keep));
  }
};

struct Args {
  std::size_t batch = 32, seq = 256, vocab = 20000;
  int heads = 8, steps = 20, warmup = 5, reduce_reps = 20;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

template <std::size_t Heads>
int run(const Args& a, const dist::Communicator& comm) {
  const std::size_t world = std::size_t(comm.size());
  if (a.batch % world != 0) {
    if (comm.is_main()) std::fprintf(stderr, "--batch %zu is not divisible by %zu ranks\n", a.batch, world);
    return 2;
  }
  const std::size_t local = a.batch / world;
  Classifier<Heads> model(a.vocab, a.seq);
  dist::DataParallel<float> ddp(model, comm);
  attn::optim::Adam<float> opt(model, {.lr = 1e-3});

  // Synthetic full-length batches, different on every rank (seeded by rank), as benchmarks/README.md describes.
  attn::Rng rng(1234 + std::uint64_t(comm.rank()));
  std::vector<std::int32_t> ids(local * a.seq), pos(local * a.seq), labels(local);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    ids[i] = std::int32_t(1 + rng.below(a.vocab - 1));
    pos[i] = std::int32_t(i % a.seq);
  }
  for (auto& l : labels) l = std::int32_t(rng.below(2));
  auto t_ids = attn::Tensor<std::int32_t>::from({local, a.seq}, std::span<const std::int32_t>(ids));
  auto t_pos = attn::Tensor<std::int32_t>::from({local, a.seq}, std::span<const std::int32_t>(pos));
  auto t_mask = attn::Tensor<float>::full({local, a.seq}, 1.f);
  auto t_lab = attn::Tensor<std::int32_t>::from({local}, std::span<const std::int32_t>(labels));

  std::vector<double> step_s, reduce_s;
  std::size_t overlapped = 0;
  attn::Tape tape;
  for (int s = 0; s < a.warmup + a.steps; ++s) {
    comm.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    ddp.zero_grad();
    auto loss = attn::cross_entropy(tape, model.forward(tape, t_ids, t_pos, t_mask), t_lab);
    ddp.backward(tape, loss);
    opt.step();
    tape.clear();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s >= a.warmup) {
      step_s.push_back(dt);
      // What backward did not hide: from the end of the backward pass to the last completion.
      reduce_s.push_back(ddp.last_stats().seconds - ddp.last_stats().backward_seconds);
      overlapped = ddp.last_stats().overlapped;
    }
  }
  // The all-reduce alone, same buckets, no compute: its time per step and bus bandwidth.
  std::vector<double> bare;
  for (int r = 0; r < a.reduce_reps; ++r) {
    comm.barrier();
    ddp.all_reduce_gradients();
    bare.push_back(ddp.last_stats().seconds);
  }
  // The same buckets through blocking MPI_Allreduce (Open MPI's tuned algorithms), for reference.
  std::vector<double> blocking;
  for (int r = 0; r < a.reduce_reps; ++r) {
    comm.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    for (auto& b : const_cast<dist::GradBuckets<float>&>(ddp.buckets()).buckets())
      dist::detail::check_mpi(MPI_Allreduce(MPI_IN_PLACE, b.data(), int(b.numel()), MPI_FLOAT, MPI_SUM, comm.native()), "MPI_Allreduce");
    blocking.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  const double step = median(step_s), red = median(reduce_s), bare_red = median(bare), block_red = median(blocking);
  const double mb = double(ddp.buckets().bytes()) / 1e6;
  // Ring all-reduce bus bandwidth: each rank sends and receives 2 (N - 1) / N of the volume.
  const double busbw = world > 1 ? mb * 2.0 * double(world - 1) / double(world) / bare_red / 1e3 : 0.0;
  if (comm.is_main())
    std::printf("{\"ranks\": %zu, \"threads\": %d, \"heads\": %zu, \"batch\": %zu, \"T\": %zu, \"samples_per_s\": %.2f, "
                "\"step_ms\": %.2f, \"allreduce_ms_exposed\": %.3f, \"allreduce_ms_bare\": %.3f, \"allreduce_ms_blocking\": %.3f, \"allreduce_MB_per_step\": %.3f, "
                "\"buckets\": %zu, \"buckets_started_during_backward\": %zu, \"params\": %zu, \"busbw_GBps\": %.3f}\n",
                world, attn::cpu::threads(), Heads, a.batch, a.seq, double(a.batch) / step, step * 1e3, red * 1e3, bare_red * 1e3, block_red * 1e3, mb,
                ddp.buckets().size(), overlapped, model.parameter_count(), busbw);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  dist::Environment env(argc, argv);
  Args a;
  CLI::App app{"data-parallel training throughput of the R1 attention classifier"};
  app.add_option("--batch", a.batch, "global batch (split over the ranks)");
  app.add_option("--seq", a.seq, "sequence length T");
  app.add_option("--vocab", a.vocab, "vocabulary size");
  app.add_option("--heads", a.heads, "attention heads: 1 or 8")->check(CLI::IsMember({1, 8}));
  app.add_option("--steps", a.steps, "timed steps");
  app.add_option("--warmup", a.warmup, "untimed steps first");
  app.add_option("--reduce-reps", a.reduce_reps, "repetitions of the bare all-reduce");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return env.is_main() ? app.exit(e) : 1;
  }
  attn::cpu::set_threads(0);
  dist::Communicator comm;
  return a.heads == 1 ? run<1>(a, comm) : run<8>(a, comm);
}
