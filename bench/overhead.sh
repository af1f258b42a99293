#!/usr/bin/env bash
# Superseded by bench/run.sh (all of issue 7, writes bench/RESULTS.md); kept as a quick check.
# Profiler overhead on the malloc-heavy program (bench/malloc_bench.c: 2 threads, small
# allocations from stacks 4-16 frames deep) and on examples/mlp_infer: medians of N runs of
# unprofiled, gradprof with stacks, gradprof without stacks and heaptrack, measured side by side.
#   bench/overhead.sh [runs (default 5)] [allocations per thread (default 2000000)]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
runs="${1:-5}"; n="${2:-2000000}"
build="$root/build-release"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DGRADPROF_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" -j"$(nproc)" --target malloc_bench mlp_infer prof_preload >/dev/null
preload="$build/libprof/libprof_preload.so"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
wall() { /usr/bin/time -f %e "$@" 2>&1 >/dev/null | tail -1; rm -rf "${work:?}"/*; }

# The configurations, interleaved run by run so that machine noise hits them alike.
labels=("unprofiled" "gradprof (stacks, depth 32)" "gradprof (no stacks)")
prefixes=("" "env LD_PRELOAD=$preload GRADPROF_OUTPUT=$work/t.%p"
          "env LD_PRELOAD=$preload GRADPROF_STACK_DEPTH=0 GRADPROF_OUTPUT=$work/t.%p")
if command -v heaptrack >/dev/null; then
    labels+=("heaptrack"); prefixes+=("heaptrack -o $work/h")
fi

for prog in malloc mlp; do
    if [ "$prog" = malloc ]; then
        cmd="$build/bench/malloc_bench $n 2"
        echo "malloc_bench: 2 threads x $n allocations, median of $runs interleaved runs"
    else
        cmd="$build/examples/mlp_infer --iters 50"
        echo "mlp_infer --iters 50 (8 layers, width 1024, batch 64), median of $runs interleaved runs"
    fi
    declare -A times=()
    for c in "${!labels[@]}"; do wall ${prefixes[$c]} $cmd >/dev/null; done # warm-up
    for _ in $(seq "$runs"); do
        for c in "${!labels[@]}"; do times[$c]+="$(wall ${prefixes[$c]} $cmd) "; done
    done
    base=$(echo "${times[0]}" | tr ' ' '\n' | grep . | median)
    for c in "${!labels[@]}"; do
        t=$(echo "${times[$c]}" | tr ' ' '\n' | grep . | median)
        awk -v n="${labels[$c]}" -v b="$base" -v t="$t" \
            'BEGIN { printf "  %-28s %8.3f s  %6.2fx\n", n, t, t / b }'
    done
    unset times
done

env LD_PRELOAD="$preload" GRADPROF_OUTPUT="$work/size.gptrace" "$build/bench/malloc_bench" "$n" 2 >/dev/null
bytes=$(stat -c %s "$work/size.gptrace")
awk -v b="$bytes" -v n="$n" 'BEGIN { printf "trace: %d bytes for %d allocation+free pairs = %.1f bytes per pair (stack table included)\n", b, 2 * n, b / (2 * n) }'
