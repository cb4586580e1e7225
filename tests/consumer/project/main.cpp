// SPDX-License-Identifier: MIT
// A downstream program built against the installed attn package.
#include <attn/attn.hpp>

#include <cstdio>

struct Net : attn::nn::Module {
  attn::nn::Linear<4, 2> fc{this, "fc"};
};

int main() {
  Net net;
  attn::Tape tape;
  attn::Var<float, attn::Shape<attn::dyn, 4>> x(attn::Tensor<float>::full({3, 4}, 0.5f));
  auto labels = attn::Tensor<std::int64_t>::from({3}, {0, 1, 1});
  auto loss = attn::cross_entropy(tape, net.fc(tape, x), labels);
  tape.backward(loss);
  if (net.fc.weight.grad().empty()) return 1;
  std::printf("consumer: ok (loss %.4f, %zu parameters)\n", double(loss.value()[0]), net.parameter_count());
  return 0;
}
