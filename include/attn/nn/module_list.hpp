// SPDX-License-Identifier: MIT
// nn::ModuleList<M>: torch.nn.ModuleList of one module type, its children named "0", "1", ...
// under the list's own name, so that a list `blocks` gives the parameter names torch's does
// ("blocks.0.attn.in_proj_weight") and a checkpoint moves between the two. The count is chosen at
// run time; the type at compile time, as every attn layer's shapes are.
//   attn::nn::ModuleList<Block> blocks{this, "blocks", 6, block_options};   // Block(&blocks, "0", block_options), ...
//   for (const Block& b : blocks) h = b(ctx, h);
//   blocks.emplace_back(block_options);                                    // "6"
#pragma once
#include <compare>
#include <cstddef>
#include <iterator>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "module.hpp"

namespace attn::nn {

template <class M>
class ModuleList : public Module {
  using Items = std::vector<std::unique_ptr<M>>;

  /// A random-access iterator over the modules (M&, not the owning pointers).
  template <class Base, class Ref>
  class Iterator {
   public:
    using iterator_category = std::random_access_iterator_tag;
    using value_type = M;
    using difference_type = std::ptrdiff_t;
    using pointer = std::remove_reference_t<Ref>*;
    using reference = Ref;
    Iterator() = default;
    explicit Iterator(Base it) : it_(it) {}
    reference operator*() const { return **it_; }
    pointer operator->() const { return it_->get(); }
    reference operator[](difference_type n) const { return *it_[n]; }
    Iterator& operator++() { return ++it_, *this; }
    Iterator operator++(int) { return Iterator(it_++); }
    Iterator& operator--() { return --it_, *this; }
    Iterator operator--(int) { return Iterator(it_--); }
    Iterator& operator+=(difference_type n) { return it_ += n, *this; }
    Iterator& operator-=(difference_type n) { return it_ -= n, *this; }
    friend Iterator operator+(Iterator a, difference_type n) { return a += n; }
    friend Iterator operator+(difference_type n, Iterator a) { return a += n; }
    friend Iterator operator-(Iterator a, difference_type n) { return a -= n; }
    friend difference_type operator-(const Iterator& a, const Iterator& b) { return a.it_ - b.it_; }
    friend bool operator==(const Iterator& a, const Iterator& b) { return a.it_ == b.it_; }
    friend auto operator<=>(const Iterator& a, const Iterator& b) { return a.it_ <=> b.it_; }

   private:
    Base it_{};
  };

 public:
  static_assert(std::is_base_of_v<Module, M>, "nn::ModuleList<M>: M must be an nn::Module");
  using iterator = Iterator<typename Items::iterator, M&>;
  using const_iterator = Iterator<typename Items::const_iterator, const M&>;

  /// An empty list; emplace_back adds the modules.
  ModuleList(Module* parent, std::string name) : Module(parent, std::move(name)) {}
  /// n modules, M(this, "i", args...) for i = 0 .. n - 1, in that order (so init(seed) draws them
  /// in that order too).
  template <class... Args>
  ModuleList(Module* parent, std::string name, std::size_t n, const Args&... args) : Module(parent, std::move(name)) {
    items_.reserve(n);
    for (std::size_t i = 0; i < n; ++i) emplace_back(args...);
  }

  /// Appends M(this, "<size()>", args...) and returns it.
  template <class... Args>
  M& emplace_back(Args&&... args) {
    items_.push_back(std::make_unique<M>(this, std::to_string(items_.size()), std::forward<Args>(args)...));
    return *items_.back();
  }

  std::size_t size() const noexcept { return items_.size(); }
  bool empty() const noexcept { return items_.empty(); }
  M& operator[](std::size_t i) { return *items_[i]; }
  const M& operator[](std::size_t i) const { return *items_[i]; }
  /// operator[] with a bounds check: ArgumentError naming the list and its size.
  M& at(std::size_t i) { return *items_[checked(i)]; }
  const M& at(std::size_t i) const { return *items_[checked(i)]; }
  M& back() { return *items_.back(); }
  const M& back() const { return *items_.back(); }

  iterator begin() { return iterator(items_.begin()); }
  iterator end() { return iterator(items_.end()); }
  const_iterator begin() const { return const_iterator(items_.cbegin()); }
  const_iterator end() const { return const_iterator(items_.cend()); }

 private:
  Items items_;

  std::size_t checked(std::size_t i) const {
    if (i >= items_.size())
      throw ArgumentError("nn::ModuleList '" + this->name() + "': index " + std::to_string(i) + " is past its " + std::to_string(items_.size()) +
                          " modules");
    return i;
  }
};

}  // namespace attn::nn
