// SPDX-License-Identifier: MIT
// The data layer: UTF-8, tokenizers, vocabularies, batching, splits, and the IMDb and CLUE readers
// (the CLUE JSON-lines reader brings in nlohmann-json, which attn.hpp leaves out to spare every
// translation unit its compile time). Depends on core only; include <attn/attn.hpp> for the rest.
//   #include <attn/data.hpp>
#pragma once
#include "data/batching.hpp"
#include "data/clue.hpp"
#include "data/file_io.hpp"
#include "data/imdb.hpp"
#include "data/split.hpp"
#include "data/tokenizer.hpp"
#include "data/utf8.hpp"
#include "data/vocab.hpp"
