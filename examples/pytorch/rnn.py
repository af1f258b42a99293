#!/usr/bin/env python3
"""A recurrent sequence tagger's evaluation loop: token embedding, an LSTM, a GRU, a linear tag
classifier at every position; eval mode, a fixed batch of token ids, N forwards.

    python3 rnn.py [--grad | --no-grad | --inference-mode] [--iters N] [--batch B] [--seq S]
                   [--hidden H] [--instrument]
                   [--truth FILE [--truth-method M] [--truth-peak op|end]]

--grad (the default) is the loop that forgot torch.no_grad(): on the CPU both recurrent layers
are computed step by step from matmuls and pointwise ops, and each output keeps a graph holding
every step's gates (sigmoid and tanh outputs), cell and hidden states. --instrument adds the one
line of gradprof's helper (libprof/python/gradprof_torch.py); --truth FILE writes the bytes
autograd saved and held at the program's peak (saved_truth.py) as JSON.
"""
import argparse
import contextlib
import os
import sys

import torch
from torch import nn


class Tagger(nn.Module):
    def __init__(self, vocab, dim, hidden, tags):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.lstm = nn.LSTM(dim, hidden, batch_first=True)
        self.gru = nn.GRU(hidden, hidden, batch_first=True)
        self.tags = nn.Linear(hidden, tags)

    def forward(self, ids):  # ids: (N, S) -> tag scores (N, S, tags)
        h, _ = self.lstm(self.embed(ids))
        h, _ = self.gru(h)
        return self.tags(h)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--grad", dest="mode", action="store_const", const="grad")
    g.add_argument("--no-grad", dest="mode", action="store_const", const="no_grad")
    g.add_argument("--inference-mode", dest="mode", action="store_const", const="inference_mode")
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=1000)
    ap.add_argument("--tags", type=int, default=12)
    ap.add_argument("--instrument", action="store_true", help="gp.instrument(model)")
    ap.add_argument("--truth", metavar="FILE", help="write the saved bytes at the peak (JSON)")
    ap.add_argument("--truth-method", choices=("walk", "hooks", "both"), default="walk")
    ap.add_argument("--truth-peak", choices=("op", "end"), default="op",
                    help="op: locate the peak to the op (not in a recorded run); end: the "
                         "forward's end")
    args = ap.parse_args()
    mode = args.mode or "grad"
    for name in ("iters", "batch", "seq", "dim", "hidden", "vocab", "tags"):
        if getattr(args, name) < 1:
            ap.error("--%s must be at least 1" % name)
    if args.instrument and args.truth_method != "walk":
        ap.error("--truth-method %s would shadow the helper's saved-tensor hooks; use walk"
                 % args.truth_method)
    if args.instrument:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                        "..", "..", "libprof", "python"))
        import gradprof_torch as gp

    torch.manual_seed(0)
    model = Tagger(args.vocab, args.dim, args.hidden, args.tags).eval()
    if args.instrument:
        gp.instrument(model)  # the one line
    truth = None
    if args.truth:
        from saved_truth import SavedTruth
        truth = SavedTruth(model, args.truth_method, args.truth_peak)

    ids = torch.randint(args.vocab, (args.batch, args.seq))
    ctx = {"grad": contextlib.nullcontext, "no_grad": torch.no_grad,
           "inference_mode": torch.inference_mode}[mode]()
    preds = []
    with ctx:
        for _ in range(args.iters):
            scores = model(ids)
            preds.append(scores.argmax(dim=2))
    print("rnn: %s, LSTM+GRU hidden %d, batch %d x %d tokens, %d iters: tags %s, output has a "
          "graph: %s" % (mode, args.hidden, args.batch, args.seq, args.iters,
                         preds[-1][0, :8].tolist(), scores.grad_fn is not None))
    if truth:
        truth.write(args.truth, program="rnn", mode=mode)


if __name__ == "__main__":
    main()
