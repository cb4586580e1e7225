#!/usr/bin/env bash
# Measures what attn costs to compile: each example translation unit and the largest test TUs,
# one at a time at -O2 with the project's flags (CPU seconds and wall seconds).
#   benchmarks/compile-times.sh [build-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-compile-times}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" \
  -DATTN_BUILD_TESTS=ON -DATTN_BUILD_EXAMPLES=ON -DATTN_BUILD_BENCHMARKS=ON -DATTN_CUDA=OFF > /dev/null
cmake --build "$build" --target attn_catch_main > /dev/null
printf '%-40s %10s %10s\n' "translation unit" "cpu s" "wall s"
for t in imdb clue bench nn_test_attention nn_test_lstm nn_test_layers autograd_test_gradcheck io_test_safetensors; do
  obj=$(ninja -C "$build" -t targets all | grep -E "/$t.dir/.*\.o:" | head -1 | cut -d: -f1) || true
  [ -n "$obj" ] || continue
  rm -f "$build/$obj"
  /usr/bin/time -f "%U %S %e" -o /tmp/attn-ct.$$ ninja -C "$build" "$obj" > /dev/null
  read -r u s e < /tmp/attn-ct.$$
  printf '%-40s %10.1f %10.1f\n' "$t ($(basename "$obj" .o))" "$(echo "$u + $s" | bc)" "$e"
done
rm -f /tmp/attn-ct.$$
