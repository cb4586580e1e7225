// SPDX-License-Identifier: MIT
// Test helper: a gradient check in double of f(Tape&, inputs) at the given inputs, reported as one
// Catch2 check that names the case, the largest relative error and where it occurred.
#pragma once
#include <catch2/catch.hpp>

#include <string>
#include <utility>
#include <vector>

#include <attn/autograd/gradcheck.hpp>

namespace testutil {

template <class F>
void check_gradients(const std::string& name, F&& f, std::vector<attn::Tensor<double>> in, double tol = 1e-6) {
  auto r = attn::gradcheck(std::forward<F>(f), in, {.tolerance = tol});
  INFO(name << ": max rel error " << r.max_rel_error << " at " << r.worst);
  CHECK(r.ok);
}

}  // namespace testutil
