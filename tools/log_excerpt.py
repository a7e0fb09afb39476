#!/usr/bin/env python3
"""log_excerpt.py - one run's output from a committed log, as a chapter shows it (a generated block).

    python3 tools/log_excerpt.py LOG --command "phase1_naive --impl cpu" [--match REGEX ...] [--nth N | --all]

LOG is the output of tools/headline.sh or tools/cpu_headline.sh: each run starts with a line "$ BINARY ARGS". Prints,
in a code block, "$ build/bin/BINARY ARGS" and the lines of that run (the Nth run with exactly that command, default
the first; --all: every such run, one after the other, the machine's lines once); with --match, only the lines that
match one of the regular expressions (the header lines that name the machine are always kept). tools/check_docs.py checks that the block in the chapter is what this prints.
Exit status: 0 printed, 2 no such run or a usage error (one "error:" line).
"""
import argparse
import re
import sys

MACHINE_LINES = re.compile(r"^(CPU|GPU): ")


def runs(path):
    """[(command, [lines])] in the order of the log."""
    result = []
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("$ "):
                result.append((line[2:].strip(), []))
            elif result:
                result[-1][1].append(line)
    return result


def main():
    parser = argparse.ArgumentParser(description="One run's output from a committed log, for a chapter.")
    parser.add_argument("log")
    parser.add_argument("--command", required=True, help="the command as the log prints it, without the '$ '")
    parser.add_argument("--match", action="append", default=[], help="keep only the lines that match (repeatable)")
    parser.add_argument("--nth", type=int, default=1, help="which run with that command (default 1)")
    parser.add_argument("--all", action="store_true", help="every run with that command")
    args = parser.parse_args()
    try:
        found = [lines for command, lines in runs(args.log) if command == args.command.strip()]
    except OSError as e:
        print(f"error: cannot read {args.log}: {e.strerror}", file=sys.stderr)
        return 2
    if len(found) < args.nth:
        print(f"error: {args.log} has {len(found)} run(s) of '{args.command}', not {args.nth}", file=sys.stderr)
        return 2
    chosen = found if args.all else [found[args.nth - 1]]
    patterns = [re.compile(m) for m in args.match]
    lines = []
    for number, run in enumerate(chosen):
        if patterns:
            run = [l for l in run if MACHINE_LINES.match(l) and number == 0 or any(p.search(l) for p in patterns)]
        lines += run
    while lines and not lines[-1].strip():
        lines.pop()
    print("```")
    print("$ build/bin/" + args.command.strip())
    print("\n".join(lines))
    print("```")
    return 0


if __name__ == "__main__":
    sys.exit(main())
