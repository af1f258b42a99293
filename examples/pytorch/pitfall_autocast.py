#!/usr/bin/env python3
"""A pitfall the no_grad guides warn about: mixed-precision inference on the CPU under
torch.autocast with grad left on. Autocast casts each weight to bfloat16 for every matmul and,
while grad is on, keeps the cast copies in its cache until the autocast block ends; with grad on
every op also saves its inputs for a backward that never comes (the bfloat16 weight copies among
them).

    python3 pitfall_autocast.py [--fixed] [--batches N] [--batch B] [--width W]

--fixed evaluates under torch.no_grad() inside the autocast block: no graph, no cache of cast
weights. Unmodified: run it under `gradprof run`; `gradprof check` fails the pitfall (forgot no_grad:
the saved bfloat16 weight copies, op autocast::weight_cast, and activations of the MLP's modules) and
passes the fix.
"""
import argparse
import contextlib

import torch
from torch import nn


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fixed", action="store_true", help="torch.no_grad() inside autocast")
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--width", type=int, default=512)
    args = ap.parse_args()
    for name in ("batches", "batch", "width"):
        if getattr(args, name) < 1:
            ap.error("--%s must be at least 1" % name)
    torch.manual_seed(0)
    w = args.width
    model = nn.Sequential(nn.Linear(w, w), nn.GELU(), nn.Linear(w, w), nn.GELU(),
                          nn.Linear(w, 10)).eval()
    preds = []
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with torch.no_grad() if args.fixed else contextlib.nullcontext():
            for _ in range(args.batches):
                out = model(torch.randn(args.batch, w))
                preds.append(out.argmax(dim=1))
    print("pitfall_autocast: %s%d batches, output dtype %s, output has a graph: %s"
          % ("fixed, " if args.fixed else "", args.batches, out.dtype, out.grad_fn is not None))


if __name__ == "__main__":
    main()
