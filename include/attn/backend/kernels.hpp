// SPDX-License-Identifier: MIT
// Every backend's kernels behind the ops: the CPU ones (backend/cpu/) always, the CUDA ones
// (backend/cuda/) when the source is compiled by nvcc, one kernel family per file in each, and the
// generic ones (generic.hpp) for a backend without its own. The per-element math both backends
// apply is element_math.hpp. The ops call them as attn::kernels::xxx(B{}, ...); a qualified call
// binds to the overloads declared before the op's definition, so each op header includes this one
// first.
//   #include "../backend/kernels.hpp"   // in an autograd/ header
#pragma once
#include "cpu.hpp"
#include "cpu/attention.hpp"
#include "cpu/embedding.hpp"
#include "cpu/gru.hpp"
#include "cpu/layer_kernels.hpp"
#include "cpu/lstm.hpp"
#include "cpu/optim_kernels.hpp"
#include "cpu/reduce.hpp"
#include "cpu/rotary.hpp"
#include "cpu/softmax.hpp"
#include "element_math.hpp"
#include "generic.hpp"

#if defined(__CUDACC__)
#include "cuda.hpp"
#include "cuda/attention.cuh"
#include "cuda/embedding.cuh"
#include "cuda/gru.cuh"
#include "cuda/layer_kernels.cuh"
#include "cuda/lstm.cuh"
#include "cuda/optim.cuh"
#include "cuda/reduce.cuh"
#include "cuda/rotary.cuh"
#include "cuda/softmax.cuh"
#endif
