// SPDX-License-Identifier: MIT
// The CLUE program with its model on attn::cuda (--device cuda): training, evaluation and the report
// (train.hpp), predict and --bench (serve.hpp), compiled by nvcc.
#include <attn/cuda.hpp>

#include "heads.hpp"
#include "serve.hpp"
#include "train.hpp"

namespace clue {

template std::unique_ptr<AnyAttention<attn::cuda>> make_attention<attn::cuda>(std::size_t, nn::Module*, const ModelConfig&);

RunResult train_heads_cuda(std::size_t heads, const Options& o, const Prepared& p, examples::Parallel& par, const examples::RunPlan& plan) {
  return train_variant<attn::cuda>(heads, o, p, par, plan);
}

int predict_cuda(const fs::path& dir, const Trained& tr, const std::vector<std::string>& texts, const std::string& keywords, std::size_t top,
                 const std::string& dump) {
  return predict<attn::cuda>(dir, tr, texts, keywords, top, dump);
}

void run_bench_cuda(std::size_t heads, const Options& o) {
  run_bench<attn::cuda>(heads, o);
}

}  // namespace clue
