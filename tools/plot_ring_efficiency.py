#!/usr/bin/env python3
"""plot_ring_efficiency.py - phase 8's per-GPU efficiency against GPU count and tokens per GPU, from ring_bench.sh.

  python3 tools/plot_ring_efficiency.py RING-BENCH.log [-o EFFICIENCY.png]
  python3 tools/plot_ring_efficiency.py RING-BENCH.log --table

RING-BENCH.log is what `tools/ring_bench.sh` writes: per GPU count N and tokens per GPU T, four runs of
`phase8_ring --impl cuda --dtype bf16 --ranks N --S N*T ...` (forward, non-causal and causal with the zigzag; the
same with --backward), each with its timing rows and its note, which must say the ring ran over NCCL on N GPUs.
The per-GPU efficiency of a ring is single / (N x ring): the single-GPU kernel's time on the whole sequence over N
times the ring's, 1.0 being the ideal N-fold speed-up. This tool computes it from the medians of the timing rows:
  forward       from the forward runs (128 x 64 tiles): the contiguous ring, and for causal attention also the zigzag;
  backward      from the --backward runs (64 x 64 tiles, the backward kernels' own);
  fwd+bwd       (single forward + single backward) / (N x (ring forward + ring backward)), the forward from the
                forward runs, the causal ring the zigzag.
--table prints them as a Markdown table (chapter 10's, generated from the committed log); otherwise the tool prints
the table and draws two panels, forward and forward+backward, efficiency against N, one line per kind and T.

Exit status 0; 2 on a usage error or a log that lacks a run; 77 (skipped) when drawing needs matplotlib and it is
missing (the table is printed first).
"""
import argparse
import re
import sys

COMMAND = re.compile(r"^\$ phase8_ring (.*)$")
# A timing row: label, causal, impl, threads, median ms, min ms, GFLOP/s, ...
ROW = re.compile(r"^\s+(\S.*?)\s+(yes|no)\s+cuda\s+-\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)")
TRANSPORT = re.compile(r"\((nccl|loopback): (\d+) ranks? on (\d+) GPUs?\)")

# The columns of the table: (key, heading).
KINDS = [("fwd ring", "forward, ring"), ("fwd causal ring", "forward causal, ring"),
         ("fwd causal zigzag", "forward causal, zigzag"), ("bwd ring", "backward, ring"),
         ("bwd causal zigzag", "backward causal, zigzag"), ("fwdbwd ring", "fwd+bwd, ring"),
         ("fwdbwd causal zigzag", "fwd+bwd causal, zigzag")]


def fail(message):
    """One line on stderr, exit status 2."""
    print("plot_ring_efficiency.py: " + message, file=sys.stderr)
    sys.exit(2)


def flag_value(args, name):
    """The integer after --name in a command's argument list."""
    try:
        return int(args[args.index(name) + 1])
    except (ValueError, IndexError):
        fail("a command without %s: %s" % (name, " ".join(args)))


def read_runs(path):
    """The log's runs: dicts with gpus, tokens, causal, backward, rows {label: median ms}, transport; and the
    log's header lines (machine, date)."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as e:
        fail("cannot read %s: %s" % (path, e.strerror))
    runs, header = [], []
    for line in lines:
        m = COMMAND.match(line)
        if m:
            args = m.group(1).split()
            gpus, length = flag_value(args, "--ranks"), flag_value(args, "--S")
            runs.append({"gpus": gpus, "tokens": length // gpus, "causal": "--causal" in args,
                         "backward": "--backward" in args, "rows": {}, "transport": None, "line": line})
            continue
        if not runs:
            header.append(line)
            continue
        m = ROW.match(line)
        if m:
            runs[-1]["rows"][m.group(1)] = float(m.group(3))
        m = TRANSPORT.search(line)
        if m and "efficiency" in line:
            runs[-1]["transport"] = (m.group(1), int(m.group(2)), int(m.group(3)))
    if not runs:
        fail("%s holds no run of phase8_ring (is it a tools/ring_bench.sh log?)" % path)
    for run in runs:
        if run["transport"] != ("nccl", run["gpus"], run["gpus"]):
            fail("%s: '%s' did not run over NCCL on %d GPUs (its note: %s)"
                 % (path, run["line"], run["gpus"], run["transport"]))
    return runs, header


def median(run, label):
    """The median ms of the run's row `label`; exits 2 when the run lacks it."""
    if label not in run["rows"]:
        fail("'%s' has no row '%s'" % (run["line"], label))
    return run["rows"][label]


def efficiencies(runs):
    """{(gpus, tokens): {kind: efficiency}} for every configuration of the log."""
    table = {}
    find = {}
    for run in runs:
        find[(run["gpus"], run["tokens"], run["causal"], run["backward"])] = run
    for gpus, tokens in sorted({(r["gpus"], r["tokens"]) for r in runs}):
        cells = {}
        for causal in (False, True):
            fwd = find.get((gpus, tokens, causal, False))
            bwd = find.get((gpus, tokens, causal, True))
            if fwd is None or bwd is None:
                fail("no %s run with%s --backward at %d GPUs and %d tokens per GPU"
                     % ("causal" if causal else "non-causal", "" if bwd is None else "out", gpus, tokens))
            ring = "zigzag" if causal else "ring"
            single_f = median(fwd, "single bf16")
            single_b = median(bwd, "single bwd bf16")
            ring_f = median(fwd, "%s %d ranks bf16" % (ring, gpus))
            ring_b = median(bwd, "%s bwd %d ranks bf16" % (ring, gpus))
            prefix = "causal " if causal else ""
            cells["fwd %s%s" % (prefix, ring)] = single_f / (gpus * ring_f)
            if causal:
                cells["fwd causal ring"] = single_f / (gpus * median(fwd, "ring %d ranks bf16" % gpus))
            cells["bwd %s%s" % (prefix, ring)] = single_b / (gpus * ring_b)
            cells["fwdbwd %s%s" % (prefix, ring)] = (single_f + single_b) / (gpus * (ring_f + ring_b))
        table[(gpus, tokens)] = cells
    return table


def markdown(table):
    """The efficiencies as a Markdown table, one row per (GPUs, tokens per GPU)."""
    lines = ["| GPUs | tokens per GPU | " + " | ".join(heading for _, heading in KINDS) + " |",
             "|---|---|" + "---|" * len(KINDS)]
    for (gpus, tokens), cells in sorted(table.items()):
        lines.append("| %d | %dK | " % (gpus, tokens // 1024) + " | ".join("%.2f" % cells[k] for k, _ in KINDS)
                     + " |")
    return lines


def draw(table, header, out):
    """Two panels (forward; forward+backward), efficiency against GPUs, one line per kind and tokens per GPU."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("forward", ["fwd ring", "fwd causal ring", "fwd causal zigzag"]),
              ("forward + backward", ["fwdbwd ring", "fwdbwd causal zigzag"])]
    colours = {"ring": "#1f77b4", "causal ring": "#d62728", "causal zigzag": "#2ca02c"}
    styles = {8192: "-", 32768: "--"}
    gpu_counts = sorted({g for g, _ in table})
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, (title, kinds) in zip(axes, panels):
        for kind in kinds:
            name = kind.split(" ", 1)[1]
            for tokens in sorted({t for _, t in table}):
                ys = [table[(g, tokens)][kind] for g in gpu_counts if (g, tokens) in table]
                xs = [g for g in gpu_counts if (g, tokens) in table]
                ax.plot(xs, ys, styles.get(tokens, ":"), marker="o", color=colours[name],
                        label="%s, %dK tokens/GPU" % (name, tokens // 1024))
        ax.axhline(1.0, color="#999999", linewidth=0.8)
        if "fwd causal ring" in kinds:   # the contiguous causal ring's balance, N / (2N - 1): its bound
            ax.plot(gpu_counts, [n / (2.0 * n - 1.0) for n in gpu_counts], ":", color="#d62728", linewidth=0.8,
                    label="causal ring's balance N / (2N - 1)")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("GPUs")
        ax.set_xticks(gpu_counts)
        ax.set_ylim(0.0, 1.1)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower left")
    axes[0].set_ylabel("per-GPU efficiency, single / (GPUs x ring)")
    machine = next((line for line in header if line and not line.startswith("#")), "")
    fig.suptitle("phase 8 ring attention, bf16, D = 128, H = 16 (%s)" % machine.split(",")[1].strip()
                 if machine.count(",") >= 1 else "phase 8 ring attention, bf16, D = 128, H = 16", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description="phase 8's per-GPU efficiency from a tools/ring_bench.sh log")
    parser.add_argument("log", help="the log tools/ring_bench.sh wrote")
    parser.add_argument("-o", "--out", help="the PNG to write (default: the log's name with .png)")
    parser.add_argument("--table", action="store_true", help="print the Markdown table only")
    args = parser.parse_args()
    runs, header = read_runs(args.log)
    table = efficiencies(runs)
    for line in markdown(table):
        print(line)
    if args.table:
        return 0
    out = args.out or (args.log[:-4] if args.log.endswith(".log") else args.log) + ".png"
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("skipped: matplotlib is not installed, no chart drawn")
        return 77
    draw(table, header, out)
    print("wrote %s" % out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
