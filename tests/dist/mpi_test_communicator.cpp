// SPDX-License-Identifier: MIT
// dist::Communicator under mpirun: collectives give the right numbers on every rank, long buffers
// are split into several MPI calls, bad arguments and MPI failures become attn errors.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include <attn/dist.hpp>

namespace dist = attn::dist;

TEST_CASE("communicator: rank, size and is_main agree with MPI_COMM_WORLD") {
  dist::Communicator comm;
  int r = -1, n = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  CHECK(comm.rank() == r);
  CHECK(comm.size() == n);
  CHECK(comm.is_main() == (r == 0));
  CHECK(dist::is_main() == (r == 0));
  CHECK(dist::world_rank() == r);
  CHECK(dist::world_size() == n);
  // The duplicate is a communicator of its own, not MPI_COMM_WORLD itself.
  int cmp = MPI_UNEQUAL;
  MPI_Comm_compare(comm.native(), MPI_COMM_WORLD, &cmp);
  CHECK(cmp == MPI_CONGRUENT);
}

TEST_CASE("communicator: sum and mean all-reduce in place, float and double") {
  dist::Communicator comm;
  const int n = comm.size(), r = comm.rank();
  std::vector<float> f(5);
  std::vector<double> d(5);
  for (int i = 0; i < 5; ++i) {
    f[i] = float((r + 1) * (i + 1));
    d[i] = 0.5 * (r + 1) - i;
  }
  comm.all_reduce(std::span<float>(f));
  comm.all_reduce(std::span<double>(d), dist::ReduceOp::mean);
  const double rank_sum = n * (n + 1) / 2.0;  // sum of r + 1
  for (int i = 0; i < 5; ++i) {
    CHECK(f[i] == Approx(rank_sum * (i + 1)));
    CHECK(d[i] == Approx(0.5 * rank_sum / n - i));
  }
}

TEST_CASE("communicator: the mean of integers is truncated, not zero") {
  dist::Communicator comm;
  const int n = comm.size(), r = comm.rank();
  std::vector<std::int64_t> v(3, 2 * (r + 1));
  std::vector<std::int32_t> w(2, 7 + r);
  comm.all_reduce(std::span<std::int64_t>(v), dist::ReduceOp::mean);
  comm.all_reduce(std::span<std::int32_t>(w), dist::ReduceOp::mean);
  for (auto x : v) CHECK(x == std::int64_t(n + 1));          // sum 2 (1 + ... + n) = n (n + 1)
  for (auto x : w) CHECK(x == std::int32_t((7 * n + n * (n - 1) / 2) / n));
}

TEST_CASE("communicator: buffers longer than max_message_elements go in several calls") {
  dist::Communicator comm({.max_message_elements = 3});
  std::vector<double> v(10);
  std::iota(v.begin(), v.end(), 1.0);
  for (auto& x : v) x *= comm.rank() + 1;
  auto p = comm.pending("chunked");
  comm.start_all_reduce(v.data(), v.size(), dist::ReduceOp::sum, p);
  CHECK(p.size() == 4);  // 3 + 3 + 3 + 1
  CHECK(p.bytes() == 10 * sizeof(double));
  p.wait();
  CHECK(p.empty());
  const double rank_sum = comm.size() * (comm.size() + 1) / 2.0;
  for (std::size_t i = 0; i < v.size(); ++i) CHECK(v[i] == Approx(rank_sum * double(i + 1)));

  std::vector<std::int64_t> b(7, comm.rank() == 0 ? 42 : -1);
  comm.broadcast(std::span<std::int64_t>(b), 0);
  for (auto x : b) CHECK(x == 42);
}

TEST_CASE("communicator: broadcast from the last rank, all_gather, barrier") {
  dist::Communicator comm;
  const int last = comm.size() - 1;
  std::vector<float> v(4, float(comm.rank()));
  comm.broadcast(std::span<float>(v), last);
  for (float x : v) CHECK(x == float(last));

  auto all = comm.all_gather<std::uint64_t>(std::uint64_t(100 + comm.rank()));
  REQUIRE(all.size() == std::size_t(comm.size()));
  for (int r = 0; r < comm.size(); ++r) CHECK(all[r] == std::uint64_t(100 + r));
  comm.barrier();
}

TEST_CASE("communicator: a Pending that goes out of scope completes its operations") {
  dist::Communicator comm;
  std::vector<float> v(3, 1.f);
  {
    auto p = comm.pending("scoped");
    comm.start_all_reduce(v.data(), v.size(), dist::ReduceOp::sum, p);
  }
  for (float x : v) CHECK(x == float(comm.size()));
}

TEST_CASE("communicator: bad arguments are ArgumentErrors, MPI failures attn::Errors") {
  dist::Communicator comm({.timeout = std::chrono::milliseconds(1500)});
  CHECK(comm.timeout() == std::chrono::milliseconds(1500));
  std::vector<float> v(2);
  CHECK_THROWS_WITH(comm.broadcast(std::span<float>(v), comm.size()), Catch::Contains("root " + std::to_string(comm.size())));
  CHECK_THROWS_AS(comm.broadcast(std::span<float>(v), -1), attn::ArgumentError);
  CHECK_THROWS_AS(dist::Communicator({.max_message_elements = 0}), attn::ArgumentError);

  // The communicator returns MPI errors instead of aborting: a negative count is reported.
  MPI_Request r = MPI_REQUEST_NULL;
  CHECK_THROWS_WITH(dist::detail::check_mpi(MPI_Ibcast(v.data(), -1, MPI_FLOAT, 0, comm.native(), &r), "MPI_Ibcast"),
                    Catch::StartsWith("attn::dist: MPI_Ibcast failed: ") && Catch::Contains("count", Catch::CaseSensitive::No));
  CHECK_THROWS_AS(dist::detail::check_mpi(MPI_ERR_TRUNCATE, "x"), attn::Error);
  CHECK_NOTHROW(dist::detail::check_mpi(MPI_SUCCESS, "x"));
}

TEST_CASE("communicator: ATTN_DIST_TIMEOUT sets the watchdog, and a bad value is rejected") {
  const char* old = std::getenv("ATTN_DIST_TIMEOUT");
  const std::string saved = old ? old : "";
  ::setenv("ATTN_DIST_TIMEOUT", "2.5", 1);
  {
    dist::Communicator comm;
    CHECK(comm.timeout() == std::chrono::milliseconds(2500));
  }
  for (const char* bad : {"abc", "-3", "0", "5s", ""}) {
    ::setenv("ATTN_DIST_TIMEOUT", bad, 1);
    CHECK_THROWS_WITH(dist::Communicator(), Catch::Contains("ATTN_DIST_TIMEOUT") && Catch::Contains(std::string("'") + bad + "'"));
  }
  if (old) ::setenv("ATTN_DIST_TIMEOUT", saved.c_str(), 1);
  else ::unsetenv("ATTN_DIST_TIMEOUT");
}
