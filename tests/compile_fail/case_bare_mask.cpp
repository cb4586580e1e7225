// SPDX-License-Identifier: MIT
// expect: a bare mask tensor does not say which value means padding
// A float tensor passed as nn::Attention's mask: 1 could mean a real token or (torch's
// key_padding_mask) padding, so the layer takes attn::KeepMask, attn::PaddingMask or attn::Lengths.
#include <attn/attn.hpp>
int main() {
  attn::nn::Attention<2, 8> attention(nullptr, "attn");
  attn::NoGrad ctx;
  attn::Var<float, attn::Shape<attn::dyn, attn::dyn, 8>> x(attn::Tensor<float>::zeros({2, 3, 8}));
  auto key_padding_mask = attn::Tensor<float>::zeros({2, 3});
  auto y = attention(ctx, x, key_padding_mask);
  (void)y;
}
