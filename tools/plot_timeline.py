#!/usr/bin/env python3
"""plot_timeline.py - phase 7 step 3's warp roles over time, as a Gantt chart, from the timeline build's CSV.

  python3 tools/plot_timeline.py TIMELINE.csv [-o TIMELINE.png] [--block N]

TIMELINE.csv is what `phase7_timeline ... --timeline TIMELINE.csv` writes (phase7_hopper/timeline.h): one line per
event, `block,warp,role,tile,start_ns,end_ns`, times from the earliest event. The chart has one lane per warp of one
block (the producer's warp 0 at the top, then the consumer warpgroups' warps 4-11), each event a bar coloured by its
role, each GEMM bar labelled with its tile. It prints, per role, the number of events and the share of the block's
time the consumer warps spend in it.

Reading the CSV needs Python's standard library only; drawing needs matplotlib: without it the summary is printed,
a line says so, and the exit status is 77 (skipped). Exit status 0, 2 on a usage error or a malformed CSV.
"""
import argparse
import csv
import sys

ROLES = ["producer wait", "producer TMA issue", "consumer wait", "GEMM1 S=QK^T", "softmax", "GEMM2 O+=PV"]
COLOURS = {"producer wait": "#cccccc", "producer TMA issue": "#7f7f7f", "consumer wait": "#f2d7d5",
           "GEMM1 S=QK^T": "#1f77b4", "softmax": "#ff7f0e", "GEMM2 O+=PV": "#2ca02c"}
COLUMNS = ["block", "warp", "role", "tile", "start_ns", "end_ns"]


def fail(message):
    """One line on stderr, exit status 2."""
    print("plot_timeline.py: " + message, file=sys.stderr)
    sys.exit(2)


def read_events(path):
    """The events of the CSV as dicts with int fields (role a str); exits 2 with one line on a malformed file."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
    except OSError as e:
        fail("cannot read %s: %s" % (path, e.strerror))
    if not rows or rows[0] != COLUMNS:
        fail("%s: the first line must be %s" % (path, ",".join(COLUMNS)))
    events = []
    for number, row in enumerate(rows[1:], start=2):
        try:
            if len(row) != len(COLUMNS) or row[2] not in ROLES:
                raise ValueError
            e = {"block": int(row[0]), "warp": int(row[1]), "role": row[2], "tile": int(row[3]),
                 "start": int(row[4]), "end": int(row[5])}
            if e["end"] < e["start"] or e["start"] < 0:
                raise ValueError
        except ValueError:
            fail("%s:%d: not an event (%s)" % (path, number, ",".join(row)))
        events.append(e)
    if not events:
        fail("%s holds no event" % path)
    return events


def summary(events, block):
    """Lines: per role, the events and the share of the consumer warps' time (from their first to last stamp)."""
    mine = [e for e in events if e["block"] == block]
    consumers = [e for e in mine if e["warp"] >= 4]
    span = (max(e["end"] for e in consumers) - min(e["start"] for e in consumers)) if consumers else 0
    warps = len({e["warp"] for e in consumers})
    lines = ["block %d: %d events, %d warps, consumer span %.1f us" % (block, len(mine), len({e["warp"] for e in mine}),
                                                                      span / 1000.0)]
    for role in ROLES:
        of_role = [e for e in mine if e["role"] == role]
        if not of_role:
            continue
        busy = sum(e["end"] - e["start"] for e in of_role)
        share = "" if role.startswith("producer") or not span else \
            ", %4.1f%% of the consumers' time" % (100.0 * busy / (span * warps))
        lines.append("  %-20s %5d events, %8.1f us in all%s" % (role, len(of_role), busy / 1000.0, share))
    return lines


def draw(events, block, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    mine = [e for e in events if e["block"] == block]
    warps = sorted({e["warp"] for e in mine})
    origin = min(e["start"] for e in mine)
    fig, ax = plt.subplots(figsize=(12, 0.45 * len(warps) + 1.6))
    for lane, warp in enumerate(warps):
        for e in (e for e in mine if e["warp"] == warp):
            start, width = (e["start"] - origin) / 1000.0, max(e["end"] - e["start"], 1) / 1000.0
            ax.broken_barh([(start, width)], (lane - 0.4, 0.8), facecolors=COLOURS[e["role"]], linewidth=0)
            if e["role"].startswith("GEMM") and warp % 4 == 0:
                ax.text(start + width / 2, lane, str(e["tile"]), ha="center", va="center", fontsize=6)
    ax.set_yticks(range(len(warps)))
    ax.set_yticklabels(["warp %d (%s)" % (w, "producer" if w < 4 else "consumer %d" % ((w - 4) // 4)) for w in warps])
    ax.invert_yaxis()
    ax.set_xlabel("microseconds since the block's first stamp (%globaltimer)")
    ax.set_title("phase 7 step 3, block %d: what each warp does over time" % block)
    ax.legend(handles=[Patch(color=COLOURS[r], label=r) for r in ROLES], loc="upper center",
              bbox_to_anchor=(0.5, -0.18), ncol=6, fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(out, dpi=150)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv")
    parser.add_argument("-o", "--output", default="timeline.png")
    parser.add_argument("--block", type=int, default=0, help="which recorded block to draw (default 0)")
    args = parser.parse_args()
    events = read_events(args.csv)
    if args.block not in {e["block"] for e in events}:
        fail("--block %d: the CSV holds blocks %s" %
                 (args.block, sorted({e["block"] for e in events})))
    print("\n".join(summary(events, args.block)))
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("skipped: the chart needs matplotlib (python3 -m pip install matplotlib)")
        return 77
    draw(events, args.block, args.output)
    print("wrote", args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
