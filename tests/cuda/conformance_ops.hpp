// SPDX-License-Identifier: MIT
// Conformance cases of the autograd ops: element-wise with broadcasting, matmul, shape ops,
// reductions, softmax, masked_fill, embedding and cross-entropy, forward and backward.
// Included by the TUs that instantiate run_ops<T, B> (see conformance.hpp).
#pragma once
#include <cmath>
#include <limits>

#include "conformance_support.hpp"

namespace conformance::ops {

/// y = f(tape, a, b) for a of dims da, b of dims db (b drawn from [lo_b, hi_b]); backward from a
/// random upstream gradient.
template <class T, class B, class F>
Result binary(std::uint64_t seed, const Dims& da, const Dims& db, F f, double lo_b = -1, double hi_b = 1) {
  Rng rng(seed);
  Tape tape;
  auto a = input<T, B>(rng, da);
  auto b = input<T, B>(rng, db, lo_b, hi_b);
  auto y = f(tape, a, b);
  backward_from(tape, y, rng);
  Result r;
  record_value(r, "y", y);
  record_grad(r, "a", a);
  record_grad(r, "b", b);
  return r;
}

/// y = f(tape, x) for x of dims d drawn from [lo, hi].
template <class T, class B, class F>
Result unary(std::uint64_t seed, const Dims& d, F f, double lo = -1, double hi = 1) {
  Rng rng(seed);
  Tape tape;
  auto x = input<T, B>(rng, d, lo, hi);
  auto y = f(tape, x);
  backward_from(tape, y, rng);
  Result r;
  record_value(r, "y", y);
  record_grad(r, "x", x);
  return r;
}

template <class T, class B>
Result add_broadcast(std::uint64_t seed) {
  return binary<T, B>(seed, {3, 5, 37}, {37}, [](Tape& t, auto& a, auto& b) { return attn::add(t, a, b); });
}
template <class T, class B>
Result sub_broadcast(std::uint64_t seed) {
  return binary<T, B>(seed, {3, 5, 37}, {5, 1}, [](Tape& t, auto& a, auto& b) { return attn::sub(t, a, b); });
}
template <class T, class B>
Result mul_broadcast(std::uint64_t seed) {
  return binary<T, B>(seed, {3, 1, 37}, {5, 37}, [](Tape& t, auto& a, auto& b) { return attn::mul(t, a, b); });
}
template <class T, class B>
Result div_broadcast(std::uint64_t seed) {
  return binary<T, B>(seed, {4, 6, 33}, {1, 6, 1}, [](Tape& t, auto& a, auto& b) { return attn::div(t, a, b); }, 0.5, 2.0);
}
/// Large enough that the broadcast gradients are split over many blocks: b (300, 1) sums over
/// the outer and inner axes, c (48) over all rows.
template <class T, class B>
Result add_large(std::uint64_t seed) {
  Rng rng(seed);
  Tape tape;
  auto a = input<T, B>(rng, {64, 300, 48});
  auto b = input<T, B>(rng, {300, 1});
  auto c = input<T, B>(rng, {48});
  auto y = attn::add(tape, attn::add(tape, a, b), c);
  backward_from(tape, y, rng);
  Result r;
  record_value(r, "y", y);
  record_grad(r, "a", a);
  record_grad(r, "b", b);
  record_grad(r, "c", c);
  return r;
}
template <class T, class B>
Result unary_exp(std::uint64_t seed) {
  return unary<T, B>(seed, {7, 33}, [](Tape& t, auto& x) { return attn::exp(t, x); }, -3, 3);
}
template <class T, class B>
Result unary_log(std::uint64_t seed) {
  return unary<T, B>(seed, {7, 33}, [](Tape& t, auto& x) { return attn::log(t, x); }, 0.1, 4);
}
template <class T, class B>
Result unary_tanh(std::uint64_t seed) {
  return unary<T, B>(seed, {7, 33}, [](Tape& t, auto& x) { return attn::tanh(t, x); }, -3, 3);
}
template <class T, class B>
Result unary_sigmoid(std::uint64_t seed) {
  return unary<T, B>(seed, {7, 33}, [](Tape& t, auto& x) { return attn::sigmoid(t, x); }, -8, 8);
}
template <class T, class B>
Result unary_relu(std::uint64_t seed) {
  return unary<T, B>(seed, {7, 33}, [](Tape& t, auto& x) { return attn::relu(t, x); });
}
template <class T, class B>
Result unary_gelu(std::uint64_t seed) {
  return unary<T, B>(seed, {7, 33}, [](Tape& t, auto& x) { return attn::gelu(t, x); }, -4, 4);
}
/// torch's other activations, each on its own input drawn from [-8, 8] (sqrt: from [0.1, 8]) with
/// its own upstream gradient: y.<name> and its input's gradient.
template <class T, class B>
Result activations(std::uint64_t seed) {
  Result r;
  auto one = [&](const std::string& name, auto f, double lo = -8, double hi = 8) {
    Rng rng(seed + r.size());
    Tape tape;
    auto x = input<T, B>(rng, {7, 33}, lo, hi);
    auto y = f(tape, x);
    backward_from(tape, y, rng);
    record_value(r, "y." + name, y);
    record_grad(r, name, x);
  };
  one("gelu_tanh", [](Tape& t, auto& x) { return attn::gelu_tanh(t, x); });
  one("silu", [](Tape& t, auto& x) { return attn::silu(t, x); });
  one("mish", [](Tape& t, auto& x) { return attn::mish(t, x); });
  one("softplus", [](Tape& t, auto& x) { return attn::softplus(t, x, 2.0, 5.0); });
  one("log_sigmoid", [](Tape& t, auto& x) { return attn::log_sigmoid(t, x); });
  one("leaky_relu", [](Tape& t, auto& x) { return attn::leaky_relu(t, x, 0.2); });
  one("elu", [](Tape& t, auto& x) { return attn::elu(t, x, 0.5); });
  one("selu", [](Tape& t, auto& x) { return attn::selu(t, x); });
  one("hardtanh", [](Tape& t, auto& x) { return attn::hardtanh(t, x, -0.5, 2.0); });
  one("abs", [](Tape& t, auto& x) { return attn::abs(t, x); });
  one("sqrt", [](Tape& t, auto& x) { return attn::sqrt(t, x); }, 0.1, 8);
  return r;
}
/// Scalar arithmetic: -(x * 2.5 + 1) / 3 - 0.5.
template <class T, class B>
Result scalar_affine(std::uint64_t seed) {
  return unary<T, B>(seed, {5, 19}, [](Tape& t, auto& x) {
    auto y = attn::neg(t, attn::scale(t, x, T(2.5)) + 1.0);
    return (y / 3.0) - 0.5;
  });
}
template <class T, class B>
Result matmul(std::uint64_t seed) {  // (2, 3, 17, 19) x (19, 23)
  return binary<T, B>(seed, {2, 3, 17, 19}, {19, 23}, [](Tape& t, auto& a, auto& b) { return attn::matmul(t, a, b); });
}
template <class T, class B>
Result matmul_batched(std::uint64_t seed) {  // (2, 3, 17, 19) x (2, 3, 19, 23)
  return binary<T, B>(seed, {2, 3, 17, 19}, {2, 3, 19, 23}, [](Tape& t, auto& a, auto& b) { return attn::matmul(t, a, b); });
}
template <class T, class B>
Result matmul_nt(std::uint64_t seed) {  // (4, 17, 19) x (23, 19)^T
  return binary<T, B>(seed, {4, 17, 19}, {23, 19}, [](Tape& t, auto& a, auto& b) { return attn::matmul_nt(t, a, b); });
}
template <class T, class B>
Result matmul_nt_batched(std::uint64_t seed) {  // (4, 17, 19) x (4, 23, 19)^T
  return binary<T, B>(seed, {4, 17, 19}, {4, 23, 19}, [](Tape& t, auto& a, auto& b) { return attn::matmul_nt(t, a, b); });
}
/// A static permutation then a run-time one: (2, 3, 4, 5) -> (4, 2, 3, 5) -> (3, 5, 4, 2).
template <class T, class B>
Result permute(std::uint64_t seed) {
  return unary<T, B>(seed, {2, 3, 4, 5}, [](Tape& t, auto& x) {
    auto y = attn::permute<2, 0, 1, 3>(t, x);
    return attn::permute(t, y, {2, 3, 0, 1});
  });
}
template <class T, class B>
Result transpose(std::uint64_t seed) {
  return unary<T, B>(seed, {3, 4, 5}, [](Tape& t, auto& x) { return attn::transpose<1, 2>(t, x); });
}
template <class T, class B>
Result reshape(std::uint64_t seed) {  // a reshape, then a product that reads it with another layout
  return unary<T, B>(seed, {3, 4, 5}, [](Tape& t, auto& x) {
    auto y = attn::reshape(t, x, {12, 5});
    return attn::mul(t, y, attn::transpose<0, 1>(t, attn::reshape(t, x, {5, 12})));
  });
}
/// Two slices of one input (middle and last axis), whose gradients add into the same tensor.
template <class T, class B>
Result slice(std::uint64_t seed) {
  Rng rng(seed);
  Tape tape;
  auto x = input<T, B>(rng, {3, 10, 7});
  auto a = attn::slice(tape, x, 1, 2, 5);
  auto b = attn::slice(tape, x, 2, 1, 4);
  auto loss = attn::add(tape, weighted_sum(tape, a, rng), weighted_sum(tape, b, rng));
  tape.backward(loss);
  Result r;
  record_value(r, "a", a);
  record_value(r, "b", b);
  record_value(r, "loss", loss);
  record_grad(r, "x", x);
  return r;
}
template <class T, class B>
Result concat(std::uint64_t seed) {
  Rng rng(seed);
  Tape tape;
  auto a = input<T, B>(rng, {3, 2, 7});
  auto b = input<T, B>(rng, {3, 5, 7});
  auto c = input<T, B>(rng, {3, 1, 7});
  auto y = attn::concat(tape, std::vector<V<T, B>>{a, b, c}, 1);   // (3, 8, 7)
  auto z = attn::concat(tape, std::vector<V<T, B>>{y, y}, 2);      // (3, 8, 14)
  backward_from(tape, z, rng);
  Result r;
  record_value(r, "z", z);
  record_grad(r, "a", a);
  record_grad(r, "b", b);
  record_grad(r, "c", c);
  return r;
}
template <class T, class B>
Result sum_all(std::uint64_t seed) {
  return unary<T, B>(seed, {300, 401}, [](Tape& t, auto& x) { return attn::sum(t, x); });
}
template <class T, class B>
Result mean_all(std::uint64_t seed) {
  return unary<T, B>(seed, {1000, 37}, [](Tape& t, auto& x) { return attn::mean(t, x); });
}
template <class T, class B>
Result sum_axis_first(std::uint64_t seed) {
  return unary<T, B>(seed, {500, 3, 7}, [](Tape& t, auto& x) { return attn::sum(t, x, 0); });
}
template <class T, class B>
Result sum_axis_middle(std::uint64_t seed) {
  return unary<T, B>(seed, {3, 500, 7}, [](Tape& t, auto& x) { return attn::sum<1>(t, x); });
}
template <class T, class B>
Result sum_axis_last(std::uint64_t seed) {
  return unary<T, B>(seed, {64, 513}, [](Tape& t, auto& x) { return attn::sum(t, x, 1); });
}
template <class T, class B>
Result mean_axis_keepdim(std::uint64_t seed) {
  return unary<T, B>(seed, {6, 9, 11}, [](Tape& t, auto& x) { return attn::mean(t, x, 1, true); });
}

/// x (13, 77) with row 4 all -inf (fully masked) and some -inf entries in row 7.
template <class T, class B>
V<T, B> masked_rows_input(Rng& rng) {
  auto h = draw<T>(rng, 13 * 77, -4, 4);
  const T inf = std::numeric_limits<T>::infinity();
  for (std::size_t j = 0; j < 77; ++j) h[4 * 77 + j] = -inf;
  for (std::size_t j = 0; j < 77; j += 3) h[7 * 77 + j] = -inf;
  return V<T, B>(tensor<T, B>({13, 77}, h), true);
}
template <class T, class B, class F>
Result softmax_like(std::uint64_t seed, F f) {
  Rng rng(seed);
  Tape tape;
  auto x = masked_rows_input<T, B>(rng);
  auto y = f(tape, x);
  backward_from(tape, y, rng);
  Result r;
  record_value(r, "y", y);
  record_grad(r, "x", x);
  return r;
}
template <class T, class B>
Result softmax(std::uint64_t seed) {
  return softmax_like<T, B>(seed, [](Tape& t, auto& x) { return attn::softmax(t, x); });
}
template <class T, class B>
Result log_softmax(std::uint64_t seed) {
  return softmax_like<T, B>(seed, [](Tape& t, auto& x) { return attn::log_softmax(t, x); });
}
template <class T, class B>
Result softmax_wide(std::uint64_t seed) {
  return unary<T, B>(seed, {5, 3000}, [](Tape& t, auto& x) { return attn::softmax(t, x); }, -10, 10);
}
/// Scores (4, 6, 9) with a key mask (4, 1, 9) broadcast over the queries; sample 2 fully masked.
template <class T, class B>
Result masked_fill_softmax(std::uint64_t seed) {
  Rng rng(seed);
  Tape tape;
  auto x = input<T, B>(rng, {4, 6, 9}, -3, 3);
  std::vector<T> m(4 * 9);
  for (std::size_t i = 0; i < m.size(); ++i) m[i] = (i / 9 == 2 || rng.uniform() < 0.3) ? T(1) : T(0);
  auto mask = tensor<T, B>({4, 1, 9}, m);
  auto y = attn::softmax(tape, attn::masked_fill(tape, x, mask, -std::numeric_limits<T>::infinity()));
  backward_from(tape, y, rng);
  Result r;
  record_value(r, "y", y);
  record_grad(r, "x", x);
  return r;
}
/// table (50, 24) looked up by ids (4, 9) with repeats; padding_idx (or -1) gets no gradient.
template <class T, class B, class I>
Result embedding_case(std::uint64_t seed, long long padding_idx) {
  Rng rng(seed);
  Tape tape;
  auto table = input<T, B>(rng, {50, 24});
  std::vector<I> ids(4 * 9);
  for (auto& id : ids) id = static_cast<I>(rng.below(12));  // few distinct ids: many repeats
  ids[5] = ids[17] = 3;
  auto y = attn::embedding(tape, table, attn::Tensor<I, AnyShape, B>::from({4, 9}, std::span<const I>(ids)), padding_idx);
  backward_from(tape, y, rng);
  Result r;
  record_value(r, "y", y);
  record_grad(r, "table", table);
  return r;
}
template <class T, class B>
Result embedding_i32(std::uint64_t seed) {
  return embedding_case<T, B, std::int32_t>(seed, 3);
}
template <class T, class B>
Result embedding_i64(std::uint64_t seed) {
  return embedding_case<T, B, std::int64_t>(seed, -1);
}
/// logits (37, 15) against targets with ignored rows.
template <class T, class B, class I>
Result cross_entropy_case(std::uint64_t seed, attn::CrossEntropyOptions opt) {
  Rng rng(seed);
  Tape tape;
  auto logits = input<T, B>(rng, {37, 15}, -4, 4);
  std::vector<I> tg(37);
  for (std::size_t i = 0; i < tg.size(); ++i) tg[i] = i % 7 == 3 ? static_cast<I>(opt.ignore_index) : static_cast<I>(rng.below(15));
  auto loss = attn::cross_entropy(tape, logits, attn::Tensor<I, AnyShape, B>::from({37}, std::span<const I>(tg)), opt);
  backward_from(tape, loss, rng);
  Result r;
  record_value(r, "loss", loss);
  record_grad(r, "logits", logits);
  return r;
}
template <class T, class B>
Result cross_entropy(std::uint64_t seed) {
  return cross_entropy_case<T, B, std::int64_t>(seed, {});
}
template <class T, class B>
Result cross_entropy_smoothing(std::uint64_t seed) {
  return cross_entropy_case<T, B, std::int32_t>(seed, {.ignore_index = 0, .label_smoothing = 0.1});
}

}  // namespace conformance::ops

namespace conformance {

template <class T, class B>
Result run_ops(const std::string& name, std::uint64_t seed) {
#define ATTN_CONFORMANCE_RUN(n) \
  if (name == #n) return ops::n<T, B>(seed);
  ATTN_CONFORMANCE_OPS(ATTN_CONFORMANCE_RUN)
#undef ATTN_CONFORMANCE_RUN
  throw attn::ArgumentError("conformance::run_ops: no case '" + name + "'");
}

}  // namespace conformance
