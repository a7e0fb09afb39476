#!/usr/bin/env python3
"""plot_concepts.py - four figures of the chapters, each drawn from the rule the kernels follow:

    python3 tools/plot_concepts.py docs/figures

online_softmax.png (docs/02): a Q tile, the K/V tiles streamed past it, and one row's state (m, l, O) after every K
    tile, with the rescale alpha where the max moves; the state comes from online_softmax_trace() in
    tools/kernel_rules.py, the kernels' update, which tests/test_kernel_rules.py checks against a direct softmax and
    against chapter 02's worked example.
pipeline.png (docs/06): the order of events in phase 5's step 2 and step 3 K-tile loops (copy, wait, barrier,
    compute), as phase5_tensor_cores/2_mma_cuda.cu and 3_pipeline_cuda.cu issue them; an order, not a timing.
backward_warps.png (docs/07): the five products of the backward on tensor cores and which warp owns which rows in
    each pass, from the product table of phase5_tensor_cores/4_backward_cuda.cu and the constants (WARPS, WARP_ROWS)
    of the passes.
dq_pieces.png (docs/09): a Q tile's dQ and the piece each of the two warpgroups computes in phase 7's steps 6h, 6i
    and 6j, from the rules kernel_rules.dq_pieces() reads out of 6i_wide_q_tiles_cuda.cu and 6j_transposed_dq_cuda.cu
    (tests/test_kernel_rules.py checks that the pieces cover the tile once).
Needs matplotlib; exit status 0, 2 on a usage error, 77 (skipped) without it.
"""
import math
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernel_rules import backward_products, dq_pieces, online_softmax_trace, start_matplotlib  # noqa: E402


def online_softmax(out):
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle
    tile, n_tiles = 8, 5
    rng = random.Random(7)
    # One row's scores, drawn so that the max moves at some tiles and not at others (a seeded draw).
    x = [rng.gauss(0, 1) + (1.8 if 8 <= j < 16 else 0) + (3.2 if 26 <= j < 30 else 0) for j in range(tile * n_tiles)]
    v = [rng.gauss(0, 1) for _ in x]
    trace, o = online_softmax_trace(x, v, tile)
    weights = [math.exp(xi - max(x)) for xi in x]
    direct = sum(w * vi for w, vi in zip(weights, v)) / sum(weights)
    fig = plt.figure(figsize=(13, 6.4))
    ax = fig.add_axes((0.03, 0.08, 0.36, 0.84))
    # The tiling: the Q tile (BLOCK_M rows) on the left, K^T tiles across the top, V tiles down the right.
    ax.add_patch(Rectangle((0, 2), 1.2, 3, facecolor="#9ecae1", edgecolor="black"))
    ax.text(0.6, 3.5, "Q tile\nBLOCK_M x D\n(loaded once)", ha="center", va="center", fontsize=8)
    for n in range(n_tiles):
        colour = "#fdd0a2" if n != 2 else "#fd8d3c"
        ax.add_patch(Rectangle((1.6 + n * 1.1, 5.4), 1.0, 1.2, facecolor=colour, edgecolor="black"))
        ax.text(2.1 + n * 1.1, 6.0, "K tile %d\n(as K^T)" % n, ha="center", va="center", fontsize=7)
        ax.add_patch(Rectangle((1.6 + n * 1.1, 2), 1.0, 3, facecolor="#f0f0f0" if n != 2 else "#fee6ce",
                               edgecolor="#bbbbbb"))
    ax.text(1.6 + 2 * 1.1 + 0.5, 3.5, "S block\nBLOCK_M x BLOCK_N\n(registers,\nthis step only)", ha="center",
            va="center", fontsize=7)
    ax.add_patch(Rectangle((7.3, 0.2), 1.4, 1.4, facecolor="#fd8d3c", edgecolor="black"))
    ax.text(8.0, 0.9, "V tile 2\nBLOCK_N x D", ha="center", va="center", fontsize=7)
    ax.add_patch(Rectangle((0, 0.2), 1.2, 1.4, facecolor="#c7e9c0", edgecolor="black"))
    ax.text(0.6, 0.9, "m_i, l_i, acc\n(per row,\nthe whole loop)", ha="center", va="center", fontsize=7)
    ax.annotate("", xy=(7.2, 6.85), xytext=(1.6, 6.85), arrowprops=dict(arrowstyle="->"))
    ax.text(4.4, 7.05, "K/V tiles stream past, one per step", ha="center", fontsize=8)
    ax.annotate("", xy=(1.25, 0.9), xytext=(7.25, 0.9), arrowprops=dict(arrowstyle="->"))
    ax.text(4.3, 1.15, "acc = acc * alpha + P V", ha="center", fontsize=8)
    ax.set_xlim(-0.2, 8.9)
    ax.set_ylim(0, 7.4)
    ax.axis("off")
    ax.set_title("One program (thread block): a Q tile and the K/V tiles", fontsize=10)
    # One row: its scores per tile, the running max m and sum l, and alpha at every tile.
    ax1 = fig.add_axes((0.46, 0.55, 0.52, 0.37))
    ax1.bar(range(len(x)), x, color=["#fd8d3c" if (j // tile) % 2 else "#fdd0a2" for j in range(len(x))], width=0.9)
    for n, (m, l, acc, alpha) in enumerate(trace):
        ax1.hlines(m, n * tile - 0.5, (n + 1) * tile - 0.5, color="black", lw=2)
        moved = n > 0 and m > trace[n - 1][0]
        ax1.text(n * tile + tile / 2 - 0.5, m + 0.35, "m = %.2f%s" % (m, "  (moved)" if moved else ""),
                 ha="center", fontsize=7)
    ax1.set_ylabel("score x_j of one row", fontsize=8)
    ax1.set_xlim(-1, len(x))
    ax1.set_ylim(min(x) - 0.5, max(x) + 1.2)
    ax1.set_title("One row: its scores tile by tile, and the running max m after each tile", fontsize=10)
    ax2 = fig.add_axes((0.46, 0.08, 0.52, 0.31))
    tiles = list(range(n_tiles))
    ax2.plot(tiles, [t[1] for t in trace], "o-", label="l (running sum of exp(x - m))")
    ax2.plot(tiles, [t[2] / t[1] for t in trace], "s-", label="acc / l (the output so far)")
    for n, (m, l, acc, alpha) in enumerate(trace):
        ax2.annotate("alpha = %.3f" % alpha if n else "alpha = 0 (nothing yet)", (n, l), textcoords="offset points",
                     xytext=(0, 10), ha="center", fontsize=7, color="#b30000" if 0 < alpha < 1 else "black")
    ax2.axhline(direct, color="#888888", ls=":", lw=1, label="O of the whole row (direct softmax)")
    ax2.set_xticks(tiles, ["after tile %d" % n for n in tiles], fontsize=8)
    ax2.legend(fontsize=7, loc="lower right")
    ax2.set_title("alpha = exp(m_old - m_new) rescales l and acc where the max moved (red)\nat the end O = acc / l "
                  "= %.6f, the direct softmax's %.6f" % (o, direct), fontsize=9)
    fig.savefig(os.path.join(out, "online_softmax.png"), dpi=72)


def pipeline(out):
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle
    fig, axes = plt.subplots(2, 1, figsize=(13, 4.6), sharex=True)
    colours = {"copy": "#9ecae1", "wait": "#d9d9d9", "compute": "#a1d99b"}

    def box(ax, lane, start, length, kind, text):
        ax.add_patch(Rectangle((start, lane - 0.35), length, 0.7, facecolor=colours[kind], edgecolor="black", lw=0.7))
        ax.text(start + length / 2, lane, text, ha="center", va="center", fontsize=7)

    # Step 2: every iteration waits until the previous tile is done with (a barrier), copies its tile through
    # registers, waits at a second barrier until the copy is complete, then computes.
    ax, t = axes[0], 0
    box(ax, 1, t, 1.4, "copy", "load Q")
    t += 1.4
    for n in range(4):
        box(ax, 1, t, 0.5, "wait", "sync")
        box(ax, 1, t + 0.5, 2, "copy", "load K, V tile %d" % n)
        box(ax, 1, t + 2.5, 0.5, "wait", "sync")
        box(ax, 0, t + 3, 3, "compute", "S, softmax, P V: tile %d" % n)
        t += 6
    ax.set_title("step 2 (2_mma_cuda.cu): __syncthreads(), load, __syncthreads(), compute, one after the other",
                 fontsize=10)
    # Step 3: the Q tile and tile 0 in one group; then per tile: wait + barrier, issue tile n + 1, compute tile n.
    ax, t = axes[1], 0
    box(ax, 1, t, 2.4, "copy", "cp.async Q, K/V 0")
    box(ax, 1, t + 2.4, 0.9, "wait", "wait, sync")
    t += 3.3
    for n in range(4):
        if n:
            box(ax, 0, t, 0.9, "wait", "wait, sync")
            t += 0.9
        if n < 3:
            box(ax, 1, t, 2, "copy", "cp.async K/V %d" % (n + 1))
        box(ax, 0, t, 3, "compute", "S, softmax, P V: tile %d" % n)
        t += 3
    ax.set_title("step 3 (3_pipeline_cuda.cu): tile n + 1 is requested before tile n is computed, and lands while "
                 "the tensor cores work (two buffers)", fontsize=10)
    for ax in axes:
        ax.set_yticks([0, 1], ["tensor cores,\nsoftmax", "copies global ->\nshared memory"], fontsize=8)
        ax.set_ylim(-0.7, 1.7)
        ax.set_xlim(0, 26)
        ax.set_xticks([])
    axes[1].set_xlabel("order of events in one thread block (the kernels' own order; lengths are not measured)",
                       fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "pipeline.png"), dpi=72)


def backward_warps(out):
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle
    products, constants = backward_products()
    warps, rows = constants["WARPS"], constants["WARP_ROWS"]
    tile = warps * rows
    fig, axes = plt.subplots(1, 3, figsize=(14, 5), gridspec_kw={"width_ratios": [1, 1, 1.3]})
    colours = ["#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462", "#b3de69", "#fccde5"]
    for ax, (what, row_name, col_name, steps) in zip(axes[:2], (
            ("dK/dV pass: one block per K/V tile", "key of the K/V tile", "query of the Q tile (streamed)",
             "S^T = K Q^T\nP^T from LSE\ndV += P^T dO\ndP^T = V dO^T\ndS^T = P^T (dP^T - Delta)\ndK += dS^T Q"),
            ("dQ pass (deterministic): one block per Q tile", "query of the Q tile", "key of the K/V tile (streamed)",
             "S = Q K^T\nP from LSE\ndP = dO V^T\ndS = P (dP - Delta)\ndQ += dS K"))):
        for w in range(warps):
            ax.add_patch(Rectangle((0, w * rows), tile, rows, facecolor=colours[w], edgecolor="black"))
            ax.text(tile / 2, w * rows + rows / 2, "warp %d: %s %d-%d\n(all %d columns)" % (
                w, "keys" if row_name.startswith("key") else "queries", w * rows, (w + 1) * rows - 1, tile), ha="center", va="center",
                fontsize=8)
        ax.set_xlim(0, tile)
        ax.set_ylim(tile, 0)
        ax.set_aspect("equal")
        ax.set_xlabel(col_name, fontsize=8)
        ax.set_ylabel(row_name, fontsize=8)
        ax.set_title("%s\neach warp, per tile pair:\n%s" % (what, steps), fontsize=8, loc="left")
    ax = axes[2]
    ax.axis("off")
    text = ["The five products (4_backward_cuda.cu), %d x %d tiles, %d warps of %d rows:" % (tile, tile, warps, rows),
            ""]
    for product, a, b, fetch in products:
        text += ["%s" % product, "    A: %s" % a, "    B: %s   [%s]" % (b, fetch)]
    text += ["", "The deterministic dQ pass recomputes S and dP: 7 products", "in all; the atomic variant's dK/dV "
             "kernel does dQ's share", "too (dS^T through shared memory, then atomicAdd): 5."]
    ax.text(0, 1, "\n".join(text), va="top", ha="left", fontsize=8, family="monospace")
    fig.suptitle("The backward on tensor cores: which warp owns which rows, and the products it computes", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.savefig(os.path.join(out, "backward_warps.png"), dpi=72)


def dq_pieces_figure(out):
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle
    panels = (("step 6h, D = 128\n64 x 128 tiles: dQ = dS K", "6i", 128, 64),
              ("step 6h, D = 64\n64 x 128 tiles", "6i", 64, 64),
              ("step 6i, D = 64\n128 x 128 tiles", "6i", 64, 128),
              ("step 6j, D = 64\n128 x 128 tiles: dQ^T = K^T dS^T", "6j", 64, 128),
              ("step 6j, D = 128\n80 x 128 tiles: dQ^T = K^T dS^T", "6j", 128, 80))
    colours = ("#80b1d3", "#fdb462")
    fig, axes = plt.subplots(1, len(panels), figsize=(15, 4.0))
    for ax, (title, step, D, block_m) in zip(axes, panels):
        for warpgroup, query0, queries, dim0, dims, m, n in dq_pieces(step, D, block_m):
            ax.add_patch(Rectangle((dim0, query0), dims, queries, facecolor=colours[warpgroup], edgecolor="black"))
            shape = ("M = %d queries\nN = %d dims" if step == "6i" else "M = %d dims\nN = %d queries") % (m, n)
            ax.text(dim0 + dims / 2, query0 + queries / 2, "warpgroup %d\n%s" % (warpgroup, shape), ha="center",
                    va="center", fontsize=8, rotation=90 if dims < 64 else 0)   # a 32-dim piece: written upright
        ax.set_xlim(0, 128)
        ax.set_ylim(128, 0)
        ax.set_aspect("equal")
        ax.set_xticks(range(0, D + 1, 32))
        ax.set_yticks(sorted({0, block_m} | set(range(0, block_m + 1, 64))))
        ax.set_xlabel("dim of dQ (D = %d)" % D, fontsize=8)
        ax.set_ylabel("query of the Q tile (BLOCK_M = %d)" % block_m, fontsize=8)
        ax.set_title(title, fontsize=9, loc="left")
        ax.tick_params(labelsize=7)
    fig.suptitle("A Q tile's dQ in phase 7's backward: the piece each warpgroup computes (one wgmma chain of M = 64)",
                 fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.savefig(os.path.join(out, "dq_pieces.png"), dpi=72)


def main(argv):
    if len(argv) != 1 or not os.path.isdir(argv[0]):
        print(__doc__, file=sys.stderr)
        return 2
    if start_matplotlib() is None:
        return 77
    online_softmax(argv[0])
    pipeline(argv[0])
    backward_warps(argv[0])
    dq_pieces_figure(argv[0])
    print("wrote online_softmax.png, pipeline.png, backward_warps.png and dq_pieces.png in " + argv[0])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
