// SPDX-License-Identifier: MIT
// Training and evaluating one run of the IMDb program on the CPU (train_run, declared in run.hpp).
#include "train.hpp"

namespace imdb {

RunResult train_run(const RunSpec& r, const Options& o, const Prepared& p, examples::Parallel& par, const examples::RunPlan& plan) {
  return train_variant<attn::cpu>(r, o, p, par, plan);
}

}  // namespace imdb
