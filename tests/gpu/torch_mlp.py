"""A PyTorch CUDA MLP evaluation loop, for tests/gpu/run_gpu_checks.sh.

usage: python3 torch_mlp.py grad|nograd [--iters N] [--layers L] [--width W] [--batch B]

`grad` is the classic bug: an evaluation loop without torch.no_grad(), so every iteration builds
an autograd graph that holds the activations saved for backward until the output dies. `nograd`
is the fix. Prints one JSON line: the mode, seconds for the timed iterations, and PyTorch's own
max_memory_allocated (to compare with gradprof's cuda:0 peak under
PYTORCH_NO_CUDA_MEMORY_CACHING=1).
"""
import argparse
import json
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["grad", "nograd"])
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--width", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=256)
    a = ap.parse_args()
    torch.manual_seed(0)
    mods = []
    for _ in range(a.layers):
        mods += [torch.nn.Linear(a.width, a.width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*mods).cuda().eval()
    x = torch.randn(a.batch, a.width, device="cuda")

    def step():
        if a.mode == "grad":
            y = model(x)  # forgot no_grad: the graph and its saved tensors live as long as y
            return float(y.sum())
        with torch.no_grad():
            y = model(x)
            return float(y.sum())

    step()  # warm-up (cuBLAS handles, workspaces)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    total = 0.0
    for _ in range(a.iters):
        total += step()
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    print(json.dumps({"mode": a.mode, "iters": a.iters, "seconds": dt,
                      "torch_max_memory_allocated": torch.cuda.max_memory_allocated(),
                      "layers": a.layers, "width": a.width, "batch": a.batch,
                      "checksum": total}), flush=True)


if __name__ == "__main__":
    main()
