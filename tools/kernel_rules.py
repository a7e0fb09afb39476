#!/usr/bin/env python3
"""kernel_rules.py - the tensor-core kernels' own index rules, read out of their source, for the figures and their test.

The figures of the swizzle, of ldmatrix's lane-to-address map and of the mma fragments must show what the kernel does,
not a drawing of it. So this module reads phase5_tensor_cores/3_pipeline_cuda.cu (and the constants of
common/fa_mma.cuh, which the tensor-core steps share): its #define constants, the body of
swizzle(), and the expressions from which each lane computes the row and chunk it passes to ldmatrix, and evaluates
them (C integer arithmetic on non-negative values: `/` is Python's `//`). tests/test_kernel_rules.py checks what they
promise (the swizzle is a permutation of each row's chunks, one ldmatrix matrix reads 8 different bank groups, the
addresses fill the fragments the mma expects), so a change of the kernel that breaks them, or that this module can no
longer read, fails a test. The mma fragment layout itself is the PTX ISA's (mma.m16n8k16 with .f16/.bf16 inputs,
section "Matrix Fragments for mma.m16n8k16"), as the kernel's comment draws it: `fragment_*` below. It also reads how
phase 7's backward steps 6i and 6j split a Q tile's dQ between their two warpgroups (`dq_pieces`), which the test
checks covers the tile once, in pieces wgmma can compute.
Standard library only.
"""
import os
import re

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SOURCE = os.path.join(ROOT, "phase5_tensor_cores", "3_pipeline_cuda.cu")
# The PTX helpers and the fragment constants (WARP_ROWS, MMA_N, MMA_K, CHUNK) the tensor-core steps share.
SHARED_HEADERS = [os.path.join(ROOT, "common", "fa_mma.cuh"), os.path.join(ROOT, "common", "fa_warp.cuh")]


def defines(paths):
    """The integer #define constants of these files (a file that does not exist is skipped)."""
    constants = {}
    for path in paths:
        if os.path.exists(path):
            with open(path) as f:
                constants.update({name: int(value) for name, value in
                                  re.findall(r"^#define (\w+) (\d+)\b", f.read(), re.MULTILINE)})
    return constants


def evaluate(expression, constants, **names):
    """A C integer expression of the kernel's, on non-negative values: `/` is Python's `//`."""
    python = re.sub(r"(?<![/])/(?![/])", "//", expression)
    return eval(python, {"__builtins__": {}}, dict(constants, **names))


class KernelRules:
    def __init__(self, path=SOURCE):
        with open(path) as f:
            self.text = f.read()
        self.constants = defines(SHARED_HEADERS + [path])
        m = re.search(r"int swizzle\(int row, int chunk\) \{\s*return (.*?);\s*\}", self.text, re.DOTALL)
        if not m:
            raise ValueError("swizzle() not found in " + path)
        self.swizzle_expression = m.group(1)
        # The ldmatrix operands: Q (the A operand of S = Q K^T), K (its B operand), V (the B operand of O += P V,
        # transposed on the way). Each is a line "const int ROW = ..., chunk = ...;" just before its ldmatrix call.
        self.addresses = {}
        for operand, call in (("Q", r"ldmatrix_x4\(q_frag\[ds\], q_tile \+ swizzle<D>\(row, chunk\)\)"),
                              ("K", r"ldmatrix_x4\(b, k_tile \+ swizzle<D>\(key, chunk\)\)"),
                              ("V", r"ldmatrix_x4_trans\(b, v_tile \+ swizzle<D>\(key, chunk\)\)")):
            m = re.search(r"const int (row|key) = ([^,;]+), chunk = ([^;]+);\s*" + call, self.text)
            if not m:
                raise ValueError("the ldmatrix address of %s not found in %s" % (operand, path))
            self.addresses[operand] = (m.group(2).strip(), m.group(3).strip())

    def evaluate(self, expression, **names):
        return evaluate(expression, self.constants, **names)

    def swizzle(self, D, row, chunk):
        """Where chunk `chunk` of tile row `row` is stored, in halves from the start of the tile."""
        return self.evaluate(self.swizzle_expression, D=D, row=row, chunk=chunk)

    def ldmatrix_row_chunk(self, operand, lane, step=0, warp=0):
        """(tile row, 16-byte chunk) lane `lane` points ldmatrix at, for the operand's first key/d step (step=0)."""
        row_expression, chunk_expression = self.addresses[operand]
        names = dict(lane=lane, warp=warp, ds=step, kb=step, ks=step, db=step)
        return self.evaluate(row_expression, **names), self.evaluate(chunk_expression, **names)


def bank_group(halves_offset):
    """The group of 4 banks (16 bytes) a 16-byte chunk at this offset (in 2-byte halves) occupies: 0..7."""
    return (halves_offset * 2 // 16) % 8


# The mma.m16n8k16 fragments (PTX ISA): lane = 4g + t. Each 32-bit register holds two neighbouring 16-bit elements.
def fragment_a(lane):
    """A (16x16, row-major): [(register, row, (col, col + 1))] of this lane."""
    g, t = lane // 4, lane % 4
    return [(0, g, (2 * t, 2 * t + 1)), (1, g + 8, (2 * t, 2 * t + 1)),
            (2, g, (2 * t + 8, 2 * t + 9)), (3, g + 8, (2 * t + 8, 2 * t + 9))]


def fragment_b(lane):
    """B (16x8, k x n): [(register, (k, k + 1), n)] of this lane."""
    g, t = lane // 4, lane % 4
    return [(0, (2 * t, 2 * t + 1), g), (1, (2 * t + 8, 2 * t + 9), g)]


def fragment_c(lane):
    """C (16x8, float32): [(element, row, col)] of this lane."""
    g, t = lane // 4, lane % 4
    return [(0, g, 2 * t), (1, g, 2 * t + 1), (2, g + 8, 2 * t), (3, g + 8, 2 * t + 1)]


# --- The online softmax (chapter 02): the update every forward kernel applies per K tile, in base e. -----------
def online_softmax_trace(scores, values, tile):
    """One query row: scores x_j and values v_j (one dimension), streamed in tiles of `tile` keys. Returns the state
    after each tile: [(m, l, acc, alpha)], in the order the kernels update it (m_new, p, alpha, l, acc), and O."""
    import math
    m, l, acc, trace = -math.inf, 0.0, 0.0, []
    for start in range(0, len(scores), tile):
        xs, vs = scores[start:start + tile], values[start:start + tile]
        m_new = max(m, max(xs))
        p = [math.exp(x - m_new) for x in xs]
        alpha = math.exp(m - m_new) if m != -math.inf else 0.0
        l = l * alpha + sum(p)
        acc = acc * alpha + sum(pj * vj for pj, vj in zip(p, vs))
        m = m_new
        trace.append((m, l, acc, alpha))
    return trace, acc / l


# --- The backward on tensor cores (chapter 07): its five products and who owns them. -----------------------------
BACKWARD_SOURCE = os.path.join(os.path.dirname(SOURCE), "4_backward_cuda.cu")
BACKWARD_TILES = os.path.join(os.path.dirname(SOURCE), "backward_tiles.cuh")   # what the two passes share


def backward_products(path=BACKWARD_SOURCE):
    """The product table of 4_backward_cuda.cu's header: [(product, A operand, B operand, how B is fetched)], and the
    #define constants of the two passes (WARPS in backward_tiles.cuh, WARP_ROWS)."""
    with open(path) as f:
        text = f.read()
    rows = re.findall(r"^//\s{5}(\S.*?=.*?)\s{2,}(\S.*?)\s{2,}(\S.*?)\s{2,}(ldmatrix\S*)", text, re.MULTILINE)
    constants = defines(SHARED_HEADERS + [path, BACKWARD_TILES])
    return [tuple(x.strip() for x in row) for row in rows], constants


# --- Phase 7's backward (chapter 09): which warpgroup computes which piece of a Q tile's dQ. -----------------------
HOPPER = os.path.join(ROOT, "phase7_hopper")
# Step 6i's rule (6h's at 64-query tiles): pieces of 64 queries (wgmma's M) x DQ_COLUMNS dims. Step 6j's: dQ^T in
# pieces of 64 dims (its M) x DQ_N queries.
DQ_RULES = {"6i": (os.path.join(HOPPER, "6i_wide_q_tiles_cuda.cu"), ("DQ_SPLIT", "DQ_COLUMNS"),
                   ("dq_row0", "dq_column0")),
            "6j": (os.path.join(HOPPER, "6j_transposed_dq_cuda.cu"), ("DIM_PIECES", "DQ_N"),
                   ("dq_dim0", "dq_query0"))}


def dq_pieces(step, D, block_m):
    """The pieces of a BLOCK_M x D tile of dQ that step 6i's or 6j's warpgroups compute, read out of the kernel:
    [(warpgroup, first query, queries, first dim, dims, wgmma M, wgmma N)], from its constexpr lines and the line that
    sets each warpgroup's first row and column. Step 6i's rule at BLOCK_M = 64 is step 6h's split."""
    path, names, starts = DQ_RULES[step]
    with open(path) as f:
        text = f.read()
    constants = defines([path] + SHARED_HEADERS)
    constants.update(D=D, BLOCK_M=block_m, WARPGROUPS=constants["WARPS"] * 32 // constants["WARPGROUP_THREADS"])
    for name in names:
        m = re.search(r"constexpr int %s = ([^;]+);" % name, text)
        if not m:
            raise ValueError("%s: constexpr %s not found" % (path, name))
        constants[name] = evaluate(m.group(1).strip(), constants)
    m = re.search(r"const int %s = ([^,]+), %s = ([^;]+);" % starts, text)
    if not m:
        raise ValueError("%s: the line that sets %s and %s not found" % ((path,) + starts))
    pieces = []
    for warpgroup in range(constants["WARPGROUPS"]):
        first_m, first_n = (evaluate(m.group(i).strip(), constants, warpgroup=warpgroup) for i in (1, 2))
        if step == "6i":   # rows are queries (M = 64), columns are dims
            pieces.append((warpgroup, first_m, constants["TILE_ROWS"], first_n, constants["DQ_COLUMNS"],
                           constants["TILE_ROWS"], constants["DQ_COLUMNS"]))
        else:              # dQ^T: rows are dims (M = 64), columns are queries
            pieces.append((warpgroup, first_n, constants["DQ_N"], first_m, constants["TILE_ROWS"],
                           constants["TILE_ROWS"], constants["DQ_N"]))
    return pieces


def start_matplotlib():
    """The figure scripts' start: matplotlib without a display, or None (and a "skipped" line) when it is not
    installed; the scripts then exit 77, which ctest and the Makefile read as skipped."""
    try:
        import matplotlib
    except ImportError:
        print("skipped: matplotlib is not installed (python3 -m pip install matplotlib)")
        return None
    matplotlib.use("Agg")
    return matplotlib
