// SPDX-License-Identifier: MIT
// The IMDb program with its model on attn::cuda (--device cuda): training, evaluation, attention
// entropy and heatmaps (train.hpp) and predict (serve.hpp), compiled by nvcc.
#include <attn/cuda.hpp>

#include "heads.hpp"
#include "serve.hpp"
#include "train.hpp"

namespace imdb {

template std::unique_ptr<AnyEncoder<attn::cuda>> make_encoder<attn::cuda>(std::size_t, nn::Module*, const ModelConfig&);

RunResult train_run_cuda(const RunSpec& r, const Options& o, const Prepared& p, examples::Parallel& par, const examples::RunPlan& plan) {
  return train_variant<attn::cuda>(r, o, p, par, plan);
}

int predict_cuda(std::size_t heads, const fs::path& dir, const std::vector<std::string>& texts, const std::string& dump) {
  return predict<attn::cuda>(heads, dir, texts, dump);
}

}  // namespace imdb
