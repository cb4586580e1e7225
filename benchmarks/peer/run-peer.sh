#!/bin/sh
# SPDX-License-Identifier: MIT
# Runs the PyTorch CPU peer (peer.py) with its best settings: OMP_NUM_THREADS
# and torch threads = 2 (or --threads N), optionally jemalloc preloaded.
# Usage: run-peer.sh [--jemalloc] [--passive] [peer.py args...]
#        e.g. run-peer.sh --jemalloc --all
#   --passive  OMP_WAIT_POLICY=PASSIVE: idle OpenMP threads sleep instead of
#              spinning.  Use it on a busy machine, where spinning threads of a
#              2-thread pool starve the working one (seen: 2-100x slower steps).
#        PYTHON=/usr/bin/python3 run-peer.sh --all    (Debian's python3-torch 1.13)
set -eu

JEMALLOC_LIB=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2
here=$(cd "$(dirname "$0")" && pwd)
threads=2
use_jemalloc=0

# Pick out our own flag and --threads (kept for peer.py too); pass the rest on.
prev=
for a in "$@"; do
  case "$prev" in --threads) threads=$a ;; esac
  case "$a" in --threads=*) threads=${a#--threads=} ;; esac
  prev=$a
done
use_passive=0
while [ $# -gt 0 ]; do
  case "$1" in
    --jemalloc) use_jemalloc=1; shift ;;
    --passive) use_passive=1; shift ;;
    *) break ;;
  esac
done
if [ "$use_passive" = 1 ]; then
  export OMP_WAIT_POLICY=PASSIVE
fi

export OMP_NUM_THREADS="$threads"
export MKL_NUM_THREADS="$threads"

if [ "$use_jemalloc" = 1 ]; then
  if [ -r "$JEMALLOC_LIB" ]; then
    export LD_PRELOAD="$JEMALLOC_LIB${LD_PRELOAD:+:$LD_PRELOAD}"
    # Keep freed pages: glibc/jemalloc returning attention-score buffers to the
    # kernel makes every step fault and re-zero them.
    export MALLOC_CONF="dirty_decay_ms:-1,muzzy_decay_ms:-1"
  else
    echo "run-peer.sh: $JEMALLOC_LIB not found (apt install libjemalloc2); running with glibc malloc" >&2
  fi
fi

exec "${PYTHON:-python3}" "$here/peer.py" --threads "$threads" "$@"
