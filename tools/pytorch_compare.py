#!/usr/bin/env python3
"""pytorch_compare.py - how far the suite is from PyTorch: timings in the suite's CSV schema, and a check of its outputs.

Timing (needs PyTorch and a CUDA GPU):
    python3 tools/pytorch_compare.py --csv build/bench/pytorch.csv --B 1 --H 4 --S 1024 4096 16384 --D 64 128
  times torch.nn.functional.scaled_dot_product_attention in float32 (TF32 off) with the math backend (materialises
  S, like phase 1) and the memory-efficient backend (tiled, like phases 2-4): forward, backward alone, and forward +
  backward; CUDA events, median of --iters runs after --warmup.
    python3 tools/pytorch_compare.py --csv out.csv --B 4 --H 16 --S 4096 --D 64 128 --dtypes fp16 bf16 \
        --backends flash cudnn
  times the half-precision backends that phase 5 is measured against: FlashAttention-2 ("flash") and cuDNN
  ("cudnn"), with fp16 or bf16 inputs (each backend only where it takes the dtype: flash and cudnn need a half type).
  One CSV row per measurement, in the schema of the
  phase binaries' --csv (common/fa_report.c): phase "pytorch", step "sdpa math" / "sdpa efficient" (forward),
  "... backward", "... fwd+bwd", with " fp16" or " bf16" at the end for half inputs, as phase 5 names its rows (the
  kind column says forward, backward or fwd+bwd); impl "cuda"; FLOPs by the
  suite's convention (common/fa_shape.c; these shapes are square); extra_bytes = peak memory during the call beyond what was allocated before it and
  the outputs it returns; the commit column says the PyTorch version. tools/plot_bench.py draws these rows beside
  the suite's.

Check (PyTorch on the CPU in float64, or --reference numpy without PyTorch):
    build/bin/phase4_backward --B 2 --H 4 --Sq 1000 --Sk 777 --D 64 --causal --save-dir run1 --iters 0
    python3 tools/pytorch_compare.py --check run1
  reads the .npy files a phase binary wrote with --save-dir (q, k, v and whatever outputs it saved: o, lse, and with
  do: dq, dk, dv), takes --causal and --scale from run1/command.txt, recomputes them in float64 and compares every
  head with the tolerance the binary checked that tensor with (run1/checks.csv, written beside the outputs).

Ceilings (needs PyTorch and a CUDA GPU):
    python3 tools/pytorch_compare.py --ceilings
  what the GPU's float32 units and memory reach outside attention, the numbers a float32 kernel is compared with: a
  float32 matrix product of 8192^3 (torch.matmul, which calls cuBLAS, TF32 off) in TFLOP/s, and a device-to-device
  copy of 4 GiB in TB/s (bytes read plus bytes written); medians of --iters runs after --warmup.

Exit status: 0 done and every check passed; 1 a check failed; 2 bad input (one "error:" line); 77 PyTorch is not
installed, or timing was asked for without a CUDA GPU (the test suite reports 77 as skipped).
"""
import argparse
import csv
import math
import os
import shlex
import statistics
import sys

from bench import EXIT_SKIP, FIELDS


def die(message, status=2):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(status)


def skip(message):
    print(f"skipped: {message}")
    sys.exit(EXIT_SKIP)


def import_torch():
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return None, None
    return torch, F


# ----------------------------------------------------------------------------------------------------------------------
# The suite's conventions

def forward_flops(B, H, S, D, causal):
    """fa_flops_forward() of common/fa_shape.c for a square shape (Sq = Sk = S), the only kind timed here."""
    return 4.0 * B * H * S * S * D / (2 if causal else 1)


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip().replace(",", ";")
    except OSError:
        pass
    return "unknown"


# ----------------------------------------------------------------------------------------------------------------------
# Timing

def set_full_fp32(torch):
    """No TF32: the suite computes in plain float32, and so must the comparison. "highest" is PyTorch's default; the
    legacy setter alone is used, because mixing it with the newer per-backend fp32_precision settings makes some
    PyTorch versions raise when either is read."""
    try:
        if torch.get_float32_matmul_precision() != "highest":
            torch.set_float32_matmul_precision("highest")
    except (AttributeError, RuntimeError):
        pass


# The dtypes each backend takes: FlashAttention-2 and cuDNN compute in half precision only.
BACKEND_DTYPES = {"math": ("fp32", "fp16", "bf16"), "efficient": ("fp32", "fp16", "bf16"), "flash": ("fp16", "bf16"),
                  "cudnn": ("fp16", "bf16")}


def backend_context(torch, name):
    """A context manager that lets scaled_dot_product_attention use only one backend."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        return sdpa_kernel({"math": SDPBackend.MATH, "efficient": SDPBackend.EFFICIENT_ATTENTION,
                            "flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[name])
    except ImportError:   # PyTorch before 2.3 (no cuDNN backend there)
        return torch.backends.cuda.sdp_kernel(enable_math=name == "math", enable_mem_efficient=name == "efficient",
                                              enable_flash=name == "flash")


def time_cuda(torch, fn, before, warmup, iters):
    """Median and min milliseconds of fn() over iters runs, each between two CUDA events; before() runs untimed."""
    for _ in range(warmup):
        before()
        fn()
    times = []
    for _ in range(iters):
        before()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times), min(times)


def peak_extra(torch, fn, before, output_bytes):
    """Bytes fn() needs beyond what is allocated before it and the outputs it leaves behind."""
    before()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return max(torch.cuda.max_memory_allocated() - base - output_bytes, 0)


def measure(torch, F, args, backend, dtype, B, H, S, D, causal):
    """Rows for one shape, backend and dtype: forward, backward, forward + backward."""
    device = "cuda"
    gen = torch.Generator(device=device).manual_seed(args.seed)
    torch_dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    q, k, v, dout = ((torch.rand(B, H, S, D, device=device, generator=gen) * 2 - 1).to(torch_dtype) for _ in range(4))
    for t in (q, k, v):
        t.requires_grad_(True)
    tensor_bytes = q.element_size() * B * H * S * D
    attend = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    state = {}

    def clear_grads():
        q.grad = k.grad = v.grad = None

    def forward():
        with torch.no_grad():
            state["o"] = attend()

    def make_graph():
        clear_grads()
        if "graph" not in state:
            state["graph"] = attend()

    def backward():
        state["graph"].backward(dout, retain_graph=True)

    def forward_backward():
        attend().backward(dout)

    fwd = forward_flops(B, H, S, D, causal)
    passes = {"forward": (forward, lambda: None, fwd, tensor_bytes, ""),
              "backward": (backward, make_graph, 2.5 * fwd, 3 * tensor_bytes, " backward"),
              "fwd+bwd": (forward_backward, clear_grads, 3.5 * fwd, 3 * tensor_bytes, " fwd+bwd")}
    # " backward" goes before the dtype: "sdpa flash backward bf16", so that a label ends with its input type.
    name_of = lambda suffix: f"sdpa {backend}{suffix}" + ("" if dtype == "fp32" else f" {dtype}")
    rows = []
    with backend_context(torch, backend):
        for name in args.passes:
            fn, before, flops, out_bytes, suffix = passes[name]
            row = dict(step=name_of(suffix), kind=name, B=B, H=H, Sq=S, Sk=S, D=D, causal=int(causal),
                       flops=flops)
            try:
                extra = peak_extra(torch, fn, before, out_bytes)
                median, low = time_cuda(torch, fn, before, args.warmup, args.iters)
                row.update(status="ok", median_ms=median, min_ms=low, extra_bytes=extra)
            except torch.cuda.OutOfMemoryError:
                # What the math backend would have needed: the scores and the probabilities, B*H*S*S floats each.
                need = 2 * 4 * B * H * S * S if backend == "math" else 0
                row.update(status="oom", median_ms=0.0, min_ms=0.0, extra_bytes=need)
            except RuntimeError as e:   # e.g. "No available kernel" for a shape the backend does not take
                print(f"  {row['step']} S={S} D={D}: not run ({str(e).splitlines()[0]})", file=sys.stderr)
                row.update(status="skipped", median_ms=0.0, min_ms=0.0, extra_bytes=0)
            rows.append(row)
            state.pop("graph", None)
            clear_grads()
            torch.cuda.empty_cache()
    return rows


def torch_on_gpu(what):
    """PyTorch, its functional module and a CUDA GPU, in plain float32 (no TF32); or skipped (exit 77), saying why
    there is no `what`."""
    torch, F = import_torch()
    if torch is None:
        skip(f"PyTorch is not installed (python3 -m pip install torch): no {what}")
    if not torch.cuda.is_available():
        skip(f"PyTorch finds no CUDA GPU: the {what} need one")
    set_full_fp32(torch)
    return torch, F


def run_timing(args):
    torch, F = torch_on_gpu("timings")
    gpu = torch.cuda.get_device_name(0).replace(",", ";")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    commit = f"torch-{torch.__version__}"
    cpu = cpu_model()
    causal_values = {"no": (False,), "yes": (True,), "both": (False, True)}[args.causal]
    is_new = not os.path.exists(args.csv) or os.path.getsize(args.csv) == 0
    with open(args.csv, "a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS, lineterminator="\n")
        if is_new:
            writer.writeheader()
        for backend, dtype in [(b, t) for b in args.backends for t in args.dtypes if t in BACKEND_DTYPES[b]]:
            for D in args.D:
                for causal in causal_values:
                    stopped = False   # after an out-of-memory, larger S are not tried
                    for S in sorted(args.S):
                        if stopped:
                            continue
                        for row in measure(torch, F, args, backend, dtype, args.B, args.H, S, D, causal):
                            ms = row["median_ms"]
                            gflops = row["flops"] / (ms * 1e6) if ms > 0 else 0.0
                            writer.writerow({**row, "phase": "pytorch", "impl": "cuda", "threads": 0, "block_m": 0,
                                             "block_n": 0, "pass": "", "gflops": f"{gflops:.3f}",
                                             "median_ms": f"{ms:.6f}", "min_ms": f"{row['min_ms']:.6f}",
                                             "flops": f"{row['flops']:.6g}", "copy_ms": "0.000000",
                                             "cpu_model": cpu, "gpu_name": gpu, "gpu_sms": sms,
                                             "commit": commit})
                            f.flush()
                            print(f"{row['step']:<30} S={S:<6} D={D:<4} causal={'yes' if causal else 'no ':<4} "
                                  f"{row['status']:<7} {ms:10.3f} ms {gflops:10.1f} GFLOP/s", flush=True)
                            stopped = stopped or row["status"] == "oom"
    print(f"wrote {args.csv}")
    return 0


def run_ceilings(args):
    torch, _ = torch_on_gpu("ceilings")
    torch.backends.cuda.matmul.allow_tf32 = False
    print(f"GPU: {torch.cuda.get_device_name(0)}, {torch.cuda.get_device_properties(0).multi_processor_count} SMs; "
          f"torch-{torch.__version__}")
    n = 8192
    a, b = (torch.rand(n, n, device="cuda") for _ in range(2))
    c = torch.empty(n, n, device="cuda")
    median, _ = time_cuda(torch, lambda: torch.matmul(a, b, out=c), lambda: None, args.warmup, args.iters)
    print(f"float32 matmul {n}^3 (cuBLAS, TF32 off): {2.0 * n ** 3 / (median * 1e9):.1f} TFLOP/s ({median:.3f} ms)")
    del a, b, c
    src = torch.empty(1 << 30, device="cuda")   # 4 GiB of float32
    dst = torch.empty_like(src)
    median, _ = time_cuda(torch, lambda: dst.copy_(src), lambda: None, args.warmup, args.iters)
    print(f"device-to-device copy of 4 GiB: {2.0 * src.numel() * 4 / (median * 1e9):.2f} TB/s, read + written "
          f"({median:.3f} ms)")
    return 0


# ----------------------------------------------------------------------------------------------------------------------
# Checking a --save-dir against a float64 reference

def load_saved(directory, np):
    """The arrays a phase binary saved, as float64 [B, H, S, D] (LSE [B, H, S]), and causal and scale from its command
    line (command.txt)."""
    if not os.path.isdir(directory):
        die(f"{directory} is not a directory (make one with a phase binary's --save-dir)")
    arrays = {}
    for name in ("q", "k", "v", "do", "o", "lse", "dq", "dk", "dv"):
        path = os.path.join(directory, f"{name}.npy")
        if not os.path.exists(path):
            continue
        try:
            x = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            die(f"cannot read {path}: {e}")
        want = 3 if name == "lse" else 4
        if x.ndim > want or x.ndim < want - 2:
            die(f"{path}: {x.ndim} dimensions, expected {want}")
        arrays[name] = x.reshape((1,) * (want - x.ndim) + x.shape).astype(np.float64)
    for name in ("q", "k", "v"):
        if name not in arrays:
            die(f"{directory} has no {name}.npy")
    causal, scale = False, None
    try:
        with open(os.path.join(directory, "command.txt")) as f:
            words = shlex.split(f.read())
    except OSError:
        words = []
    for i, word in enumerate(words):
        if word == "--causal":
            causal = True
        elif word.startswith("--scale="):
            scale = float(word.split("=", 1)[1])
        elif word == "--scale" and i + 1 < len(words):
            scale = float(words[i + 1])
    if scale is None:
        scale = 1.0 / math.sqrt(arrays["q"].shape[-1])
    return arrays, causal, scale, saved_tolerances(directory)


def saved_tolerances(directory):
    """Tensor name (o, lse, dq, ...) -> the tolerance the binary checked it with, from DIR/checks.csv (the check block
    the binary writes beside its outputs; the largest where several implementations were checked)."""
    path = os.path.join(directory, "checks.csv")
    tolerances = {}
    try:
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                name = row["tensor"].lower()
                tolerances[name] = max(tolerances.get(name, 0.0), float(row["tolerance"]))
    except OSError:
        die(f"{path} is missing: save the run again with a phase binary's --save-dir")
    except (KeyError, ValueError) as e:
        die(f"{path}: not a check block ({e})")
    return tolerances


def reference_numpy(np, a, causal, scale):
    """Standard attention in float64, head by head; the gradients of sum(O * dO) when dO is given."""
    q, k, v, dout = a["q"], a["k"], a["v"], a.get("do")
    B, H, Sq, D = q.shape
    Sk = k.shape[2]
    out = {"o": np.empty_like(q), "lse": np.empty((B, H, Sq))}
    if dout is not None:
        out.update(dq=np.empty_like(q), dk=np.empty_like(k), dv=np.empty_like(v))
    future = np.triu(np.ones((Sq, Sk), dtype=bool), k=1) if causal else None   # row i sees keys j <= i
    for b in range(B):
        for h in range(H):
            s = scale * q[b, h] @ k[b, h].T
            if causal:
                s[future] = -np.inf
            m = s.max(axis=1, keepdims=True)
            p = np.exp(s - m)
            l = p.sum(axis=1, keepdims=True)
            p /= l
            o = p @ v[b, h]
            out["o"][b, h], out["lse"][b, h] = o, (m + np.log(l))[:, 0]
            if dout is None:
                continue
            do = dout[b, h]
            delta = (do * o).sum(axis=1, keepdims=True)
            ds = p * (do @ v[b, h].T - delta)
            out["dv"][b, h] = p.T @ do
            out["dq"][b, h] = scale * ds @ k[b, h]
            out["dk"][b, h] = scale * ds.T @ q[b, h]
    return out


def reference_torch(torch, F, a, causal, scale):
    """The same through PyTorch: scaled_dot_product_attention in float64 on the CPU, gradients by autograd."""
    q, k, v = (torch.from_numpy(a[n]).requires_grad_(True) for n in ("q", "k", "v"))
    o = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    s = scale * q.detach() @ k.detach().transpose(-1, -2)
    if causal:   # is_causal is top-left aligned, as in the suite
        Sq, Sk = s.shape[-2:]
        s = s.masked_fill(torch.ones(Sq, Sk, dtype=torch.bool).triu(1), float("-inf"))
    out = {"o": o.detach().numpy(), "lse": torch.logsumexp(s, dim=-1).numpy()}
    if "do" in a:
        o.backward(torch.from_numpy(a["do"]))
        out.update(dq=q.grad.numpy(), dk=k.grad.numpy(), dv=v.grad.numpy())
    return out


def run_check(args):
    try:
        import numpy as np
    except ImportError:
        skip("NumPy is not installed (python3 -m pip install numpy)")
    if args.reference == "torch":
        torch, F = import_torch()
        if torch is None:
            skip("PyTorch is not installed (python3 -m pip install torch); --reference numpy checks without it")
    a, causal, scale, tolerances = load_saved(args.check, np)
    B, H, Sq, D = a["q"].shape
    if a["k"].shape != a["v"].shape or a["k"].shape[:2] != (B, H) or a["k"].shape[3] != D:
        die(f"{args.check}: q {a['q'].shape}, k {a['k'].shape} and v {a['v'].shape} do not fit together")
    want = reference_numpy(np, a, causal, scale) if args.reference == "numpy" else \
        reference_torch(torch, F, a, causal, scale)
    print(f"{args.check}: B={B} H={H} Sq={Sq} Sk={a['k'].shape[2]} D={D} causal={'yes' if causal else 'no'} "
          f"scale={scale:.6g}; reference: {args.reference}, float64, every head")
    print(f"  {'tensor':<6} {'max abs err':>12} {'rel err':>10} {'tol':>9}  {'worst (b,h,s,d)':<22} result")
    failed = checked = 0
    for name in ("o", "lse", "dq", "dk", "dv"):
        if name not in a:
            continue
        got, ref = a[name], want[name]
        if got.shape != ref.shape:
            die(f"{args.check}/{name}.npy has shape {got.shape}, expected {ref.shape}")
        if name not in tolerances:
            die(f"{args.check}/checks.csv has no tolerance for {name.upper()}")
        tolerance = tolerances[name]
        err = np.abs(got - ref)
        bad = int((~np.isfinite(got)).sum())
        worst = np.unravel_index(np.nanargmax(np.where(np.isfinite(err), err, np.inf)), err.shape)
        rel = float(err.max()) / max(float(np.abs(ref).max()), 1e-30) if not bad else float("inf")
        ok = bad == 0 and rel <= tolerance
        failed += not ok
        checked += 1
        where = "(" + ",".join(str(int(i)) for i in worst) + ")"
        verdict = "PASS" if ok else (f"FAIL ({bad} NaN/Inf)" if bad else "FAIL")
        print(f"  {name.upper():<6} {float(np.nanmax(err)):12.3e} {rel:10.3e} {tolerance:9.1e}  {where:<22} {verdict}")
    if not checked:
        die(f"{args.check} holds no outputs (o.npy, lse.npy, dq.npy, ...) to check")
    print("All checks passed." if not failed else "SOME CHECKS FAILED.")
    return 1 if failed else 0


# ----------------------------------------------------------------------------------------------------------------------

def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--check", metavar="DIR", help="check the .npy files in DIR (a phase binary's --save-dir)")
    p.add_argument("--reference", choices=("torch", "numpy"), default="torch",
                   help="what computes the float64 reference for --check (default torch)")
    p.add_argument("--csv", help="timing: append rows here")
    p.add_argument("--ceilings", action="store_true", help="time a float32 matmul and a device copy, and stop")
    p.add_argument("--B", type=int, default=1)
    p.add_argument("--H", type=int, default=4)
    p.add_argument("--S", type=int, nargs="+", default=[1024, 4096])
    p.add_argument("--D", type=int, nargs="+", default=[64])
    p.add_argument("--causal", choices=("no", "yes", "both"), default="both")
    p.add_argument("--backends", nargs="+", choices=tuple(BACKEND_DTYPES), default=["math", "efficient"])
    p.add_argument("--dtypes", nargs="+", choices=("fp32", "fp16", "bf16"), default=["fp32"],
                   help="input types; each backend runs the ones it takes (flash and cudnn: fp16, bf16)")
    p.add_argument("--passes", nargs="+", choices=("forward", "backward", "fwd+bwd"),
                   default=["forward", "backward", "fwd+bwd"])
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--seed", type=int, default=1)
    try:
        args = p.parse_args(argv)
    except SystemExit as e:
        sys.exit(0 if e.code == 0 else 2)
    if args.check:
        return run_check(args)
    if args.ceilings:
        return run_ceilings(args)
    if not args.csv:
        die("nothing to do: give --csv FILE (timing) or --check DIR")
    if min([args.B, args.H, args.iters, *args.S, *args.D]) < 1 or args.warmup < 0:
        die("--B, --H, --S, --D and --iters must be positive, --warmup not negative")
    if not any(t in BACKEND_DTYPES[b] for b in args.backends for t in args.dtypes):
        die(f"none of --backends {' '.join(args.backends)} takes --dtypes {' '.join(args.dtypes)}")
    return run_timing(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
