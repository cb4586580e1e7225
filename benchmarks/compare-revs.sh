#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Compares attn's speed at two git revisions on this machine: builds `bench` at each (Release, in
# temporary worktrees), then runs every case interleaved, A then B, for --runs rounds (default 3),
# each run a fresh process, and prints the median samples/s of each side and the ratio B/A.
#   benchmarks/compare-revs.sh REV_A REV_B [--runs N] [--iters N] [--cases "R1-h1 R1-h8 ..."]
#   benchmarks/compare-revs.sh 682d128 4c82096 --runs 3
#   ATTN_COMPARE_CMAKE_ARGS="-DATTN_NATIVE=OFF" ATTN_COMPARE_DIR=build-compare-portable benchmarks/compare-revs.sh A B
#     (extra CMake options for both builds; a build directory of their own)
# A quiet machine is needed: on 2 cores another build running alongside makes the numbers noise.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: $0 REV_A REV_B [--runs N] [--iters N] [--cases \"...\"]" >&2; exit 2; }
rev_a=$1 rev_b=$2
shift 2
runs=3 iters=20
cases="R1-h1 R1-h8 R2-h4 R2-h8 R3-T512 R3-T1024 R3-T2048 R4-b1 R4-b64"
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --cases) cases=$2; shift 2 ;;
    *) echo "compare-revs: unknown argument $1" >&2; exit 2 ;;
  esac
done
work=${ATTN_COMPARE_DIR:-build-compare}
mkdir -p "$work"
build_rev() {  # build_rev REV DIR: bench at REV, built in DIR/src (a detached worktree) and DIR/build
  local rev=$1 dir=$2
  if [ ! -d "$dir/src" ]; then
    git worktree add --detach "$dir/src" "$rev" >/dev/null
  else
    git -C "$dir/src" checkout --detach -q "$rev"
  fi
  cmake -S "$dir/src" -B "$dir/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTN_BUILD_TESTS=OFF -DATTN_BUILD_EXAMPLES=OFF \
    -DATTN_BUILD_BENCHMARKS=ON -DATTN_CUDA=OFF ${ATTN_COMPARE_CMAKE_ARGS:-} >/dev/null
  cmake --build "$dir/build" -j"${ATTN_BUILD_JOBS:-2}" --target bench >/dev/null
}
build_rev "$rev_a" "$work/a"
build_rev "$rev_b" "$work/b"
a_bin="$work/a/build/benchmarks/bench" b_bin="$work/b/build/benchmarks/bench"
sps() { sed -n 's/.*"samples_per_s":\([0-9.eE+-]*\).*/\1/p'; }
median() { sort -g | awk '{v[NR] = $1} END {if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores; A = $rev_a ($(git rev-parse --short "$rev_a")), B = $rev_b ($(git rev-parse --short "$rev_b"))"
printf '%-10s %14s %14s %8s   %s\n' case "A samples/s" "B samples/s" "B/A" "runs (A | B)"
for c in $cases; do
  a_vals=() b_vals=()
  for _ in $(seq 1 "$runs"); do
    a_vals+=("$("$a_bin" --case "$c" --iters "$iters" | sps)")
    b_vals+=("$("$b_bin" --case "$c" --iters "$iters" | sps)")
  done
  a_med=$(printf '%s\n' "${a_vals[@]}" | median)
  b_med=$(printf '%s\n' "${b_vals[@]}" | median)
  printf '%-10s %14.1f %14.1f %8.3f   %s | %s\n' "$c" "$a_med" "$b_med" "$(awk -v a="$a_med" -v b="$b_med" 'BEGIN {print b / a}')" \
    "${a_vals[*]}" "${b_vals[*]}"
done
