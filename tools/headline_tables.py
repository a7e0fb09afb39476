#!/usr/bin/env python3
"""headline_tables.py - the GPU tables the docs quote, read off a headline log (tools/headline.sh's output).

    python3 tools/headline_tables.py LOG                 every table, each under the name of the chapter that shows it
    python3 tools/headline_tables.py LOG --table NAME [--from DOC]
                                                         one table, as the chapter's generated block holds it (its
                                                         link to the log relative to DOC; default: a file in docs/)

The chapters hold each table between markers that name this command (tools/check_docs.py checks that the block is
what the command prints, and `python3 tools/check_docs.py --regenerate` rewrites every block after a new log is
committed). Each table is printed under one line that names the GPU, the command and the log. Every number is a row
the phase binaries or tools/pytorch_compare.py printed; nothing is computed but ratios of two of them. Standard library
only. Exit status: 0 printed, 1 a check in the log failed, 2 the log lacks a row a table needs (one "error:" line).
"""
import os
import re
import sys

COMMAND = re.compile(r"^\$ ([\w.]+)(.*)$")
ROW = re.compile(r"^  (?P<label>\S.*?)\s+(?P<causal>yes|no)\s+(?P<impl>cpu|cuda)\s+(?P<threads>\S+)\s+"
                 r"(?P<ms>[\d.]+)\s+[\d.]+\s+(?P<gflops>[\d.]+)\s+\S+\s+(?P<extra>[\d.]+ \w+)")
# tools/pytorch_compare.py's progress line: "sdpa flash bf16   S=4096   D=64   causal=no   ok   1.234 ms   111.1 GFLOP/s"
TORCH_ROW = re.compile(r"^(?P<label>sdpa \S.*?)\s+S=\d+\s+D=(?P<D>\d+)\s+causal=(?P<causal>yes|no)\s+(?P<status>\w+)\s+"
                       r"(?P<ms>[\d.]+) ms\s+(?P<gflops>[\d.]+) GFLOP/s")
NOTE = re.compile(r"^  note: (.*)$")
SHAPES = ((64, False), (64, True), (128, False), (128, True))


def parse_flags(text):
    """'--D 64 --causal --dq atomic' -> {'--D': '64', '--causal': '', '--dq': 'atomic'}"""
    flags, words = {}, text.split()
    for i, word in enumerate(words):
        if word.startswith("--"):
            value = words[i + 1] if i + 1 < len(words) and not words[i + 1].startswith("--") else ""
            flags[word] = value
    return flags


class Log:
    """The runs of a headline log: each command with its cuda timing rows and its notes."""

    def __init__(self, path):
        self.path, self.runs, self.gpu, self.passed = path, [], None, True
        self.link_from = "docs"   # the folder of the document that shows the table (its link to the log)
        run = None
        with open(path, errors="replace") as f:
            for line in f:
                line = line.rstrip("\n")
                m = COMMAND.match(line)
                if m:
                    run = {"binary": m.group(1), "flags": parse_flags(m.group(2)), "rows": {}, "notes": []}
                    self.runs.append(run)
                elif line.startswith("GPU: ") and line != "GPU: none":   # "GPU: NAME, compute capability 9.0, ..."
                    name, _, facts = line[5:].partition(", compute capability")
                    sms_mhz = re.search(r"(\d+) SMs, (\d+) MHz", facts)
                    self.gpu = name + (f" ({sms_mhz[1]} SMs, {sms_mhz[2]} MHz)" if sms_mhz else "")
                elif line.startswith("SOME CHECKS FAILED"):
                    self.passed = False
                elif run is None:
                    continue
                elif (m := ROW.match(line)) and m["impl"] == "cuda":
                    run["rows"].setdefault((m["label"], m["causal"] == "yes"), m.groupdict())
                elif (m := TORCH_ROW.match(line)) and m["status"] == "ok":
                    run["rows"].setdefault((f"{m['label']} D={m['D']}", m["causal"] == "yes"), m.groupdict())
                elif m := NOTE.match(line):
                    run["notes"].append(m.group(1))

    def find(self, binary, **flags):
        """The first run of `binary` whose flags hold every given value (flag names without "--", "_" for "-"; the
        value None: the flag is absent; "": present without a value)."""
        for run in self.runs:
            if run["binary"] != binary:
                continue
            ok = True
            for name, value in flags.items():
                flag = "--" + name.replace("_", "-")
                if value is None:
                    ok = ok and flag not in run["flags"]
                else:
                    ok = ok and run["flags"].get(flag) == str(value)
            if ok:
                return run
        self.missing(f"no run of {binary} with " + " ".join(f"{k}={v}" for k, v in flags.items()))

    def row(self, binary, label, causal, **flags):
        """The cuda timing row `label` of the first matching run that has it."""
        flags = {k: v for k, v in flags.items()}
        if causal:
            flags.setdefault("causal", "")
        else:
            flags.setdefault("causal", None)
        for run in self.runs:
            if run["binary"] != binary:
                continue
            if all((("--" + k.replace("_", "-")) not in run["flags"]) if v is None else
                   run["flags"].get("--" + k.replace("_", "-")) == str(v) for k, v in flags.items()):
                if (label, causal) in run["rows"]:
                    return run["rows"][(label, causal)]
        self.missing(f"no cuda row '{label}' (causal {causal}) from {binary} with "
                     + " ".join(f"{k}={v}" for k, v in flags.items() if k != "causal"))

    def missing(self, what):
        print(f"error: {self.path}: {what}", file=sys.stderr)
        sys.exit(2)

    def source(self, what="float32", command="`tools/headline.sh`", runs="medians of 10 runs"):
        link = os.path.relpath(self.path, self.link_from)
        return (f"Measured on an {self.gpu or 'unknown GPU'}: {what}, {command}, {runs}, the log in "
                f"[{link}]({link}); "
                + ("every check PASS." if self.passed else "SOME CHECKS FAILED."))


ms = lambda r: float(r["ms"])
tf = lambda r: float(r["gflops"]) / 1000


def torch_row(log, label, D, causal, S=None):
    # pytorch_compare.py labels its rows without "--causal" in the command: every shape is in one run (with S, one of
    # the runs with that --S).
    for run in log.runs:
        if run["binary"] == "pytorch_compare.py" and (S is None or run["flags"].get("--S") == str(S)) and \
                (f"{label} D={D}", causal) in run["rows"]:
            return run["rows"][(f"{label} D={D}", causal)]
    log.missing(f"no PyTorch row '{label}' at D={D} causal={causal}" + (f" S={S}" if S else ""))


def table_readme(log):
    naive = {s: log.row("phase1_naive", "naive", s[1], D=s[0]) for s in SHAPES}
    step3 = {s: log.row("phase3_forward_4d", "step 3 (causal)" if s[1] else "step 3", s[1], D=s[0])
             for s in SHAPES}
    det = {s: log.row("phase4_backward", "backward det", s[1], D=s[0], dq="deterministic") for s in SHAPES}
    atomic = {s: log.row("phase4_backward", "backward atomic", s[1], D=s[0], dq="atomic") for s in SHAPES}
    p5 = {s: log.row("phase5_tensor_cores", "step 3i key offsets bf16", s[1], D=s[0], dtype="bf16", step=None)
          for s in SHAPES}
    out = [log.source("B=4, H=16, S=4096, float32 (phase 5: bf16)"), "",
           "| | D=64 | D=64 causal | D=128 |", "|---|---|---|---|"]
    for what, cell in (("phase 1 naive forward (S, P in memory)", lambda s: f"{tf(naive[s]):.1f}"),
                       ("phase 3 step 3 forward (FlashAttention)", lambda s: f"{tf(step3[s]):.1f}"),
                       ("phase 4 backward, deterministic dQ / atomic dQ",
                        lambda s: f"{tf(det[s]):.1f} / {tf(atomic[s]):.1f}"),
                       ("phase 5 step 3i forward, tensor cores, bf16", lambda s: f"{tf(p5[s]):.1f}")):
        cells = [cell(s) + (" TFLOP/s" if s == (64, False) else "") for s in SHAPES[:3]]
        out.append(f"| {what} | " + " | ".join(cells) + " |")
    return out


def table_naive(log):
    naive = {s: log.row("phase1_naive", "naive", s[1], D=s[0]) for s in SHAPES}
    return [log.source("B=4, H=16, S=4096, float32; the float64 oracle checked 2 of the 64 heads"), "",
            "| B=4 H=16 S=4096 | D=64 | D=64 causal | D=128 | D=128 causal |", "|---|---|---|---|---|",
            "| naive cuda, ms | " + " | ".join(f"{ms(naive[s]):.1f}" for s in SHAPES) + " |",
            "| naive cuda, GFLOP/s | " + " | ".join(f"{float(naive[s]['gflops']):.0f}" for s in SHAPES) + " |",
            "| extra memory (S, P) | " + " | ".join(naive[s]["extra"] for s in SHAPES) + " |"]


def table_forward(log):
    naive = {s: log.row("phase1_naive", "naive", s[1], D=s[0]) for s in SHAPES}
    step3 = {s: log.row("phase3_forward_4d", "step 3 (causal)" if s[1] else "step 3", s[1], D=s[0])
             for s in SHAPES}
    out = [log.source("`--impl cuda --step 3 --B 4 --H 16 --S 4096`, default `64x32` tiles, float32"), "",
           "| D | non-causal ms (TFLOP/s) | causal ms (TFLOP/s) | causal / non-causal | naive, for comparison |",
           "|---|---|---|---|---|"]
    for D in (64, 128):
        full, causal = step3[(D, False)], step3[(D, True)]
        out.append(f"| {D} | {ms(full):.2f} ({tf(full):.1f}) | {ms(causal):.2f} ({tf(causal):.1f}) | "
                   f"{ms(causal) / ms(full):.2f} | {ms(naive[(D, False)]):.1f} ms ({tf(naive[(D, False)]):.1f}) |")
    return out


def table_backward(log):
    get = lambda label, dq: {s: log.row("phase4_backward", label, s[1], D=s[0], dq=dq) for s in SHAPES}
    det, atomic = get("backward det", "deterministic"), get("backward atomic", "atomic")
    forward, naive_bwd = get("forward (phase 3 step 3)", "deterministic"), get("naive backward", "deterministic")
    out = [log.source("B=4, H=16, S=4096, float32, `64x64` tiles"), "",
           "| D | causal | forward ms | backward det ms (GFLOP/s) | backward atomic ms (GFLOP/s) | naive backward ms | "
           "det / fwd | atomic / fwd |", "|---|---|---|---|---|---|---|---|"]
    for s in SHAPES:
        f, d, a = ms(forward[s]), det[s], atomic[s]
        out.append(f"| {s[0]} | {'yes' if s[1] else 'no'} | {f:.1f} | {ms(d):.1f} ({float(d['gflops']):.0f}) | "
                   f"{ms(a):.1f} ({float(a['gflops']):.0f}) | {ms(naive_bwd[s]):.1f} | {ms(d) / f:.2f}x | "
                   f"{ms(a) / f:.2f}x |")
    return out


def table_phase5_forward(log):
    p5 = lambda label, dtype: {s: log.row("phase5_tensor_cores", label, s[1], D=s[0], dtype=dtype, step=None)
                               for s in SHAPES}
    torch = lambda label: {s: torch_row(log, label, s[0], s[1]) for s in SHAPES}
    out = [log.source("B=4, H=16, S=4096, TFLOP/s by the suite's convention; the float32 rows ran on the bf16-rounded "
                      "inputs of the bf16 runs", "`tools/headline.sh` (PyTorch 2.11's rows: `tools/pytorch_compare.py`,"
                      " same run)"), "",
           "| forward, B=4 H=16 S=4096, TFLOP/s | D=64 | D=64 causal | D=128 | D=128 causal |",
           "|---|---|---|---|---|"]
    for what, fp16, bf16 in (("phase 3 step 3, fp32, `128x64` tiles", None, p5("phase 3 step 3", "bf16")),
                             ("step 1 register tiles, fp32", None, p5("step 1 register tiles", "bf16")),
                             ("step 2 `mma.sync`, fp16 / bf16", p5("step 2 mma fp16", "fp16"),
                              p5("step 2 mma bf16", "bf16")),
                             ("step 3 swizzle + `cp.async`, fp16 / bf16", p5("step 3 pipeline fp16", "fp16"),
                              p5("step 3 pipeline bf16", "bf16")),
                             ("step 3e (two row blocks, `exp2` ftz, copy loop), fp16 / bf16",
                              p5("step 3e copy loop fp16", "fp16"), p5("step 3e copy loop bf16", "bf16")),
                             ("step 3i (3e + loop invariants, XOR addresses, key offsets), fp16 / bf16",
                              p5("step 3i key offsets fp16", "fp16"), p5("step 3i key offsets bf16", "bf16")),
                             ("PyTorch fp32 memory-efficient", None, torch("sdpa efficient")),
                             ("PyTorch FlashAttention-2, fp16 / bf16", torch("sdpa flash fp16"),
                              torch("sdpa flash bf16")),
                             ("PyTorch cuDNN, fp16 / bf16", torch("sdpa cudnn fp16"), torch("sdpa cudnn bf16"))):
        cells = [(f"{tf(fp16[s]):.1f} / " if fp16 else "") + f"{tf(bf16[s]):.1f}" for s in SHAPES]
        out.append(f"| {what} | " + " | ".join(cells) + " |")
    ratio = lambda step, dtype, s: (ms(torch(f"sdpa flash {dtype}")[s]) /
                                    ms(p5(f"step {step} {dtype}", dtype)[s]))
    for what, step in (("step 3", "3 pipeline"), ("step 3e", "3e copy loop"), ("step 3i", "3i key offsets")):
        out.append(f"| {what} / FlashAttention-2, fp16 / bf16 | " +
                   " | ".join(f"{ratio(step, 'fp16', s):.2f} / {ratio(step, 'bf16', s):.2f}" for s in SHAPES) + " |")
    return out


def table_phase5_ablation(log):
    """One row per forward step of phase 5 (one technique each), bf16: its speed beside FlashAttention-2's from the
    same run, and the profiler's counts for it (tools/profile.sh's reports beside the log, h100-ncu-<kernel>-d<D>.txt)."""
    import ncu_tables   # the reports' reader, tools/ncu_tables.py
    folder = os.path.dirname(log.path)
    steps = (("2 `mma.sync`", "step 2 mma bf16", "step2-mma"), ("3a swizzle", "step 3a swizzle bf16", "step3a-swizzle"),
             ("3b `cp.async`", "step 3b cp.async bf16", "step3b-cp_async"),
             ("3 scale folded into `exp2`", "step 3 pipeline bf16", "step3-pipeline"),
             ("3c two row blocks per warp", "step 3c row blocks bf16", "step3c-two_row_blocks"),
             ("3d `exp2` without its subnormal path", "step 3d exp2 ftz bf16", "step3d-exp2_ftz"),
             ("3e copy loop unrolled", "step 3e copy loop bf16", "step3e-copy_loop"),
             ("3f rescale only where a max moved", "step 3f lazy rescale bf16", "step3f-lazy_rescale"),
             ("3g loop invariants (on 3e)", "step 3g invariants bf16", "step3g-loop_invariants"),
             ("3h ldmatrix addresses by XOR", "step 3h xor addresses bf16", "step3h-xor_addresses"),
             ("3i max-key search and mask on 32-bit offsets", "step 3i key offsets bf16", "step3i-key_offsets"),
             ("FlashAttention-2 (PyTorch)", None, "pytorch-flash"))
    speed = lambda label, s: (torch_row(log, "sdpa flash bf16", s[0], s[1]) if label is None else
                              log.row("phase5_tensor_cores", label, s[1], D=s[0], dtype="bf16", step=None))
    get = ncu_tables.get
    out = [log.source("bf16, B=4, H=16, S=4096, TFLOP/s by the suite's convention, each step's ratio to PyTorch's "
                      "FlashAttention-2 from the same run; the profiler's columns at D=64 / D=128, non-causal, from "
                      "`tools/profile.sh` (one launch each, h100-ncu-*.txt beside the log)", "`tools/headline.sh`"), "",
           "| step | TFLOP/s: D=64, causal, D=128, causal | / FA2 | instructions | shared wavefronts "
           "(bank conflicts) | tensor pipe busy | registers | occupancy |",
           "|---|---|---|---|---|---|---|---|"]
    for what, label, report in steps:
        reports = [ncu_tables.read_report(folder, f"{report}-d{D}") for D in (64, 128)]   # each file read once
        both = lambda f: " / ".join(f(r) for r in reports)
        cells = [
            " / ".join(f"{tf(speed(label, s)):.1f}" for s in SHAPES),
            " / ".join(f"{ms(speed(None, s)) / ms(speed(label, s)):.2f}" for s in SHAPES),
            both(lambda r: ncu_tables.millions(get(r, "instructions"))),
            both(lambda r: f"{ncu_tables.millions(get(r, 'wavefronts'))} "
                                   f"({ncu_tables.millions(get(r, 'conflicts'))})"),
            both(lambda r: f"{get(r, 'tensor_busy'):.1f}%"),
            both(lambda r: f"{get(r, 'registers'):.0f}"),
            both(lambda r: f"{get(r, 'occupancy'):.1f}%"),
        ]
        out.append(f"| {what} | " + " | ".join(cells) + " |")
    return out


def table_phase5_readme(log):
    p5 = lambda label: {s: log.row("phase5_tensor_cores", label, s[1], D=s[0], dtype="bf16", step=None)
                        for s in SHAPES}
    out = [log.source("B=4, H=16, S=4096, TFLOP/s (median ms)", "`tools/headline.sh` (`build/bin/phase5_tensor_cores "
                      "--impl cuda --dtype bf16 --D 64|128 [--causal]`)"), "",
           "| forward, B=4 H=16 S=4096 | D=64 | D=64 causal | D=128 | D=128 causal |", "|---|---|---|---|---|"]
    for what, label in (("phase 3 step 3, fp32, `128x64`", "phase 3 step 3"),
                        ("step 1 register tiles, fp32", "step 1 register tiles"),
                        ("step 2 `mma.sync`, bf16", "step 2 mma bf16"),
                        ("step 3 swizzle + `cp.async`, bf16", "step 3 pipeline bf16"),
                        ("step 3e two row blocks, `exp2` ftz, copy loop, bf16", "step 3e copy loop bf16"),
                        ("step 3i loop invariants, XOR addresses, key offsets, bf16", "step 3i key offsets bf16")):
        rows = p5(label)
        out.append(f"| {what} | " + " | ".join(f"{tf(rows[s]):.1f} ({ms(rows[s]):.2f} ms)" for s in SHAPES) + " |")
    return out


def table_step4_backward(log):
    out = [log.source("B=4, H=16, S=4096, TFLOP/s by the suite's convention (2.5 x the forward's FLOPs), the time in "
                      "brackets", "`tools/headline.sh` (PyTorch 2.11's rows: `tools/pytorch_compare.py`, same run)"), "",
           "| backward, B=4 H=16 S=4096 | D=64 | D=64 causal | D=128 | D=128 causal |", "|---|---|---|---|---|"]
    step4 = lambda variant, dtype, step="4": {s: log.row("phase5_tensor_cores", f"step {step} bwd {variant} {dtype}",
                                                         s[1], D=s[0], dtype=dtype, step=4) for s in SHAPES}
    torch = lambda label: {s: torch_row(log, label, s[0], s[1]) for s in SHAPES}
    for step in ("4", "4b"):
        for variant, name in (("det", "deterministic dQ"), ("atomic", "atomic dQ")):
            for dtype in ("fp16", "bf16"):
                rows = step4(variant, dtype, step)
                out.append(f"| step {step}, {name}, {dtype} | " +
                           " | ".join(f"{tf(rows[s]):.1f} ({ms(rows[s]):.2f} ms)" for s in SHAPES) + " |")
    both = lambda f: " | ".join(f"{f('fp16', s):.2f} / {f('bf16', s):.2f}" for s in SHAPES)
    out.append("| deterministic / atomic time, fp16 / bf16 | " +
               both(lambda d, s: ms(step4("det", d)[s]) / ms(step4("atomic", d)[s])) + " |")
    for what, label in (("PyTorch FlashAttention-2 backward", "sdpa flash backward"),
                        ("PyTorch cuDNN backward", "sdpa cudnn backward")):
        fp16, bf16 = torch(f"{label} fp16"), torch(f"{label} bf16")
        out.append(f"| {what}, fp16 / bf16 | " +
                   " | ".join(f"{tf(fp16[s]):.1f} / {tf(bf16[s]):.1f}" for s in SHAPES) + " |")
    for step in ("4", "4b"):
        out.append(f"| step {step} deterministic / FlashAttention-2, fp16 / bf16 | " +
                   both(lambda d, s: ms(torch(f"sdpa flash backward {d}")[s]) / ms(step4("det", d, step)[s])) + " |")
    return out


def table_phase6_off(log):
    out = [log.source("B=4, H=16, S=4096, median ms (in brackets: against phase 3 step 3 in the same run)",
                      "`tools/headline.sh` (`build/bin/phase6_extensions --impl cuda --D 64|128 [--causal]`)",
                      "medians of 20 runs"), "",
           "| B=4 H=16 S=4096 | D=64 | D=64 causal | D=128 | D=128 causal |", "|---|---|---|---|---|"]
    row = lambda label, s: log.row("phase6_extensions", label, s[1], D=s[0], B=4, H=16, S=4096, softcap=None,
                                   dropout=None, backward=None)
    base = {s: row("phase 3 step 3", s) for s in SHAPES}
    out.append("| phase 3 step 3 | " + " | ".join(f"{ms(base[s]):.2f}" for s in SHAPES) + " |")
    for label, what in (("gqa", "gqa, H_kv = H"), ("window", "window, no window"), ("align", "align, top-left"),
                        ("dropout", "dropout, p = 0")):
        cells = []
        for s in SHAPES:
            t = ms(row(label, s))
            cells.append(f"{t:.2f} ({(t / ms(base[s]) - 1) * 100:+.1f}%)")
        out.append(f"| {what} | " + " | ".join(cells) + " |")
    return out


def table_phase6_backward(log):
    out = [log.source("B=4, H=16, S=4096, causal, `64x64` tiles, deterministic dQ, median ms (in brackets: against "
                      "phase 4, or phase 3 step 3 for the forward, in the same run)",
                      "`tools/headline.sh` (`build/bin/phase6_extensions --impl cuda --backward FEATURE`, "
                      "`build/bin/phase4_backward`)"), "",
           "| B=4 H=16 S=4096 causal, 64 x 64 tiles | backward, D=64 | backward, D=128 | forward, D=64 | "
           "forward, D=128 |", "|---|---|---|---|---|"]
    p4 = {D: log.row("phase4_backward", "backward det", True, D=D, block_m=64) for D in (64, 128)}
    p3 = {D: log.row("phase4_backward", "forward (phase 3 step 3)", True, D=D, block_m=64) for D in (64, 128)}
    out.append("| phase 4 (and phase 3 step 3 for the forward) | " +
               " | ".join(f"{ms(r):.2f} ms" for r in (p4[64], p4[128], p3[64], p3[128])) + " |")
    for flag, value, label, what in (("H_kv", 4, "gqa", "GQA, `--H-kv 4`"),
                                     ("window", "1024,0", "window", "sliding window, `--window 1024,0`"),
                                     ("softcap", 30, "softcap", "softcapping, `--softcap 30`"),
                                     ("dropout", 0.1, "dropout", "dropout, `--dropout 0.1`")):
        get = lambda D, lab: log.row("phase6_extensions", lab, True, D=D, backward="", **{flag: value})
        cells = [f"{ms(get(D, label + ' backward')):.2f} ms ({ms(get(D, label + ' backward')) / ms(p4[D]):.2f}x)"
                 for D in (64, 128)]
        cells += [f"{ms(get(D, label)):.2f} ms ({ms(get(D, label)) / ms(p3[D]):.2f}x)" for D in (64, 128)]
        out.append(f"| {what} | " + " | ".join(cells) + " |")
    return out


def table_splitkv(log):
    out = [log.source("B=4, H=32, Sq=1, D=128", "`tools/headline.sh` (`build/bin/phase6_extensions --impl cuda --B 4 "
                      "--H 32 --Sq 1 --Sk N --D 128`)", "medians of 20 runs"), "",
           "| Sk | split-KV ms | phase 3 step 3 ms | speedup | K and V read at |", "|---|---|---|---|---|"]
    for Sk in (8192, 32768, 131072):
        run = log.find("phase6_extensions", Sq=1, Sk=Sk)
        split, step3 = run["rows"].get(("split-kv", False)), run["rows"].get(("phase 3 step 3", False))
        if not split or not step3:
            log.missing(f"the split-KV run at Sk={Sk} lacks its rows")
        rate = next((re.search(r"read at (\d+) GB/s", n)[1] for n in run["notes"] if "read at" in n), None)
        speedup = next((re.search(r"([\d.]+)x the speed", n)[1] for n in run["notes"] if "x the speed" in n), None)
        if rate is None or speedup is None:
            log.missing(f"the split-KV run at Sk={Sk} lacks its bandwidth notes")
        out.append(f"| {Sk:,} | {ms(split):.3f} | {ms(step3):.3f} | {speedup}x | {int(rate):,} GB/s |")
    return out


TABLES = {   # name -> (where the docs show it, the function)
    "readme": ("README.md, What it measures", table_readme),
    "naive": ("docs/01-naive.md, What to expect on the GPU", table_naive),
    "forward": ("docs/03-forward-4d.md, Measured on the GPU", table_forward),
    "backward": ("docs/04-backward.md, the backward on the GPU", table_backward),
    "phase5-forward": ("docs/06-tensor-cores.md, phase 5 beside PyTorch", table_phase5_forward),
    "phase5-ablation": ("docs/06-tensor-cores.md, the ablation, one row per step", table_phase5_ablation),
    "phase5-readme": ("phase5_tensor_cores/README.md, Measured", table_phase5_readme),
    "phase5-key-tiles": ("docs/06-tensor-cores.md, step 3i's two tiles", lambda log: table_phase5_key_tiles(log, 4096)),
    "phase5-backward-steps": ("docs/07-tensor-core-backward.md, steps 4b to 4d beside FlashAttention-2",
                              lambda log: table_phase5_backward_steps(log, 4096)),
    "phase5-backward-steps-long": ("docs/07-tensor-core-backward.md, steps 4b to 4d, S = 16384",
                                   lambda log: table_phase5_backward_steps(log, 16384)),
    "phase5-key-tiles-long": ("docs/06-tensor-cores.md, step 3i's two tiles, S = 16384",
                              lambda log: table_phase5_key_tiles(log, 16384)),
    "phase5-rows": ("docs/06-tensor-cores.md, step 3j beside step 3i", lambda log: table_phase5_rows(log, 4096)),
    "phase5-rows-long": ("docs/06-tensor-cores.md, step 3j beside step 3i, S = 16384",
                         lambda log: table_phase5_rows(log, 16384)),
    "step4-backward": ("docs/07-tensor-core-backward.md, What the driver shows", table_step4_backward),
    "phase6-off": ("docs/08-extensions.md, What each feature costs when it is off", table_phase6_off),
    "phase6-backward": ("docs/08-extensions.md, The backward passes, timed", table_phase6_backward),
    "splitkv": ("docs/08-extensions.md, split-KV decoding", table_splitkv),
}


def phase5_tiles_header(log, S):
    """The source line and the header of a table of `--step 3` runs at both 128-row tiles beside FlashAttention-2, at
    S = 4096 (B=4) or 16384 (B=1)."""
    B = 4 if S == 4096 else 1
    return [log.source(f"B={B}, H=16, S={S}, TFLOP/s by the suite's convention, fp16 / bf16",
                       "`phase5_tensor_cores --impl cuda --step 3` at each tile (`--block-m 128 --block-n 128` for "
                       "the wide one) and PyTorch's rows by `tools/pytorch_compare.py`, same run",
                       "medians of 10 runs after 2"), "",
            f"| forward, B={B} H=16 S={S} | D=64 | D=64 causal | D=128 | D=128 causal |", "|---|---|---|---|---|"]


def table_phase5_key_tiles(log, S):
    """Step 3i at its two 128-row tiles, 128 x 64 and 128 x 128, beside PyTorch's FlashAttention-2 from the same run
    (a log of `--step 3` runs at both tiles and `tools/pytorch_compare.py`), at S = 4096 (B=4) or 16384 (B=1); at
    S = 4096 also the profiler's counts at D = 64 / 128, non-causal, bf16 (tools/profile.sh's reports beside the log,
    under the log's GPU prefix: h200-ncu-step3i-key_offsets-d64.txt for h200-....log)."""
    i3 = lambda dtype, tiles, s: log.row("phase5_tensor_cores", f"step 3i key offsets {dtype}", s[1], D=s[0],
                                         dtype=dtype, step=3, S=S, block_n=tiles)
    fa2 = lambda dtype, s: torch_row(log, f"sdpa flash {dtype}", s[0], s[1], S)
    out = phase5_tiles_header(log, S)
    rows = (("step 3i, 128 x 64 tiles", lambda d, s: i3(d, None, s)),
            ("step 3i, 128 x 128 tiles", lambda d, s: i3(d, 128, s)),
            ("PyTorch FlashAttention-2", fa2))
    out += half_rows_beside(rows, fa2, "FlashAttention-2")
    if S != 4096:
        return out
    return out + profiler_table(log, (("step 3i, 128 x 64", "step3i-key_offsets"),
                                      ("step 3i, 128 x 128", "step3i128-key_offsets"),
                                      ("FlashAttention-2", "pytorch-flash")), "",
                                ("duration", "instructions", "tensor_busy", "wavefronts", "registers", "warps",
                                 "no_eligible"))


def table_phase5_rows(log, S):
    """Steps 3i and 3j at their two 128-row tiles beside PyTorch's FlashAttention-2 from the same run (a log of
    `--step 3` runs at both tiles and `tools/pytorch_compare.py`, as for table_phase5_key_tiles), at S = 4096 (B=4) or
    16384 (B=1); at S = 4096 also the profiler's counts (tools/profile.sh's reports beside the log)."""
    step = lambda label, tiles: lambda dtype, s: log.row("phase5_tensor_cores", f"{label} {dtype}", s[1], D=s[0],
                                                         dtype=dtype, step=3, S=S, block_n=tiles)
    fa2 = lambda dtype, s: torch_row(log, f"sdpa flash {dtype}", s[0], s[1], S)
    out = phase5_tiles_header(log, S)
    rows = (("step 3i, 128 x 64 tiles", step("step 3i key offsets", None)),
            ("step 3j, 128 x 64 tiles", step("step 3j rows together", None)),
            ("step 3i, 128 x 128 tiles", step("step 3i key offsets", 128)),
            ("step 3j, 128 x 128 tiles", step("step 3j rows together", 128)),
            ("PyTorch FlashAttention-2", fa2))
    out += half_rows_beside(rows, fa2, "FlashAttention-2")
    if S != 4096:
        return out
    return out + profiler_table(log, (("step 3i, 128 x 64", "step3i-key_offsets"),
                                      ("step 3j, 128 x 64", "step3j-rows_together"),
                                      ("step 3i, 128 x 128", "step3i128-key_offsets"),
                                      ("step 3j, 128 x 128", "step3j128-rows_together"),
                                      ("FlashAttention-2", "pytorch-flash")),
                                "step 3j's reports from a later profiling run than step 3i's and FlashAttention-2's; ",
                                ("duration", "instructions", "tensor_busy", "wavefronts", "registers", "warps",
                                 "no_eligible"))


def table_phase5_backward_steps(log, S):
    """The deterministic backward of steps 4b, 4c and 4d beside PyTorch's FlashAttention-2 backward from the same run
    (a log of `--step 4 --dq deterministic` runs and `tools/pytorch_compare.py`), at S = 4096 (B=4) or 16384 (B=1); at
    S = 4096 also the profiler's counts of each step's two kernels at D = 64 / 128, non-causal, bf16 (tools/profile.sh's
    reports beside the log, under the log's GPU prefix)."""
    B = 4 if S == 4096 else 1
    det = lambda step: lambda dtype, s: log.row("phase5_tensor_cores", f"step {step} bwd det {dtype}", s[1], D=s[0],
                                                dtype=dtype, step=4, S=S)
    fa2 = lambda dtype, s: torch_row(log, f"sdpa flash backward {dtype}", s[0], s[1], S)
    out = [log.source(f"B={B}, H=16, S={S}, deterministic dQ, TFLOP/s by the suite's convention (2.5 x the forward's "
                      "FLOPs), fp16 / bf16", "`phase5_tensor_cores --impl cuda --step 4 --dq deterministic` and "
                      "PyTorch's rows by `tools/pytorch_compare.py`, same run", "medians of 10 runs after 2"), "",
           f"| backward, B={B} H=16 S={S} | D=64 | D=64 causal | D=128 | D=128 causal |", "|---|---|---|---|---|"]
    rows = (("step 4b (instruction cuts)", det("4b")), ("step 4c (Q, dO held)", det("4c")),
            ("step 4d (one more block)", det("4d")), ("PyTorch FlashAttention-2", fa2))
    out += half_rows_beside(rows, fa2, "FlashAttention-2", short=lambda what: what.split(" (")[0])
    if S != 4096:
        return out
    return out + profiler_table(log, (("step 4b dK/dV", "step4b-dkdv"), ("step 4b dQ", "step4b-dq"),
                                      ("step 4c dQ", "step4c-dq"), ("step 4d dK/dV", "step4d-dkdv"),
                                      ("FlashAttention-2", "pytorch-flash-bwd")),
                                "step 4c's dK/dV pass is step 4b's, step 4d's dQ pass is step 4c's; ",
                                ("duration", "registers", "warps", "instructions", "wavefronts", "tensor_busy",
                                 "no_eligible"))


def half_rows_beside(rows, base, base_name, short=lambda what: what):
    """Table rows of TFLOP/s, fp16 / bf16, for each (label, get(dtype, shape)) of rows (the last is base's own row),
    then each of the others' speed against base's: base's time over the row's."""
    out = [f"| {what} | " + " | ".join(f"{tf(get('fp16', s)):.1f} / {tf(get('bf16', s)):.1f}" for s in SHAPES) + " |"
           for what, get in rows]
    for what, get in rows[:-1]:
        out.append(f"| {short(what)} / {base_name} | " +
                   " | ".join(f"{ms(base('fp16', s)) / ms(get('fp16', s)):.2f} / "
                              f"{ms(base('bf16', s)) / ms(get('bf16', s)):.2f}" for s in SHAPES) + " |")
    return out


def profiler_table(log, columns, note, keys):
    """The profiler's counts at D = 64 / 128, B=4 H=16 S=4096, bf16, non-causal, for each column (its header, and the
    name of tools/profile.sh's reports beside the log under its GPU prefix: h200-ncu-NAME-d64.txt for h200-....log),
    one row per key (of `rows` below)."""
    import ncu_tables   # the reports' reader, tools/ncu_tables.py
    rows = {"duration": ("duration", lambda v: f"{v:.2f} ms"),
            "instructions": ("instructions issued", ncu_tables.millions),
            "tensor_busy": ("tensor pipe busy", lambda v: f"{v:.1f}%"),
            "wavefronts": ("shared-memory load wavefronts", ncu_tables.millions),
            "registers": ("registers per thread", lambda v: f"{v:.0f}"),
            "warps": ("warps per SM (of 64)", lambda v: f"{v:.1f}"),
            "no_eligible": ("cycles a scheduler had no eligible warp", lambda v: f"{v:.0f}%")}
    prefix = os.path.basename(log.path).split("-")[0] + "-ncu-"
    folder = os.path.dirname(log.path)
    reports = [[ncu_tables.read_report(folder, f"{name}-d{D}", prefix) for D in (64, 128)] for _, name in columns]
    links = ", ".join(f"[{n}]({n})" for n in (os.path.relpath(os.path.join(folder, f"{prefix}{name}-d{D}.txt"),
                                                             log.link_from) for _, name in columns for D in (64, 128)))
    out = ["", f"On the same {log.gpu or 'GPU'}, the profiler (`tools/profile.sh`: Nsight Compute, `--clock-control "
           f"none`, one launch each, B=4 H=16 S=4096, bf16, non-causal; {note}the reports: {links}):", "",
           "| D = 64 / 128 | " + " | ".join(header for header, _ in columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for key in keys:
        what, cell = rows[key]
        out.append(f"| {what} | " + " | ".join(" / ".join(cell(ncu_tables.get(r, key)) for r in pair)
                                               for pair in reports) + " |")
    return out


def main(argv):
    link_from = "docs"
    if len(argv) == 5 and argv[3] == "--from":
        link_from = os.path.dirname(argv[4]) or "."
        argv = argv[:3]
    if len(argv) not in (1, 3) or len(argv) == 3 and (argv[1] != "--table" or argv[2] not in TABLES):
        print(__doc__ + "\ntables: " + ", ".join(TABLES), file=sys.stderr)
        return 2
    try:
        log = Log(argv[0])
    except OSError as e:
        print(f"error: cannot read {argv[0]}: {e.strerror}", file=sys.stderr)
        return 2
    log.link_from = link_from
    names = [argv[2]] if len(argv) == 3 else [n for n in TABLES if n.startswith(("readme", "naive", "forward",
                                                                                  "backward", "phase5-forward"))]
    for i, name in enumerate(names):
        lines = TABLES[name][1](log)
        if len(names) > 1:
            print(("\n" if i else "") + TABLES[name][0] + ":\n")
        print("\n".join(lines))
    return 0 if log.passed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
