#!/usr/bin/env python3
"""Greedy generation with a key/value cache kept on the attention module across calls, as a
decoder serving loop does: a 2-block decoder (causal self-attention with the cache, an MLP) and
a linear head; eval mode, one token per step.

    python3 kv_cache.py [--fixed] [--steps N] [--batch B] [--dim D]

The bug: generation runs with grad on, and each step appends its keys and values to
`self.k_cache` / `self.v_cache` with torch.cat: the cache holds a graph that reaches back through
every earlier step, so each step keeps all the activations of all the steps before it. --fixed
runs generation under torch.inference_mode(): the cache still grows by B x D floats per step and
block (the program's data), with no graph.
Unmodified: run it under `gradprof run` as it is.
"""
import argparse
import contextlib

import torch
import torch.nn.functional as F
from torch import nn


class CachedSelfAttention(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.k_cache = None
        self.v_cache = None

    def forward(self, x):  # x: (N, 1, D), one new token per sequence
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        self.k_cache = k if self.k_cache is None else torch.cat([self.k_cache, k], dim=1)
        self.v_cache = v if self.v_cache is None else torch.cat([self.v_cache, v], dim=1)
        att = F.softmax(q @ self.k_cache.transpose(1, 2) / k.shape[-1] ** 0.5, dim=-1)
        return self.out(att @ self.v_cache)


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.attn = CachedSelfAttention(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Decoder(nn.Module):
    def __init__(self, vocab, dim, blocks):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.Sequential(*[Block(dim) for _ in range(blocks)])
        self.head = nn.Linear(dim, vocab)

    def forward(self, token):  # token: (N, 1) -> logits (N, vocab)
        return self.head(self.blocks(self.embed(token)))[:, -1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fixed", action="store_true", help="generate under torch.inference_mode()")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--dim", type=int, default=128)
    args = ap.parse_args()
    for name in ("steps", "batch", "dim"):
        if getattr(args, name) < 1:
            ap.error("--%s must be at least 1" % name)
    torch.manual_seed(0)
    model = Decoder(500, args.dim, 2).eval()
    token = torch.zeros(args.batch, 1, dtype=torch.long)
    generated = []
    with torch.inference_mode() if args.fixed else contextlib.nullcontext():
        for _ in range(args.steps):
            logits = model(token)
            token = logits.argmax(dim=-1, keepdim=True)
            generated.append(token)
    cache = model.blocks[0].attn.k_cache
    print("kv_cache: %s%d steps, cache %s, cache has a graph: %s"
          % ("fixed, " if args.fixed else "", args.steps, tuple(cache.shape),
             cache.grad_fn is not None))


if __name__ == "__main__":
    main()
