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
  # Without a GPU the CUDA units are only compiled (their tests are skipped), so their host code is
  # compiled at -O0: at -O3 the host compiler takes two thirds of nvcc's time (the IMDb program's
  # unit: 97 of 140 s; 49 s at -O0). Device code is optimised either way (cicc, ptxas).
  cuda_host_opt=-O3
  if ! { command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; }; then
    cuda_host_opt=-O0
  fi
  cuda_flags=(-DATTN_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc" "-DCMAKE_CUDA_FLAGS_RELEASE=$cuda_host_opt -DNDEBUG")
  # With a GPU, machine code for it (e.g. 90 on an H100) unless CUDAARCHS says otherwise; without,
  # CMake's default (cmake/AttnCuda.cmake).
  if [ "$cuda_host_opt" = -O3 ] && [ -z "${CUDAARCHS:-}" ]; then
    cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' .' || true)
    [[ "$cc" =~ ^[0-9]+$ ]] && cuda_flags+=(-DCMAKE_CUDA_ARCHITECTURES="$cc")
  fi
fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTN_WERROR=ON -DATTN_ISA_CHECK=ON -DATTN_BUILD_TESTS=ON \
  -DATTN_BUILD_EXAMPLES=ON "${cuda_flags[@]}"
cmake --build "$build" -j"${ATTN_BUILD_JOBS:-2}"
# ctest runs two test programs at once, each with its own OpenMP team: with the default active
# waiting, idle threads spin on the cores the other program needs, and the attention tests ran 4x
# slower (40 s against 9 s for nn_test_attention* on 2 cores). Idle threads sleep instead.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
ctest --test-dir "$build" --output-on-failure -j"${ATTN_TEST_JOBS:-2}"
