#!/usr/bin/env python3
"""The classic evaluation-loop leak: `total_loss += loss` keeps every iteration's graph alive.

    python3 accumulate.py [--fixed] [--grad | --no-grad | --inference-mode] [--iters N]
                          [--batch B] [--instrument]

The loop forgot torch.no_grad(), and adds the loss *tensor* to a running total: the total's graph
chains every iteration's graph, with the activations each one saved, so memory grows with every
batch. --fixed applies the one-line fix, `total_loss += float(loss)`; --no-grad /
--inference-mode run the loop under that mode (nothing has a graph, so nothing leaks).
--instrument adds gradprof's helper (libprof/python/gradprof_torch.py): the model's tags, a mark
"iter <i>" at the start of each iteration and a region "inference" around its evaluation work,
which is what gradprof's growth and forgot_no_grad detectors key on.
"""
import argparse
import contextlib
import os
import sys

import torch
import torch.nn.functional as F
from torch import nn


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--grad", dest="mode", action="store_const", const="grad")
    g.add_argument("--no-grad", dest="mode", action="store_const", const="no_grad")
    g.add_argument("--inference-mode", dest="mode", action="store_const", const="inference_mode")
    ap.add_argument("--fixed", action="store_true", help="total_loss += float(loss)")
    ap.add_argument("--iters", type=int, default=8)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--instrument", action="store_true", help="gp.instrument, gp.mark, gp.region")
    args = ap.parse_args()
    mode = args.mode or "grad"
    for name in ("iters", "batch"):
        if getattr(args, name) < 1:
            ap.error("--%s must be at least 1" % name)
    gp = None
    if args.instrument:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                        "..", "..", "libprof", "python"))
        import gradprof_torch as gp

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                          nn.Linear(256, 10)).eval()
    if gp:
        gp.instrument(model, name="model")
    region = gp.region if gp else (lambda name: contextlib.nullcontext())
    ctx = {"grad": contextlib.nullcontext, "no_grad": torch.no_grad,
           "inference_mode": torch.inference_mode}[mode]()

    total_loss = 0.0
    with ctx:
        for i in range(args.iters):
            if gp:
                gp.mark("iter %d" % i)
            x = torch.randn(args.batch, 128)
            y = torch.randint(0, 10, (args.batch,))
            with region("inference"):
                loss = F.cross_entropy(model(x), y)
                if args.fixed:
                    total_loss += float(loss)  # the fix: a Python number, no graph
                else:
                    total_loss += loss         # the bug: a tensor that chains the graphs
            del x, y
    print("accumulate: %s%s, %d iters, batch %d: mean loss %.4f, total has a graph: %s"
          % (mode, ", fixed" if args.fixed else "", args.iters, args.batch,
             float(total_loss) / args.iters,
             getattr(total_loss, "grad_fn", None) is not None))


if __name__ == "__main__":
    main()
