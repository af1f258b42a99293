#!/usr/bin/env bash
# Builds and runs the whole test suite: once in a warning-free (-Werror) build, once under
# ASan + UBSan. Installs missing Debian packages first.
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
