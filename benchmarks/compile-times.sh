#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Measures what attn costs to compile: every translation unit of the example programs, what they
# share (attn::compiled's kernels, the examples' precompiled header) and the largest test
# translation units, one at a time at -O2 with the project's flags (CPU seconds and wall seconds);
# first, a user's unit that includes <attn/attn.hpp> and calls nothing, header-only, with attn.pc's
# flags: what every unit of a program pays before its own code.
#   benchmarks/compile-times.sh [build-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-compile-times}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" \
  -DATTN_BUILD_TESTS=ON -DATTN_BUILD_EXAMPLES=ON -DATTN_BUILD_BENCHMARKS=ON -DATTN_CUDA=OFF > /dev/null
# Build everything the measured units need first (the precompiled headers included), then time each
# unit alone.
cmake --build "$build" --target attn_catch_main attn_compiled attn_examples_pch attn_tests_pch > /dev/null
printf '%-52s %8s %8s\n' "translation unit" "cpu s" "wall s"
empty=$(mktemp --suffix=.cpp)
printf '#include <attn/attn.hpp>\nint main() {}\n' > "$empty"
cflags=$(sed -n 's/^Cflags: //p' "$build/attn.pc" | sed "s|-I\${includedir}|-I$PWD/include|")
# shellcheck disable=SC2086  # the flags are words
/usr/bin/time -f "%U %S %e" -o /tmp/attn-ct.$$ ${CXX:-c++} -O2 -DNDEBUG -march=native $cflags -isystem /usr/include/eigen3 \
  -c "$empty" -o /dev/null
read -r u s e < /tmp/attn-ct.$$
printf '%-52s %8.1f %8.1f\n' "#include <attn/attn.hpp> alone (header-only)" "$(echo "$u + $s" | bc)" "$e"
rm -f "$empty"
units=(
  "CMakeFiles/attn_compiled.dir/src/cpu_float.cpp.o|attn::compiled, float kernels (once)"
  "CMakeFiles/attn_compiled.dir/src/cpu_double.cpp.o|attn::compiled, double kernels (once)"
  "examples/CMakeFiles/attn_examples_pch.dir/cmake_pch.hxx.gch|examples' precompiled header (once)"
  "examples/imdb/CMakeFiles/imdb.dir/main.cpp.o|examples/imdb/main.cpp"
  "examples/imdb/CMakeFiles/imdb.dir/train.cpp.o|examples/imdb/train.cpp"
  "examples/imdb/CMakeFiles/imdb.dir/heads.cpp.o|examples/imdb/heads.cpp"
  "examples/imdb/CMakeFiles/imdb.dir/options.cpp.o|examples/imdb/options.cpp"
  "examples/clue/CMakeFiles/clue.dir/main.cpp.o|examples/clue/main.cpp"
  "examples/clue/CMakeFiles/clue.dir/train.cpp.o|examples/clue/train.cpp"
  "examples/clue/CMakeFiles/clue.dir/heads.cpp.o|examples/clue/heads.cpp"
  "examples/clue/CMakeFiles/clue.dir/options.cpp.o|examples/clue/options.cpp"
  "benchmarks/CMakeFiles/bench.dir/bench.cpp.o|benchmarks/bench.cpp"
  "tests/CMakeFiles/attn_tests_pch.dir/cmake_pch.hxx.gch|tests' precompiled header (once)"
  "tests/CMakeFiles/nn_test_attention.dir/nn/test_attention.cpp.o|tests/nn/test_attention.cpp"
  "tests/CMakeFiles/nn_test_lstm.dir/nn/test_lstm.cpp.o|tests/nn/test_lstm.cpp"
  "tests/CMakeFiles/nn_test_layers.dir/nn/test_layers.cpp.o|tests/nn/test_layers.cpp"
  "tests/CMakeFiles/autograd_test_gradcheck.dir/autograd/test_gradcheck.cpp.o|tests/autograd/test_gradcheck.cpp"
  "tests/CMakeFiles/io_test_safetensors.dir/io/test_safetensors.cpp.o|tests/io/test_safetensors.cpp"
)
for u in "${units[@]}"; do
  obj=${u%%|*} label=${u#*|}
  [ -n "$(ninja -C "$build" -t query "$obj" 2>/dev/null)" ] || continue
  rm -f "$build/$obj"
  /usr/bin/time -f "%U %S %e" -o /tmp/attn-ct.$$ ninja -C "$build" "$obj" > /dev/null
  read -r u s e < /tmp/attn-ct.$$
  printf '%-52s %8.1f %8.1f\n' "$label" "$(echo "$u + $s" | bc)" "$e"
done
rm -f /tmp/attn-ct.$$
