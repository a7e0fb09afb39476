#!/usr/bin/env python3
"""plot_training.py - the training comparison's figure: validation loss against step for every run of
train_gpt.py (one panel per dtype: PyTorch's attention with two seeds, the suite's with the first); how far each
curve lies from PyTorch's seed-1 curve (the suite's distance against the distance between PyTorch's two seeds, the noise); and
tokens per second side by side.

    python3 python/train/plot_training.py DIR [OUT.png]     # reads DIR/training.csv and DIR/summary.csv

Needs matplotlib; writes DIR/training.png unless OUT.png is given.
"""
import csv
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STYLE = {("sdpa", "1"): ("tab:blue", "-"), ("sdpa", "2"): ("tab:cyan", ":"), ("suite", "1"): ("tab:red", "--")}


def curve(rows, run):
    return {int(r["step"]): float(r["val_loss"]) for r in rows if r["run"] == run}


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    folder = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) == 3 else os.path.join(folder, "training.png")
    with open(os.path.join(folder, "training.csv")) as f:
        rows = [r for r in csv.DictReader(f) if r["val_loss"]]
    with open(os.path.join(folder, "summary.csv")) as f:
        summaries = list(csv.DictReader(f))
    dtypes = sorted({r["dtype"] for r in rows}, reverse=True)   # fp32 first
    fig, axes = plt.subplots(1, len(dtypes) + 2, figsize=(5 * (len(dtypes) + 2), 4))
    for ax, dtype in zip(axes, dtypes):
        for run in sorted({r["run"] for r in rows if r["dtype"] == dtype}):
            points = [(int(r["step"]), float(r["val_loss"])) for r in rows if r["run"] == run]
            attention, _, seed = run.split(":")
            color, line = STYLE.get((attention, seed), ("gray", "-."))
            label = f"{'PyTorch SDPA' if attention == 'sdpa' else 'the suite'}, seed {seed}"
            ax.plot(*zip(*points), line, color=color, label=label)
        ax.set_title(f"{dtype}: validation loss")
        ax.set_xlabel("step")
        ax.set_ylabel("loss (nats per character)")
        ax.legend()
    ax = axes[-2]
    for dtype in dtypes:
        base = curve(rows, f"sdpa:{dtype}:1")
        for run, line in ((f"suite:{dtype}:1", "-"), (f"sdpa:{dtype}:2", ":")):
            other = curve(rows, run)
            steps = sorted(set(base) & set(other))
            if steps:
                ax.semilogy(steps, [max(abs(other[s] - base[s]), 1e-7) for s in steps], line,
                            label=f"{run} - sdpa:{dtype}:1")
    ax.set_title("distance to PyTorch SDPA, seed 1")
    ax.set_xlabel("step")
    ax.set_ylabel("|validation loss difference|")
    ax.legend(fontsize=8)
    ax = axes[-1]
    labels = [s["run"] for s in summaries]
    ax.barh(labels, [float(s["tokens_per_s"]) / 1e3 for s in summaries],
            color=["tab:red" if s["attention"] == "suite" else "tab:blue" for s in summaries])
    ax.invert_yaxis()
    ax.set_xlabel("thousand tokens per second (training)")
    ax.set_title(summaries[0]["machine"])
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
