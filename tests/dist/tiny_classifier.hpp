// SPDX-License-Identifier: MIT
// A small attention classifier and a seeded synthetic dataset shared by the dist tests: embedding,
// one attention layer, masked mean pooling, linear head. Every parameter takes part in the loss.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <attn/attn.hpp>
#include <attn/nn/attention.hpp>

namespace dist_test {

constexpr std::size_t vocab = 40, seq = 6, dim = 16, classes = 3;

/// Sparse: the token table has row-sparse gradients (nn::Embedding{.sparse = true}).
template <std::size_t Vocab = vocab, bool Sparse = false>
struct TinyClassifier : attn::nn::Module {
  attn::nn::Embedding<dim> tokens{this, "embed", Vocab, {.padding_idx = 0, .init_std = 0.5, .sparse = Sparse}};
  attn::nn::Attention<2, dim> attention{this, "attn"};
  attn::nn::Linear<dim, classes> head{this, "head"};

  /// ids, mask (B, T) with 1 = real token -> logits (B, classes).
  template <class Ctx>
  auto forward(Ctx& ctx, const attn::Tensor<std::int32_t>& ids, const attn::Tensor<float>& mask) {
    auto x = tokens(ctx, ids);
    const attn::KeepMask keep(mask);
    auto y = attention(ctx, attn::Var<float, attn::Shape<attn::dyn, attn::dyn, dim>>(x), keep);
    return head(ctx, attn::nn::masked_mean(ctx, y, keep));
  }
};

/// n samples: random ids, lengths in [2, seq], padded with id 0; labels in [0, classes).
struct Dataset {
  std::vector<std::int32_t> ids;    // (n, seq)
  std::vector<float> mask;          // (n, seq)
  std::vector<std::int32_t> labels; // (n)
  std::size_t n = 0;

  explicit Dataset(std::size_t count, std::uint64_t seed = 7) : ids(count * seq, 0), mask(count * seq, 0.f), labels(count), n(count) {
    attn::Rng rng(seed);
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t len = 2 + rng.below(seq - 1);
      for (std::size_t t = 0; t < len; ++t) {
        ids[i * seq + t] = static_cast<std::int32_t>(1 + rng.below(vocab - 1));
        mask[i * seq + t] = 1.f;
      }
      labels[i] = static_cast<std::int32_t>(rng.below(classes));
    }
  }

  struct Batch {
    attn::Tensor<std::int32_t> ids;
    attn::Tensor<float> mask;
    attn::Tensor<std::int32_t> labels;
  };
  /// The samples at `which`, in that order.
  Batch gather(const std::vector<std::size_t>& which) const {
    const std::size_t b = which.size();
    std::vector<std::int32_t> bi(b * seq), bl(b);
    std::vector<float> bm(b * seq);
    for (std::size_t k = 0; k < b; ++k) {
      for (std::size_t t = 0; t < seq; ++t) {
        bi[k * seq + t] = ids[which[k] * seq + t];
        bm[k * seq + t] = mask[which[k] * seq + t];
      }
      bl[k] = labels[which[k]];
    }
    return {attn::Tensor<std::int32_t>::from({b, seq}, std::span<const std::int32_t>(bi)),
            attn::Tensor<float>::from({b, seq}, std::span<const float>(bm)),
            attn::Tensor<std::int32_t>::from({b}, std::span<const std::int32_t>(bl))};
  }
};

/// The largest |a - b| over all parameters of two models with the same layout. With
/// skip_key_bias, the key slice of the attention's in_proj_bias, [dim, 2 dim), is left out: its
/// exact gradient is zero (a constant added to every key shifts each query's scores equally and
/// softmax ignores it), so what backward computes there is rounding noise, and Adam, which divides
/// by the gradient's running RMS, turns noise of any size into steps of about lr. Two summation
/// orders of the same batch therefore move it differently; every other parameter is well defined.
inline double max_param_diff(const attn::nn::Module& a, const attn::nn::Module& b, bool skip_key_bias = false) {
  auto na = a.named_parameters();
  auto pa = a.parameters<float>(), pb = b.parameters<float>();
  double m = 0;
  for (std::size_t k = 0; k < pa.size(); ++k) {
    auto va = pa[k].raw().to_vector(), vb = pb[k].raw().to_vector();
    const bool key_bias = skip_key_bias && na[k].first == "attn.in_proj_bias";
    for (std::size_t i = 0; i < va.size(); ++i)
      if (!(key_bias && i >= dim && i < 2 * dim)) m = std::max(m, double(std::abs(va[i] - vb[i])));
  }
  return m;
}

/// "name: max|a - b|" per parameter, for failure messages.
inline std::string param_diff_report(const attn::nn::Module& a, const attn::nn::Module& b) {
  auto na = a.named_parameters();
  auto pa = a.parameters<float>(), pb = b.parameters<float>();
  std::string out;
  for (std::size_t k = 0; k < pa.size(); ++k) {
    auto va = pa[k].raw().to_vector(), vb = pb[k].raw().to_vector();
    double m = 0;
    for (std::size_t i = 0; i < va.size(); ++i) m = std::max(m, double(std::abs(va[i] - vb[i])));
    out += na[k].first + ": " + std::to_string(m) + "\n";
  }
  return out;
}

}  // namespace dist_test
