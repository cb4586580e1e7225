// SPDX-License-Identifier: MIT
// attn::compiled: the instruction-set extensions its units were compiled for (their -march), as one
// constant that compiled_guard.cpp checks against the CPU before any of that code runs. Data only:
// nothing here executes.
#include "compiled_march.hpp"

extern "C" const unsigned attn_compiled_march = ATTN_MARCH_FEATURES;
