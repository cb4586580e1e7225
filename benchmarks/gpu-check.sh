#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds and runs attn's CUDA tests on a machine with a GPU, from a fresh copy of the repo:
# nvidia-smi, configure with -DATTN_CUDA=ON, build tests/cuda, ctest -L cuda (a skip is a failure here).
# Warnings are not errors there: -Werror is checked where the project is developed (g++ 12).
# The GPU machine has the CUDA toolkit, CMake and ninja but no network, so Eigen, fmt and Catch2
# travel along: pack them where they are installed, carry build-deps/ (ignored by /build*/), run.
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
           /usr/lib/libCatch2WithMain.a; do
    if [ ! -e "$p" ]; then
      echo "gpu-check --pack: $p is missing; install libeigen3-dev libfmt-dev catch2 (scripts/install-deps.sh)" >&2
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
         -DCatch2_DIR="$deps/usr/lib/cmake/Catch2")
  fi
  for h in eigen3/Eigen/Core fmt/core.h catch2/catch.hpp; do
    [ -e "/usr/include/$h" ] || [ -e "/usr/local/include/$h" ] || [ -e "$deps/usr/include/$h" ] || missing+=("$h")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "gpu-check: missing headers: ${missing[*]}. This machine cannot download them. Where they are installed"
    echo "  (Debian: libeigen3-dev libfmt-dev catch2), run 'benchmarks/gpu-check.sh --pack' in the repo root, then"
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
    -DATTN_BUILD_EXAMPLES=OFF -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES="$arch" "${cfg[@]}" ||
    { echo "gpu-check: FAILED at configure"; return 1; }

  echo "== build tests/cuda"
  local t0=$SECONDS
  if [ ${#gen[@]} -gt 0 ]; then
    cmake --build "$build" --target tests/cuda/all -j"$(nproc)" || { echo "gpu-check: FAILED at build"; return 1; }
  else
    cmake --build "$build" -j"$(nproc)" || { echo "gpu-check: FAILED at build"; return 1; }
  fi
  echo "gpu-check: built in $((SECONDS - t0)) s"

  echo "== test (ctest -L cuda; ATTN_CUDA_REQUIRE_DEVICE=1 turns a skip into a failure)"
  ATTN_CUDA_REQUIRE_DEVICE=1 ctest --test-dir "$build" -L cuda -V --timeout 600 ||
    { echo "gpu-check: FAILED at test"; return 1; }
  nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv || true
  echo "gpu-check: PASSED"
}

check 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
[ -f "$build/Testing/Temporary/LastTest.log" ] && [ -n "${OUT:-}" ] && cp "$build/Testing/Temporary/LastTest.log" "$OUT/ctest-LastTest.log"
echo "gpu-check: exit $rc, log in $log"
exit "$rc"
