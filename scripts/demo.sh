#!/usr/bin/env bash
# The demo: installs what is missing, builds (Release), profiles examples/mlp_infer once with grad
# on and once under no_grad, and shows what gradprof says: the diff (memory held by graph
# construction, per layer and op) and the CI check that fails the grad-on run.
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
rm -f "$out"/*.gptrace*

args=("$@")
[ ${#args[@]} -gt 0 ] || args=(--layers 8 --width 1024 --batch 64 --iters 10)

echo "== 1. the program, grad on (as an evaluation loop that forgot no_grad) and under no_grad"
"$gradprof" run -o "$out/grad.gptrace" -- "$mlp" --grad "${args[@]}"
"$gradprof" run -o "$out/nograd.gptrace" -- "$mlp" --no-grad "${args[@]}"

echo
echo "== 2. gradprof diff: what graph construction holds at the peak"
"$gradprof" diff "$out/grad.gptrace" "$out/nograd.gptrace" --top 8

echo
echo "== 3. gradprof check: the CI gate fails the grad-on run and passes the no_grad run"
"$gradprof" check "$out/grad.gptrace" | head -24 || true
"$gradprof" check "$out/nograd.gptrace" | head -3 || true

echo
echo "Traces and reports are in $out; try:"
echo "  $gradprof report $out/grad.gptrace"
echo "  $gradprof report $out/grad.gptrace --format html -o $out/grad.html"
