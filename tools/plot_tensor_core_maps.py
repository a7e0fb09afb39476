#!/usr/bin/env python3
"""plot_tensor_core_maps.py - the tensor-core figures of docs/06-tensor-cores.md, from the kernel's own rules:

    python3 tools/plot_tensor_core_maps.py docs/figures

writes mma_fragments.png (which lane holds which element of the A, B and C fragments of mma.m16n8k16, and which row
each lane points ldmatrix.x4 at to load the A fragment of Q) and swizzle_banks.png (the bank groups of a K tile's
16-byte chunks at D = 64, as stored without and with swizzle(), and the 8 chunks one ldmatrix matrix reads).
The rules come from tools/kernel_rules.py, which reads them out of phase5_tensor_cores/3_pipeline_cuda.cu (and
tests/test_kernel_rules.py checks them). Needs matplotlib; exit status 0, 2 on a usage error, 77 (skipped) without it.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernel_rules import (KernelRules, bank_group, fragment_a, fragment_b, fragment_c,  # noqa: E402
                          start_matplotlib)

def lane_colour(lane):
    """One colour per lane quad g = lane / 4 (the row a lane holds), lighter for t = 2, 3."""
    import matplotlib
    return matplotlib.colormaps["tab20"]((2 * (lane // 4) + (lane % 4 >= 2)) % 20)


def grid(ax, cells, rows, cols, title, xlabel, ylabel, registers):
    """cells: {(r, c): lane}; registers: [(name, r0, c0, r1, c1)] outlined and named."""
    from matplotlib.patches import Rectangle
    for (r, c), lane in cells.items():
        ax.add_patch(Rectangle((c, r), 1, 1, facecolor=lane_colour(lane), edgecolor="white", lw=0.6))
        ax.text(c + 0.5, r + 0.5, str(lane), ha="center", va="center", fontsize=6)
    for name, r0, c0, r1, c1 in registers:
        ax.add_patch(Rectangle((c0, r0), c1 - c0, r1 - r0, fill=False, edgecolor="black", lw=2))
        ax.text((c0 + c1) / 2, r0 + 0.15, name, ha="center", va="top", fontsize=9, fontweight="bold",
                bbox=dict(facecolor="white", alpha=0.8, lw=0, pad=0.5))
    ax.set_xlim(0, cols)
    ax.set_ylim(rows, 0)
    ax.set_aspect("equal")
    ax.set_xticks([x + 0.5 for x in range(cols)], [str(x) for x in range(cols)], fontsize=6)
    ax.set_yticks([y + 0.5 for y in range(rows)], [str(y) for y in range(rows)], fontsize=6)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylabel(ylabel, fontsize=8)


def fragments(rules, out):
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 4, figsize=(15, 4.8), gridspec_kw={"width_ratios": [16, 8, 8, 16]})
    a = {(row, col): lane for lane in range(32) for reg, row, cols in fragment_a(lane) for col in cols}
    grid(axes[0], a, 16, 16, "A (16x16, row-major): Q or P", "column (dimension or key)", "row (query)",
         [("a[0]", 0, 0, 8, 8), ("a[1]", 8, 0, 16, 8), ("a[2]", 0, 8, 8, 16), ("a[3]", 8, 8, 16, 16)])
    b = {(k, n): lane for lane in range(32) for reg, ks, n in fragment_b(lane) for k in ks}
    grid(axes[1], b, 16, 8, "B (16x8, k x n): K^T or V", "n (key or dimension)", "k",
         [("b0", 0, 0, 8, 8), ("b1", 8, 0, 16, 8)])
    c = {(row, col): lane for lane in range(32) for e, row, col in fragment_c(lane)}
    grid(axes[2], c, 16, 8, "C (16x8, float32): S or O", "column", "row",
         [("c[0], c[1]", 0, 0, 8, 8), ("c[2], c[3]", 8, 0, 16, 8)])
    # ldmatrix.x4 for Q's A fragment: the row address each lane passes (row, 16-byte chunk of 8 halves).
    ax = axes[3]
    from matplotlib.patches import Rectangle
    for lane in range(32):
        row, chunk = rules.ldmatrix_row_chunk("Q", lane)
        ax.add_patch(Rectangle((chunk * 8, row), 8, 1, facecolor=lane_colour(8 * (lane // 8)), edgecolor="white"))
        ax.text(chunk * 8 + 4, row + 0.5, "lane %d" % lane, ha="center", va="center", fontsize=6)
    for m in range(4):
        ax.text(8 * (m // 2) + 4, 8 * (m % 2) + 4, "matrix %d -> a[%d]" % (m, m), ha="center", va="center",
                fontsize=8, fontweight="bold", bbox=dict(facecolor="white", alpha=0.7, lw=0))
    ax.set_xlim(0, 16)
    ax.set_ylim(16, 0)
    ax.set_title("ldmatrix.x4 for A: the row each lane points at\n(lanes 8i..8i+7 give matrix i, register a[i])",
                 fontsize=9)
    ax.set_xlabel("dimension within the 16-wide step", fontsize=8)
    ax.set_ylabel("query row of the warp's 16", fontsize=8)
    fig.suptitle("mma.sync.m16n8k16 fragments (PTX ISA): the lane (4g + t) that holds each element, and the register "
                 "it is in; lane 4g + t holds row g (and g + 8), columns 2t and 2t + 1", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    fig.savefig(os.path.join(out, "mma_fragments.png"), dpi=72)


def swizzle_banks(rules, out):
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle
    D, rows = 64, 16
    chunks = D // rules.constants["CHUNK"]
    read = {rules.ldmatrix_row_chunk("K", lane) for lane in range(8)}   # matrix 0 of one K ldmatrix.x4
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.6))
    cmap = plt.get_cmap("Set2")
    for ax, swizzled in zip(axes, (False, True)):
        groups = []
        for row in range(rows):
            for chunk in range(chunks):
                where = rules.swizzle(D, row, chunk) if swizzled else row * D + chunk * rules.constants["CHUNK"]
                position = (where - row * D) // rules.constants["CHUNK"]
                group = bank_group(where)
                ax.add_patch(Rectangle((position, row), 1, 1, facecolor=cmap(group % 8), edgecolor="white", lw=1.2))
                bold = (row, chunk) in read
                ax.text(position + 0.5, row + 0.5, "c%d" % chunk, ha="center", va="center", fontsize=7,
                        fontweight="bold" if bold else "normal")
                if bold:
                    ax.add_patch(Rectangle((position, row), 1, 1, fill=False, edgecolor="black", lw=2.2))
                    groups.append(group)
        ax.set_xlim(0, chunks)
        ax.set_ylim(rows, 0)
        ax.set_yticks([y + 0.5 for y in range(rows)], [str(y) for y in range(rows)], fontsize=7)
        ax.set_xticks([x + 0.5 for x in range(chunks)], ["banks %d-%d" % (4 * x, 4 * x + 3) for x in range(chunks)],
                      fontsize=6)
        ax.set_xlabel("16-byte position in the 128-byte row (a row of D = 64 halves), and its 4 banks", fontsize=8)
        ax.set_ylabel("tile row (key)", fontsize=8)
        ways = max(groups.count(g) for g in set(groups))
        ax.set_title(("with swizzle(): chunk c of row r stored at c ^ (r % 8)" if swizzled else
                      "without swizzle: chunk c stored at position c") +
                     "\nboxed: what one ldmatrix matrix reads (chunk 0 of rows 0-7): %d bank group(s), %d-way"
                     % (len(set(groups)), ways), fontsize=9)
    fig.suptitle("Shared-memory bank groups of a K tile at D = 64 (swizzle() and the ldmatrix address of "
                 "phase5_tensor_cores/3_pipeline_cuda.cu)", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    fig.savefig(os.path.join(out, "swizzle_banks.png"), dpi=72)


def main(argv):
    if len(argv) != 1 or not os.path.isdir(argv[0]):
        print(__doc__, file=sys.stderr)
        return 2
    if start_matplotlib() is None:
        return 77
    rules = KernelRules()
    fragments(rules, argv[0])
    swizzle_banks(rules, argv[0])
    print("wrote %s/mma_fragments.png and %s/swizzle_banks.png" % (argv[0], argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
