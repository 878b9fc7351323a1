#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run):
#   1. install the dependencies (skipped when present),
#   2. build the RelWithDebInfo tree build/ and run ctest there,
#   3. build build-asan/ with clang-14, ASan + UBSan (benchmarks off) and run
#      ctest there with the suppressions of tests/sanitizer/.
# Prints one summary line; exits non-zero on any failure.
# JOBS overrides the parallelism (2); SKIP_ASAN=1 skips step 3.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
jobs=${JOBS:-2}
t0=$(date +%s)
status=()
failed=0

step() { # name, command...
  local name=$1; shift
  local s; s=$(date +%s)
  echo "==> $name"
  if "$@"; then
    status+=("$name ok ($(( $(date +%s) - s )) s)")
  else
    status+=("$name FAILED ($(( $(date +%s) - s )) s)")
    failed=1
    return 1
  fi
}

summary() {
  echo
  local IFS=';'
  local verdict=PASSED
  [[ $failed -eq 0 ]] || verdict=FAILED
  echo "test.sh: $verdict in $(( $(date +%s) - t0 )) s: ${status[*]}"
}
trap summary EXIT

# Unit and install tests in parallel; the integration tests one at a time,
# because several of them measure real time (timeouts, deadlines, trickled
# bytes) and a second busy core skews them.
run_ctest() { # build dir
  local rc=0
  ctest --test-dir "$1" --output-on-failure -j "$jobs" -LE integration || rc=1
  ctest --test-dir "$1" --output-on-failure -L integration || rc=1
  return $rc
}

step "install-deps" bash scripts/install-deps.sh || exit 1

step "build" env JOBS="$jobs" bash scripts/build.sh || exit 1
step "ctest" run_ctest build || true

if [[ "${SKIP_ASAN:-0}" != 1 ]]; then
  # UBSan stays recoverable so that the suppressions apply; halt_on_error
  # makes every report that is not suppressed fatal.
  export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:abort_on_error=0:suppressions=$root/tests/sanitizer/asan.supp"
  export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$root/tests/sanitizer/ubsan.supp"
  export LSAN_OPTIONS="suppressions=$root/tests/sanitizer/lsan.supp"
  if step "build-asan" env JOBS="$jobs" BUILD_DIR=build-asan \
       CXX=clang++-14 CC=clang-14 bash scripts/build.sh \
       -DCMAKE_CXX_COMPILER=clang++-14 -DOUTBOUND_SANITIZE=ON \
       -DOUTBOUND_BUILD_BENCH=OFF \
       "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only"; then
    step "ctest-asan" run_ctest build-asan || true
  fi
fi

exit $failed
