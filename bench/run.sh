#!/usr/bin/env bash
# The benchmarks of issue 7, in one command:
#   bench/run.sh            # builds Release into $BUILD (default /tmp/build-bench), runs every
#                           # benchmark (~15 min on 2 cores), writes bench/RESULTS.md, results.json
# Environment: BUILD=dir, RUNS=N (rounds after the warm-up, default 5, at least 5 for the record),
# SECTIONS=issue15 (only the issue-15 table: storm and PyTorch overhead, report/diff against
# heaptrack_print, the 100M-event report, perf of the misses; ~15 min with RUNS=3), SMOKE=1.
# Needs cmake, a C compiler, python3 (standard library); uses heaptrack, heaptrack_print,
# valgrind, perf and /usr/bin/python3 with torch when present, and says "not available" otherwise.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export BUILD="${BUILD:-/tmp/build-bench}"
cmake -S "$root" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DGRADPROF_BUILD_TESTS=OFF >/dev/null
cmake --build "$BUILD" -j"$(nproc)" >/dev/null
exec python3 "$root/bench/harness.py"
