#!/usr/bin/env bash
# The suite's stability check: scripts/test.sh N times in a row (default 5)
# on a fresh clone of this repository's HEAD while another build keeps both
# cores busy. The load is the clang-14 ASan + libFuzzer tree of
# scripts/fuzz.sh, configured and built from scratch with ccache off, over
# and over in a second clone, until the runs end. Stops at the first failed
# run. Bounded: at most N runs, each bounded by ctest's per-test timeouts.
#
#   bash scripts/test-under-load.sh [N]    # WORK_DIR, default /tmp/outbound-load
#
# Prints one line per run (its test.sh summary and the load average) and a
# verdict; exits non-zero if a run failed. Logs: $WORK_DIR/run<i>.log and
# $WORK_DIR/load.log. Needs the dependencies (scripts/install-deps.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
runs=${1:-5}
work=${WORK_DIR:-/tmp/outbound-load}

# The directory is removed and re-made: refuse anything that is not plainly
# this script's own (an empty value, /, the source tree, a home directory).
case "$work" in
  ""|/|/*/..|*/../*|"$HOME"|"$HOME/") echo "test-under-load: refusing WORK_DIR=$work" >&2; exit 2 ;;
esac
if [ "$(cd "$work" 2>/dev/null && pwd -P)" = "$(cd "$src" && pwd -P)" ]; then
  echo "test-under-load: WORK_DIR is the source tree" >&2; exit 2
fi
if [ -e "$work" ] && [ ! -e "$work/.outbound-load" ]; then
  echo "test-under-load: $work exists and was not made by this script; remove it or pick another WORK_DIR" >&2
  exit 2
fi
rm -rf "$work"
mkdir -p "$work" && touch "$work/.outbound-load"
git clone -q "$src" "$work/clone" || exit 1
git clone -q "$src" "$work/load" || exit 1
echo "test-under-load: $runs runs of scripts/test.sh on a fresh clone of" \
     "$(git -C "$work/clone" rev-parse --short HEAD); load: from-scratch clang" \
     "fuzz-tree builds (-j2, ccache off)"

stop="$work/stop"
load_loop() {
  cd "$work/load" || exit 1
  local n=0 s rc
  while [[ ! -e "$stop" ]]; do
    n=$((n + 1))
    s=$(date +%s)
    rm -rf build-fuzz
    CCACHE_DISABLE=1 cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_COMPILER=clang++-14 -DOUTBOUND_SANITIZE=ON \
      -DOUTBOUND_FUZZ_ENGINE=ON -DOUTBOUND_BUILD_TESTS=OFF \
      -DOUTBOUND_BUILD_BENCH=OFF \
      "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only" > /dev/null 2>&1
    CCACHE_DISABLE=1 cmake --build build-fuzz -j 2 --target outbound_fuzz \
      > /dev/null 2>&1
    rc=$?
    echo "load build $n rc=$rc $(( $(date +%s) - s )) s"
  done
}
export -f load_loop
export work stop
# Its own process group, so that the exit trap stops the compilers too.
setsid bash -c load_loop > "$work/load.log" 2>&1 &
load_pid=$!
trap 'touch "$stop"; kill -TERM -- -"$load_pid" 2>/dev/null' EXIT
sleep 20 # let the load start before the first run

failed=0
for i in $(seq 1 "$runs"); do
  s=$(date +%s)
  (cd "$work/clone" && bash scripts/test.sh) > "$work/run$i.log" 2>&1
  rc=$?
  echo "run $i rc=$rc $(( $(date +%s) - s )) s," \
       "load $(cut -d' ' -f1-3 /proc/loadavg): $(grep '^test.sh:' "$work/run$i.log")"
  if [[ $rc -ne 0 ]]; then
    failed=1
    break
  fi
done
if [[ $failed -eq 0 ]]; then
  echo "test-under-load: PASSED $runs/$runs"
else
  echo "test-under-load: FAILED at run $i (log: $work/run$i.log)"
fi
exit $failed
