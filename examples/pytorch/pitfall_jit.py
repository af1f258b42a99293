#!/usr/bin/env python3
"""A pitfall the no_grad guides warn about: a TorchScript model (torch.jit.trace) evaluated
without torch.no_grad(). Tracing does not turn autograd off: the traced model builds the same
graph, saving every activation its backward would need, and a serving loop that keeps outputs
keeps their graphs.

    python3 pitfall_jit.py [--fixed] [--batches N] [--batch B]

--fixed evaluates under torch.no_grad() (both trace under it). Unmodified: run it under `gradprof run`; `gradprof check`
fails the pitfall (forgot no_grad in the traced model, Sequential[jit]: its submodules run inside
TorchScript, so they have no regions of their own) and passes the fix.
"""
import argparse
import contextlib

import torch
from torch import nn


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fixed", action="store_true", help="evaluate under torch.no_grad()")
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--batch", type=int, default=32)
    args = ap.parse_args()
    for name in ("batches", "batch"):
        if getattr(args, name) < 1:
            ap.error("--%s must be at least 1" % name)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(32, 10)).eval()
    with torch.no_grad():  # tracing itself needs no graph
        traced = torch.jit.trace(model, torch.randn(1, 3, 32, 32))
    outputs = []
    with torch.no_grad() if args.fixed else contextlib.nullcontext():
        for _ in range(args.batches):
            outputs.append(traced(torch.randn(args.batch, 3, 32, 32)))
    print("pitfall_jit: %s%d batches, outputs have graphs: %s"
          % ("fixed, " if args.fixed else "", args.batches, outputs[-1].grad_fn is not None))


if __name__ == "__main__":
    main()
