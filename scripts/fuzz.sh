#!/usr/bin/env bash
# Fuzzes every parser harness of fuzz/ with libFuzzer (clang-14,
# libfuzzer-14-dev) under ASan + UBSan:
#   1. configures and builds build-fuzz/ (only the libraries and harnesses:
#      tests and benchmarks off),
#   2. runs each harness for SECONDS (default 60) with -rss_limit_mb=512,
#      starting from its checked-in seed corpus fuzz/corpus/<target>/ (new
#      inputs go to build-fuzz/corpus/<target>/, findings to
#      build-fuzz/artifacts/<target>/); with RUNS=N each harness stops
#      after N executions instead, SECONDS then being only its time cap,
#   3. prints one line per target: executions, exec/s, crashes (and other
#      findings: sanitizer reports, leaks, timeouts, OOMs), peak RSS.
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]. JOBS sets the build
# parallelism (2), PARALLEL how many harnesses run at once (1), RUNS an
# execution count per harness (e.g. RUNS=10000000 bash scripts/fuzz.sh 7200),
# EXTRA_ASAN_OPTIONS more ASan options (e.g. quarantine_size_mb=8: the
# harnesses that build a hub state per input run ~2.4x faster with a smaller
# use-after-free quarantine than ASan's default 256 MB).
# Exits non-zero if any harness found anything.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
seconds=${1:-60}
shift || true
jobs=${JOBS:-2}
parallel=${PARALLEL:-1}
runs=${RUNS:-}
bdir=build-fuzz

cmake -S . -B "$bdir" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER=clang++-14 -DOUTBOUND_SANITIZE=ON \
  -DOUTBOUND_FUZZ_ENGINE=ON -DOUTBOUND_BUILD_TESTS=OFF \
  -DOUTBOUND_BUILD_BENCH=OFF \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only" >/dev/null || exit 1
cmake --build "$bdir" -j "$jobs" --target outbound_fuzz || exit 1

if [[ $# -gt 0 ]]; then
  targets=("$@")
else
  targets=(http_response retry_after ws_upgrade ws_frames feed_frames
           replay_page leader_hint oracle_body config_json hub_request
           hub_subscribe hub_admin)
fi

export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:suppressions=$root/tests/sanitizer/asan.supp${EXTRA_ASAN_OPTIONS:+:$EXTRA_ASAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$root/tests/sanitizer/ubsan.supp"
export LSAN_OPTIONS="suppressions=$root/tests/sanitizer/lsan.supp"

run_one() { # target
  local t=$1
  local work=$bdir/corpus/$t art=$bdir/artifacts/$t log=$bdir/logs/$t.log
  mkdir -p "$work" "$art" "$(dirname "$log")"
  local dict=()
  [[ -f fuzz/dict/$t.dict ]] && dict=(-dict=fuzz/dict/$t.dict)
  local count=()
  [[ -n $runs ]] && count=(-runs="$runs")
  "$bdir/fuzz/fuzz_$t" -max_total_time="$seconds" "${count[@]}" -rss_limit_mb=512 \
    -timeout=10 -print_final_stats=1 -artifact_prefix="$art/" "${dict[@]}" \
    "$work" "fuzz/corpus/$t" >"$log" 2>&1
  echo $? >"$log.rc"
}

# A pool of PARALLEL harnesses: the next one starts when any one ends.
for t in "${targets[@]}"; do
  while (( $(jobs -rp | wc -l) >= parallel )); do wait -n; done
  run_one "$t" &
done
wait

failed=0
printf '%-14s %12s %8s %8s %10s %5s\n' target executions exec/s findings peak_rss_mb rc
for t in "${targets[@]}"; do
  log=$bdir/logs/$t.log
  stat() { awk -v k="stat::$1:" '$1 == k { print $2 }' "$log" | tail -1; }
  execs=$(stat number_of_executed_units)
  rate=$(stat average_exec_per_sec)
  rss=$(stat peak_rss_mb)
  findings=$(find "$bdir/artifacts/$t" -type f | wc -l)
  rc=$(cat "$log.rc")
  printf '%-14s %12s %8s %8s %10s %5s\n' "$t" "${execs:-?}" "${rate:-?}" \
    "$findings" "${rss:-?}" "$rc"
  if [[ $rc -ne 0 || $findings -ne 0 ]]; then
    failed=1
    echo "  see $log and $bdir/artifacts/$t/"
  fi
done
echo "fuzz.sh: ${#targets[@]} targets, ${runs:+$runs runs or }${seconds} s each: $([[ $failed -eq 0 ]] && echo PASSED || echo FINDINGS)"
exit $failed
