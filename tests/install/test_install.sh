#!/usr/bin/env bash
# An installed gradprof, with its build and source trees out of sight (issue 16):
#   1. `cmake --install` with DESTDIR into /opt/gradprof, then the prefix moved elsewhere (the
#      RPATHs are $ORIGIN-relative: the prefix is relocatable); no installed binary's RUNPATH
#      names the build or the source tree;
#   2. in a mount namespace where the source and build trees are hidden (empty tmpfs mounts; root
#      and util-linux's unshare needed, else the trees stay visible and a note says so): the demo
#      from the prefix (gradprof run of the installed mlp_infer with grad on and off, diff, check),
#      the Python startup hook and the PyTorch helper finding the installed libprof, the man pages,
#      the rules file and the bash completion;
#   3. a program outside the tree built against the installed package both ways, CMake
#      (find_package(gradprof CONFIG), gradprof::tensor) and pkg-config (gradprof-tensor), run;
#      each records a trace that `gradprof report` reads (tagged parameters and saved tensors).
#   tests/install/test_install.sh BUILD_DIR SOURCE_DIR
# Exit 0 passed, 1 failed, 77 skipped (a tool is missing).
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAILED: $*" >&2; exit 1; }
for tool in cmake pkg-config cc readelf; do
    command -v "$tool" >/dev/null || skip "$tool is not installed"
done

work=$(mktemp -d "${TMPDIR:-/tmp}/gradprof-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
case "$work/" in "$src/"* | "$build/"*) fail "the scratch folder $work is inside the trees" ;; esac

echo "== 1. cmake --install (DESTDIR), then the prefix moved away"
DESTDIR="$work/destdir" cmake --install "$build" --prefix /opt/gradprof >"$work/install.log" ||
    { cat "$work/install.log"; fail "cmake --install"; }
[ -x "$work/destdir/opt/gradprof/bin/gradprof" ] || fail "DESTDIR not honoured: no $work/destdir/opt/gradprof/bin/gradprof"
mv "$work/destdir/opt/gradprof" "$work/prefix"
P="$work/prefix"
for pc in "$P"/lib*/pkgconfig/gradprof.pc "$P"/lib/*/pkgconfig/gradprof.pc; do
    [ -e "$pc" ] && break
done
[ -e "$pc" ] || fail "no gradprof.pc under $P/lib"
libdir=$(dirname "$(dirname "$pc")")
[ -e "$libdir/libprof.so.0" ] || fail "no libprof.so.0 in $libdir"
for f in "$P/bin/gradprof" "$libdir"/libprof.so.0 "$libdir"/libtensor.so.0 \
         "$P"/lib/gradprof/*.so "$P"/lib/gradprof/examples/*; do
    if readelf -d "$f" | grep -E 'RUNPATH|RPATH' | grep -qF -e "$build" -e "$src"; then
        fail "$f: its RUNPATH names the build tree: $(readelf -d "$f" | grep -E 'RUNPATH|RPATH')"
    fi
done
for f in bin/gradprof lib/gradprof/libprof_preload.so lib/gradprof/python/startup/sitecustomize.py \
         share/gradprof/pytorch.rules share/man/man1/gradprof.1 share/man/man1/gradprof-report.1 \
         share/bash-completion/completions/gradprof include/gradprof/tensor.h; do
    [ -e "$P/$f" ] || fail "not installed: $f"
done
echo "installed and moved to $P (libdir $libdir)"
cp -r "$src/tests/install/consumer" "$work/consumer"

# The rest runs in the demo script below, with the trees hidden when possible.
cat >"$work/demo.sh" <<'EOF'
set -euo pipefail
P=$1 libdir=$2 work=$3 src=$4 build=$5
fail() { echo "FAILED: $*" >&2; exit 1; }
unset GRADPROF_PRELOAD GRADPROF_PYTHON_STARTUP GRADPROF_LIBPROF GRADPROF_CUPTI PYTHONPATH
cd "$work"
if [ -e "$src/CMakeLists.txt" ] || [ -e "$build/CMakeCache.txt" ]; then
    echo "note: the source and build trees are visible (no mount namespace)"
else
    echo "the source tree ($src) and the build tree ($build) are hidden"
fi
g="$P/bin/gradprof"
ex="$P/lib/gradprof/examples"
"$g" --version

echo "== 2. the demo from the prefix: run (grad on, grad off), diff, check"
args=(--layers 4 --width 256 --batch 16 --iters 3)
"$g" run -o on.gptrace -- "$ex/mlp_infer" "${args[@]}" >/dev/null
"$g" run -o off.gptrace -- "$ex/mlp_infer" --no-grad "${args[@]}" >/dev/null
"$g" diff on.gptrace off.gptrace >diff.txt
head -n 4 diff.txt
grep -q "held by graph construction" diff.txt || fail "diff: no 'held by graph construction'"
rc=0; "$g" check on.gptrace >check_on.txt || rc=$?
[ "$rc" -eq 1 ] || { cat check_on.txt; fail "check of the grad-on run exited $rc, not 1"; }
head -n 1 check_on.txt
"$g" check off.gptrace >check_off.txt || { cat check_off.txt; fail "check of the no-grad run failed"; }
head -n 1 check_off.txt
"$g" report --rules "$P/share/gradprof/pytorch.rules" on.gptrace >/dev/null || fail "--rules share/gradprof/pytorch.rules"

echo "== the man pages, the bash completion"
for page in gradprof gradprof-run gradprof-report gradprof-diff gradprof-compare gradprof-check; do
    found=$(MANPATH="$P/share/man" man -w "$page") || fail "man -w $page"
    case "$found" in "$P"/*) ;; *) fail "man -w $page found $found" ;; esac
done
words=$(bash -c 'source "$1"; COMP_WORDS=(gradprof report --format ""); COMP_CWORD=3; _gradprof;
                 echo "${COMPREPLY[*]}"' _ "$P/share/bash-completion/completions/gradprof")
[[ " $words " == *" pprof "* ]] || fail "completion of report --format: '$words'"

if [ -x /usr/bin/python3 ]; then
    echo "== the Python startup hook and the PyTorch helper"
    "$g" run -o py.gptrace -- /usr/bin/python3 -c 'import os; print(os.environ["PYTHONPATH"])' >py.out
    grep -qxF "$P/lib/gradprof/python/startup" py.out || fail "startup hook not on PYTHONPATH: $(cat py.out)"
    GRADPROF_OUTPUT="$work/helper.%p.gptrace" /usr/bin/python3 -c '
import sys
sys.path.insert(0, sys.argv[1] + "/lib/gradprof/python")
import gradprof_torch as gp
lib = gp._Lib()
print("helper:", lib.mode, lib.path)
assert lib.mode == "standalone" and lib.path.startswith(sys.argv[1]), (lib.mode, lib.path)
' "$P"
    if [ -f "$P/lib/gradprof/python/gradprof_pytest.py" ] && /usr/bin/python3 -c 'import pytest' 2>/dev/null; then
        # The .dist-info's pytest11 entry point: pytest loads the plugin without -p.
        PYTHONPATH="$P/lib/gradprof/python" /usr/bin/python3 -m pytest -p no:cacheprovider --markers >markers.txt ||
            fail "pytest --markers with the installed plugin"
        grep -q "no_graph" markers.txt || fail "pytest did not load the installed gradprof plugin"
        echo "pytest loads the installed plugin (pytest11 entry point): $(grep -c gradprof markers.txt) gradprof markers"
    fi
fi

echo "== 3. a program outside the tree, against the installed package"
cmake -S consumer -B consumer-cmake -DCMAKE_PREFIX_PATH="$P" >consumer-cmake.log ||
    { cat consumer-cmake.log; fail "consumer: cmake configure (find_package(gradprof CONFIG))"; }
cmake --build consumer-cmake >>consumer-cmake.log || { cat consumer-cmake.log; fail "consumer: cmake build"; }
export PKG_CONFIG_PATH="$libdir/pkgconfig"
cc -o consumer-pc consumer/consumer.c $(pkg-config --cflags --libs gradprof-tensor) \
    -Wl,-rpath,"$(pkg-config --variable=libdir gradprof-tensor)" || fail "consumer: pkg-config build"
for how in cmake pc; do
    exe=consumer-$how
    [ "$how" = cmake ] && exe=consumer-cmake/consumer
    GRADPROF_OUTPUT="$work/consumer-$how.%p.gptrace" "./$exe" || fail "consumer ($how) failed"
    trace=$(echo "$work"/consumer-$how.*.gptrace)
    [ -e "$trace" ] || fail "consumer ($how) wrote no trace"

    "$g" report --format json "$trace" >report-$how.json
    "$g" report "$trace" >report-$how.txt
    head -n 1 report-$how.txt
    grep -q '"saved"' report-$how.json && grep -q '"consumer.1"' report-$how.json ||
        fail "consumer ($how): the trace has no saved tensors of module consumer.1"
done
echo "consumer built with CMake and with pkg-config; both recorded a trace"
EOF

runner=(bash "$work/demo.sh")
if [ "$(id -u)" -eq 0 ] && command -v unshare >/dev/null && unshare --mount true 2>/dev/null; then
    hide="mount -t tmpfs gradprof-hidden '$src'"
    case "$build/" in "$src/"*) ;; *) hide="$hide && mount -t tmpfs gradprof-hidden '$build'" ;; esac
    runner=(unshare --mount bash -c "$hide && exec bash '$work/demo.sh' \"\$@\"" demo)
fi
"${runner[@]}" "$P" "$libdir" "$work" "$src" "$build"
echo "PASSED"
