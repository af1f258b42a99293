#!/bin/sh
# Builds the libFuzzer harnesses (clang, ASan + UBSan, libraries instrumented for coverage) and
# runs each for a bounded time over a scratch copy of its seed corpus. Fails on any crash, leak,
# timeout, out-of-memory or single allocation over 128 MB (from an input of at most 64 KB: an
# allocation sized by an unchecked field); prints the executions per harness.
#
#   tests/fuzz/run.sh [SECONDS_PER_HARNESS] [BUILD_DIR] [HARNESS...]
#   e.g. tests/fuzz/run.sh 60 /tmp/build-fuzz          (all four harnesses, 60 s each)
#        tests/fuzz/run.sh 300 /tmp/build-fuzz trace   (fuzz_trace only)
#
# Crash inputs are kept in BUILD_DIR/fuzz-artifacts/; reproduce one with
#   BUILD_DIR/tests/fuzz/fuzz_<target> BUILD_DIR/fuzz-artifacts/<file>
set -eu
secs=${1:-60}
build=${2:-/tmp/build-fuzz}
[ $# -ge 2 ] && shift 2 || shift $#
targets=${*:-"trace safetensors rules cli"}
src=$(cd "$(dirname "$0")/../.." && pwd)
cc=${CC:-clang}
command -v "$cc" >/dev/null || { echo "run.sh: $cc not found (install clang)" >&2; exit 2; }

cmake -S "$src" -B "$build" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DGRADPROF_FUZZ=ON -DGRADPROF_SANITIZE=ON -DGRADPROF_CUPTI=OFF \
    -DGRADPROF_BUILD_BENCH=OFF \
    -DCMAKE_C_FLAGS="-fsanitize=fuzzer-no-link" >"$build.cmake.log" 2>&1 ||
    { cat "$build.cmake.log" >&2; exit 2; }
cmake --build "$build" --target fuzzers -j "$(nproc)" >"$build.build.log" 2>&1 ||
    { tail -40 "$build.build.log" >&2; exit 2; }

art=$build/fuzz-artifacts
mkdir -p "$art"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
for t in $targets; do
    bin=$build/tests/fuzz/fuzz_$t
    corpus=$build/fuzz-corpus/$t
    mkdir -p "$corpus"
    cp "$src/tests/fuzz/corpus/$t"/* "$corpus"/ 2>/dev/null || true
    log=$build/fuzz-$t.log
    if "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=128 -max_len=65536 \
        -print_final_stats=1 -artifact_prefix="$art/$t-" "$corpus" >"$log" 2>&1; then
        res=ok
    else
        res=FAILED
        status=1
    fi
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
    printf 'fuzz_%-12s %s  %s execs in %ss  %s\n' "$t" "$res" "${execs:-?}" "$secs" "$cov"
    [ "$res" = ok ] || grep -A30 -m1 -E 'ERROR|runtime error|SUMMARY' "$log" >&2 || tail -30 "$log" >&2
done
exit $status
