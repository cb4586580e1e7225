// SPDX-License-Identifier: MIT
// The CPU kernel of rotary position embeddings (autograd/rotary.hpp): rows in parallel, each
// element from rotary_element (backend/rotary_problem.hpp), as cuda/rotary.cuh.
//   attn::kernels::rotary(attn::cpu{}, p, cos, sin, x, y, false, false);
#pragma once
#include <cstddef>

#include "../../core/profile.hpp"
#include "../cpu.hpp"
#include "../rotary_problem.hpp"
#include "vector_kernels.hpp"

namespace attn::kernels {

/// y = R x (inverse: y = Rᵀ x), or y += that when accumulate. x and y must not overlap.
template <class T>
void rotary(cpu, const RotaryProblem& p, const T* cos, const T* sin, const T* x, T* y, bool inverse, bool accumulate) {
  const auto prof = profile::Scope::of<T>(inverse ? "rotary backward" : "rotary forward", p.rows, p.width);
  const long long nr = static_cast<long long>(p.rows);
  const int nt = vec::threads_for(p.rows, p.rows * p.width);
#if defined(_OPENMP)
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
#endif
  for (long long ir = 0; ir < nr; ++ir) {
    const std::size_t r = static_cast<std::size_t>(ir);
    T* yr = y + r * p.width;
    if (accumulate)
      for (std::size_t c = 0; c < p.width; ++c) yr[c] += rotary_element(p, cos, sin, x, r, c, inverse);
    else
      for (std::size_t c = 0; c < p.width; ++c) yr[c] = rotary_element(p, cos, sin, x, r, c, inverse);
  }
}

}  // namespace attn::kernels
