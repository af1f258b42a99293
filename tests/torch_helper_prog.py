#!/usr/bin/env python3
"""Exercises libprof/python/gradprof_torch.py in one process; run by test_torch.py (/usr/bin/python3,
PYTHONPATH=libprof/python) standalone and under `gradprof run`, which then checks the trace.

    torch_helper_prog.py EXPECTED_MODE OUT.json

Asserts in-process what needs no trace (gradients unchanged by the hooks, the hook's byte counts,
the wrappers restored by uninstall) and writes what the trace checks need to OUT.json.
"""
import copy
import json
import sys
import weakref

import torch
from torch import nn

import gradprof_torch as gp


def fail(msg):
    sys.stderr.write("torch_helper_prog: FAIL: %s\n" % msg)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


class Boom(nn.Module):
    def forward(self, x):
        raise ValueError("boom")


def main():
    expected_mode, out_path = sys.argv[1], sys.argv[2]
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    ref = copy.deepcopy(model)
    x = torch.randn(8, 16)

    originals = {
        "no_grad.__enter__": torch.no_grad.__dict__["__enter__"],
        "inference_mode.__exit__": torch.inference_mode.__dict__["__exit__"],
        "Tensor.backward": torch.Tensor.__dict__["backward"],
        "autograd.backward": torch.autograd.backward,
    }
    # Under `gradprof run` the startup hook attached the helper when torch was imported: what
    # torch had before is what the helper's patches kept.
    kept = {(obj, attr): orig for obj, attr, orig in gp._S.patches}
    for name, (obj, attr) in (("no_grad.__enter__", (torch.no_grad, "__enter__")),
                              ("inference_mode.__exit__", (torch.inference_mode, "__exit__")),
                              ("Tensor.backward", (torch.Tensor, "backward")),
                              ("autograd.backward", (torch.autograd, "backward"))):
        originals[name] = kept.get((obj, attr), originals[name])

    gp.instrument(model, name="net")
    gp.instrument(model, name="net")  # twice: no second set of hooks
    check(gp.mode() == expected_mode, "mode %r, expected %r" % (gp.mode(), expected_mode))

    # Training step: gradients are those of an uninstrumented copy; saved tensors are counted
    # while the graph lives and released by backward.
    gp.mark("train")
    with gp.region("train"):
        loss = model(x).pow(2).sum()
        live = gp.saved_bytes_by_module("live")
        # ReLU's output, saved by the ReLU and again by the second Linear: one storage; where
        # the hooks are on everywhere (attached: under gradprof run), the loss's pow too saves
        # the model's output, outside any module
        want = {"net.1": 8 * 32 * 4}
        if gp._S.attached:
            want[""] = 8 * 4 * 4
        check(live == want, "saved while the graph lives: %r" % live)
        loss.backward()
    check(gp.saved_bytes_by_module("live") == {}, "saved after backward: %r"
          % gp.saved_bytes_by_module("live"))
    ref(x).pow(2).sum().backward()
    for (n, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        check(torch.equal(p.grad, q.grad), "gradient of %s differs with the helper" % n)
    check(gp.saved_bytes_by_module("last") == {"net.1": 8 * 32 * 4},
          "last forward: %r" % gp.saved_bytes_by_module("last"))

    # torch.autograd.backward directly, retain_graph, a second backward: grads accumulate, the
    # .grad storages are the same (tagged once)
    out = model(x).sum()
    torch.autograd.backward(out, retain_graph=True)
    check(gp.saved_bytes_by_module("live") == {"net.1": 8 * 32 * 4}, "retain_graph keeps saved")
    out.backward()
    del out
    check(gp.saved_bytes_by_module("live") == {}, "graph freed with its output")

    # An instrumented model called inside another's forward: the outer one's input stays an
    # input (never retagged) and its hooks stay installed after the inner forward returns.
    class Outer(nn.Module):
        def __init__(self, other):
            super().__init__()
            self.lin = nn.Linear(16, 4)
            object.__setattr__(self, "other", other)  # not a submodule

        def forward(self, t):
            h = self.other(t)
            # saves t (an input: not retagged) and t.relu() (no grad_fn: saved as "leaf")
            return h + self.lin(t) + self.lin(t.relu())

    outer = gp.instrument(Outer(model), name="outer")
    z = outer(x)
    live = gp.saved_bytes_by_module("live")
    check(live == {"net.1": 8 * 32 * 4, "outer.lin": 8 * 16 * 4},
          "nested models: %r" % live)
    del z

    # A view saved for backward (b's input, a flattened view of the sum) is tagged with the
    # op that made its storage (aten::add), not with the view's op, which made no memory.
    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(16, 24)
            self.b = nn.Linear(24, 4)

        def forward(self, t):
            return self.b((self.a(t) + 1).view(-1, 2, 3, 4).flatten(1))

    head = gp.instrument(Head(), name="head")
    z = head(x)
    check(gp.saved_bytes_by_module("live") == {"head.b": 8 * 24 * 4}, "saved view: %r"
          % gp.saved_bytes_by_module("live"))
    del z

    # A custom autograd.Function's saved output is tagged with the Function's name (no ATen op).
    class MyExp(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            y = t.exp()
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, g):
            y, = ctx.saved_tensors
            return g * y

    class Custom(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(16, 16)

        def forward(self, t):
            return MyExp.apply(self.a(t))

    try:  # a C++ autograd Function: torchvision's roi_align
        import torchvision
        roi = torchvision.ops.roi_align(torch.randn(1, 2, 8, 8, requires_grad=True),
                                        torch.tensor([[0, 0.0, 0.0, 4.0, 4.0]]), 2)
        check(gp._op_name(roi.grad_fn) == "vision::ops::ROIAlignFunction",
              "C++ autograd Function: %r" % gp._op_name(roi.grad_fn))
        del roi  # its graph holds a save made outside any module (seen where attached)
    except ImportError:
        pass
    z = gp.instrument(Custom(), name="custom")(x)
    check(gp.saved_bytes_by_module("live") == {"custom": 8 * 16 * 4}, "custom Function: %r"
          % gp.saved_bytes_by_module("live"))
    del z

    # Who keeps graphs: a dict of output objects (dataclasses) holding tensors with a graph, two
    # levels down, is found; and the look keeps nothing alive (Python 3.11's copy of a function's
    # locals, which reading f_locals makes, would keep what the program then deletes).
    import dataclasses

    @dataclasses.dataclass
    class Output:
        logits: torch.Tensor
        extra: tuple

    probe = nn.Linear(16, 4)  # saves nothing the helper tags: x is a leaf without grad
    kept_outputs = {i: Output(probe(x), (None, probe(x) * 2)) for i in range(2)}
    found = [h for h in gp._holders(gp._S) if h["name"] == "kept_outputs"]
    check(len(found) == 1 and found[0]["tensors"] == 4 and found[0]["container"] == "dict",
          "holders: a dict of output objects: %r" % found)
    alive = weakref.ref(kept_outputs[0].logits)
    del kept_outputs, found
    check(alive() is None, "holders: the look kept a deleted output alive")

    # A look made inside a Python trace function (a model called at pdb's prompt) leaves the
    # frame's locals alone: the trace function writes its copy of them back when it returns.
    def under_trace():
        looked = []

        def tracer(frame, event, arg):
            # at inner's return line, its locals set
            if (event == "line" and frame.f_code is inner.__code__ and not looked and
                    frame.f_lineno == inner.__code__.co_firstlineno + 3):
                looked.append(gp._holders(gp._S))
            return tracer

        def inner():
            kept_local = torch.ones(3)
            step = 1
            return kept_local.sum().item() + step

        old = sys.gettrace()
        sys.settrace(tracer)
        try:
            return inner(), bool(looked)
        finally:
            sys.settrace(old)

    try:
        total, looked = under_trace()
        check(total == 4.0 and looked, "under a trace function: %r, looked %r" % (total, looked))
    except NameError as e:  # UnboundLocalError: the frame lost its locals
        fail("a look under a trace function emptied the frame: %s" % e)

    @torch.no_grad()
    def predict(t):
        return model(t)

    y = predict(x)
    check(y.grad_fn is None and torch.is_grad_enabled(), "decorated no_grad")
    with torch.inference_mode():
        y = model(x)
    with torch.no_grad():
        with torch.enable_grad():
            kept = model(x)  # grad on again: saves
        check(gp.saved_bytes_by_module("live") == {"net.1": 8 * 32 * 4}, "enable_grad saves: %r"
              % gp.saved_bytes_by_module("live"))
    del kept
    check(gp.saved_bytes_by_module("live") == {}, "kept freed")
    with torch.set_grad_enabled(False):
        y = model(x)
    check(torch.is_grad_enabled(), "set_grad_enabled restored")

    # An output that dies without backward releases its saved tensors
    with gp.region("inference"):
        y = model(x)
    peak = gp.saved_bytes_by_module("peak")
    del y
    check(gp.saved_bytes_by_module("live") == {}, "output freed")

    # A forward that raises leaves no region open and the helper working
    bad = nn.Sequential(nn.Linear(16, 16), Boom())
    gp.instrument(bad, name="bad")
    try:
        bad(x)
        fail("Boom did not raise")
    except ValueError:
        pass
    y = model(x)
    del y
    check(gp.saved_bytes_by_module("live") == {}, "after the exception")
    gp.mark("end")

    gp.uninstall()
    check(torch.no_grad.__dict__["__enter__"] is originals["no_grad.__enter__"], "no_grad restored")
    check(torch.inference_mode.__dict__["__exit__"] is originals["inference_mode.__exit__"],
          "inference_mode restored")
    check(torch.Tensor.__dict__["backward"] is originals["Tensor.backward"], "backward restored")
    check(torch.autograd.backward is originals["autograd.backward"], "autograd.backward restored")
    with torch.no_grad():  # still works, recorded as nothing
        model(x)

    with open(out_path, "w") as f:
        json.dump({"peak_by_module": peak, "report": gp.saved_report(),
                   "param_bytes": sum(p.numel() * 4 for p in model.parameters())}, f)
    print("torch_helper_prog: ok (%s)" % gp.mode())


if __name__ == "__main__":
    main()
