// SPDX-License-Identifier: MIT
// The Catch2 main of the MPI test programs: starts MPI, runs the same test cases in the same order
// on every rank, and fails the job when any rank fails.
#include "../catch_run.hpp"

#include <cstdio>

#include <attn/dist/environment.hpp>

int main(int argc, char** argv) {
  attn::dist::Environment env(argc, argv);
  int failed = attn_test::run_catch(argc, argv) != 0 ? 1 : 0;
  int any = failed;
  attn::dist::detail::check_mpi(MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
  if (any && env.is_main()) std::fprintf(stderr, "attn dist tests: a rank reported failures\n");
  return any;
}
