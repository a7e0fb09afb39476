#!/usr/bin/env python3
"""plot_bench.py - figures for slides from the benchmark CSV (tools/bench.py, tools/pytorch_compare.py, any --csv).

    python3 tools/plot_bench.py build/bench/results.csv                      # -> build/bench/figures/
    python3 tools/plot_bench.py results.csv pytorch.csv --outdir docs/figures --prefix h100-

Writes five PNGs (PREFIX defaults to "cpu-" for a CSV without GPU rows, else the GPU's model, e.g. "h100-"):
    PREFIXtime.png      median time against S, one line per implementation, one panel per device (log-log)
    PREFIXgflops.png    GFLOP/s against S, the same panels
    PREFIXspeedup.png   GPU over CPU (the same shape, the same S); without GPU rows: all threads over 1 thread
    PREFIXmemory.png    memory a run needs (inputs + outputs + extra) against S: naive grows as S^2, flash as S
    PREFIXcausal.png    causal against non-causal time, and their ratio (2 is the ideal: half the work)
All figures are for one head dim (--D, default the smallest in the CSV) and one shape B, H (the one with the most
rows; phase 2's single [N, d] head is another shape and is left out, with a note in the subtitle). The CSV's own
columns say what each row timed (kind: forward or backward; causal; FLOPs). Needs NumPy and matplotlib; only plots.
Exit status: 0 written, 2 bad input or matplotlib/NumPy missing.
"""
import argparse
import csv
import os
import re
import sys

from bench import size

INSTALL = "python3 -m pip install numpy matplotlib"


def fail(message):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


try:
    import numpy as np
    import matplotlib
    matplotlib.use("Agg")   # files only, no display needed
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter
except ImportError as missing:
    fail(f"plot_bench.py needs NumPy and matplotlib ({missing}); install them with: {INSTALL}")


# ----------------------------------------------------------------------------------------------------------------------
# Reading

class Row:
    """One CSV row with its numbers parsed."""

    def __init__(self, d, where):
        try:
            self.phase, self.step, self.kind, self.impl, self.status = (d[k] for k in ("phase", "step", "kind", "impl",
                                                                                       "status"))
            self.threads = int(d["threads"])
            self.B, self.H, self.Sq, self.Sk, self.D = (int(d[k]) for k in ("B", "H", "Sq", "Sk", "D"))
            self.causal = d["causal"] == "1"
            self.median_ms, self.gflops = float(d["median_ms"]), float(d["gflops"])
            self.flops, self.extra = float(d["flops"]), float(d["extra_bytes"])
            self.cpu_model, self.gpu_name, self.commit = d["cpu_model"], d["gpu_name"], d["commit"]
            self.simd, self.sms = d["cpu_simd_built"], d["gpu_sms"]
        except (KeyError, ValueError, TypeError) as e:
            fail(f"{where}: not a benchmark CSV row ({type(e).__name__}: {e})")

    def io_bytes(self):
        """Inputs and outputs: Q, K, V, O (and dO, dQ, dK, dV when the row includes a backward pass), float32."""
        tensors = 2 * self.Sq + 2 * self.Sk
        if self.kind != "forward":
            tensors *= 2
        return 4.0 * self.B * self.H * tensors * self.D

    @property
    def device(self):
        return "cuda" if self.impl == "cuda" else ("cpu1" if self.threads == 1 else "cpuN")

    @property
    def machine(self):
        """The processor that ran it: the GPU for a cuda row, the CPU otherwise."""
        return self.gpu_name if self.impl == "cuda" else self.cpu_model

    @property
    def series(self):
        """One line of a figure: an implementation on one machine."""
        return (self.phase, self.step, self.machine)


def read_csvs(paths):
    rows = []
    for path in paths:
        try:
            with open(path, newline="") as f:
                rows += [Row(d, f"{path} line {n + 2}") for n, d in enumerate(csv.DictReader(f))]
        except OSError as e:
            fail(f"cannot read {path}: {e.strerror}" + (" (run make bench first)" if not os.path.exists(path) else ""))
    if not rows:
        fail("no rows in " + ", ".join(paths))
    return rows


def drop_repeated_baselines(rows):
    """Later phases time an earlier phase's implementation again as their baseline (phase 1's naive forward, labelled
    "naive" or "naive forward"; phase 3's step 3, labelled "forward (phase 3 step 3)" in phase 4 and "phase 3 step 3"
    in phase 5); the earlier phase's own rows are enough. Phase 5's "naive BLAS" is a baseline of its own: kept."""
    return [r for r in rows if not ((r.step in ("naive", "naive forward") and r.phase != "phase1_naive") or
                                    re.search(r"phase \d step", r.step))]


# ----------------------------------------------------------------------------------------------------------------------
# Labels, colours, machine

def short_machine(name):
    """ "Intel(R) Xeon(R) Platinum 8480+ CPU @ 2.0GHz" -> "Intel Xeon Platinum 8480+" """
    name = re.sub(r"\((R|TM|tm|r)\)", "", name)
    name = re.sub(r"\s+(CPU\s+)?@.*$|\s+\d+-Core Processor$", "", name)
    return re.sub(r"\s+", " ", name).strip()


def series_label(series, rows):
    phase, step = series[:2]
    m = re.match(r"phase(\d)", phase)
    name = f"phase {m.group(1)}: {step}" if m else f"{'PyTorch' if phase == 'pytorch' else phase}: {step}"
    if len(series) > 2 and len(machines_of_kind(rows, series[2])) > 1:
        name += f" [{short_machine(series[2])}]"
    return name


def machines_of_kind(rows, machine):
    """All GPUs when `machine` is a GPU, all CPUs when it is a CPU."""
    is_gpu = any(r.impl == "cuda" and r.gpu_name == machine for r in rows)
    return sorted({r.machine for r in rows if (r.impl == "cuda") == is_gpu})


class Palette:
    """The same colour and marker for one implementation in every panel and every figure; when a CSV holds several
    machines of one kind (two CPUs, two GPUs), the machine picks the line style."""
    MARKERS = "osD^v<>pP*Xh"
    LINES = ("-", "--", ":", "-.")

    def __init__(self, rows):
        algorithms = sorted({r.series[:2] for r in rows}, key=order)
        cmap = plt.get_cmap("tab10" if len(algorithms) <= 10 else "tab20")
        self.base = {a: dict(color=cmap(i % cmap.N), marker=self.MARKERS[i % len(self.MARKERS)])
                     for i, a in enumerate(algorithms)}
        self.rows = rows

    def __call__(self, series):
        style = dict(self.base[series[:2]], linestyle="-")
        if series[0] == "pytorch":   # the reference: hollow markers
            style["markerfacecolor"] = "white"
        if len(series) > 2:
            kind = machines_of_kind(self.rows, series[2])
            style["linestyle"] = self.LINES[kind.index(series[2]) % len(self.LINES)] if series[2] in kind else "-"
        return style


def order(series):
    return (series[0] == "pytorch",) + tuple(series)


def machine_line(rows, threads_note=True):
    cpus = sorted({f"{r.cpu_model}, {r.simd} build" if r.simd else r.cpu_model for r in rows if r.impl == "cpu"})
    gpus = sorted({f"{r.gpu_name}, {r.sms} SMs" if r.sms not in ("", "0") else r.gpu_name for r in rows
                   if r.impl == "cuda" and r.phase != "pytorch" and r.gpu_name not in ("", "none")})
    threads = max((r.threads for r in rows if r.impl == "cpu"), default=0)
    parts = []
    if cpus:
        parts.append(f"CPU: {'; '.join(cpus)}" + (f" ({threads} threads)" if threads_note else ""))
    if gpus:
        parts.append(f"GPU: {'; '.join(gpus)}")
    commits = sorted({r.commit for r in rows if r.phase != "pytorch"})
    if commits:
        parts.append("commit " + ", ".join(commits))
    return "   ".join(parts)


def shape_text(rows, D, causal=None):
    shapes = sorted({(r.B, r.H) for r in rows})
    half = sorted({m.group(0) for r in rows for m in [re.search(r"\b(fp16|bf16)$", r.step)] if m})
    text = ", ".join(f"B={b} H={h}" for b, h in shapes) + f" D={D}, float32"
    if half:   # phase 5's tensor-core steps: their label ends with the input type
        text += " (" + "/".join(half) + " inputs where the label says)"
    if causal is not None:
        text += ", causal" if causal else ", non-causal"
    return text


def bytes_label(value, _pos=None):
    return size(value)


def s_axis(ax, sizes):
    """A log2 axis of sequence lengths with a tick at every power of two the data spans."""
    ax.set_xscale("log", base=2)
    if sizes:
        low, high = int(np.floor(np.log2(min(sizes)))), int(np.ceil(np.log2(max(sizes))))
        sizes = [2 ** k for k in range(low, high + 1)]
    ax.set_xticks(sizes)
    ax.set_xticklabels([f"{s // 1024}k" if s >= 1024 else str(s) for s in sizes])
    ax.set_xlabel("sequence length S (tokens)")
    ax.grid(True, which="major", alpha=0.3)


# ----------------------------------------------------------------------------------------------------------------------
# Figures

DEVICE_TITLES = {"cpu1": "CPU, 1 thread", "cpuN": "CPU, {threads} threads", "cuda": "GPU"}


def curves(rows, series, device, value):
    """(S, value) pairs for one series on one device, sorted by S; repeated measurements give their median.
    A series of two items (phase, step) matches every machine (the speedup figure pre-selects one host)."""
    points = {}
    for r in rows:
        if r.series[:len(series)] == series and r.device == device and r.status == "ok" and r.median_ms > 0:
            points.setdefault(r.Sq, []).append(value(r))
    sizes = sorted(points)
    return np.array(sizes), np.array([np.median(points[s]) for s in sizes])


def device_panels(rows):
    present = [d for d in ("cpu1", "cpuN", "cuda") if any(r.device == d and r.status == "ok" for r in rows)]
    threads = max((r.threads for r in rows if r.impl == "cpu"), default=0)
    return present, {d: DEVICE_TITLES[d].format(threads=threads) for d in present}


def finish(fig, path, handles, labels, title, subtitle):
    fig.suptitle(f"{title}\n{subtitle}", fontsize=14)
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)), fontsize=11, frameon=False)
    rows_of_legend = (len(labels) + 3) // 4 if labels else 0
    fig.tight_layout(rect=(0, 0.045 * rows_of_legend + 0.02, 1, 0.95))
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    print(f"wrote {path}")


def collect_legend(axes):
    seen = {}
    for ax in axes:
        for h, l in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(l, h)
    return list(seen.values()), list(seen.keys())


def per_device_figure(rows, palette, path, D, value, ylabel, title, log_y, note):
    # PyTorch's forward + backward rows have no counterpart in the suite (it times the two passes apart).
    subset = [r for r in rows if r.D == D and not r.causal and r.kind != "fwd+bwd"]
    devices, titles = device_panels(subset)
    if not devices:
        return False
    fig, axes = plt.subplots(1, len(devices), figsize=(6.2 * len(devices), 6.4), squeeze=False)
    sizes = sorted({r.Sq for r in subset if r.status == "ok"})
    for ax, device in zip(axes[0], devices):
        for series in sorted({r.series for r in subset if r.device == device}, key=order):
            x, y = curves(subset, series, device, value)
            if len(x):
                ax.plot(x, y, label=series_label(series, rows), markersize=6, linewidth=2, **palette(series))
        s_axis(ax, [s for s in sizes if s <= max(r.Sq for r in subset if r.device == device and r.status == "ok")])
        if log_y:
            ax.set_yscale("log")
        else:
            ax.set_ylim(bottom=0)
        ax.set_ylabel(ylabel)
        ax.set_title(titles[device] + (f": {subset_gpu(subset)}" if device == "cuda" else ""), fontsize=12)
    handles, labels = collect_legend(axes[0])
    finish(fig, path, handles, labels, f"{title} ({shape_text(subset, D, False)})", machine_line(rows) + note)
    return True


def subset_gpu(rows):
    names = sorted({r.gpu_name for r in rows if r.impl == "cuda"})
    return ", ".join(names)


def speedup_figure(rows, palette, path, D, note):
    subset = [r for r in rows if r.D == D and r.status == "ok"]
    has_gpu = any(r.device == "cuda" for r in subset)
    fig, axes = plt.subplots(1, 2, figsize=(13, 6.4), squeeze=False)
    sizes = sorted({r.Sq for r in subset})
    threads = max((r.threads for r in subset if r.impl == "cpu"), default=1)
    if has_gpu:
        pairs = (("cpu1", "cuda", "GPU over CPU 1 thread"), ("cpuN", "cuda", f"GPU over CPU {threads} threads"))
        title, ylabel = "GPU over CPU: the same shape, the same S", "speedup (CPU time / GPU time)"
    else:
        pairs = (("cpu1", "cpuN", f"{threads} threads over 1 thread, non-causal"),
                 ("cpu1", "cpuN", f"{threads} threads over 1 thread, causal"))
        title, ylabel = f"CPU: {threads} threads over 1 thread (no GPU rows in this CSV)", "speedup (1-thread time / parallel time)"
    drew = False
    for i, (ax, (slow, fast, panel)) in enumerate(zip(axes[0], pairs)):
        rows_here = subset if has_gpu else [r for r in subset if r.causal == (i == 1)]
        if has_gpu:
            rows_here = [r for r in rows_here if not r.causal]
            panel += ", non-causal"
        # Pairs on one host: a GPU row's cpu_model is the CPU of the machine that held the GPU.
        for phase, step, host in sorted({r.series[:2] + (r.cpu_model,) for r in rows_here}, key=order):
            on_host = [r for r in rows_here if r.cpu_model == host]
            xs, ys = curves(on_host, (phase, step), slow, lambda r: r.median_ms)
            xf, yf = curves(on_host, (phase, step), fast, lambda r: r.median_ms)
            common = sorted(set(xs) & set(xf))
            if not common:
                continue
            ratio = [ys[list(xs).index(s)] / yf[list(xf).index(s)] for s in common]
            line = next(r.series for r in on_host if r.series[:2] == (phase, step) and r.device == fast)
            ax.plot(common, ratio, label=series_label(line, rows), markersize=6, linewidth=2, **palette(line))
            drew = True
        s_axis(ax, sizes)
        ax.set_yscale("log" if has_gpu else "linear")
        if not has_gpu:
            ax.axhline(threads, color="grey", linestyle=":", linewidth=1.5)
            ax.text(sizes[0], threads, f" ideal: {threads}x", va="bottom", color="grey", fontsize=11)
            top = max([float(threads)] + [float(np.max(l.get_ydata())) for l in ax.get_lines() if len(l.get_ydata())])
            ax.set_ylim(0, 1.2 * top)
        ax.axhline(1, color="black", linewidth=0.8)
        ax.set_ylabel(ylabel)
        ax.set_title(panel, fontsize=12)
    handles, labels = collect_legend(axes[0])
    finish(fig, path, handles, labels, f"{title} ({shape_text(subset, D)})", machine_line(rows) + note)
    return drew


def memory_figure(rows, palette, path, D, note):
    """Memory a run needs, from the CSV's extra bytes plus the inputs and outputs. One line per implementation (the
    same on every device); runs that did not fit are crosses at what they would have needed."""
    subset = [r for r in rows if r.D == D and not r.causal and r.status in ("ok", "oom")]
    if not subset:
        return False
    fig, ax = plt.subplots(figsize=(11, 6.6))
    sizes = sorted({r.Sq for r in subset})
    for series in sorted({r.series[:2] for r in subset}, key=order):   # the same on every machine
        mine = [r for r in subset if r.series[:2] == series]
        need = {}
        for r in mine:
            need[r.Sq] = max(need.get(r.Sq, 0.0), r.io_bytes() + r.extra)
        fits = sorted(s for s in need if any(r.Sq == s and r.status == "ok" for r in mine))
        if fits:
            ax.plot(fits, [need[s] for s in fits], label=series_label(series, rows), markersize=6, linewidth=2,
                    **palette(series))
        walls = sorted(s for s in need if s not in fits)
        if walls:
            style = palette(series)
            ax.plot(walls, [need[s] for s in walls], linestyle="none", marker="X", markersize=14,
                    color=style["color"])
            for s in walls:
                ax.annotate(f"out of memory\n({bytes_label(need[s])})", (s, need[s]), textcoords="offset points",
                            xytext=(-10, -34), ha="right", fontsize=11, color=style["color"])
    s_axis(ax, sizes)
    ax.set_yscale("log", base=2)
    ax.yaxis.set_major_formatter(FuncFormatter(bytes_label))
    ax.set_ylabel("memory: inputs + outputs + extra (log)")
    ax.legend(loc="upper left", fontsize=11)
    title = f"Memory a run needs: naive grows as S\u00b2 (S and P), flash as S ({shape_text(subset, D, False)})"
    fig.suptitle(f"{title}\n{machine_line(rows, False)}{note}", fontsize=13)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    print(f"wrote {path}")
    return True


def causal_figure(rows, palette, path, D, note):
    subset = [r for r in rows if r.D == D and r.status == "ok"]
    # The GPU where there is one; else the 1-thread CPU rows, which a shared machine disturbs least.
    device = "cuda" if any(r.device == "cuda" for r in subset) else "cpu1"
    if not any(r.device == device for r in subset):
        device = "cpuN"
    subset = [r for r in subset if r.device == device]
    both = sorted({r.series for r in subset if r.causal} & {r.series for r in subset if not r.causal}, key=order)
    if not both:
        return False
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 6.4))
    sizes = sorted({r.Sq for r in subset})
    for series in both:
        style = dict(palette(series))
        xc, yc = curves([r for r in subset if r.causal], series, device, lambda r: r.median_ms)
        xn, yn = curves([r for r in subset if not r.causal], series, device, lambda r: r.median_ms)
        label = series_label(series, rows)
        left.plot(xc, yc, label=label, markersize=6, linewidth=2, **{**style, "linestyle": "-"})
        left.plot(xn, yn, markersize=4, linewidth=1.5, alpha=0.8, **{**style, "linestyle": ":"})
        common = sorted(set(xc) & set(xn))
        ratio = [yn[list(xn).index(s)] / yc[list(xc).index(s)] for s in common]
        right.plot(common, ratio, label=label, markersize=6, linewidth=2, **{**style, "linestyle": "-"})
    s_axis(left, sizes)
    left.set_yscale("log")
    left.set_ylabel("median time (ms, log)")
    left.set_title("time: causal solid, non-causal dotted", fontsize=12)
    s_axis(right, sizes)
    right.axhline(2, color="grey", linestyle=":", linewidth=1.5)
    right.text(sizes[0], 2, " 2x: half the work skipped", va="bottom", color="grey", fontsize=11)
    right.axhline(1, color="black", linewidth=0.8)
    top = max([2.0] + [float(np.max(line.get_ydata())) for line in right.get_lines() if len(line.get_ydata())])
    right.set_ylim(0, 1.25 * top)
    right.set_ylabel("non-causal time / causal time")
    right.set_title("what the causal mask saves", fontsize=12)
    where = {"cuda": "GPU", "cpuN": "CPU, all threads", "cpu1": "CPU, 1 thread"}[device]
    handles, labels = collect_legend([left])
    finish(fig, path, handles, labels, f"Causal against non-causal on the {where} ({shape_text(subset, D)})",
           machine_line(rows) + note)
    return True


# ----------------------------------------------------------------------------------------------------------------------

def default_prefix(rows):
    gpus = [r.gpu_name for r in rows if r.impl == "cuda" and r.gpu_name not in ("", "none")]
    if not gpus:
        return "cpu-"
    model = re.search(r"\b([A-Z]{1,2}\d{2,4}[A-Za-z]?)\b", gpus[0])
    return (model.group(1).lower() if model else "gpu") + "-"


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("csv", nargs="+", help="benchmark CSV files (rows are merged)")
    p.add_argument("--outdir", help="where the PNGs go (default: a figures/ folder beside the first CSV)")
    p.add_argument("--prefix", help='file name prefix (default: "cpu-", or the GPU model such as "h100-")')
    p.add_argument("--D", type=int, help="the head dim to plot (default: the smallest in the CSV)")
    p.add_argument("--note", default="", help="text added to every subtitle, e.g. 'shared machine: noisy'")
    args = p.parse_args(argv)

    rows = drop_repeated_baselines(read_csvs(args.csv))
    # One shape per figure: a time or a memory of one head beside those of B*H heads would read as the same work.
    shapes = {}
    for r in rows:
        shapes[(r.B, r.H)] = shapes.get((r.B, r.H), 0) + 1
    B, H = max(shapes, key=shapes.get)
    left_out = sorted({r.phase for r in rows if (r.B, r.H) != (B, H)})
    rows = [r for r in rows if (r.B, r.H) == (B, H)]
    if left_out:
        words = f"not plotted: {', '.join(left_out)} (another shape than B={B} H={H})"
        print(words)
        args.note += ("; " if args.note else "") + words
    ok_dims = sorted({r.D for r in rows if r.status == "ok"})
    if not ok_dims:
        fail("no successful (status ok) rows to plot")
    D = args.D if args.D is not None else ok_dims[0]
    if D not in ok_dims:
        fail(f"no rows with D={D} (the CSV has D in {ok_dims})")
    outdir = args.outdir or os.path.join(os.path.dirname(os.path.abspath(args.csv[0])), "figures")
    os.makedirs(outdir, exist_ok=True)
    prefix = args.prefix if args.prefix is not None else default_prefix(rows)
    note = f"   ({args.note})" if args.note else ""
    plt.rcParams.update({"font.size": 12, "axes.titlesize": 12, "axes.labelsize": 12})
    palette = Palette(rows)
    name = lambda kind: os.path.join(outdir, f"{prefix}{kind}.png")

    wrote = [
        per_device_figure(rows, palette, name("time"), D, lambda r: r.median_ms, "median time (ms, log)",
                          "Time against sequence length", True, note),
        per_device_figure(rows, palette, name("gflops"), D, lambda r: r.gflops, "GFLOP/s",
                          "Throughput against sequence length", False, note),
        speedup_figure(rows, palette, name("speedup"), D, note),
        memory_figure(rows, palette, name("memory"), D, note),
        causal_figure(rows, palette, name("causal"), D, note),
    ]
    if not any(wrote):
        fail("nothing to plot")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
