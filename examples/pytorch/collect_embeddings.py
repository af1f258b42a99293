#!/usr/bin/env python3
"""Sentence embeddings collected in a list, as an indexing job writes them: a small text encoder
(token embedding, a 2-layer nn.TransformerEncoder, mean pooling) in eval mode over N batches.

    python3 collect_embeddings.py [--fixed] [--batches N] [--batch B] [--seq S] [--dim D]

The bug: the loop forgot torch.no_grad() and keeps each batch's output, `embeddings.append(emb)`:
every kept tensor holds its graph, with all the activations it saved, so memory grows by a whole
forward's worth per batch. --fixed runs the loop under torch.no_grad(): the list still grows by
the embeddings themselves (B x D floats per batch), which is the program's data, not a leak.
Unmodified: run it under `gradprof run` as it is.
"""
import argparse
import contextlib

import torch
from torch import nn


class Encoder(nn.Module):
    def __init__(self, vocab, dim, heads, layers):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        layer = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=2 * dim)
        self.encoder = nn.TransformerEncoder(layer, layers)

    def forward(self, ids):  # ids: (S, N) -> (N, D)
        return self.encoder(self.embed(ids)).mean(dim=0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fixed", action="store_true", help="the loop under torch.no_grad()")
    ap.add_argument("--batches", type=int, default=6)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--dim", type=int, default=64)
    args = ap.parse_args()
    for name in ("batches", "batch", "seq", "dim"):
        if getattr(args, name) < 1:
            ap.error("--%s must be at least 1" % name)
    torch.manual_seed(0)
    model = Encoder(1000, args.dim, 4, 2).eval()
    embeddings = []
    with torch.no_grad() if args.fixed else contextlib.nullcontext():
        for _ in range(args.batches):
            ids = torch.randint(0, 1000, (args.seq, args.batch))
            emb = model(ids)
            embeddings.append(emb)  # the bug without no_grad: emb keeps its whole graph
    print("collect_embeddings: %s%d batches, %d embeddings, last has a graph: %s"
          % ("fixed, " if args.fixed else "", args.batches, sum(e.shape[0] for e in embeddings),
             embeddings[-1].grad_fn is not None))


if __name__ == "__main__":
    main()
