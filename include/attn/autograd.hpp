// SPDX-License-Identifier: MIT
// The autograd layer: Var, Tape, NoGrad and every differentiable op.
//   #include <attn/autograd.hpp>
#pragma once
#include "autograd/tape.hpp"
#include "autograd/var.hpp"
#include "autograd/elementwise.hpp"
#include "autograd/matmul.hpp"
#include "autograd/linear.hpp"
#include "autograd/shape_ops.hpp"
#include "autograd/reduce.hpp"
#include "autograd/softmax.hpp"
#include "autograd/embedding.hpp"
#include "autograd/loss.hpp"
#include "autograd/dropout.hpp"
#include "autograd/norm.hpp"
#include "autograd/pooling.hpp"
#include "autograd/lstm.hpp"
#include "autograd/gru.hpp"
#include "autograd/attention.hpp"
#include "autograd/cross_attention.hpp"
#include "autograd/rotary.hpp"
#include "autograd/checkpoint.hpp"
#include "autograd/gradcheck.hpp"
