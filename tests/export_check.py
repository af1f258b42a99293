#!/usr/bin/python3
"""Structural checks of gradprof's exports, run by test_exports (with /usr/bin/python3).

  export_check.py chrome FILE [--report REPORT.json] [--peak N] [--live-end CAT=N ...]
                              [--regions NAME=COUNT ...] [--marks N] [--thread-name NAME]
                              [--region-name NAME] [--process-contains TEXT]
  export_check.py html FILE [--contains TEXT ...] [--not-contains TEXT ...] [--svgs N]

chrome: the file parses as JSON; it is a Chrome Trace Event object ({"traceEvents": [...],
"displayTimeUnit": "ms"}); every event has the fields its phase needs; counter samples of
"live bytes" are in time order, non-negative integers, and the last one equals what was live at
the end per category (--live-end, and/or the report JSON's by_category.<CAT>.live_at_end); the
peak instant carries --peak (and the report's peak_bytes); regions are complete events ("X") with
the given counts per name; marks are instant events.

html: the file parses with html.parser and every element is closed in order (void elements aside);
there is at least one <svg> (or exactly --svgs); every embedded JSON data block parses and its
series have one value per sample; nothing refers to a resource outside the file (no src/href
other than "#...", no http(s) URL, protocol-relative URL, CSS url()/@import, <link>, <iframe>,
fetch or XMLHttpRequest).

Exit status 0 when every check passes, 1 with one line per failure otherwise.
"""
import html.parser
import json
import re
import sys

failures = []


def fail(msg):
    failures.append(msg)


def parse_pairs(values, kind=int):
    out = {}
    for v in values:
        name, _, n = v.rpartition("=")
        out[name] = kind(n)
    return out


def get_opts(argv, multi, single):
    opts = {k: [] for k in multi}
    opts.update({k: None for k in single})
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in opts and i + 1 < len(argv):
            if a in multi:
                opts[a].append(argv[i + 1])
            else:
                opts[a] = argv[i + 1]
            i += 2
        else:
            sys.exit("export_check: bad argument %r" % a)
    return opts


def check_chrome(path, argv):
    o = get_opts(argv, ["--live-end", "--regions"],
                 ["--report", "--peak", "--marks", "--thread-name", "--region-name",
                  "--process-contains"])
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        fail("chrome: %s does not parse as JSON: %s" % (path, e))
        return
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        fail("chrome: no traceEvents list")
        return
    if doc.get("displayTimeUnit") != "ms":
        fail("chrome: displayTimeUnit is %r, not 'ms'" % doc.get("displayTimeUnit"))
    events = doc["traceEvents"]
    need = {"M": ("name", "ph", "pid", "tid", "args"), "C": ("name", "ph", "pid", "ts", "args"),
            "X": ("name", "ph", "pid", "tid", "ts", "dur"), "i": ("name", "ph", "pid", "ts", "s")}
    for n, e in enumerate(events):
        ph = e.get("ph")
        if ph not in need:
            fail("chrome: event %d has unexpected phase %r" % (n, ph))
            continue
        for k in need[ph]:
            if k not in e:
                fail("chrome: event %d (%s) lacks %r" % (n, ph, k))
        if "ts" in e and (not isinstance(e["ts"], (int, float)) or e["ts"] < 0):
            fail("chrome: event %d has a bad ts %r" % (n, e["ts"]))
        if ph == "X" and (not isinstance(e.get("dur"), (int, float)) or e["dur"] < 0):
            fail("chrome: X event %d has a bad dur %r" % (n, e.get("dur")))
        if not isinstance(e.get("name"), str) or not e["name"]:
            fail("chrome: event %d has no name" % n)

    meta = [e for e in events if e.get("ph") == "M"]
    procs = [e for e in meta if e.get("name") == "process_name"]
    if len(procs) != 1:
        fail("chrome: %d process_name metadata events, expected 1" % len(procs))
    threads = [e["args"].get("name") for e in meta if e.get("name") == "thread_name"]
    if not threads:
        fail("chrome: no thread_name metadata")
    if o["--thread-name"] is not None and o["--thread-name"] not in threads:
        fail("chrome: thread name %r not among %r" % (o["--thread-name"], threads))
    if o["--process-contains"] is not None and procs and \
            o["--process-contains"] not in procs[0]["args"].get("name", ""):
        fail("chrome: process name %r lacks %r" % (procs[0]["args"], o["--process-contains"]))

    counters = [e for e in events if e.get("ph") == "C" and e.get("name") == "live bytes"]
    if not counters:
        fail("chrome: no 'live bytes' counter events")
    last_ts = -1.0
    for e in counters:
        if e["ts"] < last_ts:
            fail("chrome: counter samples out of time order at ts %r" % e["ts"])
        last_ts = e["ts"]
        for k, v in e["args"].items():
            if not isinstance(v, int) or v < 0:
                fail("chrome: counter %s=%r is not a non-negative integer" % (k, v))
    maxima = [e for e in events if e.get("ph") == "C" and e.get("name") != "live bytes"]
    for e in maxima:
        if not isinstance(e["args"].get("total"), int):
            fail("chrome: counter %r has no integer total" % e["name"])

    expect_end = {}
    expect_peak = None
    if o["--report"]:
        with open(o["--report"], encoding="utf-8") as f:
            rep = json.load(f)
        for cat, row in rep["by_category"].items():
            expect_end[cat] = row["live_at_end"]
        expect_peak = rep["peak_bytes"]
    for cat, n in parse_pairs(o["--live-end"]).items():
        if cat in expect_end and expect_end[cat] != n:
            fail("chrome: the report says %s=%d live at end, the test expects %d"
                 % (cat, expect_end[cat], n))
        expect_end[cat] = n
    if counters:
        last = counters[-1]["args"]
        for cat, n in expect_end.items():
            if last.get(cat, 0) != n:
                fail("chrome: last 'live bytes' %s = %r, expected %d" % (cat, last.get(cat), n))
        for cat in last:
            if cat not in expect_end and o["--report"]:
                fail("chrome: counter series %r is not a category of the report" % cat)

    peaks = [e for e in events if e.get("ph") == "i" and e.get("cat") == "peak"]
    if len(peaks) != 1:
        fail("chrome: %d peak instant events, expected 1" % len(peaks))
    for want in (expect_peak, int(o["--peak"]) if o["--peak"] else None):
        if want is not None and peaks and peaks[0]["args"].get("peak_bytes") != want:
            fail("chrome: peak_bytes %r, expected %d" % (peaks[0]["args"].get("peak_bytes"), want))

    xs = [e for e in events if e.get("ph") == "X"]
    for name, n in parse_pairs(o["--regions"]).items():
        got = sum(1 for e in xs if e["name"] == name)
        if got != n:
            fail("chrome: %d X events named %r, expected %d" % (got, name, n))
    if o["--region-name"] is not None and not any(e["name"] == o["--region-name"] for e in xs):
        fail("chrome: no X event named %r (names: %r)"
             % (o["--region-name"], sorted({e["name"] for e in xs})))
    if o["--marks"] is not None:
        marks = [e for e in events if e.get("ph") == "i" and e.get("cat") == "mark"]
        if len(marks) != int(o["--marks"]):
            fail("chrome: %d mark instant events, expected %s" % (len(marks), o["--marks"]))


VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}


class Strict(html.parser.HTMLParser):
    """Tracks open elements and records every misnested or unclosed one."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack = []
        self.svgs = 0
        self.json_blocks = []
        self.in_json = False
        self.refs = []

    def handle_starttag(self, tag, attrs):
        self._attrs(tag, attrs)
        if tag == "svg":
            self.svgs += 1
        if tag == "script" and ("type", "application/json") in attrs:
            self.in_json = True
            self.json_blocks.append("")
        if tag not in VOID:
            self.stack.append((tag, self.getpos()))

    def handle_startendtag(self, tag, attrs):
        self._attrs(tag, attrs)

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.stack:
            fail("html: </%s> at line %d closes nothing" % (tag, self.getpos()[0]))
            return
        top, pos = self.stack.pop()
        if top != tag:
            fail("html: </%s> at line %d closes <%s> opened at line %d"
                 % (tag, self.getpos()[0], top, pos[0]))
        if tag == "script":
            self.in_json = False

    def handle_data(self, data):
        if self.in_json:
            self.json_blocks[-1] += data

    def _attrs(self, tag, attrs):
        for k, v in attrs:
            if k in ("src", "href", "xlink:href", "action", "formaction", "poster", "srcset",
                     "data", "background", "manifest") and not (v or "").startswith("#"):
                self.refs.append("<%s %s=%r>" % (tag, k, v))


EXTERNAL = [r"https?:", r"//cdn", r"url\(", r"@import", r"<link\b", r"<iframe\b",
            r"\bfetch\(", r"XMLHttpRequest", r"\bimport\(", r"<img\b"]


def check_html(path, argv):
    o = get_opts(argv, ["--contains", "--not-contains"], ["--svgs"])
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, ValueError) as e:
        fail("html: cannot read %s as UTF-8: %s" % (path, e))
        return
    if not text.startswith("<!DOCTYPE html>"):
        fail("html: does not start with <!DOCTYPE html>")
    p = Strict()
    try:
        p.feed(text)
        p.close()
    except Exception as e:  # html.parser raises on nothing but be explicit about it
        fail("html: html.parser failed: %s" % e)
        return
    for tag, pos in p.stack:
        fail("html: <%s> opened at line %d is never closed" % (tag, pos[0]))
    if o["--svgs"] is not None:
        if p.svgs != int(o["--svgs"]):
            fail("html: %d <svg> elements, expected %s" % (p.svgs, o["--svgs"]))
    elif p.svgs < 1:
        fail("html: no <svg> element")
    for ref in p.refs:
        fail("html: external reference %s" % ref)
    for pat in EXTERNAL:
        m = re.search(pat, text)
        if m:
            fail("html: external resource pattern %r at offset %d: %r"
                 % (pat, m.start(), text[max(0, m.start() - 40):m.start() + 40]))
    for block in p.json_blocks:
        try:
            d = json.loads(block)
        except ValueError as e:
            fail("html: an embedded JSON block does not parse: %s" % e)
            continue
        n = len(d.get("t", []))
        if len(d.get("max", [])) != n or any(len(s) != n for s in d.get("v", [])):
            fail("html: chart data series lengths differ from the %d samples" % n)
        if len(d.get("cats", [])) != len(d.get("v", [])):
            fail("html: chart data has %d categories but %d series"
                 % (len(d.get("cats", [])), len(d.get("v", []))))
    for s in o["--contains"]:
        if s not in text:
            fail("html: does not contain %r" % s)
    for s in o["--not-contains"]:
        if s in text:
            fail("html: contains %r" % s)


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("chrome", "html"):
        sys.exit(__doc__)
    (check_chrome if sys.argv[1] == "chrome" else check_html)(sys.argv[2], sys.argv[3:])
    for f in failures:
        print(f)
    print("%s %s: %s" % (sys.argv[1], sys.argv[2], "FAILED" if failures else "ok"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
