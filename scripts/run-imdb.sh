#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Sets up, builds and runs the main job: the IMDb attention classifier.
#   scripts/run-imdb.sh                 # the bundled 2,500-review sample, 8 heads (a few minutes)
#   scripts/run-imdb.sh --full [ARGS]   # the full train split from ../shared/data, if present
# Extra arguments go to the program (see `build/examples/imdb/imdb --help`). Each run replaces the
# last one in runs/imdb, unless --resume continues it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTN_BUILD_TESTS=OFF -DATTN_BUILD_EXAMPLES=ON -DATTN_CUDA=OFF > /dev/null
cmake --build build -j2 --target imdb
data=examples/imdb/sample/aclImdb
args=(--epochs 8)
if [ "${1:-}" = "--full" ]; then
  shift
  archive=../shared/data/aclImdb-train.tar.gz
  [ -f "$archive" ] || { echo "run-imdb: $archive not found" >&2; exit 1; }
  if [ ! -d build/data/aclImdb/train ]; then
    mkdir -p build/data && tar -xzf "$archive" -C build/data
  fi
  data=build/data/aclImdb
  args=()
fi
# The sample run's default of 8 epochs gives way to the user's --epochs.
case " $* " in
  *" --epochs "*) args=() ;;
esac
# runs/imdb is this script's own directory: a new run replaces the last one (--overwrite), unless
# the arguments continue it (--resume).
case " $* " in
  *" --resume "*) ;;
  *) args+=(--overwrite) ;;
esac
exec build/examples/imdb/imdb --data "$data" --out runs/imdb "${args[@]}" "$@"
