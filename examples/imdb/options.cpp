// SPDX-License-Identifier: MIT
// The IMDb program's command line.
#include "options.hpp"

#include <attn/nn/encoder.hpp>

#include "../common/cli.hpp"

namespace imdb {

namespace {
/// --activation's choices: nn::Activation's names.
std::vector<std::string> activation_choices() {
  std::vector<std::string> names;
  for (const attn::nn::Activation a : attn::nn::activations) names.emplace_back(attn::nn::activation_name(a));
  return names;
}
}  // namespace

std::optional<int> parse_command_line(int argc, char** argv, Command& cmd) {
  Options& o = cmd.options;
  CLI::App app{"IMDb sentiment classification with single- and multi-head self-attention (attn)"};
  app.set_help_all_flag("--help-all");
  app.add_option("--data", o.data, "aclImdb root holding train/{pos,neg} (and optionally test/)");
  auto* heads = app.add_option("--heads", o.heads, "attention heads, one of 1, 2, 4, 8, 16")->check(examples::count(1, 16));
  app.add_flag("--sweep", o.sweep, "train every head count 1, 2, 4, 8, 16 and print the comparison tables")->excludes(heads);
  app.add_option("--seeds", o.seeds,
                 "train every run once per seed (initialisation, data order, dropout; comma-separated, distinct) on one validation split "
                 "(--split-seed, default --seed), and report each head count's mean and the per-seed differences between head counts; "
                 "the NB-LR scores and --pretrain-epochs tables are computed once, from --seed, and shared")
      ->delimiter(',')
      ->check(examples::count(0));
  app.add_option("--layers", o.layers, "Transformer encoder layers (attention + feed-forward)")->check(examples::count(1, kMaxLayers));
  app.add_option("--window", o.window, "sliding-window attention: each token attends to the N on each side (0: to every token)")
      ->check(examples::count(0, kMaxLen));
  app.add_option("--pool", o.pool, "review vector: mean+max of the token states, or cls (a [CLS] token's state: the classifier sees what its attention gathered)")
      ->check(CLI::IsMember({"mean+max", "cls"}));
  app.add_flag("!--post-norm", o.norm_first, "post-norm layers (norm(x + f(x)), PyTorch's default) instead of pre-norm (x + f(norm(x))) and a final LayerNorm");
  app.add_option("--activation", o.activation, "the encoder's feed-forward activation (gelu_tanh: GPT-2's tanh form of gelu; silu: x sigmoid(x))")
      ->check(CLI::IsMember(activation_choices()));
  app.add_flag("--gated", o.gated,
               "a gated feed-forward: linear1 gives twice the width, and act(first half) * second half goes to linear2 (with "
               "--activation silu: LLaMA's SwiGLU)");
  app.add_option("--norm", o.norm, "the encoder's norms: layer (LayerNorm) or rms (RMSNorm, as LLaMA's)")->check(CLI::IsMember({"layer", "rms"}));
  app.add_flag("--checkpoint", o.checkpoint, "recompute each encoder layer in backward instead of keeping its activations (less memory)");
  app.add_flag("!--no-ablation", o.ablation, "skip the ablation run (the same inputs mean+max pooled, without attention)");
  app.add_option("--ensemble", o.ensemble, "also train an explicit ensemble, reported in its own row: nblr = the attention model + the NB-LR log-odds")
      ->check(CLI::IsMember({"none", "nblr"}));
  examples::add_training_flags(app, o.train);
  examples::add_device_option(app, o.device);
  app.add_option("--dropout", o.dropout, "dropout on embeddings, residuals and the pooled features")->check(examples::real(0, 0.95));
  app.add_option("--attn-dropout", o.attn_dropout, "dropout on the attention weights")->check(examples::real(0, 0.95));
  app.add_option("--label-smoothing", o.label_smoothing, "label smoothing of the training loss (torch's cross_entropy label_smoothing)")
      ->check(examples::real(0, 1));
  app.add_option("--attn-entropy", o.attn_entropy,
                 "add this multiple of the [CLS] rows' attention entropy (a fraction of the uniform distribution's, last layer, every head, "
                 "hinged at --attn-entropy-target) to the training loss: a penalty that makes heads drop the tokens they do not need, included "
                 "in the reported training loss (default 0.03 with --pool cls, the default; 0: none)")
      ->check(examples::real(0, 100));
  app.add_option("--attn-entropy-target", o.attn_entropy_target,
                 "the --attn-entropy penalty counts only the part of each [CLS] row's entropy above this fraction of the uniform "
                 "distribution's (a hinge): a head already that focused is left alone, so that the penalty cannot collapse it onto one token "
                 "(default 0.5; 0: the whole entropy)")
      ->check(examples::real(0, 0.99));
  app.add_option("--adversarial", o.adversarial,
                 "adversarial training (Miyato et al., 2017): the training loss is the mean of the loss and the loss with each "
                 "review's inputs moved by this L2 distance along its gradient (every position's word, n-gram and position "
                 "embeddings together; about 1.7x the time per step; default 0.3; 0: none)")
      ->check(examples::real(0, 100));
  app.add_option("--ngram-dropout", o.ngram_dropout, "in training, drop each token's n-gram embedding whole with this probability (the rest scaled up)")
      ->check(examples::real(0, 0.95));
  app.add_option("--max-len", o.max_len, "tokens kept per review (the default keeps whole reviews: aclImdb's longest has 2,803)")->check(examples::count(1, kMaxLen));
  app.add_option("--truncate", o.truncate, "tokens of a longer review the attention sees: head, tail or head+tail (half of each)")
      ->check(CLI::IsMember({"head", "tail", "head+tail"}));
  app.add_option("--min-freq", o.min_freq, "minimum token count for the vocabulary")->check(examples::count(1, kMaxCount));
  app.add_option("--max-vocab", o.max_vocab, "maximum vocabulary size (PAD and UNK included; 0: no limit)")
      ->check(examples::count(0, kMaxVocab) & examples::except(1, "a vocabulary holds <pad> and <unk> (0: no limit, else at least 2)"));
  app.add_option("--ngram-buckets", o.ngram_buckets,
                 "hash buckets of the n-gram embeddings added to each token's input (0: words only; default: one per 4 training "
                 "tokens, a power of two, at most 2^21)")
      ->check(examples::count(0, kMaxNgramBuckets));
  app.add_option("--ngram-order", o.ngram_order, "longest n-gram embedded at each token (2: bigrams, 3: bigrams and trigrams)")
      ->check(examples::count(2, kMaxNgramOrder));
  app.add_option("--pretrain-epochs", o.pretrain.epochs,
                 "skip-gram epochs over the training reviews that initialise the word and n-gram embeddings (0: random initialisation)")
      ->check(examples::count(0, 100));
  app.add_option("--nblr-buckets", o.nblr_buckets, "hash buckets of NB-LR's n-grams, the baseline row and the ensemble's score (0: no NB-LR)")
      ->check(examples::count(0, kMaxNblrBuckets));
  app.add_option("--nblr-order", o.nblr_order, "longest n-gram of NB-LR")->check(examples::count(1, 5));
  app.add_option("--nblr-c", o.nblr_c, "NB-LR's inverse L2 regularisation strength (LIBLINEAR's C)")->check(examples::real(0, 1e9, true));
  app.add_option("--nblr-folds", o.nblr_folds, "cross-fitting folds of the training reviews' NB-LR scores")->check(examples::count(2, 20));
  app.add_option("--valid-fraction", o.valid_fraction, "fraction of train held out for validation (fixed seed)")->check(examples::real(0.01, 0.9));
  app.add_option("--threads", o.threads, "threads (0: ATTN_NUM_THREADS, OMP_NUM_THREADS or all cores)")->check(examples::count(0, examples::kMaxThreads));
  app.add_option("--explain", o.explain, "extra text(s) whose attention heatmaps go into the report");
  app.add_option("--limit", o.limit, "use only N training reviews, and at most N test reviews, both classes in proportion (quick runs; 0: all)")->check(examples::count(0));
  PredictOptions& pr = cmd.prediction;
  auto* pred = app.add_subcommand("predict", "classify text with a trained model");
  pred->add_option("--model", pr.model_dir, "a run directory, e.g. runs/imdb/h8")->required();
  examples::add_device_option(*pred, pr.device);
  pred->add_option("--precision", pr.precision,
                   "bf16: the products of the linear layers and the attention on bfloat16 operands with float sums; int8: the linear weights quantized to int8 "
                   "per output channel, activations per row (dynamic quantization)")
      ->check(CLI::IsMember({"fp32", "bf16", "int8"}));
  pred->add_option("--dump", pr.dump, "also write the texts as one batch (its inputs) and the logits to this safetensors file, for a PyTorch model to reproduce");
  pred->add_option("text", pr.texts, "text to classify (default: the article's sentence)");
  if (auto exit_code = examples::parse(app, argc, argv)) return exit_code;
  if (auto exit_code = examples::refuse_top_level_options(app, *pred, {"--threads"})) return exit_code;
  for (std::size_t i = 0; i < o.seeds.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (o.seeds[i] == o.seeds[j])
        return app.exit(CLI::ValidationError("--seeds", "seed " + std::to_string(o.seeds[i]) + " is given twice"));
  if (o.ensemble == "nblr" && !o.nblr_buckets) return app.exit(CLI::ValidationError("--ensemble", "nblr needs NB-LR, but --nblr-buckets is 0"));
  // The [CLS] entropy penalty is on by default for a [CLS] model; another pooling turns the default
  // off, and a penalty that is off has no target (so that both are recorded as 0).
  if (o.pool != "cls") {
    if (app.count("--attn-entropy") && o.attn_entropy > 0)
      return app.exit(CLI::ValidationError("--attn-entropy", "the penalty is on the [CLS] rows' attention, but --pool is " + o.pool));
    o.attn_entropy = 0;
  }
  if (!(o.attn_entropy > 0)) {
    if (app.count("--attn-entropy-target") && o.attn_entropy_target > 0)
      return app.exit(CLI::ValidationError("--attn-entropy-target", "the target of a penalty that is off: --attn-entropy is 0" +
                                                                        std::string(o.pool != "cls" ? " with --pool " + o.pool : "")));
    o.attn_entropy_target = 0;
  }
  cmd.predict = bool(*pred);
  return std::nullopt;
}

}  // namespace imdb
