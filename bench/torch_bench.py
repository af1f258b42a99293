#!/usr/bin/python3
"""torch_bench — PyTorch twin of bench/tensor_bench.c: one timing run of one model in one grad mode.

    /usr/bin/python3 bench/torch_bench.py MODEL MODE [ITERS] [THREADS]

Same models, shapes, warm-up (3), loop (ITERS, default 20, previous output kept until the next is
made) and output line as tensor_bench:
    ms    median milliseconds per forward (or training step)
    peak  torch.profiler's memory accounting is not used (it costs more than the forward); CPU
          tensors are invisible to tracemalloc, so peak = hwm here
    hwm   VmHWM (peak resident set) growth over the first two forwards (the second made while the
          first output is held), from right after setup, /proc/self/status, bytes
    rss   VmHWM growth over the whole run (warm-up and timed loop), from right after setup, bytes
THREADS (default 1) goes to torch.set_num_threads and set_num_interop_threads.
"""
import statistics
import sys
import time

import torch
import torch.nn as nn


def vm_hwm():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 3, 1, 1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2, 2),
            nn.Conv2d(32, 64, 3, 1, 1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2, 2))
        self.head = nn.Linear(64 * 8 * 8, 10)

    def forward(self, x):
        return self.head(self.features(x).reshape(x.shape[0], -1))


def build(kind):
    torch.manual_seed(0)
    if kind == "mlp":
        layers = []
        for i in range(8):
            layers.append(nn.Linear(1024, 1024))
            if i < 7:
                layers.append(nn.ReLU())
        return nn.Sequential(*layers), torch.randn(64, 1024), torch.randn(64, 1024)
    if kind == "cnn":
        return CNN(), torch.randn(32, 3, 32, 32), torch.randn(32, 10)
    if kind == "transformer":
        layer = nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.1, activation="relu",
                                           batch_first=True, norm_first=False)
        return layer, torch.randn(8, 64, 256), torch.randn(8, 64, 256)
    raise SystemExit("torch_bench: bad model")


def main():
    kind, mode = sys.argv[1], sys.argv[2]
    iters = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    threads = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    torch.set_num_threads(threads)
    torch.set_num_interop_threads(threads)
    net, x, target = build(kind)
    net.eval()
    opt = torch.optim.SGD(net.parameters(), lr=0.01) if mode == "train" else None
    ctx = {"grad": torch.enable_grad, "no_grad": torch.no_grad,
           "inference_mode": torch.inference_mode, "train": torch.enable_grad}[mode]
    times = []
    y = None
    hwm0 = vm_hwm()
    hwm = 0
    for it in range(-3, iters):
        if it == -1:  # VmHWM only grows: measured over the first two forwards, before warm-up
            hwm = vm_hwm() - hwm0
        if it == 0:
            y = None
        t0 = time.perf_counter()
        if opt is not None:
            opt.zero_grad(set_to_none=True)
            loss = nn.functional.mse_loss(net(x), target)
            loss.backward()
            opt.step()
            del loss
        else:
            y = None  # the previous output (and any graph it holds) goes now
            with ctx():
                y = net(x)
        if it >= 0:
            times.append((time.perf_counter() - t0) * 1e3)
    rss = vm_hwm() - hwm0
    params = sum(p.numel() * 4 for p in net.parameters())
    print("ms=%.4f peak=%d hwm=%d rss=%d params=%d" % (statistics.median(times), hwm, hwm, rss,
                                                      params))


if __name__ == "__main__":
    main()
