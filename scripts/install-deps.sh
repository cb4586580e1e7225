#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs attn's build and test dependencies from Debian 12 packages, only those missing.
# Usage: scripts/install-deps.sh [--mpi] [--sanitize] [--fuzz] [--bench]   (run as root, or with sudo available)
#   --sanitize, --fuzz: Clang with its sanitizer runtimes and OpenMP (scripts/sanitize.sh, scripts/fuzz.sh)
#   --bench: the libraries `bench --ceiling` compares (OpenBLAS; oneDNN is a default package: the FP32 GEMM)
set -euo pipefail
pkgs=(build-essential cmake ninja-build libeigen3-dev libfmt-dev catch2 libcli11-dev nlohmann-json3-dev liblinear-dev libblis-openmp-dev libdnnl2 pkgconf)
for a in "$@"; do
  case "$a" in
    --mpi) pkgs+=(libopenmpi-dev openmpi-bin) ;;
    --sanitize | --fuzz) pkgs+=(clang libclang-rt-dev libomp-dev) ;;
    --bench) pkgs+=(libbenchmark-dev libjemalloc2 libopenblas0-openmp) ;;
    *) echo "install-deps.sh: unknown option '$a' (known: --mpi --sanitize --fuzz --bench)" >&2; exit 2 ;;
  esac
done
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
