#!/usr/bin/env python3
"""plot_tile_maps.py - the tile maps of the causal, sliding-window, varlen and split-KV kernels, side by side
(docs/figures/tile_maps.png).

    python3 tools/plot_tile_maps.py build/bin/tile_maps docs/figures/tile_maps.png

The figure is made from the rules the kernels use: build/bin/tile_maps (built from phase6_extensions/tile_maps.c) prints, for every
(Q tile, K tile) pair, the stage that causal_tile_stage() (common/fa_contract.h) or window_first_tile() and
window_tile_stage() (phase6_extensions/extensions.h) give it, the varlen kernel's tiles sequence by sequence
(varlen_q_tiles()), and split-KV's splits (splitkv_num_splits()); this script only draws what it prints.
Needs matplotlib; exit status 0, 2 on a usage error, 77 (skipped) without matplotlib.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernel_rules import start_matplotlib  # noqa: E402

COLOURS = {"F": "#4c9a5a", "D": "#e0a030", ".": "#e8e8e8", "-": "#c9d7ea"}
NAMES = {"F": "computed, no mask", "D": "computed, masked element by element",
         ".": "never loaded: the K-tile loop has ended", "-": "never loaded: the loop starts after it"}


def tiles(binary, *args):
    out = subprocess.run([binary, *map(str, args)], check=True, stdout=subprocess.PIPE, text=True).stdout
    rows = [line.split() for line in out.splitlines() if line and not line.startswith("#")]
    summary = " ".join(line[2:] for line in out.splitlines() if line.startswith("#"))
    return [(int(a), int(b), int(c), int(d), s) for a, b, c, d, s in rows], summary


def draw_map(ax, rows, S_q, S_k, title):
    from matplotlib.patches import Rectangle
    for q0, q1, k0, k1, stage in rows:
        ax.add_patch(Rectangle((k0, q0), k1 - k0, q1 - q0, facecolor=COLOURS[stage], edgecolor="white", lw=1.0))
    ax.set_xlim(0, S_k)
    ax.set_ylim(S_q, 0)
    ax.set_aspect("equal")
    ax.set_xlabel("key j")
    ax.set_ylabel("query i")
    ax.set_title(title, fontsize=9)


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    if start_matplotlib() is None:
        return 77
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Rectangle
    binary, out = argv
    fig, axes = plt.subplots(1, 4, figsize=(16, 4.6))
    S, B = 512, 64
    rows, summary = tiles(binary, "causal", S, S, B, B)
    draw_map(axes[0], rows, S, S, "causal, S = %d, tiles %dx%d\n%s" % (S, B, B, summary))
    rows, summary = tiles(binary, "window", S, S, B, B, 128, 0)
    draw_map(axes[1], rows, S, S, "causal with window (128, 0)\n%s" % summary)
    lengths = "100,250,37,125"
    rows, summary = tiles(binary, "varlen", B, B, lengths)
    total = sum(int(x) for x in lengths.split(","))
    draw_map(axes[2], rows, total, total, "varlen, causal, lengths %s\n(pairs across sequences: never visited)"
             % lengths.replace(",", ", "))
    axes[2].set_xlabel("packed key token")
    axes[2].set_ylabel("packed query token")
    # Split-KV decoding: one query row, the keys cut into splits, one block per split, then the combine.
    ax = axes[3]
    S_k = 3900
    rows, summary = tiles(binary, "splitkv", 1, S_k)
    palette = ["#4c78a8", "#72b7b2", "#54a24b", "#eeca3b", "#f58518", "#e45756"]
    for n, (q0, q1, k0, k1, name) in enumerate(rows):
        ax.add_patch(Rectangle((k0, 0), k1 - k0, 1, facecolor=palette[n % len(palette)], edgecolor="white", lw=1.5))
        ax.text((k0 + k1) / 2, 0.5, "block %s\nkeys %d-%d" % (name[1:], k0, k1 - 1), ha="center", va="center",
                fontsize=7)
        ax.annotate("", xy=(S_k / 2, -1.4), xytext=((k0 + k1) / 2, 0), arrowprops=dict(arrowstyle="->", lw=0.8))
    ax.add_patch(Rectangle((S_k * 0.3, -2.2), S_k * 0.4, 0.8, facecolor="#dddddd", edgecolor="black", lw=0.8))
    ax.text(S_k / 2, -1.8, "pass 2: combine by LSE", ha="center", va="center", fontsize=8)
    ax.set_xlim(0, S_k)
    ax.set_ylim(-2.6, 1.6)
    ax.set_yticks([])
    ax.set_xlabel("key j (Sq = 1: one query row)")
    ax.set_title("split-KV decoding, Sk = %d\n%s" % (S_k, summary), fontsize=9)
    fig.legend(handles=[Patch(facecolor=COLOURS[s], label=NAMES[s]) for s in "FD.-"], loc="lower center", ncol=4,
               frameon=False, fontsize=9)
    fig.suptitle("Which (Q tile, K tile) pairs each kernel visits: build/bin/tile_maps, from the kernels' own tile rules",
                 fontsize=11)
    fig.tight_layout(rect=(0, 0.07, 1, 0.94))
    fig.savefig(out, dpi=80)
    print("wrote " + out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
