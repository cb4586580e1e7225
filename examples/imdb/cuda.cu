// SPDX-License-Identifier: MIT
// The IMDb program with its model on attn::cuda (--device cuda): training, evaluation, attention
// entropy and heatmaps (train.hpp) and predict (serve.hpp), compiled by nvcc.
#include <attn/cuda.hpp>

#include "serve.hpp"
#include "train.hpp"

namespace imdb {

RunResult train_run_cuda(const RunSpec& r, const Options& o, const Prepared& p, examples::Parallel& par, const examples::RunPlan& plan) {
  return attn::dispatch<1, 2, 4, 8, 16>(r.heads, "--heads",
                                        [&]<std::size_t H>() { return train_variant<H, attn::cuda>(r, o, p, par, plan); });
}

int predict_cuda(std::size_t heads, const fs::path& dir, const std::vector<std::string>& texts, const std::string& dump) {
  return attn::dispatch<1, 2, 4, 8, 16>(heads, "config.json heads", [&]<std::size_t H>() { return predict<H, attn::cuda>(dir, texts, dump); });
}

}  // namespace imdb
