// SPDX-License-Identifier: MIT
// The CLUE model's attentions on the CPU, one per head count (heads.hpp).
#include "heads.hpp"

namespace clue {

template std::unique_ptr<AnyAttention<attn::cpu>> make_attention<attn::cpu>(std::size_t, nn::Module*, const ModelConfig&);

}  // namespace clue
