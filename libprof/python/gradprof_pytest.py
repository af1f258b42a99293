"""gradprof_pytest -- a pytest plugin: inference tests that must not build an autograd graph.

    pytest -p gradprof_pytest tests/      # with libprof/python on PYTHONPATH
                                          # (installed: the pytest11 entry point loads it)

Markers::

    @pytest.mark.no_graph
    def test_predict(): ...              # the test builds no autograd graph, allocates no .grad

    @pytest.mark.limit_graph_growth("1MiB")
    def test_eval_loop(): ...            # graph memory kept alive may grow by at most 1 MiB
                                         # across the calls of the model in the test

A marked test runs with gradprof's PyTorch helper attached (gradprof_torch.attach: torch's
global module hooks, no change to the test): every module call gets its path, every tensor
autograd saves is tagged `saved` with the module and the test's lines, every parameter's .grad
`gradient`. The judgement is in-process, from libprof's own counters (lp_counters_get), with no
LD_PRELOAD and no trace file: libprof.so is loaded from $GRADPROF_LIBPROF or found next to the
helper, and does not record unless the test runs under `gradprof run`, whose recorder it then
uses.

  no_graph            fails when the test saved any tensor for backward or allocated any
                      gradient: "no_graph: the test built an autograd graph: 2.00 MiB saved for
                      backward by 4 modules (MLP.body.1 at test_mlp.py:23 (test_predict), ...)"
  limit_graph_growth  fails when the bytes saved for backward that are alive at the start of the
                      model's last call exceed those at the start of its second call (the first
                      is warm-up) by more than SIZE; a test with fewer than three calls compares
                      the end of the test with its start. SIZE is bytes or a number with a unit
                      (KB MB GB = powers of 1000; KiB MiB GiB, K M G = powers of 1024).

Without libprof (not built, not found) a marked test fails with that reason: a gate never
passes what it could not judge.
"""

import re

import pytest

import gradprof_torch as gp

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "k": 2**10, "kib": 2**10, "m": 2**20, "mib": 2**20, "g": 2**30, "gib": 2**30,
          "t": 2**40, "tib": 2**40}


def parse_size(text):
    """Bytes from "1MiB", "64k", "100MB", "512" or an int; ValueError naming the value."""
    if isinstance(text, int) and text >= 0:
        return text
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError("limit_graph_growth: %r is not a size (bytes, or a number with a unit: "
                         "KB MB GB, KiB MiB GiB, K M G)" % (text,))
    return int(round(float(m.group(1)) * _UNITS[m.group(2).lower()]))


def _size(n):
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return "%.2f %s" % (n / scale, unit)
    return "%d B" % n


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "no_graph: the test builds no autograd graph and allocates no .grad "
                   "(gradprof)")
    config.addinivalue_line(
        "markers", "limit_graph_growth(size): graph memory kept alive may grow by at most SIZE "
                   "across the calls of the model in the test (gradprof)")


def _describe(modules, limit=6):
    parts = ["%s%s" % (m, " at " + where if where else "") for m, (_, where) in
             sorted(modules.items(), key=lambda kv: -kv[1][0])[:limit]]
    more = len(modules) - limit
    return ", ".join(parts) + (", and %d more" % more if more > 0 else "")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    no_graph = item.get_closest_marker("no_graph")
    growth = item.get_closest_marker("limit_graph_growth")
    if no_graph is None and growth is None:
        yield
        return
    limit = None
    if growth is not None:
        if len(growth.args) != 1:
            raise pytest.UsageError("limit_graph_growth takes one size, e.g. "
                                    "@pytest.mark.limit_graph_growth(\"1MiB\")")
        limit = parse_size(growth.args[0])
    if not gp.watch_begin():
        yield
        pytest.fail("gradprof: cannot judge this test: %s" % gp.watch_unavailable(),
                    pytrace=False)
        return
    outcome = yield
    w = gp.watch_end()
    if outcome.excinfo is not None:
        return  # the test failed on its own: that is its report
    problems = []
    if no_graph is not None and (w["saved_peak"] > 0 or w["gradient_bytes"] > 0):
        what = []
        if w["saved_peak"] > 0:
            what.append("%s saved for backward by %d module%s (%s)" % (
                _size(w["saved_peak"]), len(w["saved_modules"]),
                "" if len(w["saved_modules"]) == 1 else "s", _describe(w["saved_modules"])))
        if w["gradient_bytes"] > 0:
            what.append("%s of .grad allocated" % _size(w["gradient_bytes"]))
        problems.append("no_graph: the test built an autograd graph: " + "; ".join(what) +
                        ". Run the inference under torch.no_grad() or torch.inference_mode().")
    if limit is not None and w["growth"] > limit:
        holders = ", ".join("%s (%s)" % (h["name"], h["where"]) for h in w["holders"][:4])
        problems.append(
            "limit_graph_growth: graph memory kept alive grew by %s over %d calls of %s "
            "(limit %s)%s" % (_size(w["growth"]), w["calls"], w["model"] or "the model",
                              _size(limit), "; kept by " + holders if holders else ""))
    if problems:
        pytest.fail("gradprof: " + "\n".join(problems), pytrace=False)
