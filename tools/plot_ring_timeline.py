#!/usr/bin/env python3
"""plot_ring_timeline.py - phase 8's ring over time: each rank's compute stream and its transfers, from the run.

  python3 tools/plot_ring_timeline.py TIMELINE.csv [-o TIMELINE.png] [--ranks N] [--rows R] [--summary]

TIMELINE.csv is what `phase8_ring ... --timeline TIMELINE.csv` writes (phase8_ring/ring_transport.h): one line per
interval, `row,rank,gpu,what,index,start_us,end_us`, for each traced ring row ("ring 4 ranks bf16", "zigzag bwd 4
ranks bf16", ...). `what` is "blocks" (the compute stream ran the step's kernels), "K/V wait" or "dK/dV wait" (it
stalled until a transfer was done) or "K/V transfer" / "dK/dV transfer" (from the exchange to the end of the send and
receive); times count from each GPU's origin. The chart has one panel per row and two lanes per rank: compute (the
blocks, and the waits in red) and transfers. It prints, per row and rank, the time the compute stream was busy,
stalled, and how much of its transfers' time the blocks hid; the blocks of each step; and how long the transfers ran
on after the last blocks (--summary: that and no chart). The file is checked first: every traced row has ranks 0
to N-1 (--ranks: exactly N; --rows: exactly R traced rows), every rank has blocks, and with N > 1 transfers.

Reading the CSV needs Python's standard library only; drawing needs matplotlib: without it the summary is printed,
a line says so, and the exit status is 77 (skipped). Exit status 0, 2 on a usage error or a malformed CSV.
"""
import argparse
import csv
import sys

COLUMNS = ["row", "rank", "gpu", "what", "index", "start_us", "end_us"]
KINDS = ["blocks", "K/V wait", "dK/dV wait", "K/V transfer", "dK/dV transfer"]
COLOURS = {"blocks": "#1f77b4", "K/V wait": "#d62728", "dK/dV wait": "#ff9896", "K/V transfer": "#2ca02c",
           "dK/dV transfer": "#ff7f0e"}


def fail(message):
    """One line on stderr, exit status 2."""
    print("plot_ring_timeline.py: " + message, file=sys.stderr)
    sys.exit(2)


def read_intervals(path):
    """The CSV's intervals as dicts (start and end in microseconds); exits 2 with one line on a malformed file."""
    try:
        with open(path, newline="") as f:
            lines = list(csv.reader(f))
    except OSError as e:
        fail("cannot read %s: %s" % (path, e.strerror))
    if not lines or lines[0] != COLUMNS:
        fail("%s: the first line must be %s" % (path, ",".join(COLUMNS)))
    intervals = []
    for number, line in enumerate(lines[1:], start=2):
        try:
            if len(line) != len(COLUMNS) or line[3] not in KINDS or not line[0]:
                raise ValueError
            i = {"row": line[0], "rank": int(line[1]), "gpu": int(line[2]), "what": line[3],
                 "index": int(line[4]), "start": float(line[5]), "end": float(line[6])}
            if i["end"] < i["start"] or i["start"] < 0 or i["rank"] < 0:
                raise ValueError
        except ValueError:
            fail("%s:%d: not an interval (%s)" % (path, number, ",".join(line)))
        intervals.append(i)
    if not intervals:
        fail("%s holds no interval" % path)
    return intervals


def check_shape(intervals, path, ranks, rows):
    """Exits 2 unless the CSV holds `rows` traced rows (when given), each with ranks 0 .. N-1 (N = `ranks` when
    given), every rank with blocks, and, when N > 1, with transfers."""
    traced = rows_in_order(intervals)
    if rows is not None and len(traced) != rows:
        fail("%s: %d traced rows (%s), expected %d" % (path, len(traced), ", ".join(traced), rows))
    for row in traced:
        mine = [i for i in intervals if i["row"] == row]
        present = sorted({i["rank"] for i in mine})
        n = ranks if ranks is not None else len(present)
        if present != list(range(n)):
            fail("%s: row '%s' has ranks %s, expected 0 to %d" % (path, row, present, n - 1))
        for rank in present:
            kinds = {i["what"] for i in mine if i["rank"] == rank}
            if "blocks" not in kinds:
                fail("%s: row '%s', rank %d: no blocks" % (path, row, rank))
            if n > 1 and not kinds & {"K/V transfer", "dK/dV transfer"}:
                fail("%s: row '%s', rank %d: no transfer" % (path, row, rank))


def rows_in_order(intervals):
    """The traced rows, in the order the file lists them."""
    rows = []
    for i in intervals:
        if i["row"] not in rows:
            rows.append(i["row"])
    return rows


def total(intervals, kinds):
    """Summed length in microseconds of the intervals whose kind is in `kinds`."""
    return sum(i["end"] - i["start"] for i in intervals if i["what"] in kinds)


def summary(intervals):
    """Lines: per row, its length; per rank, compute busy and stalled, and the share of transfer time hidden."""
    lines = []
    for row in rows_in_order(intervals):
        mine = [i for i in intervals if i["row"] == row]
        start = min(i["start"] for i in mine)
        end = max(i["end"] for i in mine)
        lines.append("%s: %.0f us from the first mark to the last" % (row, end - start))
        for rank in sorted({i["rank"] for i in mine}):
            own = [i for i in mine if i["rank"] == rank]
            busy = total(own, ["blocks"])
            stalled = total(own, ["K/V wait", "dK/dV wait"])
            moving = total(own, ["K/V transfer", "dK/dV transfer"])
            hidden = "%.0f%%" % (100.0 * (1.0 - stalled / moving)) if moving > 0 else "-"
            lines.append("  rank %d (GPU %d): blocks %.0f us, stalled %.0f us, transfers %.0f us (%s hidden)"
                         % (rank, own[0]["gpu"], busy, stalled, moving, hidden))
            steps = sorted({i["index"] for i in own if i["what"] == "blocks"})
            per_step = [total([i for i in own if i["index"] == n], ["blocks"]) for n in steps]
            last_blocks = max(i["end"] for i in own if i["what"] == "blocks")
            tail = max(i["end"] for i in own) - last_blocks
            lines.append("    blocks per step: %s us; after the last blocks: %.0f us"
                         % (" ".join("%.0f" % t for t in per_step), tail))
    return lines


def draw(intervals, out):
    """One panel per row, two lanes per rank (compute above, transfers below)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    rows = rows_in_order(intervals)
    ranks = sorted({i["rank"] for i in intervals})
    fig, axes = plt.subplots(len(rows), 1, figsize=(11, 1.0 + 0.55 * 2 * len(ranks) * len(rows)), squeeze=False)
    for ax, row in zip(axes[:, 0], rows):
        mine = [i for i in intervals if i["row"] == row]
        origin = min(i["start"] for i in mine)
        ticks, names = [], []
        for n, rank in enumerate(ranks):
            compute_y, transfer_y = 2 * n, 2 * n + 1
            ticks += [compute_y, transfer_y]
            names += ["rank %d compute" % rank, "rank %d transfers" % rank]
            for i in mine:
                if i["rank"] != rank:
                    continue
                y = transfer_y if i["what"].endswith("transfer") else compute_y
                # The two channels' transfers share a lane: dK/dV in the lower half, K/V in the upper.
                height, base = 0.8, y - 0.4
                if i["what"] == "dK/dV transfer":
                    height, base = 0.4, y
                elif i["what"] == "K/V transfer":
                    height = 0.4
                ax.broken_barh([((i["start"] - origin) / 1000.0, (i["end"] - i["start"]) / 1000.0)], (base, height),
                               facecolors=COLOURS[i["what"]], edgecolor="white", linewidth=0.3)
        ax.set_yticks(ticks)
        ax.set_yticklabels(names, fontsize=7)
        ax.invert_yaxis()
        ax.set_title(row, fontsize=9)
        ax.set_xlabel("ms", fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
    present = [k for k in KINDS if any(i["what"] == k for i in intervals)]
    fig.legend(handles=[Patch(color=COLOURS[k], label=k) for k in present], loc="lower center", ncol=len(present),
               fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description="phase 8's ring timeline from phase8_ring --timeline")
    parser.add_argument("csv", help="the CSV phase8_ring --timeline wrote")
    parser.add_argument("-o", "--out", help="the PNG to write (default: the CSV's name with .png)")
    parser.add_argument("--ranks", type=int, help="check: every traced row has this many ranks")
    parser.add_argument("--rows", type=int, help="check: the CSV holds this many traced rows")
    parser.add_argument("--summary", action="store_true", help="print the summary only, draw nothing")
    args = parser.parse_args()
    intervals = read_intervals(args.csv)
    check_shape(intervals, args.csv, args.ranks, args.rows)
    for line in summary(intervals):
        print(line)
    if args.summary:
        return 0
    out = args.out or (args.csv[:-4] if args.csv.endswith(".csv") else args.csv) + ".png"
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("skipped: matplotlib is not installed, no chart drawn")
        return 77
    draw(intervals, out)
    print("wrote %s" % out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
