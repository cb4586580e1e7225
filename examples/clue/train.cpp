// SPDX-License-Identifier: MIT
// Training and evaluating one head count of the CLUE model on the CPU (train_heads, declared in run.hpp).
#include "train.hpp"

namespace clue {

RunResult train_heads(std::size_t heads, const Options& o, const Prepared& p, examples::Parallel& par, const examples::RunPlan& plan) {
  return attn::dispatch<1, 2, 4, 8>(heads, "--heads", [&]<std::size_t H>() { return train_variant<H, attn::cpu>(o, p, par, plan); });
}

}  // namespace clue
