// backward_tiles.h - phase 5, step 4 on the CPU: what its two passes share (4_backward_dkdv_cpu.c, the dK/dV pass,
// and 4_backward_dq_cpu.c, the dQ pass): one thread's tiles (the stand-in for a block's shared memory), the staging of
// half rows into float32 tiles, the rounding of P and dS to the half type (both inlined, without branches:
// fa_half_inline.h), P and dS along a row, and the two register-blocked micro-kernels every product of the backward
// runs on, in a block sized for the CPU the program runs on (6 x 16 with AVX2, 8 x 32 with AVX-512); and, for the
// two passes on the CPU's bf16 units (4_backward_dkdv_bf16_cpu.c, 4_backward_dq_bf16_cpu.c, bf16_dot.h), their tiles.
// 4_backward_cpu.c runs the preprocess and the two passes in order.
#ifndef BACKWARD_TILES_H
#define BACKWARD_TILES_H

#include "fa_baselines.h"   // step 4's entry points and tensors

#include "bf16_dot.h"

#include "fa_exp2.h"
#include "fa_half.h"
#include "fa_half_inline.h"   // the half type and float32 both ways, inlined: staging and rounding as vector loops
#include "fa_simd.h"   // FA_SIMD_INLINE: the micro-kernels inlined into each SIMD version of the programs
#include "fa_tensor.h"

#include <stdlib.h>
#include <string.h>

// P = exp(scale S - LSE) = 2^(S * qk_scale - LSE * LOG2E): the forward's base-2 scores, from its natural-log LSE.
// The register block: `group` rows x `cols` columns of float32 sums, sized for the CPU the program runs on
// (block_rows()): 6 x 16 with AVX2, 12 of its 16 registers; 8 x 32 with AVX-512, 16 of its 32. Two FMA units 4 cycles
// deep need 8 independent sums in flight: a 4 x 16 block has exactly 8 and none to spare, and per step loads 2
// vectors and broadcasts 4 values for 8 multiply-adds; 6 x 16, the classic AVX2 SGEMM block (step 5's), loads 2 and
// broadcasts 6 for 12, and leaves 3 registers for the loads and the broadcast. In 512-bit registers 6 x 16 would be
// only 6 sums: the AVX-512 block is 8 x 32, per step 2 vectors loaded and 8 values broadcast for 16 multiply-adds,
// 16 independent sums that cover the FMA's latency with room to spare. Which products each sum adds, and in what
// order, does not depend on the block: the gradients are the same bits at either size.
// Tiles are padded with zeros to a multiple of MAX_VEC columns and of AVX2_ROWS rows (pad_rows()): a whole block of
// either size fits past the last row of a tile.
#define MAX_ROWS 8
#define AVX2_ROWS 6
#define MAX_VEC 32

// Rows in a micro-kernel's block on this CPU (fa_simd.h: the vector width of the version of the hot loops the CPU
// runs); the columns follow from them (block_cols()).
static inline int block_rows(void) { return fa_simd_vector_floats() >= 16 ? MAX_ROWS : AVX2_ROWS; }
static inline int block_cols(int group) { return group == MAX_ROWS ? 32 : 16; }

static inline int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }
static inline int64_t pad_rows(int64_t x) { return round_up(round_up(x, MAX_VEC), AVX2_ROWS); }

// One thread's working memory, the CPU's stand-in for a block's shared memory and its warps' registers. The two
// passes use the same tiles in their own roles: "rows" are the Q tile's queries, "cols" the K/V tile's keys.
typedef struct {
    int64_t M_pad, N_pad, D_pad;   // BLOCK_M, BLOCK_N padded (pad_rows()), D to a multiple of MAX_VEC
    int64_t R_pad;                 // the larger of M_pad and N_pad
    float *q_tile, *do_tile;       // [M_pad, D_pad]  Q and dO rows (half values, exact in float32)
    float *q_t, *do_t;             // [D, M_pad]      the same, transposed: the dQ pass's S^T, dP^T (queries in vectors)
    float *k_tile, *v_tile;        // [N_pad, D_pad]  K and V rows
    float *k_t, *v_t;              // [D, N_pad]      the same, transposed: the dK/dV pass's S, dP (keys in vectors)
    float *lse2, *delta;           // [M_pad]         LSE_i * LOG2E and Delta_i of the Q tile
    float *acc_a, *acc_b;          // [max(M, N)_pad, D_pad]  dK and dV (dK/dV pass), dQ (dQ pass) accumulators
    float *p_tile, *ds_tile;       // [M_pad * N_pad]  S, then P, rounded; dP, then dS, rounded: [queries][keys] in
                                   // the dK/dV pass, transposed ([keys][queries]: S^T, dS^T) in the dQ pass
    float *dq_rows;                // [group, D_pad]  the atomic dQ's share of a group of rows, before it is added
} workspace;

static inline int64_t workspace_floats(int64_t D, int block_m, int block_n) {
    const int64_t M_pad = pad_rows(block_m), N_pad = pad_rows(block_n), D_pad = round_up(D, MAX_VEC);
    const int64_t R_pad = M_pad > N_pad ? M_pad : N_pad;
    return 2 * M_pad * D_pad + 2 * D * M_pad + 2 * N_pad * D_pad + 2 * D * N_pad + 2 * M_pad + 2 * R_pad * D_pad +
           2 * M_pad * N_pad + MAX_ROWS * D_pad;
}

static inline workspace workspace_alloc(int64_t D, int block_m, int block_n) {
    workspace w;
    w.M_pad = pad_rows(block_m), w.N_pad = pad_rows(block_n), w.D_pad = round_up(D, MAX_VEC);
    const int64_t R_pad = w.M_pad > w.N_pad ? w.M_pad : w.N_pad, total = workspace_floats(D, block_m, block_n);
    w.R_pad = R_pad;
    float *next = fa_alloc_floats(total, "the tiles of one backward program");
    for (int64_t x = 0; x < total; x++) next[x] = 0.0f;   // the padding stays zero from here on
    w.q_tile = next, next += w.M_pad * w.D_pad;
    w.do_tile = next, next += w.M_pad * w.D_pad;
    w.q_t = next, next += D * w.M_pad;
    w.do_t = next, next += D * w.M_pad;
    w.k_tile = next, next += w.N_pad * w.D_pad;
    w.v_tile = next, next += w.N_pad * w.D_pad;
    w.k_t = next, next += D * w.N_pad;
    w.v_t = next, next += D * w.N_pad;
    w.lse2 = next, next += w.M_pad;
    w.delta = next, next += w.M_pad;
    w.acc_a = next, next += R_pad * w.D_pad;
    w.acc_b = next, next += R_pad * w.D_pad;
    w.p_tile = next, next += w.M_pad * w.N_pad;
    w.ds_tile = next, next += w.M_pad * w.N_pad;
    w.dq_rows = next;
    return w;
}

// x[0 .. n - 1] rounded to the half type in place: P and dS before their products, where the GPU's mma takes them.
// The dtype is tested once, outside the loops, so that each loop is a vector loop.
FA_SIMD_INLINE void round_to_half(float *x, int64_t n, int dtype) {
    if (dtype == FA_DTYPE_BF16)
        for (int64_t i = 0; i < n; i++) x[i] = fa_round_to_bf16(x[i]);
    else
        for (int64_t i = 0; i < n; i++) x[i] = fa_round_to_fp16(x[i]);
}

// Rows first .. first + count - 1 of a [S, D] half tensor (its head's start, row stride, d stride) into float32
// tiles: `rows` as [count][D_pad] and, when `cols` is not NULL, transposed as [D][cols_pad]. Rows past `exist` are
// zeros, as the GPU's loads make them. The conversion is fa_half_to_float_inline() (fa_half_inline.h): where d is
// contiguous, the loop over a row is a vector loop.
FA_SIMD_INLINE void stage_rows(const uint16_t *x, fa_strides strides, int dtype, int64_t first, int64_t count,
                               int64_t exist, int64_t D, int64_t D_pad, float *rows, float *cols, int64_t cols_pad) {
    for (int64_t r = 0; r < count; r++) {
        const uint16_t *x_r = x + (first + r) * strides.s;
        float *row = rows + r * D_pad;
        if (first + r >= exist)
            for (int64_t d = 0; d < D; d++) row[d] = 0.0f;
        else if (strides.d == 1 && dtype == FA_DTYPE_BF16)
            for (int64_t d = 0; d < D; d++) row[d] = fa_half_to_float_inline(x_r[d], FA_DTYPE_BF16);
        else if (strides.d == 1)
            for (int64_t d = 0; d < D; d++) row[d] = fa_half_to_float_inline(x_r[d], FA_DTYPE_FP16);
        else
            for (int64_t d = 0; d < D; d++) row[d] = fa_half_to_float_inline(x_r[d * strides.d], dtype);
        if (cols)
            for (int64_t d = 0; d < D; d++) cols[d * cols_pad + r] = row[d];
    }
}

// P and dS along one row of a tile pair, in place: s holds n scores (a row of S, or of S^T in the dQ pass) and
// becomes P = 2^(s * qk_scale - LSE_i * LOG2E); dp holds dP and becomes dS = P * (dP - Delta_i), from the float32 P.
// Positions first .. end - 1 are seen; the others are masked (a key past S_k, a query past S_q, a key after the
// query): their score is -inf, and 2^-inf = 0. lse2 and delta are read at j * step: step 0 where the row is one
// query's (one value for the row), 1 where it is one key's (a value per query); every call passes it as a literal.
// Three loops, so that the two that compute run in whole vectors: a test of j inside them would compare integer
// vectors, which the "fma" version of FA_SIMD_CLONES has only in 128 bits, and the whole loop would run in those.
FA_SIMD_INLINE void p_and_ds(float *s, float *dp, int64_t n, int64_t first, int64_t end, float qk_scale,
                             const float *lse2, const float *delta, int64_t step) {
#pragma omp simd
    for (int64_t j = 0; j < n; j++) s[j] = s[j] * qk_scale - lse2[j * step];   // the base-2 score
    for (int64_t j = 0; j < first && j < n; j++) s[j] = -INFINITY;
    for (int64_t j = end > first ? end : first; j < n; j++) s[j] = -INFINITY;
#pragma omp simd
    for (int64_t j = 0; j < n; j++) {
        const float p = fa_exp2(s[j]);
        dp[j] = p * (dp[j] - delta[j * step]);
        s[j] = p;
    }
}

// The two micro-kernels. As in step 1, the group x cols sums are a small local array that GCC and Clang keep in
// vector registers because the row loop is unrolled completely and the column loop vectorised; for that the compiler
// must know the block: every call passes it as literals, 6 x 16 or 8 x 32 (along_d() and along_rows() below pick the
// call for the group block_rows() chose), so that each inlined copy is a block of fixed size. Every product of the
// two passes is one of the two, as every mma of the CUDA twin is in mma_along_d() or mma_along_rows().
//
// Sums along d: out[r][jj] = sum_d a[r][d] * b_t[d][jj] for `group` rows of a row-major tile a ([rows][D_pad]) and
// `cols` columns of a transposed tile b_t ([D][b_pad]), written to out ([group][out_pad]). Per d it loads `cols`
// values of b_t once and `group` values of a, and does group * cols multiply-adds with them. The sums start from
// zero, the block's only: clearing the whole MAX_ROWS x MAX_VEC array took a 1 KiB memset per call.
FA_SIMD_INLINE void along_d_micro_kernel(int group, int cols, const float *a, int64_t D_pad, const float *b_t,
                                         int64_t b_pad, int64_t D, float *out, int64_t out_pad) {
    float sum[MAX_ROWS][MAX_VEC];
    for (int r = 0; r < group; r++)
        for (int jj = 0; jj < cols; jj++) sum[r][jj] = 0.0f;
    for (int64_t d = 0; d < D; d++) {
        const float *b_d = b_t + d * b_pad;
#pragma GCC unroll 8
        for (int r = 0; r < group; r++) {
            const float a_rd = a[r * D_pad + d];
#pragma omp simd
            for (int jj = 0; jj < cols; jj++) sum[r][jj] += a_rd * b_d[jj];
        }
    }
    for (int r = 0; r < group; r++)
        for (int jj = 0; jj < cols; jj++) out[r * out_pad + jj] = sum[r][jj];
}

// Sums along the rows of a tile: acc[r][dd] += sum_i a(r, i) * b[i][dd] over the first n rows of b ([rows][D_pad],
// `cols` dims of it), for `group` rows of acc ([group][D_pad]). a(r, i) is a[r * a_row + i * a_step]: a tile read as
// it is (a_row = its row length, a_step = 1) or as its transpose (a_row = 1, a_step = its row length), since each
// of its values is broadcast alone: the rounded P and dS are read as P^T and dS^T that way, and the other way round.
// The sums start from acc and add the rows in order: dQ's sum over the K tiles keeps one fixed order.
FA_SIMD_INLINE void along_rows_micro_kernel(int group, int cols, const float *a, int64_t a_row, int64_t a_step, int n,
                                            const float *b, int64_t D_pad, float *acc) {
    float sum[MAX_ROWS][MAX_VEC];
    for (int r = 0; r < group; r++)
        for (int dd = 0; dd < cols; dd++) sum[r][dd] = acc[r * D_pad + dd];
    for (int i = 0; i < n; i++) {
        const float *b_i = b + i * D_pad;
#pragma GCC unroll 8
        for (int r = 0; r < group; r++) {
            const float a_ri = a[r * a_row + i * a_step];
#pragma omp simd
            for (int dd = 0; dd < cols; dd++) sum[r][dd] += a_ri * b_i[dd];
        }
    }
    for (int r = 0; r < group; r++)
        for (int dd = 0; dd < cols; dd++) acc[r * D_pad + dd] = sum[r][dd];
}

// The micro-kernels at the block block_rows() chose: `group` is known only at run time, so each picks between two
// calls that name the block as literals (the branch costs nothing beside the block's multiply-adds).
FA_SIMD_INLINE void along_d(int group, const float *a, int64_t D_pad, const float *b_t, int64_t b_pad, int64_t D,
                            float *out, int64_t out_pad) {
    if (group == MAX_ROWS) along_d_micro_kernel(MAX_ROWS, 32, a, D_pad, b_t, b_pad, D, out, out_pad);
    else along_d_micro_kernel(AVX2_ROWS, 16, a, D_pad, b_t, b_pad, D, out, out_pad);
}

FA_SIMD_INLINE void along_rows(int group, const float *a, int64_t a_row, int64_t a_step, int n, const float *b,
                               int64_t D_pad, float *acc) {
    if (group == MAX_ROWS) along_rows_micro_kernel(MAX_ROWS, 32, a, a_row, a_step, n, b, D_pad, acc);
    else along_rows_micro_kernel(AVX2_ROWS, 16, a, a_row, a_step, n, b, D_pad, acc);
}

// The two passes (each one parallel loop over its programs, the CUDA grid of its kernel) and the preprocess.
void backward_tc_dkdv_cpu(const fa_shape *shape, int dtype, int block_m, int block_n, const tc_backward_tensors *t,
                          int atomic_dq);
void backward_tc_dq_cpu(const fa_shape *shape, int dtype, int block_m, int block_n, const tc_backward_tensors *t);

// The bf16 passes: every product a 32 x 32 block of bf16_dot_block() (bf16_dot.h), on tiles of bf16 bits staged once
// per pass for every head (the tiles that stream past a program are read again by every program of their head;
// staged once, each program's loop only points into them). Tiles are padded with zeros to BF16_DOT_BLOCK rows.
typedef struct {
    bf16_dot_unit unit;
    int64_t M_pad, N_pad, D_pad;   // BLOCK_M, BLOCK_N and D rounded up to BF16_DOT_BLOCK
    float *scores, *grads;         // [M_pad * N_pad]  S then P, dP then dS: [keys][queries] in the dK/dV pass (S^T),
                                   // [queries][keys] in the dQ pass
    uint16_t *p_bits, *ds_bits;    // the same, rounded to bf16, as bits: the rows of dV's, dK's and dQ's blocks
    uint16_t *ds_rows;             // the atomic dQ: dS by queries, [M_pad][N_pad]
    float *lse2, *delta;           // [M_pad]  LSE_i * LOG2E and Delta_i of the Q tile
    float *acc_a, *acc_b;          // [max(M_pad, N_pad)][D_pad]  dK and dV, or dQ
    float *dq_rows;                // [BF16_DOT_BLOCK][D_pad]  the atomic dQ's share of 32 queries
} bf16_workspace;

static inline int64_t bf16_workspace_bytes(int64_t D, int block_m, int block_n) {
    const int64_t M_pad = round_up(block_m, BF16_DOT_BLOCK), N_pad = round_up(block_n, BF16_DOT_BLOCK);
    const int64_t D_pad = round_up(D, BF16_DOT_BLOCK), R_pad = M_pad > N_pad ? M_pad : N_pad;
    return (2 * M_pad * N_pad + 2 * M_pad + 2 * R_pad * D_pad + BF16_DOT_BLOCK * D_pad) * (int64_t)sizeof(float) +
           3 * M_pad * N_pad * (int64_t)sizeof(uint16_t);
}

static inline bf16_workspace bf16_workspace_alloc(bf16_dot_unit unit, int64_t D, int block_m, int block_n) {
    bf16_workspace w;
    w.unit = unit;
    w.M_pad = round_up(block_m, BF16_DOT_BLOCK), w.N_pad = round_up(block_n, BF16_DOT_BLOCK);
    w.D_pad = round_up(D, BF16_DOT_BLOCK);
    const int64_t R_pad = w.M_pad > w.N_pad ? w.M_pad : w.N_pad, tile = w.M_pad * w.N_pad;
    const int64_t floats = (bf16_workspace_bytes(D, block_m, block_n) + 3) / 4;
    float *next = fa_alloc_floats(floats, "the tiles of one bf16 backward program");
    for (int64_t x = 0; x < floats; x++) next[x] = 0.0f;
    w.scores = next, next += tile;
    w.grads = next, next += tile;
    w.lse2 = next, next += w.M_pad;
    w.delta = next, next += w.M_pad;
    w.acc_a = next, next += R_pad * w.D_pad;
    w.acc_b = next, next += R_pad * w.D_pad;
    w.dq_rows = next, next += BF16_DOT_BLOCK * w.D_pad;
    uint16_t *bits = (uint16_t *)next;
    w.p_bits = bits, bits += tile;
    w.ds_bits = bits, bits += tile;
    w.ds_rows = bits;
    return w;
}

// One tensor's tiles for every head, in one order (bf16_dot_stage_tiles()): tile t of head bh starts at
// bf16_tile(&staged, bh, t). The dK/dV pass stages Q and dO (tiles of BLOCK_M) and K and V (BLOCK_N); so does the
// dQ pass, in the orders it reads them.
typedef struct {
    uint16_t *bits;
    int64_t tile_values, head_values;   // padded * D_pad; the head's tiles
} bf16_staged;

// The values one head of a tensor of S rows takes staged in tiles of `block` rows (each padded to BF16_DOT_BLOCK).
static inline int64_t bf16_staged_head_values(int64_t S, int block, int64_t D_pad) {
    return (S + block - 1) / block * round_up(block, BF16_DOT_BLOCK) * D_pad;
}

static inline bf16_staged bf16_stage(const fa_shape *shape, const void *x, fa_strides strides, int64_t S, int block,
                                     int64_t D_pad, bf16_tile_order order) {
    const int64_t padded = round_up(block, BF16_DOT_BLOCK);
    bf16_staged st = {NULL, padded * D_pad, bf16_staged_head_values(S, block, D_pad)};
    const int64_t BH = shape->B * shape->H;
    st.bits = (uint16_t *)fa_alloc_floats((BH * st.head_values + 1) / 2, "a bf16 tensor staged in tiles");
#pragma omp parallel for schedule(static)
    for (int64_t bh = 0; bh < BH; bh++) {
        const uint16_t *head = (const uint16_t *)x + (bh / shape->H) * strides.b + (bh % shape->H) * strides.h;
        bf16_dot_stage_tiles(head, strides, S, shape->D, block, padded, D_pad, order, st.bits + bh * st.head_values);
    }
    return st;
}

static inline const uint16_t *bf16_tile(const bf16_staged *st, int64_t bh, int64_t tile) {
    return st->bits + bh * st->head_values + tile * st->tile_values;
}

// A row of P or dS, rounded to bf16, as bits: the rounding of round_to_half(), and the top half of the float32.
FA_SIMD_INLINE void round_to_bf16_bits(const float *x, uint16_t *bits, int64_t n) {
    for (int64_t i = 0; i < n; i++) bits[i] = (uint16_t)(fa_float_bits(fa_round_to_bf16(x[i])) >> 16);
}

void backward_bf16_dkdv_cpu(const fa_shape *shape, int block_m, int block_n, const tc_backward_tensors *t,
                            int atomic_dq, bf16_dot_unit unit);
void backward_bf16_dq_cpu(const fa_shape *shape, int block_m, int block_n, const tc_backward_tensors *t,
                          bf16_dot_unit unit);

#endif
