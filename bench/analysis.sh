#!/usr/bin/env bash
# The analysis targets of issues 11 and 15 in one command (~5 min on 2 cores):
#   bench/analysis.sh    # builds Release into $BUILD (default /tmp/build-bench), records the
#                        # PyTorch MLP (grad and no-grad) and the malloc storm with gradprof and
#                        # heaptrack, times report / heaptrack_print / diff (interleaved, medians
#                        # of $RUNS, default 5) and writes section 2b of bench/RESULTS.md and
#                        # bench/results_analysis.json. bench/run.sh runs it too.
# Environment: BUILD, RUNS, RECORD_GP (the gradprof that records; default $BUILD's), KEEP_TRACES.
# Needs heaptrack, heaptrack_print, /usr/bin/time and /usr/bin/python3 with torch.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export BUILD="${BUILD:-/tmp/build-bench}"
cmake -S "$root" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DGRADPROF_BUILD_TESTS=OFF >/dev/null
cmake --build "$BUILD" -j"$(nproc)" >/dev/null
exec python3 "$root/bench/analysis_bench.py"
