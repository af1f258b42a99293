#!/usr/bin/env bash
# Installs the Debian 12 packages gradprof needs to build and test, if any are missing.
# Sourced by scripts/demo.sh and scripts/test.sh; safe to run on its own.
set -euo pipefail

GRADPROF_PACKAGES=(build-essential cmake pkg-config libopenblas-dev libunwind-dev libcmocka-dev
                   libdw-dev libelf-dev python3 chromium)

gradprof_bootstrap() {
    local missing=()
    for p in "${GRADPROF_PACKAGES[@]}"; do
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
    gradprof_bootstrap
fi
