"""test_errors.py - what the kernels do not take is a Python error, never a crash: the kernels stop the process on
bad input (fa_die, exit status 2), so every case here would end pytest itself if the binding let it through."""
import pytest
import torch

import flash_steps
from conftest import DEVICES


def qkv(B=1, H=2, Sq=8, Sk=8, D=64, dtype=torch.float32, device="cpu", H_kv=None):
    H_kv = H if H_kv is None else H_kv
    return (torch.randn(B, H, Sq, D, device=device).to(dtype), torch.randn(B, H_kv, Sk, D, device=device).to(dtype),
            torch.randn(B, H_kv, Sk, D, device=device).to(dtype))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case, call, error, words", [
    ("float64", lambda d: flash_steps.attention(*qkv(dtype=torch.float64, device=d)), TypeError, "float64"),
    ("int", lambda d: flash_steps.attention(*qkv(dtype=torch.int32, device=d)), TypeError, "int32"),
    ("mixed dtypes", lambda d: flash_steps.attention(qkv(device=d)[0].half(), *qkv(device=d)[1:]), TypeError,
     "one dtype"),
    ("3-D", lambda d: flash_steps.attention(*(x[0] for x in qkv(device=d))), ValueError, "4-D"),
    ("D differs", lambda d: flash_steps.attention(qkv(device=d)[0], *qkv(D=32, device=d)[1:]), ValueError,
     "do not fit"),
    ("heads do not divide", lambda d: flash_steps.attention(*qkv(H=6, H_kv=4, device=d)), ValueError, "multiple"),
    ("GQA without enable_gqa", lambda d: flash_steps.scaled_dot_product_attention(*qkv(H=4, H_kv=2, device=d)),
     ValueError, "enable_gqa"),
    ("attn_mask", lambda d: flash_steps.scaled_dot_product_attention(*qkv(device=d), attn_mask=torch.ones(8, 8)),
     ValueError, "attn_mask"),
    ("dropout", lambda d: flash_steps.scaled_dot_product_attention(*qkv(device=d), dropout_p=0.1), ValueError,
     "dropout"),
    ("empty", lambda d: flash_steps.attention(*qkv(Sq=0, device=d)), ValueError, "Sq"),
    ("negative scale", lambda d: flash_steps.attention(*qkv(device=d), scale=-1.0), ValueError, "scale"),
    ("NaN softcap", lambda d: flash_steps.attention(*qkv(device=d), softcap=float("nan")), ValueError, "softcap"),
    ("bad window", lambda d: flash_steps.attention(*qkv(device=d), window=(-3, 2)), ValueError, "window"),
    ("causal window, right bound", lambda d: flash_steps.attention(*qkv(device=d), causal=True, window=(4, 2)),
     ValueError, "right bound"),
    ("two features", lambda d: flash_steps.attention(*qkv(H=4, H_kv=2, device=d), softcap=5.0), ValueError,
     "one at a time"),
    ("half with a feature", lambda d: flash_steps.attention(*qkv(dtype=torch.bfloat16, device=d), window=(4, 4)),
     ValueError, "float32 only"),
    ("atomic dQ with a feature", lambda d: flash_steps.attention(*qkv(device=d), softcap=5.0, deterministic=False),
     ValueError, "deterministic"),
])
def test_refused(device, case, call, error, words):
    with pytest.raises(error, match=words):
        call(device)


def test_other_device():
    with pytest.raises(ValueError, match="meta"):
        flash_steps.attention(*qkv(device="meta"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="PyTorch sees no CUDA GPU")
@pytest.mark.parametrize("case, make, words", [
    ("fp32 D = 24", lambda: qkv(D=24, device="cuda"), "D in"),
    ("bf16 D = 32", lambda: qkv(D=32, dtype=torch.bfloat16, device="cuda"), "D = 64 or 128"),
    ("mixed devices", lambda: (qkv()[0].cuda(), *qkv()[1:]), "one device"),
    # One float past the start of a tensor twice as long: every row starts 4 bytes off a 16-byte boundary.
    ("a view whose rows are not aligned", lambda: tuple(x.view(-1)[1:1 + 2 * 8 * 64].view(1, 2, 8, 64)
                                                        for x in qkv(Sq=16, Sk=16, device="cuda")), "contiguous"),
])
def test_refused_on_gpu(case, make, words):
    with pytest.raises((ValueError, TypeError), match=words):
        flash_steps.attention(*make())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="PyTorch sees no CUDA GPU")
def test_side_stream_refused():
    with torch.cuda.stream(torch.cuda.Stream()):
        with pytest.raises(RuntimeError, match="default CUDA stream"):
            flash_steps.attention(*qkv(device="cuda"))


@pytest.mark.parametrize("device", DEVICES)
def test_strided_views(device):
    """A [B, S, H, D] buffer seen as [B, H, S, D] (a transpose, no copy): the kernels take its strides."""
    q, k, v = (torch.randn(2, 40, 3, 64, device=device).transpose(1, 2) for _ in range(3))
    assert not q.is_contiguous()
    o = flash_steps.attention(q, k, v, causal=True)[0]
    want = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)
    assert (o.double() - want).abs().max() < 1e-5
