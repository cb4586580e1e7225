// SPDX-License-Identifier: MIT
// The fused GRU op over a ragged batch (PyTorch's nn.GRU on a packed sequence), on the LSTM op's
// machinery (autograd/lstm.hpp: the packed plan, the row maps, the directions on two threads, the
// products' precision): one input GEMM per direction, one recurrent GEMM per time step, the
// backends' fused cell kernels (kernels::gru_cell_forward/backward), and a hand-written backward
// through time. The recurrent product is kept apart from the input projection because torch's
// candidate gate scales it by the reset gate: n = tanh(W_in x + b_in + r (W_hn h + b_hn)). Under
// Precision::bf16 (CPU, float) the products take bf16 operands with float sums; under
// Precision::int8 (inference only) the forward products take the weights in int8 per output channel
// and the inputs and states quantized per row, as torch.ao.nn.quantized.dynamic.GRU.
//   auto r = attn::gru(tape, x, lengths, {w_ih, w_hh, b_ih, b_hh});        // r.out (B, T, H), r.h_n (1, B, H)
//   auto s = attn::bigru(tape, x, lengths, fwd, rev, h0);                  // from h0 (2, B, H)
#pragma once
#include <concepts>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

#include "lstm.hpp"

namespace attn {

/// The parameters of one GRU direction, in PyTorch's layout; the gate rows are stacked r, z, n.
template <class T, class B = cpu>
struct GruWeights {
  Var<T, AnyShape, B> w_ih;  // (3H, In)
  Var<T, AnyShape, B> w_hh;  // (3H, H)
  Var<T, AnyShape, B> b_ih;  // (3H)
  Var<T, AnyShape, B> b_hh;  // (3H)
};

/// What gru()/bigru() return. One tape node produces both; a loss may use either.
template <class T, class B = cpu>
struct GruResult {
  Var<T, AnyShape, B> out;  // (B, T, dirs*H): direction d in columns d*H .. d*H+H-1, zero at padded steps
  Var<T, AnyShape, B> h_n;  // (dirs, B, H): state after each sample's last step in that direction
};

namespace detail {

/// The forward pass of gru_impl and gru_from_table: the tensors it returns, and what backward keeps.
template <class T, class B>
struct GruForward {
  Tensor<T, AnyShape, B> out, h_n;
  PoolVector<Tensor<T, AnyShape, B>> act, hid;  // per direction: r, z, n, hn (N, 4H), the states (N, H)
};

/// Runs the recurrence of every direction over the packed rows of `plan`. project(d, A) first writes
/// direction d's input projections of all packed rows, (N, 3H) without biases, into the first 3H
/// columns of A (N, 4H). h0s: per direction, the initial state in sorted order (bn, H), or empty
/// (zero); null: none.
template <class T, class B, class Project>
GruForward<T, B> gru_forward_pass(const LstmPlan& plan, const LstmMaps<B>& maps, const GruWeights<T, B>* w, int dirs, std::size_t bn,
                                  std::size_t tn, std::size_t h, Precision prec, bool keep, Project&& project,
                                  const PoolVector<Tensor<T, AnyShape, B>>* h0s = nullptr) {
  using Ten = Tensor<T, AnyShape, B>;
  const std::size_t g = 3 * h, n_rows = plan.total, first = plan.steps ? plan.batch[0] : 0;
  GruForward<T, B> f{Ten::zeros({bn, tn, std::size_t(dirs) * h}), Ten::zeros({std::size_t(dirs), bn, h}), PoolVector<Ten>(dirs),
                     PoolVector<Ten>(dirs)};
  for (int d = 0; d < dirs; ++d) {
    f.act[d] = Ten({n_rows, 4 * h});
    f.hid[d] = Ten({n_rows, h});
  }
  const auto prof = profile::Scope::of_if<T>(std::is_same_v<B, cpu>, "gru forward", bn, n_rows, dirs, h);
  lstm_for_directions(dirs, B::host_accessible, [&](int d) {
    T* A = f.act[d].data();
    T* Hh = f.hid[d].data();
    project(d, A);
    // W_hh^T (H, 3H), packed once for every step under bf16 or int8.
    const LstmOperand<T, B> whh = LstmOperand<T, B>::weight(prec, keep, *w[d].w_hh.data());
    const T* h0 = h0s && !(*h0s)[d].empty() ? (*h0s)[d].data() : nullptr;
    Ten gh({first, g});  // the step's recurrent products (n, 3H)
    for (std::size_t s = 0; s < plan.steps; ++s) {
      const std::size_t n = plan.batch[s], r0 = plan.offset[s];
      const T* hp = s > 0 ? Hh + plan.offset[s - 1] * h : h0;
      if (hp) whh.gemm(Trans::no, int(n), int(g), int(h), hp, int(h), T(0), gh.data(), int(g));
      kernels::gru_cell_forward(B{}, n, h, A + r0 * 4 * h, hp ? gh.data() : nullptr, w[d].b_ih.raw().data(), w[d].b_hh.raw().data(), hp,
                                Hh + r0 * h);
    }
    kernels::copy_rows(B{}, n_rows, h, Hh, h, nullptr, f.out.data() + std::size_t(d) * h, std::size_t(dirs) * h, maps.rows[d].data(), false);
    kernels::copy_rows(B{}, bn, h, Hh, h, maps.last.data(), f.h_n.data(), h, maps.final_state[d].data(), false);
  });
  return f;
}

template <class T, class B>
GruResult<T, B> gru_impl(Tape* tape, const Var<T, AnyShape, B>& x, std::span<const int> lengths, const GruWeights<T, B>* w, int dirs,
                         const Var<T, AnyShape, B>& h0) {
  using Ten = Tensor<T, AnyShape, B>;
  if (!x.defined() || x.rank() != 3)
    throw ShapeError("gru: x must be (batch, time, input), got " + (x.defined() ? x.dims().str() : std::string("an undefined Var")));
  const std::size_t bn = x.size(0), tn = x.size(1), in = x.size(2);
  std::size_t h = 0;
  for (int d = 0; d < dirs; ++d) rnn_check_weights(w[d], 3, in, h, d, "gru");
  const Dims sd{std::size_t(dirs), bn, h};
  if (h0.defined() && !(h0.dims() == sd)) shape_mismatch("gru", "h0 must be (directions, batch, hidden)", h0.dims(), sd);
  LstmPlan plan = lstm_plan(lengths, x.dims(), "gru");
  LstmMaps<B> maps = lstm_maps<B>(plan, dirs, tn);
  PoolVector<Ten> h0s = rnn_sorted_state(h0, maps, dirs, bn, h);  // in the plan's sorted order (empty: zero)
  const std::size_t n_rows = plan.total, g = 3 * h;
  const Precision prec = lstm_precision<T, B>();
  const bool low = prec == Precision::bf16;
  const bool rg = rnn_records_grad(tape, x, w, dirs, {&h0}, prec, "gru");
  GruForward<T, B> f = gru_forward_pass<T, B>(plan, maps, w, dirs, bn, tn, h, prec, !rg, [&](int d, T* A) {
    rnn_project_inputs(maps, d, x.raw().data(), n_rows, in, *w[d].w_ih.data(), prec, !rg, A, 4 * h);
  }, &h0s);
  GruResult<T, B> res{make_out<AnyShape>(tape, std::move(f.out), rg), make_out<AnyShape>(tape, std::move(f.h_n), rg)};
  if (!rg) return res;

  using Data = std::shared_ptr<VarData<T, B>>;
  PoolVector<RnnSaved<T, B>> saved;
  for (int d = 0; d < dirs; ++d) saved.push_back({w[d].w_ih.data(), w[d].w_hh.data(), w[d].b_ih.data(), w[d].b_hh.data(), f.act[d], f.hid[d]});
  const Data h0d = h0.defined() ? h0.data() : nullptr;
  const PoolVector<const void*> inputs = rnn_tape_inputs(x, saved, {h0d.get()});
  tape->push(res.out.data(), inputs, [xd = x.data(), od = res.out.data(), hd = res.h_n.data(), plan = std::move(plan), maps = std::move(maps),
                                      saved = std::move(saved), h0d, h0s = std::move(h0s), dirs, bn, in, h, g, low] {
    const bool g_out = !od->grad.empty(), g_h = !hd->grad.empty();
    if (!g_out && !g_h) return;
    const std::size_t n_rows = plan.total, first = plan.steps ? plan.batch[0] : 0;
    // Gradient slots are resolved here, on one thread, before the directions run concurrently.
    // So is each direction's scratch: dL/dh of each step's state, the gate gradients of the input
    // and recurrent sides (N, 3H), dh0.
    PoolVector<RnnParamGrads<T, B>> gr;
    gr.reserve(std::size_t(dirs));
    PoolVector<Ten> dh(dirs), dgi(dirs), dgh(dirs), dh0(dirs);
    for (int d = 0; d < dirs; ++d) {
      gr.emplace_back(saved[d], xd->requires_grad, n_rows, first, in, h);
      dh[d] = Ten::zeros({n_rows, h});
      dgi[d] = Ten({n_rows, g});
      dgh[d] = Ten({n_rows, g});
      if (!h0s[d].empty()) dh0[d] = Ten::zeros({bn, h});
    }
    T* dh0_all = h0d && h0d->requires_grad ? h0d->grad_ref().data() : nullptr;  // (dirs, B, H)
    const bool shared_weights = rnn_shares_weights(saved);
    const auto prof = profile::Scope::of_if<T>(std::is_same_v<B, cpu>, "gru backward", bn, n_rows, dirs, h);
    lstm_for_directions(dirs, B::host_accessible && !shared_weights, [&](int d) {
      const RnnSaved<T, B>& sv = saved[d];
      T* dH = dh[d].data();
      T* dGi = dgi[d].data();
      T* dGh = dgh[d].data();
      const T* A = sv.act.data();
      const T* Hh = sv.kept.data();
      // dL/dh of every step from out, and of each sample's final step from h_n.
      if (g_out)
        kernels::copy_rows(B{}, n_rows, h, od->grad.data() + std::size_t(d) * h, std::size_t(dirs) * h, maps.rows[d].data(), dH, h,
                           nullptr, false);
      if (g_h) kernels::copy_rows(B{}, bn, h, hd->grad.data(), h, maps.final_state[d].data(), dH, h, maps.last.data(), true);
      // W_hh (3H, H), packed once for every step under bf16.
      const LstmOperand<T, B> whh(low, Trans::no, int(g), int(h), sv.w_hh->value.data(), int(h));
      for (std::size_t s = plan.steps; s-- > 0;) {
        const std::size_t n = plan.batch[s], r0 = plan.offset[s];
        const T* hp = s > 0 ? Hh + plan.offset[s - 1] * h : h0s[d].empty() ? nullptr : h0s[d].data();
        T* dhp = s > 0 ? dH + plan.offset[s - 1] * h : hp ? dh0[d].data() : nullptr;
        kernels::gru_cell_backward(B{}, n, h, A + r0 * 4 * h, hp, dH + r0 * h, dhp, dGi + r0 * g, dGh + r0 * g);
        // dh_prev += dgh W_hh: (n, 3H) x (3H, H).
        if (hp) whh.gemm(Trans::no, int(n), int(h), int(g), dGh + r0 * g, int(g), T(1), dhp, int(h));
      }
      if (dh0_all && !h0s[d].empty()) kernels::copy_rows(B{}, bn, h, dh0[d].data(), h, nullptr, dh0_all, h, maps.final_state[d].data(), true);
      rnn_param_grads(gr[d], plan, maps, d, dirs, low, in, h, g, dGi, dGh, xd->value.data(), od->value.data(), h0s[d], sv.w_ih->value.data());
    });
    rnn_scatter_dx(*xd, gr, maps, n_rows, in);
    // The tape releases out's gradient after this step; h_n's is complete too.
    hd->grad = {};
  });
  return res;
}

}  // namespace detail

/// Unidirectional GRU over a ragged batch, as torch.nn.GRU(batch_first=True) on
/// pack_padded_sequence(x, lengths, enforce_sorted=False): r = sigmoid(W_ir x + b_ir + W_hr h + b_hr),
/// z likewise, n = tanh(W_in x + b_in + r (W_hn h + b_hn)), h' = (1 - z) n + z h. x (B, T, In);
/// lengths (B), each in [1, T], in any order (else ArgumentError); h0 (1, B, H), or undefined for
/// the zero state. Returns out (B, T, H) and h_n (1, B, H).
template <Context C, class T, class SX, class B>
GruResult<T, B> gru(C& ctx, const Var<T, SX, B>& x, std::span<const int> lengths, const std::type_identity_t<GruWeights<T, B>>& w,
                    const std::type_identity_t<Var<T, AnyShape, B>>& h0 = {}) {
  return detail::gru_impl<T, B>(detail::tape_of(ctx), x.erased(), lengths, &w, 1, h0);
}

/// Bidirectional GRU (bidirectional=True): fwd reads each sample from its first token, rev from its
/// own last real token backwards. h0 (2, B, H), the forward direction's first, or undefined. Returns
/// out (B, T, 2H) (fwd in columns [0, H)) and h_n (2, B, H).
template <Context C, class T, class SX, class B>
GruResult<T, B> bigru(C& ctx, const Var<T, SX, B>& x, std::span<const int> lengths, const std::type_identity_t<GruWeights<T, B>>& fwd,
                      const std::type_identity_t<GruWeights<T, B>>& rev, const std::type_identity_t<Var<T, AnyShape, B>>& h0 = {}) {
  const GruWeights<T, B> w[2] = {fwd, rev};
  return detail::gru_impl<T, B>(detail::tape_of(ctx), x.erased(), lengths, w, 2, h0);
}

/// The input-projection table of one GRU direction for gru_from_table: (V, 3H) = E W_ih^T, the
/// projection of every row of the embedding table E (V, In), in the precision gru() would use now
/// (as lstm_input_table). Build it again after E or W_ih change, or under another precision.
template <class T>
Tensor<T, AnyShape, cpu> gru_input_table(const Var<T, AnyShape, cpu>& embedding, const Var<T, AnyShape, cpu>& w_ih) {
  return detail::rnn_input_table(embedding, w_ih, 3, "gru_input_table");
}

/// Inference for an Embedding followed by a GRU (one direction) or a BiGRU (two): the same results
/// as gru()/bigru() on embedding(E, ids) from the zero state, up to rounding, with each direction's
/// input projections gathered from its gru_input_table (V, 3H) by token id instead of computed by a
/// GEMM. ids (B, T) of real tokens in [0, V) (positions past a sample's length are not read); w: the
/// directions' weights (their weight_ih only for the shapes). Computes no gradients.
template <class T, std::integral I, class SI>
GruResult<T, cpu> gru_from_table(NoGrad&, std::span<const Tensor<T, AnyShape, cpu>> tables, const Tensor<I, SI, cpu>& ids,
                                 std::span<const int> lengths, std::span<const GruWeights<T, cpu>> w) {
  constexpr const char* op = "gru_from_table";
  detail::rnn_check_table_call<T>(op, tables.size(), w.size(), ids);
  const int dirs = static_cast<int>(w.size());
  const std::size_t bn = ids.size(0), tn = ids.size(1);
  std::size_t h = 0;
  for (int d = 0; d < dirs; ++d) detail::rnn_check_weights(w[d], 3, w[d].w_ih.defined() ? w[d].w_ih.size(1) : 0, h, d, op);
  const detail::LstmPlan plan = detail::rnn_table_plan(op, tables, 3, h, ids, lengths);
  const detail::LstmMaps<cpu> maps = detail::lstm_maps<cpu>(plan, dirs, tn);
  detail::GruForward<T, cpu> f = detail::gru_forward_pass<T, cpu>(plan, maps, w.data(), dirs, bn, tn, h, detail::lstm_precision<T, cpu>(),
                                                                   true, [&](int d, T* A) {
    detail::rnn_gather_table(tables[std::size_t(d)], ids.data(), maps, d, plan.total, A, 4 * h);
  });
  return {detail::make_out<AnyShape>(nullptr, std::move(f.out), false), detail::make_out<AnyShape>(nullptr, std::move(f.h_n), false)};
}

#define ATTN_INSTANTIATE_CPU_GRU(X, T)                                                                                  \
  X template GruResult<T, cpu> detail::gru_impl<T, cpu>(Tape*, const Var<T, AnyShape, cpu>&, std::span<const int>,      \
                                                        const GruWeights<T, cpu>*, int, const Var<T, AnyShape, cpu>&);  \
  X template Tensor<T, AnyShape, cpu> gru_input_table<T>(const Var<T, AnyShape, cpu>&, const Var<T, AnyShape, cpu>&);  \
  ATTN_INSTANTIATE_CPU_GRU_FROM_TABLE(X, T, int)                                                                        \
  ATTN_INSTANTIATE_CPU_GRU_FROM_TABLE(X, T, std::int64_t)
#define ATTN_INSTANTIATE_CPU_GRU_FROM_TABLE(X, T, I)                                                                    \
  X template GruResult<T, cpu> gru_from_table<T, I, Shape<dyn, dyn>>(NoGrad&, std::span<const Tensor<T, AnyShape, cpu>>, \
                                                                    const Tensor<I, Shape<dyn, dyn>, cpu>&,              \
                                                                    std::span<const int>, std::span<const GruWeights<T, cpu>>); \
  X template GruResult<T, cpu> gru_from_table<T, I, AnyShape>(NoGrad&, std::span<const Tensor<T, AnyShape, cpu>>,        \
                                                             const Tensor<I, AnyShape, cpu>&, std::span<const int>,      \
                                                             std::span<const GruWeights<T, cpu>>);
ATTN_EXTERN_TEMPLATES(ATTN_INSTANTIATE_CPU_GRU)

}  // namespace attn
