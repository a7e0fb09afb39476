#!/usr/bin/env python3
"""test_kernel_rules.py - the index rules the tensor-core figures draw (tools/kernel_rules.py, read out of
phase5_tensor_cores/3_pipeline_cuda.cu) keep their promises. Standard library only; exit 0 passed, 1 failed.

Checks, for D = 64 and 128: swizzle() stores each row's chunks at a permutation of the row's chunk positions, inside the
row; the 8 rows one ldmatrix matrix reads (every operand, every matrix of the x4, every step along the tile) fall in 8
different bank groups with the swizzle, and in one group without it (the 8-way conflict the swizzle removes); the
lanes' ldmatrix addresses for Q are the four 8x8 matrices of the mma's A fragment (a[0] rows 0-7 cols 0-7, a[1] rows
8-15, a[2] cols 8-15, a[3] both), and those for K and V the two B matrices of two neighbouring mmas; the PTX fragment
layouts cover each matrix exactly once; the C fragment is the kernel's own store (row_g + 8 r, 8 db + 2 t). And
phase 7 steps 6i and 6j give their two warpgroups pieces of dQ that cover its tile once.
"""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from kernel_rules import (KernelRules, backward_products, bank_group, dq_pieces, fragment_a,  # noqa: E402
                          fragment_b, fragment_c, online_softmax_trace)
import math  # noqa: E402
import random  # noqa: E402

failures = []


def expect(condition, what):
    if not condition:
        failures.append(what)


rules = KernelRules()
CHUNK = rules.constants["CHUNK"]
for D in (64, 128):
    chunks = D // CHUNK
    for row in range(32):
        stored = [rules.swizzle(D, row, c) for c in range(chunks)]
        expect(sorted((s - row * D) // CHUNK for s in stored) == list(range(chunks)),
               "D=%d row %d: swizzle is not a permutation of the row's chunks: %s" % (D, row, stored))
    for operand, steps in (("Q", D // 16), ("K", D // 16), ("V", D // 16)):
        for step in range(steps):
            for matrix in range(4):
                lanes = range(8 * matrix, 8 * matrix + 8)
                places = [rules.ldmatrix_row_chunk(operand, lane, step) for lane in lanes]
                swizzled = {bank_group(rules.swizzle(D, r, c)) for r, c in places}
                plain = {bank_group(r * D + c * CHUNK) for r, c in places}
                expect(len(swizzled) == 8, "D=%d %s step %d matrix %d: swizzled rows share bank groups %s"
                       % (D, operand, step, matrix, sorted(swizzled)))
                expect(len(plain) == 1, "D=%d %s matrix %d: without the swizzle the rows should share one group"
                       % (D, operand, matrix))
# Q: lane L points at row L % 16 and chunk L / 16 of the 16x16 step: matrix i of the x4 is a[i] of the A fragment.
for matrix, (rows, col_chunk) in enumerate(((range(0, 8), 0), (range(8, 16), 0), (range(0, 8), 1), (range(8, 16), 1))):
    got = [rules.ldmatrix_row_chunk("Q", lane) for lane in range(8 * matrix, 8 * matrix + 8)]
    expect(got == [(r, col_chunk) for r in rows], "Q's ldmatrix matrix %d is not a[%d]: %s" % (matrix, matrix, got))
    a_cells = {(row, col) for lane in range(32) for reg, row, cols in fragment_a(lane) if reg == matrix for col in cols}
    expect(a_cells == {(r, 8 * col_chunk + c) for r in rows for c in range(8)},
           "the PTX A fragment's register %d does not cover the matrix ldmatrix loads into it" % matrix)
# K (B of S = Q K^T, stored [key][d]): matrices 0, 1: keys 0-7, dims 0-7 / 8-15 (b0, b1 of key block kb); 2, 3: keys 8-15.
for matrix, (keys, chunk) in enumerate(((range(0, 8), 0), (range(0, 8), 1), (range(8, 16), 0), (range(8, 16), 1))):
    got = [rules.ldmatrix_row_chunk("K", lane) for lane in range(8 * matrix, 8 * matrix + 8)]
    expect(got == [(k, chunk) for k in keys], "K's ldmatrix matrix %d: %s" % (matrix, got))
# V (B of O += P V, stored [key][d], transposed by ldmatrix): matrices 0, 1: keys 0-7 / 8-15 of dims 0-7; 2, 3: dims 8-15.
for matrix, (keys, chunk) in enumerate(((range(0, 8), 0), (range(8, 16), 0), (range(0, 8), 1), (range(8, 16), 1))):
    got = [rules.ldmatrix_row_chunk("V", lane) for lane in range(8 * matrix, 8 * matrix + 8)]
    expect(got == [(k, chunk) for k in keys], "V's ldmatrix matrix %d: %s" % (matrix, got))
# Every element of A, B and C belongs to exactly one lane and register.
a = [(row, col) for lane in range(32) for _, row, cols in fragment_a(lane) for col in cols]
expect(sorted(a) == [(r, c) for r in range(16) for c in range(16)], "the A fragment does not cover 16x16 once")
b = [(k, n) for lane in range(32) for _, ks, n in fragment_b(lane) for k in ks]
expect(sorted(b) == [(k, n) for k in range(16) for n in range(8)], "the B fragment does not cover 16x8 once")
c = [(row, col) for lane in range(32) for _, row, col in fragment_c(lane)]
expect(sorted(c) == [(r, n) for r in range(16) for n in range(8)], "the C fragment does not cover 16x8 once")
# The kernel stores C element 2r + e of lane 4g + t at row row_g + 8 r (row_g = ... + g) and column 8 db + 2 t + e.
expect(re.search(r"row_g = q_start \+ warp \* WARP_ROWS \+ g;", rules.text) is not None,
       "the kernel's row_g is no longer q_start + warp * WARP_ROWS + g")
expect(re.search(r"db \* MMA_N \+ 2 \* t\)", rules.text) is not None and
       re.search(r"const int64_t row = row_g \+ 8 \* r;", rules.text) is not None,
       "the kernel's store of O no longer puts element 2r + e at (row_g + 8 r, 8 db + 2 t + e)")
for lane in range(32):
    g, t = lane // 4, lane % 4
    expect(fragment_c(lane) == [(2 * r + e, g + 8 * r, 2 * t + e) for r in range(2) for e in range(2)],
           "the C fragment of lane %d differs from the kernel's store" % lane)

# The online softmax the figure of chapter 02 draws: the chapter's worked example, and random rows against a direct
# softmax (tiles of every size, so that the max moves at some tiles and not at others).
trace, o = online_softmax_trace([1, 3, 2, 5], [10, 20, 30, 40], 2)
expect(abs(o - 36.881) < 5e-4 and abs(trace[0][1] - 1.1353) < 5e-5 and abs(trace[1][1] - 1.2034) < 5e-5
       and abs(trace[1][2] - 44.383) < 5e-4 and abs(trace[1][3] - math.exp(-2)) < 1e-12,
       "the online softmax does not reproduce chapter 02's worked example: %s %s" % (trace, o))
rng = random.Random(3)
for trial in range(50):
    n = rng.randint(1, 40)
    x = [rng.gauss(0, 4) for _ in range(n)]
    v = [rng.gauss(0, 1) for _ in range(n)]
    weights = [math.exp(xi - max(x)) for xi in x]
    direct = sum(w * vi for w, vi in zip(weights, v)) / sum(weights)
    for tile in (1, 3, 8, 64):
        _, o = online_softmax_trace(x, v, tile)
        expect(abs(o - direct) <= 1e-12 * (1 + abs(direct)), "online softmax != softmax (n %d tile %d)" % (n, tile))
# The backward's five products, as 4_backward_cuda.cu's header lists them, and its warps (the figure of chapter 07).
products, constants = backward_products()
expect([p[0].split()[0] for p in products] == ["S^T", "dV", "dP^T", "dK", "dQ"],
       "4_backward_cuda.cu's product table changed: %s" % [p[0] for p in products])
expect(constants.get("WARPS", 0) * constants.get("WARP_ROWS", 0) == 64,
       "4_backward_cuda.cu: WARPS x WARP_ROWS is no longer the 64 rows of its tiles")
# Phase 7's backward (the figure of chapter 09): the two warpgroups' pieces of a Q tile's dQ, as steps 6i and 6j set
# them (6i at 64-query tiles is step 6h's split), cover the BLOCK_M x D tile exactly once, each a wgmma of M = 64 and
# an N that wgmma.cuh has an instruction for (32, 64, 80).
for step, D, block_m in (("6i", 64, 64), ("6i", 128, 64), ("6i", 64, 128), ("6j", 64, 128), ("6j", 128, 80)):
    pieces = dq_pieces(step, D, block_m)
    covered = {}
    for warpgroup, query0, queries, dim0, dims, m, n in pieces:
        expect(m == 64 and n in (32, 64, 80), "step %s D=%d: a piece of M=%d N=%d" % (step, D, m, n))
        for q in range(query0, query0 + queries):
            for d in range(dim0, dim0 + dims):
                covered[(q, d)] = covered.get((q, d), 0) + 1
    expect(len(pieces) == 2 and sorted(covered) == [(q, d) for q in range(block_m) for d in range(D)] and
           set(covered.values()) == {1}, "step %s D=%d BLOCK_M=%d: the pieces %s do not cover dQ's tile once" % (
               step, D, block_m, pieces))

for f in failures:
    print("FAIL " + f)
print("test_kernel_rules: %s (%d failures)" % ("passed" if not failures else "FAILED", len(failures)))
sys.exit(1 if failures else 0)
