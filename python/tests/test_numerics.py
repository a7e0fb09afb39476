"""test_numerics.py - the binding's forward and backward against float64, by the suite's rule (reference.py): at
most 2x (O, LSE) and 3x (dQ, dK, dV) the error of a straightforward attention at the same precision, measured here
on the same inputs. Odd shapes (one row, Sq != Sk, lengths that are not multiples of a tile), causal or not, and
each feature of phase 6, on the CPU and (where there is one) the GPU."""
import pytest
import torch

import flash_steps
from conftest import DEVICES, random_inputs
from reference import FLOAT32_FLOOR, reference, reference_half, relative_error

# (B, H, H_kv, Sq, Sk, D): one row and one key; Sq < Sk and Sq > Sk, neither a multiple of 64; a long square one.
SHAPES = [(1, 1, 1, 1, 1, 64), (2, 3, 3, 37, 45, 64), (1, 2, 2, 130, 67, 32), (1, 2, 2, 200, 200, 128)]
CPU_ONLY_SHAPES = [(2, 2, 2, 29, 31, 24)]   # a head dim the GPU kernels are not compiled for


def run_binding(q, k, v, dout, deterministic=True, **features):
    q, k, v = (x.clone().requires_grad_() for x in (q, k, v))
    o, lse = flash_steps.attention(q, k, v, deterministic=deterministic, **features)
    o.backward(dout)
    return o, lse, q.grad, k.grad, v.grad


def check_rule(got, truth, yardstick, seen_rows=None):
    """got, truth, yardstick: (O, LSE, dQ, dK, dV). LSE is compared on the rows that see a key (the others hold
    the largest float by the kernels' rule, and -inf in the truth). A gradient is measured against the largest of
    the three: with one key (Sk = 1) softmax has zero derivative, so dQ and dK are exactly zero in float64, and what a
    kernel leaves there (dP - Delta, two sums of the same terms in different orders) is rounding, small next to dV."""
    gradient_size = max(t.abs().max().item() for t in truth[2:])
    for name, g, t, y, factor in zip(("O", "LSE", "dQ", "dK", "dV"), got, truth, yardstick, (2, 2, 3, 3, 3)):
        where = seen_rows if name == "LSE" else None
        size = gradient_size if name in ("dQ", "dK", "dV") else 0.0
        err = relative_error(g, t, where, size)
        allowed = factor * relative_error(y, t, where, size) + FLOAT32_FLOOR
        assert err <= allowed, f"{name}: error {err:.3g} against float64, allowed {allowed:.3g}"


def check_float32(device, shape, seed, spread=1.0, **features):
    B, H, H_kv, Sq, Sk, D = shape
    q, k, v, dout = random_inputs(B, H, H_kv, Sq, Sk, D, torch.float32, device, seed, spread)
    got = run_binding(q, k, v, dout, **features)
    truth = reference(q, k, v, dout, torch.float64, **features)
    yardstick = reference(q, k, v, dout, torch.float32, **features)
    check_rule(got, truth, yardstick, seen_rows=torch.isfinite(truth[1]))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES + CPU_ONLY_SHAPES)
def test_float32(device, causal, shape):
    if device == "cuda" and shape in CPU_ONLY_SHAPES:
        pytest.skip("D = 24: the float32 CUDA kernels take D in {16, 32, 64, 128}")
    check_float32(device, shape, seed=11, causal=causal)


@pytest.mark.parametrize("device", DEVICES)
def test_float32_large_logits(device):
    # Scores of a few hundred: where the LSE's residual matters to the backward (common/fa_math.h).
    check_float32(device, (1, 2, 2, 70, 90, 64), seed=12, spread=4.0, causal=True)


@pytest.mark.parametrize("device", DEVICES)
def test_float32_atomic_dq(device):
    B, H, H_kv, Sq, Sk, D = 1, 2, 2, 70, 90, 64
    q, k, v, dout = random_inputs(B, H, H_kv, Sq, Sk, D, torch.float32, device, 13)
    got = run_binding(q, k, v, dout, deterministic=False)
    check_rule(got, reference(q, k, v, dout, torch.float64), reference(q, k, v, dout, torch.float32))


FEATURES = [
    ("gqa", (2, 6, 2, 45, 53, 64), {}),
    ("mqa causal", (1, 4, 1, 70, 70, 32), {"causal": True}),
    ("window", (1, 2, 2, 100, 90, 64), {"window": (16, 8)}),
    ("window left only", (1, 2, 2, 77, 77, 64), {"window": (20, -1)}),
    ("causal window", (1, 2, 2, 100, 100, 64), {"causal": True, "window": (31, -1)}),
    ("window, rows that see no key", (1, 1, 1, 90, 40, 64), {"window": (10, 0)}),
    ("softcap", (1, 2, 2, 60, 70, 64), {"softcap": 2.0}),
    ("softcap causal", (2, 2, 2, 65, 65, 128), {"softcap": 30.0, "causal": True}),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name, shape, features", FEATURES, ids=[f[0] for f in FEATURES])
def test_phase6_features(device, name, shape, features):
    check_float32(device, shape, seed=21, spread=2.0 if "softcap" in name else 1.0, **features)


HALF_SHAPES = [(1, 1, 1, 1, 1, 64), (2, 3, 3, 37, 45, 64), (1, 2, 2, 130, 67, 128), (1, 2, 2, 200, 200, 64)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", HALF_SHAPES)
def test_half(device, dtype, causal, shape):
    B, H, H_kv, Sq, Sk, D = shape
    q, k, v, dout = random_inputs(B, H, H_kv, Sq, Sk, D, dtype, device, 31)
    o, lse, dq, dk, dv = run_binding(q, k, v, dout, causal=causal)
    assert o.dtype == dtype and dq.dtype == dtype
    # The binding's O and gradients are the kernels' float32 values rounded once more to dtype, as a model gets them;
    # the kernels' own error is measured on the float32 values.
    q32, k32, v32 = (x.clone().requires_grad_() for x in (q, k, v))
    o32, lse32, *_ = flash_steps.ops.forward(q32, k32, v32, causal, D ** -0.5, -1, -1, 0.0, True)
    dq32, dk32, dv32 = flash_steps.ops.backward(dout, q, k, v, o32, lse32, torch.zeros_like(lse32), causal, D ** -0.5,
                                                -1, -1, 0.0, True)
    truth = reference(q, k, v, dout, torch.float64, causal=causal)
    yardstick = reference_half(q, k, v, dout, dtype, causal=causal)
    check_rule((o32, lse32, dq32, dk32, dv32), truth, yardstick)
    for rounded, exact in ((o, o32), (dq, dq32), (dk, dk32), (dv, dv32)):
        assert torch.equal(rounded, exact.to(dtype))
