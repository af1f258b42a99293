#!/usr/bin/env python3
"""A DataLoader whose worker processes build autograd graphs: the dataset's transform multiplies
by a tensor that requires grad (a learnable kernel by mistake), so each item's graph saves the
input and the tanh output while the item is made; the item is returned detached (as the program
would have to, to send it). The model's evaluation is under no_grad. Run by test_torch.py
(`workers`) under `gradprof run`: `check` must fail the workers' traces on saved memory.

    torch_worker_graph.py [--context fork|spawn]   (how the workers start; default fork)
"""
import argparse

import torch
from torch.utils.data import DataLoader, Dataset


class Smoothed(Dataset):
    def __init__(self):
        self.kernel = torch.randn(64, 64, requires_grad=True)

    def __len__(self):
        return 16

    def __getitem__(self, i):
        x = torch.randn(8, 64)
        return torch.tanh(x @ self.kernel).detach()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--context", choices=["fork", "spawn"], default="fork")
    context = ap.parse_args().context
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 4).eval()
    outs = []
    for batch in DataLoader(Smoothed(), batch_size=4, num_workers=2,
                            multiprocessing_context=context):
        with torch.no_grad():
            outs.append(model(batch))
    print("batches", len(outs))


if __name__ == "__main__":
    main()
