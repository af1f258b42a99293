#!/usr/bin/python3
"""The pprof and speedscope exports, and jobs of several processes (issue 16), end to end on
real traces of examples/mlp_infer recorded with `gradprof run`.

  test_pprof_job.py pprof      --gradprof G --mlp M --work DIR
      `report --format pprof` read by Go's own reader (`go tool pprof -raw`, `-top`, `-tags`):
      the sample types, and every total the same as the JSON report's: inuse_space = the peak,
      alloc_space = the bytes allocated, alloc_objects = the allocations, inuse_space per
      category label = live at the peak by category; grad labels on and off; file:line.
      SKIPPED (77) without `go` (golang-go).
  test_pprof_job.py speedscope --gradprof G --mlp M --work DIR
      `report --format speedscope` against the file format's essentials ($schema, shared.frames,
      profiles of type "sampled" with samples and weights that index the frames), one profile per
      measure, whose weights sum to the JSON report's figures.
  test_pprof_job.py job        --gradprof G --mlp M --work DIR
      a two-rank job: mlp_infer run twice under `gradprof run` with RANK=0/1 WORLD_SIZE=2 (rank 1
      a larger model), grad on and off: the default trace names carry the rank, the metadata the
      launcher's variables; report and check of the job (per-process table, the worst first;
      processes[] in JSON), diff --rank, the Chrome trace (one pid per rank), speedscope (profiles
      per rank) and, with go, pprof's rank labels.
"""
import argparse
import glob
import gzip
import json
import os
import re
import shutil
import subprocess
import sys

SKIP = 77


def run(cmd, expect=0, env=None, cwd=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)
    if expect is not None and p.returncode != expect:
        sys.exit("FAILED: %s exited %d, not %d\nstdout: %s\nstderr: %s"
                 % (" ".join(cmd), p.returncode, expect, p.stdout[-3000:], p.stderr[-3000:]))
    return p


def check(cond, what):
    if not cond:
        sys.exit("FAILED: " + what)
    print("ok:", what)


def record(a, out, *args, env=None, cwd=None):
    cmd = [a.gradprof, "run"] + (["-o", out] if out else []) + ["--", a.mlp, "--layers", "4",
                                                                "--width", "256", "--batch", "16",
                                                                "--iters", "3"] + list(args)
    run(cmd, env=env, cwd=cwd or a.work)


def report_json(a, trace):
    return json.loads(run([a.gradprof, "report", trace, "--format", "json"]).stdout)


# ---- pprof ---------------------------------------------------------------------------------------

def pprof_raw(path):
    """The samples of a profile as `go tool pprof -raw` prints them: (values, labels) each."""
    out = run(["go", "tool", "pprof", "-raw", path]).stdout
    lines = out.splitlines()
    i = lines.index(next(l for l in lines if l.startswith("Samples:")))
    types = lines[i + 1].replace("[dflt]", "").split()
    samples = []
    for line in lines[i + 2:]:
        m = re.match(r"^\s+((?:\d+\s+)+\d+):", line)
        if m:
            samples.append(([int(v) for v in m.group(1).split()], {}))
        elif samples and re.match(r"^\s+\w+:\[", line):
            for k, v in re.findall(r"(\w+):\[([^\]]*)\]", line):
                samples[-1][1][k] = v
        elif line and not line.startswith(" "):
            break
    return types, samples


def total(samples, types, name, **labels):
    k = types.index(name)
    return sum(v[k] for v, l in samples if all(l.get(x) == y for x, y in labels.items()))


def test_pprof(a):
    if not shutil.which("go"):
        print("SKIPPED: go is not installed (golang-go): the pprof export is read with go tool pprof")
        return SKIP
    env = dict(os.environ, GOCACHE=os.path.join(a.work, "gocache"), HOME=a.work)
    os.environ.update(env)
    for name, args in (("grad", ()), ("nograd", ("--no-grad",))):
        trace = os.path.join(a.work, name + ".gptrace")
        record(a, trace, *args)
        prof = os.path.join(a.work, name + ".pb.gz")
        run([a.gradprof, "report", trace, "--format", "pprof", "-o", prof])
        with open(prof, "rb") as f:
            check(f.read(2) == b"\x1f\x8b", "%s: the pprof file is gzipped" % name)
        r = report_json(a, trace)
        types, samples = pprof_raw(prof)
        check(types == ["alloc_objects/count", "alloc_space/bytes", "inuse_objects/count",
                        "inuse_space/bytes"], "%s: sample types as Go's heap profiles" % name)
        check(total(samples, types, "inuse_space/bytes") == r["peak_bytes"],
              "%s: inuse_space sums to the peak (%d)" % (name, r["peak_bytes"]))
        check(total(samples, types, "alloc_space/bytes") == r["total_allocated_bytes"],
              "%s: alloc_space sums to the bytes allocated (%d)" % (name, r["total_allocated_bytes"]))
        check(total(samples, types, "alloc_objects/count") == r["alloc_count"],
              "%s: alloc_objects sums to the allocations (%d)" % (name, r["alloc_count"]))
        for cat, row in r["by_category"].items():
            got = total(samples, types, "inuse_space/bytes", category=cat)
            check(got == row["bytes_at_peak"], "%s: inuse_space of category=%s is %d, the report's "
                  "%d" % (name, cat, got, row["bytes_at_peak"]))
        check(all(v[2] <= v[0] or v[0] == 0 for v, _ in samples),
              "%s: inuse_objects <= alloc_objects in every sample" % name)
        check(all(l.get("device") == "host" for _, l in samples), "%s: device labels" % name)
        grads = {l.get("grad") for _, l in samples}
        check(grads == ({"on"} if name == "grad" else {"on", "off"}),
              "%s: grad labels %s" % (name, sorted(grads)))
        ops = {l.get("op") for _, l in samples}
        check({"relu", "linear"} <= ops, "%s: op labels include relu and linear" % name)
        top = run(["go", "tool", "pprof", "-top", "-sample_index=inuse_space", prof]).stdout
        check("Type: inuse_space" in top and "tn_linear" in top,
              "%s: go tool pprof -top -sample_index=inuse_space names tn_linear" % name)
        lines = run(["go", "tool", "pprof", "-top", "-lines", "-sample_index=alloc_space", prof]).stdout
        check(re.search(r"tn_linear \S*ops_linalg\.c:\d+", lines) is not None,
              "%s: locations carry file:line (tn_linear ops_linalg.c:N)" % name)
        if name == "grad":
            saved = total(samples, types, "inuse_space/bytes", category="saved")
            check(saved > 0, "grad: saved tensors live at the peak in the pprof (%d B)" % saved)
    # Without call stacks (as Python is recorded by default) a sample's locations are its labels,
    # op under module under category, so that pprof's tables show where the memory is.
    trace = os.path.join(a.work, "nostacks.gptrace")
    run([a.gradprof, "run", "--no-stacks", "-o", trace, "--", a.mlp, "--layers", "4", "--width",
         "256", "--batch", "16", "--iters", "3"], cwd=a.work)
    prof = os.path.join(a.work, "nostacks.pb.gz")
    run([a.gradprof, "report", trace, "--format", "pprof", "-o", prof])
    types, samples = pprof_raw(prof)
    check(total(samples, types, "inuse_space/bytes") == report_json(a, trace)["peak_bytes"],
          "no stacks: inuse_space sums to the peak")
    top = run(["go", "tool", "pprof", "-top", "-cum", "-sample_index=inuse_space", prof]).stdout
    names = {l.split()[-1] for l in top.splitlines() if re.match(r"\s*[\d.]+([kMG]?B)?\s+[\d.]+%", l)}
    check({"relu", "linear", "saved", "parameter"} <= names,
          "no stacks: go tool pprof -top names the ops and categories (%s)" % sorted(names))
    return 0


# ---- speedscope ----------------------------------------------------------------------------------

SCHEMA = "https://www.speedscope.app/file-format-schema.json"


def check_speedscope(doc, what):
    """The essentials of speedscope's file format; returns the profiles."""
    check(doc.get("$schema") == SCHEMA, what + ": $schema")
    frames = doc.get("shared", {}).get("frames")
    check(isinstance(frames, list) and frames and all(
        isinstance(f, dict) and isinstance(f.get("name"), str) and
        isinstance(f.get("file", ""), str) and isinstance(f.get("line", 1), int)
        for f in frames), what + ": shared.frames are {name, file, line}")
    profiles = doc.get("profiles")
    check(isinstance(profiles, list) and profiles, what + ": profiles")
    for p in profiles:
        ok = (p.get("type") == "sampled" and isinstance(p.get("name"), str) and
              p.get("unit") in ("bytes", "none") and p.get("startValue") == 0 and
              isinstance(p.get("samples"), list) and isinstance(p.get("weights"), list) and
              len(p["samples"]) == len(p["weights"]) and p.get("endValue") == sum(p["weights"]) and
              all(isinstance(s, list) and s and all(isinstance(i, int) and 0 <= i < len(frames)
                                                    for i in s) for s in p["samples"]))
        check(ok, what + ": profile '%s' is sampled, samples index the frames, weights sum to "
              "endValue" % p.get("name"))
    check(isinstance(doc.get("activeProfileIndex"), int), what + ": activeProfileIndex")
    return frames, profiles


def test_speedscope(a):
    trace = os.path.join(a.work, "grad.gptrace")
    record(a, trace)
    out = os.path.join(a.work, "grad.speedscope.json")
    run([a.gradprof, "report", trace, "--format", "speedscope", "-o", out])
    with open(out) as f:
        frames, profiles = check_speedscope(json.load(f), "speedscope")
    r = report_json(a, trace)
    names = [p["name"].split(":")[0] for p in profiles]
    check(names == ["peak", "total", "count", "leaked"], "one profile per measure: %s" % names)
    want = {"peak": r["peak_bytes"], "total": r["total_allocated_bytes"], "count": r["alloc_count"],
            "leaked": r["leaked_bytes"]}
    for p, name in zip(profiles, names):
        check(p["endValue"] == want[name], "%s profile sums to the report's %d" % (name, want[name]))
    roots = {frames[s[0]]["name"] for s in profiles[0]["samples"]}
    check(roots <= set(r["by_category"]), "samples start at their category: %s" % sorted(roots))
    check(any(f["name"] == "tn_linear" and f.get("file", "").endswith("ops_linalg.c") and
              f.get("line", 0) > 0 for f in frames), "frames carry file and line (tn_linear)")
    return 0


# ---- a job of two processes ----------------------------------------------------------------------

def test_job(a):
    traces = {}
    for mode, args in (("on", ()), ("off", ("--no-grad",))):
        folder = os.path.join(a.work, mode)
        os.makedirs(folder, exist_ok=True)
        for rank in (0, 1):
            env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2")
            layers = ["--layers", "6"] if rank == 1 else []  # rank 1 holds more: the worst
            record(a, None, *(list(args) + layers), env=env, cwd=folder)
        found = sorted(glob.glob(os.path.join(folder, "gradprof.mlp_infer.rank*.gptrace")))
        check([re.sub(r"\.\d+\.gptrace$", "", os.path.basename(t)) for t in found] ==
              ["gradprof.mlp_infer.rank0", "gradprof.mlp_infer.rank1"],
              "%s: the default trace names carry the rank: %s" % (mode, [os.path.basename(t)
                                                                         for t in found]))
        traces[mode] = found
    on = traces["on"]
    singles = [report_json(a, t) for t in on]
    for rank, r in enumerate(singles):
        check(int(r["trace"]["pid"]) > 0, "rank %d: a pid" % rank)
    meta = run([a.gradprof, "report", on[1], "--format", "json"]).stdout
    check('"command"' in meta, "rank 1's own report")

    text = run([a.gradprof, "report"] + on).stdout
    check(text.startswith("gradprof job: 2 processes (world size 2); the worst: rank 1 (pid %s), "
                          "peak " % singles[1]["trace"]["pid"]),
          "report of the job: its first line names the worst rank: " + text.splitlines()[0])
    table = text.split("\n\n")[1].splitlines()
    check(table[0].split()[:3] == ["rank", "pid", "peak"] and table[1].split()[0] == "1" and
          table[2].split()[0] == "0", "report of the job: the per-process table, rank 1 first:\n" +
          "\n".join(table))
    check(text.count("== rank ") == 2 and "gradprof report: peak" in text,
          "report of the job: each process's report follows")
    job = json.loads(run([a.gradprof, "report", "--format", "json"] + on).stdout)
    procs = job["processes"]
    check(job["schema"] == "gradprof-job/1" and job["world_size"] == 2 and
          [p["rank"] for p in procs] == [1, 0] and
          [p["peak_bytes"] for p in procs] == [singles[1]["peak_bytes"], singles[0]["peak_bytes"]] and
          [p["pid"] for p in procs] == [int(singles[1]["trace"]["pid"]), int(singles[0]["trace"]["pid"])],
          "report --format json: processes[] with rank, pid, peak_bytes, the worst first")

    c = run([a.gradprof, "check"] + on, expect=1)
    check(c.stdout.startswith("FAIL job of 2 processes: 0 passed, 2 failed"),
          "check of the grad-on job fails: " + c.stdout.splitlines()[0])
    cj = json.loads(run([a.gradprof, "check", "--format", "json"] + on, expect=1).stdout)
    check(cj["verdict"] == "fail" and [p["rank"] for p in cj["processes"]] == [1, 0] and
          all(p["violations"] > 0 for p in cj["processes"]), "check --format json of the job")
    run([a.gradprof, "check"] + traces["off"], expect=0)
    print("ok: check of the no-grad job passes")

    d = run([a.gradprof, "diff", "--rank", "1"] + on + ["--"] + traces["off"])
    check("rank 1: A is %s, B is %s" % (on[1], traces["off"][1]) in d.stderr,
          "diff --rank 1 A... -- B... picks rank 1 on each side")
    d2 = run([a.gradprof, "diff", "--rank", "1", os.path.join(a.work, "on"),
              os.path.join(a.work, "off")])
    check(d2.stdout == d.stdout and "held by graph construction" in d.stdout,
          "diff --rank 1 of two folders: the same diff")
    single = run([a.gradprof, "diff", on[1], traces["off"][1]]).stdout
    check(single == d.stdout, "the same as diff of rank 1's two traces")
    e = run([a.gradprof, "diff"] + on + ["--"] + traces["off"], expect=2)
    check("--rank" in e.stderr, "several traces without --rank: refused, naming --rank")
    e = run([a.gradprof, "diff", "--rank", "7"] + on + ["--"] + traces["off"], expect=2)
    check("no trace of rank 7" in e.stderr, "a rank no trace has: refused")

    chrome = json.loads(run([a.gradprof, "report", "--format", "chrome"] + on).stdout)
    events = chrome["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    check(sorted(names) == sorted(p["pid"] for p in procs) and
          all(("rank %d: " % p["rank"]) in names[p["pid"]] for p in procs) and
          {e["pid"] for e in events} == set(names),
          "chrome: one pid per rank, named by rank: %s" % sorted(names.values()))
    check(all(any(e["pid"] == pid and e["ph"] == "C" for e in events) for pid in names),
          "chrome: each process has its counters")
    later = procs[0]["pid"]  # rank 1 ran after rank 0, on this host: its times are shifted
    check(chrome["otherData"]["one_time_axis"] is True and
          min(float(e["ts"]) for e in events if e["pid"] == later) > 0 and
          min(float(e["ts"]) for e in events if e["pid"] == procs[1]["pid"]) == 0,
          "chrome: one host, one time axis (rank 1 starts after rank 0)")

    ss = json.loads(run([a.gradprof, "report", "--format", "speedscope"] + on).stdout)
    _, profiles = check_speedscope(ss, "speedscope of the job")
    check([p["name"].split(":")[0] for p in profiles] == ["rank 0"] * 4 + ["rank 1"] * 4,
          "speedscope: four profiles per rank")

    if shutil.which("go"):
        os.environ.update(GOCACHE=os.path.join(a.work, "gocache"), HOME=a.work)
        prof = os.path.join(a.work, "job.pb.gz")
        run([a.gradprof, "report", "--format", "pprof", "-o", prof] + on)
        types, samples = pprof_raw(prof)
        for rank, r in enumerate(singles):
            got = total(samples, types, "inuse_space/bytes", rank=str(rank), world_size="2")
            check(got == r["peak_bytes"], "pprof: samples labelled rank=%d sum to its peak" % rank)
    else:
        print("note: go is not installed: the pprof rank labels are not checked")
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["pprof", "speedscope", "job"])
    ap.add_argument("--gradprof", required=True)
    ap.add_argument("--mlp", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    a.gradprof, a.mlp, a.work = (os.path.abspath(p) for p in (a.gradprof, a.mlp, a.work))
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "GRADPROF_OUTPUT"):
        os.environ.pop(k, None)
    rc = {"pprof": test_pprof, "speedscope": test_speedscope, "job": test_job}[a.mode](a)
    if rc == 0:
        print("PASSED")
    return rc


if __name__ == "__main__":
    sys.exit(main())
