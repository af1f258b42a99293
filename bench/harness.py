#!/usr/bin/env python3
"""bench/harness.py — runs every benchmark of issue 7 and writes bench/RESULTS.md and
bench/results.json. Called by bench/run.sh after it builds Release; standard library only
(PyTorch is run as a subprocess with /usr/bin/python3, which has Debian's python3-torch).

Every figure is a ratio of configurations measured side by side in this run: the configurations
are interleaved run by run (one run of each, then the next round), after one warm-up round, and
each time is the median of RUNS rounds.
"""
import ctypes
import datetime
import glob
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("BUILD", "/tmp/build-bench")
RUNS = int(os.environ.get("RUNS", "5"))
SMOKE = bool(os.environ.get("SMOKE"))  # tiny sizes, to test the harness itself
# SECTIONS: which parts run (comma-separated; default all): overhead, analysis, analysis_targets,
# big_report, tensor, perf. SECTIONS=issue15 is the issue-15 table: the storm and the PyTorch
# MLP overhead, report/diff against heaptrack_print, the 100M-event report, perf of the misses.
SECTIONS = set(os.environ.get("SECTIONS", "all").split(","))
if "issue15" in SECTIONS:
    SECTIONS |= {"overhead:storm", "overhead:torch", "analysis_targets", "big_report", "perf15"}
if "all" in SECTIONS:
    SECTIONS |= {"overhead", "analysis", "analysis_targets", "big_report", "tensor", "perf",
                 "perf15"}
BIG_N = "200000" if SMOKE else "25000000"  # allocations per thread: 2 x 2 x 25 M = 100 M events
TORCH_PY = "/usr/bin/python3"
GP = os.path.join(BUILD, "tools", "gradprof")
# "(stacks)" rows ask for stacks by name: a Python program is recorded without them by default
STACKS = ["--stack-depth", str(32)]
THREADS = "1"
ENV = dict(os.environ, OPENBLAS_NUM_THREADS=THREADS, OMP_NUM_THREADS=THREADS,
           MKL_NUM_THREADS=THREADS)


def openblas_core():
    """OpenBLAS's kernels for this CPU: (the core it detects, the core the bench sets instead or
    None). OpenBLAS 0.3.21 takes some virtual machines' AVX-512 Xeons for a Prescott and runs its
    generic SSE3 kernels, three times slower, while PyTorch's convolutions (oneDNN) detect the CPU
    themselves: there the bench sets OPENBLAS_CORETYPE (SkylakeX with AVX-512, Haswell with AVX2)
    for every process, both sides of every comparison alike."""
    try:
        lib = ctypes.CDLL("libopenblas.so.0")
        lib.openblas_get_corename.restype = ctypes.c_char_p
        core = lib.openblas_get_corename().decode()
    except (OSError, AttributeError):
        return None, None
    with open("/proc/cpuinfo") as f:
        flags = next((l.split(":", 1)[1].split() for l in f if l.startswith("flags")), [])
    generic = core.lower() in ("prescott", "core2", "penryn", "dunnington", "nehalem", "atom",
                               "katmai", "coppermine", "northwood", "banias")
    if not generic or "OPENBLAS_CORETYPE" in os.environ:
        return core, None
    return core, "SkylakeX" if "avx512f" in flags else "Haswell" if "avx2" in flags else None


OPENBLAS_CORE, OPENBLAS_FORCED = openblas_core()
if OPENBLAS_FORCED:
    ENV["OPENBLAS_CORETYPE"] = OPENBLAS_FORCED
WORK = tempfile.mkdtemp(prefix="gradprof-bench.")
COMMANDS = []  # every command line, for RESULTS.md
RESULTS = {}


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def have(tool):
    return shutil.which(tool) is not None


def torch_ok():
    try:
        return subprocess.run([TORCH_PY, "-c", "import torch"], capture_output=True,
                              timeout=120).returncode == 0
    except Exception:
        return False


def timed(cmd, timeout=600, env=None):
    """Runs cmd under /usr/bin/time (with `env` added to ENV); returns (wall s, max RSS bytes,
    stdout) or None on failure."""
    tf = os.path.join(WORK, "time.out")
    t0 = time.monotonic()
    try:
        p = subprocess.run(["/usr/bin/time", "-o", tf, "-f", "%M"] + cmd,
                           env=dict(ENV, **env) if env else ENV,
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=timeout,
                           cwd=WORK)
    except subprocess.TimeoutExpired:
        return None
    wall = time.monotonic() - t0
    if p.returncode != 0:
        return None
    with open(tf) as f:
        rss = int(f.read().split()[-1]) * 1024
    return wall, rss, p.stdout.decode(errors="replace")


def clean(prefix):
    for f in os.listdir(WORK):
        if f.startswith(prefix):
            os.unlink(os.path.join(WORK, f))


def interleave(configs, runs=RUNS, warmup=True):
    """configs: list of (name, cmd, files_prefix_or_None). Returns {name: {wall, rss, walls}}."""
    out = {n: {"walls": [], "rsss": []} for n, _, _ in configs}
    rounds = ([True] if warmup else []) + [False] * runs
    for warm in rounds:
        for name, cmd, prefix in configs:
            r = timed(cmd)
            if prefix:
                clean(prefix)
            if r is None:
                out[name]["failed"] = True
                continue
            if not warm:
                out[name]["walls"].append(r[0])
                out[name]["rsss"].append(r[1])
    for n, d in out.items():
        if d["walls"]:
            d["wall"] = statistics.median(d["walls"])
            d["rss"] = statistics.median(d["rsss"])
    return out


def shell(cmd):
    return " ".join(c if re.fullmatch(r"[\w./%=:,+-]+", c) else "'%s'" % c for c in cmd)


# ------------------------------------------------------------------------------------------------
def machine():
    cpu = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem = int(f.readline().split()[1]) * 1024
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain"],
                           capture_output=True, text=True).stdout.strip()
    ver = lambda c: (subprocess.run(c, capture_output=True, text=True).stdout.strip() or
                     "not available").splitlines()[0] if have(c[0]) else "not available"
    return {"nproc": os.cpu_count(), "cpu": cpu, "memory_bytes": mem,
            "date_utc": datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"),
            "commit": commit + (" (+ uncommitted changes)" if dirty else ""),
            "kernel": platform.release(), "threads": THREADS,
            "openblas_core": OPENBLAS_CORE, "openblas_coretype": OPENBLAS_FORCED,
            "heaptrack": ver(["heaptrack", "--version"]),
            "valgrind": ver(["valgrind", "--version"]),
            "torch": subprocess.run([TORCH_PY, "-c", "import torch;print(torch.__version__)"],
                                    capture_output=True, text=True).stdout.strip()
            if torch_ok() else "not available"}


def trace_events(path):
    """Event count from gradprof report --format json (header), else None."""
    p = subprocess.run([GP, "report", path, "--format", "json"], capture_output=True, text=True)
    try:
        j = json.loads(p.stdout)
    except Exception:
        return None
    def find(o):
        if isinstance(o, dict):
            for k, v in o.items():
                if k in ("events", "event_count") and isinstance(v, int):
                    return v
                r = find(v)
                if r is not None:
                    return r
        return None
    return find(j)


# heaptrack takes 30-60 s over cmake's 0.2 s: left out of that program's rounds
CMAKE_HELP = "cmake --help-full"


def overhead():
    res = {}
    mb = os.path.join(BUILD, "bench", "malloc_bench")
    mi = os.path.join(BUILD, "examples", "mlp_infer")
    progs = [("malloc_bench", [mb, "20000" if SMOKE else "1000000", "2"])]
    if "overhead" in SECTIONS:
        progs.append(("mlp_infer", [mi, "--iters", "1" if SMOKE else "10"]))
        # a program nobody here wrote: Debian's cmake (C++, no frame pointers), 250 k allocations
        if have("cmake"):
            progs.append((CMAKE_HELP, ["cmake", "--help-full"]))
    if "overhead" not in SECTIONS and "overhead:torch" not in SECTIONS:
        pass
    elif torch_ok():
        progs.append(("torch_mlp_infer", [TORCH_PY, os.path.join(ROOT, "bench",
                                                                  "torch_mlp_infer.py"), "20"]))
    else:
        res["torch_mlp_infer"] = {"note": "not available (no torch in /usr/bin/python3)"}
    # massif runs the BLAS kernels ~150x slower: it gets a smaller mlp_infer, with its own
    # unprofiled baseline interleaved with it
    if "overhead" in SECTIONS:
        progs.append(("mlp_infer, massif size", [mi, "--width", "256", "--iters",
                                             "1" if SMOKE else "3"]))
    for name, cmd in progs:
        log("overhead:", name)
        if name == "mlp_infer, massif size":
            if not have("valgrind"):
                res[name] = {"note": "valgrind not available"}
                continue
            cfgs = [("unprofiled", cmd, None), ("valgrind massif", [
                "valgrind", "--tool=massif", "--massif-out-file=" +
                os.path.join(WORK, "massif.out")] + cmd, "massif")]
            d = interleave(cfgs, warmup=False)
            d["valgrind massif"]["ratio"] = d["valgrind massif"].get("wall", 0) / d[
                "unprofiled"]["wall"]
            d["valgrind massif"]["rss_delta"] = d["valgrind massif"].get("rss", 0) - d[
                "unprofiled"]["rss"]
            d["unprofiled"]["ratio"] = 1.0
            d["unprofiled"]["rss_delta"] = 0
            res[name] = {"command": shell(cmd), "configs": d}
            for c in cfgs:
                COMMANDS.append(shell(c[1]))
            continue
        cfgs = [("unprofiled", cmd, None),
                ("gradprof run (stacks)", [GP, "run"] + STACKS + ["-o",
                                           os.path.join(WORK, "s.gptrace"), "--"] + cmd,
                 "s.gptrace"),
                ("gradprof run --no-stacks", [GP, "run", "--no-stacks", "-o",
                                              os.path.join(WORK, "n.gptrace"), "--"] + cmd,
                 "n.gptrace")]
        use_heaptrack = have("heaptrack") and name != CMAKE_HELP
        if use_heaptrack:
            cfgs.append(("heaptrack", ["heaptrack", "-o", os.path.join(WORK, "h")] + cmd, "h"))
        d = interleave(cfgs)
        if not use_heaptrack:
            d["heaptrack"] = {"note": "not available" if not have("heaptrack") else
                              "left out: 30-60 s a run"}
        # trace size per event: one more run each, kept
        sizes = {}
        for lab, extra in (("gradprof run (stacks)", STACKS),
                           ("gradprof run --no-stacks", ["--no-stacks"])):
            t = os.path.join(WORK, "size.gptrace")
            subprocess.run([GP, "run"] + extra + ["-o", t, "--"] + cmd, env=ENV,
                           capture_output=True, cwd=WORK)
            if os.path.exists(t):
                ev = trace_events(t)
                sz = os.path.getsize(t)
                d[lab]["trace_bytes"] = sz
                d[lab]["events"] = ev
                d[lab]["bytes_per_event"] = sz / ev if ev else None
                os.unlink(t)
        if use_heaptrack:
            subprocess.run(["heaptrack", "-o", os.path.join(WORK, "hs")] + cmd, env=ENV,
                           capture_output=True, cwd=WORK)
            hs = [f for f in os.listdir(WORK) if f.startswith("hs")]
            if hs:
                d["heaptrack"]["trace_bytes"] = os.path.getsize(os.path.join(WORK, hs[0]))
                ev = d["gradprof run --no-stacks"].get("events")
                d["heaptrack"]["bytes_per_event"] = (d["heaptrack"]["trace_bytes"] / ev
                                                     if ev else None)
            clean("hs")
        base = d["unprofiled"].get("wall")
        for lab, v in d.items():
            if "wall" in v and base:
                v["ratio"] = v["wall"] / base
                v["rss_delta"] = v["rss"] - d["unprofiled"]["rss"]
                v["rss_ratio"] = v["rss"] / d["unprofiled"]["rss"]
        res[name] = {"command": shell(cmd), "configs": d}
        for c in cfgs:
            COMMANDS.append(shell(c[1]))
    return res


def analysis():
    log("analysis: recording the big traces")
    cmd = [os.path.join(BUILD, "bench", "malloc_bench"),
           "20000" if SMOKE else "1000000", "2"]
    a = os.path.join(WORK, "big.gptrace")
    b = os.path.join(WORK, "big2.gptrace")
    for t in (a, b):
        subprocess.run([GP, "run", "-o", t, "--", *cmd], env=ENV, capture_output=True, cwd=WORK)
    ev = trace_events(a)
    cfgs = [("gradprof report", [GP, "report", a, "-o", os.path.join(WORK, "r.txt")], None),
            ("gradprof diff", [GP, "diff", a, b, "-o", os.path.join(WORK, "d.txt")], None)]
    COMMANDS.append(shell([GP, "run", "-o", a, "--", *cmd]))
    res = {"program": shell(cmd), "events": ev, "trace_bytes": os.path.getsize(a)}
    if have("heaptrack") and have("heaptrack_print"):
        subprocess.run(["heaptrack", "-o", os.path.join(WORK, "bigh"), *cmd], env=ENV,
                       capture_output=True, cwd=WORK)
        h = [f for f in os.listdir(WORK) if f.startswith("bigh")]
        if h:
            h = os.path.join(WORK, h[0])
            res["heaptrack_trace_bytes"] = os.path.getsize(h)
            cfgs.append(("heaptrack_print", ["heaptrack_print", "-f", h], None))
            COMMANDS.append(shell(["heaptrack", "-o", os.path.join(WORK, "bigh"), *cmd]))
    else:
        res["heaptrack_print"] = "not available"
    log("analysis: timing")
    d = interleave(cfgs)
    for lab, v in d.items():
        if "wall" in v and ev:
            v["events_per_s"] = (ev * (2 if lab == "gradprof diff" else 1)) / v["wall"]
    if "heaptrack_print" in d and "wall" in d["heaptrack_print"]:
        for lab in ("gradprof report", "gradprof diff"):
            if "wall" in d[lab]:
                d[lab]["speedup_vs_heaptrack_print"] = d["heaptrack_print"]["wall"] / d[lab]["wall"]
    res["configs"] = d
    for c in cfgs:
        COMMANDS.append(shell(c[1]))
    return res


def big_report():
    """`gradprof report` of a 100M-event trace (the storm with 25 M allocations per thread),
    against heaptrack_print of heaptrack's trace of the same program. Fewer rounds (at most 3,
    no warm-up): one report takes tens of seconds."""
    mb = os.path.join(BUILD, "bench", "malloc_bench")
    cmd = [mb, BIG_N, "2"]
    a = os.path.join(WORK, "big100m.gptrace")
    rc = [GP, "run", "-o", a, "--"] + cmd
    log("big report: recording", shell(rc))
    t0 = time.monotonic()
    subprocess.run(rc, env=ENV, capture_output=True, cwd=WORK)
    res = {"program": shell(cmd), "record_s": time.monotonic() - t0}
    if not os.path.exists(a):
        res["note"] = "recording failed"
        return res
    COMMANDS.append(shell(rc))
    res["events"] = trace_events(a)
    res["trace_bytes"] = os.path.getsize(a)
    cfgs = [("gradprof report", [GP, "report", a, "-o", os.path.join(WORK, "big.txt")], None)]
    if have("heaptrack") and have("heaptrack_print"):
        hc = ["heaptrack", "-o", os.path.join(WORK, "bigh100m")] + cmd
        log("big report: recording", shell(hc))
        subprocess.run(hc, env=ENV, capture_output=True, cwd=WORK)
        h = [f for f in os.listdir(WORK) if f.startswith("bigh100m")]
        if h:
            h = os.path.join(WORK, h[0])
            res["heaptrack_trace_bytes"] = os.path.getsize(h)
            cfgs.append(("heaptrack_print", ["heaptrack_print", h], None))
            COMMANDS.append(shell(hc))
    for c in cfgs:
        COMMANDS.append(shell(c[1]))
    log("big report: timing")
    d = interleave(cfgs, runs=min(RUNS, 3), warmup=False)
    for lab, v in d.items():
        if "wall" in v and res["events"]:
            v["events_per_s"] = res["events"] / v["wall"]
    res["configs"] = d
    res["report_cmd"] = cfgs[0][1]  # the traces stay in WORK for perf of a miss
    return res


def issue15_rows():
    """The issue-15 table: (row, figure, target, met or None, command, perf command or None)."""
    rows = []
    ov = RESULTS.get("overhead", {})
    def cfg(prog, c):
        return ov.get(prog, {}).get("configs", {}).get(c, {})
    mb = ov.get("malloc_bench", {})
    if "configs" in mb:
        base = cfg("malloc_bench", "unprofiled")
        for c, tgt, lim in (("gradprof run (stacks)", "<= 4x plain", 4.0),
                            ("gradprof run --no-stacks", "<= 2x plain", 2.0)):
            r = cfg("malloc_bench", c).get("ratio")
            cmd = [GP, "run"] + (["--no-stacks"] if "no-stacks" in c else STACKS) + [
                "-o", "$WORK/s.gptrace", "--"] + mb["command"].split()
            rows.append(("storm, %s" % c, "%sx (%.3f s vs plain %.3f s)" % (
                "%.2f" % r if r else "n/a", cfg("malloc_bench", c).get("wall", 0),
                base.get("wall", 0)), tgt, None if r is None else r <= lim, shell(cmd), cmd))
        g, h = cfg("malloc_bench", "gradprof run (stacks)").get("ratio"), cfg(
            "malloc_bench", "heaptrack").get("ratio")
        if g and h:
            rows.append(("storm, heaptrack (for the row below)", "%.2fx" % h, "reference", None,
                         "heaptrack -o $WORK/h " + mb["command"], None))
            rows.append(("storm: gradprof (stacks) overhead / heaptrack's overhead",
                         "%.3f ((%.2f - 1) / (%.2f - 1))" % ((g - 1) / (h - 1), g, h),
                         "<= 1/6 (0.167)", (g - 1) / (h - 1) <= 1 / 6, "(the two rows above)",
                         None))
    tm = ov.get("torch_mlp_infer", {})
    if "configs" in tm:
        for c, tgt, lim in (("gradprof run (stacks)", "default mode: <= 1.5x time and RSS", 1.5),
                            ("gradprof run --no-stacks",
                             "recommended mode: <= 1.1x time and RSS", 1.1),
                            ("heaptrack", "reference", None)):
            v = cfg("torch_mlp_infer", c)
            r, rr = v.get("ratio"), v.get("rss_ratio")
            fig = ("time %.2fx, peak RSS %.2fx (%.0f vs %.0f MiB)" % (
                r, rr, v["rss"] / 1048576, cfg("torch_mlp_infer", "unprofiled")["rss"] / 1048576)
                   if r and rr else "n/a")
            ok = None if lim is None or r is None else (r <= lim and rr <= lim)
            if c == "heaptrack":
                cmd = ["heaptrack", "-o", "$WORK/h"] + tm["command"].split()
            else:
                cmd = [GP, "run"] + (["--no-stacks"] if "no-stacks" in c else STACKS) + [
                    "-o", "$WORK/s.gptrace", "--"] + tm["command"].split()
            rows.append(("PyTorch MLP (bench/torch_mlp_infer.py 20), %s" % c, fig, tgt, ok,
                         shell(cmd), cmd if ok is False else None))
    at = RESULTS.get("analysis_targets")
    if at:
        import analysis_bench
        for t, ok, fig in analysis_bench.targets(at):
            prog = t.split(":")[0]
            what = "gradprof diff" if "`diff`" in t else "gradprof report"
            cmd = next((c for c in COMMANDS if c.startswith(GP + " " + what.split()[1])
                        and ("pytorch" in c) == (prog == "pytorch")), "")
            rows.append((t, fig, "as named", ok, cmd, cmd.split() if ok is False else None))
    br = RESULTS.get("big_report", {})
    if "configs" in br:
        g, h = br["configs"].get("gradprof report", {}), br["configs"].get("heaptrack_print", {})
        if "wall" in g:
            fig = "%.1f s, %.3g events/s, peak RSS %.0f MiB" % (
                g["wall"], g.get("events_per_s", 0), g["rss"] / 1048576)
            ok = None
            if "wall" in h:
                fig += "; heaptrack_print %.1f s, %.0f MiB (time %.2fx, RSS %.2fx of it)" % (
                    h["wall"], h["rss"] / 1048576, g["wall"] / h["wall"], g["rss"] / h["rss"])
                ok = g["wall"] <= h["wall"] and g["rss"] <= 1.5 * h["rss"]
            rows.append(("`report` of a %s-event trace (%s)" % (br.get("events"), br["program"]),
                         fig, "time <= heaptrack_print's, RSS <= 1.5x its", ok,
                         shell(br["report_cmd"]), br["report_cmd"] if ok is False else None))
    T = RESULTS.get("tensor", {})
    for heap, how in (("default", "each process's own heap"),
                      ("fixed", "both on the same fixed glibc thresholds (%s)" % ", ".join(
                          "%s=%s" % e for e in FIXED_HEAP.items()))):
        ratios = {k: (row if heap == "default" else row.get("fixed", {})).get("time_ratio")
                  for k, row in T.items()}
        ratios = {k: r for k, r in ratios.items() if r is not None}
        if ratios:
            worst = max(ratios, key=ratios.get)
            over = ", ".join("%s %.2fx" % (k, r) for k, r in ratios.items() if r > 1.0)
            rows.append(("tensor library vs PyTorch CPU, 1 thread, every model and mode, %s" % how,
                         "worst %.2fx (%s); over 1.0x: %s" % (ratios[worst], worst, over or "none"),
                         "<= 1.0x each", ratios[worst] <= 1.0,
                         "(section 3: tensor_bench and torch_bench.py, MODEL MODE 20)", None))
    return rows


def kv(s):
    return {k: float(v) for k, v in re.findall(r"(\w+)=([\d.]+)", s)}


# The tensor rows run twice: each process with glibc's malloc as it starts (its heap state: the
# tensor library keeps its freed buffers in its cache for the next step, README "Speed in a
# loop"; PyTorch's CPU allocator gives them to malloc, and a Python process that imported torch
# has moved glibc's dynamic mmap threshold up and keeps objects above the tensors, so its heap is
# not trimmed), and both with the same fixed thresholds, which compares the libraries' compute
# alone.
FIXED_HEAP = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(128 << 20)}


def tensors():
    have_torch = torch_ok()
    tb = os.path.join(BUILD, "bench", "tensor_bench")
    tp = os.path.join(ROOT, "bench", "torch_bench.py")
    cases = [(m, mo) for m in ("mlp", "cnn", "transformer")
             for mo in ("grad", "no_grad", "inference_mode", "train")]
    iters = "2" if SMOKE else "20"
    res = {}
    for m, mo in cases:
        log("tensor vs torch:", m, mo)
        sides = [("ours", [tb, m, mo, iters])]
        if have_torch:
            sides.append(("torch", [TORCH_PY, tp, m, mo, iters, THREADS]))
        cfgs = [(heap, n, c) for heap in ("default", "fixed") for n, c in sides]
        out = {(heap, n): [] for heap, n, _ in cfgs}
        for warm in [True] + [False] * RUNS:
            for heap, n, c in cfgs:
                r = timed(c, env=FIXED_HEAP if heap == "fixed" else None)
                if r and not warm:
                    out[heap, n].append(kv(r[2]))
        row = {}
        for heap in ("default", "fixed"):
            h = row if heap == "default" else row.setdefault("fixed", {})
            for n, _ in sides:
                rs = out[heap, n]
                if rs:
                    h[n] = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
            if not have_torch:
                h["torch"] = "not available"
            if "ours" in h and isinstance(h.get("torch"), dict):
                h["time_ratio"] = h["ours"]["ms"] / h["torch"]["ms"]
                h["hwm_ratio"] = (h["ours"]["hwm"] / h["torch"]["hwm"]
                                  if h["torch"]["hwm"] else None)
        res["%s/%s" % (m, mo)] = row
        for _, c in sides:
            COMMANDS.append(shell(c))
            COMMANDS.append(shell(["%s=%s" % e for e in FIXED_HEAP.items()] + c))
    return res


def remove_output(cmd):
    """The trace a `gradprof run -o PATH` command writes, and PATH.N of the other processes it
    starts: gone, since gradprof never writes over a trace."""
    if "-o" in cmd:
        path = cmd[cmd.index("-o") + 1]
        for f in glob.glob(glob.escape(path) + "*"):
            os.unlink(f)


def perf_profile(cmd, label):
    """perf record/report of one command: the top self-time symbols (for the missed targets)."""
    if not have("perf"):
        return "perf not available"
    data = os.path.join(WORK, "perf.data")
    remove_output(cmd)
    r = subprocess.run(["perf", "record", "-q", "-g", "-o", data, "--"] + cmd, env=ENV,
                       capture_output=True, cwd=WORK, timeout=300)
    remove_output(cmd)
    if r.returncode != 0:
        return "perf record failed: " + r.stderr.decode(errors="replace")[-300:]
    rep = subprocess.run(["perf", "report", "-i", data, "--no-children", "--stdio", "-g", "none",
                          "--percent-limit", "2", "--sort", "dso,symbol"],
                         capture_output=True, text=True, cwd=WORK)
    os.unlink(data)
    lines = [re.sub(r"\s+-\s+-\s*$", "", l).rstrip() for l in rep.stdout.splitlines()
             if l.strip() and not l.startswith("#")]
    COMMANDS.append("perf record -g -- " + shell(cmd) + "  # " + label)
    return "\n".join(lines[:14])


def main():
    t0 = time.monotonic()
    RESULTS["machine"] = machine()
    RESULTS["runs"] = RUNS
    RESULTS["fixed_heap"] = FIXED_HEAP
    RESULTS["sections"] = sorted(SECTIONS)
    if SECTIONS & {"overhead", "overhead:storm", "overhead:torch"}:
        RESULTS["overhead"] = overhead()
    if "analysis" in SECTIONS:
        RESULTS["analysis"] = analysis()
    if ("analysis_targets" in SECTIONS and have("heaptrack") and have("heaptrack_print") and
            torch_ok() and not SMOKE):
        import analysis_bench  # issues 11 and 15: report vs heaptrack_print, diff vs report
        log("analysis against heaptrack_print")
        os.environ["KEEP_TRACES"] = os.path.join(WORK, "analysis")  # for perf of a miss
        RESULTS["analysis_targets"] = analysis_bench.run(BUILD, RUNS, COMMANDS)
    if "big_report" in SECTIONS:
        RESULTS["big_report"] = big_report()
    if "tensor" in SECTIONS:
        RESULTS["tensor"] = tensors()
    rows = issue15_rows()
    RESULTS["issue15"] = [r[:5] for r in rows]
    if "perf15" in SECTIONS:
        log("perf profiles of the issue-15 rows that miss their targets")
        RESULTS["perf15"] = {}
        done = {}
        for name, _, _, ok, _, cmd in rows:
            if ok is False and cmd:
                cmd = [c.replace("$WORK", WORK) for c in cmd]
                if shell(cmd) in done:  # the same command missed another target too
                    RESULTS["perf15"][name] = {"command": shell(cmd), "excerpt":
                                               "(the same command as \"%s\" above)" % done[shell(cmd)]}
                    continue
                done[shell(cmd)] = name
                RESULTS["perf15"][name] = {"command": shell(cmd),
                                           "excerpt": perf_profile(cmd, name)}
    if "perf" not in SECTIONS:
        RESULTS["elapsed_s"] = time.monotonic() - t0
        finish()
        return
    log("perf profiles")
    RESULTS["perf"] = {
        "malloc_bench under gradprof run (stacks)": perf_profile(
            [GP, "run", "-o", os.path.join(WORK, "p.gptrace"), "--",
             os.path.join(BUILD, "bench", "malloc_bench"), "1000000", "2"], "overhead (a)"),
        "tensor_bench cnn no_grad": perf_profile(
            [os.path.join(BUILD, "bench", "tensor_bench"), "cnn", "no_grad", "20"], "cnn"),
        "tensor_bench mlp no_grad": perf_profile(
            [os.path.join(BUILD, "bench", "tensor_bench"), "mlp", "no_grad", "20"], "mlp"),
    }
    RESULTS["elapsed_s"] = time.monotonic() - t0
    finish()


def finish():
    with open(os.path.join(ROOT, "bench", "results.json"), "w") as f:
        json.dump({**RESULTS, "commands": COMMANDS}, f, indent=1, default=str)
    import render_results
    render_results.write(RESULTS, COMMANDS, os.path.join(ROOT, "bench", "RESULTS.md"))
    shutil.rmtree(WORK, ignore_errors=True)
    log("done in %.0f s" % RESULTS["elapsed_s"])


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
