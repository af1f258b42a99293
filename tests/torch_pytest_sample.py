"""Sample tests for gradprof's pytest plugin (libprof/python/gradprof_pytest.py), run by
test_torch.py's `pytest` subtest: the tests named *_fails must fail with the plugin's message,
the others must pass."""
import pytest
import torch
from torch import nn


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                         nn.Linear(64, 4)).eval()


@pytest.mark.no_graph
def test_forgot_no_grad_fails():
    model = mlp()
    out = model(torch.randn(8, 32))
    assert out.shape == (8, 4)


@pytest.mark.no_graph
def test_no_grad_passes():
    model = mlp()
    with torch.no_grad():
        out = model(torch.randn(8, 32))
    assert out.shape == (8, 4)


@pytest.mark.no_graph
def test_inference_mode_passes():
    model = mlp()
    with torch.inference_mode():
        assert model(torch.randn(8, 32)).shape == (8, 4)


@pytest.mark.no_graph
def test_grad_allocated_fails():
    model = mlp()
    model(torch.randn(8, 32)).sum().backward()


@pytest.mark.limit_graph_growth("8KiB")
def test_accumulate_fails():
    model = mlp()
    total_loss = 0
    for _ in range(6):
        total_loss = total_loss + model(torch.randn(8, 32)).sum()


@pytest.mark.limit_graph_growth("8KiB")
def test_accumulate_float_passes():
    model = mlp()
    total_loss = 0.0
    for _ in range(6):
        total_loss += float(model(torch.randn(8, 32)).sum())


@pytest.mark.limit_graph_growth("8KiB")
def test_growing_data_passes():
    model = mlp()
    outputs = []
    with torch.no_grad():
        for _ in range(6):
            outputs.append(model(torch.randn(256, 32)))


def test_unmarked_passes():
    model = mlp()
    assert model(torch.randn(2, 32)).grad_fn is not None
