#!/usr/bin/python3
"""torch_mlp_infer — the PyTorch twin of examples/mlp_infer for profiler overhead (section 1c):
an 8-layer Linear(1024,1024)+ReLU MLP in eval mode, batch 64, ITERS forwards under no_grad,
one thread.    /usr/bin/python3 bench/torch_mlp_infer.py [ITERS (default 50)]"""
import sys

import torch
import torch.nn as nn

torch.set_num_threads(1)
torch.manual_seed(0)
iters = int(sys.argv[1]) if len(sys.argv) > 1 else 50
layers = []
for i in range(8):
    layers.append(nn.Linear(1024, 1024))
    if i < 7:
        layers.append(nn.ReLU())
net = nn.Sequential(*layers).eval()
x = torch.randn(64, 1024)
s = 0.0
with torch.no_grad():
    for _ in range(iters):
        s += float(net(x).sum())
print("torch_mlp_infer: %d iters, checksum %.3f" % (iters, s))
