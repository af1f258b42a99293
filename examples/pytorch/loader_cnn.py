#!/usr/bin/env python3
"""A CNN evaluation loop fed by a DataLoader: two VGG-style stages (Conv2d + BatchNorm2d + ReLU,
twice, then MaxPool2d), global average pooling, a linear classifier; eval mode, batches from a
torch.utils.data.DataLoader with forking worker processes over a synthetic TensorDataset.

    python3 loader_cnn.py [--grad | --no-grad | --inference-mode] [--batches N] [--batch B]
                          [--width C] [--workers W] [--instrument]
                          [--truth FILE [--truth-method M] [--truth-peak op|end]]

--grad (the default) is the loop that forgot torch.no_grad(): each output keeps a graph holding
every conv output (batch norm's input), the ReLU outputs (in place on batch norm's outputs), the
pools' indices and the pooled features, while the next batch is evaluated. The workers (fork)
send each batch through shared memory, so the batches are not malloc'ed in the main process.
--instrument adds the one line of gradprof's helper (libprof/python/gradprof_torch.py); --truth FILE
writes the bytes autograd saved and held at the program's peak (saved_truth.py) as JSON.
"""
import argparse
import contextlib
import os
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def stage(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU(inplace=True),
                         nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU(inplace=True), nn.MaxPool2d(2))


class Net(nn.Module):
    def __init__(self, width, classes=10):
        super().__init__()
        self.features = nn.Sequential(stage(3, width), stage(width, 2 * width))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(2 * width, classes)

    def forward(self, x):
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--grad", dest="mode", action="store_const", const="grad")
    g.add_argument("--no-grad", dest="mode", action="store_const", const="no_grad")
    g.add_argument("--inference-mode", dest="mode", action="store_const", const="inference_mode")
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--width", type=int, default=16)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--instrument", action="store_true", help="gp.instrument(model)")
    ap.add_argument("--truth", metavar="FILE", help="write the saved bytes at the peak (JSON)")
    ap.add_argument("--truth-method", choices=("walk", "hooks", "both"), default="walk")
    ap.add_argument("--truth-peak", choices=("op", "end"), default="op",
                    help="op: locate the peak to the op (not in a recorded run); end: the "
                         "forward's end")
    args = ap.parse_args()
    mode = args.mode or "grad"
    for name in ("batches", "batch", "width"):
        if getattr(args, name) < 1:
            ap.error("--%s must be at least 1" % name)
    if args.workers < 0:
        ap.error("--workers must be at least 0")
    if args.instrument and args.truth_method != "walk":
        ap.error("--truth-method %s would shadow the helper's saved-tensor hooks; use walk"
                 % args.truth_method)
    if args.instrument:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                        "..", "..", "libprof", "python"))
        import gradprof_torch as gp

    torch.manual_seed(0)
    images = torch.randn(args.batches * args.batch, 3, 32, 32)
    labels = torch.randint(10, (args.batches * args.batch,))
    loader = DataLoader(TensorDataset(images, labels), batch_size=args.batch, shuffle=False,
                        num_workers=args.workers,
                        multiprocessing_context="fork" if args.workers else None)
    model = Net(args.width).eval()
    if args.instrument:
        gp.instrument(model)  # the one line
    truth = None
    if args.truth:
        from saved_truth import SavedTruth
        truth = SavedTruth(model, args.truth_method, args.truth_peak)

    ctx = {"grad": contextlib.nullcontext, "no_grad": torch.no_grad,
           "inference_mode": torch.inference_mode}[mode]()
    correct = seen = 0
    with ctx:
        for x, y in loader:
            out = model(x)
            correct += int((out.argmax(dim=1) == y).sum())
            seen += len(y)
    print("loader_cnn: %s, width %d, %d batches of %d from %d workers: accuracy %d/%d, output "
          "has a graph: %s" % (mode, args.width, args.batches, args.batch, args.workers, correct,
                               seen, out.grad_fn is not None))
    if truth:
        truth.write(args.truth, program="loader_cnn", mode=mode)


if __name__ == "__main__":
    main()
