"""conftest.py - what every test of the binding shares: the package on the path, the devices to run on (the GPU's
tests skip, and say so, where PyTorch sees no CUDA GPU), and poisoned outputs."""
import os
import sys

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")   # cuBLAS's deterministic mode, for the fixture below

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE), HERE]

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                                reason="PyTorch sees no CUDA GPU"))]


@pytest.fixture(autouse=True)
def poisoned_outputs():
    """With deterministic algorithms on, torch.empty fills floating-point tensors with NaN: every output and gradient
    the binding allocates starts poisoned, so an element a kernel never writes fails a check."""
    torch.use_deterministic_algorithms(True, warn_only=True)
    yield
    torch.use_deterministic_algorithms(False)


def random_inputs(B, H, H_kv, Sq, Sk, D, dtype, device, seed, spread=1.0):
    """q, k, v and dO drawn fresh from `seed`, rounded to dtype."""
    g = torch.Generator().manual_seed(seed)

    def draw(*shape):
        return (spread * torch.randn(*shape, generator=g)).to(dtype).to(device)
    return draw(B, H, Sq, D), draw(B, H_kv, Sk, D), draw(B, H_kv, Sk, D), draw(B, H, Sq, D)
