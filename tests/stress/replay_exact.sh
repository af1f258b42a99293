#!/bin/sh
# Exact replay under load (ctest: test_replay_exact, label `stress`): stress_crossfree runs under
# `gradprof run` (the preload) with many more threads than cores, and `gradprof report --format
# json` of each trace must count exactly what the program did:
#   alloc_count   = THREADS * ALLOCS + the C library's own allocations
#   free_count    = THREADS * ALLOCS + the C library's own frees
#   unknown_frees = 0
#   leaked_count  = the C library's own blocks live at exit (no false leak)
# The C library's share (per-thread TLS vectors, some kept by its stack cache at exit) is taken
# from a first run with no allocations in the workers, and must itself replay cleanly. A reader
# that merges threads out of time order pairs a free with the wrong allocation of its address,
# which shows as unknown frees, false leaks and too few frees.
#
#   replay_exact.sh GRADPROF PRELOAD_LIB STRESS_CROSSFREE
#
# Environment: GP_CROSSFREE_THREADS (default 64), GP_CROSSFREE_ALLOCS (allocations per thread,
# default 30000: about 3 s a run on 2 cores), GP_CROSSFREE_RUNS (default 10). E.g. a bigger run:
#   GP_CROSSFREE_ALLOCS=200000 GP_CROSSFREE_RUNS=20 ctest -R test_replay_exact --test-dir BUILD -V
# Prints one line per run; checks every run and exits 1 if any was not exact.
set -u
abs() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
gradprof=$(abs "$1") preload=$(abs "$2") prog=$(abs "$3")
threads=${GP_CROSSFREE_THREADS:-64}
allocs=${GP_CROSSFREE_ALLOCS:-30000}
runs=${GP_CROSSFREE_RUNS:-10}
work=$(mktemp -d "${TMPDIR:-/tmp}/gpexact.XXXXXX")
trap 'rm -rf "$work"' EXIT
export GRADPROF_PRELOAD="$preload"

# top-level JSON field NAME of the report in FILE (the report's top level is indented by 2)
field() { sed -n "s/^  \"$1\": \([0-9][0-9]*\),\{0,1\}\$/\1/p" "$2"; }

# record N: runs the program with N allocations per thread into $work/t.gptrace, reports it into
# $work/r.json and sets a, f, l, u (alloc, free, leaked counts and unknown frees). 0 or 1.
record() {
    rm -f "$work/t.gptrace" "$work/r.json"
    out=$(timeout 300 "$gradprof" run -o "$work/t.gptrace" -- "$prog" "$threads" "$1" 2>"$work/err")
    rc=$?
    want="threads $threads allocs $((threads * $1)) frees $((threads * $1))"
    if [ $rc -ne 0 ] || [ "$out" != "$want" ]; then
        echo "FAIL: the program exited $rc with '$out' (want '$want'): $(cat "$work/err")"
        return 1
    fi
    if ! "$gradprof" report --format json -o "$work/r.json" "$work/t.gptrace" 2>"$work/err"; then
        echo "FAIL: gradprof report: $(cat "$work/err")"
        return 1
    fi
    a=$(field alloc_count "$work/r.json") f=$(field free_count "$work/r.json")
    l=$(field leaked_count "$work/r.json") u=$(field unknown_frees "$work/r.json")
    if [ -z "$a" ] || [ -z "$f" ] || [ -z "$l" ] || [ -z "$u" ]; then
        echo "FAIL: no alloc_count, free_count, leaked_count or unknown_frees in the report"
        return 1
    fi
    return 0
}

record 0 || exit 1
base_a=$a base_f=$f base_l=$l
if [ "$u" != 0 ] || [ $((base_f + base_l)) -ne "$base_a" ]; then
    echo "FAIL: baseline (no worker allocations): alloc_count $a free_count $f leaked_count $l unknown_frees $u"
    exit 1
fi
echo "baseline, $threads threads and no worker allocations: the C library's alloc_count $base_a free_count $base_f leaked_count $base_l"

n=$((threads * allocs))
failed=0
i=1
while [ $i -le "$runs" ]; do
    t0=$(date +%s.%N)
    if record "$allocs"; then
        secs=$(echo "$t0 $(date +%s.%N)" | awk '{ printf "%.1f", $2 - $1 }')
        got="alloc_count $a free_count $f unknown_frees $u leaked_count $l"
        if [ "$a" -eq $((base_a + n)) ] && [ "$f" -eq $((base_f + n)) ] && [ "$u" -eq 0 ] &&
            [ "$l" -eq "$base_l" ]; then
            echo "ok run $i: $threads x $allocs: $got (${secs}s)"
        else
            echo "FAIL run $i: $threads x $allocs: $got; want alloc_count $((base_a + n)) free_count $((base_f + n)) unknown_frees 0 leaked_count $base_l"
            failed=$((failed + 1))
        fi
    else
        failed=$((failed + 1))
    fi
    i=$((i + 1))
done
if [ $failed -ne 0 ]; then
    echo "FAIL: $failed of $runs runs not exact"
    exit 1
fi
echo "ok: $runs of $runs runs exact"
