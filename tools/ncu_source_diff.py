#!/usr/bin/env python3
"""ncu_source_diff.py - where a causal run's instructions go, from two per-instruction Nsight Compute exports.

    python3 tools/ncu_source_diff.py CAUSAL.csv[.gz] NONCAUSAL.csv[.gz] --ratio TILES_CAUSAL/TILES_NONCAUSAL

Each file is `ncu --import REPORT --page source --csv --print-source sass` of one launch of the same kernel binary
(a report with the SourceCounters section): one row per SASS instruction, with how many times warps executed it.
A causal run visits fewer tiles than a non-causal one; if every instruction scaled with the tile count, the causal
run would execute RATIO times the non-causal run's instructions. This prints, as a Markdown table, how far each kind
of code departs from that, grouping the instructions by how their two counts relate:

  once per block     the same count in both runs: code every block runs once per warp, however many tiles it has
                     (its start and end, and whatever of the first and last tile the compiler took out of the loop)
  causal only, once  not run without the mask, and about once per block and warp: a diagonal tile's mask
  causal only, every tile  not run without the mask, more than twice per block and warp: causal work in every tile
  the rest           the tile loop and everything else that scales with the tiles

A warp's count is the count divided by the most common count of the once-per-block code (the blocks times the
warps that run it). Standard library only. Exit status: 0 printed, 2 a file missing, unreadable or not such an export
(one "error:" line).
"""
import csv
import gzip
import sys
from collections import Counter
from fractions import Fraction


def die(message):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def read_export(path, extra=()):
    """[(address, instruction, executed, *extra)] in the order of the export: extra names more columns of counts
    (the stall samples, "Warp Stall Sampling (All Samples)" or "stall_barrier", say), read as ints."""
    try:
        with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
            rows = list(csv.reader(f))
    except (OSError, EOFError, UnicodeDecodeError) as e:
        die(f"cannot read {path}: {e}")
    header = next((r for r in rows[:5] if "Instructions Executed" in r and "Address" in r), None)
    if header is None:
        die(f"{path}: no 'Address' and 'Instructions Executed' columns (not an ncu --page source --csv export)")
    missing = [name for name in extra if name not in header]
    if missing:
        die(f"{path}: no {', '.join(repr(name) for name in missing)} column (the SourceCounters section exports it)")
    at, source, executed = header.index("Address"), header.index("Source"), header.index("Instructions Executed")
    counts = [executed] + [header.index(name) for name in extra]
    out = []
    for r in rows[rows.index(header) + 1:]:
        try:
            out.append((int(r[at], 16), r[source].strip(), *(int(r[i] or 0) for i in counts)))
        except (ValueError, IndexError):
            die(f"{path}: a row that is not an instruction: {r[:3]}")
    return out


def opcode(text):
    """The instruction's opcode with its modifiers ("SHFL.BFLY"), its predicate ("@!P0") left out."""
    words = text.split()
    return words[1] if words and words[0].startswith("@") else words[0] if words else ""


def main(argv):
    if len(argv) != 4 or argv[2] != "--ratio" or "/" not in argv[3]:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        ratio = Fraction(argv[3])
    except (ValueError, ZeroDivisionError):
        die(f"--ratio {argv[3]}: not a fraction such as 528/1024")
    causal, plain = read_export(argv[0]), read_export(argv[1])
    # The same binary: the same instructions at the same offsets (branch targets are absolute addresses, which
    # differ from run to run, so the operands are not compared).
    if len(causal) != len(plain) or any(a[0] - causal[0][0] != b[0] - plain[0][0] or opcode(a[1]) != opcode(b[1])
                                        for a, b in zip(causal, plain)):
        die("the two exports are not of the same kernel binary (their instructions differ)")
    once = Counter(c for (_, _, c), (_, _, n) in zip(causal, plain) if c == n and c > 0)
    if not once:
        die("no instruction runs as often in both runs: no once-per-block code to count warps by")
    per_block = once.most_common(1)[0][0]   # blocks x warps that run the block's straight-line code
    groups = {name: [0, 0, 0, 0.0] for name in ("once per block", "causal only, once", "causal only, every tile",
                                                "the rest")}
    for (_, _, c), (_, _, n) in zip(causal, plain):
        if c == 0 and n == 0:
            continue
        name = ("once per block" if c == n else "the rest" if n else
                "causal only, once" if c <= 2 * per_block else "causal only, every tile")
        g = groups[name]
        g[0] += 1
        g[1] += c
        g[2] += n
        g[3] += c - float(ratio) * n
    total_c, total_n = sum(c for _, _, c in causal), sum(n for _, _, n in plain)
    lines = [f"| code | SASS instructions | executed per warp and block, causal / not (millions in all) | "
             f"causal's excess over {float(ratio):.3f} x not |", "|---|---|---|---|"]
    for name, (count, c, n, excess) in groups.items():
        lines.append(f"| {name} | {count} | {c / per_block:,.1f} / {n / per_block:,.1f} ({c / 1e6:.1f} M / "
                     f"{n / 1e6:.1f} M) | {excess / 1e6:+.1f} M |")
    lines.append(f"| all | {sum(g[0] for g in groups.values())} | ({total_c / 1e6:.1f} M / {total_n / 1e6:.1f} M) | "
                 f"{(total_c - float(ratio) * total_n) / 1e6:+.1f} M |")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
