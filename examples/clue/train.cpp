// SPDX-License-Identifier: MIT
// Training and evaluating one head count of the CLUE model on the CPU (train_heads, declared in run.hpp).
#include "train.hpp"

namespace clue {

RunResult train_heads(std::size_t heads, const Options& o, const Prepared& p, examples::Parallel& par, const examples::RunPlan& plan) {
  return train_variant<attn::cpu>(heads, o, p, par, plan);
}

}  // namespace clue
