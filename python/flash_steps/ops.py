"""ops.py - the suite's attention as PyTorch operators: flash_steps::forward and flash_steps::backward.

Both are torch.library custom operators, so that torch.compile sees them as single opaque calls:
  - register_fake gives their output shapes and dtypes without running them (what torch.compile traces with);
  - register_autograd ties the backward operator to the forward one, so autograd and torch.compile's AOTAutograd
    both call the suite's backward kernels.
The operators compute what the kernels compute: O in float32 whatever the inputs' dtype (phase 5's tensor-core
forward writes float32 O; attention() rounds it to the inputs' dtype, as a model expects), the log-sum-exp LSE,
and LSE's residual, what its float32 rounding lost, which phase 4's backward adds back (common/fa_math.h).

Every problem is checked before a kernel runs: a kernel that is handed an input it does not support stops the whole
process (it is a command-line program's kernel), so the checks below, and the shim's fs_check, raise Python errors
first: the wrong dtype, a head dim the GPU kernels are not compiled for, a layout they cannot read, mixed devices,
features that have no kernel together.
"""
import math

import torch

from . import _library

HALF_DTYPES = (torch.float16, torch.bfloat16)
GPU_ROW_BYTES = 16   # the CUDA kernels read rows 16 bytes at a time (float4, or 8 halves)


def _problem(q, k, v, causal, scale, window_left, window_right, softcap, deterministic):
    B, H, Sq, D = q.shape
    return _library.Problem(B=B, H=H, H_kv=k.shape[1], Sq=Sq, Sk=k.shape[2], D=D, causal=int(causal), scale=scale,
                            window_left=window_left, window_right=window_right, softcap=softcap,
                            dtype=_library.DTYPES[q.dtype], on_gpu=int(q.is_cuda), deterministic=int(deterministic))


def _check_problem(problem):
    why = _library.check(problem)
    if why is not None:
        raise ValueError("flash_steps: " + why)


def _check_gpu_layout(name, x):
    """The CUDA kernels read rows of D elements, 16 bytes at a time: the last dim contiguous, the other strides whole
    16-byte steps, the pointer 16-byte aligned. A contiguous tensor always is; a view may not be."""
    step = GPU_ROW_BYTES // x.element_size()
    if x.stride(-1) != 1 or any(s % step for s in x.stride()[:-1]) or x.data_ptr() % GPU_ROW_BYTES:
        raise ValueError(f"flash_steps: the CUDA kernels cannot read {name} laid out with strides {tuple(x.stride())}"
                         f" (rows must be contiguous and start on 16 bytes); pass {name}.contiguous()")


def _check_stream(device):
    # The kernels launch on the CUDA default stream (the suite's drivers own no other): work queued on another
    # stream would race with them.
    if torch.cuda.current_stream(device) != torch.cuda.default_stream(device):
        raise RuntimeError("flash_steps: the kernels run on the default CUDA stream; call them outside "
                           "torch.cuda.stream(...) blocks")


def _run(device, call):
    if device.type == "cuda":
        _check_stream(device)
        with torch.cuda.device(device):
            call()
    else:
        call()


@torch.library.custom_op("flash_steps::forward", mutates_args=())
def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float, window_left: int,
            window_right: int, softcap: float, deterministic: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """O [B, H, Sq, D] float32, LSE [B, H, Sq] float32 (natural log), LSE's residual [B, H, Sq] float32.
    deterministic is the backward's (autograd keeps the forward's arguments for it)."""
    problem = _problem(q, k, v, causal, scale, window_left, window_right, softcap, deterministic)
    _check_problem(problem)
    if q.is_cuda:
        for name, x in (("q", q), ("k", k), ("v", v)):
            _check_gpu_layout(name, x)
    B, H, Sq, D = q.shape
    o = torch.empty((B, H, Sq, D), dtype=torch.float32, device=q.device)
    lse = torch.empty((B, H, Sq), dtype=torch.float32, device=q.device)
    lse_residual = torch.zeros((B, H, Sq), dtype=torch.float32, device=q.device)
    _run(q.device, lambda: _library.forward(problem, q, k, v, o, lse, lse_residual))
    return o, lse, lse_residual


@forward.register_fake
def _(q, k, v, causal, scale, window_left, window_right, softcap, deterministic):
    B, H, Sq, D = q.shape
    lse = q.new_empty((B, H, Sq), dtype=torch.float32)
    return q.new_empty((B, H, Sq, D), dtype=torch.float32), lse, torch.empty_like(lse)


@torch.library.custom_op("flash_steps::backward", mutates_args=())
def backward(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
             lse: torch.Tensor, lse_residual: torch.Tensor, causal: bool, scale: float, window_left: int,
             window_right: int, softcap: float, deterministic: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ, dK, dV in float32, from dO (in q's dtype) and what forward() returned."""
    problem = _problem(q, k, v, causal, scale, window_left, window_right, softcap, deterministic)
    _check_problem(problem)
    dout = dout.to(q.dtype).contiguous()
    if dout.data_ptr() % GPU_ROW_BYTES:   # a contiguous view that starts mid-row: a copy starts on 16 bytes
        dout = dout.clone()
    dq = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    dk = torch.empty(k.shape, dtype=torch.float32, device=q.device)
    dv = torch.empty(v.shape, dtype=torch.float32, device=q.device)
    delta = torch.empty(lse.shape, dtype=torch.float32, device=q.device)   # the preprocess's rowsum(dO * O)
    _run(q.device, lambda: _library.backward(problem, q, k, v, o, lse, lse_residual, dout, delta, dq, dk, dv))
    return dq, dk, dv


@backward.register_fake
def _(dout, q, k, v, o, lse, lse_residual, causal, scale, window_left, window_right, softcap, deterministic):
    return (q.new_empty(q.shape, dtype=torch.float32), k.new_empty(k.shape, dtype=torch.float32),
            v.new_empty(v.shape, dtype=torch.float32))


def _setup_context(ctx, inputs, output):
    q, k, v, *arguments = inputs
    o, lse, lse_residual = output
    ctx.save_for_backward(q, k, v, o, lse, lse_residual)
    ctx.arguments = arguments   # causal, scale, window_left, window_right, softcap, deterministic
    ctx.mark_non_differentiable(lse, lse_residual)


def _backward_formula(ctx, grad_o, grad_lse, grad_lse_residual):
    q, k, v, o, lse, lse_residual = ctx.saved_tensors
    dq, dk, dv = backward(grad_o, q, k, v, o, lse, lse_residual, *ctx.arguments)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None, None, None, None


forward.register_autograd(_backward_formula, setup_context=_setup_context)


def _check_tensors(q, k, v):
    """What the Python side can see for itself: ranks, dtypes, devices, and the shapes fitting together."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor) or x.dim() != 4:
            raise ValueError(f"flash_steps: {name} must be a 4-D tensor [B, H, S, D]")
        if x.dtype not in _library.DTYPES:
            raise TypeError(f"flash_steps: {name} is {x.dtype}; the kernels take torch.float32 (phases 3, 4 and 6), "
                            "torch.float16 or torch.bfloat16 (phase 5)")
        if x.device.type not in ("cpu", "cuda"):
            raise ValueError(f"flash_steps: {name} is on {x.device}; the kernels run on the CPU and on CUDA GPUs")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"flash_steps: q, k and v must have one dtype (got {q.dtype}, {k.dtype}, {v.dtype})")
    if not (q.device == k.device == v.device):
        raise ValueError(f"flash_steps: q, k and v must be on one device (got {q.device}, {k.device}, {v.device})")
    if k.shape != v.shape or k.shape[0] != q.shape[0] or k.shape[3] != q.shape[3]:
        raise ValueError(f"flash_steps: q {tuple(q.shape)}, k {tuple(k.shape)} and v {tuple(v.shape)} do not fit: "
                         "q [B, H, Sq, D], k and v [B, H_kv, Sk, D]")


def attention(q, k, v, causal=False, scale=None, window=None, softcap=0.0, deterministic=True):
    """Attention by the suite's kernels: returns (O, LSE). O has q's dtype, LSE is float32 [B, H, Sq].

    q [B, H, Sq, D]; k, v [B, H_kv, Sk, D] (H_kv < H is GQA). causal: row i sees keys j <= i (top-left, as
    PyTorch's is_causal). window = (left, right): row i sees keys i - left .. i + right, -1 for no bound on a side
    (causal with a window is (left, 0)). softcap C: scores become C tanh(s / C). deterministic: the backward's dQ
    in a fixed order (same bits every run), else with atomic adds where the kernel has them (phases 4 and 5).
    LSE carries no gradient."""
    _check_tensors(q, k, v)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    left, right = (-1, -1) if window is None else window
    if causal and window is not None and right == -1:
        right = 0
    o, lse, _ = forward(q, k, v, bool(causal), float(scale), int(left), int(right), float(softcap),
                        bool(deterministic))
    return o.to(q.dtype), lse


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False, *, window=None, softcap=0.0, deterministic=True):
    """torch.nn.functional.scaled_dot_product_attention's signature, on the suite's kernels: no attn_mask, no
    dropout; GQA, as there, only with enable_gqa=True. window, softcap and deterministic as in attention()."""
    if attn_mask is not None:
        raise ValueError("flash_steps: no attn_mask: the kernels take is_causal, window and softcap instead")
    if dropout_p != 0.0:
        raise ValueError("flash_steps: no dropout in this binding (dropout_p must be 0)")
    _check_tensors(query, key, value)
    if key.shape[1] != query.shape[1] and not enable_gqa:
        raise ValueError(f"flash_steps: {query.shape[1]} query heads and {key.shape[1]} key/value heads need "
                         "enable_gqa=True")
    return attention(query, key, value, is_causal, scale, window, softcap, deterministic)[0]


def kernel_name(q, k, v, causal=False, window=None, softcap=0.0):
    """Which of the suite's kernels attention() runs for these tensors, e.g. 'phase 5 step 3 forward, ...'."""
    _check_tensors(q, k, v)
    left, right = (-1, -1) if window is None else window
    return _library.kernel_name(_problem(q, k, v, causal, 1.0, left, right, softcap, True))
