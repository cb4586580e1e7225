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
#include <numeric>
#include <span>
#include <string>
#include <type_traits>
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

inline LstmPlan lstm_plan(std::span<const int> lengths, const Dims& x) {
  const std::size_t b = x.v[0], t = x.v[1];
  if (lengths.size() != b)
    throw ShapeError("lstm: " + std::to_string(lengths.size()) + " lengths for a batch of " + std::to_string(b) + " (x " + x.str() + ")");
  for (std::size_t i = 0; i < b; ++i)
    if (lengths[i] < 1 || static_cast<std::size_t>(lengths[i]) > t)
      throw ArgumentError("lstm: lengths[" + std::to_string(i) + "] = " + std::to_string(lengths[i]) + " is outside [1, " +
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
  PoolVector<Ten> h0s(dirs), c0s(dirs);
  for (int d = 0; d < dirs; ++d)
    for (auto [v, out] : {std::pair{&state.h0, &h0s[d]}, std::pair{&state.c0, &c0s[d]}})
      if (v->defined()) {
        *out = Ten({bn, h});
        kernels::copy_rows(B{}, bn, h, v->raw().data(), h, maps.final_state[d].data(), out->data(), h, nullptr, false);
      }
  const std::size_t n_rows = plan.total;
  const T* X = x.raw().data();
  const Precision prec = lstm_precision<T, B>();
  const bool low = prec == Precision::bf16;  // bf16 products, forward and backward
  bool rg = tape != nullptr && x.requires_grad();
  for (int d = 0; d < dirs; ++d) rg = rg || needs_grad(tape, w[d].w_ih, w[d].w_hh, w[d].b_ih, w[d].b_hh);
  for (const auto* v : {&state.h0, &state.c0}) rg = rg || (tape != nullptr && v->defined() && v->requires_grad());
  if (prec == Precision::int8 && rg)
    throw ArgumentError("lstm: Precision::int8 is for inference (dynamic quantization); this call would record a gradient "
                        "(run it under attn::NoGrad, or train in fp32 or bf16)");
  LstmForward<T, B> f = lstm_forward_pass<T, B>(plan, maps, w, dirs, bn, tn, h, prec, !rg, [&](int d, T* A) {
    Ten xp({n_rows, in});  // the packed input (N, In)
    kernels::copy_rows(B{}, n_rows, in, X, in, maps.rows[d].data(), xp.data(), in, nullptr, false);
    // Input projections of every step at once: (N, In) x (4H, In)^T -> (N, 4H).
    const LstmOperand<T, B> wih = LstmOperand<T, B>::weight(prec, !rg, *w[d].w_ih.data());
    wih.gemm(Trans::no, int(n_rows), int(4 * h), int(in), xp.data(), int(in), T(0), A, int(4 * h));
  }, &h0s, &c0s);

  LstmResult<T, B> res{make_out<AnyShape>(tape, std::move(f.out), rg), make_out<AnyShape>(tape, std::move(f.h_n), rg),
                       make_out<AnyShape>(tape, std::move(f.c_n), rg)};
  if (!rg) return res;

  using Data = std::shared_ptr<VarData<T, B>>;
  struct DirSaved {
    Data w_ih, w_hh, b_ih, b_hh;
    Ten act, cell;
  };
  PoolVector<DirSaved> saved;
  for (int d = 0; d < dirs; ++d) saved.push_back({w[d].w_ih.data(), w[d].w_hh.data(), w[d].b_ih.data(), w[d].b_hh.data(), f.act[d], f.cell[d]});
  PoolVector<const void*> inputs{x.data().get()};
  for (const auto& sv : saved)
    for (const auto* p : {sv.w_ih.get(), sv.w_hh.get(), sv.b_ih.get(), sv.b_hh.get()}) inputs.push_back(p);
  const Data h0d = state.h0.defined() ? state.h0.data() : nullptr, c0d = state.c0.defined() ? state.c0.data() : nullptr;
  for (const Data& p : {h0d, c0d})
    if (p) inputs.push_back(p.get());
  tape->push(res.out.data(), inputs, [xd = x.data(), od = res.out.data(), hd = res.h_n.data(), cd = res.c_n.data(), plan = std::move(plan),
                              maps = std::move(maps), saved = std::move(saved), h0d, c0d, h0s = std::move(h0s), c0s = std::move(c0s), dirs,
                              bn, in, h, low] {
    const bool g_out = !od->grad.empty(), g_h = !hd->grad.empty(), g_c = !cd->grad.empty();
    if (!g_out && !g_h && !g_c) return;
    const std::size_t g = 4 * h, n_rows = plan.total, first = plan.steps ? plan.batch[0] : 0;
    // Gradient slots are resolved here, on one thread, before the directions run concurrently.
    struct DirGrads {
      T *w_ih = nullptr, *w_hh = nullptr, *b_ih = nullptr, *b_hh = nullptr;
      Ten dh, dgates, dc, xp, hprev, dx, dh0;
    };
    PoolVector<DirGrads> gr(dirs);
    T* dh0_all = h0d && h0d->requires_grad ? h0d->grad_ref().data() : nullptr;  // (dirs, B, H), rows apart per direction
    T* dc0_all = c0d && c0d->requires_grad ? c0d->grad_ref().data() : nullptr;
    const bool shared_weights = rnn_shares_weights(saved);
    for (int d = 0; d < dirs; ++d) {
      const DirSaved& sv = saved[d];
      DirGrads& q = gr[d];
      if (sv.w_ih->requires_grad) q.w_ih = sv.w_ih->grad_ref().data();
      if (sv.w_hh->requires_grad) q.w_hh = sv.w_hh->grad_ref().data();
      if (sv.b_ih->requires_grad) q.b_ih = sv.b_ih->grad_ref().data();
      if (sv.b_hh->requires_grad) q.b_hh = sv.b_hh->grad_ref().data();
      q.dh = Ten::zeros({n_rows, h});
      q.dgates = Ten({n_rows, g});
      q.dc = Ten::zeros({first, h});
      if (q.w_ih) q.xp = Ten({n_rows, in});
      if (q.w_hh) q.hprev = Ten({n_rows - first, h});
      if (xd->requires_grad) q.dx = Ten({n_rows, in});
      if (dh0_all) q.dh0 = Ten({bn, h});
    }
    const auto prof = profile::Scope::of_if<T>(std::is_same_v<B, cpu>, "lstm backward", bn, n_rows, dirs, h);
    lstm_for_directions(dirs, B::host_accessible && !shared_weights, [&](int d) {
      const DirSaved& sv = saved[d];
      DirGrads& q = gr[d];
      T* dH = q.dh.data();
      T* dG = q.dgates.data();
      T* dC = q.dc.data();
      const T* A = sv.act.data();
      const T* Cc = sv.cell.data();
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
      if (q.w_hh && n_rows > first) {
        // dW_hh += sum_s dgates_s^T h_{s-1}: one GEMM over all steps but the first, with h_{s-1}
        // gathered from out into rows aligned with dgates.
        T* P = q.hprev.data();
        kernels::copy_rows(B{}, n_rows - first, h, od->value.data() + std::size_t(d) * h, std::size_t(dirs) * h, maps.prev[d].data(), P,
                           h, nullptr, false);
        const LstmOperand<T, B> prev(low, Trans::no, int(n_rows - first), int(h), P, int(h));
        prev.gemm(Trans::yes, int(g), int(h), int(n_rows - first), dG + first * g, int(g), T(1), q.w_hh, int(h));
      }
      if (!h0s[d].empty()) {
        // Step 0's recurrent product read h0: dW_hh += dgates_0^T h0, dh0 = dgates_0 W_hh.
        if (q.w_hh)
          LstmOperand<T, B>(low, Trans::no, int(first), int(h), h0s[d].data(), int(h))
              .gemm(Trans::yes, int(g), int(h), int(first), dG, int(g), T(1), q.w_hh, int(h));
        if (dh0_all) {
          whh.gemm(Trans::no, int(first), int(h), int(g), dG, int(g), T(0), q.dh0.data(), int(h));
          kernels::copy_rows(B{}, bn, h, q.dh0.data(), h, nullptr, dh0_all, h, maps.final_state[d].data(), true);
        }
      }
      // dL/dc0: the carry left after step 0 (dc_prev of its cells).
      if (dc0_all) kernels::copy_rows(B{}, bn, h, dC, h, nullptr, dc0_all, h, maps.final_state[d].data(), true);
      if (q.w_ih) {
        // dW_ih += dgates^T x_packed: (4H, N) x (N, In).
        kernels::copy_rows(B{}, n_rows, in, xd->value.data(), in, maps.rows[d].data(), q.xp.data(), in, nullptr, false);
        const LstmOperand<T, B> xs(low, Trans::no, int(n_rows), int(in), q.xp.data(), int(in));
        xs.gemm(Trans::yes, int(g), int(in), int(n_rows), dG, int(g), T(1), q.w_ih, int(in));
      }
      if (q.b_ih || q.b_hh) {
        // db = column sums of dgates (N, 4H), added to both biases' gradients.
        Ten db({g});
        kernels::sum_to(B{}, dG, Dims{n_rows, g}, db.data(), Dims{g}, false);
        for (T* dst : {q.b_ih, q.b_hh})
          if (dst) {
            TensorView<T, AnyShape, B> v(dst, Dims{g});
            expr::assign(v, v + db);
          }
      }
      // dx_packed = dgates W_ih: (N, 4H) x (4H, In); scattered into dx after both directions.
      if (!q.dx.empty())
        LstmOperand<T, B>(low, Trans::no, int(g), int(in), sv.w_ih->value.data(), int(in))
            .gemm(Trans::no, int(n_rows), int(in), int(g), dG, int(g), T(0), q.dx.data(), int(in));
    });
    if (xd->requires_grad) {
      T* dx = xd->grad_ref().data();
      for (int d = 0; d < dirs; ++d) kernels::copy_rows(B{}, n_rows, in, gr[d].dx.data(), in, nullptr, dx, in, maps.rows[d].data(), true);
    }
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

/// The input-projection table of one LSTM direction for lstm_from_table: (V, 4H) = E W_ih^T, the
/// projection of every row of the embedding table E (V, In), in the precision lstm() would use now
/// (under int8 W_ih's kept int8 pack and each row quantized on its own, under bf16 its kept bf16
/// pack: the rows lstm() computes for those tokens). Build it again after E or W_ih change, or under
/// another precision.
template <class T>
Tensor<T, AnyShape, cpu> lstm_input_table(const Var<T, AnyShape, cpu>& embedding, const Var<T, AnyShape, cpu>& w_ih) {
  if (!embedding.defined() || embedding.rank() != 2) throw ShapeError("lstm_input_table: the embedding table must be (rows, dim)");
  const std::size_t v = embedding.size(0), in = embedding.size(1);
  if (!w_ih.defined() || w_ih.rank() != 2 || w_ih.size(1) != in || w_ih.size(0) % 4 != 0)
    throw ShapeError("lstm_input_table: weight_ih " + (w_ih.defined() ? w_ih.dims().str() : std::string("undefined")) +
                     " is not (4H, " + std::to_string(in) + ") for an embedding table " + embedding.dims().str());
  const std::size_t g = w_ih.size(0);
  Tensor<T, AnyShape, cpu> t({v, g});
  const auto op = detail::LstmOperand<T, cpu>::weight(detail::lstm_precision<T, cpu>(), true, *w_ih.data());
  op.gemm(Trans::no, int(v), int(g), int(in), embedding.raw().data(), int(in), T(0), t.data(), int(g));
  return t;
}

/// Inference for an Embedding followed by an LSTM (one direction) or a BiLSTM (two): the same
/// results as lstm()/bilstm() on embedding(E, ids), up to rounding, with each direction's input
/// projections gathered from its lstm_input_table (V, 4H) by token id instead of computed by a
/// GEMM. ids (B, T) of real tokens in [0, V) (positions past a sample's length are not read);
/// w: the directions' weights (their weight_ih only for the shapes). Computes no gradients.
template <class T, std::integral I, class SI>
LstmResult<T, cpu> lstm_from_table(NoGrad&, std::span<const Tensor<T, AnyShape, cpu>> tables, const Tensor<I, SI, cpu>& ids,
                                   std::span<const int> lengths, std::span<const LstmWeights<T, cpu>> w) {
  const int dirs = static_cast<int>(w.size());
  if (dirs < 1 || dirs > 2 || tables.size() != w.size())
    throw ArgumentError("lstm_from_table: " + std::to_string(tables.size()) + " tables for " + std::to_string(w.size()) +
                        " directions (one or two, a table each)");
  if (ids.rank() != 2) throw ShapeError("lstm_from_table: ids must be (batch, time), got " + ids.dims().str());
  const std::size_t bn = ids.size(0), tn = ids.size(1);
  std::size_t h = 0;
  for (int d = 0; d < dirs; ++d) detail::lstm_check_weights(w[d], w[d].w_ih.defined() ? w[d].w_ih.size(1) : 0, h, d);
  const std::size_t g = 4 * h, v = tables[0].size(0);
  for (int d = 0; d < dirs; ++d)
    if (!(tables[std::size_t(d)].dims() == Dims{v, g}))
      shape_mismatch("lstm_from_table", "the input-projection tables must be (V, 4H), one per direction", tables[std::size_t(d)].dims(),
                     Dims{v, g});
  const detail::LstmPlan plan = detail::lstm_plan(lengths, Dims{bn, tn, 0});
  const detail::LstmMaps<cpu> maps = detail::lstm_maps<cpu>(plan, dirs, tn);
  const I* id = ids.data();
  for (std::size_t b = 0; b < bn; ++b)
    for (std::size_t t = 0; t < std::size_t(lengths[b]); ++t)
      if (id[b * tn + t] < 0 || static_cast<std::size_t>(id[b * tn + t]) >= v)
        throw ArgumentError("lstm_from_table: ids(" + std::to_string(b) + ", " + std::to_string(t) + ") = " +
                            std::to_string(static_cast<long long>(id[b * tn + t])) + " is outside the table of " + std::to_string(v) + " rows");
  detail::LstmForward<T, cpu> f = detail::lstm_forward_pass<T, cpu>(plan, maps, w.data(), dirs, bn, tn, h, detail::lstm_precision<T, cpu>(),
                                                                     true, [&](int d, T* A) {
    const T* table = tables[std::size_t(d)].data();
    const std::int64_t* rows = maps.rows[std::size_t(d)].data();  // packed row -> b * T + t
    for (std::size_t r = 0; r < plan.total; ++r) std::copy_n(table + static_cast<std::size_t>(id[rows[r]]) * g, g, A + r * g);
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
