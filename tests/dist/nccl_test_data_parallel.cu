// SPDX-License-Identifier: MIT
// dist::NcclCommunicator and DataParallel<float, cuda, NcclCommunicator> on CUDA memory. Under
// mpirun (one rank per GPU) the NCCL id travels over MPI; started alone it runs as a job of one,
// without MPI. Without a CUDA device it exits 77 (skipped).
#include <catch2/catch.hpp>

#include "../catch_run.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <span>
#include <vector>

#include <attn/backend/cuda.hpp>
#include <attn/dist.hpp>
#include <attn/autograd/reduce.hpp>
#include <attn/nn/embedding.hpp>
#include <attn/nn/module.hpp>

namespace dist = attn::dist;
using attn::cuda;

namespace {

const dist::NcclCommunicator* g_nccl = nullptr;

/// Two CUDA parameters, registered like a layer's.
struct DeviceParams : attn::nn::Module {
  attn::Var<float, attn::AnyShape, cuda> w = register_parameter<float, attn::AnyShape, cuda>("w", {5, 3});
  attn::Var<float, attn::AnyShape, cuda> b = register_parameter<float, attn::AnyShape, cuda>("b", {7});
};

std::vector<float> host(const attn::Tensor<float, attn::AnyShape, cuda>& t) { return t.to_vector(); }

}  // namespace

TEST_CASE("nccl: mean and sum all-reduce, broadcast and all_gather on device memory") {
  const auto& c = *g_nccl;
  const int n = c.size(), r = c.rank();
  auto t = attn::Tensor<float, attn::AnyShape, cuda>::full({1000}, float(r + 1));
  auto u = attn::Tensor<float, attn::AnyShape, cuda>::full({3}, float(r + 1));
  {
    auto p = c.pending("test all-reduce");
    c.start_all_reduce(t.data(), t.numel(), dist::ReduceOp::mean, p);
    c.start_all_reduce(u.data(), u.numel(), dist::ReduceOp::sum, p);
    CHECK(p.size() == 2);
    CHECK(p.bytes() == 1003 * sizeof(float));
    p.wait();
    CHECK(p.empty());
  }
  for (float x : host(t)) REQUIRE(x == Approx((n + 1) / 2.0));
  for (float x : host(u)) REQUIRE(x == Approx(n * (n + 1) / 2.0));

  auto v = attn::Tensor<float, attn::AnyShape, cuda>::full({4}, float(r));
  auto p = c.pending("test broadcast");
  c.start_broadcast(v.data(), v.numel(), n - 1, p);
  p.wait();
  for (float x : host(v)) CHECK(x == float(n - 1));
  CHECK_THROWS_AS(c.start_broadcast(v.data(), v.numel(), n, p), attn::ArgumentError);

  auto all = c.all_gather<std::uint64_t>(std::uint64_t(10 + r));
  REQUIRE(all.size() == std::size_t(n));
  for (int k = 0; k < n; ++k) CHECK(all[k] == std::uint64_t(10 + k));
}

TEST_CASE("nccl: DataParallel keeps CUDA gradients in device buckets and averages them") {
  const auto& c = *g_nccl;
  DeviceParams model, reference;
  if (c.rank() != 0) model.init(77);
  dist::DataParallel<float, cuda, dist::NcclCommunicator> ddp(model, c, {.first_bucket_cap_bytes = 64});
  CHECK(host(model.w.raw()) == host(reference.w.raw()));  // rank 0's values everywhere
  CHECK(ddp.buckets().size() == 2);
  for (const auto& bk : ddp.buckets().buckets())
    for (const auto& e : bk.entries) CHECK(dist::GradBuckets<float, cuda>::attached(bk, e));
  ddp.zero_grad();
  for (auto& v : ddp.params()) cuda::fill<float>(v.data()->grad.data(), v.numel(), float(c.rank() + 1));
  ddp.all_reduce_gradients();
  CHECK(ddp.last_stats().reattached == 0);
  for (auto& v : ddp.params())
    for (float g : host(v.data()->grad)) REQUIRE(g == Approx((c.size() + 1) / 2.0));
  ddp.zero_grad();
  for (float g : host(model.b.data()->grad)) CHECK(g == 0.f);
}

/// A row-sparse table on CUDA (nn::Embedding with .sparse): its gradient is a whole-table device
/// buffer whose rows are recorded on the host.
struct SparseTable : attn::nn::Module {
  attn::nn::Embedding<4, float, cuda> emb{this, "emb", 10, {.sparse = true}};
};

TEST_CASE("nccl: a row-sparse table stays row-sparse: the union of the ranks' rows, the mean of their gradients") {
  const auto& c = *g_nccl;
  const int n = c.size(), r = c.rank();
  SparseTable model;
  dist::DataParallel<float, cuda, dist::NcclCommunicator> ddp(model, c);
  // Rank r looks up row 1 + r % 8 once and row 9 twice: sum over the lookups gives gradient rows
  // of ones (row 9: twos).
  for (int round = 0; round < 2; ++round) {
    ddp.zero_grad();
    const std::vector<std::int32_t> ids{1 + r % 8, 9, 9};
    const auto t = attn::Tensor<std::int32_t, attn::AnyShape, cuda>::from({3}, std::span<const std::int32_t>(ids));
    attn::Tape tape;
    tape.backward(attn::sum(tape, model.emb(tape, t)));
    ddp.all_reduce_gradients();
    auto& d = *model.emb.weight.data();
    REQUIRE(d.grad_is_row_sparse());  // not made dense by the reduce
    std::vector<std::size_t> rows = d.grad_rows;
    std::sort(rows.begin(), rows.end());
    std::vector<std::size_t> want{9};
    for (int k = 0; k < n; ++k) want.push_back(std::size_t(1 + k % 8));
    std::sort(want.begin(), want.end());
    want.erase(std::unique(want.begin(), want.end()), want.end());
    CHECK(rows == want);
    const auto g = host(d.grad);
    for (std::size_t row = 0; row < 10; ++row) {
      double expect = row == 9 ? 2.0 : 0.0;
      for (int k = 0; k < n; ++k)
        if (std::size_t(1 + k % 8) == row) expect += 1.0 / n;
      for (std::size_t j = 0; j < 4; ++j) CHECK(g[row * 4 + j] == Approx(expect));
    }
  }
}

int main(int argc, char** argv) {
  if (!cuda::available()) {
    std::printf("SKIPPED: no CUDA device (%s)\n", cuda::unavailable_reason().c_str());
    return 77;
  }
  const bool under_mpi = std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK");
  std::unique_ptr<dist::Environment> env;
  std::unique_ptr<dist::Communicator> mpi;
  std::unique_ptr<dist::NcclCommunicator> nccl;
  if (under_mpi) {
    env = std::make_unique<dist::Environment>(argc, argv);
    mpi = std::make_unique<dist::Communicator>();
    int devices = 0;
    cudaGetDeviceCount(&devices);
    cudaSetDevice(dist::node_local_rank(*mpi) % devices);
    nccl = std::make_unique<dist::NcclCommunicator>(*mpi);
  } else {
    ncclUniqueId id{};
    dist::detail::check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    nccl = std::make_unique<dist::NcclCommunicator>(id, 1, 0);
  }
  g_nccl = nccl.get();
  int version = 0;
  ncclGetVersion(&version);
  std::printf("NCCL %d, rank %d of %d, device %d, %s\n", version, nccl->rank(), nccl->size(), nccl->device(), under_mpi ? "MPI" : "no MPI");
  const int failed = attn_test::run_catch(argc, argv);
  return failed ? 1 : 0;
}
