#!/usr/bin/env python3
"""hopper_tables.py - chapter 09's tables, read off tools/hopper_bench.sh's log and profiler summary.

    python3 tools/hopper_tables.py LOG --table NAME     one table, as chapter 09's generated block holds it

NAME: forward (every forward step, bf16, B=4 H=16 S=4096), long (step 4e beside cuDNN at S=16384, bf16 and fp16),
persistent (steps 4e and 4f beside cuDNN at both shapes, bf16 and fp16: a log of step 4's rows and PyTorch's
forwards), stages (the same with step 4g, and its ratio to cuDNN: S=4096 in bf16 and fp16, S=16384 in bf16), groups
(the same with step 4h after 4g, and step 4h's ratio to cuDNN), descriptors (steps 4h and 4i beside cuDNN, and step
4i's ratio to cuDNN, at both shapes in bf16 and fp16), rows (steps 4h to 4j beside cuDNN, and step 4j's ratio to
cuDNN, the same shapes), step4 (every variant of step 4 in its best tiles beside cuDNN, bf16, S=4096: a log of step
4's rows), backward (step 6 beside phase 5 step 4 and PyTorch's backwards), backward-long (steps 6a and 6g beside
PyTorch's backwards at S=16384, bf16 and fp16), wide-q (steps 6a and 6g to 6j beside PyTorch's backwards at both
shapes, bf16 and fp16, and step 6j's ratio to cuDNN: a log of the backward rows, h200-phase7-backward.log), ncu-d128,
ncu-d64 and ncu-backward (Nsight Compute, from the summary beside LOG: hopper-ncu-summary.txt, or
h100-phase7-ncu-summary.txt beside h100-phase7-bench.log), and ncu-cudnn (steps 4e, 4f, 6a and 6g beside cuDNN's
kernels, one Nsight Compute report each beside LOG, named GPU-phase7-ncu-<kernel>.txt after LOG's GPU prefix:
h200-phase7-ncu-step4e-d64.txt beside h200-....log), ncu-wide-q (the backward kernels of steps 6g to 6j beside
cuDNN's, reports GPU-phase7-ncu-wideq-step6*-d*.txt beside LOG), and opcodes (steps 4h and 4i and cuDNN's forward by
kind of instruction, from Nsight Compute's per-opcode counts, one report each beside LOG:
GPU-phase7-ncu-opcodes-{step4h,step4i,cudnn}-d{64,128}.txt, and the hardware counter's total), and samples (steps 4i
and 4j at D = 64: each kind of instruction's executions and stall samples, from Nsight Compute's per-instruction
exports beside LOG: GPU-phase7-ncu-source-step4{i,j}-d64.csv.gz).
The chapter holds each table between markers that name this command (tools/check_docs.py checks that the block is
what the command prints; `python3 tools/check_docs.py --regenerate` rewrites it after a new log is committed). Every
number is one the phase 7 binary, tools/pytorch_compare.py or ncu printed. Standard library only. Exit status: 0
printed, 1 a check in the log failed, 2 the log lacks a row a table needs (one "error:" line).
"""
import os
import re
import sys

from headline_tables import parse_flags   # a logged command's flags, as tools/headline.sh's tables read them

COMMAND = re.compile(r"^\$ phase7_hopper (.*)$")
ROW = re.compile(r"^  (?P<label>\S.*?) (?:bf16|fp16)\s+(?:yes|no)\s+cuda\s+-\s+[\d.]+\s+[\d.]+\s+(?P<gflops>[\d.]+)")
# "  pytorch: sdpa cudnn backward bf16,4,16,4096,4096,64,1,0.537,412345.6" (step,B,H,Sq,Sk,D,causal,ms,GFLOP/s)
TORCH = re.compile(r"^  pytorch: sdpa (?P<backend>flash|cudnn)(?P<bwd> backward)? (?P<dtype>\w+),\d+,\d+,(?P<S>\d+),\d+,"
                   r"(?P<D>\d+),(?P<causal>[01]),[\d.]+,(?P<gflops>[\d.]+)")
SHAPES = ((64, False), (64, True), (128, False), (128, True))
HEADER = "| | D=64 | D=64 causal | D=128 | D=128 causal |\n|---|---|---|---|---|"


def die(message, status=2):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(status)


def read_log(path):
    """{(dtype, S, D, causal, tiles, label): TFLOP/s} for the GPU rows, {(backend, backward, dtype, S, D, causal):
    TFLOP/s} for PyTorch's."""
    rows, torch, run = {}, {}, None
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if "FAIL" in line:
                die(f"{path}: a check failed: {line.strip()}", 1)
            m = COMMAND.match(line)
            if m:
                fl = parse_flags(m.group(1))
                run = (fl["--dtype"], int(fl["--S"]), int(fl["--D"]), "--causal" in fl,
                       f"{fl.get('--block-m', '64')}x{fl.get('--block-n', '64')}")
                continue
            m = ROW.match(line)
            if m and run:
                rows[run + (m.group("label"),)] = float(m.group("gflops")) / 1000
                continue
            m = TORCH.match(line)
            if m:
                key = (m.group("backend"), bool(m.group("bwd")), m.group("dtype"), int(m.group("S")), int(m.group("D")),
                       m.group("causal") == "1")
                torch[key] = float(m.group("gflops")) / 1000
    return rows, torch


def cell(table, key):
    if key not in table:
        die(f"the log has no row {key}")
    return f"{table[key]:.1f}"


def table_forward(rows, torch):
    lines = [HEADER]
    steps = [("phase 5 step 3 (mma.sync)", "phase 5 step 3", "128x64"), ("step 1 wgmma", "step 1 wgmma", "128x128"),
             ("step 2 TMA", "step 2 tma", "128x128"), ("step 3 warp roles", "step 3 warp roles", "128x128"),
             ("step 4 ping-pong", "step 4 ping-pong", "128x128"), ("step 4a wide wgmma", "step 4a wide wgmma", "128x128"),
             ("step 4b exp2 ftz", "step 4b exp2 ftz", "128x128"),
             ("step 4c three consumers (two at 128 x 128)", "step 4c three consumers", "128x128"),
             ("step 4c, 192 x 128", "step 4c three consumers", "192x128"),
             ("step 4d split barriers", "step 4d split barriers", "128x128"),
             ("step 4d, 192 x 128", "step 4d split barriers", "192x128"),
             ("step 4e overlap in turn", "step 4e overlap in turn", "128x128"),
             ("step 4e, 192 x 128", "step 4e overlap in turn", "192x128"),
             ("step 5 overlap", "step 5 overlap", "128x128")]
    for name, label, tiles in steps:
        shapes = [s for s in SHAPES if tiles != "192x128" or s[0] == 64]   # 192-row tiles exist at D = 64 only
        cells = [cell(rows, ("bf16", 4096, D, c, tiles, label)) for D, c in shapes]
        lines.append(f"| {name} | " + " | ".join(cells + [""] * (4 - len(cells))) + " |")
    for name, backend in (("PyTorch FLASH (FlashAttention-2)", "flash"), ("PyTorch cuDNN", "cudnn")):
        lines.append(f"| {name} | " + " | ".join(cell(torch, (backend, False, "bf16", 4096, D, c)) for D, c in SHAPES)
                     + " |")
    return "\n".join(lines)


def best_tiles(D):
    return "192x128" if D == 64 else "128x128"   # step 4e's fastest tiles at each D


def table_long(rows, torch):
    lines = ["| S = 16384 | D=64 | D=64 causal | D=128 | D=128 causal |", "|---|---|---|---|---|"]
    for dtype in ("bf16", "fp16"):
        lines.append(f"| step 4e, {dtype} | " + " | ".join(
            cell(rows, (dtype, 16384, D, c, best_tiles(D), "step 4e overlap in turn")) for D, c in SHAPES) + " |")
        lines.append(f"| PyTorch cuDNN, {dtype} | " + " | ".join(
            cell(torch, ("cudnn", False, dtype, 16384, D, c)) for D, c in SHAPES) + " |")
    return "\n".join(lines)


PERSISTENT = (("step 4e", "step 4e overlap in turn"), ("step 4f", "step 4f persistent"))
STAGES = PERSISTENT + (("step 4g", "step 4g stages once"),)
GROUPS = STAGES + (("step 4h", "step 4h l2 head groups"),)
DESCRIPTORS = (("step 4h", "step 4h l2 head groups"), ("step 4i", "step 4i descriptors"))
ROWS_TOGETHER = DESCRIPTORS + (("step 4j", "step 4j rows together"),)
STAGES_SHAPES = ((4096, "bf16"), (4096, "fp16"), (16384, "bf16"))   # the shapes and types of tables stages and groups


def table_persistent(rows, torch, steps=PERSISTENT, shapes=((4096, "bf16"), (4096, "fp16"), (16384, "bf16"),
                                                              (16384, "fp16")), ratio=None):
    """Step 4f (and with steps, 4g to 4j) beside step 4e and cuDNN, in each step's best tiles, at the shapes and types
    given: a log of step 4's rows (out of tools/hopper_bench.sh's forward rows, --step 4 only) and PyTorch's
    forwards. With ratio (a step's name), that step's speed over cuDNN's too."""
    lines = [HEADER]
    for S, dtype in shapes:
        for name, label in steps:
            lines.append(f"| S = {S}, {name}, {dtype} | " + " | ".join(
                cell(rows, (dtype, S, D, c, best_tiles(D), label)) for D, c in SHAPES) + " |")
        lines.append(f"| S = {S}, PyTorch cuDNN, {dtype} | " + " | ".join(
            cell(torch, ("cudnn", False, dtype, S, D, c)) for D, c in SHAPES) + " |")
        if ratio:   # every row it reads was printed above (a missing one was refused there)
            step = lambda D, c: rows[(dtype, S, D, c, best_tiles(D), dict(steps)[ratio])]
            lines.append(f"| S = {S}, {ratio} / cuDNN, {dtype} | " + " | ".join(
                f"{step(D, c) / torch[('cudnn', False, dtype, S, D, c)]:.2f}" for D, c in SHAPES) + " |")
    return "\n".join(lines)


STEP4 = (("step 4 ping-pong", "step 4 ping-pong"), ("step 4a wide wgmma", "step 4a wide wgmma"),
         ("step 4b exp2 ftz", "step 4b exp2 ftz"), ("step 4c three consumers", "step 4c three consumers"),
         ("step 4d split barriers", "step 4d split barriers"), ("step 4e overlap in turn", "step 4e overlap in turn"),
         ("step 4f persistent", "step 4f persistent"), ("step 4g stages once", "step 4g stages once"),
         ("step 4h L2 head groups", "step 4h l2 head groups"),
         ("step 4i descriptors built once", "step 4i descriptors"), ("step 4j rows together", "step 4j rows together"))


def table_step4(rows, torch, S=4096, dtype="bf16"):
    """Every variant of step 4 in one run, each in its best tiles (192 x 128 at D = 64, where steps 4 to 4b, whose
    kernels have no 192-row tiles, show a dash; 128 x 128 at D = 128), beside cuDNN and with step 4j's ratio to it: a
    log of step 4's rows and PyTorch's forwards (h200-phase7-rows.log)."""
    lines = [HEADER]
    no_192 = ("step 4 ping-pong", "step 4a wide wgmma", "step 4b exp2 ftz")
    for name, label in STEP4:
        lines.append(f"| {name} | " + " | ".join(
            "-" if D == 64 and label in no_192 else cell(rows, (dtype, S, D, c, best_tiles(D), label))
            for D, c in SHAPES) + " |")
    lines.append("| PyTorch cuDNN | " + " | ".join(cell(torch, ("cudnn", False, dtype, S, D, c)) for D, c in SHAPES)
                 + " |")
    step4j = lambda D, c: rows[(dtype, S, D, c, best_tiles(D), "step 4j rows together")]
    lines.append("| step 4j / cuDNN | " + " | ".join(
        f"{step4j(D, c) / torch[('cudnn', False, dtype, S, D, c)]:.2f}" for D, c in SHAPES) + " |")
    return "\n".join(lines)


def table_backward(rows, torch):
    lines = ["| backward | D=64 | D=64 causal | D=128 | D=128 causal |", "|---|---|---|---|---|"]
    for name, label in (("phase 5 step 4, deterministic dQ", "p5 step 4 bwd det"),
                        ("step 6 wgmma, deterministic dQ", "step 6 bwd det"), ("step 6 wgmma, atomic dQ", "step 6 bwd atomic"),
                        ("step 6a, dQ added by the TMA", "step 6a bwd atomic"),
                        ("step 6b, dQ beside dK and dV", "step 6b bwd atomic"),
                        ("step 6c, two warpgroups over 128 keys", "step 6c bwd atomic"),
                        ("step 6d, descriptors built once", "step 6d bwd atomic"),
                        ("step 6e, exp2 in one instruction", "step 6e bwd atomic"),
                        ("step 6f, element-wise work beside the products", "step 6f bwd atomic"),
                        ("step 6g, Q and dO by the TMA", "step 6g bwd atomic")):
        lines.append(f"| {name} | " + " | ".join(cell(rows, ("bf16", 4096, D, c, "64x64", label)) for D, c in SHAPES)
                     + " |")
    for name, backend in (("PyTorch FLASH (FlashAttention-2)", "flash"), ("PyTorch cuDNN", "cudnn")):
        lines.append(f"| {name} | " + " | ".join(cell(torch, (backend, True, "bf16", 4096, D, c)) for D, c in SHAPES)
                     + " |")
    return "\n".join(lines)


def table_backward_long(rows, torch):
    lines = ["| backward, S = 16384 | D=64 | D=64 causal | D=128 | D=128 causal |", "|---|---|---|---|---|"]
    for dtype in ("bf16", "fp16"):
        for name, label in (("step 6a", "step 6a bwd atomic"), ("step 6g", "step 6g bwd atomic")):
            lines.append(f"| {name}, {dtype} | " + " | ".join(
                cell(rows, (dtype, 16384, D, c, "64x64", label)) for D, c in SHAPES) + " |")
        for name, backend in (("PyTorch FLASH", "flash"), ("PyTorch cuDNN", "cudnn")):
            lines.append(f"| {name}, {dtype} | " + " | ".join(
                cell(torch, (backend, True, dtype, 16384, D, c)) for D, c in SHAPES) + " |")
    return "\n".join(lines)


WIDE_Q = (("step 6a", "step 6a bwd atomic"), ("step 6g", "step 6g bwd atomic"), ("step 6h", "step 6h bwd atomic"),
          ("step 6i", "step 6i bwd atomic"), ("step 6j", "step 6j bwd atomic"))


def table_wide_q(rows, torch):
    """Steps 6g to 6j (and 6a, the fastest at D = 64 before them) beside PyTorch's backwards, both shapes and types,
    and step 6j's speed over cuDNN's: a log of the backward rows (h200-phase7-backward.log)."""
    lines = ["| backward | D=64 | D=64 causal | D=128 | D=128 causal |", "|---|---|---|---|---|"]
    for S in (4096, 16384):
        for dtype in ("bf16", "fp16"):
            for name, label in WIDE_Q:
                lines.append(f"| S = {S}, {name}, {dtype} | " + " | ".join(
                    cell(rows, (dtype, S, D, c, "64x64", label)) for D, c in SHAPES) + " |")
            for name, backend in (("PyTorch FLASH", "flash"), ("PyTorch cuDNN", "cudnn")):
                lines.append(f"| S = {S}, {name}, {dtype} | " + " | ".join(
                    cell(torch, (backend, True, dtype, S, D, c)) for D, c in SHAPES) + " |")
            lines.append(f"| S = {S}, step 6j / cuDNN, {dtype} | " + " | ".join(
                f"{rows[(dtype, S, D, c, '64x64', 'step 6j bwd atomic')] / torch[('cudnn', True, dtype, S, D, c)]:.2f}"
                for D, c in SHAPES) + " |")
    return "\n".join(lines)


def read_ncu(path):
    """{profile name: {'duration': '1.10 ms', 'instructions': '515058937', ...}} from hopper_bench.sh's summary."""
    profiles, name = {}, None
    with open(path) as f:
        for line in f:
            m = re.match(r"^== step (\S+) ", line)
            if m:
                name = m.group(1)
                profiles[name] = {}
                continue
            fields = line.split()
            if name is None or not fields:
                continue
            p = profiles[name]
            if fields[0] == "smsp__inst_executed.sum":
                p["instructions"] = fields[2].replace(",", "")
            elif fields[0] == "Duration":
                p["duration"] = f"{fields[2]} {fields[1]}"
            elif line.startswith(" Compute (SM) Throughput"):
                p["sm"] = fields[-1] + "%"
            elif line.startswith(" L2 Cache Throughput"):
                p["l2"] = fields[-1] + "%"
            elif line.startswith(" No Eligible"):
                p["no_eligible"] = fields[-1] + "%"
            elif line.startswith(" Registers Per Thread"):
                p["registers"] = fields[-1]
    return profiles


def table_ncu(profiles, names, l2=False):
    """One row per profile; with l2, the L2's throughput too (what the backward's pace follows)."""
    lines = ["| step | duration | instructions | SM throughput | " + ("L2 throughput | " if l2 else "") +
             "no eligible warp | registers at entry |", "|---|---|---|---|---|---|" + ("---|" if l2 else "")]
    for name, profile in names:
        if profile not in profiles or len(profiles[profile]) < 5 + l2:
            die(f"the profiler summary has no complete report for step {profile}")
        p = profiles[profile]
        lines.append(f"| {name} | {p['duration']} | {p['instructions']} | {p['sm']} | " +
                     (f"{p['l2']} | " if l2 else "") + f"{p['no_eligible']} | {p['registers']} |")
    return "\n".join(lines)


NCU_D128 = [("1 wgmma", "1"), ("2 TMA", "2"), ("3 warp roles", "3"), ("4 ping-pong", "4"), ("4a wide wgmma", "4a"),
            ("4b exp2 ftz", "4b"), ("4d split barriers", "4d"), ("4e overlap in turn", "4e"), ("5 overlap", "5")]
NCU_D64 = [("4b exp2 ftz, 128 x 128", "4b-d64"), ("4c three consumers, 192 x 128", "4c-d64"),
           ("4d split barriers, 192 x 128", "4d-d64"), ("4e overlap in turn, 192 x 128", "4e-d64")]
NCU_BACKWARD = [(f"6{x}, D = {D}", f"6{x}-d{D}") for D in (128, 64) for x in "abcdefg"]


# name in the table, report (h200-phase7-ncu-<report>.txt or the GPU's prefix beside the log)
NCU_CUDNN = [("forward, D = 64", [("step 4e, 192 x 128", "step4e-d64"), ("cuDNN", "cudnn-fwd-d64")]),
             ("forward, D = 64, causal", [("step 4e, 192 x 128", "step4e-d64-causal"),
                                          ("step 4f, 192 x 128", "step4f-d64-causal"),
                                          ("cuDNN", "cudnn-fwd-d64-causal")]),
             ("forward, D = 128", [("step 4e, 128 x 128", "step4e-d128"), ("step 4f, 128 x 128", "step4f-d128"),
                                   ("cuDNN", "cudnn-fwd-d128")]),
             ("forward, D = 128, causal", [("step 4e, 128 x 128", "step4e-d128-causal"),
                                           ("step 4f, 128 x 128", "step4f-d128-causal"),
                                           ("cuDNN", "cudnn-fwd-d128-causal")]),
             ("backward, D = 64", [("step 6a, 64 x 64", "step6a-d64"), ("cuDNN", "cudnn-bwd-d64")]),
             ("backward, D = 128", [("step 6g, 64 x 128", "step6g-d128"), ("cuDNN", "cudnn-bwd-d128")])]


# Steps 6g to 6j's backward kernels beside cuDNN's (h200-phase7-ncu-wideq-step*.txt, 6j's from a later call than the
# others'; cuDNN's reports as in NCU_CUDNN).
NCU_WIDE_Q = [("D = 64", [("step 6g, 64 x 128", "wideq-step6g-d64"), ("step 6h, 64 x 128", "wideq-step6h-d64"),
                          ("step 6i, 128 x 128", "wideq-step6i-d64"), ("step 6j, 128 x 128", "wideq-step6j-d64"),
                          ("cuDNN", "cudnn-bwd-d64")]),
              ("D = 128", [("step 6g, 64 x 128", "wideq-step6g-d128"),
                           ("step 6h (and 6i), 64 x 128", "wideq-step6h-d128"),
                           ("step 6j, 80 x 128", "wideq-step6j-d128"), ("cuDNN", "cudnn-bwd-d128")])]


def table_ncu_cudnn(log, groups=NCU_CUDNN, title="B=4 H=16 S=4096, bf16", memory=True):
    """Phase 7's kernels and cuDNN's under Nsight Compute, one report each, beside LOG under its GPU's prefix: the
    groups of NCU_CUDNN (with the L2's hit rate and the DRAM bytes read, memory) or those of NCU_WIDE_Q."""
    import ncu_tables   # the reports' reader, tools/ncu_tables.py
    folder, name = os.path.split(log)
    prefix = name.split("-")[0] + "-phase7-ncu-"
    lines = [f"| {title} | kernel | duration | instructions | grid x threads, registers at entry | " +
             ("L2 hit rate | DRAM read | " if memory else "") + "no eligible warp |",
             "|---|---|---|---|---|" + ("---|---|" if memory else "") + "---|"]
    for shape, kernels in groups:
        for i, (kernel, report) in enumerate(kernels):
            r = ncu_tables.read_report(folder, report, prefix)
            get = lambda key: ncu_tables.get(r, key)
            lines.append(f"| {shape if i == 0 else ''} | {kernel} | {get('duration'):.3f} ms | "
                         f"{get('instructions') / 1e6:,.0f} M | {get('grid'):,.0f} x {get('threads'):.0f}, "
                         f"{get('registers'):.0f} | " +
                         (f"{get('l2_hit'):.1f}% | {get('dram'):,.0f} MB | " if memory else "") +
                         f"{get('no_eligible'):.0f}% |")
    return "\n".join(lines)


# The instruction mix: Nsight Compute's count of executed instructions per SASS opcode (sass__inst_executed_per_opcode,
# printed with --print-metric-instances details) for steps 4h and 4i and cuDNN's forward, one report each beside LOG,
# named GPU-phase7-ncu-opcodes-<kernel>-d<D>.txt. Each opcode in the first group that takes it (None: every opcode that
# starts with U); the rest in "everything else".
OPCODE_GROUPS = (
    ("float32 arithmetic of the softmax (FFMA, FMUL, FADD, FMNMX)", ("FFMA", "FMUL", "FADD", "FMNMX")),
    ("exponentials (MUFU)", ("MUFU",)),
    ("P rounded and packed (F2FP)", ("F2FP",)),
    ("wgmma (HGMMA, WARPGROUP)", ("HGMMA", "WARPGROUP")),
    ("uniform-datapath integer work (U*: descriptors, addresses, indices)", None),
    ("mbarrier waits and branches (SYNCS, YIELD, BRA)", ("SYNCS", "YIELD", "BRA")),
    ("shared-memory stores (STS: the max key's score copies)", ("STS",)),
)


def opcode_group(op):
    return next((label for label, ops in OPCODE_GROUPS if (op.startswith("U") if ops is None else op in ops)),
                "everything else")


def table_opcodes(log):
    """Steps 4h and 4i and cuDNN's forward by instruction kind, in millions, B=4 H=16 S=4096 bf16 non-causal."""
    import ncu_tables   # the reports' reader, tools/ncu_tables.py
    folder, name = os.path.split(log)
    prefix = name.split("-")[0] + "-phase7-ncu-opcodes-"
    reports = [(f"{kernel}, D = {D}", ncu_tables.read_report(folder, f"{report}-d{D}", prefix))
               for D in (64, 128)
               for kernel, report in (("step 4h", "step4h"), ("step 4i", "step4i"), ("cuDNN", "cudnn"))]
    sums = []   # per report: {group: count}
    for _, r in reports:
        groups = {}
        for op, n in ncu_tables.get(r, "opcodes").items():
            groups[opcode_group(op)] = groups.get(opcode_group(op), 0) + n
        sums.append(groups)
    lines = ["| executed instructions, millions | " + " | ".join(title for title, _ in reports) + " |",
             "|---|" + "---|" * len(reports)]
    for label in [label for label, _ in OPCODE_GROUPS] + ["everything else"]:
        lines.append(f"| {label} | " + " | ".join(f"{g.get(label, 0) / 1e6:.1f}" for g in sums) + " |")
    lines.append("| all | " + " | ".join(f"{sum(g.values()) / 1e6:.1f}" for g in sums) + " |")
    # The per-opcode counts come from instrumented code (the profiler patches the SASS); the hardware counter counts
    # the same launch's instructions without it, in another pass.
    lines.append("| all, by the hardware counter (smsp__inst_executed) | " +
                 " | ".join(f"{ncu_tables.get(r, 'instructions') / 1e6:.1f}" for _, r in reports) + " |")
    lines.append("| duration under the profiler, ms | " +
                 " | ".join(f"{ncu_tables.get(r, 'gpu_time'):.3f}" for _, r in reports) + " |")
    return "\n".join(lines)


# Where the consumers' time goes: Nsight Compute's per-instruction export of one launch (--page source --csv
# --print-source sass, the SourceCounters section), steps 4i and 4j at D = 64, beside LOG as
# GPU-phase7-ncu-source-step4{i,j}-d64.csv.gz. The warp-state sampler stops a warp at fixed intervals and notes the
# instruction it is at (about to issue, or waiting to): the samples of a kind of instruction are the share of the
# warps' time spent there. Each instruction in the first group that takes it.
SAMPLE_GROUPS = (
    ("row maxima and their shuffles (FMNMX, SHFL)", ("FMNMX", "SHFL")),
    ("the max key's score copies and their branch (STS, BSSY, BSYNC)", ("STS", "BSSY", "BSYNC")),
    ("exponentials (MUFU)", ("MUFU",)),
    ("other float32 arithmetic (FFMA, FMUL, FADD, FSEL, FSETP)", ("FFMA", "FMUL", "FADD", "FSEL", "FSETP")),
    ("P rounded and packed (F2FP)", ("F2FP",)),
    ("wgmma (HGMMA, WARPGROUP)", ("HGMMA", "WARPGROUP")),
    ("mbarrier waits (SYNCS, YIELD)", ("SYNCS", "YIELD")),
    ("branches (BRA: the waits' and the copies')", ("BRA",)),
)
# A warp held at a named barrier (its turn on the tensor cores) is sampled at the instruction after the barrier, with
# the reason "barrier": those samples make a row of their own, whatever the instruction.
TURN_WAIT = "waiting for its turn at a named barrier (any instruction, the reason 'barrier')"


def read_source(path):
    """{group: [instructions executed, stall samples]} from one per-instruction export."""
    from ncu_source_diff import opcode, read_export   # the export's reader, tools/ncu_source_diff.py
    groups = {}
    for _, text, executed, samples, at_barrier in read_export(path, ("Warp Stall Sampling (All Samples)",
                                                                      "stall_barrier")):
        op = opcode(text).split(".")[0]
        group = next((label for label, ops in SAMPLE_GROUPS if op in ops), "everything else")
        counts, waiting = groups.setdefault(group, [0, 0]), groups.setdefault(TURN_WAIT, [0, 0])
        counts[0] += executed
        counts[1] += samples - at_barrier
        waiting[1] += at_barrier
    return groups


def table_samples(log):
    """Steps 4i and 4j at D = 64: the executed instructions and the stall samples of each kind of instruction."""
    folder, name = os.path.split(log)
    prefix = os.path.join(folder, name.split("-")[0] + "-phase7-ncu-source-")
    steps = [(step, read_source(f"{prefix}{report}-d64.csv.gz")) for step, report in (("4i", "step4i"),
                                                                                      ("4j", "step4j"))]
    lines = ["| instruction kind | " + " | ".join(f"step {step}: executed, millions | step {step}: stall samples"
                                                  for step, _ in steps) + " |", "|---|" + "---|---|" * len(steps)]
    totals = [[sum(c[i] for c in g.values()) for i in (0, 1)] for _, g in steps]
    for label in [label for label, _ in SAMPLE_GROUPS] + [TURN_WAIT, "everything else"]:
        cells = []
        for (_, g), (_, all_samples) in zip(steps, totals):
            executed, samples = g.get(label, [0, 0])
            cells += [f"{executed / 1e6:.1f}", f"{samples:,} ({100 * samples / all_samples:.0f}%)"]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append("| all | " + " | ".join(f"{e / 1e6:.1f} | {n:,}" for e, n in totals) + " |")
    return "\n".join(lines)


def ncu_summary_path(log):
    folder, name = os.path.split(log)
    return os.path.join(folder, "h100-phase7-ncu-summary.txt" if name == "h100-phase7-bench.log"
                        else "hopper-ncu-summary.txt")


def main(argv):
    tables = ("forward", "long", "persistent", "stages", "groups", "descriptors", "rows", "step4", "backward",
              "backward-long", "wide-q", "ncu-d128", "ncu-d64", "ncu-backward", "ncu-cudnn", "ncu-wide-q", "opcodes",
              "samples")
    if len(argv) != 4 or argv[2] != "--table" or argv[3] not in tables:
        die("usage: hopper_tables.py LOG --table " + "|".join(tables))
    log, name = argv[1], argv[3]
    if not os.path.isfile(log):
        die(f"{log}: no such file")
    if name == "ncu-cudnn":
        print(table_ncu_cudnn(log))
        return 0
    if name == "ncu-wide-q":
        print(table_ncu_cudnn(log, NCU_WIDE_Q, "backward, B=4 H=16 S=4096, bf16", memory=False))
        return 0
    if name == "opcodes":
        print(table_opcodes(log))
        return 0
    if name == "samples":
        print(table_samples(log))
        return 0
    if name.startswith("ncu"):
        profiles = read_ncu(ncu_summary_path(log))
        names = {"ncu-d128": NCU_D128, "ncu-d64": NCU_D64, "ncu-backward": NCU_BACKWARD}[name]
        print(table_ncu(profiles, names, l2=name == "ncu-backward"))
        return 0
    rows, torch = read_log(log)
    print({"forward": table_forward, "long": table_long, "persistent": table_persistent,
           "stages": lambda r, t: table_persistent(r, t, STAGES, STAGES_SHAPES, "step 4g"),
           "groups": lambda r, t: table_persistent(r, t, GROUPS, STAGES_SHAPES, "step 4h"),
           "descriptors": lambda r, t: table_persistent(r, t, DESCRIPTORS, ratio="step 4i"),
           "rows": lambda r, t: table_persistent(r, t, ROWS_TOGETHER, ratio="step 4j"),
           "step4": table_step4,
           "backward": table_backward,
           "backward-long": table_backward_long,
           "wide-q": table_wide_q}[name](rows, torch))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
