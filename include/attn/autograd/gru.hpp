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
#include <array>
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
  LstmPlan plan = lstm_plan(lengths, x.dims());
  LstmMaps<B> maps = lstm_maps<B>(plan, dirs, tn);
  // The initial state in the plan's sorted order, per direction (empty: zero).
  PoolVector<Ten> h0s(dirs);
  if (h0.defined())
    for (int d = 0; d < dirs; ++d) {
      h0s[d] = Ten({bn, h});
      kernels::copy_rows(B{}, bn, h, h0.raw().data(), h, maps.final_state[d].data(), h0s[d].data(), h, nullptr, false);
    }
  const std::size_t n_rows = plan.total, g = 3 * h, first = plan.steps ? plan.batch[0] : 0;
  const Precision prec = lstm_precision<T, B>();
  const bool low = prec == Precision::bf16;
  bool rg = tape != nullptr && x.requires_grad();
  for (int d = 0; d < dirs; ++d) rg = rg || needs_grad(tape, w[d].w_ih, w[d].w_hh, w[d].b_ih, w[d].b_hh);
  rg = rg || (tape != nullptr && h0.defined() && h0.requires_grad());
  if (prec == Precision::int8 && rg)
    throw ArgumentError("gru: Precision::int8 is for inference (dynamic quantization); this call would record a gradient "
                        "(run it under attn::NoGrad, or train in fp32 or bf16)");

  Ten out = Ten::zeros({bn, tn, std::size_t(dirs) * h}), h_n = Ten::zeros(sd);
  // Per direction: the activations r, z, n, hn (N, 4H) and the states (N, H), kept for backward.
  PoolVector<Ten> act(dirs), hid(dirs);
  for (int d = 0; d < dirs; ++d) {
    act[d] = Ten({n_rows, 4 * h});
    hid[d] = Ten({n_rows, h});
  }
  {
    const auto prof = profile::Scope::of_if<T>(std::is_same_v<B, cpu>, "gru forward", bn, n_rows, dirs, h);
    const T* X = x.raw().data();
    lstm_for_directions(dirs, B::host_accessible, [&](int d) {
      T* A = act[d].data();
      T* Hh = hid[d].data();
      {
        Ten xp({n_rows, in});  // the packed input (N, In)
        kernels::copy_rows(B{}, n_rows, in, X, in, maps.rows[d].data(), xp.data(), in, nullptr, false);
        // Input projections of every step at once: (N, In) x (3H, In)^T into the first 3H columns.
        LstmOperand<T, B>::weight(prec, !rg, *w[d].w_ih.data())
            .gemm(Trans::no, int(n_rows), int(g), int(in), xp.data(), int(in), T(0), A, int(4 * h));
      }
      // W_hh^T (H, 3H), packed once for every step under bf16 or int8.
      const LstmOperand<T, B> whh = LstmOperand<T, B>::weight(prec, !rg, *w[d].w_hh.data());
      Ten gh({first, g});  // the step's recurrent products (n, 3H)
      for (std::size_t s = 0; s < plan.steps; ++s) {
        const std::size_t n = plan.batch[s], r0 = plan.offset[s];
        const T* hp = s > 0 ? Hh + plan.offset[s - 1] * h : h0s[d].empty() ? nullptr : h0s[d].data();
        if (hp) whh.gemm(Trans::no, int(n), int(g), int(h), hp, int(h), T(0), gh.data(), int(g));
        kernels::gru_cell_forward(B{}, n, h, A + r0 * 4 * h, hp ? gh.data() : nullptr, w[d].b_ih.raw().data(), w[d].b_hh.raw().data(), hp,
                                  Hh + r0 * h);
      }
      kernels::copy_rows(B{}, n_rows, h, Hh, h, nullptr, out.data() + std::size_t(d) * h, std::size_t(dirs) * h, maps.rows[d].data(), false);
      kernels::copy_rows(B{}, bn, h, Hh, h, maps.last.data(), h_n.data(), h, maps.final_state[d].data(), false);
    });
  }
  GruResult<T, B> res{make_out<AnyShape>(tape, std::move(out), rg), make_out<AnyShape>(tape, std::move(h_n), rg)};
  if (!rg) return res;

  using Data = std::shared_ptr<VarData<T, B>>;
  struct DirSaved {
    Data w_ih, w_hh, b_ih, b_hh;
    Ten act, hid;
  };
  PoolVector<DirSaved> saved;
  for (int d = 0; d < dirs; ++d) saved.push_back({w[d].w_ih.data(), w[d].w_hh.data(), w[d].b_ih.data(), w[d].b_hh.data(), act[d], hid[d]});
  PoolVector<const void*> inputs{x.data().get()};
  for (const auto& sv : saved)
    for (const auto* p : {sv.w_ih.get(), sv.w_hh.get(), sv.b_ih.get(), sv.b_hh.get()}) inputs.push_back(p);
  const Data h0d = h0.defined() ? h0.data() : nullptr;
  if (h0d) inputs.push_back(h0d.get());
  tape->push(res.out.data(), inputs, [xd = x.data(), od = res.out.data(), hd = res.h_n.data(), plan = std::move(plan), maps = std::move(maps),
                                      saved = std::move(saved), h0d, h0s = std::move(h0s), dirs, bn, in, h, g, first, low] {
    const bool g_out = !od->grad.empty(), g_h = !hd->grad.empty();
    if (!g_out && !g_h) return;
    const std::size_t n_rows = plan.total;
    // Gradient slots are resolved here, on one thread, before the directions run concurrently.
    struct DirGrads {
      T *w_ih = nullptr, *w_hh = nullptr, *b_ih = nullptr, *b_hh = nullptr;
      Ten dh, dgi, dgh, xp, hprev, dx, dh0;
    };
    PoolVector<DirGrads> gr(dirs);
    T* dh0_all = h0d && h0d->requires_grad ? h0d->grad_ref().data() : nullptr;  // (dirs, B, H)
    const bool shared_weights = rnn_shares_weights(saved);
    for (int d = 0; d < dirs; ++d) {
      const DirSaved& sv = saved[d];
      DirGrads& q = gr[d];
      if (sv.w_ih->requires_grad) q.w_ih = sv.w_ih->grad_ref().data();
      if (sv.w_hh->requires_grad) q.w_hh = sv.w_hh->grad_ref().data();
      if (sv.b_ih->requires_grad) q.b_ih = sv.b_ih->grad_ref().data();
      if (sv.b_hh->requires_grad) q.b_hh = sv.b_hh->grad_ref().data();
      q.dh = Ten::zeros({n_rows, h});
      q.dgi = Ten({n_rows, g});
      q.dgh = Ten({n_rows, g});
      if (q.w_ih) q.xp = Ten({n_rows, in});
      if (q.w_hh) q.hprev = Ten({n_rows - first, h});
      if (xd->requires_grad) q.dx = Ten({n_rows, in});
      if (!h0s[d].empty()) q.dh0 = Ten::zeros({bn, h});
    }
    const auto prof = profile::Scope::of_if<T>(std::is_same_v<B, cpu>, "gru backward", bn, n_rows, dirs, h);
    lstm_for_directions(dirs, B::host_accessible && !shared_weights, [&](int d) {
      const DirSaved& sv = saved[d];
      DirGrads& q = gr[d];
      T* dH = q.dh.data();
      T* dGi = q.dgi.data();
      T* dGh = q.dgh.data();
      const T* A = sv.act.data();
      const T* Hh = sv.hid.data();
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
        T* dhp = s > 0 ? dH + plan.offset[s - 1] * h : hp ? q.dh0.data() : nullptr;
        kernels::gru_cell_backward(B{}, n, h, A + r0 * 4 * h, hp, dH + r0 * h, dhp, dGi + r0 * g, dGh + r0 * g);
        // dh_prev += dgh W_hh: (n, 3H) x (3H, H).
        if (hp) whh.gemm(Trans::no, int(n), int(h), int(g), dGh + r0 * g, int(g), T(1), dhp, int(h));
      }
      if (q.w_hh && n_rows > first) {
        // dW_hh += sum_s dgh_s^T h_{s-1}: one GEMM over all steps but the first, with h_{s-1}
        // gathered from out into rows aligned with dgh.
        T* P = q.hprev.data();
        kernels::copy_rows(B{}, n_rows - first, h, od->value.data() + std::size_t(d) * h, std::size_t(dirs) * h, maps.prev[d].data(), P,
                           h, nullptr, false);
        LstmOperand<T, B>(low, Trans::no, int(n_rows - first), int(h), P, int(h))
            .gemm(Trans::yes, int(g), int(h), int(n_rows - first), dGh + first * g, int(g), T(1), q.w_hh, int(h));
      }
      if (!h0s[d].empty()) {
        // Step 0's recurrent product read h0: dW_hh += dgh_0^T h0; dh0 was accumulated above.
        if (q.w_hh)
          LstmOperand<T, B>(low, Trans::no, int(first), int(h), h0s[d].data(), int(h))
              .gemm(Trans::yes, int(g), int(h), int(first), dGh, int(g), T(1), q.w_hh, int(h));
        if (dh0_all) kernels::copy_rows(B{}, bn, h, q.dh0.data(), h, nullptr, dh0_all, h, maps.final_state[d].data(), true);
      }
      if (q.w_ih) {
        // dW_ih += dgi^T x_packed: (3H, N) x (N, In).
        kernels::copy_rows(B{}, n_rows, in, xd->value.data(), in, maps.rows[d].data(), q.xp.data(), in, nullptr, false);
        LstmOperand<T, B>(low, Trans::no, int(n_rows), int(in), q.xp.data(), int(in))
            .gemm(Trans::yes, int(g), int(in), int(n_rows), dGi, int(g), T(1), q.w_ih, int(in));
      }
      // db_ih, db_hh: the column sums of dgi and dgh (N, 3H).
      const std::pair<const T*, T*> bias_grads[2] = {{dGi, q.b_ih}, {dGh, q.b_hh}};
      for (const auto& [src, dst] : bias_grads)
        if (dst) {
          Ten db({g});
          kernels::sum_to(B{}, src, Dims{n_rows, g}, db.data(), Dims{g}, false);
          TensorView<T, AnyShape, B> v(dst, Dims{g});
          expr::assign(v, v + db);
        }
      // dx_packed = dgi W_ih: (N, 3H) x (3H, In); scattered into dx after both directions.
      if (!q.dx.empty())
        LstmOperand<T, B>(low, Trans::no, int(g), int(in), sv.w_ih->value.data(), int(in))
            .gemm(Trans::no, int(n_rows), int(in), int(g), dGi, int(g), T(0), q.dx.data(), int(in));
    });
    if (xd->requires_grad) {
      T* dx = xd->grad_ref().data();
      for (int d = 0; d < dirs; ++d) kernels::copy_rows(B{}, n_rows, in, gr[d].dx.data(), in, nullptr, dx, in, maps.rows[d].data(), true);
    }
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

#define ATTN_INSTANTIATE_CPU_GRU(X, T)                                                                               \
  X template GruResult<T, cpu> detail::gru_impl<T, cpu>(Tape*, const Var<T, AnyShape, cpu>&, std::span<const int>,   \
                                                        const GruWeights<T, cpu>*, int, const Var<T, AnyShape, cpu>&);
ATTN_EXTERN_TEMPLATES(ATTN_INSTANTIATE_CPU_GRU)

}  // namespace attn
