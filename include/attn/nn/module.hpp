// SPDX-License-Identifier: MIT
// nn::Module: the registry of named parameters and sub-modules, with PyTorch's names, plus
// train/eval mode. Layers are Modules that register themselves with their parent.
//   struct Net : attn::nn::Module { attn::nn::Linear<4, 2> fc{this, "fc"}; };
//   Net net; for (auto& [name, p] : net.named_parameters()) ...;   // "fc.weight", "fc.bias"
//   auto g = net.parameter("fc.weight").grad();                     // after backward
#pragma once
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../autograd/var.hpp"
#include "../core/rng.hpp"

namespace attn {

/// Element types a parameter file can hold.
enum class DType { f32, f64, i64, i32, u8 };
template <class T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::f32;
  else if constexpr (std::is_same_v<T, double>) return DType::f64;
  else if constexpr (std::is_same_v<T, std::int64_t>) return DType::i64;
  else if constexpr (std::is_same_v<T, std::int32_t>) return DType::i32;
  else return DType::u8;
}

namespace nn {

namespace detail {
inline thread_local int skip_init_depth = 0;
}  // namespace detail

/// While one is alive on a thread, the layers constructed on that thread leave their parameters at
/// zero instead of drawing their initial values: for a model whose weights are read next
/// (io::load), so that constructing it costs neither the drawing nor a pass over its memory (with
/// the IMDb example's 272 million parameters, most of `imdb predict`'s time). Module::init still
/// draws. Nests; not movable. skip_init below is the usual way to use it.
class SkipInit {
 public:
  SkipInit() noexcept { ++detail::skip_init_depth; }
  ~SkipInit() { --detail::skip_init_depth; }
  SkipInit(const SkipInit&) = delete;
  SkipInit& operator=(const SkipInit&) = delete;
};

/// Whether a layer constructed now draws its parameters' initial values (false inside a SkipInit).
inline bool init_on_construction() noexcept { return detail::skip_init_depth == 0; }

/// M(args...) constructed inside a SkipInit, as PyTorch's torch.nn.utils.skip_init: for a model
/// whose parameters are loaded (io::load) or drawn (Module::init) next. M need not be movable:
///   auto model = attn::nn::skip_init<Model>(cfg);  attn::io::load(model, path);
template <class M, class... Args>
M skip_init(Args&&... args) {
  SkipInit skip;
  return M(std::forward<Args>(args)...);
}

/// A parameter, seen without its element type or backend: what io:: and dist:: need.
class ParameterSlot {
 public:
  virtual ~ParameterSlot() = default;
  virtual const Dims& dims() const = 0;
  virtual DType dtype() const = 0;
  virtual std::size_t numel() const = 0;
  /// The backend holding the value (B::name: "cpu", "cuda").
  virtual const char* backend_name() const = 0;
  /// Copies the value to / from host memory holding numel() elements of dtype().
  virtual void copy_to_host(void* dst) const = 0;
  virtual void copy_from_host(const void* src) = 0;
  /// Copies elements [first, first + count) of the value to / from host memory (first + count <= numel()).
  virtual void copy_to_host(void* dst, std::size_t first, std::size_t count) const = 0;
  virtual void copy_from_host(const void* src, std::size_t first, std::size_t count) = 0;
  virtual void zero_grad() = 0;
  /// Whether backward computes this parameter's gradient (false: frozen, as torch's requires_grad).
  virtual bool requires_grad() const = 0;
  /// Freezes (false: the gradient is dropped, and no backward writes one, so no optimizer moves
  /// it) or unfreezes the parameter.
  virtual void set_requires_grad(bool on) = 0;
  /// Whether the value is a weight matrix (Out, In) that the linear op or a recurrent op multiplies
  /// by (nn::Linear's weight, nn::Attention's in_proj_weight, the LSTMs' and GRUs' weight_ih /
  /// weight_hh): the parameters nn::quantize_dynamic quantizes.
  bool product_weight = false;
};

template <class T, class B>
class TypedParameter final : public ParameterSlot {
 public:
  explicit TypedParameter(Var<T, AnyShape, B> v) : var(std::move(v)) {}
  const Dims& dims() const override { return var.dims(); }
  DType dtype() const override { return dtype_of<T>(); }
  std::size_t numel() const override { return var.numel(); }
  const char* backend_name() const override { return B::name; }
  void copy_to_host(void* dst) const override { var.raw().copy_to_host(std::span<T>(static_cast<T*>(dst), numel())); }
  void copy_to_host(void* dst, std::size_t first, std::size_t count) const override {
    if (first > numel() || count > numel() - first) throw ArgumentError("copy_to_host: elements out of range");
    if (count) B::template to_host<T>(static_cast<T*>(dst), var.raw().data() + first, count);
  }
  void copy_from_host(const void* src) override {
    var.data()->value.copy_from_host(std::span<const T>(static_cast<const T*>(src), numel()));
    var.data()->mark_value_written();
  }
  void copy_from_host(const void* src, std::size_t first, std::size_t count) override {
    if (first > numel() || count > numel() - first) throw ArgumentError("copy_from_host: elements out of range");
    var.data()->value.copy_from_host(std::span<const T>(static_cast<const T*>(src), count), first);
    var.data()->mark_value_written();
  }
  void zero_grad() override { var.data()->zero_grad(); }
  bool requires_grad() const override { return var.data()->requires_grad; }
  void set_requires_grad(bool on) override {
    var.data()->requires_grad = on;
    if (!on) var.data()->drop_grad();
  }
  Var<T, AnyShape, B> var;
};

/// Base of every layer and model. Not copyable or movable: children hold their parent's address.
/// A child leaves its parent when destroyed, so a child held in a std::optional or a unique_ptr can
/// be replaced (reset, then made again under the same name), as `self.head = nn.Linear(...)` is.
class Module {
 public:
  Module() = default;
  /// Registers this module as `name` under parent (nullptr: a root). Under a parent, the name must be
  /// non-empty, hold no '.', and differ from the parent's other children's and parameters' names
  /// (ArgumentError otherwise): it is a component of the dotted parameter names checkpoints use.
  Module(Module* parent, std::string name) : name_(std::move(name)), parent_(parent) {
    if (parent) {
      parent->check_new_name(name_, "child module");
      path_ = parent->path_.empty() ? name_ : parent->path_ + "." + name_;
      parent->children_.push_back({name_, this});
    }
  }
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  virtual ~Module() {
    if (parent_) std::erase_if(parent_->children_, [this](const auto& c) { return c.second == this; });
    for (auto& [n, c] : children_) c->parent_ = nullptr;  // children that outlive this module (not members)
  }

  const std::string& name() const noexcept { return name_; }
  /// The dotted name under the root module, as named_parameters() prefixes this module's parameters
  /// ("encoder.layers.0.self_attn"); a root's is empty. Layers seed their default initial values
  /// from it, so that two modules of the same name under different parents start apart.
  const std::string& path() const noexcept { return path_; }
  /// The name that seeds this module's default initialisation: its path, or its own name for a root.
  const std::string& seed_name() const noexcept { return parent_ ? path_ : name_; }

  /// Every parameter with its dotted PyTorch-style name ("attn.in_proj_weight"), in registration order.
  std::vector<std::pair<std::string, ParameterSlot*>> named_parameters() const {
    std::vector<std::pair<std::string, ParameterSlot*>> out;
    collect("", out);
    return out;
  }
  /// The parameters as Vars of element type T on backend B (all of a model's parameters share them).
  template <class T = float, class B = cpu>
  std::vector<Var<T, AnyShape, B>> parameters() const {
    std::vector<Var<T, AnyShape, B>> out;
    for (auto& [n, p] : named_parameters()) out.push_back(typed<T, B>(n, p, "Module::parameters"));
    return out;
  }
  /// The parameter `name` ("attn.in_proj_weight") as a Var of element type T on backend B: its value,
  /// and after backward its gradient (`.grad()`), as `dict(model.named_parameters())[name]` in
  /// PyTorch. Throws ArgumentError naming the parameter when there is none of that name (listing the
  /// names there are) or it has another element type or backend.
  template <class T = float, class B = cpu>
  Var<T, AnyShape, B> parameter(std::string_view name) const {
    const auto all = named_parameters();
    for (auto& [n, p] : all)
      if (n == name) return typed<T, B>(n, p, "Module::parameter");
    std::string names;
    for (auto& [n, p] : all) names += (names.empty() ? "" : ", ") + n;
    throw ArgumentError("Module::parameter: no parameter '" + std::string(name) + "' (the parameters are: " +
                        (names.empty() ? std::string("none") : names) + ")");
  }
  /// Every parameter by name, as Vars of element type T on backend B (value and `.grad()`).
  template <class T = float, class B = cpu>
  std::map<std::string, Var<T, AnyShape, B>> named_parameter_vars() const {
    std::map<std::string, Var<T, AnyShape, B>> out;
    for (auto& [n, p] : named_parameters()) out.emplace(n, typed<T, B>(n, p, "Module::named_parameter_vars"));
    return out;
  }
  /// Total number of parameter elements.
  std::size_t parameter_count() const {
    std::size_t n = 0;
    for (auto& [name, p] : named_parameters()) n += p->numel();
    return n;
  }
  void zero_grad() {
    for (auto& [n, p] : named_parameters()) p->zero_grad();
  }
  /// Freezes (false) or unfreezes (true) every parameter of this module and its children, as
  /// torch's module.requires_grad_(on): a frozen parameter gets no gradient (backward still passes
  /// gradients through it to its inputs), its gradient is dropped, and the optimizers, gradient
  /// clipping and dist::DataParallel (which reads the flags when it is constructed) leave it alone.
  /// One parameter: model.named_parameters()'s slot->set_requires_grad(on).
  void set_requires_grad(bool on) {
    for (auto& [n, p] : named_parameters()) p->set_requires_grad(on);
  }
  /// How many parameter elements get gradients (torch's sum(p.numel() for p in ... if p.requires_grad)).
  std::size_t trainable_parameter_count() const {
    std::size_t n = 0;
    for (auto& [name, p] : named_parameters())
      if (p->requires_grad()) n += p->numel();
    return n;
  }

  /// Training mode (dropout active) or evaluation mode; applies to all children.
  void train(bool on = true) {
    training_ = on;
    for (auto& [n, c] : children_) c->train(on);
  }
  void eval() { train(false); }
  bool training() const noexcept { return training_; }

  /// Re-initialises every parameter from one seeded stream: this module's own, then each child's
  /// (recursively) in registration order, then this module's reset_after_children.
  void init(std::uint64_t seed) {
    Rng rng(seed);
    init_recursive(rng);
  }
  /// Draws this module's own parameters (not its children's) from rng. Layers override it.
  virtual void reset_parameters(Rng&) {}
  /// Runs after the children's draws in init(seed): for a container that redraws its children's
  /// values (nn::Transformer: Xavier uniform on every matrix, as torch's). Nothing by default.
  virtual void reset_after_children(Rng&) {}

  const std::vector<std::pair<std::string, Module*>>& children() const noexcept { return children_; }

 protected:
  /// Creates a parameter of dims, owned by this module, and returns a Var sharing its storage.
  /// product_weight: see ParameterSlot::product_weight.
  template <class T, class S = AnyShape, class B = cpu>
  Var<T, S, B> register_parameter(std::string name, const Dims& dims, bool product_weight = false) {
    check_new_name(name, "parameter");
    auto d = std::allocate_shared<VarData<T, B>>(attn::detail::PoolAllocator<VarData<T, B>>{});
    d->value = Tensor<T, AnyShape, B>::zeros(dims);
    d->requires_grad = true;
    Var<T, AnyShape, B> v(d, nullptr);
    auto slot = std::make_unique<TypedParameter<T, B>>(v);
    slot->product_weight = product_weight;
    params_.push_back({std::move(name), std::move(slot)});
    return Var<T, S, B>(d, nullptr);
  }

 private:
  /// The parameter slot `p` (called `name`) as a Var of element type T on backend B; ArgumentError
  /// naming `who` and the parameter otherwise.
  template <class T, class B>
  static const Var<T, AnyShape, B>& typed(const std::string& name, ParameterSlot* p, const char* who) {
    auto* tp = dynamic_cast<TypedParameter<T, B>*>(p);
    if (!tp) throw ArgumentError(std::string(who) + ": parameter '" + name + "' has another element type or backend");
    return tp->var;
  }
  /// ArgumentError unless `name` can name a new child or parameter of this module.
  void check_new_name(const std::string& name, const char* what) const {
    const std::string where = "nn::Module" + (path_.empty() ? std::string() : " '" + path_ + "'");
    if (name.empty() || name.find('.') != std::string::npos)
      throw ArgumentError(where + ": a " + what + " name must be non-empty and hold no '.', got '" + name + "'");
    const auto same = [&](const auto& e) { return e.first == name; };
    if (std::any_of(children_.begin(), children_.end(), same) || std::any_of(params_.begin(), params_.end(), same))
      throw ArgumentError(where + ": a " + what + " named '" + name +
                          "' would repeat a name this module already has (its parameters would share one checkpoint entry)");
  }
  void collect(const std::string& prefix, std::vector<std::pair<std::string, ParameterSlot*>>& out) const {
    for (auto& [n, p] : params_) out.push_back({prefix + n, p.get()});
    for (auto& [n, c] : children_) c->collect(prefix + n + ".", out);
  }
  void init_recursive(Rng& rng) {
    reset_parameters(rng);
    for (auto& [n, c] : children_) c->init_recursive(rng);
    reset_after_children(rng);
  }

  std::string name_;
  std::string path_;
  Module* parent_ = nullptr;
  std::vector<std::pair<std::string, std::unique_ptr<ParameterSlot>>> params_;
  std::vector<std::pair<std::string, Module*>> children_;
  bool training_ = true;
};

/// A stable 64-bit hash of a name (FNV-1a), used to seed each layer's default initialisation.
constexpr std::uint64_t name_seed(std::string_view s) {
  std::uint64_t h = 1469598103934665603ULL;
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
  return h;
}

}  // namespace nn
}  // namespace attn
