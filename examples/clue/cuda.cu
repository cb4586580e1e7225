// SPDX-License-Identifier: MIT
// The CLUE program with its model on attn::cuda (--device cuda): training, evaluation and the report
// (train.hpp), predict and --bench (serve.hpp), compiled by nvcc.
#include <attn/cuda.hpp>

#include "serve.hpp"
#include "train.hpp"

namespace clue {

RunResult train_heads_cuda(std::size_t heads, const Options& o, const Prepared& p, examples::Parallel& par, const examples::RunPlan& plan) {
  return attn::dispatch<1, 2, 4, 8>(heads, "--heads", [&]<std::size_t H>() { return train_variant<H, attn::cuda>(o, p, par, plan); });
}

int predict_cuda(std::size_t heads, const fs::path& dir, const Trained& tr, const std::vector<std::string>& texts,
                 const std::string& keywords, std::size_t top, const std::string& dump) {
  return attn::dispatch<1, 2, 4, 8>(heads, "config.json heads",
                                    [&]<std::size_t H>() { return predict<H, attn::cuda>(dir, tr, texts, keywords, top, dump); });
}

void run_bench_cuda(std::size_t heads, const Options& o) {
  attn::dispatch<1, 2, 4, 8>(heads, "--heads", [&]<std::size_t H>() { run_bench<H, attn::cuda>(o); });
}

}  // namespace clue
