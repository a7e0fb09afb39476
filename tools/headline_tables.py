#!/usr/bin/env python3
"""headline_tables.py - the GPU tables the docs quote, read off a headline.log (tools/headline.sh's output).

    python3 tools/headline_tables.py docs/figures/h100-headline.log

Prints, as Markdown to paste, the GPU tables of the docs at B=4 H=16 S=4096, each under a line that names the GPU and
the log: README.md ("What it measures"), docs/01-naive.md (the naive kernels), docs/03-forward-4d.md (step 3,
non-causal against causal), docs/04-backward.md (the backward against the forward) and docs/06-tensor-cores.md (phase
5's steps beside PyTorch's kernels). Every number is a timing row the phase binaries or tools/pytorch_compare.py
printed; nothing is recomputed but the ratios of two of them. Standard library only.
Exit status: 0 printed, 1 a check in the log failed, 2 the log lacks a row a table needs (one "error:" line).
"""
import re
import sys

COMMAND = re.compile(r"^\$ ([\w.]+) (.*)$")
ROW = re.compile(r"^  (?P<label>\S.*?)\s+(?P<causal>yes|no)\s+(?P<impl>cpu|cuda)\s+(?P<threads>\S+)\s+"
                 r"(?P<ms>[\d.]+)\s+[\d.]+\s+(?P<gflops>[\d.]+)\s+\S+\s+(?P<extra>[\d.]+ \w+)")
# tools/pytorch_compare.py's progress line: "sdpa flash bf16   S=4096   D=64   causal=no   ok   1.234 ms   111.1 GFLOP/s"
TORCH_ROW = re.compile(r"^(?P<label>sdpa \S.*?)\s+S=\d+\s+D=(?P<D>\d+)\s+causal=(?P<causal>yes|no)\s+(?P<status>\w+)\s+"
                       r"(?P<ms>[\d.]+) ms\s+(?P<gflops>[\d.]+) GFLOP/s")


def read_log(path):
    """(binary, D, dq mode, dtype, label, causal) -> the cuda timing row; the GPU's header line; whether every check
    passed. PyTorch's rows are filed under the binary "pytorch_compare.py"."""
    rows, gpu, passed, run = {}, None, True, None
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            m = COMMAND.match(line)
            if m:
                flags = m.group(2).split()
                value = lambda flag, default: flags[flags.index(flag) + 1] if flag in flags else default
                run = (m.group(1), int(value("--D", "0")), value("--dq", "both"), value("--dtype", "fp32"))
            elif line.startswith("GPU: ") and line != "GPU: none":   # "GPU: NAME, compute capability 9.0, 132 SMs, ..."
                name, _, facts = line[5:].partition(", compute capability")
                sms_mhz = re.search(r"(\d+) SMs, (\d+) MHz", facts)
                gpu = name + (f" ({sms_mhz[1]} SMs, {sms_mhz[2]} MHz)" if sms_mhz else "")
            elif line.startswith("SOME CHECKS FAILED"):
                passed = False
            elif run and (m := ROW.match(line)) and m["impl"] == "cuda":
                rows.setdefault(run + (m["label"], m["causal"] == "yes"), m.groupdict())
            elif run and (m := TORCH_ROW.match(line)) and m["status"] == "ok":
                rows.setdefault((run[0], int(m["D"]), "both", "fp32", m["label"], m["causal"] == "yes"), m.groupdict())
    return rows, gpu, passed


def main(argv):
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    path = argv[0]
    try:
        rows, gpu, passed = read_log(path)
    except OSError as e:
        print(f"error: cannot read {path}: {e.strerror}", file=sys.stderr)
        return 2

    def row(binary, D, label, causal, dq="both", dtype="fp32"):
        key = (binary, D, dq, dtype, label, causal)
        if key not in rows:
            print(f"error: {path} has no cuda row '{label}' (causal {causal}) from {binary} --D {D}"
                  + (f" --dq {dq}" if dq != "both" else "") + (f" --dtype {dtype}" if dtype != "fp32" else ""),
                  file=sys.stderr)
            sys.exit(2)
        return rows[key]

    ms = lambda r: float(r["ms"])
    tf = lambda r: float(r["gflops"]) / 1000
    source = (f"Measured on an {gpu or 'unknown GPU'}: B=4, H=16, S=4096, float32, `tools/headline.sh`, medians of "
              f"10 runs, the log in {path}; " + ("every check PASS." if passed else "SOME CHECKS FAILED."))
    shapes = ((64, False), (64, True), (128, False), (128, True))
    naive = {s: row("phase1_naive", s[0], "naive", s[1]) for s in shapes}
    # Phase 3 labels its causal rows "step 3 (causal)" (its check block has no causal column).
    step3 = {s: row("phase3_forward_4d", s[0], "step 3 (causal)" if s[1] else "step 3", s[1]) for s in shapes}
    det = {s: row("phase4_backward", s[0], "backward det", s[1], "deterministic") for s in shapes}
    atomic = {s: row("phase4_backward", s[0], "backward atomic", s[1], "atomic") for s in shapes}
    forward = {s: row("phase4_backward", s[0], "forward (phase 3 step 3)", s[1], "deterministic") for s in shapes}
    naive_bwd = {s: row("phase4_backward", s[0], "naive backward", s[1], "deterministic") for s in shapes}

    print("README.md, What it measures:\n\n" + source + "\n")
    print("| | D=64 | D=64 causal | D=128 |\n|---|---|---|---|")
    for what, cell in (("phase 1 naive forward (S, P in memory)", lambda s: f"{tf(naive[s]):.1f}"),
                       ("phase 3 step 3 forward (FlashAttention)", lambda s: f"{tf(step3[s]):.1f}"),
                       ("phase 4 backward, deterministic dQ / atomic dQ",
                        lambda s: f"{tf(det[s]):.1f} / {tf(atomic[s]):.1f}")):
        cells = [cell(s) + (" TFLOP/s" if s == (64, False) else "") for s in shapes[:3]]
        print(f"| {what} | " + " | ".join(cells) + " |")

    print("\ndocs/01-naive.md, What to expect on the GPU:\n\n" + source + "\n")
    print("| B=4 H=16 S=4096 | D=64 | D=64 causal | D=128 | D=128 causal |\n|---|---|---|---|---|")
    print("| naive cuda, ms | " + " | ".join(f"{ms(naive[s]):.1f}" for s in shapes) + " |")
    print("| naive cuda, GFLOP/s | " + " | ".join(f"{float(naive[s]['gflops']):.0f}" for s in shapes) + " |")
    print("| extra memory (S, P) | " + " | ".join(naive[s]["extra"] for s in shapes) + " |")

    print("\ndocs/03-forward-4d.md, Measured on the GPU:\n\n" + source + "\n")
    print("| D | non-causal ms (TFLOP/s) | causal ms (TFLOP/s) | causal / non-causal | naive, for comparison |\n"
          "|---|---|---|---|---|")
    for D in (64, 128):
        full, causal = step3[(D, False)], step3[(D, True)]
        print(f"| {D} | {ms(full):.2f} ({tf(full):.1f}) | {ms(causal):.2f} ({tf(causal):.1f}) | "
              f"{ms(causal) / ms(full):.2f} | {ms(naive[(D, False)]):.1f} ms ({tf(naive[(D, False)]):.1f}) |")

    print("\ndocs/04-backward.md, the backward on the GPU:\n\n" + source + "\n")
    print("| D | causal | forward ms | backward det ms (GFLOP/s) | backward atomic ms (GFLOP/s) | naive backward ms | "
          "det / fwd | atomic / fwd |\n|---|---|---|---|---|---|---|---|")
    for s in shapes:
        f, d, a = ms(forward[s]), det[s], atomic[s]
        print(f"| {s[0]} | {'yes' if s[1] else 'no'} | {f:.1f} | {ms(d):.1f} ({float(d['gflops']):.0f}) | "
              f"{ms(a):.1f} ({float(a['gflops']):.0f}) | {ms(naive_bwd[s]):.1f} | {ms(d) / f:.2f}x | {ms(a) / f:.2f}x |")

    print("\ndocs/06-tensor-cores.md, phase 5 beside PyTorch (forward):\n\n" + source.replace("float32", "float32, fp16 "
          "and bf16").replace("`tools/headline.sh`", "`tools/headline.sh` (PyTorch's rows: `tools/pytorch_compare.py`, "
          "same run)") + "\n")
    print("| forward, TFLOP/s | D=64 | D=64 causal | D=128 | D=128 causal |\n|---|---|---|---|---|")
    p5 = lambda label, dtype: {s: row("phase5_tensor_cores", s[0], label, s[1], dtype=dtype) for s in shapes}
    torch = lambda label: {s: row("pytorch_compare.py", s[0], label, s[1]) for s in shapes}
    for what, fp16, bf16 in (("phase 3 step 3, fp32", None, p5("phase 3 step 3", "bf16")),
                             ("phase 5 step 1 register tiles, fp32", None, p5("step 1 register tiles", "bf16")),
                             ("phase 5 step 2 mma, fp16 / bf16", p5("step 2 mma fp16", "fp16"),
                              p5("step 2 mma bf16", "bf16")),
                             ("phase 5 step 3 pipeline, fp16 / bf16", p5("step 3 pipeline fp16", "fp16"),
                              p5("step 3 pipeline bf16", "bf16")),
                             ("PyTorch fp32 memory-efficient", None, torch("sdpa efficient")),
                             ("PyTorch FlashAttention-2, fp16 / bf16", torch("sdpa flash fp16"),
                              torch("sdpa flash bf16")),
                             ("PyTorch cuDNN, fp16 / bf16", torch("sdpa cudnn fp16"), torch("sdpa cudnn bf16"))):
        cells = [(f"{tf(fp16[s]):.1f} / " if fp16 else "") + f"{tf(bf16[s]):.1f}" for s in shapes]
        print(f"| {what} | " + " | ".join(cells) + " |")
    ratio = lambda dtype, s: ms(torch(f"sdpa flash {dtype}")[s]) / ms(p5(f"step 3 pipeline {dtype}", dtype)[s])
    print("| step 3 speed / FlashAttention-2's, fp16 / bf16 | " +
          " | ".join(f"{ratio('fp16', s):.2f} / {ratio('bf16', s):.2f}" for s in shapes) + " |")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
