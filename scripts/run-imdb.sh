#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Sets up, builds and runs the main job: the IMDb attention classifier.
#   scripts/run-imdb.sh                 # the bundled 2,500-review sample, 8 heads (a few minutes)
#   scripts/run-imdb.sh --full [ARGS]   # the full train split from ../shared/data, if present
# Extra arguments go to the program (see `build/examples/imdb/imdb --help`); --epochs, --data and
# --out replace the script's own. Each run replaces the last one in runs/imdb, unless --resume
# continues it.
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
  # Extracted into a scratch directory and moved into place whole, so that an interrupted
  # extraction is redone rather than trained on.
  if [ ! -d build/data/aclImdb/train ]; then
    mkdir -p build/data
    rm -rf build/data/.aclImdb.partial
    mkdir build/data/.aclImdb.partial
    tar -xzf "$archive" -C build/data/.aclImdb.partial
    [ -d build/data/.aclImdb.partial/aclImdb/train ] || { echo "run-imdb: $archive holds no aclImdb/train" >&2; exit 1; }
    # Beside what build/data/aclImdb may already hold (a test/ split put there), train/ last.
    mkdir -p build/data/aclImdb
    for e in build/data/.aclImdb.partial/aclImdb/*; do
      n=$(basename "$e")
      [ "$n" = train ] || [ -e "build/data/aclImdb/$n" ] || mv "$e" "build/data/aclImdb/$n"
    done
    mv build/data/.aclImdb.partial/aclImdb/train build/data/aclImdb/train
    rm -rf build/data/.aclImdb.partial
  fi
  data=build/data/aclImdb
  args=()
fi
# The user's --epochs, --data and --out (or --name=value) replace the script's own; runs/imdb is
# this script's own directory: a new run replaces the last one (--overwrite), unless the arguments
# continue it (--resume) or name another directory.
own_out=1 own_data=1 resume=0
for a in "$@"; do
  case "$a" in
    --epochs|--epochs=*) args=() ;;
    --out|--out=*) own_out=0 ;;
    --data|--data=*) own_data=0 ;;
    --resume) resume=1 ;;
  esac
done
[ "$own_data" = 1 ] && args=(--data "$data" "${args[@]}")
if [ "$own_out" = 1 ]; then
  args+=(--out runs/imdb)
  [ "$resume" = 1 ] || args+=(--overwrite)
fi
exec build/examples/imdb/imdb "${args[@]}" "$@"
