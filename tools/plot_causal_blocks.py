#!/usr/bin/env python3
"""plot_causal_blocks.py - the figure of the three causal stages (docs/figures/causal_blocks.png).

    python3 tools/plot_causal_blocks.py build/bin/causal_blocks docs/figures/causal_blocks.png

The figure is made from the rule the kernels use: tools/causal_blocks (built from tools/causal_blocks.c by
phase3_forward_4d/CMakeLists.txt) prints causal_tile_stage() of common/fa_contract.h for every
(Q tile, K tile) pair, the function that 2_causal_cpu.c and 2_causal_cuda.cu call in their K-tile loops; this script
only draws what it prints. Two panels: a square sequence, and cross attention with Sq < Sk and ragged last tiles.
Needs matplotlib. Exit status 0, or 2 on a usage error.
"""
import subprocess
import sys

COLOURS = {"F": "#4c9a5a", "D": "#e0a030", ".": "#e8e8e8"}
NAMES = {"F": "full: computed, no mask", "D": "diagonal: computed, masked element by element",
         ".": "future: never loaded (the K-tile loop has ended)"}
PANELS = ((512, 512, 64, 32), (200, 448, 64, 64))   # (Sq, Sk, BLOCK_M, BLOCK_N)


def stages(binary, S_q, S_k, block_m, block_n):
    out = subprocess.run([binary, str(S_q), str(S_k), str(block_m), str(block_n)], check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    rows = [line for line in out.splitlines() if line and not line.startswith("#")]
    summary = [line for line in out.splitlines() if line.startswith("#")][0]
    return rows, summary


def draw(ax, binary, S_q, S_k, block_m, block_n):
    from matplotlib.patches import Rectangle
    rows, summary = stages(binary, S_q, S_k, block_m, block_n)
    for qt, row in enumerate(rows):
        for kt, stage in enumerate(row):
            x0, y0 = kt * block_n, qt * block_m
            w, h = min(block_n, S_k - x0), min(block_m, S_q - y0)   # the last tiles are cut at Sk and Sq
            ax.add_patch(Rectangle((x0, y0), w, h, facecolor=COLOURS[stage], edgecolor="white", linewidth=1.5))
    # The diagonal i = j: row i sees the keys left of it (and on it).
    end = min(S_q, S_k)
    ax.plot([0, end], [0, end], color="#202020", linewidth=1.2)
    ax.set_xlim(0, S_k)
    ax.set_ylim(S_q, 0)   # row 0 at the top, as in a matrix
    ax.set_aspect("equal")
    ax.set_xlabel("key j (K tiles of BLOCK_N = %d)" % block_n)
    ax.set_ylabel("query i (Q tiles of BLOCK_M = %d)" % block_m)
    counts = dict(zip(("full", "diagonal", "future"), summary.split()[2::2]))
    ax.set_title("Sq = %d, Sk = %d: %s full, %s diagonal, %s skipped" % (S_q, S_k, counts["full"],
                                                                         counts["diagonal"], counts["future"]),
                 fontsize=10)


def main(argv):
    if len(argv) != 2:
        print(__doc__)
        return 2
    binary, out = argv
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.2), gridspec_kw={"width_ratios": [1, 1.1]})
    for ax, panel in zip(axes, PANELS):
        draw(ax, binary, *panel)
    fig.legend(handles=[Patch(facecolor=COLOURS[s], label=NAMES[s]) for s in "FD."], loc="lower center", ncol=3,
               frameon=False, fontsize=10)
    fig.suptitle("Causal attention, tile by tile: causal_tile_stage() of common/fa_contract.h", fontsize=12)
    fig.tight_layout(rect=(0, 0.07, 1, 0.95))
    fig.savefig(out, dpi=110)
    print("wrote " + out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
