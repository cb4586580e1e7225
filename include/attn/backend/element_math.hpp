// SPDX-License-Identifier: MIT
// The per-element math of the kernels, written once for every backend: ATTN_HD functions that the
// CPU loops (backend/cpu/) and the CUDA kernels (backend/cuda/) both call. A kernel keeps its own
// loop, tiling and vectorisation; the formulas it applies to each element or row live here.
//   const auto a = attn::elem::lstm_activate(ai, af, ag, ao);      // sigmoid, sigmoid, tanh, sigmoid
//   const auto g = attn::elem::gru_activate(ir, iz, in, hr, hz, hn);  // r, z, n = tanh(in + r hn)
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

// ---- GRU cell (gates r, z, n, as PyTorch) ----

/// A GRU cell's activations of one unit: reset r, update z, candidate n, and hn = (W_hn h_prev +
/// b_hn), the recurrent part of n's pre-activation that r scales (kept for backward).
template <class T>
struct GruGates {
  T r, z, n, hn;
};

/// The activations from the input side's pre-activations (ir, iz, in = W_i* x + b_i*) and the
/// recurrent side's (hr, hz, hn = W_h* h_prev + b_h*): r = sigmoid(ir + hr), z = sigmoid(iz + hz),
/// n = tanh(in + r hn).
template <class T>
ATTN_HD GruGates<T> gru_activate(T ir, T iz, T in, T hr, T hz, T hn) {
  const T r = expr::Sigmoid{}(ir + hr);
  return {r, expr::Sigmoid{}(iz + hz), expr::Tanh{}(in + r * hn), hn};
}

/// The new state h = (1 - z) n + z h_prev, written as torch's (h_prev - n) z + n; the zero state is
/// h_prev = 0.
template <class T>
ATTN_HD T gru_hidden(const GruGates<T>& a, T h_prev) {
  return (h_prev - a.n) * a.z + a.n;
}

/// Unit k of the fused cell over one row: gates (4H) holds the input projections W_ih x (r, z, n;
/// without bias) on entry and the activations r, z, n, hn on exit; gh (3H) the recurrent products
/// W_hh h_prev (without bias), or null for the zero state (then h_prev is 0 too). Returns h.
template <class T>
ATTN_HD T gru_cell_unit(T* gates, const T* gh, const T* b_ih, const T* b_hh, std::size_t h, std::size_t k, T h_prev) {
  const T hr = (gh ? gh[k] : T(0)) + b_hh[k], hz = (gh ? gh[h + k] : T(0)) + b_hh[h + k], hn = (gh ? gh[2 * h + k] : T(0)) + b_hh[2 * h + k];
  const GruGates<T> a = gru_activate(gates[k] + b_ih[k], gates[h + k] + b_ih[h + k], gates[2 * h + k] + b_ih[2 * h + k], hr, hz, hn);
  gates[k] = a.r;
  gates[h + k] = a.z;
  gates[2 * h + k] = a.n;
  gates[3 * h + k] = a.hn;
  return gru_hidden(a, h_prev);
}

/// dL/d(pre-activation) of one GRU unit: r and z (the same on the input and the recurrent side),
/// n_in (the input side's n, in) and n_h (the recurrent side's, hn), and the direct part of dL/dh_prev
/// (z dh; the rest comes through W_hh).
template <class T>
struct GruGateGrads {
  T r, z, n_in, n_h, h_prev;
};

/// Backward of one unit from its activations, h_prev (0 for the zero state) and dh = dL/dh:
///   dn = dh (1 - z) (1 - n^2);  dz = dh (h_prev - n) z (1 - z);  dr = dn hn r (1 - r);
///   n_h = dn r;  dh_prev (direct) = dh z.
template <class T>
ATTN_HD GruGateGrads<T> gru_cell_backward(const GruGates<T>& a, T h_prev, T dh) {
  GruGateGrads<T> d;
  d.n_in = dh * (T(1) - a.z) * (T(1) - a.n * a.n);
  d.z = dh * (h_prev - a.n) * a.z * (T(1) - a.z);
  d.r = d.n_in * a.hn * a.r * (T(1) - a.r);
  d.n_h = d.n_in * a.r;
  d.h_prev = dh * a.z;
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
