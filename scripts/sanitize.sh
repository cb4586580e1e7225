#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds attn's tests with AddressSanitizer + UndefinedBehaviorSanitizer (ATTN_SANITIZE; Debug, so
# assertions stay on, with line tables so that ASan's reports keep their file:line stacks; the
# kernels of attn::compiled and the example programs at -O1, several times faster to run than -O0,
# the test programs at -O0, faster to compile: see tests/CMakeLists.txt) and runs them with ctest. Any ASan/UBSan report fails the test that produced it (UBSan does not
# recover, leaks are checked; the only suppressions are in scripts/lsan.supp).
#   scripts/sanitize.sh [build-dir]                      # every test area (default build-asan)
#   ATTN_SANITIZE_AREAS="core autograd io data" scripts/sanitize.sh   # only these tests/<area>
# ATTN_BUILD_JOBS / ATTN_TEST_JOBS set the parallelism (default 2). Uses $CXX if set, else Clang
# (scripts/install-deps.sh --sanitize installs it, with MPI and libomp, when missing): it compiles attn's templates about
# 1.8x faster than GCC here, and its UBSan checks more (function-pointer and vptr types).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${1:-build-asan}
start=$(date +%s)
scripts/install-deps.sh --mpi --sanitize  # whatever is missing, whichever compiler builds
if [ -z "${CXX:-}" ]; then
  CXX=$(command -v clang++ || command -v clang++-14)
  export CXX
fi

# ATTN_BLAS=none, ATTN_DNNL=off: the sanitizers cannot see inside BLIS, OpenBLAS or oneDNN, so this
# build keeps every GEMM in Eigen's (instrumented) product; scripts/test.sh runs the same tests
# through them.
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-g1 -O1" -DATTN_SANITIZE=ON -DATTN_WERROR=ON \
  -DATTN_BUILD_TESTS=ON -DATTN_BUILD_EXAMPLES=ON -DATTN_CUDA=OFF -DATTN_BLAS=none -DATTN_DNNL=off

# Sanitizers only see compiled test programs; the compile-fail, installed-consumer and
# separate-compilation tests run the compiler, not attn code, and are left to scripts/test.sh. So are
# the attention tests' repeats at lower kernel levels (their kernels' every level is covered here by
# backend_test_tile_gemm and backend_test_isa).
exclude='^(compile_fail|consumer|separate_compilation):|:all_at_isa_'
targets=()
filter=()
if [ -n "${ATTN_SANITIZE_AREAS:-}" ]; then
  regex=""
  for area in $ATTN_SANITIZE_AREAS; do
    [ -d "tests/$area" ] || { echo "sanitize: no directory tests/$area" >&2; exit 2; }
    if [ -f "tests/$area/CMakeLists.txt" ]; then
      # An area with its own CMakeLists (cuda, dist, examples): every target it defines, through
      # Ninja's per-directory target, and for the examples' tests the example programs they run.
      targets+=("tests/$area/all")
      [ "$area" = examples ] && targets+=(examples/all)
    fi
    case " core backend autograd nn optim io data metrics dist " in
      *" $area "*)  # the areas whose test_*.cpp tests/CMakeLists.txt builds as <area>_test_*
        for src in tests/"$area"/test_*.cpp; do
          [ -e "$src" ] && targets+=("${area}_$(basename "$src" .cpp)")
        done ;;
    esac
    regex+="${regex:+|}${area}_"
  done
  [ ${#targets[@]} -gt 0 ] || { echo "sanitize: no tests in areas: $ATTN_SANITIZE_AREAS" >&2; exit 2; }
  filter=(-R "^(${regex})")
  cmake --build "$build" -j"${ATTN_BUILD_JOBS:-2}" --target "${targets[@]}"
else
  cmake --build "$build" -j"${ATTN_BUILD_JOBS:-2}"
fi
built=$(date +%s)

# detect_leaks stays on; scripts/lsan.supp suppresses only leaks allocated inside libgomp.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:halt_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export LSAN_OPTIONS="suppressions=$root/scripts/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
# Two threads keep OpenMP regions parallel (so races in them are exercised) without
# oversubscribing a small CI machine that also runs ctest in parallel.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
# Idle OpenMP threads sleep rather than spin on the cores that the other test program needs
# (scripts/test.sh says more).
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
ctest --test-dir "$build" --output-on-failure -j"${ATTN_TEST_JOBS:-2}" -E "$exclude" -LE mpi "${filter[@]}"
# The MPI jobs (label mpi) run with every ASan and UBSan check except leak detection: Open MPI
# keeps allocations from its dlopen'ed plugins until exit, which LeakSanitizer reports from
# unnamed modules that no suppression can match.
ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0" \
  ctest --test-dir "$build" --output-on-failure -j"${ATTN_TEST_JOBS:-2}" -E "$exclude" -L mpi "${filter[@]}" --no-tests=ignore
end=$(date +%s)
echo "sanitize: build $((built - start)) s, tests $((end - built)) s, total $((end - start)) s"
