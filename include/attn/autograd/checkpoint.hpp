// SPDX-License-Identifier: MIT
// Gradient checkpointing (torch.utils.checkpoint, non-reentrant): a function runs without keeping
// its intermediate values for backward, and runs once more during backward, on the same inputs and
// random numbers, to recompute them; the gradients are those of a plain run, bit for bit.
//   auto y = attn::checkpoint(ctx, [&](auto& c, const auto& h) { return block(c, h); }, x);
#pragma once
#include <array>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "../core/pool.hpp"
#include "../core/precision.hpp"
#include "../core/rng.hpp"
#include "tape.hpp"
#include "var.hpp"

namespace attn {

namespace detail {

template <class A>
struct IsVar : std::false_type {};
template <class T, class S, class B>
struct IsVar<Var<T, S, B>> : std::true_type {};
template <class A>
inline constexpr bool is_var_v = IsVar<std::remove_cvref_t<A>>::value;

/// What a checkpointed function may return: one Var, or a std::tuple of Vars.
template <class R>
struct CheckpointResult {
  static constexpr bool valid = false;
};
template <class T, class S, class B>
struct CheckpointResult<Var<T, S, B>> {
  static constexpr bool valid = true;
  using Tuple = std::tuple<Var<T, S, B>>;
  static Tuple to_tuple(Var<T, S, B> v) { return Tuple(std::move(v)); }
  static Var<T, S, B> from_tuple(Tuple t) { return std::get<0>(std::move(t)); }
};
template <class... V>
struct CheckpointResult<std::tuple<V...>> {
  static constexpr bool valid = sizeof...(V) > 0 && (IsVar<V>::value && ...);
  using Tuple = std::tuple<V...>;
  static Tuple to_tuple(Tuple t) { return t; }
  static Tuple from_tuple(Tuple t) { return t; }
};

/// An argument as the checkpointed function sees it: a Var becomes a leaf of the tape it runs
/// under, anything else is passed as it is.
template <class A>
using CheckpointArg = std::conditional_t<is_var_v<A>, A, const A&>;

/// The copies already made in one run, so that a Var passed twice becomes one leaf.
using CheckpointCopies = std::vector<std::pair<const void*, std::shared_ptr<void>>>;

/// A leaf on `tape` that shares v's value and requires_grad: gradients reaching it accumulate in
/// its own slot, not in v's. It carries the tape, so that operators (+, *) on it record there.
template <class A>
CheckpointArg<A> checkpoint_arg(const A& a, Tape& tape, CheckpointCopies& made) {
  if constexpr (is_var_v<A>) {
    using D = typename A::data_type;
    for (auto& [p, copy] : made)
      if (p == a.data().get()) return A(std::static_pointer_cast<D>(copy), &tape);
    auto d = std::allocate_shared<D>(PoolAllocator<D>{});
    d->value = a.raw();
    d->requires_grad = a.requires_grad();
    d->sparse_rows = a.data()->sparse_rows;
    made.emplace_back(a.data().get(), d);
    return A(std::move(d), &tape);
  } else {
    return a;
  }
}

template <class... Args, std::size_t... I>
std::tuple<CheckpointArg<Args>...> checkpoint_args(const std::tuple<Args...>& saved, Tape& tape, std::index_sequence<I...>) {
  CheckpointCopies made;
  // Braced initialisation: the copies are made in argument order.
  return std::tuple<CheckpointArg<Args>...>{checkpoint_arg(std::get<I>(saved), tape, made)...};
}

/// Exchanges the gradient (with its row-sparse bookkeeping) of two VarData.
template <class T, class B>
void swap_grads(VarData<T, B>& a, VarData<T, B>& b) noexcept {
  std::swap(a.grad, b.grad);
  std::swap(a.grad_dense, b.grad_dense);
  std::swap(a.grad_rows, b.grad_rows);
  std::swap(a.row_marked, b.row_marked);
  std::swap(a.grad_compact, b.grad_compact);
  std::swap(a.grad_values, b.grad_values);
  std::swap(a.row_slot, b.row_slot);
  std::swap(a.grad_materialized, b.grad_materialized);
}

template <std::size_t N, class F>
void for_each_index(F&& f) {
  [&]<std::size_t... I>(std::index_sequence<I...>) { (f(std::integral_constant<std::size_t, I>{}), ...); }(std::make_index_sequence<N>{});
}

inline bool listed(std::span<const void* const> list, const void* p) {
  for (const void* q : list)
    if (q == p) return true;
  return false;
}

/// checkpoint under a Tape.
template <class F, class... Args>
auto checkpoint_on_tape(Tape& tape, F&& fn_in, const Args&... args) {
  using Fn = std::decay_t<F>;
  using Saved = std::tuple<std::decay_t<Args>...>;
  using R = std::invoke_result_t<Fn&, Tape&, const CheckpointArg<std::decay_t<Args>>&...>;
  using Result = CheckpointResult<std::remove_cvref_t<R>>;
  using Outs = typename Result::Tuple;
  constexpr std::size_t n_in = sizeof...(Args), n_out = std::tuple_size_v<Outs>;
  constexpr auto in_seq = std::make_index_sequence<n_in>{};

  Fn fn(std::forward<F>(fn_in));
  Saved saved(args...);
  // The Vars passed in, and for each the first argument that is the same Var (they share one leaf).
  std::array<const void*, n_in> in_data{};
  std::array<std::size_t, n_in> first{};
  for_each_index<n_in>([&](auto i) {
    if constexpr (is_var_v<std::tuple_element_t<i, Saved>>) {
      if (!std::get<i>(saved).defined()) throw ArgumentError(std::string("checkpoint: input ") + std::to_string(i) + " is an undefined Var");
      in_data[i] = std::get<i>(saved).data().get();
    }
    first[i] = i;
    for (std::size_t j = 0; j != i; ++j)
      if (in_data[i] && in_data[j] == in_data[i]) {
        first[i] = j;
        break;
      }
  });

  // First run: on a tracing tape that keeps nothing, from the context's random stream, which is
  // left as a plain run would leave it. The trace names every VarData the function reads from
  // outside: its inputs' leaves and the parameters (or other outside Vars) it uses directly.
  const Rng::State rng_at_start = tape.rng().state();
  const Precision precision_at_start = precision();  // the recomputation runs in it too
  Outs outs;
  std::vector<const void*> outside;
  {
    Tape trace(Tape::Tracing{});
    trace.rng().set_state(rng_at_start);
    auto copies = checkpoint_args(saved, trace, in_seq);
    const std::size_t caller_steps = tape.size();
    Outs r = Result::to_tuple(std::apply([&](const auto&... c) -> R { return fn(trace, c...); }, copies));
    if (tape.size() != caller_steps)
      throw ArgumentError("checkpoint: the function recorded on the caller's tape (an operator on a Var it captured from the "
                          "caller's ops): pass such Vars as inputs, so that the recomputation sees them");
    tape.rng().set_state(trace.rng().state());
    std::vector<const void*> copy_data;
    for_each_index<n_in>([&](auto i) {
      if constexpr (is_var_v<std::tuple_element_t<i, Saved>>) copy_data.push_back(std::get<i>(copies).data().get());
    });
    for (const void* p : trace.outside_inputs())
      if (!listed(copy_data, p)) outside.push_back(p);
    for_each_index<n_out>([&](auto k) {
      const auto& v = std::get<k>(r);
      using V = std::remove_cvref_t<decltype(v)>;
      if (!v.defined()) throw ArgumentError(std::string("checkpoint: the function returned an undefined Var (output ") + std::to_string(k) + ")");
      // An outside Var returned as it is (a parameter no op inside reads): the step writes its
      // gradient, so it is listed with the others (observers, DataParallel's buckets) and takes
      // that gradient as a leaf does.
      const void* vd = v.data().get();
      if (v.tape() != &trace && !listed(copy_data, vd) && !listed(outside, vd)) outside.push_back(vd);
      std::get<k>(outs) = make_out<typename V::shape_type>(&tape, v.raw(), v.requires_grad());
    });
  }
  bool any_grad = false;
  for_each_index<n_out>([&](auto k) { any_grad = any_grad || std::get<k>(outs).requires_grad(); });
  if (!any_grad) return Result::from_tuple(std::move(outs));

  // An input's leaf starts from the input's gradient so far and hands it back with the
  // recomputation's terms added, so that the sums run in the same order as in a plain run. An input
  // that the function also reads directly (a parameter passed in and used by a module it calls)
  // takes those direct terms in place, and its leaf's gradient is added to it afterwards.
  std::array<bool, n_in> direct{};
  std::vector<const void*> list;
  for (std::size_t i = 0; i != n_in; ++i) {
    direct[i] = in_data[i] && listed(outside, in_data[i]);
    if (in_data[i] && first[i] == i) list.push_back(in_data[i]);
  }
  for (const void* p : outside)
    if (!listed(list, p)) list.push_back(p);

  auto out_data = std::apply([](const auto&... o) { return std::make_tuple(o.data()...); }, outs);
  tape.push(std::get<0>(outs).data(), std::span<const void* const>(list),
            [fn = std::move(fn), saved = std::move(saved), out_data, rng_at_start, precision_at_start, direct, first,
             outside = std::move(outside)]() mutable {
              bool any = false;
              for_each_index<n_out>([&](auto k) { any = any || !std::get<k>(out_data)->grad.empty(); });
              if (!any) return;
              // Second run, recorded, from the random state and in the precision the first run saw
              // (backward may run outside the forward's PrecisionScope).
              const PrecisionScope scope(precision_at_start);
              Tape inner;
              inner.rng().set_state(rng_at_start);
              auto copies = checkpoint_args(saved, inner, std::make_index_sequence<n_in>{});
              Outs r = Result::to_tuple(std::apply([&](const auto&... c) -> R { return fn(inner, c...); }, copies));
              for_each_index<n_out>([&](auto k) {
                const auto& v = std::get<k>(r);
                if (!v.defined() || !(v.dims() == std::get<k>(out_data)->value.dims()))
                  throw Error(std::string("checkpoint: the recomputation's output ") + std::to_string(k) +
                              " differs in shape from the first run's (the function must depend only on its inputs, "
                              "its parameters and the context's random stream)");
              });
              auto swap_inputs = [&] {
                for_each_index<n_in>([&](auto i) {
                  if constexpr (is_var_v<std::tuple_element_t<i, Saved>>) {
                    auto& outer = *std::get<i>(saved).data();
                    if (first[i] == i && outer.requires_grad && !direct[i]) swap_grads(outer, *std::get<i>(copies).data());
                  }
                });
              };
              swap_inputs();
              try {
                // Each output's gradient goes to its recomputed Var: moved into one that the
                // recomputation produced, added to a leaf (an input returned as it is, a parameter).
                for_each_index<n_out>([&](auto k) {
                  auto& od = *std::get<k>(out_data);
                  if (od.grad.empty()) return;
                  auto& rd = *std::get<k>(r).data();
                  bool leaf = listed(outside, &rd);
                  for_each_index<n_in>([&](auto i) {
                    if constexpr (is_var_v<std::tuple_element_t<i, Saved>>) leaf = leaf || std::get<i>(copies).data().get() == &rd;
                  });
                  if (!leaf && rd.grad.empty())
                    rd.grad = std::move(od.grad);
                  else if (rd.requires_grad)
                    rd.grad_ref() += od.grad;
                  od.grad = {};
                });
                // The recomputed outputs are needed no more (a step that reads one keeps it), and
                // each step's values are freed as soon as it has run.
                r = Outs{};
                inner.backward_once_from_grads();
              } catch (...) {
                swap_inputs();  // the inputs keep their gradients (with whatever terms were added)
                throw;
              }
              for_each_index<n_in>([&](auto i) {
                if constexpr (is_var_v<std::tuple_element_t<i, Saved>>) {
                  auto& outer = *std::get<i>(saved).data();
                  auto& copy = *std::get<i>(copies).data();
                  if (first[i] != i || !outer.requires_grad) return;
                  if (!direct[i]) {
                    swap_grads(outer, copy);
                    outer.grad_writes += copy.grad_writes;
                  } else if (copy.has_grad()) {
                    copy.materialize_grad();
                    outer.grad_ref() += copy.grad;
                  }
                }
              });
            });
  return Result::from_tuple(std::move(outs));
}

}  // namespace detail

/// Runs fn(ctx, inputs...) as torch.utils.checkpoint does (non-reentrant): under a Tape, fn's
/// intermediate values are not kept; the tape records one step, whose backward runs fn once more
/// to recompute them and differentiates that run. The gradients of the inputs and of every
/// parameter fn uses equal those of calling fn(ctx, inputs...) directly, bit for bit (except an
/// input that fn also reads directly, not through its argument, and outputs that are the same Var
/// twice or an input itself: their terms are summed in another order, equal to rounding), and the
/// context's random stream is left in the same state. Under NoGrad it is fn(ctx, inputs...).
///
/// fn is called as fn(ctx, const inputs&...) with a Tape or a NoGrad (a generic lambda serves
/// both) and returns a Var or a std::tuple of Vars. Each Var input reaches fn as a leaf sharing
/// the input's value; other inputs (masks, lengths, options) are copied and passed as they are.
/// fn may use module parameters and other Vars it captures; Vars produced by ops of the caller
/// should be passed as inputs, since operators (+, *) on a captured one record on the caller's
/// tape. fn may call checkpoint itself. It must compute the same thing when run twice: it may
/// depend only on its inputs, the parameters it reads and the context's random stream (dropout),
/// which the recomputation replays from the state the first run saw, in the precision
/// (attn::PrecisionScope) the first run had. A function that records on the caller's tape (an
/// operator on a captured Var made by the caller's ops) is refused with an ArgumentError.
///
/// The first run goes under a tracing tape (Tape::Tracing), which drops each op's backward step as
/// it is recorded and notes the VarData the step lists as inputs; the recorded step lists those
/// that fn read from outside (parameters, captured Vars) with the inputs, as Tape::push asks, so
/// backward observers (dist::DataParallel) see the parameters' gradients final after it.
/// The recomputation records on a tape of its own, which backward runs and drops: the values of
/// one checkpointed call live only while its step runs.
template <Context C, class F, class... Args>
auto checkpoint(C& ctx, F&& fn, const Args&... inputs) {
  if constexpr (!std::remove_cvref_t<C>::recording) {
    return fn(ctx, inputs...);
  } else {
    constexpr bool callable = std::is_invocable_v<std::decay_t<F>&, Tape&, const detail::CheckpointArg<std::decay_t<Args>>&...>;
    static_assert(callable, "attn::checkpoint: the function must be callable as fn(ctx, const inputs&...)");
    if constexpr (callable) {
      using R = std::invoke_result_t<std::decay_t<F>&, Tape&, const detail::CheckpointArg<std::decay_t<Args>>&...>;
      static_assert(detail::CheckpointResult<std::remove_cvref_t<R>>::valid,
                    "attn::checkpoint: the function must return a Var or a std::tuple of Vars");
      if constexpr (detail::CheckpointResult<std::remove_cvref_t<R>>::valid) return detail::checkpoint_on_tape(ctx, std::forward<F>(fn), inputs...);
    }
  }
}

}  // namespace attn
