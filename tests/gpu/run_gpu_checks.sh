#!/usr/bin/env bash
# The GPU checks of issue 6, in one prepared script for a machine with an NVIDIA GPU and the CUDA
# toolkit (nvcc, CUPTI) at /usr/local/cuda. It builds gradprof with the CUPTI module, then:
#   1. known:    tests/gpu/cuda_alloc_known.c (built with nvcc) under `gradprof run --cuda`; the
#                trace must hold exactly its cudaMalloc / cudaMallocAsync / cudaMallocHost counts
#                and bytes on the right device, the 6 MiB leak, and symbolized stacks naming its
#                alloc_*_site functions (checked on `gradprof report --format json`);
#   2. torch:    tests/gpu/torch_mlp.py (a CUDA MLP eval loop) grad vs no_grad under
#                PYTORCH_NO_CUDA_MEMORY_CACHING=1, with `gradprof diff` and `gradprof check`; the
#                grad run's cuda:0 peak must exceed the no_grad run's, and the PyTorch helper
#                must have tagged the CUDA tensors (parameter and saved bytes on cuda:0 with grad
#                on, no saved ones with no_grad); plus one grad run with the
#                caching allocator (segments only) for comparison;
#   3. overhead: the MLP loop's wall time under `gradprof run --cuda` / without, with and without
#                the caching allocator.
# Results go to $OUT (or tests/gpu/out): gpu_results.json (figures, pass/fail per check),
# gpu_checks.log, known_report.json, mlp_diff.txt, mlp_check.txt (at most 8 files).
# Exit status: 0 all checks passed, 1 a check failed, 2 could not build or no GPU.
#
# Build dependencies are the project's (libunwind, OpenBLAS, libdw/libelf; cmocka only for the
# unit tests). If the machine lacks them and cannot reach a package registry, put the Debian
# .deb files in <repo>/.gpu-debs (apt-get download libunwind-dev libunwind8 libopenblas-dev
# libopenblas0-pthread libopenblas-pthread-dev libdw-dev libdw1 libelf-dev libelf1 zlib1g-dev
# liblzma-dev pkg-config ... ) and carry that folder: they are unpacked under /tmp/gpdeps, never /.
set -u -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-$ROOT/tests/gpu/out}
BUILD=${GRADPROF_GPU_BUILD:-/tmp/gradprof-gpu-build}
WORK=${GRADPROF_GPU_WORK:-/tmp/gradprof-gpu-work}
PY=${PYTHON:-python3}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 8)}
mkdir -p "$OUT" "$WORK"
exec > >(tee "$OUT/gpu_checks.log") 2>&1
export PYTHONUNBUFFERED=1
RESULTS="$WORK/results.tsv"
: >"$RESULTS"
result() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$RESULTS"; echo "== $1: $2 ${3:+($3)}"; }
finish() {
    "$PY" - "$RESULTS" "$OUT/gpu_results.json" "$WORK" <<'PYEOF'
import json, os, sys
rows = [l.rstrip("\n").split("\t", 2) for l in open(sys.argv[1]) if l.strip()]
res = {"checks": {k: {"status": s, "detail": d} for k, s, d in rows}}
for name in ("known_figures.json", "mlp_figures.json", "overhead.json", "env.json"):
    p = os.path.join(sys.argv[3], name)
    if os.path.exists(p):
        res[name[:-5]] = json.load(open(p))
res["passed"] = all(s in ("PASS", "INFO") for _, s, _ in rows)
json.dump(res, open(sys.argv[2], "w"), indent=2)
print(json.dumps(res, indent=2))
PYEOF
}
die() { result "$1" FAIL "$2"; finish; exit "${3:-1}"; }

echo "== gradprof GPU checks, $(date -u +%FT%TZ), repo $ROOT"
# ---- 0. the machine ------------------------------------------------------------------------------
nvidia-smi -L || die setup "nvidia-smi found no GPU" 2
export PATH=/usr/local/cuda/bin:$PATH
NVCC=$(command -v nvcc || true)
[ -n "$NVCC" ] || die setup "no nvcc (expected /usr/local/cuda/bin/nvcc)" 2
"$NVCC" --version | tail -2
DRIVER=$(nvidia-smi --query-gpu=driver_version,name --format=csv,noheader | head -1)
TORCH=$("$PY" -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available())' 2>&1 | tail -1)
"$PY" - "$WORK/env.json" "$DRIVER" "$TORCH" "$("$NVCC" --version | tail -1)" <<'PYEOF'
import json, sys
json.dump({"gpu_driver": sys.argv[2], "torch": sys.argv[3], "nvcc": sys.argv[4]}, open(sys.argv[1], "w"))
PYEOF
echo "driver: $DRIVER; torch: $TORCH"

# ---- 1. build -----------------------------------------------------------------------------------
CMAKE_EXTRA=()
if [ -d "$ROOT/.gpu-debs" ]; then
    echo "== unpacking $(ls "$ROOT"/.gpu-debs/*.deb | wc -l) .deb files under /tmp/gpdeps"
    for f in "$ROOT"/.gpu-debs/*.deb; do dpkg -x "$f" /tmp/gpdeps; done
    MA=/tmp/gpdeps/usr/lib/x86_64-linux-gnu
    export PKG_CONFIG_PATH=$MA/pkgconfig:/tmp/gpdeps/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
    export LD_LIBRARY_PATH=$MA:$MA/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    [ -x /tmp/gpdeps/usr/bin/pkg-config ] && export PATH=$PATH:/tmp/gpdeps/usr/bin
    CMAKE_EXTRA+=(-DCMAKE_PREFIX_PATH=/tmp/gpdeps/usr -DCMAKE_LIBRARY_PATH="$MA;$MA/openblas-pthread"
                  -DCMAKE_INCLUDE_PATH=/tmp/gpdeps/usr/include -DPKG_CONFIG_ARGN=--define-prefix)
fi
for pc in libunwind libdw cmocka; do
    printf 'pkg-config %s: %s\n' "$pc" "$(pkg-config --modversion "$pc" 2>&1 | head -1)"
done
TESTS=OFF
pkg-config --exists cmocka 2>/dev/null && TESTS=ON
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGRADPROF_BUILD_BENCH=OFF \
    -DGRADPROF_BUILD_EXAMPLES=OFF -DGRADPROF_BUILD_TESTS=$TESTS -DGRADPROF_CUPTI=ON \
    -DCUDAToolkit_ROOT=/usr/local/cuda "${CMAKE_EXTRA[@]}" >"$WORK/cmake.log" 2>&1 ||
    { tail -30 "$WORK/cmake.log"; die build "cmake configure failed (missing dependencies? see the log)" 2; }
grep 'gradprof: CUPTI module' "$WORK/cmake.log"
grep -q 'CUPTI module ON' "$WORK/cmake.log" || die build "CUPTI not found by CMake" 2
TARGETS=(gradprof prof_preload prof_cupti)
[ "$TESTS" = ON ] && TARGETS+=(test_cupti)
cmake --build "$BUILD" -j "$JOBS" --target "${TARGETS[@]}" >"$WORK/build.log" 2>&1 ||
    { tail -40 "$WORK/build.log"; die build "build failed" 2; }
GP=$BUILD/tools/gradprof
[ -f "$BUILD/libprof/libprof_cupti.so" ] ||
    die build "libprof_cupti.so not built: is include(libprof/cupti.cmake) in CMakeLists.txt?" 2
"$NVCC" -g -O1 -Xcompiler -fno-omit-frame-pointer -o "$WORK/cuda_alloc_known" \
    "$ROOT/tests/gpu/cuda_alloc_known.c" || die build "nvcc failed on cuda_alloc_known.c" 2
result build PASS "$(basename "$NVCC") + cmake; unit tests $TESTS"
if [ "$TESTS" = ON ]; then
    (cd "$BUILD" && ./tests/test_cupti) >"$WORK/test_cupti.log" 2>&1 &&
        result test_cupti PASS "" || { tail -30 "$WORK/test_cupti.log"; result test_cupti FAIL "see log"; }
fi

# ---- 2. known allocations -----------------------------------------------------------------------
rm -f "$WORK"/known.*.gptrace
GRADPROF_CUDA_VERBOSE=1 "$GP" run --cuda -o "$WORK/known.%p.gptrace" -- "$WORK/cuda_alloc_known" \
    >"$WORK/known_expected.json" 2>"$WORK/known_run.err"
rc=$?
cat "$WORK/known_run.err" "$WORK/known_expected.json"
KNOWN=$(ls "$WORK"/known.*.gptrace 2>/dev/null | head -1)
if [ $rc -ne 0 ] || [ -z "$KNOWN" ]; then
    result known FAIL "cuda_alloc_known exited $rc under gradprof run --cuda"
else
    "$GP" report "$KNOWN" --format json --top 0 -o "$OUT/known_report.json"
    "$GP" report "$KNOWN" --top 20 >"$WORK/known_report.txt"
    "$PY" - "$OUT/known_report.json" "$WORK/known_expected.json" "$WORK/known_figures.json" <<'PYEOF'
import json, sys
rep = json.load(open(sys.argv[1])); exp = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])
MiB = 1 << 20
keys = {}
for k in rep["tag_keys"]:
    if k["op"] in ("cudaMalloc", "cudaMallocAsync", "cudaMallocHost"):
        d = keys.setdefault((k["op"], k["device"]), {"count": 0, "bytes": 0, "frees": 0})
        d["count"] += k["count"]; d["bytes"] += k["total_bytes"]; d["frees"] += k["frees"]
got = {f"{op}@{dev}": v for (op, dev), v in keys.items()}
problems = []
def want(op, dev, count, nbytes, frees):
    v = keys.get((op, dev))
    if not v:
        problems.append(f"no {op} on {dev}"); return
    if (v["count"], v["bytes"], v["frees"]) != (count, nbytes, frees):
        problems.append(f"{op} on {dev}: count {v['count']} bytes {v['bytes']} frees {v['frees']}, "
                        f"expected {count} {nbytes} {frees}")
want("cudaMalloc", "cuda:0", exp["cudaMalloc"]["count"], exp["cudaMalloc"]["bytes"], 5)
want("cudaMallocAsync", "cuda:0", exp["cudaMallocAsync"]["count"], exp["cudaMallocAsync"]["bytes"], 3)
want("cudaMallocHost", "host", exp["cudaMallocHost"]["count"], exp["cudaMallocHost"]["bytes"], 1)
dev = {d["device"]: d for d in rep["devices"]}
cuda0 = dev.get("cuda:0", {})
if cuda0.get("live_at_end") != exp["leaked_device_bytes"]:
    problems.append(f"cuda:0 live at end {cuda0.get('live_at_end')}, expected {exp['leaked_device_bytes']}")
# Peak on cuda:0: the 5 sync buffers (15 MiB) are the largest set live at once? No: the async
# ones (27 MiB) are, if the stream-ordered frees come after all three allocations.
if cuda0.get("peak_bytes") != 27 * MiB:
    problems.append(f"cuda:0 peak {cuda0.get('peak_bytes')}, expected {27 * MiB}")
sites = {}
for s in rep["sites"]:
    if s["device"] == "cuda:0" or s["op"] in ("cudaMallocHost",):
        frames = " <- ".join(s["frames"])
        sites[s["label"]] = frames
names = " ".join(sites.values()) + " " + " ".join(sites)
for fn in ("alloc_sync_site", "alloc_async_site", "alloc_leaked_site", "alloc_pinned_site"):
    if fn not in names:
        problems.append(f"no symbolized site names {fn}")
fig = {"tag_keys": got, "devices": {k: {"peak_bytes": v["peak_bytes"], "live_at_end": v["live_at_end"]}
                                    for k, v in dev.items()},
       "device_sites": sites, "problems": problems}
json.dump(fig, open(sys.argv[3], "w"), indent=2)
print(json.dumps(fig, indent=2))
sys.exit(1 if problems else 0)
PYEOF
    if [ $? -eq 0 ]; then result known PASS "counts, bytes, devices, leak, peak and stacks exact"
    else result known FAIL "see known_figures.problems"; fi
fi

# ---- 3. PyTorch MLP grad vs no_grad --------------------------------------------------------------
MLP="$ROOT/tests/gpu/torch_mlp.py"
if ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    result torch FAIL "python3 has no CUDA torch"
else
    rm -f "$WORK"/mlp_*.gptrace
    for mode in grad nograd; do
        PYTORCH_NO_CUDA_MEMORY_CACHING=1 GRADPROF_CUDA_VERBOSE=1 "$GP" run --cuda \
            -o "$WORK/mlp_$mode.%p.gptrace" -- "$PY" "$MLP" $mode --iters 3 \
            >"$WORK/mlp_$mode.json" 2>"$WORK/mlp_$mode.err"
        echo "mlp $mode (no caching): exit $?"; cat "$WORK/mlp_$mode.err" "$WORK/mlp_$mode.json"
    done
    GRADPROF_CUDA_VERBOSE=1 "$GP" run --cuda -o "$WORK/mlp_cached.%p.gptrace" -- "$PY" "$MLP" grad \
        --iters 3 >"$WORK/mlp_cached.json" 2>"$WORK/mlp_cached.err"
    echo "mlp grad (caching allocator): exit $?"; cat "$WORK/mlp_cached.err"
    A=$(ls "$WORK"/mlp_grad.*.gptrace 2>/dev/null | head -1)
    B=$(ls "$WORK"/mlp_nograd.*.gptrace 2>/dev/null | head -1)
    C=$(ls "$WORK"/mlp_cached.*.gptrace 2>/dev/null | head -1)
    if [ -z "$A" ] || [ -z "$B" ]; then
        result torch FAIL "no trace from the MLP runs"
    else
        "$GP" diff "$A" "$B" --top 15 >"$OUT/mlp_diff.txt" 2>&1
        "$GP" diff "$A" "$B" --format json -o "$WORK/mlp_diff.json" 2>&1
        { echo "--- check grad (A)"; "$GP" check "$A"; echo "exit $?";
          echo "--- check nograd (B)"; "$GP" check "$B"; echo "exit $?";
          echo "--- check grad (A) --max-peak on the device is not per-device: see gpu_results"; } \
            >"$OUT/mlp_check.txt" 2>&1
        for t in "$A" "$B" ${C:+"$C"}; do
            "$GP" report "$t" --format json --top 5 -o "$t.report.json"
        done
        "$PY" - "$A.report.json" "$B.report.json" "${C:+$C.report.json}" "$WORK" <<'PYEOF'
import json, os, sys
def dev(path, name="cuda:0"):
    if not path or not os.path.exists(path):
        return None
    r = json.load(open(path))
    for d in r["devices"]:
        if d["device"] == name:
            keys = [k for k in r["tag_keys"] if k["device"] == name]
            # the PyTorch helper's tags on the device (gradprof_torch.py tags CUDA tensors under
            # PYTORCH_NO_CUDA_MEMORY_CACHING=1 with --cuda): bytes per category
            tagged = {}
            for k in keys:
                if k["category"] in ("parameter", "saved", "gradient"):
                    tagged[k["category"]] = tagged.get(k["category"], 0) + k["total_bytes"]
            return {"peak_bytes": d["peak_bytes"], "live_at_end": d["live_at_end"],
                    "cuda_allocs": sum(k["count"] for k in keys), "tagged_bytes": tagged}
    return {"peak_bytes": 0, "live_at_end": 0, "cuda_allocs": 0, "tagged_bytes": {}}
w = sys.argv[4]
torch_a = json.loads(open(os.path.join(w, "mlp_grad.json")).read().strip().splitlines()[-1])
torch_b = json.loads(open(os.path.join(w, "mlp_nograd.json")).read().strip().splitlines()[-1])
a, b, c = dev(sys.argv[1]), dev(sys.argv[2]), dev(sys.argv[3])
L, W, B = torch_a["layers"], torch_a["width"], torch_a["batch"]
fig = {"grad_no_caching": a, "nograd_no_caching": b, "grad_caching_allocator": c,
       "torch_max_memory_allocated": {"grad": torch_a["torch_max_memory_allocated"],
                                      "nograd": torch_b["torch_max_memory_allocated"]},
       "peak_delta_bytes": (a["peak_bytes"] - b["peak_bytes"]) if a and b else None,
       "activation_bytes_per_layer": B * W * 4, "layers": L}
json.dump(fig, open(os.path.join(w, "mlp_figures.json"), "w"), indent=2)
print(json.dumps(fig, indent=2))
# The helper tagged the CUDA tensors: parameters in both runs, saved activations only with grad
# on (torch_mlp.py's model is called in eval mode, so the helper's inference region is there too).
tags_ok = (a and b and a["tagged_bytes"].get("parameter", 0) > 0 and
           a["tagged_bytes"].get("saved", 0) > 0 and b["tagged_bytes"].get("saved", 0) == 0)
print("CUDA tensors tagged by the helper: %s" % ("yes" if tags_ok else "NO"))
sys.exit(0 if a and b and a["peak_bytes"] > b["peak_bytes"] and b["cuda_allocs"] > 0 and tags_ok
         else 1)
PYEOF
        if [ $? -eq 0 ]; then result torch PASS "grad peak on cuda:0 > no_grad peak, CUDA tensors tagged (parameter, saved); diff/check in mlp_diff.txt, mlp_check.txt"
        else result torch FAIL "see mlp_figures"; fi
    fi
fi

# ---- 4. overhead ----------------------------------------------------------------------------------
if "$PY" -c 'import torch' 2>/dev/null; then
    secs() { "$PY" -c 'import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])["seconds"])'; }
    declare -A T
    for alloc in caching nocaching; do
        envs=(); [ $alloc = nocaching ] && envs=(PYTORCH_NO_CUDA_MEMORY_CACHING=1)
        T[$alloc.plain]=$(env "${envs[@]}" "$PY" "$MLP" nograd --iters 200 | secs)
        T[$alloc.prof]=$(env "${envs[@]}" "$GP" run --cuda -o "$WORK/ovh_$alloc.%p.gptrace" -- \
            "$PY" "$MLP" nograd --iters 200 2>/dev/null | secs)
    done
    "$PY" - "$WORK/overhead.json" "${T[caching.plain]}" "${T[caching.prof]}" \
        "${T[nocaching.plain]}" "${T[nocaching.prof]}" <<'PYEOF'
import json, sys
v = [float(x) if x else None for x in sys.argv[2:6]]
r = lambda a, b: round(b / a, 3) if a and b else None
fig = {"what": "torch_mlp.py nograd, 200 timed iterations, seconds; ratio = under gradprof run --cuda / plain",
       "caching": {"plain_s": v[0], "profiled_s": v[1], "ratio": r(v[0], v[1])},
       "no_caching": {"plain_s": v[2], "profiled_s": v[3], "ratio": r(v[2], v[3])}}
json.dump(fig, open(sys.argv[1], "w"), indent=2)
print(json.dumps(fig, indent=2))
PYEOF
    result overhead INFO "see gpu_results.overhead"
fi

finish
grep -q $'\tFAIL\t' "$RESULTS" && exit 1
exit 0
