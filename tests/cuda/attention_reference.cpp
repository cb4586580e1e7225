// SPDX-License-Identifier: MIT
// The CPU side of test_attention_kernels.cu (see attention_reference.hpp), compiled by g++.
#include "attention_reference.hpp"

#include <attn/autograd/attention.hpp>

#include <cmath>
#include <limits>

namespace attn_test {

template <class T>
MhaData<T> make_mha_data(const MhaCase& c) {
  attn::Rng rng(c.seed ^ 0x5151);
  const std::size_t D = c.heads * c.head_dim, n = c.time;
  MhaData<T> d;
  d.qkv.resize(c.batch * n * 3 * D);
  for (auto& x : d.qkv) x = static_cast<T>(rng.uniform(-1.5, 1.5));
  d.dout.resize(c.batch * n * D);
  for (auto& x : d.dout) x = static_cast<T>(rng.uniform(-1, 1));
  if (c.key_mask) {
    d.key_mask.assign(c.batch * n, T(1));
    for (std::size_t b = 0; b < c.batch; ++b) {
      // Sample b keeps a prefix of its own length; sample 1 (if any) is fully padded.
      const std::size_t len = b == 1 ? 0 : n - (b * n) / (2 * c.batch + 1);
      for (std::size_t t = len; t < n; ++t) d.key_mask[b * n + t] = T(0);
    }
  }
  if (c.attn_mask) {
    d.attn_mask.assign(n * n, T(0));
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = i + 1; j < n; ++j) d.attn_mask[i * n + j] = -std::numeric_limits<T>::infinity();
  }
  return d;
}

template <class T>
void cpu_mha(const MhaCase& c, const MhaData<T>& data, bool flash, std::vector<T>& out, std::vector<T>& saved, std::vector<T>& dqkv) {
  attn::kernels::MhaProblem<T> p;
  p.batch = c.batch;
  p.time = c.time;
  p.heads = c.heads;
  p.head_dim = c.head_dim;
  p.qkv = data.qkv.data();
  p.key_mask = data.key_mask.empty() ? nullptr : data.key_mask.data();
  p.attn_mask = data.attn_mask.empty() ? nullptr : data.attn_mask.data();
  p.scale = T(1.0 / std::sqrt(double(c.head_dim)));
  p.dropout = c.dropout;
  p.seed = c.seed;
  p.pattern = c.pattern;
  const std::size_t D = c.heads * c.head_dim;
  out.assign(c.batch * c.time * D, T(0));
  dqkv.assign(data.qkv.size(), T(0));
  if (flash) {
    saved.assign(c.batch * c.heads * c.time, T(0));
    attn::kernels::mha_flash_forward(attn::cpu{}, p, out.data(), saved.data(), nullptr);
    attn::kernels::mha_flash_backward(attn::cpu{}, p, out.data(), data.dout.data(), saved.data(), dqkv.data(), nullptr);
  } else {
    saved.assign(c.batch * c.heads * c.time * c.time, T(0));
    attn::kernels::mha_naive_forward(attn::cpu{}, p, out.data(), saved.data(), nullptr);
    attn::kernels::mha_naive_backward(attn::cpu{}, p, saved.data(), data.dout.data(), dqkv.data(), nullptr);
  }
}

template MhaData<float> make_mha_data<float>(const MhaCase&);
template MhaData<double> make_mha_data<double>(const MhaCase&);
template void cpu_mha<float>(const MhaCase&, const MhaData<float>&, bool, std::vector<float>&, std::vector<float>&, std::vector<float>&);
template void cpu_mha<double>(const MhaCase&, const MhaData<double>&, bool, std::vector<double>&, std::vector<double>&,
                              std::vector<double>&);

}  // namespace attn_test
