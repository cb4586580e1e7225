// SPDX-License-Identifier: MIT
// dist::DataParallel under mpirun: parameters broadcast from rank 0, gradients living in the
// buckets, averaging, and the central property: N ranks training on shards of each global batch
// end with the parameters one process reaches on the whole batches.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <string>
#include <vector>

#include <attn/dist.hpp>

#include "tiny_classifier.hpp"

namespace dist = attn::dist;
namespace optim = attn::optim;
using dist_test::Dataset;
using dist_test::TinyClassifier;

namespace {

constexpr std::size_t global_batch = 8, steps = 4;
constexpr std::uint64_t sampler_seed = 3;

/// One process, whole global batches in the sampler's epoch order.
template <class Model, class MakeOpt>
void train_single(Model& model, const Dataset& data, MakeOpt make_opt) {
  auto opt = make_opt(model);
  const auto order = dist::DistributedSampler(data.n, 1, 0, {.seed = sampler_seed}).indices();
  for (std::size_t k = 0; k < steps; ++k) {
    auto b = data.gather({order.begin() + k * global_batch, order.begin() + (k + 1) * global_batch});
    attn::Tape tape;
    auto loss = attn::cross_entropy(tape, model.forward(tape, b.ids, b.mask), b.labels);
    tape.backward(loss);
    opt.step();
    opt.zero_grad();
  }
}

/// Every rank, its shard of each global batch.
template <class Model, class MakeOpt>
void train_parallel(Model& model, dist::DataParallel<float>& ddp, const Dataset& data, MakeOpt make_opt,
                    bool optimizer_zero_grad = false) {
  auto opt = make_opt(model);
  const std::size_t local = global_batch / std::size_t(ddp.world_size());
  const auto mine = dist::DistributedSampler(data.n, ddp.world_size(), ddp.rank(), {.seed = sampler_seed}).indices();
  for (std::size_t k = 0; k < steps; ++k) {
    auto b = data.gather({mine.begin() + k * local, mine.begin() + (k + 1) * local});
    attn::Tape tape;
    if (!optimizer_zero_grad) ddp.zero_grad();
    auto loss = attn::cross_entropy(tape, model.forward(tape, b.ids, b.mask), b.labels);
    ddp.backward(tape, loss);
    opt.step();
    if (optimizer_zero_grad) opt.zero_grad();
  }
}

auto adam = [](const attn::nn::Module& m) { return optim::Adam<float>(m, {.lr = 1e-2}); };
auto sgd = [](const attn::nn::Module& m) { return optim::Sgd<float>(m, {.lr = 0.2, .momentum = 0.9}); };

}  // namespace

TEST_CASE("data parallel: rank 0's parameters reach every rank at construction") {
  dist::Communicator comm;
  TinyClassifier<> model, reference;  // both default-initialised: rank 0's values everywhere
  if (comm.rank() != 0) model.init(1234 + std::uint64_t(comm.rank()));
  if (comm.size() > 1 && comm.rank() != 0) REQUIRE(dist_test::max_param_diff(model, reference) > 0.1);
  dist::DataParallel<float> ddp(model, comm);
  CHECK(dist_test::max_param_diff(model, reference) == 0.0);
  CHECK(ddp.params().size() == model.named_parameters().size());
}

TEST_CASE("data parallel: gradients are views of the buckets and backward writes into them") {
  dist::Communicator comm;
  TinyClassifier<> model;
  dist::DataParallel<float> ddp(model, comm, {.bucket_cap_bytes = 4096, .first_bucket_cap_bytes = 256});
  const auto& buckets = ddp.buckets().buckets();
  REQUIRE(buckets.size() > 2);
  // Bucket 0 starts with the last registered parameter (the head's bias).
  CHECK(buckets[0].entries.front().name == "head.bias");
  std::size_t covered = 0;
  for (const auto& b : buckets)
    for (const auto& e : b.entries) {
      CHECK(dist::GradBuckets<float>::attached(b, e));
      CHECK(e.offset % 16 == 0);
      ++covered;
    }
  CHECK(covered == model.named_parameters().size());

  Dataset data(4);
  auto batch = data.gather({0, 1, 2, 3});
  for (int step = 0; step < 2; ++step) {
    ddp.zero_grad();
    attn::Tape tape;
    auto loss = attn::cross_entropy(tape, model.forward(tape, batch.ids, batch.mask), batch.labels);
    ddp.backward(tape, loss);
    CHECK(ddp.last_stats().reattached == 0);  // no copy: backward accumulated in place
    CHECK(ddp.last_stats().buckets == buckets.size());
    CHECK(ddp.last_stats().bytes == ddp.buckets().bytes());
    double norm = 0;
    for (const auto& b : buckets)
      for (float g : b.storage.to_vector()) norm += double(g) * g;
    CHECK(norm > 0);
  }
}

TEST_CASE("data parallel: all_reduce_gradients averages over the ranks") {
  dist::Communicator comm;
  TinyClassifier<> model;
  dist::DataParallel<float> ddp(model, comm);
  ddp.zero_grad();
  for (auto& v : ddp.params()) v.data()->grad.fill(float(comm.rank() + 1));
  ddp.all_reduce_gradients();
  const float expect = float(comm.size() + 1) / 2;
  for (auto& v : ddp.params())
    for (float g : v.data()->grad.to_vector()) REQUIRE(g == Approx(expect));
  ddp.zero_grad();
  for (auto& v : ddp.params())
    for (float g : v.data()->grad.to_vector()) REQUIRE(g == 0.f);
}

TEST_CASE("data parallel: N ranks on half batches match one process on whole batches (Adam, SGD)") {
  dist::Communicator comm;
  REQUIRE(global_batch % std::size_t(comm.size()) == 0);
  const Dataset data(global_batch * steps);
  // Adam: everything but the attention's key bias, whose exact gradient is zero (see max_param_diff).
  auto run = [&](auto make_opt, dist::DataParallelOptions opt, bool optimizer_zero_grad, bool skip_key_bias) {
    TinyClassifier<> single, parallel, start;
    if (comm.rank() != 0) parallel.init(99);
    train_single(single, data, make_opt);
    dist::DataParallel<float> ddp(parallel, comm, opt);
    train_parallel(parallel, ddp, data, make_opt, optimizer_zero_grad);
    INFO("rank " << comm.rank() << " of " << comm.size());
    CHECK(dist_test::max_param_diff(single, start) > 1e-2);  // training moved the parameters
    INFO("max |difference| per parameter:\n" << dist_test::param_diff_report(parallel, single));
    CHECK(dist_test::max_param_diff(parallel, single, skip_key_bias) < 1e-5);
    return ddp.last_stats();
  };
  SECTION("Adam, default buckets") { run(adam, {}, false, true); }
  SECTION("SGD with momentum, many small buckets, started while backward runs") {
    auto stats = run(sgd, {.bucket_cap_bytes = 2048, .first_bucket_cap_bytes = 128}, false, false);
    INFO(stats.buckets << " buckets, " << stats.overlapped << " started before the last backward step");
    CHECK(stats.buckets > 3);
    CHECK(stats.overlapped > 0);              // the output layer's buckets start early ...
    CHECK(stats.overlapped < stats.buckets);  // ... the embedding's only after the last step
  }
  SECTION("Adam with the optimizer's zero_grad: still right, by copying into the buckets") {
    auto stats = run(adam, {}, true, true);
    CHECK(stats.reattached == TinyClassifier<>().named_parameters().size());
  }
}

TEST_CASE("data parallel: a row-sparse table gathered by rows matches one process (SparseAdam) and sends only its rows") {
  dist::Communicator comm;
  REQUIRE(global_batch % std::size_t(comm.size()) == 0);
  const Dataset data(global_batch * steps);
  // A table of 10x the ids' range: the rows all ranks send stay far below the table's bytes, so
  // they are gathered (the whole-table fallback has its own test below).
  using Sparse = TinyClassifier<dist_test::vocab * 10, true>;
  const std::size_t local = global_batch / std::size_t(comm.size());
  // The rows the last global batch looks up (padding excluded): what one process's gradient holds.
  std::vector<std::size_t> want;
  for (int r = 0; r < comm.size(); ++r) {
    const auto shard = dist::DistributedSampler(data.n, comm.size(), r, {.seed = sampler_seed}).indices();
    for (std::size_t i = (steps - 1) * local; i < steps * local; ++i)
      for (std::size_t t = 0; t < dist_test::seq; ++t)
        if (const auto id = data.ids[shard[i] * dist_test::seq + t]; id != 0) want.push_back(std::size_t(id));
  }
  std::sort(want.begin(), want.end());
  want.erase(std::unique(want.begin(), want.end()), want.end());
  std::size_t bucket_bytes[2] = {0, 0};
  for (bool gather : {true, false}) {
    INFO((gather ? "gather_sparse" : "in a bucket") << ", rank " << comm.rank() << " of " << comm.size());
    Sparse single, parallel, start;
    if (comm.rank() != 0) parallel.init(99);
    train_single(single, data, adam);
    dist::DataParallel<float> ddp(parallel, comm, {.gather_sparse = gather});
    train_parallel(parallel, ddp, data, adam);
    CHECK(dist_test::max_param_diff(single, start) > 1e-2);
    INFO("max |difference| per parameter:\n" << dist_test::param_diff_report(parallel, single));
    CHECK(dist_test::max_param_diff(parallel, single, true) < 1e-5);
    auto& d = *parallel.tokens.weight.data();
    REQUIRE(d.grad_is_row_sparse());
    std::vector<std::size_t> rows = d.grad_rows;
    std::sort(rows.begin(), rows.end());
    CHECK(rows == want);  // the union of the ranks' rows
    const auto stats = ddp.last_stats();
    bucket_bytes[gather] = stats.bytes;
    if (gather) {
      CHECK(d.grad_compact);  // never a whole-table buffer
      CHECK(stats.gathered_rows > 0);
      CHECK(stats.gathered_rows <= local * dist_test::seq);
      // Every rank holds the same gradient: the same rows in the same order, the same values.
      std::uint64_t h = 1469598103934665603ULL;
      d.for_each_grad_span([&](const float* p, std::size_t n) {
        for (std::size_t i = 0; i < n; ++i) h = (h ^ std::bit_cast<std::uint32_t>(p[i])) * 1099511628211ULL;
      });
      for (auto r : d.grad_rows) h = (h ^ r) * 1099511628211ULL;
      const auto all = comm.all_gather<std::uint64_t>(h);
      for (auto x : all) CHECK(x == all[0]);
    } else {
      CHECK(stats.gathered_rows == 0);
      CHECK_FALSE(d.grad_compact);
    }
  }
  // Gathered, the table is in no bucket (the buckets' padding aside).
  const std::size_t table_bytes = dist_test::vocab * 10 * dist_test::dim * sizeof(float);
  CHECK(bucket_bytes[1] + table_bytes <= bucket_bytes[0] + 256);
}

TEST_CASE("data parallel: a gathered row-sparse table: whole-table forms, ranks without rows, dense accumulation") {
  dist::Communicator comm;
  const Dataset data(global_batch);
  const std::size_t local = global_batch / std::size_t(comm.size());
  const auto mine = dist::DistributedSampler(data.n, comm.size(), comm.rank(), {.seed = sampler_seed}).indices();
  const auto b = data.gather({mine.begin(), mine.begin() + std::ptrdiff_t(local)});
  const auto padding = attn::Tensor<std::int32_t>::zeros(b.ids.dims());  // every id the padding row
  using Sparse = TinyClassifier<dist_test::vocab * 10, true>;  // gathered, not all-reduced whole (see above)
  Sparse model;
  dist::DataParallel<float> ddp(model, comm);
  auto& d = *model.tokens.weight.data();
  // One step on this rank's batch (or only padding), with something done to the table's gradient
  // between backward and the reduce; returns the reduced gradient as a whole table.
  auto step = [&](bool pad, auto&& between) {
    ddp.zero_grad();
    attn::Tape tape;
    tape.backward(attn::cross_entropy(tape, model.forward(tape, pad ? padding : b.ids, b.mask), b.labels));
    between();
    ddp.all_reduce_gradients();
    return model.tokens.weight.grad().to_vector();
  };
  auto max_diff = [](const std::vector<float>& x, const std::vector<float>& y) {
    REQUIRE(x.size() == y.size());
    double m = 0;
    for (std::size_t i = 0; i < x.size(); ++i) m = std::max(m, double(std::abs(x[i] - y[i])));
    return m;
  };
  const auto gathered = step(false, [] {});
  REQUIRE(gathered.size() == model.tokens.weight.numel());
  CHECK(ddp.last_stats().gathered_rows > 0);
  CHECK(ddp.last_stats().bytes == ddp.buckets().bytes());  // the table is in no bucket and went by rows
  {
    INFO("rank 0 reads its gradient (Var::grad()) before the reduce: its rows are packed from the whole table");
    const auto got = step(false, [&] {
      if (comm.rank() == 0) (void)model.tokens.weight.grad();
    });
    CHECK(max_diff(got, gathered) == 0.0);
  }
  {
    INFO("only rank 0 looks up rows; the others send none");
    const auto got = step(comm.rank() != 0, [] {});
    // Rank 0's own rows alone, divided by the rank count.
    const auto solo = [&] {
      model.zero_grad();
      attn::Tape tape;
      tape.backward(attn::cross_entropy(tape, model.forward(tape, b.ids, b.mask), b.labels));
      return model.tokens.weight.grad().to_vector();
    };
    std::vector<float> want = comm.rank() == 0 ? solo() : std::vector<float>(got.size(), 0.f);
    comm.broadcast(std::span<float>(want), 0);
    for (auto& w : want) w /= float(comm.size());
    CHECK(max_diff(got, want) < 1e-6);
  }
  {
    INFO("no rank looks up a row: a gradient with no rows, as one process would have");
    const auto got = step(true, [] {});
    CHECK(d.grad_is_row_sparse());
    CHECK(d.grad_rows.empty());
    CHECK(max_diff(got, std::vector<float>(got.size(), 0.f)) == 0.0);
  }
  {
    INFO("rank 0 accumulates densely (as a dense use of the table would): the whole table is all-reduced");
    const auto whole = step(false, [&] {
      if (comm.rank() == 0) (void)d.grad_ref();
    });
    CHECK_FALSE(d.grad_is_row_sparse());  // dense on every rank
    CHECK(ddp.last_stats().bytes == ddp.buckets().bytes() + model.tokens.weight.numel() * sizeof(float));
    CHECK(ddp.last_stats().gathered_rows == 0);
    CHECK(max_diff(whole, gathered) < 1e-6);
  }
  ddp.zero_grad();
  CHECK_FALSE(d.has_grad());
}

TEST_CASE("data parallel: a row-sparse table whose rows would outweigh it is all-reduced whole, and stays row-sparse") {
  dist::Communicator comm;
  // 8 rows of 16 floats (64 bytes; 72 with its index when gathered): every rank looks up all 7
  // rows but the padding row, so the rows of two ranks or more outweigh the table.
  constexpr std::size_t rows = 8, local = 3, seq = dist_test::seq;
  using Small = TinyClassifier<rows, true>;
  Small model;
  dist::DataParallel<float> ddp(model, comm);
  auto& d = *model.tokens.weight.data();
  std::vector<std::int32_t> ids(local * seq);
  std::vector<std::int32_t> labels(local);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = std::int32_t(1 + (i + std::size_t(comm.rank()) * 3) % (rows - 1));
  for (std::size_t i = 0; i < local; ++i) labels[i] = std::int32_t((i + std::size_t(comm.rank())) % dist_test::classes);
  const auto x = attn::Tensor<std::int32_t>::from({local, seq}, std::span<const std::int32_t>(ids));
  const auto keep = attn::Tensor<float>::from({local, seq}, std::span<const float>(std::vector<float>(local * seq, 1.f)));
  const auto y = attn::Tensor<std::int32_t>::from({local}, std::span<const std::int32_t>(labels));
  // The mean of the ranks' own gradients of the table.
  model.zero_grad();
  {
    attn::Tape tape;
    tape.backward(attn::cross_entropy(tape, model.forward(tape, x, keep), y));
  }
  std::vector<float> want = model.tokens.weight.grad().to_vector();
  comm.all_reduce(std::span<float>(want));
  for (auto& w : want) w /= float(comm.size());
  const bool whole = std::size_t(comm.size()) * (rows - 1) * (8 + dist_test::dim * sizeof(float)) > rows * dist_test::dim * sizeof(float) + rows;
  CHECK(whole == (comm.size() >= 2));
  for (int round = 0; round < 2; ++round) {
    INFO("step " << round << ", rank " << comm.rank() << " of " << comm.size());
    ddp.zero_grad();
    CHECK_FALSE(d.has_grad());  // the whole-table buffer of a fallback is not kept
    attn::Tape tape;
    tape.backward(attn::cross_entropy(tape, model.forward(tape, x, keep), y));
    CHECK(d.grad_compact);
    ddp.all_reduce_gradients();
    REQUIRE(d.grad_is_row_sparse());
    CHECK(d.grad_compact == !whole);
    std::vector<std::size_t> got_rows = d.grad_rows;
    std::sort(got_rows.begin(), got_rows.end());
    CHECK(got_rows == std::vector<std::size_t>{1, 2, 3, 4, 5, 6, 7});
    const auto stats = ddp.last_stats();
    CHECK(stats.gathered_rows == (whole ? 0 : rows - 1));
    CHECK(stats.bytes == ddp.buckets().bytes() + (whole ? rows * dist_test::dim * sizeof(float) + rows : 0));
    const auto got = model.tokens.weight.grad().to_vector();
    REQUIRE(got.size() == want.size());
    double m = 0;
    for (std::size_t i = 0; i < got.size(); ++i) m = std::max(m, double(std::abs(got[i] - want[i])));
    CHECK(m < 1e-6);
  }
}

TEST_CASE("data parallel: ranks that would reduce a sparse table differently all throw") {
  dist::Communicator comm;
  if (comm.size() < 2) return;  // needs two ranks to differ
  TinyClassifier<dist_test::vocab, true> model;
  CHECK_THROWS_WITH(dist::DataParallel<float>(model, comm, {.gather_sparse = comm.rank() == 0}),
                    Catch::Contains("holds a model with other parameters (names, order, shapes or sparse gradients)"));
}

TEST_CASE("data parallel: ranks with different models all throw") {
  dist::Communicator comm;
  if (comm.size() < 2) return;  // needs two ranks to differ
  if (comm.rank() == 1) {
    TinyClassifier<dist_test::vocab + 1> other;
    CHECK_THROWS_WITH(dist::DataParallel<float>(other, comm), Catch::Contains("rank 1 holds a model with other parameters"));
  } else {
    TinyClassifier<> model;
    CHECK_THROWS_WITH(dist::DataParallel<float>(model, comm), Catch::Contains("rank 1 holds a model with other parameters"));
  }
}

TEST_CASE("data parallel: frozen parameters are not reduced, and bad options are rejected") {
  dist::Communicator comm;
  TinyClassifier<> model;
  model.tokens.weight.data()->requires_grad = false;
  dist::DataParallel<float> ddp(model, comm);
  CHECK(ddp.params().size() == model.named_parameters().size() - 1);
  for (const auto& b : ddp.buckets().buckets())
    for (const auto& e : b.entries) CHECK(e.name != "embed.weight");
  CHECK_THROWS_AS(dist::DataParallel<float>(model, comm, {.root = comm.size()}), attn::ArgumentError);
  CHECK_THROWS_AS(dist::DataParallel<double>(model, comm), attn::ArgumentError);  // float model
}

TEST_CASE("data parallel: frozen parameters are broadcast from the root too, as torch's DDP does") {
  dist::Communicator comm;
  TinyClassifier<> model, reference;  // both default-initialised: rank 0's values everywhere
  if (comm.rank() != 0) model.init(77 + std::uint64_t(comm.rank()));
  model.tokens.weight.data()->requires_grad = false;  // frozen, different on every rank but 0
  if (comm.size() > 1 && comm.rank() != 0) REQUIRE(dist_test::max_param_diff(model, reference) > 0.1);
  dist::DataParallel<float> ddp(model, comm);
  CHECK(dist_test::max_param_diff(model, reference) == 0.0);
}

TEST_CASE("data parallel: a backward step that does not list the Var it writes is caught") {
  dist::Communicator comm;
  TinyClassifier<> model;
  dist::DataParallel<float> ddp(model, comm, {.bucket_cap_bytes = 2048, .first_bucket_cap_bytes = 128});
  const Dataset data(8);
  auto b = data.gather({0, 1, 2, 3});
  attn::Tape tape;
  ddp.zero_grad();
  // A step recorded first (so it runs last) that adds to the output layer's weight without naming
  // it: that parameter's bucket has started by then.
  const auto& w = ddp.params().back().data();
  auto x = attn::Var<float>(attn::Tensor<float>::zeros({1}), true);
  tape.push(x.data(), {}, [w] { w->grad_ref().fill(1.f); });
  auto loss = attn::cross_entropy(tape, model.forward(tape, b.ids, b.mask), b.labels);
  CHECK_THROWS_WITH(ddp.backward(tape, loss), Catch::Contains("without listing that Var"));
}

namespace {
/// TinyClassifier's layers registered in the reverse of the order they run in, so the default
/// bucket layout (reverse registration order) puts the embedding, completed last, in bucket 0.
struct Reordered : attn::nn::Module {
  attn::nn::Linear<dist_test::dim, dist_test::classes> head{this, "head"};
  attn::nn::Attention<2, dist_test::dim> attention{this, "attn"};
  attn::nn::Embedding<dist_test::dim> tokens{this, "embed", dist_test::vocab, {.padding_idx = 0, .init_std = 0.5}};
  template <class Ctx>
  auto forward(Ctx& ctx, const attn::Tensor<std::int32_t>& ids, const attn::Tensor<float>& mask) {
    auto x = tokens(ctx, ids);
    const attn::KeepMask keep(mask);
    auto y = attention(ctx, attn::Var<float, attn::Shape<attn::dyn, attn::dyn, dist_test::dim>>(x), keep);
    return head(ctx, attn::nn::masked_mean(ctx, y, keep));
  }
};
}  // namespace

TEST_CASE("data parallel: after the first step the buckets follow the order backward completes them") {
  dist::Communicator comm;
  const Dataset data(global_batch * steps);
  Reordered single, parallel;
  if (comm.rank() != 0) parallel.init(99);
  dist::DataParallel<float> ddp(parallel, comm, {.bucket_cap_bytes = 2048, .first_bucket_cap_bytes = 128});
  optim::Sgd<float> opt_single(single, {.lr = 0.2, .momentum = 0.9}), opt(parallel, {.lr = 0.2, .momentum = 0.9});
  const auto order = dist::DistributedSampler(data.n, 1, 0, {.seed = sampler_seed}).indices();
  const std::size_t local = global_batch / std::size_t(comm.size());
  std::vector<std::size_t> overlapped;
  for (std::size_t k = 0; k < steps; ++k) {
    {
      auto b = data.gather({order.begin() + k * global_batch, order.begin() + (k + 1) * global_batch});
      attn::Tape tape;
      tape.backward(attn::cross_entropy(tape, single.forward(tape, b.ids, b.mask), b.labels));
      opt_single.step();
      opt_single.zero_grad();
    }
    const auto mine = dist::DistributedSampler(data.n, comm.size(), comm.rank(), {.seed = sampler_seed}).indices();
    auto b = data.gather({mine.begin() + k * local, mine.begin() + (k + 1) * local});
    attn::Tape tape;
    ddp.zero_grad();
    ddp.backward(tape, attn::cross_entropy(tape, parallel.forward(tape, b.ids, b.mask), b.labels));
    opt.step();
    overlapped.push_back(ddp.last_stats().overlapped);
  }
  INFO("buckets started during backward per step: " << overlapped[0] << ", " << overlapped[1] << ", ...");
  CHECK(ddp.buckets_rebuilt());
  CHECK(overlapped[0] == 0);  // the embedding's bucket, first in line, is complete only at the end
  CHECK(overlapped[1] > 0);
  CHECK(ddp.buckets().buckets().front().entries.front().name.rfind("head.", 0) == 0);  // complete first
  INFO("max |difference| per parameter:\n" << dist_test::param_diff_report(parallel, single));
  CHECK(dist_test::max_param_diff(parallel, single) < 1e-5);  // the rebuild moved the gradients intact
}
