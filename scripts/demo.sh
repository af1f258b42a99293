#!/usr/bin/env bash
# The demo: installs what is missing, builds (Release) and asks gradprof the question users ask of
# an evaluation loop that forgot no_grad: what would no_grad save me, and where? `gradprof compare`
# runs examples/mlp_infer twice (grad as it is, and off from the start) and prints the aligned
# diff; `gradprof check` is the CI gate that fails the grad-on run and passes the other.
#   scripts/demo.sh [mlp_infer options, e.g. --layers 16 --width 512]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/bootstrap.sh"
gradprof_bootstrap

build="$root/build-release"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DGRADPROF_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" -j"$(nproc)" --target gradprof prof_preload mlp_infer >/dev/null
gradprof="$build/tools/gradprof"
mlp="$build/examples/mlp_infer"
out="$root/build-release/demo"
mkdir -p "$out"
rm -f "$out"/mlp.*

args=("$@")
[ ${#args[@]} -gt 0 ] || args=(--layers 8 --width 1024 --batch 64 --iters 10)

echo "== 1. gradprof compare: the program with grad as it is (an evaluation loop that forgot"
echo "==    no_grad) and with grad off from the start; what graph construction holds at the peak"
# --ignore-stdout: mlp_infer prints its timings, which differ from run to run.
"$gradprof" compare --ignore-stdout --top 8 -n "$out/mlp" -- "$mlp" "${args[@]}"

echo
echo "== 2. gradprof check: the CI gate fails the grad-on run and passes the no_grad run"
"$gradprof" check "$out/mlp.grad.gptrace" | head -24 || true
"$gradprof" check "$out/mlp.nograd.gptrace" | head -3 || true

echo
echo "Traces, reports and the programs' output are in $out; try:"
echo "  $gradprof report $out/mlp.grad.gptrace"
echo "  $gradprof report $out/mlp.grad.gptrace --format html -o $out/grad.html"
echo "  $gradprof diff $out/mlp.grad.gptrace $out/mlp.nograd.gptrace --format html -o $out/diff.html"
