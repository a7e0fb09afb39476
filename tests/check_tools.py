#!/usr/bin/env python3
"""check_tools.py - the tests of tools/ (label tools; tests/tools.cmake runs them).

    check_tools.py bench  TOOLS BUILD OUT     bench.py --quick on phase 1's CPU: a well-formed CSV whose numbers add up
    check_tools.py plots  TOOLS FIXTURE OUT   plot_bench.py on a small CSV: five valid PNGs; bad CSVs refused (exit 2)
    check_tools.py npy    TOOLS BUILD OUT     pytorch_compare.py --check --reference numpy on phase 1's --save-dir:
                                              passes on the real outputs, fails on one changed element; and on the
                                              saved outputs of phases 2-4 where they are built
    check_tools.py headline TOOLS BUILD OUT   headline_tables.py on a log of the headline commands (run small, on the
                                              CPU, their rows relabelled cuda): the tables hold the log's numbers;
                                              and on the committed H200 logs of steps 3i's and 3j's tiles and steps
                                              4b to 4d
    check_tools.py hopper TOOLS ROOT OUT      hopper_tables.py on the committed phase 7 log: every table printed, a
                                              log row's number found in its table (steps 4h, 4i, 4j and 6i on their own
                                              logs; the instruction mix's and the stall samples' totals from their
                                              reports); a log lacking rows or reports, or holding a failed check,
                                              refused with one "error:" line;
                                              hopper_bench.sh's refusals (no phase7_hopper, a bad PARTS): one line,
                                              exit 2
    check_tools.py cpu-compare TOOLS ROOT OUT cpu_compare.py --table on the committed CPU logs: each row's median is
                                              the median of its series; a malformed --backward-tiles refused with
                                              one line and exit 2 before anything is written (no PyTorch needed)
    check_tools.py ring TOOLS ROOT OUT        plot_ring_efficiency.py --table on the committed ring_bench.sh log (a
                                              cell recomputed from the log's medians; a loopback or incomplete log
                                              refused); plot_ring_timeline.py --summary on the committed timeline,
                                              and malformed or incomplete ones refused with one line, exit 2;
                                              ring_bench.sh's refusal of a folder without phase8_ring

Exit status 0 passed, 1 failed, 77 skipped (NumPy or matplotlib missing; ctest shows "skipped").
"""
import csv
import gzip
import os
import re
import shutil
import struct
import subprocess
import sys

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
FIGURES = ("time", "gflops", "speedup", "memory", "causal")
failures = []


def expect(condition, message):
    if not condition:
        failures.append(message)
        print(f"FAIL: {message}")
    return condition


def run(cmd):
    print("$ " + " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sys.stdout.write(proc.stdout[-3000:])
    sys.stdout.write(proc.stderr[-3000:])
    return proc


def fresh(directory):
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory)
    return directory


def check_bench(tools, build, out):
    sys.path.insert(0, tools)
    from bench import FIELDS   # the tools' one list of the columns: it must be what the binaries write
    FIELDS = list(FIELDS)
    fresh(out)
    proc = run([sys.executable, os.path.join(tools, "bench.py"), "--quick", "--cpu-only", "--phases", "1",
                "--build", build, "--out", out])
    expect(proc.returncode == 0, f"bench.py --quick exited {proc.returncode}")
    expect("[  4/4]" in proc.stdout and "elapsed" in proc.stdout, "no progress line for each of the 4 configurations")
    path = os.path.join(out, "results.csv")
    if not expect(os.path.exists(path), f"{path} was not written"):
        return
    with open(path, newline="") as f:
        lines = list(csv.reader(f))
    expect(lines and lines[0] == FIELDS, f"CSV header is {lines[0] if lines else 'missing'}")
    rows = [dict(zip(FIELDS, line)) for line in lines[1:]]
    expect(all(len(line) == len(FIELDS) for line in lines), "a CSV line has the wrong number of fields")
    threads = {int(r["threads"]) for r in rows}
    configs = {(r["Sq"], r["causal"]) for r in rows}
    expect(configs == {("128", "0"), ("256", "0"), ("128", "1"), ("256", "1")}, f"configurations {sorted(configs)}")
    expect(1 in threads and len(rows) == 4 * len(threads), f"{len(rows)} rows for threads {sorted(threads)}")
    for r in rows:
        where = f"row {r['step']} S={r['Sq']} causal={r['causal']} threads={r['threads']}"
        expect(r["phase"] == "phase1_naive" and r["impl"] == "cpu", f"{where}: phase/impl {r['phase']}/{r['impl']}")
        expect(r["status"] == "ok" and r["pass"] == "1", f"{where}: status {r['status']}, pass {r['pass']}")
        expect(r["kind"] == "forward" and r["step"] == "naive", f"{where}: kind {r['kind']}, step {r['step']}")
        expect(float(r["tolerance"]) > 0, f"{where}: tolerance {r['tolerance']}")
        expect(r["cpu_simd_built"] != "" and int(r["cpu_cores"]) >= 1, f"{where}: SIMD or cores missing")
        B, H, S, D = (int(r[k]) for k in ("B", "H", "Sq", "D"))
        flops = 4.0 * B * H * S * S * D / (2 if r["causal"] == "1" else 1)
        median, low, gflops = float(r["median_ms"]), float(r["min_ms"]), float(r["gflops"])
        expect(abs(float(r["flops"]) - flops) <= 1e-5 * flops, f"{where}: flops {r['flops']}, expected {flops:g}")
        expect(0 < low <= median, f"{where}: min {low} and median {median} ms")
        expect(abs(gflops - flops / (median * 1e6)) <= 0.01 * gflops + 1e-3, f"{where}: GFLOP/s {gflops}")
        expect(int(r["extra_bytes"]) == 2 * B * H * S * S * 4, f"{where}: extra bytes {r['extra_bytes']} (S and P)")
        expect(r["cpu_model"] != "" and r["commit"] != "", f"{where}: empty cpu_model or commit")
    summary = os.path.join(out, "summary.md")
    if expect(os.path.exists(summary), "summary.md was not written"):
        with open(summary) as f:
            text = f.read()
        expect("| phase1_naive | naive | no |" in text and "GFLOP/s" in text, "summary.md has no phase 1 table row")
        expect("Measured on CPU: " in text and "command: `python3 tools/bench.py" in text,
               "summary.md does not name the machine and the command before its tables")


def png_size(path):
    """(width, height) from a PNG's IHDR chunk, or None when the file is not a PNG."""
    with open(path, "rb") as f:
        head = f.read(24)
    if len(head) < 24 or head[:8] != PNG_SIGNATURE or head[12:16] != b"IHDR":
        return None
    return struct.unpack(">II", head[16:24])


def check_plots(tools, fixture, out):
    try:
        import matplotlib  # noqa: F401
        import numpy  # noqa: F401
    except ImportError:
        print("SKIPPED: matplotlib or NumPy is not installed (python3 -m pip install numpy matplotlib)")
        sys.exit(77)
    fresh(out)
    script = os.path.join(tools, "plot_bench.py")
    proc = run([sys.executable, script, fixture, "--outdir", out, "--prefix", "test-"])
    expect(proc.returncode == 0, f"plot_bench.py exited {proc.returncode}")
    expect("not plotted: phase2_online_softmax" in proc.stdout, "phase 2 (one head) was not left out of B=1 H=4 axes")
    for name in FIGURES:
        path = os.path.join(out, f"test-{name}.png")
        if not expect(os.path.exists(path), f"{path} was not written"):
            continue
        size = png_size(path)
        expect(size is not None, f"{path} is not a PNG")
        expect(size is None or (size[0] >= 800 and size[1] >= 500), f"{path}: {size} pixels, too small for a slide")
        expect(os.path.getsize(path) > 20000, f"{path}: only {os.path.getsize(path)} bytes")

    # Refusals: exit 2 and one "error:" line.
    bad = os.path.join(out, "bad.csv")
    with open(bad, "w") as f:
        f.write("phase,step\nphase1_naive,naive\n")
    for args, words in (([bad], "not a benchmark CSV"), ([os.path.join(out, "missing.csv")], "cannot read"),
                        ([fixture, "--D", "12345"], "no rows with D=12345")):
        proc = run([sys.executable, script, *args, "--outdir", out])
        lines = proc.stderr.strip().splitlines()
        expect(proc.returncode == 2, f"plot_bench.py {args[-1]}: exit {proc.returncode}, expected 2")
        expect(len(lines) == 1 and lines[0].startswith("error:") and words in lines[0],
               f"plot_bench.py {args[-1]}: stderr {lines}")


def check_npy(tools, build, out):
    try:
        import numpy as np
    except ImportError:
        print("SKIPPED: NumPy is not installed")
        sys.exit(77)
    fresh(out)
    binary = os.path.join(build, "bin", "phase1_naive")
    save = os.path.join(out, "run")
    proc = run([binary, "--impl", "cpu", "--B", "2", "--H", "3", "--Sq", "70", "--Sk", "45", "--D", "32", "--causal",
                "--scale", "0.3", "--iters", "0", "--save-dir", save])
    expect(proc.returncode == 0, f"phase1_naive --save-dir exited {proc.returncode}")
    script = os.path.join(tools, "pytorch_compare.py")
    check = [sys.executable, script, "--check", save, "--reference", "numpy"]
    proc = run(check)
    expect(proc.returncode == 0 and "All checks passed." in proc.stdout, f"check of the real outputs: {proc.returncode}")
    expect("causal=yes scale=0.3" in proc.stdout, "causal and --scale were not read from command.txt")
    # One element of LSE off by 1e-3 (relative 1e-4, five times the tolerance): the check must fail, naming LSE.
    lse = np.load(os.path.join(save, "lse.npy"))
    lse[1, 2, 33] += 1e-3 * max(1.0, abs(float(lse[1, 2, 33])))
    np.save(os.path.join(save, "lse.npy"), lse)
    proc = run(check)
    expect(proc.returncode == 1 and "LSE" in proc.stdout and "(1,2,33)" in proc.stdout,
           f"a changed LSE element was not caught (exit {proc.returncode})")
    proc = run([sys.executable, script, "--check", os.path.join(out, "nothing-here"), "--reference", "numpy"])
    expect(proc.returncode == 2 and proc.stderr.startswith("error:"), f"a missing folder: exit {proc.returncode}")
    # The tolerances come from the check block the binary saved beside its outputs: without it, one line and exit 2.
    os.remove(os.path.join(save, "checks.csv"))
    proc = run(check)
    expect(proc.returncode == 2 and proc.stderr.startswith("error:") and "checks.csv" in proc.stderr,
           f"a save folder without checks.csv: exit {proc.returncode}")

    # The later phases' saved outputs against the same independent reference (where they are built): phase 4's
    # dQ, dK and dV too.
    for name, extra, tensors in (("phase2_online_softmax", ["--S", "90"], ("O",)),
                                 ("phase3_forward_4d", ["--B", "2", "--H", "3", "--Sq", "70", "--Sk", "45", "--causal",
                                                        "--step", "3"], ("O", "LSE")),
                                 ("phase4_backward", ["--B", "2", "--H", "3", "--Sq", "45", "--Sk", "70", "--causal",
                                                      "--dq", "atomic"], ("O", "LSE", "DQ", "DK", "DV"))):
        binary = os.path.join(build, "bin", name)
        if not os.access(binary, os.X_OK):
            print(f"({name} is not built: not checked)")
            continue
        save = os.path.join(out, name)
        proc = run([binary, "--impl", "cpu", "--D", "32", "--scale", "0.3", "--iters", "0", "--save-dir", save, *extra])
        expect(proc.returncode == 0, f"{name} --save-dir exited {proc.returncode}")
        proc = run([sys.executable, script, "--check", save, "--reference", "numpy"])
        checked = [line.split()[0] for line in proc.stdout.splitlines() if line.endswith(("PASS", "FAIL"))]
        expect(proc.returncode == 0 and set(tensors) <= set(checked),
               f"{name}: check exit {proc.returncode}, tensors {checked}, expected {tensors}")


def check_headline(tools, build, out):
    """headline_tables.py reads the numbers of the docs' GPU tables off a headline log. No GPU here: the headline
    commands run at S=128 on one CPU thread, and their 1-thread rows are relabelled as cuda rows."""
    fresh(out)
    log = []
    for binary, extra in (("phase1_naive", []), ("phase3_forward_4d", ["--step", "3"]),
                          ("phase4_backward", ["--dq", "deterministic"]), ("phase4_backward", ["--dq", "atomic"]),
                          ("phase5_tensor_cores", ["--dtype", "bf16"]), ("phase5_tensor_cores", ["--dtype", "fp16"])):
        for D in ("64", "128"):
            for causal in ([], ["--causal"]):
                flags = ["--impl", "cpu", "--threads", "1", "--B", "1", "--H", "1", "--S", "128", "--D", D, "--iters",
                         "2", *causal, *extra]
                proc = subprocess.run([os.path.join(build, "bin", binary), *flags], stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, text=True)
                log += [f"$ {binary} {' '.join(flags)}"] + proc.stdout.splitlines()
    # PyTorch's block, in tools/pytorch_compare.py's progress format (no PyTorch here: the numbers are placeholders for
    # the parser, 1000 GFLOP/s per row).
    log.append("$ pytorch_compare.py --csv CSV --B 4 --H 16 --S 4096 --D 64 128")
    for label in ("sdpa efficient", "sdpa flash fp16", "sdpa flash bf16", "sdpa cudnn fp16", "sdpa cudnn bf16"):
        for D in (64, 128):
            for causal in ("no ", "yes"):
                log.append(f"{label:<30} S=4096   D={D:<4} causal={causal:<4} ok           1.000 ms     1000.0 GFLOP/s")
    text = "\n".join(log)
    text = re.sub(r"^(  \S.*\s(?:yes|no)\s+)cpu(\s+)1 ", r"\1cuda\2- ", text, flags=re.MULTILINE)
    text = text.replace("GPU: none", "GPU: Test GPU, compute capability 9.0, 132 SMs, 1980 MHz (memory 2619 MHz)")
    # Steps 3c to 3i and 4b have no CPU row (steps 3's and 4's are their twins): those timing rows stand in for theirs.
    gpu_only = ("step 3c row blocks", "step 3d exp2 ftz", "step 3e copy loop", "step 3f lazy rescale",
                "step 3g invariants", "step 3h xor addresses", "step 3i key offsets")
    text = re.sub(r"^  step 3 pipeline (?:bf16|fp16)\s+(?:yes|no)\s+cuda .*$",
                  lambda m: "\n".join([m[0]] + [m[0].replace("step 3 pipeline", label, 1) for label in gpu_only]),
                  text, flags=re.MULTILINE)
    text = re.sub(r"^  step 4 bwd (?:det|atomic) (?:bf16|fp16)\s+(?:yes|no)\s+cuda .*$",
                  lambda m: m[0] + "\n" + m[0].replace("step 4 bwd", "step 4b bwd", 1), text, flags=re.MULTILINE)
    path = os.path.join(out, "headline.log")
    with open(path, "w") as f:
        f.write(text + "\n")
    script = os.path.join(tools, "headline_tables.py")
    proc = run([sys.executable, script, path])
    expect(proc.returncode == 0, f"headline_tables.py exited {proc.returncode}")
    expect(proc.stdout.count("Measured on an Test GPU (132 SMs, 1980 MHz)") == 5, "not five tables naming the GPU")
    expect("| PyTorch cuDNN, fp16 / bf16 | 1.0 / 1.0 |" in proc.stdout, "chapter 06's table lacks PyTorch's rows")
    want = re.search(r"^\$ phase3_forward_4d .*--D 64 --iters 2 --step 3$(?:\n.*)*?\n  step 3 +no +cuda +- +([\d.]+)",
                     text, re.MULTILINE)
    expect(want and f"| 64 | {float(want[1]):.2f} (" in proc.stdout, "chapter 03's table lacks the log's step 3 time")
    # A log without phase 4 is refused with one line naming the missing row.
    with open(path, "w") as f:
        f.write(text.split("$ phase4_backward")[0])
    proc = run([sys.executable, script, path])
    expect(proc.returncode == 2 and proc.stderr.startswith("error:") and "phase4_backward" in proc.stderr,
           f"a log without phase 4: exit {proc.returncode}, stderr {proc.stderr.strip()}")
    # Three tables off committed H200 logs, each of which must hold its log's bf16 D = 64 non-causal row, as the log
    # printed it in GFLOP/s: steps 3i's and 3j's 128 x 128 tiles beside FlashAttention-2 (the `--block-n 128` run), and
    # step 4d's backward beside it.
    figures = os.path.join(os.path.dirname(os.path.abspath(tools)), "docs", "figures")
    expect_log_row_in_table(script, os.path.join(figures, "h200-phase5-key-tiles.log"), "phase5-key-tiles",
                            "--block-n 128 --dtype bf16 --B 4", "step 3i key offsets", "step 3i, 128 x 128 tiles")
    expect_log_row_in_table(script, os.path.join(figures, "h200-phase5-rows.log"), "phase5-rows",
                            "--block-n 128 --dtype bf16 --B 4", "step 3j rows together", "step 3j, 128 x 128 tiles")
    expect_log_row_in_table(script, os.path.join(figures, "h200-phase5-backward.log"), "phase5-backward-steps",
                            "--dtype bf16 --B 4", "step 4d bwd det", "step 4d (one more block)")


def expect_log_row_in_table(script, log, table, command, label, table_row):
    """headline_tables.py --table TABLE on LOG: a table whose row TABLE_ROW holds, as its first cell's bf16 half, the
    GFLOP/s of the first bf16 non-causal row LABEL after the first D = 64 non-causal command containing COMMAND."""
    proc = run([sys.executable, script, log, "--table", table])
    expect(proc.returncode == 0 and proc.stdout.startswith("Measured on an NVIDIA H200"),
           f"--table {table}: exit {proc.returncode}")
    lines = open(log).read().split("\n")
    start = next(i for i, line in enumerate(lines) if command in line and "--D 64 " in line and "--causal" not in line)
    timing = re.compile(rf"^  {re.escape(label)} bf16\s+no\s+cuda\s+-\s+[\d.]+\s+[\d.]+\s+([\d.]+)")
    tflops = float(next(m for line in lines[start:] if (m := timing.match(line))).group(1)) / 1000
    expect(re.search(rf"^\| {re.escape(table_row)} \| [\d.]+ / {tflops:.1f} \|", proc.stdout, re.MULTILINE),
           f"{label} bf16 {tflops:.1f} TFLOP/s not in --table {table}")


def expect_refused_without_reports(script, log, table, out):
    """A table read off Nsight Compute reports beside LOG, with LOG copied alone into OUT: one "error:" line, exit 2."""
    fresh(out)
    alone = os.path.join(out, os.path.basename(log))
    with open(alone, "w") as f:
        f.write(open(log).read())
    proc = subprocess.run([sys.executable, script, alone, "--table", table], capture_output=True, text=True)
    expect(proc.returncode == 2 and proc.stderr.startswith("error:") and proc.stderr.count("\n") == 1,
           f"--table {table} without its reports: exit {proc.returncode}, stderr {proc.stderr.strip()}")


def check_hopper(tools, root, out):
    """hopper_tables.py reads chapter 09's tables off the committed log of tools/hopper_bench.sh, which refuses bad
    arguments."""
    script, log = os.path.join(tools, "hopper_tables.py"), os.path.join(root, "docs", "figures", "h100-phase7-bench.log")
    for table in ("forward", "long", "backward", "backward-long", "ncu-d128", "ncu-d64", "ncu-backward"):
        proc = subprocess.run([sys.executable, script, log, "--table", table], capture_output=True, text=True)
        expect(proc.returncode == 0 and proc.stdout.startswith("|"), f"--table {table}: exit {proc.returncode}")
    # Step 4g's table: three shapes and types, each with its ratio to cuDNN from the same run.
    stages = os.path.join(root, "docs", "figures", "h200-phase7-stages.log")
    proc = subprocess.run([sys.executable, script, stages, "--table", "stages"], capture_output=True, text=True)
    expect(proc.returncode == 0 and proc.stdout.count("step 4g / cuDNN") == 3,
           f"--table stages: exit {proc.returncode}")
    # Step 4h's table: the stages log, which has no step 4h, is refused; on step 4h's own log, its first bf16 row
    # (S = 4096, D = 64, not causal) is in the table as the log printed it.
    proc = subprocess.run([sys.executable, script, stages, "--table", "groups"], capture_output=True, text=True)
    expect(proc.returncode == 2 and proc.stderr.startswith("error:") and "step 4h" in proc.stderr
           and proc.stderr.count("\n") == 1, f"--table groups without step 4h: exit {proc.returncode}")
    groups = os.path.join(root, "docs", "figures", "h200-phase7-groups.log")
    proc = subprocess.run([sys.executable, script, groups, "--table", "groups"], capture_output=True, text=True)
    first_4h = re.compile(r"^  step 4h l2 head groups bf16 .* ([\d.]+) +- +")
    first = next(m for line in open(groups) if (m := first_4h.match(line)))
    expect(proc.returncode == 0 and proc.stdout.count("step 4h / cuDNN") == 3 and
           f"| S = 4096, step 4h, bf16 | {float(first[1]) / 1000:.1f} |" in proc.stdout,
           f"--table groups on {groups}: exit {proc.returncode}")
    # Step 4i's table: the groups log, which has no step 4i, is refused; on step 4i's own log (both types at both
    # shapes), four ratios to cuDNN, and its first bf16 row as the log printed it.
    proc = subprocess.run([sys.executable, script, groups, "--table", "descriptors"], capture_output=True, text=True)
    expect(proc.returncode == 2 and proc.stderr.startswith("error:") and "step 4i" in proc.stderr
           and proc.stderr.count("\n") == 1, f"--table descriptors without step 4i: exit {proc.returncode}")
    descriptors = os.path.join(root, "docs", "figures", "h200-phase7-descriptors.log")
    proc = subprocess.run([sys.executable, script, descriptors, "--table", "descriptors"], capture_output=True,
                          text=True)
    first_4i = re.compile(r"^  step 4i descriptors bf16 .* ([\d.]+) +- +")
    first = next(m for line in open(descriptors) if (m := first_4i.match(line)))
    expect(proc.returncode == 0 and proc.stdout.count("step 4i / cuDNN") == 4 and
           f"| S = 4096, step 4i, bf16 | {float(first[1]) / 1000:.1f} |" in proc.stdout,
           f"--table descriptors on {descriptors}: exit {proc.returncode}")
    # Step 4j's table, on its own log: four ratios to cuDNN. Its stall samples, read from two per-instruction exports
    # beside the log: the 'all' row holds each export's total of executed instructions; without them, one "error:".
    rows = os.path.join(root, "docs", "figures", "h200-phase7-rows.log")
    proc = subprocess.run([sys.executable, script, rows, "--table", "rows"], capture_output=True, text=True)
    expect(proc.returncode == 0 and proc.stdout.count("step 4j / cuDNN") == 4, f"--table rows: exit {proc.returncode}")
    # Every variant of step 4 on the same log: eleven steps, cuDNN and one ratio row; steps 4 to 4b have no 192-row
    # kernel, so their D = 64 cells are dashes.
    proc = subprocess.run([sys.executable, script, rows, "--table", "step4"], capture_output=True, text=True)
    expect(proc.returncode == 0 and proc.stdout.count("\n") == 15 and "| step 4b exp2 ftz | - | - | " in proc.stdout
           and proc.stdout.count("step 4j / cuDNN") == 1, f"--table step4: exit {proc.returncode}")
    proc = subprocess.run([sys.executable, script, rows, "--table", "samples"], capture_output=True, text=True)
    export = os.path.join(root, "docs", "figures", "h200-phase7-ncu-source-step4j-d64.csv.gz")
    with gzip.open(export, "rt") as f:
        table = list(csv.reader(f))
    executed = sum(int(row[table[1].index("Instructions Executed")] or 0) for row in table[2:])
    expect(proc.returncode == 0 and proc.stdout.count("\n") == 13 and f"| {executed / 1e6:.1f} | " in
           proc.stdout.splitlines()[-1], f"--table samples: exit {proc.returncode}, step 4j's total not in 'all'")
    expect_refused_without_reports(script, rows, "samples", out)
    # The instruction mix reads six per-opcode reports beside the log: its "all" row is the sum of each report's
    # counts, the first step 4h one (D = 64) as the report prints it; without the reports, one "error:" line.
    proc = subprocess.run([sys.executable, script, groups, "--table", "opcodes"], capture_output=True, text=True)
    report = open(os.path.join(root, "docs", "figures", "h200-phase7-ncu-opcodes-step4h-d64.txt")).read()
    total = re.search(r"\n\s+sass__inst_executed_per_opcode\s+([\d,]+)", report)
    expect(proc.returncode == 0 and total is not None and
           f"| all | {int(total[1].replace(',', '')) / 1e6:.1f} |" in proc.stdout,
           f"--table opcodes: exit {proc.returncode}, step 4h's total not in the 'all' row")
    expect_refused_without_reports(script, groups, "opcodes", out)
    # The cuDNN comparison reads one Nsight Compute report per kernel beside the H200 log; a missing report is refused.
    h200 = os.path.join(root, "docs", "figures", "h200-phase7-persistent.log")
    proc = subprocess.run([sys.executable, script, h200, "--table", "ncu-cudnn"], capture_output=True, text=True)
    expect(proc.returncode == 0 and proc.stdout.count("| cuDNN |") == 6, f"--table ncu-cudnn: exit {proc.returncode}")
    expect_refused_without_reports(script, h200, "ncu-cudnn", out)
    # Steps 6g to 6j on the backward log: four ratios of step 6j to cuDNN, the first step 6i row as the log prints it;
    # their Nsight Compute reports beside cuDNN's, a missing one refused.
    backward = os.path.join(root, "docs", "figures", "h200-phase7-backward.log")
    proc = subprocess.run([sys.executable, script, backward, "--table", "wide-q"], capture_output=True, text=True)
    row_6i = re.compile(r"^  step 6i bwd atomic bf16 .* ([\d.]+) +- +")
    first_6i = next(m for line in open(backward) if (m := row_6i.match(line)))
    expect(proc.returncode == 0 and proc.stdout.count("step 6j / cuDNN") == 4 and
           f"| S = 4096, step 6i, bf16 | {float(first_6i[1]) / 1000:.1f} |" in proc.stdout,
           f"--table wide-q: exit {proc.returncode}, or step 6i's first row not in it")
    proc = subprocess.run([sys.executable, script, backward, "--table", "ncu-wide-q"], capture_output=True, text=True)
    expect(proc.returncode == 0 and proc.stdout.count("| cuDNN |") == 2 and "| step 6j, 80 x 128 |" in proc.stdout,
           f"--table ncu-wide-q: exit {proc.returncode}")
    expect_refused_without_reports(script, backward, "ncu-wide-q", out)
    # A step 4e row of the log (the first 192 x 128 run) is in the forward table, as the log prints it in GFLOP/s.
    lines = open(log).read().split("\n")
    start = next(i for i, line in enumerate(lines) if "--block-m 192" in line and "--S 4096" in line)
    row = next(line for line in lines[start:] if line.startswith("  step 4e overlap in turn") and " cuda " in line)
    gflops = re.search(r"cuda\s+-\s+[\d.]+\s+[\d.]+\s+([\d.]+)", row).group(1)   # median ms, min ms, GFLOP/s
    tflops = f"{float(gflops) / 1000:.1f}"
    proc = subprocess.run([sys.executable, script, log, "--table", "forward"], capture_output=True, text=True)
    expect(f"| step 4e, 192 x 128 | {tflops} |" in proc.stdout, f"step 4e's {tflops} TFLOP/s not in the forward table")
    fresh(out)
    for name, keep in (("truncated.log", lambda line: "--block-m 192" not in line), ("failed.log", None)):
        path = os.path.join(out, name)
        with open(path, "w") as f:
            for line in lines:
                if keep is None or keep(line):
                    f.write(line + "\n")
            if keep is None:
                f.write("  step 4e overlap in turn bf16 cuda  O   1.0e-01  1.0e-01   1.0e-03   (0,0,0,0)   FAIL\n")
        proc = subprocess.run([sys.executable, script, path, "--table", "forward"], capture_output=True, text=True)
        expect(proc.returncode in (1, 2) and proc.stderr.startswith("error:") and proc.stderr.count("\n") == 1,
               f"{name}: exit {proc.returncode}, stderr {proc.stderr.strip()}")
    # tools/ncu_source_diff.py: on two small exports whose counts are known (ratio 1/2; 8 = blocks x warps), each
    # kind of code's excess is what it should be; on the committed ones, the groups add up to the whole; exports of
    # two different binaries are refused.
    diff = os.path.join(tools, "ncu_source_diff.py")
    def export(path, rows):
        with open(path, "w") as f:
            f.write('"Kernel Name","k"\n"Address","Source","Instructions Executed"\n')
            for address, source, count in rows:
                f.write(f'"{address:#x}","{source}","{count}"\n')
    code = [("once", "IMAD R1, R2, R3, RZ", 8, 8), ("loop", "HGMMA.64x128x16", 16, 32),
            ("every tile", "ISETP.GT.AND P0, PT, R4, R5, PT", 32, 0), ("mask", "FSEL R6, R7, -INF, P0", 8, 0)]
    export(os.path.join(out, "causal.csv"), [(0x7f00 + 16 * i, c[1], c[2]) for i, c in enumerate(code)])
    export(os.path.join(out, "plain.csv"), [(0x9a00 + 16 * i, c[1], c[3]) for i, c in enumerate(code)])
    proc = subprocess.run([sys.executable, diff, os.path.join(out, "causal.csv"), os.path.join(out, "plain.csv"),
                           "--ratio", "1/2"], capture_output=True, text=True)
    for row in ("| once per block | 1 | 1.0 / 1.0 (0.0 M / 0.0 M) | +0.0 M |", "| causal only, once | 1 | 1.0 / 0.0",
                "| causal only, every tile | 1 | 4.0 / 0.0", "| the rest | 1 | 2.0 / 4.0"):
        expect(proc.returncode == 0 and row in proc.stdout, f"ncu_source_diff.py: no row '{row}' in {proc.stdout}")
    export(os.path.join(out, "other.csv"), [(0x9a00 + 16 * i, "NOP", c[3]) for i, c in enumerate(code)])
    proc = subprocess.run([sys.executable, diff, os.path.join(out, "causal.csv"), os.path.join(out, "other.csv"),
                           "--ratio", "1/2"], capture_output=True, text=True)
    expect(proc.returncode == 2 and proc.stderr.startswith("error:") and proc.stderr.count("\n") == 1,
           f"ncu_source_diff.py on two binaries: exit {proc.returncode}, stderr {proc.stderr.strip()}")
    figures = os.path.join(root, "docs", "figures")
    exports = [os.path.join(figures, f"h200-phase7-ncu-source-step4e-d128{kind}.csv.gz") for kind in ("-causal", "")]
    proc = subprocess.run([sys.executable, diff, *exports, "--ratio", "528/1024"], capture_output=True, text=True)
    excess = [float(x) for x in re.findall(r"\| ([+-][\d.]+) M \|$", proc.stdout, re.MULTILINE)]
    expect(proc.returncode == 0 and len(excess) == 5 and abs(sum(excess[:4]) - excess[4]) < 0.25,
           f"ncu_source_diff.py on the committed exports: exit {proc.returncode}, excesses {excess}")
    # tools/hopper_bench.sh refuses what it cannot run, with one line and exit status 2, before it writes anything.
    bench = os.path.join(tools, "hopper_bench.sh")
    for args, why in ((["bin-that-is-not-there", out], "a BINDIR without phase7_hopper"),
                      ([out, os.path.join(out, "bench-logs"), "timing"], "a third argument other than time|profile|all")):
        proc = subprocess.run(["bash", bench] + args, capture_output=True, text=True)
        expect(proc.returncode == 2 and proc.stderr.count("\n") == 1 and proc.stdout == ""
               and not os.path.exists(os.path.join(out, "bench-logs")),
               f"hopper_bench.sh with {why}: exit {proc.returncode}, stderr {proc.stderr.strip()}")


def check_cpu_compare(tools, root, out):
    """cpu_compare.py's --table reads the committed logs back (a row's median ms is the median of the series the log
    printed for it), and a malformed --backward-tiles is refused before PyTorch is imported or a log written."""
    script, figures = os.path.join(tools, "cpu_compare.py"), os.path.join(root, "docs", "figures")
    logs = sorted(name for name in os.listdir(figures) if name.startswith("cpu-compare-") and name.endswith(".log"))
    expect(len(logs) >= 2, f"only {len(logs)} cpu-compare logs in docs/figures")
    for name in logs:
        path = os.path.join(figures, name)
        proc = subprocess.run([sys.executable, script, "--table", path], capture_output=True, text=True)
        expect(proc.returncode == 0 and "| kind |" in proc.stdout, f"--table {name}: exit {proc.returncode}")
        series = re.findall(r"^(backward|forward) (?:\w+ )?([\d,]+) causal=(\d):.*?\n  (step 5 bwd det fp32|step 1 register "
                            r"tiles)\s+ms per series: ([\d. ]+)$", open(path).read(), re.M | re.S)
        for kind, shape, causal, label, values in series[:1]:
            median = sorted(float(v) for v in values.split())[len(values.split()) // 2]
            row = f"| {kind} | {shape} | {'yes' if causal == '1' else 'no'} | {label} | {median:.2f} |"
            expect(row in proc.stdout, f"{name}: no row {row}")
    fresh(out)
    log = os.path.join(out, "refused.log")
    proc = subprocess.run([sys.executable, script, "--backward-tiles", "64y", "--log", log], capture_output=True,
                          text=True)
    expect(proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--backward-tiles" in proc.stderr
           and not os.path.exists(log), f"--backward-tiles 64y: exit {proc.returncode}, stderr {proc.stderr.strip()}")


def check_ring(tools, root, out):
    """plot_ring_efficiency.py computes chapter 10's efficiencies from the committed ring_bench.sh log (one cell checked
    against the log's own medians) and refuses a log whose run went over the loopback or lacks a run;
    plot_ring_timeline.py reads the committed timeline and refuses malformed or incomplete ones."""
    script = os.path.join(tools, "plot_ring_efficiency.py")
    log = os.path.join(root, "docs", "figures", "h200x4-ring-bench.log")
    proc = subprocess.run([sys.executable, script, log, "--table"], capture_output=True, text=True)
    expect(proc.returncode == 0 and proc.stdout.count("\n") == 6, f"--table on {log}: exit {proc.returncode}")
    # The 4-GPU, 8K-token non-causal forward: single / (4 x ring) from the two medians the log printed.
    lines = open(log).read().split("\n")
    start = lines.index("$ phase8_ring --impl cuda --dtype bf16 --ranks 4 --B 1 --H 16 --S 32768 --D 128 "
                        "--block-m 128 --block-n 64")
    medians = {}
    for line in lines[start + 1:start + 3]:
        m = re.match(r"^  (single bf16|ring 4 ranks bf16) +no +cuda +- +([\d.]+)", line)
        if m:
            medians[m[1]] = float(m[2])
    cell = "%.2f" % (medians["single bf16"] / (4 * medians["ring 4 ranks bf16"]))
    expect(proc.stdout.split("\n")[4].startswith("| 4 | 8K | %s |" % cell), f"4 GPUs, 8K: {cell} not in the table")
    fresh(out)
    text = open(log).read()
    for name, changed in (("loopback.log", text.replace("(nccl: 4 ranks on 4 GPUs)", "(loopback: 4 ranks on 1 GPU)")),
                          ("short.log", text[:text.index("--causal --zigzag --backward")])):
        path = os.path.join(out, name)
        with open(path, "w") as f:
            f.write(changed)
        proc = subprocess.run([sys.executable, script, path, "--table"], capture_output=True, text=True)
        expect(proc.returncode == 2 and proc.stderr.count("\n") == 1, f"{name}: exit {proc.returncode}")
    timeline = os.path.join(tools, "plot_ring_timeline.py")
    csv_path = os.path.join(root, "docs", "figures", "h200x4-ring-timeline.csv")
    proc = subprocess.run([sys.executable, timeline, csv_path, "--summary", "--ranks", "4", "--rows", "3"],
                          capture_output=True, text=True)
    expect(proc.returncode == 0 and proc.stdout.count("rank 3 (GPU 3)") == 3, f"{csv_path}: exit {proc.returncode}")
    rows = open(csv_path).read().split("\n")
    bad = {"rows.csv": rows,                                                   # the right file, the wrong --rows
           "swapped.csv": rows[:1] + [rows[1].replace(",blocks,", ",lunch,")] + rows[2:],   # an unknown kind
           "missing_rank.csv": [r for r in rows if ",3,3," not in r]}          # rank 3 left out
    for name, content in bad.items():
        path = os.path.join(out, name)
        with open(path, "w") as f:
            f.write("\n".join(content))
        args = ["--rows", "2"] if name == "rows.csv" else ["--ranks", "4"]
        proc = subprocess.run([sys.executable, timeline, path, "--summary"] + args, capture_output=True, text=True)
        expect(proc.returncode == 2 and proc.stderr.count("\n") == 1, f"{name}: exit {proc.returncode}")
    # ring_bench.sh refuses a folder without phase8_ring before it writes anything.
    logdir = os.path.join(out, "ring-bench")
    proc = subprocess.run(["bash", os.path.join(tools, "ring_bench.sh"), os.path.join(out, "no-bin"), logdir],
                          capture_output=True, text=True)
    expect(proc.returncode == 2 and proc.stderr.count("\n") == 1 and "phase8_ring" in proc.stderr
           and not os.path.exists(logdir), f"ring_bench.sh without phase8_ring: exit {proc.returncode}")


def main(argv):
    if len(argv) != 4 or argv[0] not in ("bench", "plots", "npy", "headline", "hopper", "cpu-compare", "ring"):
        print(__doc__)
        return 2
    what, tools, second, out = argv
    {"bench": check_bench, "plots": check_plots, "npy": check_npy, "headline": check_headline,
     "hopper": check_hopper, "cpu-compare": check_cpu_compare, "ring": check_ring}[what](tools, second, out)
    print(f"{len(failures)} failure(s)" if failures else "PASSED")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
