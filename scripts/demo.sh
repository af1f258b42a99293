#!/usr/bin/env bash
# The demo: installs what is missing, builds (Release), then runs examples/mlp_infer with grad on
# and with grad off and prints, per memory category, what leaving grad on costs.
#   scripts/demo.sh [mlp_infer options, e.g. --layers 16 --width 1024]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/bootstrap.sh"
gradprof_bootstrap

build="$root/build-release"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DGRADPROF_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" -j"$(nproc)" --target mlp_infer >/dev/null

args=("$@")
[ ${#args[@]} -gt 0 ] || args=(--layers 8 --width 1024 --batch 64 --iters 10)
on="$("$build/examples/mlp_infer" --grad "${args[@]}")"
off="$("$build/examples/mlp_infer" --no-grad "${args[@]}")"
printf '%s\n\n%s\n\n' "$on" "$off"

echo "grad on vs grad off (bytes; live = held while the last output is alive)"
paste <(printf '%s\n' "$on" | awk '/^[a-z_]+ +[0-9]+ +[0-9]+$/') \
      <(printf '%s\n' "$off" | awk '/^[a-z_]+ +[0-9]+ +[0-9]+$/') |
awk 'BEGIN { printf "%-16s %14s %14s %14s\n", "category", "live on", "live off", "held by grad" }
     { d = $2 - $5; printf "%-16s %14d %14d %+14d\n", $1, $2, $5, d }'
