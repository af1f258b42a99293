#!/usr/bin/env bash
# The Debian package, built with Debian's own tools from a copy of the tree and unpacked into a
# scratch root (nothing is installed on the machine):
#   1. the tree (its git files, tracked and untracked, or the folder less build*/ and .git/) copied
#      to a scratch folder, then `dpkg-buildpackage -us -uc -b` there (debian/: dh + cmake);
#   2. the .debs' control files and contents checked; `apt-get install --simulate ./gradprof_*.deb`
#      (dependencies resolvable: what `apt-get install ./gradprof_*.deb` would do);
#   3. both .debs unpacked with `dpkg -x` into a scratch root, and the demo run from there:
#      gradprof run of the shipped /usr/lib/gradprof/examples/mlp_infer with grad on and off,
#      diff, check; the pytest11 entry point of the plugin; the man pages.
#   tests/install/test_package.sh SOURCE_DIR [WORK_DIR]
# SKIPPED (77) without dpkg-buildpackage or debhelper. Slow: a full build of the package.
set -euo pipefail
src=$(cd "$1" && pwd)
skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAILED: $*" >&2; exit 1; }
command -v dpkg-buildpackage >/dev/null || skip "dpkg-buildpackage is not installed (dpkg-dev)"
command -v dh >/dev/null || skip "debhelper is not installed"
[ -f "$src/debian/control" ] || fail "no debian/control in $src"

if [ -n "${2:-}" ]; then
    work=$2
    rm -rf "$work"
    mkdir -p "$work"
else
    work=$(mktemp -d "${TMPDIR:-/tmp}/gradprof-package.XXXXXX")
    trap 'rm -rf "$work"' EXIT
fi
version=$(sed -n '1s/^gradprof (\([^)]*\)).*/\1/p' "$src/debian/changelog")
tree="$work/gradprof-$version"
mkdir -p "$tree"

echo "== 1. dpkg-buildpackage -us -uc -b in a copy of the tree ($tree)"
if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    (cd "$src" && git ls-files -z --cached --others --exclude-standard |
        while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
        tar --null -T - -cf -) | tar -xf - -C "$tree"
else
    (cd "$src" && tar --exclude='./build*' --exclude=./.git --exclude=./debian/tmp -cf - .) |
        tar -xf - -C "$tree"
fi
start=$(date +%s)
if ! (cd "$tree" && DEB_BUILD_OPTIONS="nocheck parallel=$(nproc)" \
          dpkg-buildpackage -us -uc -b >"$work/build.log" 2>&1); then
    tail -n 60 "$work/build.log"
    fail "dpkg-buildpackage (log: $work/build.log)"
fi
echo "built in $(($(date +%s) - start)) s:"
debs=("$work"/gradprof_"$version"_*.deb "$work"/libgradprof-dev_"$version"_*.deb)
for d in "${debs[@]}"; do
    [ -f "$d" ] || fail "no $d"
    echo "  $(basename "$d") ($(du -k "$d" | cut -f1) KiB)"
done

echo "== 2. the packages"
main=${debs[0]} dev=${debs[1]}
dpkg-deb -f "$main" Depends | grep -q libunwind || fail "gradprof's Depends lack libunwind: $(dpkg-deb -f "$main" Depends)"
echo "gradprof Depends: $(dpkg-deb -f "$main" Depends)"
contents=$(dpkg-deb -c "$main")
for f in ./usr/bin/gradprof ./usr/lib/gradprof/libprof_preload.so ./usr/lib/gradprof/examples/mlp_infer \
         ./usr/lib/gradprof/python/startup/sitecustomize.py ./usr/lib/python3/dist-packages/gradprof_torch.py \
         ./usr/share/gradprof/pytorch.rules ./usr/share/man/man1/gradprof.1.gz \
         ./usr/share/man/man1/gradprof-report.1.gz ./usr/share/bash-completion/completions/gradprof; do
    grep -q " $f\$" <<<"$contents" || fail "gradprof .deb lacks $f"
done
grep -qE ' \./usr/lib/[^/]+/libprof\.so\.0' <<<"$contents" || fail "gradprof .deb lacks libprof.so.0"
dev_contents=$(dpkg-deb -c "$dev")
for f in ./usr/include/gradprof/tensor.h gradprofConfig.cmake gradprof-tensor.pc; do
    grep -q "$f" <<<"$dev_contents" || fail "libgradprof-dev .deb lacks $f"
done
if command -v apt-get >/dev/null; then
    if apt-get install --simulate "$main" >"$work/apt.log" 2>&1; then
        echo "apt-get install --simulate $(basename "$main"): $(grep -c '^Inst' "$work/apt.log") to install"
    else
        cat "$work/apt.log"
        fail "apt-get install --simulate $(basename "$main")"
    fi
fi

echo "== 3. unpacked into a scratch root; the demo from there"
root="$work/root"
dpkg -x "$main" "$root"
dpkg -x "$dev" "$root"
cd "$work"
unset GRADPROF_PRELOAD GRADPROF_PYTHON_STARTUP GRADPROF_LIBPROF GRADPROF_CUPTI PYTHONPATH
g="$root/usr/bin/gradprof"
ex="$root/usr/lib/gradprof/examples"
"$g" --version
args=(--layers 4 --width 256 --batch 16 --iters 3)
"$g" run -o on.gptrace -- "$ex/mlp_infer" "${args[@]}" >/dev/null
"$g" run -o off.gptrace -- "$ex/mlp_infer" --no-grad "${args[@]}" >/dev/null
"$g" diff on.gptrace off.gptrace >diff.txt
head -n 2 diff.txt
grep -q "held by graph construction" diff.txt || fail "diff: no 'held by graph construction'"
rc=0; "$g" check on.gptrace >check_on.txt || rc=$?
[ "$rc" -eq 1 ] || { cat check_on.txt; fail "check of the grad-on run exited $rc, not 1"; }
head -n 1 check_on.txt
"$g" check off.gptrace >check_off.txt || { cat check_off.txt; fail "check of the no-grad run failed"; }
head -n 1 check_off.txt
[ -n "$(MANPATH="$root/usr/share/man" man -w gradprof-check)" ] || fail "man gradprof-check"
if [ -x /usr/bin/python3 ] && [ -f "$root/usr/lib/python3/dist-packages/gradprof_pytest.py" ]; then
    /usr/bin/python3 - "$root/usr/lib/python3/dist-packages" <<'EOF'
import sys
sys.path.insert(0, sys.argv[1])
from importlib.metadata import entry_points
eps = [e for e in entry_points(group="pytest11") if e.name == "gradprof"]
assert eps and eps[0].value == "gradprof_pytest", eps
print("pytest11 entry point: gradprof = gradprof_pytest")
EOF
    if /usr/bin/python3 -c 'import pytest' 2>/dev/null; then
        PYTHONPATH="$root/usr/lib/python3/dist-packages" /usr/bin/python3 -m pytest \
            -p no:cacheprovider --markers >markers.txt || fail "pytest --markers with the packaged plugin"
        grep -q "no_graph" markers.txt || fail "pytest did not load the packaged gradprof plugin"
        echo "pytest loads the packaged plugin by itself"
    fi
fi
echo "PASSED"
