#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds attn with warnings as errors and runs every test (ctest). Installs missing Debian
# packages first. The CUDA backend and its tests are compiled whenever nvcc exists; they run
# only where a GPU is present and are reported as skipped otherwise.
#   scripts/test.sh [build-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
scripts/install-deps.sh --mpi
cuda_flags=(-DATTN_CUDA=OFF)
nvcc=$(command -v nvcc || true)
[ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
if [ -n "$nvcc" ] && [ "${ATTN_TEST_CUDA:-1}" != 0 ]; then
  cuda_flags=(-DATTN_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc")
fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTN_WERROR=ON -DATTN_ISA_CHECK=ON -DATTN_BUILD_TESTS=ON \
  -DATTN_BUILD_EXAMPLES=ON "${cuda_flags[@]}"
cmake --build "$build" -j"${ATTN_BUILD_JOBS:-2}"
ctest --test-dir "$build" --output-on-failure -j"${ATTN_TEST_JOBS:-2}"
