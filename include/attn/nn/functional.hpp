// SPDX-License-Identifier: MIT
// The layer functions under their nn:: names: dropout (autograd/dropout.hpp), layer_norm and rms_norm
// (autograd/norm.hpp), masked_mean and masked_max pooling (autograd/pooling.hpp). They are autograd
// ops; nn/ holds the layers built from them.
//   auto pooled = attn::nn::masked_mean(ctx, y, mask);     // (B, T, D), (B, T) -> (B, D)
#pragma once
#include "../autograd/dropout.hpp"
#include "../autograd/norm.hpp"
#include "../autograd/pooling.hpp"

namespace attn::nn {

using attn::dropout;
using attn::layer_norm;
using attn::masked_max;
using attn::masked_mean;
using attn::rms_norm;

}  // namespace attn::nn
