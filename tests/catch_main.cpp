// SPDX-License-Identifier: MIT
// The one Catch2 main shared by all test programs.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
