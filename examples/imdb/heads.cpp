// SPDX-License-Identifier: MIT
// The IMDb model's encoders on the CPU, one per head count (heads.hpp).
#include "heads.hpp"

namespace imdb {

template std::unique_ptr<AnyEncoder<attn::cpu>> make_encoder<attn::cpu>(std::size_t, nn::Module*, const ModelConfig&);

}  // namespace imdb
