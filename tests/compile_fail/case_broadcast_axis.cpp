// SPDX-License-Identifier: MIT
// expect: attn element-wise op: static extents differ at output axis
// (4, 3) + (4, 5): the last axis is static on both sides, differs, and neither is 1.
#include <attn/attn.hpp>
int main() {
  attn::Tensor<float, attn::Shape<4, 3>> a({4, 3});
  attn::Tensor<float, attn::Shape<4, 5>> b({4, 5});
  auto e = a + b;
  (void)e;
}
