#!/usr/bin/env python3
"""A Transformer text classifier's evaluation loop: token embedding + learned positions, an
nn.TransformerEncoder (2 layers), mean-pooling over the sequence, a linear head; eval mode, a fixed
batch of token ids, N forwards.

    python3 transformer.py [--grad | --no-grad | --inference-mode] [--iters N] [--batch B]
                           [--seq S] [--dim D] [--heads H] [--layers L] [--batch-first]
                           [--instrument]
                           [--truth FILE [--truth-method M] [--truth-peak op|end]]

--grad (the default) is the loop that forgot torch.no_grad(): each output keeps a graph holding
the attention inputs, scores and softmax weights, the feed-forward activations and every layer
norm's input. The encoder takes (S, N, D) as PyTorch's default batch_first=False; --batch-first
uses (N, S, D), where under no_grad / inference_mode PyTorch takes its fused "fast path"
(torch._transformer_encoder_layer_fwd), so the two runs no longer compute the same ops: `gradprof
diff` names those layers as run another way and counts what A made in them as held.
--instrument adds the one line of gradprof's helper (libprof/python/gradprof_torch.py); --truth FILE
writes the bytes autograd saved and held at the program's peak (saved_truth.py) as JSON.
"""
import argparse
import contextlib
import math
import os
import sys

import torch
from torch import nn


class TextClassifier(nn.Module):
    def __init__(self, vocab, dim, heads, layers, max_len, classes=4, batch_first=False):
        super().__init__()
        self.batch_first = batch_first
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(max_len, 1, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=2 * dim,
                                           batch_first=batch_first)
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.head = nn.Linear(dim, classes)
        self.scale = math.sqrt(dim)

    def forward(self, ids):
        if self.batch_first:  # ids: (N, S)
            h = self.embed(ids) * self.scale + self.pos[:ids.shape[1]].transpose(0, 1)
            return self.head(self.encoder(h).mean(dim=1))
        h = self.embed(ids) * self.scale + self.pos[:ids.shape[0]]  # ids: (S, N)
        return self.head(self.encoder(h).mean(dim=0))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--grad", dest="mode", action="store_const", const="grad")
    g.add_argument("--no-grad", dest="mode", action="store_const", const="no_grad")
    g.add_argument("--inference-mode", dest="mode", action="store_const", const="inference_mode")
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=1000)
    ap.add_argument("--batch-first", action="store_true")
    ap.add_argument("--instrument", action="store_true", help="gp.instrument(model)")
    ap.add_argument("--truth", metavar="FILE", help="write the saved bytes at the peak (JSON)")
    ap.add_argument("--truth-method", choices=("walk", "hooks", "both"), default="walk")
    ap.add_argument("--truth-peak", choices=("op", "end"), default="op",
                    help="op: locate the peak to the op (not in a recorded run); end: the "
                         "forward's end")
    args = ap.parse_args()
    mode = args.mode or "grad"
    for name in ("iters", "batch", "seq", "dim", "heads", "layers", "vocab"):
        if getattr(args, name) < 1:
            ap.error("--%s must be at least 1" % name)
    if args.dim % args.heads:
        ap.error("--dim must be a multiple of --heads")
    if args.instrument and args.truth_method != "walk":
        ap.error("--truth-method %s would shadow the helper's saved-tensor hooks; use walk"
                 % args.truth_method)
    if args.instrument:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                        "..", "..", "libprof", "python"))
        import gradprof_torch as gp

    torch.manual_seed(0)
    model = TextClassifier(args.vocab, args.dim, args.heads, args.layers, args.seq,
                           batch_first=args.batch_first).eval()
    if args.instrument:
        gp.instrument(model)  # the one line
    truth = None
    if args.truth:
        from saved_truth import SavedTruth
        truth = SavedTruth(model, args.truth_method, args.truth_peak)

    shape = (args.batch, args.seq) if args.batch_first else (args.seq, args.batch)
    ids = torch.randint(args.vocab, shape)
    ctx = {"grad": contextlib.nullcontext, "no_grad": torch.no_grad,
           "inference_mode": torch.inference_mode}[mode]()
    preds = []
    with ctx:
        for _ in range(args.iters):
            logits = model(ids)
            preds.append(logits.argmax(dim=1))
    print("transformer: %s, %d layers of %d (%d heads), batch %d x %d tokens, %d iters: "
          "predictions %s, output has a graph: %s"
          % (mode, args.layers, args.dim, args.heads, args.batch, args.seq, args.iters,
             preds[-1].tolist(), logits.grad_fn is not None))
    if truth:
        truth.write(args.truth, program="transformer", mode=mode)


if __name__ == "__main__":
    main()
