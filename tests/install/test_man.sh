#!/usr/bin/env bash
# The man pages (tools/man: made from each command's --help at build time) against the gradprof
# they describe:
#   - gradprof(1) and a gradprof-COMMAND(1) page for every command `gradprof --help` lists;
#   - each page is what help2roff makes from the current binary, byte for byte (not stale);
#   - groff reads each page without a warning;
#   - every option of `gradprof COMMAND --help` is an item of the rendered page.
#   tests/install/test_man.sh MAN_DIR GRADPROF HELP2ROFF
set -euo pipefail
mandir=$1 gradprof=$2 help2roff=$3
command -v groff >/dev/null || { echo "SKIPPED: groff is not installed (groff-base)"; exit 77; }
failed=0
fail() { echo "FAILED: $*" >&2; failed=1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/gradprof-man.XXXXXX")
trap 'rm -rf "$work"' EXIT

commands=$("$gradprof" --help | sed -n '/^commands:/,/^$/p' | grep -E '^  [a-z]' | awk '{print $1}' |
           grep -vx help)
for cmd in - $commands; do
    page=gradprof-$cmd.1
    [ "$cmd" = - ] && page=gradprof.1
    if [ ! -f "$mandir/$page" ]; then
        fail "no man page $page for '$cmd' (add it to GRADPROF_MAN_COMMANDS in tools/man)"
        continue
    fi
    ASAN_OPTIONS=detect_leaks=0 "$help2roff" "$gradprof" "$cmd" "$work/$page"
    cmp -s "$work/$page" "$mandir/$page" || fail "$page is not what --help says now (rebuild)"
    warnings=$(groff -man -ww -z "$mandir/$page" 2>&1)
    [ -z "$warnings" ] || fail "$page: groff: $warnings"
    [ "$cmd" = - ] && continue
    text=$(groff -man -Tascii -rLL=200n "$mandir/$page" 2>/dev/null | col -bx)
    for opt in $("$gradprof" "$cmd" --help | grep -E '^ +-' | sed -E 's/^ +//; s/  .*//' |
                 grep -oE '(^|[ ,])--?[a-zA-Z][a-zA-Z-]*' | tr -d ' ,'); do
        grep -qE "^ {7}(-[a-zA-Z], )?$opt( |,|$)" <<<"$text" || fail "$page: no item for $opt"
    done
    echo "ok: $page"
done
[ "$failed" -eq 0 ] && echo "PASSED"
exit "$failed"
