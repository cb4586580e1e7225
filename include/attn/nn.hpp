// SPDX-License-Identifier: MIT
// The nn layer: Module, initialisers, layers and layer functions.
//   #include <attn/nn.hpp>
#pragma once
#include "nn/module.hpp"
#include "nn/module_list.hpp"
#include "nn/init.hpp"
#include "nn/functional.hpp"
#include "nn/linear.hpp"
#include "nn/embedding.hpp"
#include "nn/layer_norm.hpp"
#include "nn/lstm.hpp"
#include "nn/gru.hpp"
#include "nn/rnn_cell.hpp"
#include "nn/attention.hpp"
#include "nn/encoder.hpp"
#include "nn/decoder.hpp"
#include "nn/transformer.hpp"
#include "nn/quantize.hpp"
