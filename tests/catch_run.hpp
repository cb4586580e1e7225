// SPDX-License-Identifier: MIT
// Runs the test cases linked into the program with Catch2's command line (argc, argv); returns the
// number of failed test cases, capped as Catch2 caps it. Defined in catch_impl.cpp.
#pragma once

namespace attn_test {

int run_catch(int argc, char** argv);

}  // namespace attn_test
