#!/usr/bin/env bash
# Configures and builds the RelWithDebInfo tree in build/ (ccache is used
# automatically when installed). Extra arguments go to the cmake configure
# step, e.g. `bash scripts/build.sh -DOUTBOUND_BUILD_BENCH=OFF`.
# BUILD_DIR and JOBS override the tree (build) and the parallelism (2);
# TARGET builds one target only (e.g. TARGET=outbound_cli).
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=${BUILD_DIR:-build}
jobs=${JOBS:-2}

start=$(date +%s)
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
cmake --build "$build_dir" -j "$jobs" ${TARGET:+--target "$TARGET"}
echo "build: $build_dir built in $(( $(date +%s) - start )) s"
