#!/usr/bin/env python3
"""Phase 4 at large logits, beside PyTorch: the accuracy table of docs/04-backward.md.

Makes the inputs (q, k ~ 8 * randn, v, dO ~ randn: logits of a few hundred), runs phase4_backward on them with
--load-dir (CPU and GPU: its check block holds the flash rows to 3x the error of the naive rows, which keep their
forward's P), and, where PyTorch is installed, prints the max abs error against float64 of PyTorch's float32 math
and memory-efficient attention on the same inputs, measured the same way.

Usage: tools/large_logits.py [--bin build/bin] [--dir DIR] [--B 2 --H 2 --S 333 --D 16] [--seed 0] [--impl all]
                             [--no-pytorch]
Needs NumPy (without it: exit 77, which ctest reports as skipped; tests/test_large_logits.c checks the same rule
in C); PyTorch is optional (its rows are left out without it, or without a GPU)."""
import argparse
import pathlib
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    print("SKIPPED: tools/large_logits.py needs NumPy (python3 -m pip install numpy); "
          "test_large_logits checks the same rule without it")
    sys.exit(77)

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--bin", default="build/bin")
parser.add_argument("--dir", default=None, help="where the inputs go (default: a temporary folder)")
for name, default in (("B", 2), ("H", 2), ("S", 333), ("D", 16), ("seed", 0)):
    parser.add_argument(f"--{name}", type=int, default=default)
parser.add_argument("--impl", default="all")
parser.add_argument("--no-pytorch", action="store_true", help="the suite's rows only (the tests use this)")
args = parser.parse_args()

folder = pathlib.Path(args.dir or tempfile.mkdtemp(prefix="large_logits_"))
folder.mkdir(parents=True, exist_ok=True)
rng = np.random.default_rng(args.seed)
shape = (args.B, args.H, args.S, args.D)
inputs = {"q": 8 * rng.standard_normal(shape), "k": 8 * rng.standard_normal(shape),
          "v": rng.standard_normal(shape), "do": rng.standard_normal(shape)}
for name, x in inputs.items():
    np.save(folder / f"{name}.npy", x.astype(np.float32))

command = [f"{args.bin}/phase4_backward", "--load-dir", str(folder), "--causal", "--impl", args.impl, "--iters", "0"]
print("$ " + " ".join(command), flush=True)
status = subprocess.run(command).returncode
if args.no_pytorch:
    sys.exit(status)

try:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    have_gpu = torch.cuda.is_available()
except ImportError:
    have_gpu = False
if not have_gpu:
    print("PyTorch rows left out: no PyTorch with a GPU here")
    sys.exit(status)


def attention(dtype, device, backend=None):
    """O, dQ, dK, dV of causal attention on the saved inputs, in dtype on device (float32 values as saved)."""
    q, k, v, do = (torch.tensor(inputs[n].astype(np.float32), dtype=dtype, device=device, requires_grad=n != "do")
                   for n in ("q", "k", "v", "do"))
    if backend is None:
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:
        with sdpa_kernel(backend):
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    o.backward(do)
    return {n: t.detach().double().cpu().numpy() for n, t in (("O", o), ("dQ", q.grad), ("dK", k.grad), ("dV", v.grad))}


reference = attention(torch.float64, "cpu")
rows = {"PyTorch float32 math (P kept)": attention(torch.float32, "cuda", SDPBackend.MATH),
        "PyTorch float32 memory-efficient": attention(torch.float32, "cuda", SDPBackend.EFFICIENT_ATTENTION)}
print(f"\nmax abs error against float64 ({torch.cuda.get_device_name()}, PyTorch {torch.__version__}):")
print("| | " + " | ".join(reference) + " |\n|---|" + "---|" * len(reference))
for label, got in rows.items():
    print(f"| {label} | " + " | ".join(f"{np.abs(got[n] - reference[n]).max():.2g}" for n in reference) + " |")
sys.exit(status)
