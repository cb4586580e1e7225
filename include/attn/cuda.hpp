// SPDX-License-Identifier: MIT
// attn with its CUDA backend: everything in attn.hpp plus attn::cuda. For sources compiled by nvcc
// that link attn::cuda; plain C++ sources keep including attn/attn.hpp.
//   #include <attn/cuda.hpp>   // in a .cu file
#pragma once
#include "attn.hpp"
#include "backend/cuda.hpp"
