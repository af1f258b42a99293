#!/bin/sh
# Stress and crash tests of the preload recorder (ctest label `stress`).
#
#   run_stress.sh PRELOAD_LIB STRESS_THREADS STRESS_CHECK STRESS_MISC ALLOC_WRAPPED
#
# GP_STRESS_ALLOCS sets the allocations per thread of the 32-thread test (default 1000000; ctest
# sets GP_STRESS_ALLOCS_DEFAULT=100000, i.e.
# 3.2M allocations, ~2 s; the full size of 1,000,000 per thread, 32M allocations, ~20 s on 2 cores, is
#   GP_STRESS_ALLOCS=1000000 ctest -L stress --test-dir BUILD -V ). Prints one line per check;
# exits 1 on the first failure.
set -u
abs() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
preload=$(abs "$1") threads_bin=$(abs "$2") check=$(abs "$3") misc=$(abs "$4") wrapped=$(abs "$5")
allocs=${GP_STRESS_ALLOCS:-${GP_STRESS_ALLOCS_DEFAULT:-1000000}}
work=$(mktemp -d "${TMPDIR:-/tmp}/gpstress.XXXXXX")
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
field() { # field NAME LINE
    echo "$2" | tr ' ' '\n' | awk -v k="$1" 'prev == k { print; exit } { prev = $0 }'
}
now() { date +%s.%N; }
elapsed() { echo "$1 $(now)" | awk '{ printf "%.2f", $2 - $1 }'; }

# ---- 32 threads, cross-thread frees: exact counts, no deadlock, bounded time ---------------------
t0=$(now)
# (timeout runs the program through sh, so that only the program is profiled.)
preloaded() { GP_PRELOAD_LIB=$preload timeout "$@"; }
out=$(GRADPROF_OUTPUT="$work/threads.gptrace" preloaded 600 sh -c 'LD_PRELOAD=$GP_PRELOAD_LIB exec "$@"' sh \
      "$threads_bin" 32 "$allocs" 2>"$work/threads.err") ||
    fail "stress_threads exited $? (deadlock if 124): $(cat "$work/threads.err")"
t_run=$(elapsed "$t0")
[ -s "$work/threads.err" ] && fail "stress_threads wrote to stderr: $(cat "$work/threads.err")"
t0=$(now)
line=$("$check" "$work/threads.gptrace") || fail "stress_check: $line"
t_read=$(elapsed "$t0")
want=$((32 * allocs))
[ "$(field worker_allocs "$line")" = "$want" ] || fail "threads: want $want worker allocs: $line"
[ "$(field worker_frees "$line")" = "$want" ] || fail "threads: want $want worker frees: $line"
[ "$(field lost "$line")" = 0 ] || fail "threads: events lost: $line"
[ "$(field damaged "$line")" = 0 ] || fail "threads: damaged trace: $line"
[ "$(field clean_end "$line")" = 1 ] || fail "threads: no clean end: $line"
echo "ok threads: 32 x $allocs allocations, $out; run ${t_run}s, read ${t_read}s; $line"

# ---- fork from a threaded program ------------------------------------------------------------------
mkdir "$work/fork"
out=$(GRADPROF_OUTPUT="$work/fork/t.%p.gptrace" preloaded 120 sh -c 'LD_PRELOAD=$GP_PRELOAD_LIB exec "$@"' sh "$misc" fork 8) ||
    fail "fork: exited $? (124 = deadlock): $out"
[ "$out" = "child ok
parent ok" ] || fail "fork: output '$out'"
n=0
for f in "$work"/fork/*.gptrace; do
    line=$("$check" "$f") || fail "fork: unreadable $f"
    [ "$(field damaged "$line")" = 0 ] || fail "fork: damaged $f: $line"
    n=$((n + 1))
done
[ "$n" -ge 21 ] || fail "fork: $n traces, want the parent's and 20 children's"
echo "ok fork: 20 forks beside 8 allocating threads, $n readable traces"

# ---- a signal handler that allocates ---------------------------------------------------------------
out=$(GRADPROF_OUTPUT="$work/signal.gptrace" preloaded 120 sh -c 'LD_PRELOAD=$GP_PRELOAD_LIB exec "$@"' sh "$misc" signal 2000000) ||
    fail "signal: exited $? (124 = deadlock): $out"
line=$("$check" "$work/signal.gptrace") || fail "signal: unreadable"
[ "$(field damaged "$line")" = 0 ] && [ "$(field clean_end "$line")" = 1 ] || fail "signal: $line"
echo "ok signal: $out; $line"

# ---- SIGKILL mid-run: every event older than a flush interval is readable --------------------------
GRADPROF_OUTPUT="$work/kill.gptrace" GRADPROF_FLUSH_MS=50 LD_PRELOAD="$preload" \
    "$misc" kill 200000 >"$work/kill.out" &
pid=$!
i=0
until grep -q allocated "$work/kill.out" 2>/dev/null; do
    i=$((i + 1)); [ $i -lt 600 ] || { kill -9 $pid; fail "kill: the program never got ready"; }
    sleep 0.05
done
sleep 1 # twenty flush intervals
kill -9 $pid
wait $pid 2>/dev/null
line=$("$check" "$work/kill.gptrace") || fail "kill: unreadable after SIGKILL"
a=$(field allocs "$line")
[ "$a" -ge 200000 ] || fail "kill: $a allocs recovered, want >= 200000: $line"
[ "$(field clean_end "$line")" = 0 ] || fail "kill: a clean end after SIGKILL? $line"
echo "ok kill: SIGKILL after 200000 allocations + 20 flush intervals: $line"

# SIGKILL while allocating flat out: the trace is still readable (maybe with a torn last chunk).
GRADPROF_OUTPUT="$work/kill2.gptrace" LD_PRELOAD="$preload" "$misc" kill 1000000000 >/dev/null &
pid=$!
sleep 0.3
kill -9 $pid
wait $pid 2>/dev/null
line=$("$check" "$work/kill2.gptrace") || fail "kill mid-run: unreadable"
[ "$(field allocs "$line")" -gt 0 ] || fail "kill mid-run: nothing recovered: $line"
echo "ok kill mid-run: $line"

# ---- an output that cannot be written: the program runs on unchanged, one warning ------------------
plain_out=$("$misc" work 300000 2>"$work/plain.err"); plain_rc=$?
# RLIMIT_FSIZE of 8 KiB with SIGXFSZ ignored: writes past it fail with EFBIG.
out=$(sh -c 'trap "" XFSZ; ulimit -f 16; exec "$@"' sh env GRADPROF_OUTPUT="$work/fsize.gptrace" \
      LD_PRELOAD="$preload" "$misc" work 300000 2>"$work/fsize.err"); rc=$?
[ "$rc" = "$plain_rc" ] && [ "$out" = "$plain_out" ] || fail "fsize: rc $rc output '$out' vs '$plain_out'"
nw=$(grep -c '^gradprof: ' "$work/fsize.err")
[ "$nw" = 1 ] || fail "fsize: $nw warnings: $(cat "$work/fsize.err")"
grep -q 'work done' "$work/fsize.err" || fail "fsize: program stderr lost"
"$check" "$work/fsize.gptrace" >/dev/null || fail "fsize: the partial trace is unreadable"
echo "ok fsize: write fails (EFBIG) -> $(grep '^gradprof: ' "$work/fsize.err")"
# A directory the program cannot write to: one warning, no file, same output.
mkdir "$work/ro" && chmod 0555 "$work/ro"
ro_preload=$preload ro_misc=$misc
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
    # The build tree may lie in a directory only root can enter (a clone in `mktemp -d`): the
    # unprivileged run gets its own copies of the two (self-contained) files.
    chmod 0755 "$work"
    mkdir -m 0755 "$work/bin" && cp "$preload" "$misc" "$work/bin/" && chmod 0755 "$work/bin/"* ||
        fail "read-only dir: cannot copy the binaries"
    ro_preload=$work/bin/$(basename "$preload") ro_misc=$work/bin/$(basename "$misc")
    runas="setpriv --reuid=65534 --regid=65534 --clear-groups"
else
    runas=""
fi
out=$($runas env GRADPROF_OUTPUT="$work/ro/t.gptrace" LD_PRELOAD="$ro_preload" "$ro_misc" work \
      300000 2>"$work/ro.err"); rc=$?
[ "$rc" = "$plain_rc" ] && [ "$out" = "$plain_out" ] || fail "read-only dir: rc $rc '$out'"
[ "$(grep -c '^gradprof: ' "$work/ro.err")" = 1 ] || fail "read-only dir: $(cat "$work/ro.err")"
[ -z "$(ls "$work/ro")" ] || fail "read-only dir: a file was created"
echo "ok read-only dir: $(grep '^gradprof: ' "$work/ro.err")"

# ---- stdout and exit code identical with and without the profiler ----------------------------------
out=$(GRADPROF_OUTPUT="$work/same.gptrace" LD_PRELOAD="$preload" "$misc" work 300000 2>"$work/same.err")
rc=$?
[ "$rc" = "$plain_rc" ] && [ "$out" = "$plain_out" ] || fail "same: rc $rc vs $plain_rc, '$out' vs '$plain_out'"
cmp -s "$work/same.err" "$work/plain.err" || fail "same: stderr differs: $(cat "$work/same.err")"
out2=$(GRADPROF_OUTPUT="$work/same2.gptrace" LD_PRELOAD="$preload" "$threads_bin" 4 1000)
[ "$out2" = "$("$threads_bin" 4 1000)" ] || fail "same: stress_threads output differs"
echo "ok same output: '$out' exit $rc with and without the profiler"

# ---- environment values are length-checked ---------------------------------------------------------
mkdir "$work/env"
long=$(head -c 5000 /dev/zero | tr '\0' a)
out=$(cd "$work/env" && GRADPROF_OUTPUT="$long" GRADPROF_STACK_DEPTH="$long" GRADPROF_FLUSH_MS="1$long" \
      GRADPROF_CFI=yes LD_PRELOAD="$preload" "$misc" work 1000 2>"$work/env.err"); rc=$?
[ "$rc" = "$plain_rc" ] || fail "env: exit $rc"
grep -q "GRADPROF_OUTPUT='a*\.\.\.' is too long (5000 bytes; the limit is 4000); the trace goes to .*/env/gradprof\.[0-9]*\.gptrace instead" "$work/env.err" ||
    fail "env: the refused GRADPROF_OUTPUT does not say where the trace goes: $(cat "$work/env.err")"
grep -q "GRADPROF_STACK_DEPTH=.* is not a non-negative integer" "$work/env.err" || fail "env: $(cat "$work/env.err")"
grep -q "GRADPROF_CFI='yes' is not a non-negative integer; using 1" "$work/env.err" || fail "env: $(cat "$work/env.err")"
[ "$(grep -c '^gradprof: ' "$work/env.err")" = 4 ] || fail "env: want 4 warnings: $(cat "$work/env.err")"
[ "$(awk '{ if (length($0) > m) m = length($0) } END { print m }' "$work/env.err")" -lt 300 ] ||
    fail "env: a warning quotes the whole value"
ls "$work/env"/gradprof.*.gptrace >/dev/null 2>&1 || fail "env: no trace at the default path"
echo "ok env: 5000-character values and a bad GRADPROF_CFI refused with one short warning each; the trace goes to the default, said where"

# ---- the program's descriptor games while 8 threads allocate ---------------------------------------
# close_range(3, ~0U), close loops and dup2(/dev/null) over 3..20, over and over, then files of the
# program's own on the freed numbers: the trace is reopened each time, nothing is lost, nothing is
# written anywhere else, not a word on stderr.
out=$(GRADPROF_OUTPUT="$work/fdchurn.gptrace" preloaded 300 sh -c 'LD_PRELOAD=$GP_PRELOAD_LIB exec "$@"' sh \
      "$misc" fdchurn 100000 2>"$work/fdchurn.err") || fail "fdchurn: exited $? (124 = hang): $out"
[ -s "$work/fdchurn.err" ] && fail "fdchurn: stderr: $(cat "$work/fdchurn.err")"
line=$("$check" "$work/fdchurn.gptrace") || fail "fdchurn: unreadable: $line"
[ "$(field allocs "$line")" -ge 800000 ] && [ "$(field frees "$line")" -ge 800000 ] ||
    fail "fdchurn: want 800000 allocations and frees at least: $line"
[ "$(field damaged "$line")" = 0 ] && [ "$(field clean_end "$line")" = 1 ] && [ "$(field lost "$line")" = 0 ] ||
    fail "fdchurn: $line"
echo "ok fdchurn: $out; $line"

# ---- threads cancelled while they allocate ---------------------------------------------------------
out=$(GRADPROF_OUTPUT="$work/cancel.gptrace" GRADPROF_FLUSH_MS=1 preloaded 300 sh -c 'LD_PRELOAD=$GP_PRELOAD_LIB exec "$@"' sh \
      "$misc" cancel 100 2>"$work/cancel.err") || fail "cancel: exited $? (124 = hang): $out"
pairs=${out##* }
line=$("$check" "$work/cancel.gptrace") || fail "cancel: unreadable: $line"
[ "$(field frees "$line")" -ge "$pairs" ] && [ "$(field allocs "$line")" -ge "$pairs" ] ||
    fail "cancel: the threads made $pairs pairs: $line"
[ "$(field damaged "$line")" = 0 ] && [ "$(field clean_end "$line")" = 1 ] || fail "cancel: $line"
echo "ok cancel: 400 threads cancelled, $pairs pairs; $line"

# ---- setuid programs are not profiled ---------------------------------------------------------------
# alloc_wrapped is linked with ld --wrap (LD_PRELOAD is ignored by the loader for setuid programs
# anyway), so this checks the recorder's own AT_SECURE test. Needs root and setpriv.
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
    mkdir "$work/suid" && chmod 0777 "$work/suid"
    cp "$wrapped" "$work/suid/prog" && chmod 4755 "$work/suid/prog"
    setpriv --reuid=65534 --regid=65534 --clear-groups env GRADPROF_OUTPUT="$work/suid/t.gptrace" \
        "$work/suid/prog" >/dev/null 2>&1
    [ ! -e "$work/suid/t.gptrace" ] || fail "setuid: a setuid program was profiled"
    # The same binary without the setuid bit is profiled (so the check above means something).
    chmod 0755 "$work/suid/prog"
    setpriv --reuid=65534 --regid=65534 --clear-groups env GRADPROF_OUTPUT="$work/suid/t.gptrace" \
        "$work/suid/prog" >/dev/null 2>&1
    [ -e "$work/suid/t.gptrace" ] || fail "setuid: the plain copy was not profiled either"
    echo "ok setuid: not profiled (the same binary without u+s is)"
else
    echo "skip setuid: needs root and setpriv"
fi
echo "all stress checks passed"
