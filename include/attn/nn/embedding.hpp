// SPDX-License-Identifier: MIT
// nn::Embedding<Dim>: a (num_embeddings, Dim) table looked up by integer ids; vocabulary size is
// a run-time value. PyTorch's name ("weight") and default init N(0, 1), padding row zeroed.
//   attn::nn::Embedding<128> tokens{this, "embed", vocab_size, {.padding_idx = 0}};
//   auto x = tokens(ctx, ids);     // ids (B, T) int32/int64 -> (B, T, 128)
//   attn::nn::Embedding<attn::dyn> t{this, "embed", vocab_size, width};   // a width chosen at run time
#pragma once
#include "../autograd/embedding.hpp"
#include "init.hpp"
#include "module.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

namespace attn::nn {

struct EmbeddingOptions {
  /// Row whose output is a constant and which receives no gradient (empty: none). As in PyTorch,
  /// a negative index counts from the end: -1 is the last row.
  std::optional<long long> padding_idx = {};
  /// Standard deviation of the N(0, std) initialisation (PyTorch: 1).
  double init_std = 1.0;
  /// Row-sparse gradient (PyTorch's sparse=True): backward records the rows it touched, and
  /// zero_grad, clipping and the optimizers visit those rows only; Adam then applies
  /// torch.optim.SparseAdam's lazy update to this table. For large tables (word or n-gram
  /// vocabularies) where a batch uses a small fraction of the rows.
  bool sparse = false;
  /// A frozen table (torch's Embedding(_freeze=True), from_pretrained's default): no gradient, the
  /// optimizers leave it as loaded; set_requires_grad(true) unfreezes it.
  bool freeze = false;
  /// torch's max_norm: before each lookup, every row the ids name whose norm_type-norm exceeds
  /// max_norm is rescaled in place to max_norm (times max_norm / (norm + 1e-7)), outside the graph.
  /// Empty: rows are never rescaled. norm_type: p > 0, or infinity (the largest |element|). Host
  /// tables only.
  std::optional<double> max_norm = {};
  double norm_type = 2.0;
};

template <std::size_t Dim, class T = float, class B = cpu>
class Embedding : public Module {
 public:
  static_assert(Dim > 0, "nn::Embedding: Dim must be a positive extent (or attn::dyn)");

  Embedding(Module* parent, std::string name, std::size_t num_embeddings, EmbeddingOptions opt = {})
    requires(Dim != dyn)
      : Embedding(parent, std::move(name), num_embeddings, Dim, opt, 0) {}
  /// Dim = dyn: the row width (torch's embedding_dim) given here.
  Embedding(Module* parent, std::string name, std::size_t num_embeddings, std::size_t embedding_dim, EmbeddingOptions opt = {})
    requires(Dim == dyn)
      : Embedding(parent, std::move(name), num_embeddings, embedding_dim, opt, 0) {}

  void reset_parameters(Rng& rng) override {
    init::fill_with(weight, rng, [this](Rng& r) { return r.normal(0, opt_.init_std); });
    if (padding_ >= 0) weight.data()->value.fill(T(0), static_cast<std::size_t>(padding_) * dim_, dim_);
  }

  /// ids (...) -> (..., embedding_dim). Ids outside the table throw ShapeError. With max_norm, the rows the
  /// ids name are rescaled first (see EmbeddingOptions::max_norm); calls from several threads then
  /// take turns (rescale and lookup together), so that none reads a row another is rescaling.
  template <Context C, std::integral I, class SI>
  auto operator()(C& ctx, const Tensor<I, SI, B>& ids) const {
    if constexpr (B::host_accessible)
      if (opt_.max_norm) {
        const std::lock_guard<std::mutex> lock(renorm_mutex_);
        renorm(ids);
        return embedding(ctx, weight, ids, padding_);
      }
    return embedding(ctx, weight, ids, padding_);
  }

  std::size_t num_embeddings() const noexcept { return rows_; }
  std::size_t embedding_dim() const noexcept { return dim_; }
  /// The padding row, a negative padding_idx resolved (-1: none).
  long long padding_row() const noexcept { return padding_; }
  Var<T, Shape<dyn, Dim>, B> weight;

 private:
  Embedding(Module* parent, std::string name, std::size_t num_embeddings, std::size_t dim, EmbeddingOptions opt, int)
      : Module(parent, std::move(name)), rows_(num_embeddings), dim_(dim), opt_(opt) {
    if (num_embeddings == 0) throw ArgumentError("nn::Embedding '" + this->name() + "': num_embeddings must be positive");
    if (dim == 0) throw ArgumentError("nn::Embedding '" + this->name() + "': embedding_dim must be positive");
    if (opt.padding_idx) {
      const long long p = *opt.padding_idx, rows = static_cast<long long>(num_embeddings);
      if (p >= rows || p < -rows)
        throw ArgumentError("nn::Embedding '" + this->name() + "': padding_idx " + std::to_string(p) + " outside the table of " +
                            std::to_string(num_embeddings) + " rows (a negative index counts from the end)");
      padding_ = p < 0 ? rows + p : p;
    }
    if (opt.max_norm) {
      if (!(*opt.max_norm > 0)) throw ArgumentError("nn::Embedding '" + this->name() + "': max_norm must be positive, got " + std::to_string(*opt.max_norm));
      if (!(opt.norm_type > 0))
        throw ArgumentError("nn::Embedding '" + this->name() + "': norm_type must be positive (or infinity), got " + std::to_string(opt.norm_type));
      if (!B::host_accessible) throw ArgumentError("nn::Embedding '" + this->name() + "': max_norm rescales rows on the host; this backend's table is not");
    }
    weight = register_parameter<T, Shape<dyn, Dim>, B>("weight", {num_embeddings, dim});
    weight.data()->sparse_rows = opt.sparse;
    weight.data()->requires_grad = !opt.freeze;
    if (init_on_construction()) {
      Rng rng(name_seed(this->seed_name()));
      reset_parameters(rng);
    }
  }

  /// torch's embedding_renorm_: each distinct row of ids above max_norm scaled down to it. Nothing
  /// changes when an id is outside the table (the lookup then throws).
  template <std::integral I, class SI>
  void renorm(const Tensor<I, SI, B>& ids) const {
    const I* id = ids.data();
    std::vector<std::size_t> rows(ids.numel());
    for (std::size_t i = 0; i < rows.size(); ++i) {
      if (id[i] < 0 || static_cast<std::size_t>(id[i]) >= rows_) return;
      rows[i] = static_cast<std::size_t>(id[i]);
    }
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    T* w = const_cast<T*>(weight.raw().data());
    const double max_norm = *opt_.max_norm, p = opt_.norm_type;
    bool changed = false;
    for (const std::size_t r : rows) {
      T* row = w + r * dim_;
      double norm = 0;
      if (std::isinf(p)) {
        for (std::size_t j = 0; j < dim_; ++j) norm = std::max(norm, std::abs(double(row[j])));
      } else {
        for (std::size_t j = 0; j < dim_; ++j) norm += p == 2.0 ? double(row[j]) * double(row[j]) : std::pow(std::abs(double(row[j])), p);
        norm = p == 2.0 ? std::sqrt(norm) : std::pow(norm, 1.0 / p);
      }
      if (norm > max_norm) {
        const T scale = T(max_norm / (norm + 1e-7));
        for (std::size_t j = 0; j < dim_; ++j) row[j] *= scale;
        changed = true;
      }
    }
    if (changed) weight.data()->mark_value_written();
  }

  std::size_t rows_, dim_;
  EmbeddingOptions opt_;
  long long padding_ = -1;
  mutable std::mutex renorm_mutex_;  // serialises the max_norm calls, which write the table
};

}  // namespace attn::nn
