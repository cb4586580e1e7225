// SPDX-License-Identifier: MIT
// The CLUE program's command line.
#include "options.hpp"

#include "../common/cli.hpp"

namespace clue {

std::optional<int> parse_command_line(int argc, char** argv, Command& cmd) {
  Options& o = cmd.options;
  CLI::App app{"CLUE text classification (TNEWS, IFLYTEK) with a BiLSTM (or BiGRU) and single- or multi-head self-attention (attn)"};
  app.set_help_all_flag("--help-all");
  app.add_option("--data", o.data.dir,
                 "a CLUE task directory (tnews_public, iflytek_public): labels.json, whose lines are the classes, and train.json (dev.json, "
                 "test.json when present)");
  auto* heads = app.add_option("--heads", o.heads,
                 "attention heads, one of 1, 2, 4, 8, or 0 for the ablation: the same model without its attention (default: "
                 "nn::recommended_heads(256))")
      ->check(examples::count(0, 8));
  auto* sweep = app.add_flag("--sweep", o.sweep, "train every head count 1, 2, 4, 8 and the ablation (no attention), and print the table")
                    ->excludes(heads);
  auto* rnn = app.add_option("--rnn", o.rnn,
                             "the recurrent layer under the attention: lstm (nn::BiLSTM, the article's model) or gru (nn::BiGRU: three "
                             "gates instead of four, a quarter fewer recurrent weights and products)")
                  ->check(CLI::IsMember({"lstm", "gru"}));
  app.add_flag("!--no-ablation", o.ablation, "with --sweep: skip the ablation run (the model without its attention)");
  examples::add_training_flags(app, o.train);
  examples::add_device_option(app, o.device);
  app.add_option("--dropout", o.dropout, "dropout on embeddings, the attention output and the pooled features")->check(examples::real(0, 0.95));
  app.add_option("--attn-dropout", o.attn_dropout, "dropout on the attention weights")->check(examples::real(0, 0.95));
  app.add_option("--label-smoothing", o.label_smoothing, "label smoothing of the training loss")->check(examples::real(0, 1));
  app.add_option("--class-weights", o.class_weights,
                 "none; balanced: the training loss weights each class by N / (C x its count in the training split, C classes), as "
                 "scikit-learn's class_weight=\"balanced\" (torch's cross_entropy weight=); sqrt: by the square root of that")
      ->check(CLI::IsMember({"none", "sqrt", "balanced"}));
  app.add_option("--adversarial", o.adversarial,
                 "adversarial training (Miyato et al., 2017): the training loss is the mean of the loss and the loss with each "
                 "title's character embeddings moved by this L2 distance along its gradient (about twice the time per step; 0: none)")
      ->check(examples::real(0, 100));
  app.add_flag("!--no-residual", o.residual, "pool the attention output itself (the plain R2 model), no residual + LayerNorm");
  app.add_option("--max-len", o.data.max_len, "characters kept per title (keywords included)")->check(examples::count(1, kMaxLen));
  app.add_option("--min-freq", o.data.min_freq, "minimum character count for the vocabulary")->check(examples::count(1, kMaxCount));
  app.add_option("--max-vocab", o.data.max_vocab, "maximum vocabulary size, <pad> and <unk> included (0: no limit)")
      ->check(examples::count(0, kMaxVocab) & examples::except(1, "a vocabulary holds <pad> and <unk> (0: no limit, else at least 2)"));
  app.add_flag("--keywords", o.data.keywords, "append each title's keywords after a <sep> token");
  app.add_flag("--skip-bad-lines", o.data.skip_bad_lines,
               "skip and count malformed JSON lines of train.json and dev.json instead of stopping at the first (test.json's are errors)");
  app.add_option("--valid-fraction", o.data.valid_fraction, "fraction of train.json held out for validation (fixed seed)")
      ->check(examples::real(0.01, 0.9));
  app.add_option("--threads", o.threads, "threads (0: ATTN_NUM_THREADS, OMP_NUM_THREADS or all cores)")->check(examples::count(0, examples::kMaxThreads));
  app.add_option("--explain", o.explain, "extra title(s) whose attention heatmaps go into the report");
  app.add_option("--limit", o.data.limit, "use only the first N titles of train.json, blank and skipped lines not counted (quick runs; 0: all)")->check(examples::count(0));
  // --bench measures one model (--heads, or --model's own head count); its options need it.
  auto* bench = app.add_flag("--bench", o.bench, "measure inference: samples/s at batch 64 and batch-1 latency on the validation titles")
                    ->excludes(sweep);
  app.add_option("--model", o.model_dir, "with --bench: a trained run directory, e.g. runs/clue/h4 (default: an untrained model)")
      ->needs(bench)
      ->excludes(heads)
      ->excludes(rnn);
  app.add_option("--bench-seconds", o.bench_seconds, "seconds of batch-64 passes (--bench; after training, at most 3)")
      ->check(examples::real(0, 1e6, true));
  app.add_option("--bench-latency", o.bench_latency, "with --bench: titles timed one at a time (0: skip)")
      ->check(examples::count(0, 10000000))
      ->needs(bench);
  app.add_flag("!--no-fold", o.fold, "with --bench: run the embedding and the recurrent layer's input projection as two layers, not folded into one table")
      ->needs(bench);
  PredictOptions& pr = cmd.prediction;
  auto* pred = app.add_subcommand("predict", "classify titles with a trained model");
  pred->add_option("--model", pr.model_dir, "a run directory, e.g. runs/clue/h4")->required();
  examples::add_device_option(*pred, pr.device);
  pred->add_option("--keywords", pr.keywords, "comma-separated keywords (used when the model was trained with --keywords)");
  pred->add_option("--top", pr.top, "characters shown, by attention received")->check(examples::count(0, 1000000));
  pred->add_option("--precision", pr.precision,
                   "bf16: the products of the linear layers, the recurrent layer and the attention on bfloat16 operands with float sums; int8: the weights "
                   "quantized to int8 per output channel, activations per row (dynamic quantization)")
      ->check(CLI::IsMember({"fp32", "bf16", "int8"}));
  pred->add_option("--dump", pr.dump, "also write the titles as one batch (its inputs) and the logits to this safetensors file, for a PyTorch model to reproduce");
  pred->add_option("text", pr.texts, "titles to classify (default: an example title)");
  if (auto exit_code = examples::parse(app, argc, argv)) return exit_code;
  if (auto exit_code = examples::refuse_top_level_options(app, *pred, {"--threads"})) return exit_code;
  o.data_given = app.count("--data") > 0;
  cmd.predict = bool(*pred);
  return std::nullopt;
}

}  // namespace clue
