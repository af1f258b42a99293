#!/usr/bin/env python3
"""A ResNet-18 evaluation loop: torchvision's resnet18 with random weights, eval mode, a fixed
batch of RGB images, N forwards.

    python3 resnet.py [--grad | --no-grad | --inference-mode] [--iters N] [--batch B] [--size S]
                      [--instrument]
                      [--truth FILE [--truth-method M] [--truth-peak op|end]]

--grad (the default) is the loop that forgot torch.no_grad(): each output keeps a graph holding
every convolution's input, batch norm's input, the in-place ReLU outputs, the max-pool indices
and the pooled features (the previous output's graph is still alive while the next forward runs).
--instrument adds the one line of gradprof's helper (libprof/python/gradprof_torch.py). --truth FILE
writes the bytes autograd saved and held at the program's peak, found by the program itself
(saved_truth.py), as JSON.
"""
import argparse
import contextlib
import os
import sys

import torch
import torchvision


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--grad", dest="mode", action="store_const", const="grad")
    g.add_argument("--no-grad", dest="mode", action="store_const", const="no_grad")
    g.add_argument("--inference-mode", dest="mode", action="store_const", const="inference_mode")
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--size", type=int, default=112, help="image height and width")
    ap.add_argument("--instrument", action="store_true", help="gp.instrument(model)")
    ap.add_argument("--truth", metavar="FILE", help="write the saved bytes at the peak (JSON)")
    ap.add_argument("--truth-method", choices=("walk", "hooks", "both"), default="walk")
    ap.add_argument("--truth-peak", choices=("op", "end"), default="op",
                    help="op: locate the peak to the op (not in a recorded run); end: the "
                         "forward's end")
    args = ap.parse_args()
    mode = args.mode or "grad"
    for name in ("iters", "batch"):
        if getattr(args, name) < 1:
            ap.error("--%s must be at least 1" % name)
    if args.size < 32:
        ap.error("--size must be at least 32")
    if args.instrument and args.truth_method != "walk":
        ap.error("--truth-method %s would shadow the helper's saved-tensor hooks; use walk"
                 % args.truth_method)
    if args.instrument:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                        "..", "..", "libprof", "python"))
        import gradprof_torch as gp

    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).eval()
    if args.instrument:
        gp.instrument(model)  # the one line
    truth = None
    if args.truth:
        from saved_truth import SavedTruth
        truth = SavedTruth(model, args.truth_method, args.truth_peak)

    x = torch.randn(args.batch, 3, args.size, args.size)
    ctx = {"grad": contextlib.nullcontext, "no_grad": torch.no_grad,
           "inference_mode": torch.inference_mode}[mode]()
    preds = []
    with ctx:
        for _ in range(args.iters):
            out = model(x)
            preds.append(out.argmax(dim=1))
    print("resnet18: %s, batch %d of %dx%d, %d iters: predictions %s, output has a graph: %s"
          % (mode, args.batch, args.size, args.size, args.iters, preds[-1].tolist(),
             out.grad_fn is not None))
    if truth:
        truth.write(args.truth, program="resnet", mode=mode)


if __name__ == "__main__":
    main()
