// SPDX-License-Identifier: MIT
// The fused LSTM op over a ragged batch (PyTorch's nn.LSTM on a packed sequence): one input GEMM per
// direction, one recurrent GEMM per time step, the backends' fused cell kernels (backend/cpu/lstm.hpp,
// backend/cuda/lstm.cuh), and a hand-written backward through time. Under a PrecisionScope of
// Precision::bf16 the CPU op's products (input projections, the recurrent products, and their
// backward) take bf16 operands with float sums; the cell, the states and the gradients stay float.
// Under Precision::int8 (inference only) the forward products take the weights quantized to int8
// per output channel and the inputs and hidden states quantized per row (kernels::gemm_int8),
// torch.ao.nn.quantized.dynamic.LSTM's model; without a gradient to record, the weights' int8 or
// bf16 packs are kept with them (autograd/packed_weights.hpp).
//   auto r = attn::lstm(tape, x, lengths, {w_ih, w_hh, b_ih, b_hh});   // r.out (B, T, H), r.h_n / r.c_n (1, B, H)
//   auto s = attn::lstm(tape, y, lengths, {w_ih, w_hh, b_ih, b_hh}, {r.h_n, r.c_n});   // from a given state
#pragma once
#include <algorithm>
#include <array>
#include <exception>
#include <initializer_list>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../backend/kernels.hpp"
#include "../core/precision.hpp"
#include "packed_weights.hpp"
#include "var.hpp"

namespace attn {

/// The parameters of one LSTM direction, in PyTorch's layout; the gate rows are stacked i, f, g, o.
template <class T, class B = cpu>
struct LstmWeights {
  Var<T, AnyShape, B> w_ih;  // (4H, In)
  Var<T, AnyShape, B> w_hh;  // (4H, H)
  Var<T, AnyShape, B> b_ih;  // (4H)
  Var<T, AnyShape, B> b_hh;  // (4H)
};

/// The initial state of lstm()/bilstm() (torch's hx = (h_0, c_0)): h0 and c0 (dirs, B, H), in the
/// batch's own order, direction 0 first. Either may be left undefined: a zero state. Gradients flow
/// into them as into any input.
template <class T, class B = cpu>
struct LstmState {
  Var<T, AnyShape, B> h0;
  Var<T, AnyShape, B> c0;
};

/// What lstm()/bilstm() return. One tape node produces all three; a loss may use any of them.
template <class T, class B = cpu>
struct LstmResult {
  Var<T, AnyShape, B> out;  // (B, T, dirs*H): direction d in columns d*H .. d*H+H-1, zero at padded steps
  Var<T, AnyShape, B> h_n;  // (dirs, B, H): state after each sample's last step in that direction
  Var<T, AnyShape, B> c_n;  // (dirs, B, H)
};

namespace detail {

/// The packed (time-major, longest first) layout of a ragged batch, as PyTorch's PackedSequence:
/// step s holds the batch[s] samples still running, which are a prefix of `order`, so the
/// recurrent GEMM at each step runs on a contiguous, shrinking block of rows.
struct LstmPlan {
  PoolVector<std::size_t> order;   // sorted position j -> batch index (length descending, stable)
  PoolVector<std::size_t> len;     // len[j]: length of sample order[j]
  PoolVector<std::size_t> batch;   // batch[s]: samples running at step s
  PoolVector<std::size_t> offset;  // offset[s]: first packed row of step s; offset[steps] = total
  std::size_t steps = 0, total = 0;

  /// Time index read at step s by sorted sample j: forward t = s, reverse t = len - 1 - s
  /// (the reverse direction starts at each sample's own last token).
  std::size_t time(int dir, std::size_t j, std::size_t s) const { return dir == 0 ? s : len[j] - 1 - s; }
};

/// The plan of a batch x (B, T, .) with these lengths, each in [1, T] (else ArgumentError naming op).
inline LstmPlan lstm_plan(std::span<const int> lengths, const Dims& x, const char* op = "lstm") {
  const std::size_t b = x.v[0], t = x.v[1];
  if (lengths.size() != b)
    throw ShapeError(std::string(op) + ": " + std::to_string(lengths.size()) + " lengths for a batch of " + std::to_string(b) + " (x " +
                     x.str() + ")");
  for (std::size_t i = 0; i < b; ++i)
    if (lengths[i] < 1 || static_cast<std::size_t>(lengths[i]) > t)
      throw ArgumentError(std::string(op) + ": lengths[" + std::to_string(i) + "] = " + std::to_string(lengths[i]) + " is outside [1, " +
                          std::to_string(t) + "] (the time extent of x " + x.str() + ")");
  LstmPlan p;
  p.order.resize(b);
  std::iota(p.order.begin(), p.order.end(), std::size_t(0));
  // Length descending, ties in batch order (a stable order; std::stable_sort would allocate).
  std::sort(p.order.begin(), p.order.end(),
            [&](std::size_t a, std::size_t c) { return lengths[a] != lengths[c] ? lengths[a] > lengths[c] : a < c; });
  p.len.resize(b);
  for (std::size_t j = 0; j < b; ++j) p.len[j] = static_cast<std::size_t>(lengths[p.order[j]]);
  p.steps = b ? p.len[0] : 0;
  p.batch.assign(p.steps, 0);
  p.offset.assign(p.steps + 1, 0);
  for (std::size_t s = 0; s < p.steps; ++s) {
    std::size_t n = 0;
    while (n < b && p.len[n] > s) ++n;
    p.batch[s] = n;
    p.offset[s + 1] = p.offset[s] + n;
  }
  p.total = p.offset[p.steps];
  return p;
}

/// The plan's row maps in backend B's memory, for kernels::copy_rows: packing a (B, T, w) tensor
/// into (total, w) rows is a copy from rows[d], unpacking a copy into rows[d].
template <class B>
struct LstmMaps {
  using Index = Tensor<std::int64_t, AnyShape, B>;
  PoolVector<Index> rows;         // [dir] (total): packed row -> row b*T + t of a (B, T, .) tensor
  PoolVector<Index> prev;         // [dir] (total - batch[0]): packed row of step s >= 1 -> the row of step s-1's input
  PoolVector<Index> final_state;  // [dir] (B): sorted sample j -> row dir*B + order[j] of h_n, c_n (dirs*B, H)
  Index last;                      // (B): sorted sample j -> the packed row of its last step
};

template <class B>
LstmMaps<B> lstm_maps(const LstmPlan& p, int dirs, std::size_t t_ext) {
  using Index = typename LstmMaps<B>::Index;
  auto upload = [](const PoolVector<std::int64_t>& v) { return Index::from(Dims{v.size()}, std::span<const std::int64_t>(v)); };
  const std::size_t bn = p.order.size(), first = p.steps ? p.batch[0] : 0;
  LstmMaps<B> m;
  PoolVector<std::int64_t> last(bn);
  for (std::size_t j = 0; j < bn; ++j) last[j] = static_cast<std::int64_t>(p.offset[p.len[j] - 1] + j);
  m.last = upload(last);
  for (int d = 0; d < dirs; ++d) {
    PoolVector<std::int64_t> rows(p.total), prev(p.total - first), fin(bn);
    for (std::size_t s = 0; s < p.steps; ++s)
      for (std::size_t j = 0; j < p.batch[s]; ++j) {
        rows[p.offset[s] + j] = static_cast<std::int64_t>(p.order[j] * t_ext + p.time(d, j, s));
        if (s > 0) prev[p.offset[s] - first + j] = rows[p.offset[s - 1] + j];
      }
    for (std::size_t j = 0; j < bn; ++j) fin[j] = static_cast<std::int64_t>(std::size_t(d) * bn + p.order[j]);
    m.rows.push_back(upload(rows));
    m.prev.push_back(upload(prev));
    m.final_state.push_back(upload(fin));
  }
  return m;
}

/// Runs f(d) for each direction, both at once on two threads when parallel (each direction's GEMMs
/// then run single-threaded). An exception from either is rethrown after both finish.
template <class F>
void lstm_for_directions(int dirs, bool parallel, F&& f) {
  std::exception_ptr err[2];
  auto guarded = [&](int d) {
    try {
      f(d);
    } catch (...) {
      err[d] = std::current_exception();
    }
  };
#if defined(_OPENMP)
  if (dirs == 2 && parallel && omp_get_max_threads() > 1 && !omp_in_parallel()) {
#pragma omp parallel for num_threads(2) schedule(static, 1)
    for (int d = 0; d < 2; ++d) guarded(d);
  } else {
    for (int d = 0; d < dirs; ++d) guarded(d);
  }
#else
  (void)parallel;
  for (int d = 0; d < dirs; ++d) guarded(d);
#endif
  for (int d = 0; d < dirs; ++d)
    if (err[d]) std::rethrow_exception(err[d]);
}

/// The weights of direction dir of a recurrent op with `gates` gates (the LSTM's 4, the GRU's 3), op
/// "lstm" or "gru": each defined, weight_hh (G·H, H) with H the same in every direction (set by
/// direction 0), weight_ih (G·H, in), the biases (G·H).
template <class W>
void rnn_check_weights(const W& w, std::size_t gates, std::size_t in, std::size_t& hidden, int dir, const char* op) {
  auto who = [&] { return std::string(op) + ": direction " + std::to_string(dir) + ": "; };  // built only for a message
  const std::string gh = std::to_string(gates) + "H";
  if (!w.w_ih.defined() || !w.w_hh.defined() || !w.b_ih.defined() || !w.b_hh.defined())
    throw ArgumentError(who() + "a weight or bias is undefined");
  const Dims& hh = w.w_hh.dims();
  if (hh.n != 2 || hh.v[0] == 0 || hh.v[0] != gates * hh.v[1]) throw ShapeError(who() + "weight_hh must be (" + gh + ", H), got " + hh.str());
  if (dir == 0) hidden = hh.v[1];
  const std::size_t g = gates * hidden;
  if (hh.v[1] != hidden) shape_mismatch(op, "the directions differ in hidden size (weight_hh)", hh, Dims{g, hidden});
  if (!(w.w_ih.dims() == Dims{g, in})) shape_mismatch(op, who() + "weight_ih must be (" + gh + ", input)", w.w_ih.dims(), Dims{g, in});
  if (!(w.b_ih.dims() == Dims{g})) shape_mismatch(op, who() + "bias_ih must be (" + gh + ")", w.b_ih.dims(), Dims{g});
  if (!(w.b_hh.dims() == Dims{g})) shape_mismatch(op, who() + "bias_hh must be (" + gh + ")", w.b_hh.dims(), Dims{g});
}

template <class T, class B>
void lstm_check_weights(const LstmWeights<T, B>& w, std::size_t in, std::size_t& hidden, int dir) {
  rnn_check_weights(w, 4, in, hidden, dir, "lstm");
}

/// Whether any two directions of a recurrent op's backward share a weight or bias (saved[d].w_ih ...
/// hold each direction's VarData): their gradients then accumulate into one buffer, and the
/// directions must run one after the other.
template <class Saved>
bool rnn_shares_weights(const Saved& saved) {
  for (std::size_t d = 0; d < saved.size(); ++d)
    for (std::size_t e = 0; e < d; ++e)
      for (const auto* a : {saved[d].w_ih.get(), saved[d].w_hh.get(), saved[d].b_ih.get(), saved[d].b_hh.get()})
        for (const auto* b : {saved[e].w_ih.get(), saved[e].w_hh.get(), saved[e].b_ih.get(), saved[e].b_hh.get()})
          if (a == b) return true;
  return false;
}

/// The precision an LSTM op on T and B runs its products in now (fp32 unless float on the CPU).
template <class T, class B>
Precision lstm_precision() {
  if constexpr (std::is_same_v<T, float> && std::is_same_v<B, cpu>) return precision();
  else return Precision::fp32;
}

/// One operand of the LSTM's products, op(W) (k, n) with W's rows ldw apart: packed in bf16 when
/// `low` (once, for every product that reads it), else read as it is by the FP32 GEMM. A forward
/// weight operand (weight()) may instead use the int8 or bf16 pack kept with its parameter.
template <class T, class B>
struct LstmOperand {
  LstmOperand(bool low, Trans tw, int k, int n, const T* w, int ldw) : low(low), tw(tw), w(w), ldw(ldw) {
    if constexpr (std::is_same_v<T, float> && std::is_same_v<B, cpu>)
      if (low) packed.pack(tw, k, n, w, ldw);
  }
  /// W^T (k, n) of a weight parameter W (n, k), for the forward pass in precision prec: int8 from the
  /// parameter's kept pack; bf16 from its kept pack when `keep` (inference), else packed here.
  static LstmOperand weight(Precision prec, bool keep, VarData<T, B>& wd) {
    const int n = int(wd.value.dims().v[0]), k = int(wd.value.dims().v[1]);
    if constexpr (std::is_same_v<T, float> && std::is_same_v<B, cpu>) {
      if (prec == Precision::int8 || (prec == Precision::bf16 && keep)) {
        LstmOperand o(false, Trans::yes, k, n, wd.value.data(), k);
        if (prec == Precision::int8) o.int8 = detail::int8_weight(wd);
        else o.kept = detail::bf16_weight(wd);
        return o;
      }
    }
    return LstmOperand(prec == Precision::bf16, Trans::yes, k, n, wd.value.data(), k);
  }
  /// C (m, n) = op(A) op(W) + beta C.
  void gemm(Trans ta, int m, int n, int k, const T* a, int lda, T beta, T* c, int ldc) const {
    if constexpr (std::is_same_v<T, float> && std::is_same_v<B, cpu>) {
      if (int8) {
        if (ta != Trans::no) throw ArgumentError("lstm: an int8 product takes A untransposed");
        return kernels::gemm_int8(m, n, k, a, lda, *int8, beta, c, ldc);
      }
      if (kept) return kernels::gemm_bf16(ta, m, n, k, 1.f, a, lda, *kept, beta, c, ldc);
      if (low) return kernels::gemm_bf16(ta, m, n, k, 1.f, a, lda, packed, beta, c, ldc);
    }
    B::template gemm<T>(ta, tw, m, n, k, T(1), a, lda, w, ldw, beta, c, ldc);
  }
  bool low;
  Trans tw;
  const T* w;
  int ldw;
  kernels::PackedBf16 packed;
  std::shared_ptr<const kernels::PackedInt8> int8;
  std::shared_ptr<const kernels::PackedBf16> kept;
};

/// A recurrent op's initial state v (dirs, B, H) in the plan's sorted order, (B, H) per direction;
/// empty tensors (the zero state) when v is undefined.
template <class T, class B>
PoolVector<Tensor<T, AnyShape, B>> rnn_sorted_state(const Var<T, AnyShape, B>& v, const LstmMaps<B>& maps, int dirs, std::size_t bn,
                                                    std::size_t h) {
  PoolVector<Tensor<T, AnyShape, B>> s(dirs);
  if (v.defined())
    for (int d = 0; d < dirs; ++d) {
      s[d] = Tensor<T, AnyShape, B>({bn, h});
      kernels::copy_rows(B{}, bn, h, v.raw().data(), h, maps.final_state[d].data(), s[d].data(), h, nullptr, false);
    }
  return s;
}

/// Whether a recurrent op (op "lstm" or "gru") on x, the weights w of its dirs directions and the
/// initial states records a gradient; ArgumentError when it would under Precision::int8.
template <class T, class B, class W>
bool rnn_records_grad(Tape* tape, const Var<T, AnyShape, B>& x, const W* w, int dirs,
                      std::initializer_list<const Var<T, AnyShape, B>*> states, Precision prec, const char* op) {
  bool rg = tape != nullptr && x.requires_grad();
  for (int d = 0; d < dirs; ++d) rg = rg || needs_grad(tape, w[d].w_ih, w[d].w_hh, w[d].b_ih, w[d].b_hh);
  for (const auto* v : states) rg = rg || (tape != nullptr && v->defined() && v->requires_grad());
  if (prec == Precision::int8 && rg)
    throw ArgumentError(std::string(op) + ": Precision::int8 is for inference (dynamic quantization); this call would record a gradient "
                        "(run it under attn::NoGrad, or train in fp32 or bf16)");
  return rg;
}

/// Direction d's input projections of every packed row at once: x (B, T, In) packed into plan
/// order, (N, In) x W_ih^T (In, G) into A (N, G), whose rows are lda apart; no biases.
template <class T, class B>
void rnn_project_inputs(const LstmMaps<B>& maps, int d, const T* x, std::size_t n_rows, std::size_t in, VarData<T, B>& w_ih, Precision prec,
                        bool keep, T* A, std::size_t lda) {
  Tensor<T, AnyShape, B> xp({n_rows, in});
  kernels::copy_rows(B{}, n_rows, in, x, in, maps.rows[d].data(), xp.data(), in, nullptr, false);
  const std::size_t g = w_ih.value.dims().v[0];
  LstmOperand<T, B>::weight(prec, keep, w_ih).gemm(Trans::no, int(n_rows), int(g), int(in), xp.data(), int(in), T(0), A, int(lda));
}

/// What a recurrent op's backward keeps of one direction: its weights and biases, and two tensors
/// of the forward pass (the gate activations, and the LSTM's cells or the GRU's hidden states).
template <class T, class B>
struct RnnSaved {
  std::shared_ptr<VarData<T, B>> w_ih, w_hh, b_ih, b_hh;
  Tensor<T, AnyShape, B> act, kept;
};

/// The backward's inputs of a recurrent op: x, each direction's four parameters, the given states.
template <class T, class B>
PoolVector<const void*> rnn_tape_inputs(const Var<T, AnyShape, B>& x, const PoolVector<RnnSaved<T, B>>& saved,
                                        std::initializer_list<const VarData<T, B>*> states) {
  PoolVector<const void*> inputs{x.data().get()};
  for (const auto& sv : saved)
    for (const auto* p : {sv.w_ih.get(), sv.w_hh.get(), sv.b_ih.get(), sv.b_hh.get()}) inputs.push_back(p);
  for (const auto* p : states)
    if (p) inputs.push_back(p);
  return inputs;
}

/// One direction's parameter gradient slots, resolved on one thread before the directions run
/// concurrently (null: no gradient), and the scratch rnn_param_grads needs for them.
template <class T, class B>
struct RnnParamGrads {
  T *w_ih = nullptr, *w_hh = nullptr, *b_ih = nullptr, *b_hh = nullptr;
  Tensor<T, AnyShape, B> xp, hprev, dx;  // x packed (N, In), h_{s-1} (N - first, H), dx packed (N, In)

  RnnParamGrads(const RnnSaved<T, B>& sv, bool x_grad, std::size_t n_rows, std::size_t first, std::size_t in, std::size_t h) {
    if (sv.w_ih->requires_grad) w_ih = sv.w_ih->grad_ref().data();
    if (sv.w_hh->requires_grad) w_hh = sv.w_hh->grad_ref().data();
    if (sv.b_ih->requires_grad) b_ih = sv.b_ih->grad_ref().data();
    if (sv.b_hh->requires_grad) b_hh = sv.b_hh->grad_ref().data();
    if (w_ih) xp = Tensor<T, AnyShape, B>({n_rows, in});
    if (w_hh) hprev = Tensor<T, AnyShape, B>({n_rows - first, h});
    if (x_grad) dx = Tensor<T, AnyShape, B>({n_rows, in});
  }
};

/// Direction d's parameter and input gradients once its gate gradients are known, dgi (N, G) on the
/// input side and dgh (N, G) on the recurrent side (the LSTM's are one tensor): dW_hh += sum_s
/// dgh_s^T h_{s-1} (h_{s-1} gathered from out (B, T, dirs H), h0 (B, H) in sorted order at step 0
/// when given), dW_ih += dgi^T x, db_ih += the column sums of dgi, db_hh those of dgh, and dx
/// (packed) = dgi W_ih. Products in bf16 when low.
template <class T, class B>
void rnn_param_grads(RnnParamGrads<T, B>& q, const LstmPlan& plan, const LstmMaps<B>& maps, int d, int dirs, bool low, std::size_t in,
                     std::size_t h, std::size_t g, const T* dGi, const T* dGh, const T* x, const T* out, const Tensor<T, AnyShape, B>& h0,
                     const T* w_ih) {
  const std::size_t n_rows = plan.total, first = plan.steps ? plan.batch[0] : 0;
  if (q.w_hh && n_rows > first) {
    // One GEMM over all steps but the first, with h_{s-1} gathered into rows aligned with dgh.
    T* P = q.hprev.data();
    kernels::copy_rows(B{}, n_rows - first, h, out + std::size_t(d) * h, std::size_t(dirs) * h, maps.prev[d].data(), P, h, nullptr, false);
    LstmOperand<T, B>(low, Trans::no, int(n_rows - first), int(h), P, int(h))
        .gemm(Trans::yes, int(g), int(h), int(n_rows - first), dGh + first * g, int(g), T(1), q.w_hh, int(h));
  }
  if (q.w_hh && !h0.empty())  // step 0's recurrent product read h0
    LstmOperand<T, B>(low, Trans::no, int(first), int(h), h0.data(), int(h))
        .gemm(Trans::yes, int(g), int(h), int(first), dGh, int(g), T(1), q.w_hh, int(h));
  if (q.w_ih) {
    // (G, N) x (N, In).
    kernels::copy_rows(B{}, n_rows, in, x, in, maps.rows[d].data(), q.xp.data(), in, nullptr, false);
    LstmOperand<T, B>(low, Trans::no, int(n_rows), int(in), q.xp.data(), int(in))
        .gemm(Trans::yes, int(g), int(in), int(n_rows), dGi, int(g), T(1), q.w_ih, int(in));
  }
  Tensor<T, AnyShape, B> db;
  const T* summed = nullptr;  // the gradient db holds the column sums of
  const std::pair<const T*, T*> bias_grads[2] = {{dGi, q.b_ih}, {dGh, q.b_hh}};
  for (const auto& [src, dst] : bias_grads)
    if (dst) {
      if (src != summed) {
        if (db.empty()) db = Tensor<T, AnyShape, B>({g});
        kernels::sum_to(B{}, src, Dims{n_rows, g}, db.data(), Dims{g}, false);
        summed = src;
      }
      TensorView<T, AnyShape, B> v(dst, Dims{g});
      expr::assign(v, v + db);
    }
  // (N, G) x (G, In); scattered into dx by rnn_scatter_dx after every direction.
  if (!q.dx.empty())
    LstmOperand<T, B>(low, Trans::no, int(g), int(in), w_ih, int(in))
        .gemm(Trans::no, int(n_rows), int(in), int(g), dGi, int(g), T(0), q.dx.data(), int(in));
}

/// Adds each direction's packed dx into x's gradient (B, T, In).
template <class T, class B>
void rnn_scatter_dx(VarData<T, B>& xd, const PoolVector<RnnParamGrads<T, B>>& gr, const LstmMaps<B>& maps, std::size_t n_rows,
                    std::size_t in) {
  if (!xd.requires_grad) return;
  T* dx = xd.grad_ref().data();
  for (std::size_t d = 0; d < gr.size(); ++d) kernels::copy_rows(B{}, n_rows, in, gr[d].dx.data(), in, nullptr, dx, in, maps.rows[d].data(), true);
}

/// The forward pass of lstm_impl and lstm_from_table: the tensors it returns, and what backward keeps.
template <class T, class B>
struct LstmForward {
  Tensor<T, AnyShape, B> out, h_n, c_n;
  PoolVector<Tensor<T, AnyShape, B>> act, cell;  // per direction: gate activations (N, 4H), cells (N, H)
};

/// Runs the recurrence of every direction over the packed rows of `plan`. project(d, A) first writes
/// direction d's input projections of all packed rows, (N, 4H) without biases, into A.
/// h0s, c0s: per direction, the initial states in sorted order (bn, H), or empty (zero); null: none.
template <class T, class B, class Project>
LstmForward<T, B> lstm_forward_pass(const LstmPlan& plan, const LstmMaps<B>& maps, const LstmWeights<T, B>* w, int dirs, std::size_t bn,
                                    std::size_t tn, std::size_t h, Precision prec, bool keep, Project&& project,
                                    const PoolVector<Tensor<T, AnyShape, B>>* h0s = nullptr,
                                    const PoolVector<Tensor<T, AnyShape, B>>* c0s = nullptr) {
  using Ten = Tensor<T, AnyShape, B>;
  const std::size_t g = 4 * h, n_rows = plan.total;
  LstmForward<T, B> f{Ten::zeros({bn, tn, std::size_t(dirs) * h}), Ten::zeros({std::size_t(dirs), bn, h}),
                      Ten::zeros({std::size_t(dirs), bn, h}), PoolVector<Ten>(dirs), PoolVector<Ten>(dirs)};
  // The hidden states (N, H) and the summed bias (4H) are scratch.
  PoolVector<Ten> hid(dirs), bias(dirs);
  for (int d = 0; d < dirs; ++d) {
    f.act[d] = Ten({n_rows, g});
    f.cell[d] = Ten({n_rows, h});
    hid[d] = Ten({n_rows, h});
    bias[d] = Ten(w[d].b_ih.raw() + w[d].b_hh.raw());
  }
  // A device backend runs the directions one after the other: they share its one stream.
  const auto prof = profile::Scope::of_if<T>(std::is_same_v<B, cpu>, "lstm forward", bn, n_rows, dirs, h);
  lstm_for_directions(dirs, B::host_accessible, [&](int d) {
    T* A = f.act[d].data();
    T* Cc = f.cell[d].data();
    T* Hh = hid[d].data();
    project(d, A);
    // W_hh^T (H, 4H), packed once for every step under bf16 or int8.
    const LstmOperand<T, B> whh = LstmOperand<T, B>::weight(prec, keep, *w[d].w_hh.data());
    for (std::size_t s = 0; s < plan.steps; ++s) {
      const std::size_t n = plan.batch[s], r0 = plan.offset[s];
      const T* c_prev = nullptr;
      if (s > 0) {
        // (n, H) x (4H, H)^T, added to the step's input projections.
        const std::size_t p0 = plan.offset[s - 1];
        whh.gemm(Trans::no, int(n), int(g), int(h), Hh + p0 * h, int(h), T(1), A + r0 * g, int(g));
        c_prev = Cc + p0 * h;
      } else {
        // Step 0 runs every sample (each has a token): the initial state, where given.
        if (h0s && !(*h0s)[d].empty()) whh.gemm(Trans::no, int(n), int(g), int(h), (*h0s)[d].data(), int(h), T(1), A, int(g));
        if (c0s && !(*c0s)[d].empty()) c_prev = (*c0s)[d].data();
      }
      kernels::lstm_cell_forward(B{}, n, h, A + r0 * g, bias[d].data(), c_prev, Cc + r0 * h, Hh + r0 * h);
    }
    kernels::copy_rows(B{}, n_rows, h, Hh, h, nullptr, f.out.data() + std::size_t(d) * h, std::size_t(dirs) * h, maps.rows[d].data(), false);
    kernels::copy_rows(B{}, bn, h, Hh, h, maps.last.data(), f.h_n.data(), h, maps.final_state[d].data(), false);
    kernels::copy_rows(B{}, bn, h, Cc, h, maps.last.data(), f.c_n.data(), h, maps.final_state[d].data(), false);
  });
  return f;
}

template <class T, class B>
LstmResult<T, B> lstm_impl(Tape* tape, const Var<T, AnyShape, B>& x, std::span<const int> lengths, const LstmWeights<T, B>* w, int dirs,
                           const LstmState<T, B>& state) {
  using Ten = Tensor<T, AnyShape, B>;
  if (!x.defined() || x.rank() != 3) throw ShapeError("lstm: x must be (batch, time, input), got " + (x.defined() ? x.dims().str() : std::string("an undefined Var")));
  const std::size_t bn = x.size(0), tn = x.size(1), in = x.size(2);
  std::size_t h = 0;
  for (int d = 0; d < dirs; ++d) lstm_check_weights(w[d], in, h, d);
  const Dims sd{std::size_t(dirs), bn, h};
  if (state.h0.defined() && !(state.h0.dims() == sd)) shape_mismatch("lstm", "h0 must be (directions, batch, hidden)", state.h0.dims(), sd);
  if (state.c0.defined() && !(state.c0.dims() == sd)) shape_mismatch("lstm", "c0 must be (directions, batch, hidden)", state.c0.dims(), sd);
  LstmPlan plan = lstm_plan(lengths, x.dims());
  LstmMaps<B> maps = lstm_maps<B>(plan, dirs, tn);
  // The initial states in the plan's sorted order, per direction (empty: zero).
  PoolVector<Ten> h0s = rnn_sorted_state(state.h0, maps, dirs, bn, h), c0s = rnn_sorted_state(state.c0, maps, dirs, bn, h);
  const std::size_t n_rows = plan.total;
  const Precision prec = lstm_precision<T, B>();
  const bool low = prec == Precision::bf16;  // bf16 products, forward and backward
  const bool rg = rnn_records_grad(tape, x, w, dirs, {&state.h0, &state.c0}, prec, "lstm");
  LstmForward<T, B> f = lstm_forward_pass<T, B>(plan, maps, w, dirs, bn, tn, h, prec, !rg, [&](int d, T* A) {
    rnn_project_inputs(maps, d, x.raw().data(), n_rows, in, *w[d].w_ih.data(), prec, !rg, A, 4 * h);
  }, &h0s, &c0s);

  LstmResult<T, B> res{make_out<AnyShape>(tape, std::move(f.out), rg), make_out<AnyShape>(tape, std::move(f.h_n), rg),
                       make_out<AnyShape>(tape, std::move(f.c_n), rg)};
  if (!rg) return res;

  using Data = std::shared_ptr<VarData<T, B>>;
  PoolVector<RnnSaved<T, B>> saved;
  for (int d = 0; d < dirs; ++d) saved.push_back({w[d].w_ih.data(), w[d].w_hh.data(), w[d].b_ih.data(), w[d].b_hh.data(), f.act[d], f.cell[d]});
  const Data h0d = state.h0.defined() ? state.h0.data() : nullptr, c0d = state.c0.defined() ? state.c0.data() : nullptr;
  const PoolVector<const void*> inputs = rnn_tape_inputs(x, saved, {h0d.get(), c0d.get()});
  tape->push(res.out.data(), inputs, [xd = x.data(), od = res.out.data(), hd = res.h_n.data(), cd = res.c_n.data(), plan = std::move(plan),
                              maps = std::move(maps), saved = std::move(saved), h0d, c0d, h0s = std::move(h0s), c0s = std::move(c0s), dirs,
                              bn, in, h, low] {
    const bool g_out = !od->grad.empty(), g_h = !hd->grad.empty(), g_c = !cd->grad.empty();
    if (!g_out && !g_h && !g_c) return;
    const std::size_t g = 4 * h, n_rows = plan.total, first = plan.steps ? plan.batch[0] : 0;
    // Gradient slots are resolved here, on one thread, before the directions run concurrently.
    // So is each direction's scratch (dL/dh of every step, the gate gradients, the carry, dh0), so
    // that the pool's peak does not depend on how the two threads interleave.
    PoolVector<RnnParamGrads<T, B>> gr;
    gr.reserve(std::size_t(dirs));
    PoolVector<Ten> dh(dirs), dgates(dirs), dc(dirs), dh0(dirs);
    T* dh0_all = h0d && h0d->requires_grad ? h0d->grad_ref().data() : nullptr;  // (dirs, B, H), rows apart per direction
    T* dc0_all = c0d && c0d->requires_grad ? c0d->grad_ref().data() : nullptr;
    for (int d = 0; d < dirs; ++d) {
      gr.emplace_back(saved[d], xd->requires_grad, n_rows, first, in, h);
      dh[d] = Ten::zeros({n_rows, h});
      dgates[d] = Ten({n_rows, g});
      dc[d] = Ten::zeros({first, h});
      if (dh0_all) dh0[d] = Ten({bn, h});
    }
    const bool shared_weights = rnn_shares_weights(saved);
    const auto prof = profile::Scope::of_if<T>(std::is_same_v<B, cpu>, "lstm backward", bn, n_rows, dirs, h);
    lstm_for_directions(dirs, B::host_accessible && !shared_weights, [&](int d) {
      const RnnSaved<T, B>& sv = saved[d];
      T* dH = dh[d].data();
      T* dG = dgates[d].data();
      T* dC = dc[d].data();
      const T* A = sv.act.data();
      const T* Cc = sv.kept.data();
      // dL/dh of every step from out, and dL/dh, dL/dc of each sample's final step from h_n, c_n.
      if (g_out)
        kernels::copy_rows(B{}, n_rows, h, od->grad.data() + std::size_t(d) * h, std::size_t(dirs) * h, maps.rows[d].data(), dH, h,
                           nullptr, false);
      if (g_h) kernels::copy_rows(B{}, bn, h, hd->grad.data(), h, maps.final_state[d].data(), dH, h, maps.last.data(), true);
      // Sample j's carry starts at its last step.
      if (g_c) kernels::copy_rows(B{}, bn, h, cd->grad.data(), h, maps.final_state[d].data(), dC, h, nullptr, false);
      // W_hh (4H, H), packed once for every step under bf16.
      const LstmOperand<T, B> whh(low, Trans::no, int(g), int(h), sv.w_hh->value.data(), int(h));
      for (std::size_t s = plan.steps; s-- > 0;) {
        const std::size_t n = plan.batch[s], r0 = plan.offset[s];
        const T* c_prev = s > 0 ? Cc + plan.offset[s - 1] * h : c0s[d].empty() ? nullptr : c0s[d].data();
        kernels::lstm_cell_backward(B{}, n, h, A + r0 * g, Cc + r0 * h, c_prev, dH + r0 * h, dC, dG + r0 * g);
        // dh_prev += dgates W_hh: (n, 4H) x (4H, H).
        if (s > 0)
          whh.gemm(Trans::no, int(n), int(h), int(g), dG + r0 * g, int(g), T(1), dH + plan.offset[s - 1] * h, int(h));
      }
      if (dh0_all && !h0s[d].empty()) {
        // Step 0's recurrent product read h0: dh0 = dgates_0 W_hh.
        whh.gemm(Trans::no, int(first), int(h), int(g), dG, int(g), T(0), dh0[d].data(), int(h));
        kernels::copy_rows(B{}, bn, h, dh0[d].data(), h, nullptr, dh0_all, h, maps.final_state[d].data(), true);
      }
      // dL/dc0: the carry left after step 0 (dc_prev of its cells).
      if (dc0_all) kernels::copy_rows(B{}, bn, h, dC, h, nullptr, dc0_all, h, maps.final_state[d].data(), true);
      // One gate gradient feeds both sides: the LSTM adds its two biases and products.
      rnn_param_grads(gr[d], plan, maps, d, dirs, low, in, h, g, dG, dG, xd->value.data(), od->value.data(), h0s[d], sv.w_ih->value.data());
    });
    rnn_scatter_dx(*xd, gr, maps, n_rows, in);
    // The tape releases out's gradient after this step; h_n's and c_n's are complete too.
    hd->grad = {};
    cd->grad = {};
  });
  return res;
}

}  // namespace detail

/// Unidirectional LSTM over a ragged batch, as torch.nn.LSTM(batch_first=True) on
/// pack_padded_sequence(x, lengths, enforce_sorted=False). x (B, T, In); lengths (B), each in
/// [1, T], in any order (else ArgumentError). Returns out (B, T, H), h_n and c_n (1, B, H).
template <Context C, class T, class SX, class B>
LstmResult<T, B> lstm(C& ctx, const Var<T, SX, B>& x, std::span<const int> lengths, const std::type_identity_t<LstmWeights<T, B>>& w) {
  return detail::lstm_impl<T, B>(detail::tape_of(ctx), x.erased(), lengths, &w, 1, {});
}
/// The same from an initial state (torch's lstm(x, (h_0, c_0))): state.h0, state.c0 (1, B, H).
template <Context C, class T, class SX, class B>
LstmResult<T, B> lstm(C& ctx, const Var<T, SX, B>& x, std::span<const int> lengths, const std::type_identity_t<LstmWeights<T, B>>& w,
                      const std::type_identity_t<LstmState<T, B>>& state) {
  return detail::lstm_impl<T, B>(detail::tape_of(ctx), x.erased(), lengths, &w, 1, state);
}

/// Bidirectional LSTM (bidirectional=True): fwd reads each sample from its first token, rev from its
/// own last real token backwards. Returns out (B, T, 2H) (fwd in columns [0, H)), h_n, c_n (2, B, H).
template <Context C, class T, class SX, class B>
LstmResult<T, B> bilstm(C& ctx, const Var<T, SX, B>& x, std::span<const int> lengths, const std::type_identity_t<LstmWeights<T, B>>& fwd,
                        const std::type_identity_t<LstmWeights<T, B>>& rev) {
  const LstmWeights<T, B> w[2] = {fwd, rev};
  return detail::lstm_impl<T, B>(detail::tape_of(ctx), x.erased(), lengths, w, 2, {});
}
/// The same from an initial state: state.h0, state.c0 (2, B, H), the forward direction's first.
template <Context C, class T, class SX, class B>
LstmResult<T, B> bilstm(C& ctx, const Var<T, SX, B>& x, std::span<const int> lengths, const std::type_identity_t<LstmWeights<T, B>>& fwd,
                        const std::type_identity_t<LstmWeights<T, B>>& rev, const std::type_identity_t<LstmState<T, B>>& state) {
  const LstmWeights<T, B> w[2] = {fwd, rev};
  return detail::lstm_impl<T, B>(detail::tape_of(ctx), x.erased(), lengths, w, 2, state);
}

namespace detail {

/// E W_ih^T (V, G) for an embedding table E (V, In) and a weight_ih (G, In) of op ("lstm_input_table"
/// or "gru_input_table") with `gates` gates, in the precision the op would use now.
template <class T>
Tensor<T, AnyShape, cpu> rnn_input_table(const Var<T, AnyShape, cpu>& embedding, const Var<T, AnyShape, cpu>& w_ih, std::size_t gates,
                                         const char* op) {
  if (!embedding.defined() || embedding.rank() != 2) throw ShapeError(std::string(op) + ": the embedding table must be (rows, dim)");
  const std::size_t v = embedding.size(0), in = embedding.size(1);
  if (!w_ih.defined() || w_ih.rank() != 2 || w_ih.size(1) != in || w_ih.size(0) == 0 || w_ih.size(0) % gates != 0)
    throw ShapeError(std::string(op) + ": weight_ih " + (w_ih.defined() ? w_ih.dims().str() : std::string("undefined")) + " is not (" +
                     std::to_string(gates) + "H, " + std::to_string(in) + ") for an embedding table " + embedding.dims().str());
  const std::size_t g = w_ih.size(0);
  Tensor<T, AnyShape, cpu> t({v, g});
  const auto op_w = LstmOperand<T, cpu>::weight(lstm_precision<T, cpu>(), true, *w_ih.data());
  op_w.gemm(Trans::no, int(v), int(g), int(in), embedding.raw().data(), int(in), T(0), t.data(), int(g));
  return t;
}

/// The checks of lstm_from_table / gru_from_table (op) that come before the weights': one or two
/// directions, a table each, and ids (B, T).
template <class T, class I, class SI>
void rnn_check_table_call(const char* op, std::size_t tables, std::size_t dirs, const Tensor<I, SI, cpu>& ids) {
  if (dirs < 1 || dirs > 2 || tables != dirs)
    throw ArgumentError(std::string(op) + ": " + std::to_string(tables) + " tables for " + std::to_string(dirs) +
                        " directions (one or two, a table each)");
  if (ids.rank() != 2) throw ShapeError(std::string(op) + ": ids must be (batch, time), got " + ids.dims().str());
}

/// The plan of a from-table call, once the weights are checked: every table (V, gates H), the lengths
/// valid for ids (B, T), and each real token's id in [0, V).
template <class T, class I, class SI>
LstmPlan rnn_table_plan(const char* op, std::span<const Tensor<T, AnyShape, cpu>> tables, std::size_t gates, std::size_t h,
                        const Tensor<I, SI, cpu>& ids, std::span<const int> lengths) {
  const std::size_t bn = ids.size(0), tn = ids.size(1), v = tables[0].rank() == 2 ? tables[0].size(0) : 0, g = gates * h;
  for (std::size_t d = 0; d < tables.size(); ++d)
    if (!(tables[d].dims() == Dims{v, g}))
      shape_mismatch(op, "the input-projection tables must be (V, " + std::to_string(gates) + "H), one per direction", tables[d].dims(),
                     Dims{v, g});
  LstmPlan plan = lstm_plan(lengths, Dims{bn, tn, 0}, op);
  const I* id = ids.data();
  for (std::size_t b = 0; b < bn; ++b)
    for (std::size_t t = 0; t < std::size_t(lengths[b]); ++t)
      if (id[b * tn + t] < 0 || static_cast<std::size_t>(id[b * tn + t]) >= v)
        throw ArgumentError(std::string(op) + ": ids(" + std::to_string(b) + ", " + std::to_string(t) + ") = " +
                            std::to_string(static_cast<long long>(id[b * tn + t])) + " is outside the table of " + std::to_string(v) + " rows");
  return plan;
}

/// Gathers direction d's table rows (G wide) by token id into A's packed rows, lda apart.
template <class T, class I>
void rnn_gather_table(const Tensor<T, AnyShape, cpu>& table, const I* ids, const LstmMaps<cpu>& maps, int d, std::size_t n_rows, T* A,
                      std::size_t lda) {
  const std::size_t g = table.size(1);
  const std::int64_t* rows = maps.rows[std::size_t(d)].data();  // packed row -> b * T + t
  for (std::size_t r = 0; r < n_rows; ++r) std::copy_n(table.data() + static_cast<std::size_t>(ids[rows[r]]) * g, g, A + r * lda);
}

}  // namespace detail

/// The input-projection table of one LSTM direction for lstm_from_table: (V, 4H) = E W_ih^T, the
/// projection of every row of the embedding table E (V, In), in the precision lstm() would use now
/// (under int8 W_ih's kept int8 pack and each row quantized on its own, under bf16 its kept bf16
/// pack: the rows lstm() computes for those tokens). Build it again after E or W_ih change, or under
/// another precision.
template <class T>
Tensor<T, AnyShape, cpu> lstm_input_table(const Var<T, AnyShape, cpu>& embedding, const Var<T, AnyShape, cpu>& w_ih) {
  return detail::rnn_input_table(embedding, w_ih, 4, "lstm_input_table");
}

/// Inference for an Embedding followed by an LSTM (one direction) or a BiLSTM (two): the same
/// results as lstm()/bilstm() on embedding(E, ids), up to rounding, with each direction's input
/// projections gathered from its lstm_input_table (V, 4H) by token id instead of computed by a
/// GEMM. ids (B, T) of real tokens in [0, V) (positions past a sample's length are not read);
/// w: the directions' weights (their weight_ih only for the shapes). Computes no gradients.
template <class T, std::integral I, class SI>
LstmResult<T, cpu> lstm_from_table(NoGrad&, std::span<const Tensor<T, AnyShape, cpu>> tables, const Tensor<I, SI, cpu>& ids,
                                   std::span<const int> lengths, std::span<const LstmWeights<T, cpu>> w) {
  constexpr const char* op = "lstm_from_table";
  detail::rnn_check_table_call<T>(op, tables.size(), w.size(), ids);
  const int dirs = static_cast<int>(w.size());
  const std::size_t bn = ids.size(0), tn = ids.size(1);
  std::size_t h = 0;
  for (int d = 0; d < dirs; ++d) detail::lstm_check_weights(w[d], w[d].w_ih.defined() ? w[d].w_ih.size(1) : 0, h, d);
  const detail::LstmPlan plan = detail::rnn_table_plan(op, tables, 4, h, ids, lengths);
  const detail::LstmMaps<cpu> maps = detail::lstm_maps<cpu>(plan, dirs, tn);
  detail::LstmForward<T, cpu> f = detail::lstm_forward_pass<T, cpu>(plan, maps, w.data(), dirs, bn, tn, h, detail::lstm_precision<T, cpu>(),
                                                                     true, [&](int d, T* A) {
    detail::rnn_gather_table(tables[std::size_t(d)], ids.data(), maps, d, plan.total, A, 4 * h);
  });
  return {detail::make_out<AnyShape>(nullptr, std::move(f.out), false), detail::make_out<AnyShape>(nullptr, std::move(f.h_n), false),
          detail::make_out<AnyShape>(nullptr, std::move(f.c_n), false)};
}

#define ATTN_INSTANTIATE_CPU_LSTM(X, T)                                                                                    \
  X template LstmResult<T, cpu> detail::lstm_impl<T, cpu>(Tape*, const Var<T, AnyShape, cpu>&, std::span<const int>,        \
                                                          const LstmWeights<T, cpu>*, int, const LstmState<T, cpu>&);      \
  X template Tensor<T, AnyShape, cpu> lstm_input_table<T>(const Var<T, AnyShape, cpu>&, const Var<T, AnyShape, cpu>&);     \
  ATTN_INSTANTIATE_CPU_LSTM_FROM_TABLE(X, T, int)                                                                          \
  ATTN_INSTANTIATE_CPU_LSTM_FROM_TABLE(X, T, std::int64_t)
#define ATTN_INSTANTIATE_CPU_LSTM_FROM_TABLE(X, T, I)                                                                      \
  X template LstmResult<T, cpu> lstm_from_table<T, I, Shape<dyn, dyn>>(NoGrad&, std::span<const Tensor<T, AnyShape, cpu>>,  \
                                                                      const Tensor<I, Shape<dyn, dyn>, cpu>&,               \
                                                                      std::span<const int>, std::span<const LstmWeights<T, cpu>>); \
  X template LstmResult<T, cpu> lstm_from_table<T, I, AnyShape>(NoGrad&, std::span<const Tensor<T, AnyShape, cpu>>,         \
                                                               const Tensor<I, AnyShape, cpu>&, std::span<const int>,       \
                                                               std::span<const LstmWeights<T, cpu>>);
ATTN_EXTERN_TEMPLATES(ATTN_INSTANTIATE_CPU_LSTM)

}  // namespace attn
