#!/usr/bin/env python3
"""bench/analysis_bench.py — the analysis targets of issues 11 and 15: `gradprof report` against
`heaptrack_print` on the same program's trace, and `gradprof diff` against one `report`.

    bench/analysis.sh             # builds Release into $BUILD, runs this, updates bench/RESULTS.md
    python3 bench/analysis_bench.py   # the same with an existing build in $BUILD

Programs: (a) the PyTorch MLP evaluation loop, `/usr/bin/python3 examples/pytorch/mlp.py`
recorded with `gradprof run --stack-depth 32` (stacks, as heaptrack records) and with `heaptrack`, twice for
gradprof (--grad and --no-grad, the diff's two runs); (b) the malloc storm
(`bench/malloc_bench 1000000 2`). Each analyzer runs under /usr/bin/time (wall, user + system
CPU, peak RSS = %M); the configurations are interleaved run by run, after one warm-up round, and
each figure is the median of RUNS rounds (default 5). Standard library only.

Environment: BUILD (default /tmp/build-bench), RUNS, RECORD_GP (the gradprof that records the
traces; default $BUILD's: recording is not what is measured here), KEEP_TRACES=dir (record into
dir and keep the traces; traces already there are reused).

Writes bench/results_analysis.json and the section between the "analysis-targets" markers of
bench/RESULTS.md (added after section 2 if missing); bench/render_results.py renders the same
section in a full `bench/run.sh`.
"""
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TORCH_PY = "/usr/bin/python3"
THREADS = "1"
BEGIN = "<!-- analysis-targets:begin -->"
END = "<!-- analysis-targets:end -->"
DIFF_RSS_TARGET = 400 * 1048576


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def shell(cmd):
    return " ".join(c if re.fullmatch(r"[\w./%=:,+-]+", c) else "'%s'" % c for c in cmd)


def env():
    return dict(os.environ, OPENBLAS_NUM_THREADS=THREADS, OMP_NUM_THREADS=THREADS,
                MKL_NUM_THREADS=THREADS)


def timed(cmd, work):
    """(wall s, cpu s, max RSS bytes) of cmd under /usr/bin/time, or None if it failed."""
    tf = os.path.join(work, "time.out")
    t0 = time.monotonic()
    p = subprocess.run(["/usr/bin/time", "-o", tf, "-f", "%U %S %M"] + cmd, env=env(),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=work)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        return None
    with open(tf) as f:
        u, s, m = f.read().split()[-3:]
    return wall, float(u) + float(s), int(m) * 1024


def record(cmds, path, what, work):
    """Runs a recording command unless `path` (the trace it makes) exists already."""
    if os.path.exists(path):
        log("reusing", path)
        return
    log("recording", what)
    p = subprocess.run(cmds, env=env(), capture_output=True, cwd=work)
    if p.returncode != 0 or not os.path.exists(path):
        raise RuntimeError("recording %s failed: %s" % (what, p.stderr.decode()[-500:]))


def heaptrack_calls(zst):
    out = subprocess.run(["heaptrack_print", zst], capture_output=True, text=True).stdout
    m = re.search(r"calls to allocation functions: (\d+)", out)
    return int(m.group(1)) if m else None


def trace_counts(gp, trace):
    p = subprocess.run([gp, "report", trace, "--format", "json", "--top", "1"],
                       capture_output=True, text=True)
    try:
        j = json.loads(p.stdout)
    except ValueError:
        return {}
    t = j.get("trace", {})
    return {"events": t.get("events"), "allocations": j.get("alloc_count"),
            "sites": j.get("counts", {}).get("sites")}


def run(build=None, runs=None, commands=None):
    build = build or os.environ.get("BUILD", "/tmp/build-bench")
    runs = runs or int(os.environ.get("RUNS", "5"))
    gp = os.path.join(build, "tools", "gradprof")
    rec_gp = os.environ.get("RECORD_GP", gp)
    mb = os.path.join(build, "bench", "malloc_bench")
    keep = os.environ.get("KEEP_TRACES")
    work = keep or tempfile.mkdtemp(prefix="gradprof-analysis.")
    os.makedirs(work, exist_ok=True)
    commands = commands if commands is not None else []
    mlp = os.path.join(ROOT, "examples", "pytorch", "mlp.py")
    T = lambda name: os.path.join(work, name)
    programs = {
        "pytorch": {"cmd": [TORCH_PY, mlp, "--grad"], "b_cmd": [TORCH_PY, mlp, "--no-grad"]},
        "storm": {"cmd": [mb, "1000000", "2"]},
    }
    res = {"runs": runs, "recorded_with": rec_gp, "programs": {}}
    cfgs = []
    for name, pr in programs.items():
        a = T(name + ".gptrace")
        rc = [rec_gp, "run", "--stack-depth", "32", "-o", a, "--"] + pr["cmd"]
        record(rc, a, name, work)
        commands.append(shell(rc))
        hk = T("h_" + name)
        hc = ["heaptrack", "-o", hk] + pr["cmd"]
        record(hc, hk + ".zst", name + " (heaptrack)", work)
        commands.append(shell(hc))
        info = {"command": shell(pr["cmd"]), "trace_bytes": os.path.getsize(a),
                "heaptrack_trace_bytes": os.path.getsize(hk + ".zst"),
                "heaptrack_allocations": heaptrack_calls(hk + ".zst")}
        info.update(trace_counts(gp, a))
        cfgs.append(("%s: gradprof report" % name, [gp, "report", a, "-o", T("r.txt")]))
        cfgs.append(("%s: heaptrack_print" % name, ["heaptrack_print", hk + ".zst"]))
        if "b_cmd" in pr:
            b = T(name + "_b.gptrace")
            rc = [rec_gp, "run", "--stack-depth", "32", "-o", b, "--"] + pr["b_cmd"]
            record(rc, b, name + " B", work)
            commands.append(shell(rc))
            info["b_command"] = shell(pr["b_cmd"])
            info["b_trace_bytes"] = os.path.getsize(b)
            cfgs.append(("%s: gradprof diff" % name, [gp, "diff", a, b, "-o", T("d.txt")]))
        res["programs"][name] = info
    for _, c in cfgs:
        commands.append(shell(c))
    log("timing %d configurations, %d rounds after a warm-up" % (len(cfgs), runs))
    samples = {n: [] for n, _ in cfgs}
    t0 = time.monotonic()
    for rnd in range(runs + 1):
        for n, c in cfgs:
            r = timed(c, work)
            if r is None:
                samples[n].append(None)
            elif rnd > 0:
                samples[n].append(r)
    res["elapsed_s"] = time.monotonic() - t0
    rows = {}
    for n, v in samples.items():
        ok = [x for x in v if x]
        if not ok:
            rows[n] = {"failed": True}
            continue
        rows[n] = {"wall": statistics.median(x[0] for x in ok),
                   "cpu": statistics.median(x[1] for x in ok),
                   "rss": statistics.median(x[2] for x in ok),
                   "walls": [x[0] for x in ok], "cpus": [x[1] for x in ok]}
    res["rows"] = rows
    if not keep:
        shutil.rmtree(work, ignore_errors=True)
    return res


def targets(res):
    """(target, met or None, figure) rows."""
    out = []
    rows = res["rows"]
    for name in res["programs"]:
        g, h = rows.get("%s: gradprof report" % name, {}), rows.get("%s: heaptrack_print" % name, {})
        if "wall" in g and "wall" in h:
            out.append(("%s: `report` at least as fast as heaptrack_print" % name,
                        g["wall"] <= h["wall"],
                        "%.2fx its wall time (%.3f s vs %.3f s); CPU %.2fx (%.3f s vs %.3f s)" % (
                            g["wall"] / h["wall"], g["wall"], h["wall"], g["cpu"] / h["cpu"],
                            g["cpu"], h["cpu"])))
            out.append(("%s: `report` peak RSS at most 1.5x heaptrack_print's" % name,
                        g["rss"] <= 1.5 * h["rss"],
                        "%.2fx (%.1f MiB vs %.1f MiB)" % (g["rss"] / h["rss"], g["rss"] / 1048576,
                                                          h["rss"] / 1048576)))
        d = rows.get("%s: gradprof diff" % name, {})
        if "wall" in d and "wall" in g:
            out.append(("%s: `diff` at most 2x one `report`" % name, d["wall"] <= 2 * g["wall"],
                        "%.2fx (%.3f s vs %.3f s); CPU %.2fx" % (
                            d["wall"] / g["wall"], d["wall"], g["wall"], d["cpu"] / g["cpu"])))
            out.append(("%s: `diff` peak RSS at most 400 MiB" % name,
                        d["rss"] <= DIFF_RSS_TARGET, "%.1f MiB" % (d["rss"] / 1048576)))
    return out


def render(res):
    """The markdown section (with its markers)."""
    L = [BEGIN, "## 2b. Analysis against heaptrack_print (issues 11 and 15)\n"]
    w = L.append
    w("Written by `bench/analysis.sh` (`bench/analysis_bench.py`). Each analyzer under "
      "/usr/bin/time: wall, CPU (user + system) and peak RSS (%%M), medians of %d rounds after "
      "a warm-up, the configurations interleaved run by run; the whole timing took %.0f s. "
      "Traces recorded with `%s`.\n" % (res["runs"], res.get("elapsed_s", 0),
                                       res.get("recorded_with", "gradprof")))
    w("| program | gradprof trace | events | allocations (gradprof / heaptrack) | sites |\n"
      "|---|---|---|---|---|")
    for name, p in res["programs"].items():
        w("| %s `%s` | %.1f MB (heaptrack: %.1f MB) | %s | %s / %s | %s |" % (
            name, p["command"], p["trace_bytes"] / 1e6, p["heaptrack_trace_bytes"] / 1e6,
            p.get("events"), p.get("allocations"), p.get("heaptrack_allocations"),
            p.get("sites")))
    w("")
    w("| analyzer | wall (median) | CPU (median) | peak RSS (median) |\n|---|---|---|---|")
    for n, r in res["rows"].items():
        if "wall" not in r:
            w("| %s | failed | | |" % n)
            continue
        w("| %s | %.3f s | %.3f s | %.1f MiB |" % (n, r["wall"], r["cpu"], r["rss"] / 1048576))
    w("")
    w("| target | status | figure |\n|---|---|---|")
    for t, ok, fig in targets(res):
        w("| %s | %s | %s |" % (t, "**met**" if ok else "**missed**", fig))
    w("")
    w(END)
    return "\n".join(L)


def update_results_md(section, path=os.path.join(ROOT, "bench", "RESULTS.md")):
    txt = open(path).read() if os.path.exists(path) else ""
    if BEGIN in txt and END in txt:
        txt = txt[:txt.index(BEGIN)] + section + txt[txt.index(END) + len(END):]
    elif "\n## 3. " in txt:
        i = txt.index("\n## 3. ")
        txt = txt[:i] + "\n" + section + "\n" + txt[i:]
    else:
        txt += "\n" + section + "\n"
    with open(path, "w") as f:
        f.write(txt)


def main():
    for tool in ("heaptrack", "heaptrack_print", "/usr/bin/time"):
        if not shutil.which(tool):
            sys.exit("analysis_bench: %s is not available" % tool)
    if subprocess.run([TORCH_PY, "-c", "import torch"], capture_output=True).returncode != 0:
        sys.exit("analysis_bench: %s has no torch" % TORCH_PY)
    commands = []
    res = run(commands=commands)
    res["commands"] = commands
    with open(os.path.join(ROOT, "bench", "results_analysis.json"), "w") as f:
        json.dump(res, f, indent=1)
    update_results_md(render(res))
    print(render(res))


if __name__ == "__main__":
    main()
