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

# clang, its runtime libraries (libFuzzer) and libomp: whatever of them is missing.
scripts/install-deps.sh --fuzz
# libFuzzer is clang's: a CXX that is not clang (CXX=g++ in the environment) is set aside.
if [ -n "${CXX:-}" ] && ! "$CXX" --version 2>/dev/null | grep -qi clang; then
  echo "fuzz: CXX=$CXX is not clang; the fuzz targets need clang's libFuzzer, so clang++ builds them" >&2
  CXX=
fi
if [ -z "${CXX:-}" ]; then
  CXX=$(command -v clang++ || command -v clang++-14)
fi
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S fuzz -B "$build" "${generator[@]}" -DCMAKE_CXX_COMPILER="$CXX" >/dev/null
cmake --build "$build" -j"${ATTN_BUILD_JOBS:-2}" --target "${targets[@]/#/fuzz_}"

# Each target fuzzes for the same time, ATTN_FUZZ_JOBS (default: the core count) at once. When the
# targets do not divide evenly among the jobs, each target's time is split into two sessions, the
# second resuming from the corpus the first grew, so that no core idles in a last, partial round
# (5 targets on 2 cores: 150 s instead of 180 s, each target still fuzzed for its full time).
jobs=${ATTN_FUZZ_JOBS:-$(nproc)}
sessions=1
if [ "$jobs" -lt "${#targets[@]}" ] && [ $(( ${#targets[@]} % jobs )) -ne 0 ] && [ "$seconds" -ge 2 ]; then
  sessions=2
fi
fuzz_one() {  # fuzz_one TARGET SESSION SECONDS: writes its exit status to $build/fuzz_TARGET.SESSION.rc
  local t=$1 s=$2 secs=$3 work="$build/corpus/$1" artifacts="$build/artifacts/$1" rc=0
  local log="$build/fuzz_$t.$s.log" dict=()
  # A target's sessions run one after the other (only an earlier target's early crash could start
  # the next session before its previous one ends).
  while [ "$s" -gt 1 ] && [ ! -f "$build/fuzz_$t.$((s - 1)).rc" ]; do sleep 1; done
  mkdir -p "$work" "$artifacts"
  case "$t" in
    imdb) dict=(-dict=fuzz/tokenizer.dict) ;;
    *) [ -f "fuzz/$t.dict" ] && dict=(-dict="fuzz/$t.dict") ;;
  esac
  # -timeout: one input taking >10 s is a hang; -rss_limit_mb: more than 2 GB is a memory bug.
  "$build/fuzz_$t" "$work" "fuzz/corpus/$t" "${dict[@]}" -max_total_time="$secs" -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$artifacts/" >"$log" 2>&1 || rc=$?
  echo "$rc" >"$build/fuzz_$t.$s.rc"
}
for t in "${targets[@]}"; do
  [ -d "fuzz/corpus/$t" ] || { echo "fuzz: no seed corpus fuzz/corpus/$t" >&2; exit 2; }
done
rm -f "$build"/fuzz_*.rc "$build"/fuzz_*.log
first=$(( seconds / sessions ))
running=0
for s in $(seq 1 "$sessions"); do
  secs=$first
  [ "$s" -eq "$sessions" ] && secs=$(( seconds - first * (sessions - 1) ))
  for t in "${targets[@]}"; do
    echo "fuzz: $t for $secs s (session $s of $sessions)"
    fuzz_one "$t" "$s" "$secs" &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then
      wait -n || true
      running=$((running - 1))
    fi
  done
done
wait

status=0
summary=()
for t in "${targets[@]}"; do
  artifacts="$build/artifacts/$t"
  rc=0 execs=0 cov=""
  for s in $(seq 1 "$sessions"); do
    log="$build/fuzz_$t.$s.log"
    r=$(cat "$build/fuzz_$t.$s.rc" 2>/dev/null || echo 99)
    e=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" 2>/dev/null | tail -n 1)
    execs=$(( execs + ${e:-0} ))
    c=$(grep -oE 'cov: [0-9]+' "$log" 2>/dev/null | tail -n 1 | cut -d' ' -f2 || true)
    [ -n "$c" ] && cov=$c
    if [ "$r" -ne 0 ] && [ "$rc" -eq 0 ]; then
      rc=$r
      tail -n 60 "$log"
    fi
  done
  if [ "$rc" -ne 0 ]; then
    status=1
    summary+=("$(printf '%-12s %12s execs  cov %6s  FAILED (exit %d, see %s)' "$t" "$execs" "${cov:-?}" "$rc" "$artifacts")")
  else
    summary+=("$(printf '%-12s %12s execs  cov %6s  ok' "$t" "$execs" "${cov:-?}")")
  fi
done
echo "fuzz: summary ($seconds s per target in $sessions session(s), $jobs at a time)"
printf '  %s\n' "${summary[@]}"
exit "$status"
