// SPDX-License-Identifier: MIT
// expect: nn::Linear: the input's last extent differs from In
// A Linear<128, 2> applied to a (B, T, 64) input: a static width mismatch at the user's line.
#include <attn/attn.hpp>
int main() {
  attn::nn::Linear<128, 2> head(nullptr, "head");
  attn::NoGrad ctx;
  attn::Var<float, attn::Shape<attn::dyn, attn::dyn, 64>> x(attn::Tensor<float>::zeros({2, 3, 64}));
  auto y = head(ctx, x);
  (void)y;
}
