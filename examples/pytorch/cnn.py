#!/usr/bin/env python3
"""A small CNN evaluation loop: K blocks of Conv2d(3x3) + BatchNorm2d + ReLU + MaxPool2d(2), then a
Linear classifier, in eval mode on a fixed batch of 32x32 RGB images.

    python3 cnn.py [--grad | --no-grad | --inference-mode] [--iters N] [--blocks K] [--width C]
                   [--batch B] [--instrument] [--saved-report FILE]
                   [--truth FILE [--truth-method M] [--truth-peak op|end]]

--grad (the default) is the loop that forgot torch.no_grad(): each output keeps a graph holding
every conv output (batch norm's input), ReLU output (in place on batch norm's output; also the
pool's input), the pools' indices and outputs. --instrument adds the one line of gradprof's
helper (libprof/python/gradprof_torch.py); --saved-report FILE (needs --instrument) writes what its
saved-tensor hook saw, per module. --truth FILE writes the bytes autograd saved and held at the
program's peak, found by the program itself (saved_truth.py), as JSON.
"""
import argparse
import contextlib
import json
import os
import sys

import torch
from torch import nn


class CNN(nn.Module):
    def __init__(self, blocks, width, classes=10, size=32):
        super().__init__()
        layers, cin = [], 3
        for i in range(blocks):
            cout = width << i
            layers += [nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout),
                       nn.ReLU(inplace=True), nn.MaxPool2d(2)]
            cin = cout
            size //= 2
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(cin * size * size, classes)

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--grad", dest="mode", action="store_const", const="grad")
    g.add_argument("--no-grad", dest="mode", action="store_const", const="no_grad")
    g.add_argument("--inference-mode", dest="mode", action="store_const", const="inference_mode")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--blocks", type=int, default=3)
    ap.add_argument("--width", type=int, default=16)
    ap.add_argument("--batch", type=int, default=16)
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
    for name in ("iters", "blocks", "width", "batch"):
        if getattr(args, name) < 1:
            ap.error("--%s must be at least 1" % name)
    if args.blocks > 5:
        ap.error("--blocks must be at most 5 (32x32 images)")
    if args.instrument:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                        "..", "..", "libprof", "python"))
        import gradprof_torch as gp

    torch.manual_seed(0)
    model = CNN(args.blocks, args.width).eval()
    if args.instrument:
        gp.instrument(model)  # the one line
    truth = None
    if args.truth:
        from saved_truth import SavedTruth
        truth = SavedTruth(model, args.truth_method, args.truth_peak)

    x = torch.randn(args.batch, 3, 32, 32)
    ctx = {"grad": contextlib.nullcontext, "no_grad": torch.no_grad,
           "inference_mode": torch.inference_mode}[mode]()
    with ctx:
        for _ in range(args.iters):
            out = model(x)
            pred = out.argmax(dim=1)
    print("cnn: %s, %d blocks, width %d, batch %d, %d iters: predictions %s, output has a "
          "graph: %s" % (mode, args.blocks, args.width, args.batch, args.iters,
                         pred[:8].tolist(), out.grad_fn is not None))
    if args.saved_report:
        with open(args.saved_report, "w") as f:
            json.dump(gp.saved_report(), f, indent=1, sort_keys=True)
    if truth:
        truth.write(args.truth, program="cnn", mode=mode)


if __name__ == "__main__":
    main()
