#!/usr/bin/env python3
"""bench.py - the class benchmark: every phase, CPU (1 thread and all threads) and GPU, over sequence lengths.

    python3 tools/bench.py                      # the full sweep; build/bench/results.csv and summary.md
    python3 tools/bench.py --quick --cpu-only   # a tiny sweep (seconds), what the tools test runs
    python3 tools/bench.py --gpu-only --out logs/h100 --append   # add the GPU rows to an earlier CPU run
    python3 tools/bench.py --summarize build/bench/results.csv  # only rewrite summary.md from a CSV

Each configuration is one run of a phase binary with --csv: the binary checks its outputs against the float64 oracle
(--check-heads 1 keeps that cheap), times every implementation it has, and appends one CSV row per timed run. This
script only chooses the configurations, collects the rows, prints one line of progress per configuration and writes
a Markdown summary. A configuration whose S and P do not fit (naive attention at long S) is recorded as "oom": that
is a lesson, not a crash. Binaries that are not built are left out. Standard library only.

Exit status: 0 when every configuration ran and every check passed, 1 when a check failed or a run broke,
2 for bad arguments, 77 when --gpu-only was asked for on a machine without a GPU.
"""
import argparse
import csv
import datetime
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

# The shape every configuration shares (phase 2 is one [N, d] head: B = H = 1): the class demo's B=1, H=4. The same
# shape on CPU and GPU, so that the GPU over CPU speedup is a ratio of times of the same work. (A GPU is filled only at
# long S here, B*H*S/BLOCK_M thread blocks: that is one of the lessons; tools/headline.sh runs larger shapes.)
B, H = 1, 4
S_ALL = (128, 256, 512, 1024, 2048, 4096, 8192, 16384)   # the GPU goes this far, or as far as memory allows
HEAD_DIMS = (64, 128)
EXIT_SKIP = 77
# The columns of every results CSV, as the phase binaries write them (FA_CSV_HEADER in common/fa_report.h; the tools
# test checks that the two agree). pytorch_compare.py writes its rows with these columns too.
FIELDS = ("phase", "step", "kind", "impl", "threads", "B", "H", "Sq", "Sk", "D", "causal", "block_m", "block_n", "pass",
          "tolerance", "status", "median_ms", "min_ms", "gflops", "flops", "extra_bytes", "copy_ms", "cpu_model",
          "cpu_simd_built", "cpu_simd_offered", "cpu_cores", "gpu_name", "gpu_sms", "gpu_clock_mhz", "commit")


@dataclass
class Entry:
    """One row of the sweep table: a phase binary and what to run it with."""
    binary: str
    what: str                      # one line for the summary
    cpu_max_S: int                 # the CPU cap: the whole CPU sweep takes about 5 minutes on a 2-core machine
    flags: tuple = ()
    causal: tuple = (False, True)
    two_d: bool = False            # phase 2: [N, d], no --B/--H/--causal


# The CPU caps: time grows as S^2. At B=1, H=4, D=64 one naive forward at S=4096 takes about 1.4 s on one core of the
# 2-core development machine (12.8 GFLOP/s, quiet); D=128 doubles it; a configuration runs it 5-8 times, 1 thread and
# all threads; phases 3 and 4 time several implementations per run (phase 4: forward, naive backward and two
# backwards, 8 forwards' worth). The whole CPU sweep takes about 4-5 minutes there.
SWEEP = (
    Entry("phase1_naive", "naive attention: S and P materialised", cpu_max_S=4096),
    Entry("phase2_online_softmax", "online softmax, one [N, d] head (with naive on the same input)", cpu_max_S=4096,
          causal=(False,), two_d=True),
    # One phase 3 run with --step all --compare-causal times naive, step 1, and steps 2 and 3 both non-causal and
    # causal ("step 2 (causal)"): running it again with --causal would only repeat those rows.
    Entry("phase3_forward_4d", "4D forward: step 1 grid, step 2 causal pruning, step 3 LSE (with naive)",
          cpu_max_S=2048, flags=("--step", "all", "--compare-causal"), causal=(False,)),
    Entry("phase4_backward", "backward: dQ, dK, dV from LSE, deterministic and atomic dQ (with naive)",
          cpu_max_S=1024, flags=("--dq", "both")),
    # One phase 5 run with --dtype bf16 times every step (step 1 in float32 on the rounded inputs, steps 2 and 3 in
    # bf16) beside phase 3 step 3 and, on the CPU, naive attention with BLAS; and step 4, the bf16 backward, with the
    # deterministic dQ only (the atomic variant is in tools/headline.sh's runs), to keep the CPU sweep short.
    Entry("phase5_tensor_cores", "how it gets fast: register tiles (fp32), tensor cores and the pipeline (bf16); "
          "the backward on tensor cores", cpu_max_S=1024, flags=("--dtype", "bf16", "--dq", "deterministic")),
)


@dataclass
class Config:
    entry: Entry
    device: str                    # "cpu" or "cuda"
    S: int
    D: int
    causal: bool
    rows: list = field(default_factory=list)
    status: str = "pending"        # ok, failed, oom, error, timeout, skipped
    seconds: float = 0.0

    def name(self):
        causal = "causal" if self.causal else "      "
        return f"{self.entry.binary:<22} {self.device:<4} S={self.S:<6} D={self.D:<3} {causal}"


# ----------------------------------------------------------------------------------------------------------------------
# Choosing the configurations

def iterations(device, S, quick):
    """(warmup, iters) for one configuration. The first, checked run warms the caches already; long CPU runs need
    no extra warm-up. Fixed by S (not adapted) so that a reader can tell from the table how a number was taken."""
    if quick:
        return 0, 2
    if device == "cpu":
        if S <= 512:
            return 1, 10
        if S <= 1024:
            return 1, 5
        return 0, 3
    if S <= 2048:
        return 3, 30
    if S <= 8192:
        return 2, 10
    return 1, 5


def plan(args, have_gpu, bin_dir):
    """The configurations, GPU first (on a GPU machine those are the numbers that matter most when --max-seconds cuts
    the sweep short), then CPU; within a device by phase, head dim, causal, and S rising."""
    wanted = set(args.phases or [])
    entries, missing = [], []
    for entry in SWEEP:
        if wanted and not ({entry.binary, entry.binary[:6], entry.binary[5:6]} & wanted):
            continue
        if os.access(os.path.join(bin_dir, entry.binary), os.X_OK):
            entries.append(entry)
        else:
            missing.append(entry.binary)
    devices = [d for d, on in (("cuda", have_gpu and not args.cpu_only), ("cpu", not args.gpu_only)) if on]
    head_dims = (64,) if args.quick else HEAD_DIMS
    configs = []
    for device in devices:
        for entry in entries:
            if args.quick:
                sizes = (128, 256)
            else:
                sizes = [S for S in S_ALL if device == "cuda" or S <= entry.cpu_max_S]
            for D in head_dims:
                for causal in entry.causal:
                    configs += [Config(entry, device, S, D, causal) for S in sizes]
    return configs, missing


def command(bin_dir, config, threads, csv_path, quick):
    e = config.entry
    warmup, iters = iterations(config.device, config.S, quick)
    cmd = [os.path.join(bin_dir, e.binary), "--impl", config.device, "--S", str(config.S), "--D", str(config.D),
           "--warmup", str(warmup), "--iters", str(iters), "--check-heads", "1", "--csv", csv_path, *e.flags]
    if not e.two_d:
        cmd += ["--B", str(B), "--H", str(H)]
    if config.causal:
        cmd.append("--causal")
    if config.device == "cpu":
        cmd += ["--threads", str(threads)]
    return cmd


# ----------------------------------------------------------------------------------------------------------------------
# Running one configuration

def read_rows(path):
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def run_config(config, cmd, log, timeout_s):
    log.write(f"\n$ {' '.join(cmd)}\n")
    log.flush()
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout_s)
        output, rc = proc.stdout, proc.returncode
    except subprocess.TimeoutExpired as e:
        output = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        rc = None
    config.seconds = time.monotonic() - start
    log.write(output)
    log.write(f"[exit status {rc}, {config.seconds:.1f} s]\n")
    return rc, output


def classify(config, rc, output):
    """Sets config.status from the exit status and the rows, and returns a few words for the progress line."""
    rows = config.rows
    if rc is None:
        config.status = "timeout"
        return "timed out"
    if rc == EXIT_SKIP:
        config.status = "skipped"
        return next((l.strip() for l in output.splitlines() if l.startswith("skipped")), "skipped (exit 77)")
    if any(r["status"] == "oom" for r in rows):
        config.status = "oom"
        r = next(r for r in rows if r["status"] == "oom")
        return f"out of memory: {r['step']} needs {size(float(r['extra_bytes']))}"
    if rc == 0 and rows:
        config.status = "ok"
    elif rc == 1:
        config.status = "failed"
    else:
        config.status = "error"
        last = [l for l in output.splitlines() if l.strip()]
        return f"exit status {rc}: {last[-1] if last else 'no output'}"
    # The fastest implementation of the run, with its 1-thread and all-threads rates on the CPU.
    timed = [r for r in rows if r["status"] == "ok"]
    best = max(timed, key=lambda r: float(r["gflops"]), default=None)
    words = "CHECK FAILED; " if config.status == "failed" else ""
    if best and best["impl"] == "cpu":
        rates = {r["threads"]: float(r["gflops"]) for r in timed if r["step"] == best["step"]}
        order = sorted(rates, key=int)
        words += f"{best['step']}: " + " / ".join(f"{rates[t]:.1f}" for t in order) + \
            f" GFLOP/s on {' / '.join(order)} thr"
    elif best:
        words += f"{best['step']}: {float(best['gflops']):.1f} GFLOP/s"
    return words


def size(n):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024.0


def append_rows(results_path, rows):
    if not rows:
        return
    is_new = not os.path.exists(results_path) or os.path.getsize(results_path) == 0
    with open(results_path, "a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS, lineterminator="\n")
        if is_new:
            writer.writeheader()
        writer.writerows(rows)


# ----------------------------------------------------------------------------------------------------------------------
# Machine

def gpu_present():
    """nvidia-smi lists a GPU. (A binary built without CUDA still answers --impl cuda with exit 77: see the sweep.)"""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return False, "no nvidia-smi"
    try:
        out = subprocess.run([smi, "-L"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False, "nvidia-smi failed"
    if out.returncode != 0 or "GPU" not in out.stdout:
        return False, "nvidia-smi lists no GPU"
    return True, out.stdout.splitlines()[0]


def source_commit(repo):
    """The source tree's commit, with "-dirty" when tracked files differ from it (None outside a git checkout)."""
    try:
        out = subprocess.run(["git", "-C", repo, "describe", "--always", "--dirty", "--abbrev=7"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


# ----------------------------------------------------------------------------------------------------------------------
# The Markdown summary

NOISE_NOTE = "CPU timings on a shared machine are noisy (5-20% run to run); compare within one run."
SUMMARY_S = (128, 512, 1024, 2048, 4096, 16384)   # a few S: the CPU caps, and the longest GPU run


def number(x, digits=1):
    if x >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{digits}f}"


def row_key(r):
    return (r["phase"], r["step"], int(r["causal"]), int(r["D"]), int(r["Sq"]))


def summarize(rows, note="", command=""):
    ok = [r for r in rows if r.get("status") == "ok"]
    threads = max((int(r["threads"]) for r in rows if r["impl"] == "cpu"), default=0)
    commits = sorted({r["commit"] for r in rows})
    shapes = sorted({(int(r["B"]), int(r["H"])) for r in rows})
    machine = machine_words(rows)
    out = ["# Benchmark summary", ""]
    out.append(f"- {machine}")
    out.append(f"- commit: {', '.join(commits) or '-'}; shapes (B, H): "
               + ", ".join(f"({b}, {h})" for b, h in shapes) + " (phase 2 is one [N, d] head); float32")
    out.append("- GFLOP/s: the FLOPs column (the suite's convention, common/fa_shape.c) over the median time of the timed"
               " runs; extra memory is what an implementation needs beyond inputs and outputs.")
    if note:
        out.append(f"- {note}")
    out.append("")
    provenance = f"Measured on {machine}; command: `{command}`." if command else f"Measured on {machine}."

    # 1. The slide table: each phase and step at the largest S that both the CPU and the GPU ran (PyTorch has its own
    #    table below). Without GPU rows: the largest S the CPU ran, 1 thread against all threads.
    has_gpu = any(r["impl"] == "cuda" for r in ok if r["phase"] != "pytorch")
    by = {}
    for r in ok:
        if r["phase"] != "pytorch":
            kind = "cuda" if r["impl"] == "cuda" else ("cpu1" if int(r["threads"]) == 1 else "cpuN")
            by.setdefault(row_key(r), {})[kind] = r
    first = {}   # the order the binaries print their implementations in, phase by phase
    for i, r in enumerate(ok):
        first.setdefault((r["phase"], r["step"], int(r["causal"])), i)
    labels = sorted({k[:3] for k in by}, key=lambda k: (k[0], first[k]))
    for D in sorted({k[3] for k in by}):
        lines = []
        for phase, step, causal in labels:
            sizes = sorted(k[4] for k in by if k[:4] == (phase, step, causal, D))
            if not sizes:
                continue
            both = [S for S in sizes if "cuda" in by[(phase, step, causal, D, S)] and
                    {"cpu1", "cpuN"} & set(by[(phase, step, causal, D, S)])]
            S = both[-1] if both else sizes[-1]
            cell = by[(phase, step, causal, D, S)]
            cpu = cell.get("cpuN") or cell.get("cpu1")
            shown = lambda kind: f"{number(float(cell[kind]['median_ms']), 2)} ({number(float(cell[kind]['gflops']))})" \
                if kind in cell else "-"
            columns = [shown("cpu1"), shown("cpuN")]
            if has_gpu:
                ratio = "-"
                if cpu and "cuda" in cell and float(cell["cuda"]["median_ms"]) > 0:
                    x = float(cpu["median_ms"]) / float(cell["cuda"]["median_ms"])
                    ratio = f"{x:,.0f}x" if x >= 10 else f"{x:.1f}x"
                columns += [shown("cuda"), ratio]
            extra = size(float((cell.get("cuda") or cpu)["extra_bytes"]))
            lines.append(f"| {phase} | {step} | {'yes' if causal else 'no'} | {S} | " + " | ".join(columns) +
                         f" | {extra} |")
        if not lines:
            continue
        if has_gpu:
            out += [f"## D={D}: CPU against GPU at the largest S both ran", "",
                    f"Milliseconds (GFLOP/s). CPU N = all {threads} threads; GPU over CPU = CPU N time / GPU time.", "",
                    "| phase | step | causal | S | CPU 1 thread | CPU N threads | GPU | GPU over CPU | extra memory |",
                    "|---|---|---|---|---|---|---|---|---|"]
        else:
            out += [f"## D={D}: CPU, 1 thread against {threads} threads, at the largest S run", "",
                    "Milliseconds (GFLOP/s); no GPU rows in this run.", "",
                    f"| phase | step | causal | S | CPU 1 thread | CPU {threads} threads | extra memory |",
                    "|---|---|---|---|---|---|---|"]
        out += lines + [""]

    # 2. GFLOP/s against S, one row per implementation.
    for D in sorted({int(r["D"]) for r in ok}):
        present = [S for S in SUMMARY_S if any(int(r["Sq"]) == S and int(r["D"]) == D for r in ok)]
        impls = sorted({(r["phase"], r["step"], int(r["causal"]), r["impl"], int(r["threads"])) for r in ok
                        if int(r["D"]) == D}, key=lambda k: (k[0], first[k[:3]], k[3], k[4]))
        if not present or not impls:
            continue
        out += [f"## D={D}: GFLOP/s against S", "",
                "| phase | step | causal | impl | " + " | ".join(f"S={S}" for S in present) + " | extra memory |",
                "|---|---|---|---|" + "---|" * len(present) + "---|"]
        for phase, step, causal, impl, thr in impls:
            cells, extra = [], "-"
            for S in present:
                match = [r for r in ok if (r["phase"], r["step"], int(r["causal"]), r["impl"], int(r["threads"]),
                                           int(r["D"]), int(r["Sq"])) == (phase, step, causal, impl, thr, D, S)]
                cells.append(number(float(match[-1]["gflops"])) if match else "-")
                if match:
                    extra = f"{size(float(match[-1]['extra_bytes']))} at S={S}"
            who = "GPU" if impl == "cuda" else f"CPU {thr} thr"
            out.append(f"| {phase} | {step} | {'yes' if causal else 'no'} | {who} | " + " | ".join(cells) +
                       f" | {extra} |")
        out.append("")

    # 3. How far from PyTorch: each GPU implementation of the suite against scaled_dot_product_attention, the same
    #    pass (forward, or backward alone), shape and S: the largest S both have.
    torch_rows = [r for r in ok if r["phase"] == "pytorch"]
    suite_gpu = [r for r in ok if r["impl"] == "cuda" and r["phase"] != "pytorch"]
    if torch_rows and suite_gpu:
        lines = []
        for phase, step, causal, D in sorted({(r["phase"], r["step"], int(r["causal"]), int(r["D"])) for r in suite_gpu}):
            mine = {int(r["Sq"]): r for r in suite_gpu if (r["phase"], r["step"], int(r["causal"]), int(r["D"])) ==
                    (phase, step, causal, D)}
            kind = next(iter(mine.values()))["kind"]
            theirs = {}
            for r in torch_rows:
                if (int(r["causal"]), int(r["D"]), int(r["B"]), int(r["H"])) == \
                        (causal, D, int(next(iter(mine.values()))["B"]), int(next(iter(mine.values()))["H"])) and \
                        r["kind"] == kind:
                    theirs.setdefault(int(r["Sq"]), {})[r["step"].split()[1]] = r
            common = sorted(set(mine) & set(theirs))
            if not common:
                continue
            S = common[-1]
            cell = lambda r: f"{number(float(r['median_ms']), 2)} ({number(float(r['gflops']))})" if r else "-"
            eff = theirs[S].get("efficient")
            share = f"{100 * float(mine[S]['gflops']) / float(eff['gflops']):.0f}%" if eff and \
                float(eff["gflops"]) > 0 else "-"
            lines.append(f"| {phase} | {step} | {'yes' if causal else 'no'} | {D} | {S} | {cell(mine[S])} | "
                         f"{cell(theirs[S].get('math'))} | {cell(eff)} | {share} |")
        if lines:
            out += ["## How far from PyTorch (GPU, float32, the same pass and shape)", "",
                    "Milliseconds (GFLOP/s) at the largest S both ran; the last column is the suite's GFLOP/s as a "
                    "share of PyTorch's memory-efficient backend.", "",
                    "| phase | step | causal | D | S | suite | sdpa math | sdpa efficient | suite / efficient |",
                    "|---|---|---|---|---|---|---|---|---|"] + lines + [""]

    # 4. What did not fit, and what failed.
    oom = [r for r in rows if r.get("status") == "oom"]
    if oom:
        out += ["## Did not fit (recorded, not crashed)", "", "| phase | step | impl | B,H,S,D | causal | needed |",
                "|---|---|---|---|---|---|"]
        for r in oom:
            out.append(f"| {r['phase']} | {r['step']} | {r['impl']} | {r['B']},{r['H']},{r['Sq']},{r['D']} | "
                       f"{'yes' if r['causal'] == '1' else 'no'} | {size(float(r['extra_bytes']))} |")
        out.append("")
    failed = [r for r in rows if r.get("pass") == "0"]
    if failed:
        out += ["## CHECK FAILURES", ""]
        out += [f"- {r['phase']} {r['step']} {r['impl']} S={r['Sq']} D={r['D']} causal={r['causal']}" for r in failed]
        out.append("")
    # Every table names the machine and the command it came from in the line before it (tools/check_docs.py asks
    # the same of the docs, where these tables are pasted).
    with_source = []
    for i, line in enumerate(out):
        if line.startswith("|") and (i == 0 or not out[i - 1].startswith("|")):
            with_source += [provenance, ""]
        with_source.append(line)
    return "\n".join(with_source)


def machine_words(rows):
    """ "CPU: AMD EPYC (SSE2 (128-bit) build, the CPU offers ...), 2 threads at most; GPU: NVIDIA H100 ..., 132 SMs"
    from the machine columns of the rows."""
    cpus = sorted({(r["cpu_model"], r.get("cpu_simd_built", ""), r.get("cpu_simd_offered", "")) for r in rows
                   if r["impl"] == "cpu"})
    gpus = sorted({(r["gpu_name"], r.get("gpu_sms", ""), r.get("gpu_clock_mhz", "")) for r in rows
                   if r["impl"] == "cuda" and r["phase"] != "pytorch"}) or \
        sorted({(r["gpu_name"], "", "") for r in rows if r["impl"] == "cuda"})
    threads = max((int(r["threads"]) for r in rows if r["impl"] == "cpu"), default=0)
    cpu = "; ".join(f"{m} (SIMD built for {b}, the CPU offers {o})" for m, b, o in cpus)
    gpu = "; ".join(name + (f", {sms} SMs at {mhz} MHz" if sms not in ("", "0") else "") for name, sms, mhz in gpus)
    return (f"CPU: {cpu}, {threads} threads at most" if cpus else "CPU: not run") + \
        f"; GPU: {gpu or 'not run'}"


# ----------------------------------------------------------------------------------------------------------------------

def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build", help="the build folder whose bin/ holds the phase binaries")
    p.add_argument("--out", help="where results.csv, summary.md and bench.log go (default: BUILD/bench)")
    p.add_argument("--quick", action="store_true", help="a tiny sweep: S in {128, 256}, D=64, 2 timed runs")
    p.add_argument("--cpu-only", action="store_true", help="leave the GPU out")
    p.add_argument("--gpu-only", action="store_true", help="leave the CPU out")
    p.add_argument("--phases", nargs="+", metavar="P",
                   help="only these phases: 1 2 3 4, or binary names (default: every phase that is built)")
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                   help="threads of the parallel CPU rows (default: all cores)")
    p.add_argument("--max-seconds", type=float, help="start no configuration after this many seconds")
    p.add_argument("--timeout", type=float, default=600, help="seconds one configuration may take (default 600)")
    p.add_argument("--append", action="store_true", help="add to OUT/results.csv instead of starting it afresh")
    p.add_argument("--no-pytorch", action="store_true", help="do not run tools/pytorch_compare.py on a GPU machine")
    p.add_argument("--summarize", metavar="CSV", nargs="+", help="only write OUT/summary.md from these CSV files")
    args = p.parse_args(argv)
    if args.cpu_only and args.gpu_only:
        p.error("--cpu-only and --gpu-only exclude each other")
    if args.threads < 1:
        p.error("--threads must be at least 1")
    return args


def write_summary(out_dir, rows, note="", command=""):
    path = os.path.join(out_dir, "summary.md")
    text = summarize(rows, note, command)
    with open(path, "w") as f:
        f.write(text + "\n")
    return path, text


def pytorch_rows(args, tmp, log, bin_dir):
    """On a machine with PyTorch and a GPU: PyTorch's scaled_dot_product_attention at the same shapes, and a check of
    the suite's saved outputs against it. Separate processes, so that a broken PyTorch cannot stop the sweep; their
    files stay in tmp (on the GPU machine only results.csv, summary.md and bench.log need to come back).
    Returns (rows, ok, words for the summary)."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pytorch_compare.py")
    csv_path = os.path.join(tmp, "pytorch.csv")
    sizes = ["128", "256"] if args.quick else [str(S) for S in S_ALL]
    head_dims = ["64"] if args.quick else [str(D) for D in HEAD_DIMS]
    common = [sys.executable, script, "--csv", csv_path, "--B", str(B), "--H", str(H), "--S", *sizes, "--D", *head_dims]
    # float32 math and memory-efficient (phases 1-4's comparison), then FlashAttention-2 and cuDNN in fp16 and bf16
    # (phase 5's).
    status = []
    for extra in ([], ["--backends", "flash", "cudnn", "--dtypes", "fp16", "bf16"]):
        cmd = common + extra
        print("pytorch: " + " ".join(cmd[1:]), flush=True)
        log.write(f"\n$ {' '.join(cmd)}\n")
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
            lines = []
            for line in proc.stdout:   # one line per measurement: the progress
                log.write(line)
                lines.append(line.strip())
                print(f"pytorch: {line.rstrip()}", flush=True)
        if proc.returncode == EXIT_SKIP:
            return [], True, "PyTorch: skipped (" + (lines[-1] if lines else "not installed") + ")"
        status.append(proc.returncode)
    ok = not any(status)
    words = [f"PyTorch timings: {'ok' if ok else 'FAILED, exit status %s (see bench.log)' % status}"]

    # The check: the suite's own outputs, saved as .npy, against PyTorch in float64.
    for binary, extra in (("phase4_backward", ["--dq", "deterministic"]), ("phase3_forward_4d", ["--step", "3"]),
                          ("phase1_naive", [])):
        if not os.access(os.path.join(bin_dir, binary), os.X_OK):
            continue
        for device in ("cuda", "cpu"):
            save_dir = os.path.join(tmp, f"check-{binary}-{device}")
            run = [os.path.join(bin_dir, binary), "--impl", device, "--B", "2", "--H", "4", "--Sq", "1000",
                   "--Sk", "777", "--D", "64", "--causal", "--iters", "0", "--save-dir", save_dir, *extra]
            check = [sys.executable, script, "--check", save_dir]
            log.write(f"\n$ {' '.join(run)}\n$ {' '.join(check)}\n")
            a = subprocess.run(run, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            b = subprocess.run(check, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            log.write(a.stdout + b.stdout)
            verdict = "agree" if a.returncode == 0 and b.returncode == 0 else \
                f"DISAGREE (exit status {a.returncode} and {b.returncode}; see bench.log)"
            print(f"pytorch: {binary} --impl {device} outputs against PyTorch (float64): {verdict}", flush=True)
            words.append(f"{binary} --impl {device} outputs (B=2 H=4 Sq=1000 Sk=777 D=64 causal) and PyTorch: {verdict}")
            ok = ok and verdict == "agree"
        break
    return read_rows(csv_path), ok, "; ".join(words)


def main(argv):
    args = parse_args(argv)
    out_dir = args.out or os.path.join(args.build, "bench")
    os.makedirs(out_dir, exist_ok=True)
    results = os.path.join(out_dir, "results.csv")
    if args.summarize:
        rows = [r for path in args.summarize for r in read_rows(path)]
        path, text = write_summary(out_dir, rows, NOISE_NOTE, "python3 tools/bench.py " + " ".join(argv))
        print(text)
        print(f"\nwrote {path}")
        return 0

    bin_dir = os.path.join(args.build, "bin")
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if "FA_COMMIT" not in os.environ:   # the binaries' own commit is the one they were configured at
        commit = source_commit(repo)
        if commit:
            os.environ["FA_COMMIT"] = commit
    have_gpu, gpu_why = (False, "--cpu-only") if args.cpu_only else gpu_present()
    if args.gpu_only and not have_gpu:
        print(f"skipped: --gpu-only, but no GPU here ({gpu_why})")
        return EXIT_SKIP
    configs, missing = plan(args, have_gpu, bin_dir)
    if not configs:
        print(f"error: no phase binary to run in {bin_dir} (build first: make build)", file=sys.stderr)
        return 2
    if not args.append and os.path.exists(results):
        os.replace(results, os.path.join(out_dir, "results.previous.csv"))

    print(f"bench: {len(configs)} configurations, B={B} H={H}, CPU threads 1 and {args.threads}, "
          f"GPU: {'yes' if have_gpu else 'no (' + gpu_why + ')'}; results in {results}")
    if missing:
        print(f"bench: not built yet, left out: {', '.join(missing)}")
    start = time.monotonic()
    gpu_gone = None                # why the GPU rows stopped (exit 77 from a binary)
    capped = {}                    # (binary, device, D, causal) -> why larger S are not run
    broken = False
    with open(os.path.join(out_dir, "bench.log"), "a" if args.append else "w") as log, \
            tempfile.TemporaryDirectory(prefix="fa-bench-") as tmp:
        log.write(f"# bench {datetime.datetime.now().isoformat(timespec='seconds')}: {' '.join(sys.argv)}\n")
        for i, config in enumerate(configs):
            group = (config.entry.binary, config.device, config.D, config.causal)
            elapsed = time.monotonic() - start
            why_not = None
            if config.device == "cuda" and gpu_gone:
                why_not = gpu_gone
            elif group in capped:
                why_not = capped[group]
            elif args.max_seconds and elapsed > args.max_seconds:
                why_not = f"--max-seconds {args.max_seconds:g} have passed"
            if why_not:
                config.status = "skipped"
                words = f"skipped: {why_not}"
            else:
                csv_path = os.path.join(tmp, f"run{i}.csv")
                cmd = command(bin_dir, config, args.threads, csv_path, args.quick)
                rc, output = run_config(config, cmd, log, args.timeout)
                config.rows = read_rows(csv_path)
                words = classify(config, rc, output)
                append_rows(results, config.rows)
                if config.status == "skipped" and config.device == "cuda":
                    gpu_gone = words
                if config.status in ("oom", "timeout"):
                    capped[group] = f"a smaller S already {'ran out of memory' if config.status == 'oom' else 'timed out'}"
                if config.status in ("failed", "error", "timeout"):
                    broken = True
                words = f"{config.status:<7} {config.seconds:6.1f} s  {words}"
            print(f"[{i + 1:3d}/{len(configs)}] {config.name()}  {words}  | "
                  f"{datetime.timedelta(seconds=round(time.monotonic() - start))} elapsed", flush=True)

        rows = read_rows(results)
        note = NOISE_NOTE
        if have_gpu and not args.no_pytorch and not args.cpu_only and not gpu_gone:
            torch_rows, torch_ok, words = pytorch_rows(args, tmp, log, bin_dir)
            append_rows(results, torch_rows)
            rows += torch_rows
            broken = broken or not torch_ok
            note += "\n- " + words

    path, text = write_summary(out_dir, rows, note, "python3 tools/bench.py " + " ".join(argv))
    total = time.monotonic() - start
    counts = {s: sum(c.status == s for c in configs) for s in ("ok", "oom", "failed", "error", "timeout", "skipped")}
    print("\n" + text)
    print(f"bench: {datetime.timedelta(seconds=round(total))} in all; " + ", ".join(f"{n} {s}" for s, n in counts.items() if n) +
          f"\nbench: wrote {results}, {path} and {os.path.join(out_dir, 'bench.log')}")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
