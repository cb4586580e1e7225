#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds and runs attn's CUDA checks on a machine with a GPU, from a fresh copy of the repo, in one go:
#  1. nvidia-smi; configure with -DATTN_CUDA=ON; build tests/cuda, both example programs and bench;
#  2. ctest -L cuda: the conformance suite (every op and layer, the optimizers, checkpoints and both
#     example models against the CPU), the CUDA backend's and the attention kernels' tests (a skip is
#     a failure here);
#  3. compute-sanitizer memcheck on a small subset (the ops' conformance cases, float);
#  4. bench --device cuda for R1-h8, R2-h4 and R3-T4096;
#  5. both examples on their bundled samples with --device cuda (train, predict, CLUE's --bench).
# Warnings are not errors there: -Werror is checked where the project is developed (g++ 12).
# The GPU machine has the CUDA toolkit, CMake and ninja but no network, so Eigen, fmt, Catch2,
# nlohmann-json, CLI11 and LIBLINEAR's header and library travel along: pack them where they are
# installed, carry build-deps/ (ignored by /build*/), run. Without LIBLINEAR's BLAS there, the IMDb
# program is left out (its model still runs in the conformance suite).
#   benchmarks/gpu-check.sh --pack   # here: Debian's headers and CMake configs into build-deps/
#   benchmarks/gpu-check.sh          # there: logs to $OUT (if set) and to build-gpu/
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
deps=${ATTN_GPU_DEPS:-$root/build-deps}
build=${ATTN_GPU_BUILD:-$root/build-gpu}
arch=${ATTN_CUDA_ARCH:-90}

if [ "${1:-}" = "--pack" ]; then
  rm -rf "$deps" && mkdir -p "$deps"
  for p in /usr/include/eigen3 /usr/share/eigen3/cmake /usr/include/fmt /usr/lib/x86_64-linux-gnu/cmake/fmt \
           /usr/lib/x86_64-linux-gnu/libfmt.so /usr/lib/x86_64-linux-gnu/libfmt.so.9 \
           /usr/lib/x86_64-linux-gnu/libfmt.so.9.1.0 /usr/include/catch2 /usr/lib/cmake/Catch2 \
           /usr/lib/libCatch2WithMain.a /usr/include/nlohmann /usr/share/cmake/nlohmann_json /usr/include/CLI /usr/share/cmake/CLI11 \
           /usr/include/linear.h /usr/lib/x86_64-linux-gnu/liblinear.so /usr/lib/x86_64-linux-gnu/liblinear.so.4; do
    if [ ! -e "$p" ]; then
      echo "gpu-check --pack: $p is missing; install libeigen3-dev libfmt-dev catch2 nlohmann-json3-dev libcli11-dev liblinear-dev (scripts/install-deps.sh)" >&2
      exit 2
    fi
    mkdir -p "$deps$(dirname "$p")" && cp -a "$p" "$deps$(dirname "$p")/" || exit 2
  done
  echo "gpu-check --pack: $(du -sh "$deps" | cut -f1) in $deps; carry '${deps#"$root"/}' to the GPU machine"
  exit 0
fi

mkdir -p "$build"
log_dir=${OUT:-$build}
mkdir -p "$log_dir"
log=$log_dir/gpu-check.log

check() {
  echo "== $(date -u +%H:%M:%S) host $(hostname), repo $root"
  echo "== nvidia-smi"
  nvidia-smi || echo "gpu-check: nvidia-smi failed (continuing: the tests say whether CUDA works)"

  # Dependencies: the system's, else the carried pack; name what is missing, since nothing can be fetched.
  local cfg=() missing=()
  if [ -d "$deps/usr" ]; then
    cfg=(-DEigen3_DIR="$deps/usr/share/eigen3/cmake" -Dfmt_DIR="$deps/usr/lib/x86_64-linux-gnu/cmake/fmt"
         -DCatch2_DIR="$deps/usr/lib/cmake/Catch2" -Dnlohmann_json_DIR="$deps/usr/share/cmake/nlohmann_json"
         -DCLI11_DIR="$deps/usr/share/cmake/CLI11" -DLIBLINEAR_INCLUDE_DIR="$deps/usr/include")
  fi
  # The IMDb program links LIBLINEAR, which needs a BLAS at run time: build it where both load.
  local imdb=ON liblinear
  liblinear=$(ls /usr/lib/x86_64-linux-gnu/liblinear.so.4 "$deps/usr/lib/x86_64-linux-gnu/liblinear.so.4" 2>/dev/null | head -1)
  if [ -z "$liblinear" ] || LD_LIBRARY_PATH="$(dirname "$liblinear")" ldd "$liblinear" 2>&1 | grep -q "not found"; then
    echo "gpu-check: LIBLINEAR or its BLAS does not load here: the IMDb program is left out (its model runs in the conformance suite)"
    imdb=OFF
  else
    cfg+=(-DLIBLINEAR_LIBRARY="$liblinear")
  fi
  for h in eigen3/Eigen/Core fmt/core.h catch2/catch.hpp nlohmann/json.hpp CLI/CLI.hpp; do
    [ -e "/usr/include/$h" ] || [ -e "/usr/local/include/$h" ] || [ -e "$deps/usr/include/$h" ] || missing+=("$h")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "gpu-check: missing headers: ${missing[*]}. This machine cannot download them. Where they are installed"
    echo "  (Debian: libeigen3-dev libfmt-dev catch2 nlohmann-json3-dev libcli11-dev liblinear-dev), run 'benchmarks/gpu-check.sh --pack' in the repo root, then"
    echo "  carry build-deps/ along with the repo (it is git-ignored, so name it in the copy or carry list)."
    return 2
  fi
  local nvcc
  nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  command -v cmake >/dev/null || { echo "gpu-check: cmake not found"; return 2; }
  local gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)

  echo "== configure ($nvcc, sm_$arch)"
  cmake -S "$root" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DATTN_CUDA=ON -DATTN_WERROR=OFF \
    -DATTN_BUILD_EXAMPLES=ON -DATTN_EXAMPLES_IMDB=$imdb -DATTN_BUILD_BENCHMARKS=ON -DCMAKE_CUDA_COMPILER="$nvcc" \
    -DCMAKE_CUDA_ARCHITECTURES="$arch" "${cfg[@]}" ||
    { echo "gpu-check: FAILED at configure"; return 1; }

  echo "== build tests/cuda, the examples and bench"
  local t0=$SECONDS targets=(clue bench)
  [ "$imdb" = ON ] && targets+=(imdb)
  if [ ${#gen[@]} -gt 0 ]; then
    cmake --build "$build" --target tests/cuda/all "${targets[@]}" -j"$(nproc)" || { echo "gpu-check: FAILED at build"; return 1; }
  else
    cmake --build "$build" -j"$(nproc)" || { echo "gpu-check: FAILED at build"; return 1; }
  fi
  echo "gpu-check: built in $((SECONDS - t0)) s"

  echo "== test (ctest -L cuda; ATTN_CUDA_REQUIRE_DEVICE=1 turns a skip into a failure)"
  ATTN_CUDA_REQUIRE_DEVICE=1 ctest --test-dir "$build" -L cuda -V --timeout 600 ||
    { echo "gpu-check: FAILED at test"; return 1; }

  echo "== compute-sanitizer memcheck: the ops' conformance cases (float)"
  local sanitizer
  sanitizer=$(command -v compute-sanitizer || echo "$(dirname "$nvcc")/compute-sanitizer")
  if [ -x "$sanitizer" ]; then
    ATTN_CUDA_REQUIRE_DEVICE=1 "$sanitizer" --tool memcheck --error-exitcode 3 "$build/tests/cuda/cuda_test_conformance" \
      "conformance: autograd ops on cuda match cpu - float" || { echo "gpu-check: FAILED at memcheck"; return 1; }
  else
    echo "gpu-check: compute-sanitizer not found next to nvcc: memcheck skipped"
  fi

  echo "== bench --device cuda (R1-h8, R2-h4, R3-T4096)"
  "$build/benchmarks/bench" --device cuda --all --cases R1-h8 R2-h4 R3-T4096 --iters 20 || { echo "gpu-check: FAILED at bench"; return 1; }

  echo "== the examples on their bundled samples with --device cuda"
  local runs="$build/gpu-runs"
  rm -rf "$runs"
  local clue_data="$root/examples/clue/sample/tnews_public" imdb_data="$root/examples/imdb/sample/aclImdb"
  "$build/examples/clue/clue" --device cuda --data "$clue_data" --epochs 2 --out "$runs/clue" --bench-seconds 1 ||
    { echo "gpu-check: FAILED at clue"; return 1; }
  "$build/examples/clue/clue" predict --device cuda --model "$runs/clue/h4" || { echo "gpu-check: FAILED at clue predict"; return 1; }
  "$build/examples/clue/clue" --device cuda --data "$clue_data" --bench --model "$runs/clue/h4" --bench-seconds 2 --bench-latency 200 ||
    { echo "gpu-check: FAILED at clue --bench"; return 1; }
  "$build/examples/clue/clue" predict --model "$runs/clue/h4" || { echo "gpu-check: FAILED at clue predict on the cpu of the cuda-trained model"; return 1; }
  if [ "$imdb" = ON ]; then
    "$build/examples/imdb/imdb" --device cuda --data "$imdb_data" --epochs 2 --out "$runs/imdb" || { echo "gpu-check: FAILED at imdb"; return 1; }
    "$build/examples/imdb/imdb" predict --device cuda --model "$runs/imdb/h8" || { echo "gpu-check: FAILED at imdb predict"; return 1; }
    "$build/examples/imdb/imdb" predict --model "$runs/imdb/h8" || { echo "gpu-check: FAILED at imdb predict on the cpu"; return 1; }
  fi
  nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv || true
  echo "gpu-check: PASSED"
}

check 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
[ -f "$build/Testing/Temporary/LastTest.log" ] && [ -n "${OUT:-}" ] && cp "$build/Testing/Temporary/LastTest.log" "$OUT/ctest-LastTest.log"
echo "gpu-check: exit $rc, log in $log"
exit "$rc"
