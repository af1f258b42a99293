#!/usr/bin/env bash
# Time overhead of `gradprof run` on the PyTorch examples (examples/pytorch/*.py, default
# arguments, Debian's /usr/bin/python3 with python3-torch), one recording mode per column:
# median of RUNS runs, interleaved (each round runs every program in every mode, so machine noise
# hits them alike), as the ratio to the plain run: wall time, CPU time (user + system of the
# program and its children: steadier than wall time on a shared machine) and peak RSS (the largest
# maximum resident set size of the program or a child, GNU time's %M). OPENBLAS_NUM_THREADS=1.
#   bench/torch_overhead.sh [runs (default 3)] [program.py ...]   (from any directory)
#   MODES="plain default all-32" bench/torch_overhead.sh          (a subset of the modes)
# Needs a build in build/ (GRADPROF_BUILD=dir to use another). Prints a markdown table; the raw
# times go to $TSV when set (round, program, mode, wall s, cpu s, max RSS KiB). The pitfall examples exit 1 on
# purpose (autograd's error): timed all the same.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
runs="${1:-3}"; shift || true
gp="${GRADPROF_BUILD:-$root/build}/tools/gradprof"
py=/usr/bin/python3
[ -x "$gp" ] || { echo "no $gp: build first" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "needs /usr/bin/time (apt-get install time)" >&2; exit 2; }
if [ $# -gt 0 ]; then progs=("$@"); else
    progs=(); for f in "$root"/examples/pytorch/*.py; do
        [ "$(basename "$f")" = saved_truth.py ] || progs+=("$f"); done  # a module, not a program
fi
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
export OPENBLAS_NUM_THREADS=1

# default is what this build's `gradprof run` does for a Python program (no stack option: no
# stacks since Python programs got that default). The others are explicit, so that the table does
# not depend on the build: all-32 is every allocation's stack at depth 32 (the default before),
# sample-1M samples stacks by bytes (geometric, mean 1 MiB), min-4K gives a stack to allocations
# of 4 KiB and more only (tensors, not Python's small objects). no-torch is the recorder alone
# (--no-torch --no-stacks: no helper), to tell the recorder's cost from the helper's.
read -r -a labels <<<"${MODES:-plain default all-32 no-stacks all-64 sample-1M min-4K}"
mode_args() {  # the gradprof run options of mode $1 ("-" = no gradprof)
    case "$1" in
    plain) echo - ;; default) echo "" ;; all-32) echo "--stack-depth 32 --stack-sample 0" ;;
    no-stacks) echo --no-stacks ;; all-64) echo "--stack-depth 64 --stack-sample 0" ;;
    sample-1M) echo "--stack-sample 1M" ;; min-4K) echo "--min-stack-size 4K" ;;
    no-torch) echo "--no-torch --no-stacks" ;;
    *) echo "unknown mode $1" >&2; exit 2 ;;
    esac
}
run_once() {  # "wall cpu rss": seconds, seconds, KiB of program $2 in mode $1
    local a; a="$(mode_args "$1")"
    if [ "$a" = - ]; then /usr/bin/time -f "%e %U %S %M" -o "$work/time" "$py" "$2" >/dev/null 2>&1
    else /usr/bin/time -f "%e %U %S %M" -o "$work/time" \
        "$gp" run $a -o "$work/t.gptrace" -- "$py" "$2" >/dev/null 2>&1; fi
    rm -f "$work"/t.gptrace*
    tail -1 "$work/time" | awk '{ printf "%.2f %.2f %d", $1, $2 + $3, $4 }'
}
median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

declare -A wall=() cpu=() rss=()
"$py" -c 'import torch' >/dev/null 2>&1  # warm the page cache
for r in $(seq "$runs"); do
    for p in "${progs[@]}"; do
        for l in "${labels[@]}"; do
            read -r w c m <<<"$(run_once "$l" "$p")"
            wall["$p|$l"]+="$w "; cpu["$p|$l"]+="$c "; rss["$p|$l"]+="$m "
            [ -n "${TSV:-}" ] && printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$(basename "$p")" "$l" "$w" "$c" "$m" >>"$TSV"
        done
    done
done

echo "wall time ratio to the plain run (CPU time ratio, peak RSS ratio in brackets), median of $runs"
printf '| program | plain s (cpu s, MiB) |'; for l in "${labels[@]:1}"; do printf ' %s |' "$l"; done; echo
printf '|---|---:|'; for _ in "${labels[@]:1}"; do printf -- '---:|'; done; echo
for p in "${progs[@]}"; do
    bw=$(echo "${wall["$p|plain"]}" | median); bc=$(echo "${cpu["$p|plain"]}" | median)
    bm=$(echo "${rss["$p|plain"]}" | median)
    printf '| %s | %.2f (%.2f, %.0f) |' "$(basename "$p")" "$bw" "$bc" "$(awk -v m="$bm" 'BEGIN { print m / 1024 }')"
    for l in "${labels[@]:1}"; do
        w=$(echo "${wall["$p|$l"]}" | median); c=$(echo "${cpu["$p|$l"]}" | median)
        m=$(echo "${rss["$p|$l"]}" | median)
        awk -v w="$w" -v c="$c" -v m="$m" -v bw="$bw" -v bc="$bc" -v bm="$bm" \
            'BEGIN { printf " %.2fx (%.2fx, %.2fx) |", w / bw, c / bc, m / bm }'
    done
    echo
done
