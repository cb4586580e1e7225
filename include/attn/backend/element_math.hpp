// SPDX-License-Identifier: MIT
// The per-element math of the kernels, written once for every backend: ATTN_HD functions that the
// CPU loops (backend/cpu/) and the CUDA kernels (backend/cuda/) both call. A kernel keeps its own
// loop, tiling and vectorisation; the formulas it applies to each element or row live here.
//   const auto a = attn::elem::lstm_activate(ai, af, ag, ao);      // sigmoid, sigmoid, tanh, sigmoid
//   const auto s = attn::elem::online_softmax_step(m, block_max);  // new running max, rescale factor
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "../core/expr.hpp"
#include "../core/host_device.hpp"

namespace attn::elem {

// ---- LSTM cell (gates i, f, g, o, as PyTorch) ----

/// A cell's four gate activations: sigmoid(i), sigmoid(f), tanh(g), sigmoid(o).
template <class T>
struct LstmGates {
  T i, f, g, o;
};

/// The activations of the pre-activations (W_ih x + W_hh h_prev + b), one unit.
template <class T>
ATTN_HD LstmGates<T> lstm_activate(T ai, T af, T ag, T ao) {
  return {expr::Sigmoid{}(ai), expr::Sigmoid{}(af), expr::Tanh{}(ag), expr::Sigmoid{}(ao)};
}

/// The new cell state c = f c_prev + i g; without a previous state (the zero state) c = i g.
template <class T>
ATTN_HD T lstm_cell_state(const LstmGates<T>& a, T c_prev, bool has_prev) {
  return has_prev ? a.f * c_prev + a.i * a.g : a.i * a.g;
}

/// The output h = o tanh(c), from tanh(c).
template <class T>
ATTN_HD T lstm_hidden(T o, T tanh_c) {
  return o * tanh_c;
}

/// A unit's new cell state c and output h.
template <class T>
struct LstmState {
  T c, h;
};

/// Unit k of the fused cell over one row of gates (4H, stacked i, f, g, o): gates[k], gates[H + k],
/// ... hold the pre-activations on entry (bias (4H) is added here) and the activations on exit.
template <class T>
ATTN_HD LstmState<T> lstm_cell_unit(T* gates, const T* bias, std::size_t h, std::size_t k, T c_prev, bool has_prev) {
  const LstmGates<T> a = lstm_activate(gates[k] + bias[k], gates[h + k] + bias[h + k], gates[2 * h + k] + bias[2 * h + k],
                                       gates[3 * h + k] + bias[3 * h + k]);
  gates[k] = a.i;
  gates[h + k] = a.f;
  gates[2 * h + k] = a.g;
  gates[3 * h + k] = a.o;
  const T c = lstm_cell_state(a, c_prev, has_prev);
  return {c, lstm_hidden(a.o, expr::Tanh{}(c))};
}

/// dL/d(pre-activation) of the four gates, and dL/dc_prev.
template <class T>
struct LstmGateGrads {
  T i, f, g, o, c_prev;
};

/// Backward of one unit of the cell, from its activations, tanh(c), c_prev (has_prev false: the
/// zero state), dh = dL/dh of this step and dc = dL/dc carried from the next step:
///   dc' = dc + dh o (1 - tanh(c)^2);  d_o = dh tanh(c) o (1 - o);  d_i = dc' g i (1 - i);
///   d_g = dc' i (1 - g^2);  d_f = dc' c_prev f (1 - f) (0 without c_prev);  dc_prev = dc' f.
template <class T>
ATTN_HD LstmGateGrads<T> lstm_cell_backward(const LstmGates<T>& a, T tanh_c, T c_prev, bool has_prev, T dh, T dc) {
  const T dcr = dc + dh * a.o * (T(1) - tanh_c * tanh_c);
  LstmGateGrads<T> d;
  d.o = dh * tanh_c * a.o * (T(1) - a.o);
  d.i = dcr * a.g * a.i * (T(1) - a.i);
  d.g = dcr * a.i * (T(1) - a.g * a.g);
  d.f = has_prev ? dcr * c_prev * a.f * (T(1) - a.f) : T(0);
  d.c_prev = dcr * a.f;
  return d;
}

// ---- Layer normalisation (statistics in double) ----

/// 1 / sqrt(var + eps), var the biased variance: the sum of squared deviations over d elements.
template <class T>
ATTN_HD T layer_norm_rstd(double sq_dev_sum, std::size_t d, double eps) {
  using std::sqrt;
  return T(1.0 / sqrt(sq_dev_sum / double(d) + eps));
}

/// xhat = (x - mean) * rstd.
template <class T>
ATTN_HD T layer_norm_xhat(T x, double mean, T rstd) {
  return (x - T(mean)) * rstd;
}

/// gg = dy gamma, in double: the backward's per-element product.
template <class T>
ATTN_HD double layer_norm_gg(T dy, T gamma) {
  return double(dy) * gamma;
}

/// dL/dx of one element: rstd (gg - m1 - xhat m2), gg = dy gamma, m1 = mean(gg), m2 = mean(gg xhat)
/// over the row.
template <class T>
ATTN_HD T layer_norm_dx(T rstd, T dy, T gamma, double m1, double m2, T xhat) {
  return T(rstd * (layer_norm_gg(dy, gamma) - m1 - xhat * m2));
}

// ---- Softmax, log-sum-exp and cross-entropy ----

/// dL/dx of one element of y = softmax(x): y (dy - s), s = sum(dy y) over the row.
template <class T>
ATTN_HD T softmax_grad(T y, T dy, T s) {
  return y * (dy - s);
}

/// dL/dx of one element of y = log_softmax(x): dy - exp(y) s, s = sum(dy) over the row.
template <class T>
ATTN_HD T log_softmax_grad(T y, T dy, T s) {
  using std::exp;
  return dy - exp(y) * s;
}

/// A row's cross-entropy against target t with label smoothing eps, in double:
/// -(1 - eps) logp[t] - eps mean_j logp[j]; sum_logp = sum_j logp[j] (read only when eps != 0).
inline ATTN_HD double cross_entropy_row(double logp_t, double sum_logp, double eps, std::size_t classes) {
  double row = -(1 - eps) * logp_t;
  if (eps != 0) row -= eps * sum_logp / double(classes);
  return row;
}

/// g + scale (softmax - q) for one logit, q = (1 - eps) onehot(t) + eps / classes, from its
/// log-probability logp (softmax = exp(logp)); target: whether this is the row's target class.
template <class T>
ATTN_HD T cross_entropy_grad(T g, T logp, bool target, T scale, T eps, std::size_t classes) {
  using std::exp;
  T v = g + scale * (exp(logp) - eps / T(classes));
  if (target) v -= scale * (T(1) - eps);
  return v;
}

/// The online softmax (Milakov & Gimelshein) of a row seen block by block keeps a running max m and
/// sum l = sum exp(s - m). A block whose largest score is block_max moves m to m_new; the sum and
/// everything accumulated with the old weights are multiplied by alpha = exp(m - m_new) (0 while
/// nothing was visible: m = -inf). m_new = -inf: nothing is visible yet.
template <class T>
struct OnlineSoftmaxStep {
  T m_new, alpha;
};

template <class T>
ATTN_HD OnlineSoftmaxStep<T> online_softmax_step(T m, T block_max) {
  using std::exp;
  constexpr T neg_inf = -std::numeric_limits<T>::infinity();
  const T m_new = block_max > m ? block_max : m;
  // exp(0) is 1 exactly: a block that leaves the max where it was (most blocks) needs no exp.
  return {m_new, m == neg_inf ? T(0) : m_new == m ? T(1) : exp(m - m_new)};
}

/// The log-sum-exp m + log l of a row whose max is m and l = sum exp(x - m) (a softmax row, or an
/// online softmax at its end); +inf for a row that saw nothing (l = 0).
template <class T>
ATTN_HD T log_sum_exp(T m, T l) {
  using std::log;
  constexpr T inf = std::numeric_limits<T>::infinity();
  return l > T(0) ? m + log(l) : inf;
}

/// dL/dscore of one attention weight p (FlashAttention-2): p (dp - D), dp = dL/dp times the
/// weight's dropout factor, D = rowsum(dO * O).
template <class T>
ATTN_HD T attention_score_grad(T p, T dp, T d) {
  return p * (dp - d);
}

// ---- Dropout ----

/// The dropout factor of element idx of a stream with this seed: 0 when the 24-bit counter-based
/// hash (splitmix64) of (seed, idx) is below threshold (p 2^24), else keep (1 / (1 - p)). Forward
/// and backward, any tile order and either backend draw the same mask without storing it.
template <class T>
ATTN_HD T dropout_factor(std::uint64_t seed, std::uint64_t idx, std::uint32_t threshold, T keep) {
  std::uint64_t z = seed + (idx + 1) * 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return static_cast<std::uint32_t>(z >> 40) < threshold ? T(0) : keep;
}

}  // namespace attn::elem
