#!/usr/bin/env python3
"""ncu_tables.py - the profiler tables of chapters 06 and 07, read off the committed Nsight Compute reports.

    python3 tools/ncu_tables.py DIR --table forward-d64|forward-d128|backward-d64

DIR holds the reports tools/profile.sh writes, under the GPU's prefix (docs/figures/h100-ncu-<kernel>-d<D>.txt: one
launch of one kernel each). Every cell is a value of the report (millions and percentages rounded for reading), or the
sum of two reports for "step 4, both". The chapters hold each table between generated-block markers; tools/check_docs.py
checks that the block is what this prints. Standard library only.
Exit status: 0 printed, 2 a report or a value is missing (one "error:" line).
"""
import os
import re
import sys

PREFIX = "h100-ncu-"
VALUES = {   # what the tables show -> the line of the report that holds it
    "duration": r"^\s*Duration\s+(us|ms)\s+([\d.,]+)",
    "clock": r"^\s*SM Frequency\s+Ghz\s+([\d.,]+)",
    "threads": r"^\s*Block Size\s+([\d.,]+)",
    "registers": r"^\s*Registers Per Thread\s+register/thread\s+([\d.,]+)",
    "warps": r"^\s*Achieved Active Warps Per SM\s+warp\s+([\d.,]+)",
    "instructions": r"^\s*smsp__inst_executed\.sum\s+inst\s+([\d.,]+)",
    "hmma": r"^\s*sm__inst_executed_pipe_tensor_op_hmma\.sum\s+inst\s+([\d.,]+)",
    "fma": r"^\s*sm__inst_executed_pipe_fma\.sum\s+inst\s+([\d.,]+)",
    "tensor_busy": r"^\s*sm__pipe_tensor_op_hmma_cycles_active\S*\s+%\s+([\d.,]+)",
    "wavefronts": r"^\s*l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld\.sum\s+([\d.,]+)",
    "conflicts": r"^\s*l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld\.sum\s+([\d.,]+)",
    "ipc": r"^\s*Issued Ipc Active\s+inst/cycle\s+([\d.,]+)",
    "no_eligible": r"^\s*No Eligible\s+%\s+([\d.,]+)",
    "occupancy": r"^\s*Achieved Occupancy\s+%\s+([\d.,]+)",
    "grid": r"^\s*Grid Size\s+([\d.,]+)",
    "l2_hit": r"^\s*lts__t_sector_hit_rate\.pct\s+%\s+([\d.,]+)",
    "dram": r"^\s*dram__bytes_read\.sum\s+(Kbyte|Mbyte|Gbyte)\s+([\d.,]+)",
    "gpu_time": r"^\s*gpu__time_duration\.sum\s+(us|ms)\s+([\d.,]+)",
}
# sass__inst_executed_per_opcode, printed with --print-metric-instances details: the total, then "(OPCODE: count;
# ...)" over several lines. read_report keeps it as {opcode: count} under "opcodes".
OPCODES = r"^\s*sass__inst_executed_per_opcode\s+[\d,]+\s+\((.*?)\)\s*$"
UNITS = {"us": 1e-3, "ms": 1.0, "Kbyte": 1e-3, "Mbyte": 1.0, "Gbyte": 1e3}   # to ms (duration) and MB (dram)


def read_report(folder, name, prefix=PREFIX):
    path = os.path.join(folder, prefix + name + ".txt")
    try:
        with open(path, errors="replace") as f:
            text = f.read()
    except OSError as e:
        print(f"error: cannot read {path}: {e.strerror}", file=sys.stderr)
        sys.exit(2)
    values = {}
    for key, pattern in VALUES.items():
        m = re.search(pattern, text, re.MULTILINE)
        if not m:
            continue
        if key in ("duration", "dram", "gpu_time"):   # a unit, then the number: ms and MB
            values[key] = float(m.group(2).replace(",", "")) * UNITS[m.group(1)]
        else:
            values[key] = float(m.group(1).replace(",", ""))
    m = re.search(OPCODES, text, re.MULTILINE | re.DOTALL)
    if m:
        values["opcodes"] = {op: int(n.replace(",", ""))
                             for op, n in re.findall(r"([A-Z][A-Z0-9_.]*):\s*([\d,]+)", m.group(1))}
    return path, values


def get(report, key):
    path, values = report
    if key not in values:
        print(f"error: {path} has no '{key}' line", file=sys.stderr)
        sys.exit(2)
    return values[key]


millions = lambda x: f"{x / 1e6:,.0f} M" if x >= 1e8 else f"{x / 1e6:,.1f} M" if x >= 1e5 else f"{x:,.0f}"
mcount = lambda x: f"{x / 1e6:,.1f} M" if x >= 1e6 else f"{x / 1e6:.2f} M"


def source(folder, names, what):
    links = ", ".join(f"[{PREFIX}{n}.txt]({os.path.relpath(os.path.join(folder, PREFIX + n + '.txt'), 'docs')})"
                      for n in names)
    return (f"Measured on an NVIDIA H100 80GB HBM3 by `tools/profile.sh` (Nsight Compute, `--clock-control none`, one "
            f"launch each), {what}; the reports: {links}.")


def forward_table(folder, D):
    names = [f"step1-regtile-d{D}", f"step2-mma-d{D}", f"step3a-swizzle-d{D}", f"step3b-cp_async-d{D}",
             f"step3-pipeline-d{D}", f"step3c-two_row_blocks-d{D}", f"step3d-exp2_ftz-d{D}", f"step3e-copy_loop-d{D}",
             f"step3f-lazy_rescale-d{D}", f"step3g-loop_invariants-d{D}", f"step3h-xor_addresses-d{D}",
             f"step3i-key_offsets-d{D}", f"pytorch-flash-d{D}"]
    r = [read_report(folder, n) for n in names]
    dash = lambda i, text: "-" if i == 0 else text
    rows = [
        ("duration", [f"{get(x, 'duration'):.2f} ms" for x in r]),
        ("SM clock", [f"{get(x, 'clock'):.2f} GHz" for x in r]),
        ("threads per block, registers per thread", [f"{get(x, 'threads'):.0f}, {get(x, 'registers'):.0f}" for x in r]),
        ("warps per SM (of 64)", [f"{get(x, 'warps'):.1f}" for x in r]),
        ("instructions issued", [millions(get(x, "instructions")) for x in r]),
        ("`mma` (HMMA) instructions", [dash(i, mcount(get(x, "hmma"))) for i, x in enumerate(r)]),
        ("tensor pipe busy", [dash(i, f"{get(x, 'tensor_busy'):.1f}%") for i, x in enumerate(r)]),
        ("shared-memory load wavefronts (bank conflicts)",
         [f"{millions(get(x, 'wavefronts'))} ({millions(get(x, 'conflicts'))})" for x in r]),
        ("instructions per cycle per SM (of 4)", [f"{get(x, 'ipc'):.2f}" for x in r]),
        ("cycles a scheduler had no eligible warp", [f"{get(x, 'no_eligible'):.0f}%" for x in r]),
    ]
    out = [source(folder, names, f"`B=4 H=16 S=4096 D={D}`, bf16, non-causal"), "",
           f"| `D = {D}` | step 1 | step 2 | step 3a | step 3b | step 3 | step 3c | step 3d | step 3e | step 3f "
           "| step 3g | step 3h | step 3i | FlashAttention-2 |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    out += [f"| {what} | " + " | ".join(cells) + " |" for what, cells in rows]
    return out


def backward_table(folder):
    names = ["step4-dkdv-d64", "step4-dq-d64", "step4b-dkdv-d64", "step4b-dq-d64", "step4-dkdv-atomic-d64",
             "pytorch-flash-bwd-d64"]
    dkdv, dq, dkdv_b, dq_b, atomic, fa2 = r = [read_report(folder, n) for n in names]
    pair_sum = lambda a, b: (lambda key: get(a, key) + get(b, key))   # a step's two passes together
    both, sum_b = pair_sum(dkdv, dq), pair_sum(dkdv_b, dq_b)
    cols = lambda f, sum_cell, sum_cell_b: [f(dkdv), f(dq), sum_cell, f(dkdv_b), f(dq_b), sum_cell_b, f(atomic),
                                            f(fa2)]
    rows = [
        ("duration", cols(lambda x: f"{get(x, 'duration'):.2f} ms", f"{both('duration'):.2f} ms",
                          f"{sum_b('duration'):.2f} ms")),
        ("registers per thread, warps per SM",
         cols(lambda x: f"{get(x, 'registers'):.0f}, {get(x, 'warps'):.0f}", "", "")),
        ("`mma` (HMMA) instructions", cols(lambda x: mcount(get(x, "hmma")), mcount(both("hmma")),
                                           mcount(sum_b("hmma")))),
        ("instructions issued", cols(lambda x: millions(get(x, "instructions")), millions(both("instructions")),
                                     millions(sum_b("instructions")))),
        ("of them on the FMA pipe", cols(lambda x: millions(get(x, "fma")), millions(both("fma")),
                                         millions(sum_b("fma")))),
        ("tensor pipe busy", cols(lambda x: f"{get(x, 'tensor_busy'):.1f}%", "", "")),
        ("shared-memory load wavefronts (bank conflicts)",
         cols(lambda x: f"{millions(get(x, 'wavefronts'))} ({millions(get(x, 'conflicts'))})",
              millions(both("wavefronts")), millions(sum_b("wavefronts")))),
        ("cycles a scheduler had no eligible warp", cols(lambda x: f"{get(x, 'no_eligible'):.0f}%", "", "")),
    ]
    out = [source(folder, names, "`B=4 H=16 S=4096 D=64`, bf16, non-causal"), "",
           "| `D = 64`, bf16 | step 4 dK/dV | step 4 dQ | step 4, both | step 4b dK/dV | step 4b dQ | step 4b, both "
           "| atomic variant's dK/dV | FlashAttention-2 |",
           "|---|---|---|---|---|---|---|---|---|"]
    out += [f"| {what} | " + " | ".join(cells) + " |" for what, cells in rows]
    return out


TABLES = {"forward-d64": lambda d: forward_table(d, 64), "forward-d128": lambda d: forward_table(d, 128),
          "backward-d64": backward_table}


def main(argv):
    if len(argv) != 3 or argv[1] != "--table" or argv[2] not in TABLES:
        print(__doc__ + "\ntables: " + ", ".join(TABLES), file=sys.stderr)
        return 2
    print("\n".join(TABLES[argv[2]](argv[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
