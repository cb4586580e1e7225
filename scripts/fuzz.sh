#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds the libFuzzer targets in fuzz/ with clang (-fsanitize=fuzzer,address,undefined) and runs
# each for a bounded time, starting from its committed seed corpus fuzz/corpus/<name>/ (never
# modified: new inputs go to <build>/corpus/<name>/). Prints the inputs executed per target and
# exits non-zero when any target crashes, leaks, times out or hits a sanitizer report; the
# reproducer is left in <build>/artifacts/<name>/.
#   scripts/fuzz.sh [seconds-per-target] [target...]      # default: 60 s, all targets, ATTN_FUZZ_JOBS (default nproc) at once
#   ATTN_FUZZ_BUILD=build-fuzz CXX=clang++-14 scripts/fuzz.sh 30 safetensors vocab
# Reproduce a crash:  <build>/fuzz_<name> <build>/artifacts/<name>/crash-...
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(safetensors clue tokenizer imdb vocab)
build=${ATTN_FUZZ_BUILD:-build-fuzz}

if [ -z "${CXX:-}" ]; then
  CXX=$(command -v clang++ || command -v clang++-14 || true)
  if [ -z "$CXX" ]; then
    scripts/install-deps.sh --fuzz
    CXX=$(command -v clang++ || command -v clang++-14)
  fi
fi
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S fuzz -B "$build" "${generator[@]}" -DCMAKE_CXX_COMPILER="$CXX" >/dev/null
cmake --build "$build" -j"${ATTN_BUILD_JOBS:-2}" --target "${targets[@]/#/fuzz_}"

# Each target runs for the same time; ATTN_FUZZ_JOBS of them (default: the core count) at once.
jobs=${ATTN_FUZZ_JOBS:-$(nproc)}
fuzz_one() {  # fuzz_one TARGET: runs it and writes its exit status to $build/fuzz_TARGET.rc
  local t=$1 work="$build/corpus/$1" artifacts="$build/artifacts/$1" log="$build/fuzz_$1.log" rc=0
  local dict=()
  mkdir -p "$work" "$artifacts"
  case "$t" in
    imdb) dict=(-dict=fuzz/tokenizer.dict) ;;
    *) [ -f "fuzz/$t.dict" ] && dict=(-dict="fuzz/$t.dict") ;;
  esac
  # -timeout: one input taking >10 s is a hang; -rss_limit_mb: more than 2 GB is a memory bug.
  "$build/fuzz_$t" "$work" "fuzz/corpus/$t" "${dict[@]}" -max_total_time="$seconds" -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$artifacts/" >"$log" 2>&1 || rc=$?
  echo "$rc" >"$build/fuzz_$t.rc"
}
for t in "${targets[@]}"; do
  [ -d "fuzz/corpus/$t" ] || { echo "fuzz: no seed corpus fuzz/corpus/$t" >&2; exit 2; }
done
rm -f "$build"/fuzz_*.rc
running=0
for t in "${targets[@]}"; do
  echo "fuzz: $t for $seconds s"
  fuzz_one "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
done
wait

status=0
summary=()
for t in "${targets[@]}"; do
  artifacts="$build/artifacts/$t"
  log="$build/fuzz_$t.log"
  rc=$(cat "$build/fuzz_$t.rc" 2>/dev/null || echo 99)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -n 1 | cut -d' ' -f2 || true)
  if [ "$rc" -ne 0 ]; then
    status=1
    tail -n 60 "$log"
    summary+=("$(printf '%-12s %12s execs  cov %6s  FAILED (exit %d, see %s)' "$t" "${execs:-?}" "${cov:-?}" "$rc" "$artifacts")")
  else
    summary+=("$(printf '%-12s %12s execs  cov %6s  ok' "$t" "${execs:-?}" "${cov:-?}")")
  fi
done
echo "fuzz: summary ($seconds s per target, $jobs at a time)"
printf '  %s\n' "${summary[@]}"
exit "$status"
