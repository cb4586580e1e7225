// SPDX-License-Identifier: MIT
// expect: matmul: static extents differ on the contracted axis
// (dyn, 16) x (32, 8): the contracted extents 16 and 32 are both static and differ.
#include <attn/attn.hpp>
int main() {
  attn::NoGrad ctx;
  attn::Var<float, attn::Shape<attn::dyn, 16>> a(attn::Tensor<float>::zeros({2, 16}));
  attn::Var<float, attn::Shape<32, 8>> b(attn::Tensor<float>::zeros({32, 8}));
  auto c = attn::matmul(ctx, a, b);
  (void)c;
}
