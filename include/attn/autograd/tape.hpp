// SPDX-License-Identifier: MIT
// The contexts every op takes first: Tape (records each op's backward step; backward() replays
// them in reverse) and NoGrad (records nothing), and the Context concept that admits both.
//   attn::Tape tape; auto y = attn::tanh(tape, x); tape.backward(attn::sum(tape, y)); tape.clear();
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <type_traits>
#include <unordered_set>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "../core/rng.hpp"
#include "../core/tensor.hpp"

namespace attn {

template <class T, class S, class B>
class Var;

/// Told, during Tape::backward(loss, leaves, observer), when each watched leaf's gradient is
/// complete and after each step (dist::DataParallel starts its bucket all-reduces from here,
/// overlapping the rest of the backward pass).
class BackwardObserver {
 public:
  virtual ~BackwardObserver() = default;
  /// leaves[k]'s gradient is final: every step that lists it as an input has run. Leaves that no
  /// recorded step reads are reported before the first step runs.
  virtual void leaf_ready(std::size_t k) = 0;
  /// Step `index` (counted in recording order) has run; `index` steps remain. Called before the
  /// leaves that this step completed are reported.
  virtual void step_done(std::size_t /*index*/) {}
};

/// Records the backward step of every op run under it; backward() replays them in reverse.
/// Not thread-safe: one tape per training thread.
class Tape {
 public:
  static constexpr bool recording = true;
  explicit Tape(std::uint64_t seed = 0x7a9e) : rng_(seed) {}

  /// Selects the tracing constructor.
  struct Tracing {};
  /// A tape that records no step: ops run under it as under any tape, but each step is dropped as
  /// it is pushed (so what it would have kept dies with the op's Vars, as under NoGrad), and only
  /// the VarData the steps list as inputs are noted (outside_inputs()). attn::checkpoint runs a
  /// function's first forward pass under one. backward() on it has nothing to run.
  explicit Tape(Tracing, std::uint64_t seed = 0x7a9e) : trace_(std::make_unique<Trace>()), rng_(seed) {}
  Tape(const Tape&) = delete;
  Tape& operator=(const Tape&) = delete;

  /// Appends one op's backward step. `inputs` are the VarData (of any element type) whose
  /// gradients the step may accumulate into; null entries are ignored. A step must list every
  /// one of them: backward's observers rely on the list to know when a gradient is final.
  /// After the step has run, backward() releases the gradient of the op's output `out`: every
  /// consumer of it was recorded later, so it is complete and no longer needed. A second
  /// backward() therefore starts from fresh intermediate gradients, while leaves (parameters)
  /// accumulate.
  ///
  /// The step (any callable) is moved into memory the tape owns and reuses after clear(), so a
  /// training loop records without heap allocations once its first step has sized that memory.
  template <class D, class F>
  void push(const std::shared_ptr<D>& out, std::span<const void* const> inputs, F&& step) {
    using Fn = std::decay_t<F>;
    static_assert(std::is_invocable_v<Fn&>, "Tape::push: the step must be callable without arguments");
    if (trace_) {
      trace_->note(out.get(), inputs);
      return;
    }
    void* mem = arena_.take(sizeof(Fn), alignof(Fn));
    Fn* fn = ::new (mem) Fn(std::forward<F>(step));
    const auto begin = static_cast<std::uint32_t>(inputs_.size());
    try {
      for (const void* p : inputs)
        if (p) inputs_.push_back(p);
      steps_.push_back({fn, [](void* f) { (*static_cast<Fn*>(f))(); }, [](void* f) { static_cast<Fn*>(f)->~Fn(); }, out,
                        [](void* p) { static_cast<D*>(p)->grad = {}; }, begin, static_cast<std::uint32_t>(inputs_.size())});
    } catch (...) {
      fn->~Fn();
      inputs_.resize(begin);
      throw;
    }
  }
  template <class D, class F>
  void push(const std::shared_ptr<D>& out, std::initializer_list<const void*> inputs, F&& step) {
    push(out, std::span<const void* const>(inputs.begin(), inputs.size()), std::forward<F>(step));
  }
  ~Tape() { clear(); }
  std::size_t size() const noexcept { return steps_.size(); }
  bool tracing() const noexcept { return trace_ != nullptr; }
  /// On a tracing tape: the VarData (of any element type) that steps pushed so far listed as
  /// inputs and that no op run under this tape produced, once each, in first-use order. These are
  /// what the code run under the tape read from outside it: its input Vars, the parameters of the
  /// modules it called, and leaves it created itself (those of the latter that have died since
  /// may be listed, or left out when their address was an earlier op's output). Empty on a
  /// recording tape.
  std::vector<const void*> outside_inputs() const { return trace_ ? trace_->outside : std::vector<const void*>{}; }
  /// The random stream of ops run under this tape (dropout).
  Rng& rng() noexcept { return rng_; }

  /// Every backward entry point first notes the host pool's bytes in use
  /// (PoolStats::saved_peak_bytes): what the recorded steps keep is at its largest when a backward
  /// pass begins.
  /// Seeds d(loss)/d(loss) = 1 (loss must have one element) and runs the recorded steps in reverse.
  template <class T, class S, class B>
  void backward(const Var<T, S, B>& loss) {
    check_scalar(loss.dims());
    detail::HostPool::get().note_backward_start();
    seed_and_run(loss, Tensor<T, AnyShape, B>::full(loss.dims(), T(1)));
  }
  /// Backward from `out` with an explicit upstream gradient of out's shape.
  template <class T, class S, class B, class S2>
  void backward(const Var<T, S, B>& out, const Tensor<T, S2, B>& seed) {
    if (!(seed.dims() == out.dims())) shape_mismatch("Tape::backward", "seed gradient shape differs from output", seed.dims(), out.dims());
    detail::HostPool::get().note_backward_start();
    seed_and_run(out, seed);
  }
  /// backward(loss), telling `observer` when the gradient of each of `leaves` (VarData pointers,
  /// usually parameters) is complete, as early as the recorded steps allow.
  template <class T, class S, class B>
  void backward(const Var<T, S, B>& loss, std::span<const void* const> leaves, BackwardObserver& observer) {
    check_scalar(loss.dims());
    detail::HostPool::get().note_backward_start();
    seed_and_run(loss, Tensor<T, AnyShape, B>::full(loss.dims(), T(1)), leaves, &observer);
  }
  /// Runs the recorded steps in reverse from the gradients already in place: the caller has put
  /// the upstream gradient of each output it differentiates into that output's VarData::grad
  /// (backward from several outputs at once, as attn::checkpoint's recomputation does).
  void backward_from_grads() {
    detail::HostPool::get().note_backward_start();
    run_steps({}, nullptr);
  }
  /// backward_from_grads() for a tape that is run once: each step is dropped as soon as it has
  /// run, so the values it kept (and its output's value) are freed while backward goes on, as
  /// PyTorch frees a graph's saved tensors without retain_graph. The tape is left as after clear().
  void backward_once_from_grads() {
    detail::HostPool::get().note_backward_start();
    run_steps({}, nullptr, true);
  }
  /// Drops every recorded step (and with them the intermediate values they kept alive); a tracing
  /// tape forgets what it noted.
  void clear() noexcept {
    for (std::size_t i = steps_.size(); i-- > 0;) steps_[i].destroy(steps_[i].fn);
    steps_.clear();
    inputs_.clear();
    arena_.reset();
    if (trace_) *trace_ = {};
  }

 private:
  struct Step {
    void* fn;  // the callable, in arena_
    void (*call)(void*);
    void (*destroy)(void*);
    std::shared_ptr<void> out;
    void (*release)(void*);
    std::uint32_t in_begin, in_end;  // this step's inputs in inputs_
    void run() const { call(fn); }
  };

  /// Bump allocation in blocks kept across clear(): the recorded steps' closures live here.
  class Arena {
   public:
    Arena() = default;
    Arena(const Arena&) = delete;
    Arena& operator=(const Arena&) = delete;
    ~Arena() {
      for (auto& b : blocks_) ::operator delete(b.mem, std::align_val_t(align));
    }
    void* take(std::size_t bytes, std::size_t a) {
      if (a > align) throw ArgumentError("Tape: a step's closure needs alignment " + std::to_string(a) + " (at most 64 supported)");
      bytes = (bytes + align - 1) / align * align;
      while (cur_ < blocks_.size()) {
        if (off_ + bytes <= blocks_[cur_].size) {
          void* p = static_cast<std::byte*>(blocks_[cur_].mem) + off_;
          off_ += bytes;
          return p;
        }
        ++cur_;
        off_ = 0;
      }
      const std::size_t size = std::max<std::size_t>(bytes, blocks_.empty() ? (std::size_t(16) << 10) : blocks_.back().size * 2);
      blocks_.reserve(blocks_.size() + 1);
      blocks_.push_back({::operator new(size, std::align_val_t(align)), size});
      cur_ = blocks_.size() - 1;
      off_ = bytes;
      return blocks_.back().mem;
    }
    void reset() noexcept {
      cur_ = 0;
      off_ = 0;
    }

   private:
    static constexpr std::size_t align = 64;
    struct Block {
      void* mem;
      std::size_t size;
    };
    std::vector<Block> blocks_;
    std::size_t cur_ = 0, off_ = 0;
  };

  /// A tracing tape's record: the outputs of the ops run under it and the inputs they read from
  /// outside. The addresses are only compared, never followed.
  struct Trace {
    std::unordered_set<const void*> produced, seen;
    std::vector<const void*> outside;
    void note(const void* out, std::span<const void* const> inputs) {
      for (const void* p : inputs)
        if (p && !produced.count(p) && seen.insert(p).second) outside.push_back(p);
      produced.insert(out);
    }
  };

  static void check_scalar(const Dims& d) {
    if (d.numel() != 1) throw ShapeError("Tape::backward: loss must have one element, got shape " + d.str());
  }

  /// Adds seed to out's gradient and runs the recorded steps, telling obs (if any) when each of
  /// `leaves` is final.
  template <class T, class S, class B, class S2>
  void seed_and_run(const Var<T, S, B>& out, const Tensor<T, S2, B>& seed, std::span<const void* const> leaves = {},
                    BackwardObserver* obs = nullptr) {
    auto& g = out.data()->grad_ref();
    g += seed.erased();
    run_steps(leaves, obs);
  }

  void run_steps(std::span<const void* const> leaves, BackwardObserver* obs, bool drop = false) {
    constexpr std::size_t unused = std::numeric_limits<std::size_t>::max();
    // Each watched leaf is final after the earliest recorded step that reads it has run.
    order_.clear();
    if (obs) {
      sorted_.clear();
      for (std::size_t k = 0; k < leaves.size(); ++k) sorted_.push_back({leaves[k], k});
      std::sort(sorted_.begin(), sorted_.end());
      first_use_.assign(leaves.size(), unused);
      for (std::size_t i = 0; i < steps_.size(); ++i)
        for (std::uint32_t j = steps_[i].in_begin; j < steps_[i].in_end; ++j) {
          auto it = std::lower_bound(sorted_.begin(), sorted_.end(), std::pair<const void*, std::size_t>{inputs_[j], 0});
          for (; it != sorted_.end() && it->first == inputs_[j]; ++it)
            if (first_use_[it->second] == unused) first_use_[it->second] = i;
        }
      for (std::size_t k = 0; k < leaves.size(); ++k) order_.push_back(k);
      // Latest first, the unused ones (largest key) leading; ties (leaves of one step, such as a
      // linear op's weight and bias) in reverse leaf order, as a layer's parameters were registered
      // weight first and become final bias first when each has its own step (std::sort with a
      // tie-break: stable_sort would allocate).
      std::sort(order_.begin(), order_.end(),
                [&](std::size_t a, std::size_t b) { return first_use_[a] != first_use_[b] ? first_use_[a] > first_use_[b] : a > b; });
    }
    std::size_t next = 0;
    if (obs)
      for (; next < order_.size() && first_use_[order_[next]] == unused; ++next) obs->leaf_ready(order_[next]);
    for (std::size_t i = steps_.size(); i-- > 0;) {
      steps_[i].run();
      steps_[i].release(steps_[i].out.get());
      if (drop) {
        // Step i is the last one left: later steps were dropped before it ran.
        steps_[i].destroy(steps_[i].fn);
        inputs_.resize(steps_[i].in_begin);
        steps_.pop_back();
      }
      if (obs) {
        obs->step_done(i);
        for (; next < order_.size() && first_use_[order_[next]] == i; ++next) obs->leaf_ready(order_[next]);
      }
    }
    if (drop) clear();
  }

  Arena arena_;  // declared first, destroyed last: clear() has ended every closure by then
  std::vector<Step> steps_;
  std::vector<const void*> inputs_;
  // Scratch of run_steps, kept to reuse its memory.
  std::vector<std::pair<const void*, std::size_t>> sorted_;
  std::vector<std::size_t> first_use_, order_;
  std::unique_ptr<Trace> trace_;  // set on a tracing tape only
  Rng rng_;
};

/// The inference context: ops compute values and record nothing.
struct NoGrad {
  static constexpr bool recording = false;
  explicit NoGrad(std::uint64_t seed = 0x7a9e) : rng_(seed) {}
  /// The random stream of ops run under this context (dropout in training mode).
  Rng& rng() noexcept { return rng_; }

 private:
  Rng rng_;
};

template <class C>
concept Context = std::is_same_v<std::remove_cvref_t<C>, Tape> || std::is_same_v<std::remove_cvref_t<C>, NoGrad>;

namespace detail {

/// The tape an op records on: the Tape itself, or none under NoGrad.
inline Tape* tape_of(Tape& t) { return &t; }
inline Tape* tape_of(NoGrad&) { return nullptr; }

}  // namespace detail
}  // namespace attn
