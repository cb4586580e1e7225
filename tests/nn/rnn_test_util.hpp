// SPDX-License-Identifier: MIT
// Test helpers of the recurrent layers (LSTM, GRU and their cells): a ragged, unsorted batch, the
// outputs of an op joined into one Var for one gradient check, element-wise distances, time slices,
// and the check of an embedding fold (embedded_lstm, embedded_gru).
#pragma once
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <attn/autograd/tape.hpp>
#include <attn/autograd/shape_ops.hpp>
#include <attn/autograd/var.hpp>
#include <attn/nn/embedding.hpp>

namespace rnn_test {

/// Lengths of a batch of 4 with T = 6: unsorted, with a tie, each shorter than T.
inline const std::vector<int> ragged = {3, 5, 1, 3};

/// A constant (no gradient) Var holding t.
template <class T, class S>
attn::Var<T> leaf(const attn::Tensor<T, S>& t) { return attn::Var<T>(t, false); }

/// The given outputs flattened and joined into one Var, so that one gradient check covers them all.
template <class... Vs>
attn::Var<double> flat(attn::Tape& t, const Vs&... v) {
  return attn::concat(t, std::vector<attn::Var<double>>{attn::reshape(t, v, {v.numel()})...}, 0);
}

/// max |a - b| over two tensors of the same shape.
template <class T, class S1, class S2>
double max_diff(const attn::Tensor<T, S1>& a, const attn::Tensor<T, S2>& b) {
  REQUIRE(a.dims() == b.dims());
  double m = 0;
  for (std::size_t i = 0; i < a.numel(); ++i) m = std::max(m, std::abs(double(a.data()[i]) - double(b.data()[i])));
  return m;
}
template <class T, class S1, class S2>
double max_diff(const attn::Var<T, S1>& a, const attn::Var<T, S2>& b) {
  return max_diff(a.raw(), b.raw());
}

/// Steps [t0, t1) of x (B, T, F).
inline attn::Tensor<double> steps(const attn::Tensor<double>& x, std::size_t t0, std::size_t t1) {
  const std::size_t bn = x.dims().v[0], tn = x.dims().v[1], f = x.dims().v[2];
  attn::Tensor<double> out(attn::Dims{bn, t1 - t0, f});
  for (std::size_t b = 0; b < bn; ++b)
    for (std::size_t t = t0; t < t1; ++t)
      for (std::size_t k = 0; k < f; ++k) out.data()[(b * (t1 - t0) + t - t0) * f + k] = x.data()[(b * tn + t) * f + k];
  return out;
}

/// An embedding fold (tables_of(emb, layer) and run(ctx, layer, tables, ids, lengths): nn::
/// lstm_input_tables and nn::embedded_lstm, or the GRU's) on a ragged, unsorted batch whose padded
/// positions hold ids the table lacks, against the Embedding (13 rows of 6) and the layer run in
/// turn: out, h_n and what same(got, ref, tol) checks besides, within tol. Then its errors, which
/// name op ("lstm_from_table"): an id outside the table, a length past T, a table of the wrong
/// width (gates × 4 hidden expected).
template <class T, class Layer, class Tables, class Run, class Same>
void check_embedded_fold(const Layer& layer, const attn::nn::Embedding<6, T>& emb, double tol, std::size_t gates, const char* op,
                         Tables&& tables_of, Run&& run, Same&& same) {
  attn::NoGrad ng;
  const std::vector<int> len{3, 7, 1, 5};
  auto ids = attn::Tensor<std::int32_t, attn::Shape<attn::dyn, attn::dyn>>::zeros({4, 7});
  attn::Rng r(99);
  for (std::size_t b = 0; b < 4; ++b)
    for (std::size_t t = 0; t < 7; ++t) ids(b, t) = t < std::size_t(len[b]) ? std::int32_t(r.below(13)) : -5;
  auto safe = ids;  // the reference Embedding reads every position
  for (std::size_t b = 0; b < 4; ++b)
    for (std::size_t t = std::size_t(len[b]); t < 7; ++t) safe(b, t) = 0;
  const auto ref = layer(ng, emb(ng, safe), std::span<const int>(len));
  const auto tables = tables_of(emb, layer);
  REQUIRE(tables.dirs.size() == Layer::directions);
  CHECK(tables.dirs[0].dims() == attn::Dims{13, gates * 4});
  const auto got = run(ng, layer, tables, ids, std::span<const int>(len));
  CHECK(max_diff(got.out, ref.out) <= tol);
  CHECK(max_diff(got.h_n, ref.h_n) <= tol);
  same(got, ref, tol);
  // An id outside the table at a real position names the position.
  ids(1, 4) = 13;
  CHECK_THROWS_AS(run(ng, layer, tables, ids, std::span<const int>(len)), attn::ArgumentError);
  CHECK_THROWS_WITH(run(ng, layer, tables, ids, std::span<const int>(len)),
                    Catch::Contains(std::string(op) + ": ids(1, 4) = 13 is outside the table of 13 rows"));
  ids(1, 4) = 2;
  const std::vector<int> too_long{3, 8, 1, 5};
  CHECK_THROWS_WITH(run(ng, layer, tables, ids, std::span<const int>(too_long)), Catch::Contains(std::string(op) + ": lengths[1] = 8"));
  auto wrong = tables;
  wrong.dirs[0] = attn::Tensor<T>::zeros({13, gates * 4 + 1});
  CHECK_THROWS_AS(run(ng, layer, wrong, ids, std::span<const int>(len)), attn::ShapeError);
  CHECK_THROWS_WITH(run(ng, layer, wrong, ids, std::span<const int>(len)),
                    Catch::Contains("the input-projection tables must be (V, " + std::to_string(gates) + "H)"));
}

}  // namespace rnn_test
