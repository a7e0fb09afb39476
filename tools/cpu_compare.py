#!/usr/bin/env python3
"""cpu_compare.py - the suite's CPU steps beside PyTorch's CPU scaled_dot_product_attention, in one run.

Forward: phase 5 step 1 (float32 register tiles) against torch.nn.functional.scaled_dot_product_attention on CPU
tensors (PyTorch picks its fused flash kernel there). Backward: phase 5 step 5 (float32, register tiles) against
PyTorch's float32 backward; phase 5 step 4 with bf16 inputs against PyTorch's bf16 backward, on the unit the driver
picks (AMX-BF16, AVX512_BF16 or float32 FMAs; --bf16-units: on each the CPU has, a row each). (--no-baselines: the
phase 5 driver's baselines, phase 3 and naive attention with BLAS, are left out; the class tables have them.)
PyTorch's backward is timed alone: o.backward(dO) on a kept graph.

The machine is shared and noisy, so every configuration is run as interleaved series (suite, PyTorch, suite,
PyTorch, ...) and the table takes the median of the series' medians; tools/fma_peak runs before and after, and the
"% of peak" column is against its wall-clock ymm/zmm figure for the same thread count, measured in the same run.
GFLOP/s by the suite's convention: forward 4*B*H*S*S*D (half when causal), backward 2.5 times that.

Run (PyTorch installed on the side, e.g. python3 -m venv ENV && ENV/bin/pip install torch; never a build
dependency):
    ENV/bin/python tools/cpu_compare.py --build build --log docs/figures/cpu-compare-MACHINE.log
    ENV/bin/python tools/cpu_compare.py --quick     (one small shape, to see that it works)
    python3 tools/cpu_compare.py --table LOG        (a committed log's header and table again, for a chapter's
                                                     generated block; needs no PyTorch)
Exit status: 0, 1 when a suite check failed, 2 for bad arguments, 77 without PyTorch.
"""
import argparse
import csv
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

FORWARD_SHAPES = [(1, 8, 1024, 64), (1, 8, 1024, 128), (1, 8, 4096, 64), (1, 8, 4096, 128), (4, 16, 512, 64)]
BACKWARD_SHAPES = [(1, 8, 2048, 64)]
QUICK_FORWARD = [(1, 2, 256, 64)]
QUICK_BACKWARD = [(1, 2, 256, 64)]


def flops_forward(B, H, S, D, causal):
    f = 4.0 * B * H * S * S * D
    return f / 2 if causal else f


# The units of step 4's bf16 CPU backward that --bf16-units times (phase5_tensor_cores --cpu-bf16).
BF16_UNITS = ["amx", "avx512", "fma"]


def run_suite(binary, args, threads, refusal_ok=False):
    """Runs one phase binary with --csv; returns {label: median_ms} of its rows at `threads` threads (None when
    refusal_ok and the binary refused the command: a --cpu-bf16 unit this CPU lacks)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "rows.csv")
        cmd = [binary, "--impl", "cpu", "--threads", str(threads), "--threads-only", "--no-baselines", "--warmup", "0",
               "--iters", "3", "--check-heads", "1", "--csv", path] + args
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if refusal_ok and proc.returncode == 2:
            return None, proc.returncode, proc.stderr.strip(), []
        if proc.returncode not in (0, 1):
            sys.exit(f"cpu_compare.py: {' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()}")
        rows = {}
        with open(path) as f:
            for r in csv.DictReader(f):
                if r["impl"] == "cpu" and int(r["threads"]) == threads:
                    rows[r["step"]] = (float(r["median_ms"]), r["pass"], r["cpu_simd_built"])
        # What the backward's products ran on, as the binary's report names it ("step 4 cpu bf16: ...").
        products = [line.strip() for line in proc.stdout.splitlines() if line.strip().startswith("step 4 cpu")]
        return rows, proc.returncode, " ".join(os.path.basename(c) if c == binary else c for c in cmd), products


def time_torch(torch, fn, iters=3):
    fn()   # warm-up
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def torch_forward_ms(torch, B, H, S, D, causal, dtype):
    F = torch.nn.functional
    q, k, v = (torch.randn(B, H, S, D, dtype=dtype) for _ in range(3))
    with torch.no_grad():
        return time_torch(torch, lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))


def torch_backward_ms(torch, B, H, S, D, causal, dtype):
    F = torch.nn.functional
    q, k, v = (torch.randn(B, H, S, D, dtype=dtype, requires_grad=True) for _ in range(3))
    o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    do = torch.randn_like(o)

    def backward():
        for x in (q, k, v):
            x.grad = None
        o.backward(do, retain_graph=True)
    return time_torch(torch, backward)


def fma_peak(build):
    binary = os.path.join(build, "bin", "fma_peak")
    proc = subprocess.run([binary], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"cpu_compare.py: {binary} failed: {proc.stderr.strip()}")
    peaks = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[0] in ("ymm", "zmm", "vdpbf16ps", "tdpbf16ps") and parts[2].isdigit():
            peaks[(parts[0], int(parts[2]))] = (float(parts[3]), float(parts[5]))
    return proc.stdout, peaks


def print_table(path):
    """A committed log's machine lines (its notes, PyTorch's version, the hot loops and the peak) and its final
    table, as chapter 05 shows them."""
    try:
        with open(path) as f:
            lines = [line.rstrip("\n") for line in f]
    except OSError as e:
        print(f"cpu_compare.py: --table {path}: {e.strerror}", file=sys.stderr)
        return 2
    table = [line for line in lines if line.startswith("|")]
    if not table:
        print(f"cpu_compare.py: --table {path}: no table in it (not a cpu_compare.py log)", file=sys.stderr)
        return 2
    header = [line for line in lines if line.startswith(("cpu_compare.py:", "note:", "suite hot loops:"))]
    cpu = next((line.strip() for line in lines if line.strip().startswith("CPU:")), None)
    machine = cpu.split(",")[0].replace("CPU: ", "") if cpu else "the machine below"
    for line in table:
        print(line)
    print()
    print(f"Measured by `tools/cpu_compare.py` on the {machine} (the log's header):")
    print()
    print("```")
    for line in header[:1] + ([cpu] if cpu else []) + header[1:]:
        print(line)
    print("```")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build", help="the build folder (its bin/ holds the phase binaries)")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--series", type=int, default=3, help="interleaved series per configuration")
    ap.add_argument("--log", help="also write the log to this file")
    ap.add_argument("--quick", action="store_true", help="one small shape, one series")
    ap.add_argument("--note", action="append", default=[],
                    help="a line for the log's header, e.g. what else ran on the machine (may be repeated)")
    ap.add_argument("--passes", choices=["forward", "backward", "both"], default="both",
                    help="which half of the comparison to run (default both)")
    ap.add_argument("--backward-tiles", metavar="MxN", default="96x192",
                    help="BLOCK_M x BLOCK_N of the suite's backward rows (default 96x192, where step 5 is fastest on "
                         "the AMD EPYC of docs/05; the phase 5 driver's own default is 128x64)")
    ap.add_argument("--bf16-units", action="store_true",
                    help="time step 4's bf16 backward on each of the CPU's units (--cpu-bf16 amx, avx512, fma) "
                         "that it has, a row each")
    ap.add_argument("--table", metavar="LOG", help="print LOG's machine lines and its table, and nothing else")
    a = ap.parse_args()
    if a.table:
        return print_table(a.table)
    tile_args = []
    if a.backward_tiles:
        m, _, n = a.backward_tiles.partition("x")
        if not (m.isdigit() and n.isdigit() and int(m) > 0 and int(n) > 0):
            print(f"cpu_compare.py: --backward-tiles {a.backward_tiles}: expected MxN, e.g. 64x128", file=sys.stderr)
            return 2
        tile_args = ["--block-m", m, "--block-n", n]
    try:
        import torch
    except ImportError:
        print("cpu_compare.py: PyTorch is not installed for this Python (skipped)", file=sys.stderr)
        return 77
    bin_dir = os.path.join(a.build, "bin")
    phase5 = os.path.join(bin_dir, "phase5_tensor_cores")
    if not os.path.exists(phase5):
        print(f"cpu_compare.py: --build {a.build}: no bin/phase5_tensor_cores (build first)", file=sys.stderr)
        return 2
    torch.set_num_threads(a.threads)
    series = 1 if a.quick else a.series
    fwd_shapes = [] if a.passes == "backward" else QUICK_FORWARD if a.quick else FORWARD_SHAPES
    bwd_shapes = [] if a.passes == "forward" else QUICK_BACKWARD if a.quick else BACKWARD_SHAPES
    out = []

    def say(line=""):
        print(line, flush=True)
        out.append(line)

    peak_text, peaks = fma_peak(a.build)
    say(f"cpu_compare.py: the suite's CPU steps beside PyTorch {torch.__version__} "
        f"(CPU capability {torch.backends.cpu.get_cpu_capability()}), {a.threads} threads, {series} interleaved "
        f"series per configuration, medians")
    say("command: " + " ".join(["tools/cpu_compare.py"] + sys.argv[1:]))
    say(f"python {platform.python_version()}, {platform.machine()}")
    for note in a.note:
        say("note: " + note)
    say("fma_peak before:")
    for line in peak_text.splitlines():
        say("  " + line)
    failed = False
    results = []   # (kind, shape, causal, row, median ms over series, flops)
    simd = ""

    def record(kind, shape, causal, label, values, flops):
        results.append((kind, shape, causal, label, statistics.median(values), flops))

    for (B, H, S, D) in fwd_shapes:
        for causal in (False, True):
            suite_ms, torch_ms = {}, []
            args = ["--step", "1", "--B", str(B), "--H", str(H), "--S", str(S), "--D", str(D)] + (
                ["--causal"] if causal else [])
            for s in range(series):
                rows, rc, cmd, _ = run_suite(phase5, args, a.threads)
                failed |= rc != 0
                for label, (ms, ok, simd) in rows.items():
                    suite_ms.setdefault(label, []).append(ms)
                torch_ms.append(torch_forward_ms(torch, B, H, S, D, causal, torch.float32))
            say(f"forward {B},{H},{S},{D} causal={int(causal)}: {cmd}")
            for label, values in suite_ms.items():
                say(f"  {label:28s} ms per series: " + " ".join(f"{v:.2f}" for v in values))
                record("forward", (B, H, S, D), causal, label, values, flops_forward(B, H, S, D, causal))
            say(f"  {'PyTorch SDPA fp32':28s} ms per series: " + " ".join(f"{v:.2f}" for v in torch_ms))
            record("forward", (B, H, S, D), causal, "PyTorch SDPA fp32", torch_ms, flops_forward(B, H, S, D, causal))

    for (B, H, S, D) in bwd_shapes:
        causal = False
        flops = 2.5 * flops_forward(B, H, S, D, causal)
        for dtype_name, step in (("fp32", "5"), ("bf16", "4")):
            suite_ms, torch_ms, products_seen = {}, [], []
            args = ["--step", step, "--dq", "deterministic", "--B", str(B), "--H", str(H), "--S", str(S), "--D",
                    str(D)] + (["--dtype", "bf16"] if dtype_name == "bf16" else []) + tile_args
            # --bf16-units: step 4 once per unit the CPU has, each a row of its own ("... bf16 amx").
            units = list(BF16_UNITS) if a.bf16_units and dtype_name == "bf16" else [None]
            for s in range(series):
                for unit in list(units):
                    rows, rc, cmd, products = run_suite(phase5, args + (["--cpu-bf16", unit] if unit else []),
                                                        a.threads, refusal_ok=unit is not None)
                    if rows is None:   # this CPU lacks the unit: no row for it
                        say(f"backward bf16 --cpu-bf16 {unit}: refused ({cmd})")
                        units.remove(unit)
                        continue
                    failed |= rc != 0
                    products_seen += [line for line in products if line not in products_seen]
                    for label, (ms, ok, simd) in rows.items():
                        suite_ms.setdefault(label + (f" {unit}" if unit else ""), []).append(ms)
                torch_ms.append(torch_backward_ms(torch, B, H, S, D, causal,
                                                  torch.bfloat16 if dtype_name == "bf16" else torch.float32))
            say(f"backward {dtype_name} {B},{H},{S},{D} causal=0: {cmd}")
            for line in products_seen:
                say(f"  {line}")
            for label, values in suite_ms.items():
                say(f"  {label:28s} ms per series: " + " ".join(f"{v:.2f}" for v in values))
                record("backward", (B, H, S, D), causal, label, values, flops)
            say(f"  {'PyTorch SDPA bwd ' + dtype_name:28s} ms per series: " + " ".join(f"{v:.2f}" for v in torch_ms))
            record("backward", (B, H, S, D), causal, "PyTorch SDPA bwd " + dtype_name, torch_ms, flops)

    peak_after, peaks_after = fma_peak(a.build)
    say("fma_peak after:")
    for line in peak_after.splitlines():
        say("  " + line)
    width = "zmm" if ("zmm", a.threads) in peaks else "ymm"

    def mean_peak(kind):   # fma_peak's wall-clock figure for `kind` on a.threads threads, before and after
        values = [p[(kind, a.threads)][0] for p in (peaks, peaks_after) if (kind, a.threads) in p]
        return statistics.mean(values) if values else None

    wall_peak = mean_peak(width)
    # The bf16 rows of --bf16-units against the peak of the unit they ran on; the others have none.
    unit_peaks = {"amx": mean_peak("tdpbf16ps"), "avx512": mean_peak("vdpbf16ps"), "fma": wall_peak}
    say(f"suite hot loops: {simd}; % of peak against fma_peak's {width} wall-clock figure on {a.threads} threads, "
        f"mean of before and after: {wall_peak:.1f} GFLOP/s; bf16 rows: --bf16-units rows against the peak of their "
        f"unit (" + ", ".join(f"{u} {v:.1f}" for u, v in unit_peaks.items() if v) + " GFLOP/s), the others none "
        f"(their products may run on bf16 units)")
    say()
    say("| kind | B,H,S,D | causal | row | median ms | GFLOP/s | vs PyTorch | % of peak |")
    say("|---|---|---|---|---|---|---|---|")
    for kind, shape, causal, label, ms, flops in results:
        torch_row = [r for r in results if r[0] == kind and r[1] == shape and r[2] == causal and
                     r[3].startswith("PyTorch") and (kind == "forward" or r[3][-4:] == (
                         "bf16" if "bf16" in label else "fp32"))]
        ratio = f"{torch_row[0][4] / ms:.2f}x" if torch_row and not label.startswith("PyTorch") else ""
        gflops = flops / (ms * 1e6)
        unit = label.rsplit(" ", 1)[-1] if "bf16" in label else None
        ceiling = unit_peaks.get(unit) if unit else wall_peak
        peak = f"{100 * gflops / ceiling:.0f}%" if ceiling else ""
        say(f"| {kind} | {','.join(map(str, shape))} | {'yes' if causal else 'no'} | {label} | {ms:.2f} | "
            f"{gflops:.1f} | {ratio} | {peak} |")
    if a.log:
        with open(a.log, "w") as f:
            f.write("\n".join(out) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
