#!/bin/sh
# Valgrind memcheck over the tensor tests and the gradprof CLI on the fixture traces: fails on any
# memcheck error or definite/indirect leak. Needs an unsanitized build.
#
#   tests/stress/valgrind.sh BUILD_DIR [TEST...]
#   e.g. tests/stress/valgrind.sh /tmp/build-main
#        tests/stress/valgrind.sh /tmp/build-main test_tensor test_safetensors   (CLI runs always)
set -u
build=$1
shift
tests=${*:-"test_tensor test_safetensors test_grad_mode test_modules test_autograd test_memory
            test_ops_elementwise test_ops_linalg test_ops_nn test_reference test_training"}
command -v valgrind >/dev/null || { echo "valgrind.sh: valgrind is not installed" >&2; exit 2; }
vg="valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite,indirect"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
run() { # run NAME COMMAND...: memcheck errors fail, the command's own exit code does not
    name=$1
    shift
    CMOCKA_MESSAGE_OUTPUT=stdout $vg "$@" >/dev/null 2>"$log"
    if [ $? = 99 ] || grep -q '^==[0-9]*== ' "$log"; then
        echo "FAIL $name"
        head -40 "$log"
        status=1
    else
        echo "ok   $name"
    fi
}
for t in $tests; do
    run "$t" "$build/tests/$t"
done
g=$build/tools/gradprof
T=$build/tests/traces
for args in "report $T/mlp_grad.gptrace" "report --format json $T/mlp_grad.gptrace" \
    "report --format html $T/leak_accumulate.gptrace" "report --format folded $T/raw.gptrace" \
    "report --format chrome $T/leak_accumulate.gptrace" "report $T/damaged.gptrace" \
    "diff $T/mlp_grad.gptrace $T/mlp_nograd.gptrace" \
    "diff --format json $T/mlp_grad.gptrace $T/mlp_nograd.gptrace" \
    "diff --format html $T/mlp_grad.gptrace $T/mlp_nograd.gptrace" \
    "check $T/mlp_grad.gptrace" "check $T/detectors.gptrace" "check $T/leak_accumulate.gptrace" \
    "report /nonexistent" "report --top x $T/raw.gptrace"; do
    # shellcheck disable=SC2086
    run "gradprof $args" "$g" $args
done
exit $status
