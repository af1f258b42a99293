#!/usr/bin/env python3
"""A pitfall the no_grad guides warn about: an in-place op on a tensor autograd saved for
backward. A gating module computes sigmoid(x) -- sigmoid saves its output for its backward -- and
then scales it in place; the backward of a fine-tuning step then fails with PyTorch's
version-counter error ("one of the variables needed for gradient computation has been modified by
an inplace operation").

    python3 pitfall_inplace.py [--fixed]

--fixed scales out of place (g = g * self.scale). Unmodified: run it under `gradprof run`; the
PyTorch helper notes the error with the tensor's op and the module and line that saved it, and
`gradprof report` / `check` show it as the finding autograd_error.
"""
import argparse

import torch
from torch import nn


class Gate(nn.Module):
    def __init__(self, dim, fixed):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.scale = 2.0
        self.fixed = fixed

    def forward(self, x):
        g = torch.sigmoid(self.proj(x))  # sigmoid saves g for its backward
        if self.fixed:
            g = g * self.scale
        else:
            g.mul_(self.scale)           # the pitfall: g is changed in place after it was saved
        return x * g


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fixed", action="store_true", help="scale out of place")
    args = ap.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), Gate(64, args.fixed), nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    try:
        loss = model(torch.randn(16, 64)).pow(2).mean()
        loss.backward()
        opt.step()
        print("pitfall_inplace: %sthe step ran, loss %.4f" % ("fixed, " if args.fixed else "",
                                                             float(loss)))
    except RuntimeError as e:
        print("pitfall_inplace: the step failed: %s" % str(e).splitlines()[0][:120])
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
