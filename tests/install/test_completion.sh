#!/usr/bin/env bash
# The bash completion (tools/completion/gradprof.bash) against the gradprof it completes:
#   - every option that `gradprof COMMAND --help` lists is offered for COMMAND, and nothing else;
#   - the values offered for --format, --measure, --forbid and --detectors are those the command
#     accepts (the list its error message gives for a bad value);
#   - commands, trace files, comma lists and the program after `run --` complete as they should.
#   tests/install/test_completion.sh COMPLETION GRADPROF
set -euo pipefail
completion=$1 gradprof=$2
fail() { echo "FAILED: $*" >&2; failed=1; }
failed=0
command -v bash >/dev/null || { echo "SKIPPED: bash is not installed"; exit 77; }

# complete WORD... : what _gradprof offers for the last word of "gradprof WORD...", sorted.
complete_words() {
    bash -c 'source "$1"; shift; COMP_WORDS=(gradprof "$@"); COMP_CWORD=$(($# )); _gradprof;
             printf "%s\n" "${COMPREPLY[@]}"' _ "$completion" "$@" | sort -u | tr '\n' ' '
}
# The options of a command's --help: the first words of its option lines.
help_options() {
    "$gradprof" "$1" --help | grep -E '^ +-' | sed -E 's/^ +//; s/  .*//' |
        grep -oE '(^|[ ,])--?[a-zA-Z][a-zA-Z-]*' | tr -d ' ,' | sort -u | tr '\n' ' '
}
# The values listed in the error message for a bad value of an option.
accepted_values() {
    local msg
    msg=$("$gradprof" "$@" 2>&1 >/dev/null || true)
    msg=${msg##*(}
    msg=${msg%)*}
    echo "$msg" | sed -E 's/^[a-z]+: //; s/ or:? /,/g' | tr ',' '\n' | tr -d ' ' | grep -v '^$' |
        sort -u | tr '\n' ' '
}
same() { # what, got, want
    if [ "$2" != "$3" ]; then fail "$1: completion offers '$2', gradprof says '$3'"; else echo "ok: $1"; fi
}

for cmd in run report diff check compare; do
    same "$cmd options" "$(complete_words "$cmd" -)" "$(help_options "$cmd")"
done
same "report --format" "$(complete_words report --format '')" "$(accepted_values report --format bogus x)"
same "diff --format" "$(complete_words diff --format '')" "$(accepted_values diff --format bogus x y)"
same "compare --format" "$(complete_words compare --format '')" "$(accepted_values compare --format bogus -- true)"
same "check --format" "$(complete_words check --format '')" "$(accepted_values check --format bogus x)"
same "report --measure" "$(complete_words report --measure '')" "$(accepted_values report --measure bogus x)"
same "check --forbid" "$(complete_words check --forbid '' | sed 's/none //')" \
     "$(accepted_values check --forbid bogus x)"
same "check --detectors" "$(complete_words check --detectors '')" "$(accepted_values check --detectors bogus x)"

# Commands (those of `gradprof --help`), comma lists, files and programs.
commands=$("$gradprof" --help | sed -n '/^commands:/,/^$/p' | grep -E '^  [a-z]' | awk '{print $1}' |
           sort -u | tr '\n' ' ')
same "commands" "$(complete_words '')" "$commands"
same "check --forbid saved,gr" "$(complete_words check --forbid saved,gr)" "saved,gradient "
work=$(mktemp -d "${TMPDIR:-/tmp}/gradprof-completion.XXXXXX")
trap 'rm -rf "$work"' EXIT
touch "$work/a.gptrace" "$work/b.gptrace.1" "$work/notes.txt"
mkdir "$work/dir"
same "report FILE" "$(complete_words report "$work/")" "$work/a.gptrace $work/b.gptrace.1 $work/dir "
same "report -o FILE" "$(complete_words report -o "$work/n")" "$work/notes.txt "
same "run -- PROGRAM" "$(complete_words run --no-stacks -- bas | grep -ow bash || true)" "bash"
[ "$failed" -eq 0 ] && echo "PASSED"
exit "$failed"
