#!/bin/sh
# SPDX-License-Identifier: MIT
# Compares data-parallel training on 2 ranks x 1 thread with 1 rank x 2 threads (and 1 x 1), same
# global batch, interleaved ROUNDS times; prints each run's JSON line and the ratios of the medians.
#   benchmarks/dist/run.sh build-bench-dist/bench_dist_data_parallel [--batch 32 --seq 256 ...]
# --bind-to none: Open MPI would otherwise pin a 1-rank job to one core, starving its 2 threads.
set -eu
BIN=${1:?usage: run.sh path/to/bench_dist_data_parallel [bench flags]}
shift
ROUNDS=${ROUNDS:-3}
MPIRUN="mpirun --oversubscribe --allow-run-as-root --bind-to none"
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
r=0
while [ "$r" -lt "$ROUNDS" ]; do
  for cfg in "2 1" "1 2" "1 1"; do
    set -- $cfg "$@"
    np=$1 th=$2
    shift 2
    line=$(OMP_NUM_THREADS=$th OMP_WAIT_POLICY=PASSIVE $MPIRUN -np "$np" "$BIN" "$@")
    echo "$line"
    echo "$np $th $line" >>"$OUT"
  done
  r=$((r + 1))
done
python3 - "$OUT" <<'PY'
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    np_, th, js = line.split(" ", 2)
    runs.setdefault((int(np_), int(th)), []).append(json.loads(js))
med = {k: statistics.median(r["samples_per_s"] for r in v) for k, v in runs.items()}
for k in sorted(med):
    v = runs[k]
    print(f"{k[0]} rank(s) x {k[1]} thread(s): {med[k]:8.2f} samples/s  "
          f"(step {statistics.median(r['step_ms'] for r in v):.1f} ms, all-reduce exposed after backward "
          f"{statistics.median(r['allreduce_ms_exposed'] for r in v):.2f} ms, "
          f"{v[0]['buckets_started_during_backward']}/{v[0]['buckets']} buckets started during backward, "
          f"{v[0]['allreduce_MB_per_step']:.2f} MB/step)")
if (2, 1) in med and (1, 2) in med:
    print(f"ratio 2x1 / 1x2: {med[(2, 1)] / med[(1, 2)]:.3f}")
if (2, 1) in med and (1, 1) in med:
    print(f"speed-up 2x1 over 1x1: {med[(2, 1)] / med[(1, 1)]:.3f}; 1x2 over 1x1: {med[(1, 2)] / med[(1, 1)]:.3f}")
PY
