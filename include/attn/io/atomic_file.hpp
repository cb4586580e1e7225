// SPDX-License-Identifier: MIT
// attn::io::AtomicFile is attn::AtomicFile (core/atomic_file.hpp), the library's one atomic writer.
#pragma once
#include "../core/atomic_file.hpp"

namespace attn::io {
using attn::AtomicFile;
}  // namespace attn::io
