#!/usr/bin/env python3
"""A pitfall the no_grad guides warn about: an evaluation loop that forgot both model.eval() and
torch.no_grad(). In training mode dropout drops activations and batch norm normalizes by each
batch's statistics and updates its running ones, so the predictions are wrong; with grad on every
op also saves its inputs for a backward pass that never comes. Nothing is kept across batches:
each batch's graph is built and dropped, so the memory shows at the peak, not as growth.

    python3 pitfall_train_mode.py [--fixed] [--batches N] [--batch B]

--fixed calls model.eval() and evaluates under torch.no_grad(). Unmodified: run it under
`gradprof run`; `gradprof check` fails the pitfall (forgot_no_grad over the whole run, which
never ran backward: no call of the model was in eval mode, so none opened an inference region)
and passes the fix.
"""
import argparse
import contextlib

import torch
from torch import nn


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fixed", action="store_true", help="model.eval() and torch.no_grad()")
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--batch", type=int, default=32)
    args = ap.parse_args()
    for name in ("batches", "batch"):
        if getattr(args, name) < 1:
            ap.error("--%s must be at least 1" % name)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64),
                          nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.5),
                          nn.Linear(64, 10))
    if args.fixed:
        model.eval()
    correct = 0
    with torch.no_grad() if args.fixed else contextlib.nullcontext():
        for _ in range(args.batches):
            x, y = torch.randn(args.batch, 3, 32, 32), torch.randint(0, 10, (args.batch,))
            correct += (model(x).argmax(1) == y).sum().item()
    print("pitfall_train_mode: %s%d batches, %d correct, model in %s mode"
          % ("fixed, " if args.fixed else "", args.batches, correct,
             "training" if model.training else "eval"))


if __name__ == "__main__":
    main()
