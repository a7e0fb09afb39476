"""reference.py - the yardsticks of the binding's tests, in PyTorch.

The suite's rule (common/fa_driver.c, fa_make_half_rule): a kernel's error against float64 may be at most 2x
(forward) or 3x (gradients) the error of a straightforward attention at the same precision, measured in the same
run, plus a floor of a few float32 roundings. The straightforward attention materialises S and P:
  - float32 (and float64, the truth): reference() below, with autograd for the gradients;
  - fp16 / bf16: reference_half(), which rounds where the tensor-core kernels round (common/fa_half.h): S and P in
    float32 from the half inputs, P rounded to the half type before P V, dS from the unrounded P, rounded before
    dS K and dS^T Q.
"""
import torch

FLOAT32_FLOOR = 1e-6   # relative to the tensor's largest value: a few float32 roundings


def scores_mask(Sq, Sk, causal, window, device):
    """True where row i may see key j: causal is j <= i; a window (left, right) is i - left <= j <= i + right."""
    i = torch.arange(Sq, device=device)[:, None]
    j = torch.arange(Sk, device=device)[None, :]
    seen = torch.ones(Sq, Sk, dtype=torch.bool, device=device)
    left, right = (-1, -1) if window is None else window
    if causal:
        right = 0
    if left >= 0:
        seen &= j >= i - left
    if right >= 0:
        seen &= j <= i + right
    return seen


def expand_heads(x, H):
    """GQA: K/V head h // (H / H_kv) serves query head h."""
    return x.repeat_interleave(H // x.shape[1], dim=1)


def reference(q, k, v, dout, dtype, causal=False, scale=None, window=None, softcap=0.0):
    """Straightforward attention in `dtype` (float32 or float64): O, LSE and dQ, dK, dV. A row that sees no key has
    O = 0 and no gradient (the kernels' rule, phase6_extensions/extensions.h)."""
    q, k, v = (x.detach().to(dtype).requires_grad_() for x in (q, k, v))
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    H = q.shape[1]
    s = scale * q @ expand_heads(k, H).transpose(-1, -2)
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    seen = scores_mask(q.shape[2], k.shape[2], causal, window, q.device)
    s = s.masked_fill(~seen, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)   # rows with no key: 0 everywhere
    o = p @ expand_heads(v, H)
    dq, dk, dv = torch.autograd.grad(o, (q, k, v), dout.to(dtype))
    return o.detach(), lse.detach(), dq, dk, dv


def reference_half(q, k, v, dout, dtype, causal=False, scale=None):
    """Straightforward attention with the tensor-core kernels' rounding points (q, k, v, dout hold values of
    `dtype`): float32 sums, P and dS rounded to `dtype` before they are multiplied. O, LSE, dQ, dK, dV in float32."""
    def rnd(x):
        return x.to(dtype).float()
    q, k, v, dout = (x.float() for x in (q, k, v, dout))
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = scale * q @ k.transpose(-1, -2)
    s = s.masked_fill(~scores_mask(q.shape[2], k.shape[2], causal, None, q.device), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse[..., None])
    o = rnd(p) @ v
    delta = (dout * o).sum(-1, keepdim=True)
    ds = p * (dout @ v.transpose(-1, -2) - delta)
    dv = rnd(p).transpose(-1, -2) @ dout
    dk = scale * rnd(ds).transpose(-1, -2) @ q
    dq = scale * rnd(ds) @ k
    return o, lse, dq, dk, dv


def relative_error(got, want, where=None, size=0.0):
    """max |got - want| / max(max |want|, size), over the elements `where` marks (all when None). `size` is the
    size of the quantity when `want` itself can be exactly zero (check_rule passes the largest gradient)."""
    got, want = got.double(), want.double()
    if where is not None:
        got, want = got[where], want[where]
    if want.numel() == 0:
        return 0.0
    assert torch.isfinite(got).all(), "a NaN or an Inf in the result"
    return ((got - want).abs().max() / want.abs().max().clamp_min(max(size, 1e-300))).item()
