#!/usr/bin/env bash
# Installs the Debian 12 packages gradprof needs, if any are missing.
#   gradprof_bootstrap            what building and the demo need (python3.11-dev: CPython's
#                                 internal headers, for Python frames in recorded stacks)
#   gradprof_bootstrap --tests    also what the test suite runs: python3 (export checks), chromium
#                                 (the HTML report in a headless browser), python3-torch (PyTorch
#                                 integration tests, run with /usr/bin/python3), clang and its
#                                 runtime (libFuzzer harnesses), tcmalloc and jemalloc (the
#                                 preload under other allocators; test_preload skips without),
#                                 debhelper (test_package builds the Debian package with
#                                 dpkg-buildpackage) and golang-go (test_pprof reads the pprof
#                                 export with `go tool pprof`, the format's reference reader:
#                                 large, about 300 MB, but no smaller package reads pprof)
# Sourced by scripts/demo.sh and scripts/test.sh; safe to run on its own (bash scripts/bootstrap.sh).
set -euo pipefail

GRADPROF_PACKAGES=(build-essential cmake pkg-config libopenblas-dev libunwind-dev libcmocka-dev
                   libdw-dev libelf-dev zlib1g-dev python3.11-dev)
GRADPROF_TEST_PACKAGES=(python3 chromium python3-torch python3-torchvision python3-pytest clang
                        libclang-rt-14-dev libtcmalloc-minimal4 libjemalloc2 debhelper golang-go)

gradprof_bootstrap() {
    local wanted=("${GRADPROF_PACKAGES[@]}") missing=()
    [ "${1:-}" = "--tests" ] && wanted+=("${GRADPROF_TEST_PACKAGES[@]}")
    for p in "${wanted[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    echo "gradprof: installing missing packages: ${missing[*]}"
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -q
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    gradprof_bootstrap "$@"
fi
