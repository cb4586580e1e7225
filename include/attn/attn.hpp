// attn: compile-time-shaped tensors, tape autograd and attention layers. Include this one header.
//   #include <attn/attn.hpp>
#pragma once
#include "core/error.hpp"
#include "core/shape.hpp"
#include "core/tensor.hpp"
#include "core/expr.hpp"
#include "core/reduce.hpp"
#include "core/rng.hpp"
#include "backend/concept.hpp"
#include "backend/cpu.hpp"
#include "backend/cpu_kernels.hpp"
#include "autograd.hpp"
#include "nn.hpp"
#include "optim.hpp"
#include "io/safetensors.hpp"
#include "io/checkpoint.hpp"
