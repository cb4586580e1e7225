// SPDX-License-Identifier: MIT
// ATTN_INSTANTIATE_ALL_CPU(X, T): every instantiation that ATTN_SEPARATE_COMPILATION declares
// extern for one element type (see attn/core/instantiate.hpp). attn/impl/src.hpp defines them for
// float and double; the attn::compiled library does each type in its own translation unit.
#pragma once
#include "../attn.hpp"

#define ATTN_INSTANTIATE_ALL_CPU(X, T)      \
  ATTN_INSTANTIATE_CPU_GEMM(X, T)           \
  ATTN_INSTANTIATE_CPU_TILE_GEMM(X, T)      \
  ATTN_INSTANTIATE_CPU_REDUCE(X, T)         \
  ATTN_INSTANTIATE_CPU_SOFTMAX(X, T)        \
  ATTN_INSTANTIATE_CPU_EMBEDDING(X, T)      \
  ATTN_INSTANTIATE_CPU_LAYER_KERNELS(X, T)  \
  ATTN_INSTANTIATE_CPU_VECTOR_KERNELS(X, T) \
  ATTN_INSTANTIATE_CPU_LSTM(X, T)           \
  ATTN_INSTANTIATE_CPU_GRU(X, T)            \
  ATTN_INSTANTIATE_CPU_LINEAR(X, T)         \
  ATTN_INSTANTIATE_CPU_ATTENTION(X, T)
