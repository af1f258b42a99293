#!/usr/bin/env python3
"""A pitfall the inference_mode guides warn about: tensors made under torch.inference_mode()
used later where autograd needs them. Features are cached by an inference pass under
inference_mode (faster than no_grad: no version counters), then a fine-tuning step trains a head
on them; saving an inference tensor for backward fails ("Inference tensors cannot be saved for
backward").

    python3 pitfall_inference_tensor.py [--fixed]

--fixed caches the features under torch.no_grad() instead (normal tensors without a graph).
Unmodified: run it under `gradprof run`; the PyTorch helper notes the error with the module and
line that tried to save the tensor, and `gradprof report` / `check` show it as the finding
autograd_error.
"""
import argparse

import torch
from torch import nn


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fixed", action="store_true", help="cache features under no_grad")
    args = ap.parse_args()
    torch.manual_seed(0)
    backbone = nn.Sequential(nn.Linear(32, 64), nn.ReLU()).eval()
    head = nn.Linear(64, 2)
    x = torch.randn(128, 32)
    with torch.no_grad() if args.fixed else torch.inference_mode():
        features = backbone(x)  # the cache: inference tensors under inference_mode
    opt = torch.optim.SGD(head.parameters(), lr=0.1)
    try:
        loss = head(features).logsumexp(dim=1).mean()  # linear saves `features` for backward
        loss.backward()
        opt.step()
        print("pitfall_inference_tensor: %sthe step ran, loss %.4f"
              % ("fixed, " if args.fixed else "", float(loss)))
    except RuntimeError as e:
        print("pitfall_inference_tensor: the step failed: %s" % str(e).splitlines()[0][:120])
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
