// SPDX-License-Identifier: MIT
// The one Catch2 main shared by the CPU test programs (Catch2 itself is attn_catch_impl).
#include "catch_run.hpp"

int main(int argc, char** argv) { return attn_test::run_catch(argc, argv); }
