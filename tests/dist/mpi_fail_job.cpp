// SPDX-License-Identifier: MIT
// A data-parallel job that fails on purpose, for the failure tests (expect_job_failure.cmake):
//   mpi_fail_job throw    rank 1 throws mid-step, uncaught: the terminate handler aborts the job
//   mpi_fail_job unwind   rank 1 throws through the Environment: its destructor aborts the job
//   mpi_fail_job hang     rank 1 stops issuing collectives: rank 0's watchdog aborts the job
//   mpi_fail_job ok       no failure (the driver's control run: exit 0)
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>

#include <attn/dist.hpp>

#include "tiny_classifier.hpp"

namespace dist = attn::dist;

namespace {
void train(const std::string& mode, const dist::Communicator& comm) {
  dist_test::TinyClassifier<> model;
  dist::DataParallel<float> ddp(model, comm);
  attn::optim::Adam<float> opt(model);
  const dist_test::Dataset data(64);
  const auto mine = dist::DistributedSampler(data.n, comm.size(), comm.rank()).indices();
  for (std::size_t step = 0; step < 6; ++step) {
    auto b = data.gather({mine.begin() + step * 4, mine.begin() + step * 4 + 4});
    attn::Tape tape;
    ddp.zero_grad();
    auto loss = attn::cross_entropy(tape, model.forward(tape, b.ids, b.mask), b.labels);
    tape.backward(loss);
    if (step == 3 && comm.rank() == 1) {
      if (mode == "throw" || mode == "unwind") throw std::runtime_error("injected failure on rank 1 at step 3");
      if (mode == "hang") std::this_thread::sleep_for(std::chrono::minutes(10));
    }
    ddp.all_reduce_gradients();
    opt.step();
  }
  if (comm.is_main()) std::printf("finished 6 steps\n");
}
}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "throw" && mode != "unwind" && mode != "hang" && mode != "ok") {
    std::fprintf(stderr, "usage: mpi_fail_job throw|unwind|hang|ok\n");
    return 2;
  }
  if (mode == "unwind") {
    try {
      dist::Environment env(argc, argv);
      dist::Communicator comm;
      train(mode, comm);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "not reached: the Environment aborts while the exception unwinds (%s)\n", e.what());
    }
    return 0;
  }
  dist::Environment env(argc, argv);
  dist::Communicator comm;
  train(mode, comm);
  return 0;
}
