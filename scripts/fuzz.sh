#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds the libFuzzer targets in fuzz/ with clang (-fsanitize=fuzzer,address,undefined) and runs
# each for a bounded time, starting from its committed seed corpus fuzz/corpus/<name>/ (never
# modified: new inputs go to <build>/corpus/<name>/). Prints the inputs executed per target and
# exits non-zero when any target crashes, leaks, times out or hits a sanitizer report; the
# reproducer is left in <build>/artifacts/<name>/.
#   scripts/fuzz.sh [seconds-per-target] [target...]      # default: 60 s, all targets
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

status=0
summary=()
for t in "${targets[@]}"; do
  [ -d "fuzz/corpus/$t" ] || { echo "fuzz: no seed corpus fuzz/corpus/$t" >&2; exit 2; }
  work="$build/corpus/$t"
  artifacts="$build/artifacts/$t"
  log="$build/fuzz_$t.log"
  mkdir -p "$work" "$artifacts"
  dict=()
  case "$t" in
    imdb) dict=(-dict=fuzz/tokenizer.dict) ;;
    *) [ -f "fuzz/$t.dict" ] && dict=(-dict="fuzz/$t.dict") ;;
  esac
  echo "fuzz: $t for $seconds s"
  rc=0
  # -timeout: one input taking >10 s is a hang; -rss_limit_mb: more than 2 GB is a memory bug.
  "$build/fuzz_$t" "$work" "fuzz/corpus/$t" "${dict[@]}" -max_total_time="$seconds" -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$artifacts/" >"$log" 2>&1 || rc=$?
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
echo "fuzz: summary ($seconds s per target)"
printf '  %s\n' "${summary[@]}"
exit "$status"
