#!/usr/bin/env bash
# Builds and runs the whole test suite: once in a warning-free (-Werror) build, once under
# ASan + UBSan, the threaded tests under TSan, and each libFuzzer harness for a bounded time
# (GRADPROF_FUZZ_SECONDS, default 30). Installs missing Debian packages first.
#   scripts/test.sh [ctest options, e.g. -L grad]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/bootstrap.sh"
gradprof_bootstrap --tests

jobs="$(nproc)"
run_suite() {
    local dir="$1"; shift
    cmake -S "$root" -B "$dir" -DGRADPROF_WERROR=ON "$@" >/dev/null
    cmake --build "$dir" -j"$jobs"
    (cd "$dir" && ctest --output-on-failure -j"$jobs" "${ctest_args[@]}")
}
ctest_args=("$@")
echo "== test suite (RelWithDebInfo, -Werror) =="
run_suite "$root/build-test" -DCMAKE_BUILD_TYPE=RelWithDebInfo
echo "== test suite under ASan + UBSan =="
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    run_suite "$root/build-asan" -DCMAKE_BUILD_TYPE=Debug -DGRADPROF_SANITIZE=ON

echo "== threaded tests under TSan =="
tsan="$root/build-tsan"
cmake -S "$root" -B "$tsan" -DCMAKE_BUILD_TYPE=Debug -DGRADPROF_CUPTI=OFF -DGRADPROF_BUILD_BENCH=OFF \
    -DCMAKE_C_FLAGS=-fsanitize=thread -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread \
    -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread >/dev/null
tsan_tests=(test_libprof test_recorder test_tensor_cache test_grad_mode test_trace_reader test_analysis test_memory test_diff)
cmake --build "$tsan" -j"$jobs" --target "${tsan_tests[@]}"
for t in "${tsan_tests[@]}"; do
    TSAN_OPTIONS=halt_on_error=1 "$tsan/tests/$t" >/dev/null
    echo "TSan: $t passed"
done

echo "== fuzzing: each harness ${GRADPROF_FUZZ_SECONDS:-30} s =="
sh "$root/tests/fuzz/run.sh" "${GRADPROF_FUZZ_SECONDS:-30}" "$root/build-fuzz"
