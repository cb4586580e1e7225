// SPDX-License-Identifier: MIT
// The data layer, including the CLUE JSON-lines reader (which brings in nlohmann-json, kept out
// of attn.hpp to spare every translation unit its compile time).
//   #include <attn/data.hpp>
#pragma once
#include "attn.hpp"
#include "data/clue.hpp"
