#!/usr/bin/env python3
"""An MLP evaluation loop, as people write it: eval mode, a fixed batch, N forwards.

    python3 mlp.py [--grad | --no-grad | --inference-mode] [--iters N] [--layers L] [--width W]
                   [--batch B] [--instrument] [--saved-report FILE]
                   [--truth FILE [--truth-method M] [--truth-peak op|end]]

--grad (the default) is the loop that forgot torch.no_grad(): each output keeps a graph holding
the ReLU outputs (L x B x W x 4 bytes). --instrument adds the one line of gradprof's helper
(libprof/python/gradprof_torch.py) for exact tags; --saved-report FILE (needs --instrument) writes
what its saved-tensor hook saw, per module, as JSON. Unmodified, run it under `gradprof run` and
the frame rules classify PyTorch's allocations by their call stacks. --truth FILE writes the
bytes autograd saved and held at the program's peak, found by the program itself
(saved_truth.py), as JSON.
"""
import argparse
import contextlib
import json
import os
import sys

import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self, width, layers, classes=10):
        super().__init__()
        blocks = []
        for _ in range(layers):
            blocks += [nn.Linear(width, width), nn.ReLU()]
        self.body = nn.Sequential(*blocks)
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        return self.head(self.body(x))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--grad", dest="mode", action="store_const", const="grad")
    g.add_argument("--no-grad", dest="mode", action="store_const", const="no_grad")
    g.add_argument("--inference-mode", dest="mode", action="store_const", const="inference_mode")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--instrument", action="store_true", help="gp.instrument(model)")
    ap.add_argument("--saved-report", metavar="FILE")
    ap.add_argument("--truth", metavar="FILE", help="write the saved bytes at the peak (JSON)")
    ap.add_argument("--truth-method", choices=("walk", "hooks", "both"), default="walk")
    ap.add_argument("--truth-peak", choices=("op", "end"), default="op",
                    help="op: locate the peak to the op (not in a recorded run); end: the "
                         "forward's end")
    args = ap.parse_args()
    mode = args.mode or "grad"
    if args.saved_report and not args.instrument:
        ap.error("--saved-report needs --instrument")
    if args.instrument and args.truth_method != "walk":
        ap.error("--truth-method %s would shadow the helper's saved-tensor hooks; use walk"
                 % args.truth_method)
    for name in ("iters", "layers", "width", "batch"):
        if getattr(args, name) < 1:
            ap.error("--%s must be at least 1" % name)

    if args.instrument:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                        "..", "..", "libprof", "python"))
        import gradprof_torch as gp

    torch.manual_seed(0)
    model = MLP(args.width, args.layers).eval()
    if args.instrument:
        gp.instrument(model)  # the one line
    truth = None
    if args.truth:
        from saved_truth import SavedTruth
        truth = SavedTruth(model, args.truth_method, args.truth_peak)

    x = torch.randn(args.batch, args.width)
    ctx = {"grad": contextlib.nullcontext, "no_grad": torch.no_grad,
           "inference_mode": torch.inference_mode}[mode]()
    with ctx:
        for _ in range(args.iters):
            out = model(x)
            pred = out.argmax(dim=1)
    print("mlp: %s, %d layers of %d, batch %d, %d iters: predictions %s, output has a graph: %s"
          % (mode, args.layers, args.width, args.batch, args.iters, pred[:8].tolist(),
             out.grad_fn is not None))
    if args.saved_report:
        rep = gp.saved_report()
        with open(args.saved_report, "w") as f:
            json.dump(rep, f, indent=1, sort_keys=True)
    if truth:
        truth.write(args.truth, program="mlp", mode=mode)


if __name__ == "__main__":
    main()
