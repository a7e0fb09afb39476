// 5_backward_f32_cpu.c - phase 5, step 5, on the CPU: step 4's register-tiled backward in float32.
//
// What it changes from step 4's CPU twin (phase5_tensor_cores/4_backward_cpu.c): the inputs are float32 (phase 4's
//   backward_tensors) and nothing is rounded to a half type: P and dS enter dV, dK and dQ as the float32 values they
//   are, as in phase 4. And one pass instead of two: a CPU thread owns a whole head, runs its K/V tiles one after
//   the other, and adds each tile's share of dQ into dQ in place, in the order a separate dQ pass would (keys in
//   order, from the running sum), so it computes S and dP once per tile pair instead of twice: five products where
//   step 4 computes seven (kv_tile_program). S and dP are computed by queries (S = Q K^T, a vector of keys at a
//   time), and dV += P^T dO, dK += dS^T Q read P and dS by columns; the products are step 4's two register-blocked
//   micro-kernels (along_d_micro_kernel, along_rows_micro_kernel), 6 rows x 16 columns of sums in vector registers
//   with AVX2 and 6 x 32 with AVX-512, picked for the CPU the program runs on (block_cols()). Three things a CPU
//   does better its own way: P and dS are formed from a block of S and of dP while its sums are still in registers
//   (p_micro_kernel, ds_micro_kernel), with the exponential's clamps hidden from the compiler (fa_exp2_clamped);
//   dQ's sums start from dQ's own rows and go back there, without a copy; and the tiles start on cache lines, with
//   rows of keys a whole number of lines long (workspace). Two details come
//   from phase 4 instead (phase4_backward/backward_dkdv_cpu.c): Q is staged times qk_scale, so that a score is
//   the base-2 score the forward computed, and the row's LSE is taken in base 2 as hi + lo from LSE and its residual
//   (lse_to_base2), so that the largest p of a row comes back as accurately as the forward stored it. Delta is
//   phase 4's preprocess (backward_preprocess_cpu()). This is the CPU's fast float32 backward: the one to compare
//   with phase 4's, which computes one row at a time, and with what a CPU library does. It has no CUDA twin: on the
//   GPU the float32 backward is phase 4's, and the tiled one is step 4, on tensor cores (whose blocks of one head
//   run at the same time, so dQ needs its own pass or atomics there).
// Diff:      diff -u phase5_tensor_cores/4_backward_dkdv_cpu.c phase5_tensor_cores/5_backward_f32_cpu.c
// Run:       build/bin/phase5_tensor_cores --impl cpu --step 5 --B 1 --H 8 --S 2048 --D 64 --threads 2 --dq both
#include "register_tiles.h"

#include "fa_baselines.h"   // backward_preprocess_cpu (phase 4's preprocess)

#include "fa_exp2.h"
#include "fa_math.h"   // lse_to_base2
#include "fa_tensor.h"
#include "fa_simd.h"   // FA_SIMD_CLONES: the hot loops in the CPU's widest vectors
#include "fa_contract.h"

#include <stdint.h>
#include <stdlib.h>

// P = exp(scale S - LSE) = 2^(S * qk_scale - LSE * LOG2E): the forward's base-2 scores, from its natural-log LSE
// (and its residual) as hi + lo.
// The register block: ROWS rows x `cols` columns, sized to 12 vector registers of sums on the CPU the program runs
// on: 6 x 16 in AVX2 (8 floats a register, 12 of its 16 registers), 6 x 32 in AVX-512 (16 floats a register, 12 of
// its 32). Each step of a micro-kernel loads `cols` values once and multiplies them by ROWS broadcast values, so more
// rows mean fewer loads per multiply-add; with 8 sums (a 4 x 16 block) AVX2's two FMA units, 4 cycles deep, have
// exactly as many independent sums as they can keep in flight, and none to spare. 6 x 16 is the classic AVX2 SGEMM
// block: 12 sums, two registers for the loaded values and one for the broadcast. In 512-bit registers the same
// 6 x 16 is only 6 sums; AVX-512 widens the columns, not the rows (12 x 16 would also be 12 registers): the row
// groups, their padding and dQ's rows stay as they are, each step loads 2 vectors and broadcasts 6 values for 12
// multiply-adds (12 x 16 broadcasts 12), and D = 64 or 128 and BLOCK_M, BLOCK_N = 64 or 128 are whole 32-column
// blocks, where a 64-row tile in groups of 12 would be padded to 72 rows. Which products each sum adds, and in what
// order, does not depend on the block: the gradients are the same bits at either width.
// Tiles are padded with zeros to a multiple of MAX_VEC columns and of ROWS rows (M_pad, N_pad below).
#define ROWS 6
#define MAX_VEC 32   // the widest block's columns
#define LINE 16      // floats in a 64-byte cache line

// Columns in a micro-kernel's block on this CPU: 12 vector registers of sums (fa_simd.h: the vector width of the
// version of the hot loops the CPU runs).
static int block_cols(void) { return fa_simd_vector_floats() >= 16 ? 32 : 16; }

static int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// One thread's working memory, the CPU's stand-in for a block's shared memory and its warps' registers: one K/V
// tile, staged once, and the Q tile of the moment. Every tile is padded with zeros to a multiple of MAX_VEC columns
// (and of ROWS rows), and starts on a cache line, as does every row of the tiles whose rows are keys (N_pad is a
// multiple of 48, of ROWS and of LINE): a vector the micro-kernels load never straddles two lines, which would cost
// a second load. (malloc aligns to 16 bytes only, and glibc puts a large block 16 bytes past a page boundary; a row
// of 132 keys, 128 padded to ROWS only, would start on a line one row in four.)
typedef struct {
    int64_t M_pad, N_pad, D_pad;   // BLOCK_M, BLOCK_N, D rounded up to a multiple of MAX_VEC (and ROWS; N_pad of 48)
    float *q_tile, *do_tile;       // [M_pad, D_pad]  Q (times qk_scale) and dO rows
    float *k_tile;                 // [N_pad, D_pad]  K rows
    float *k_t, *v_t;              // [D, N_pad]      K and V, transposed: S and dP sum along d, keys in vectors
    float *lse2_hi, *lse2_lo;      // [M_pad]         LSE_i * LOG2E = hi + lo (lse_to_base2, fa_math.h)
    float *delta;                  // [M_pad]         Delta_i of the Q tile
    float *dk_acc, *dv_acc;        // [N_pad, D_pad]  dK and dV of the K/V tile, summed over the Q tiles
    float *p_tile, *ds_tile;       // [M_pad, N_pad]  S, then P; dP, then dS (the GPU: shared memory)
    float *dq_rows;                // [ROWS, D_pad]   dQ of ROWS queries while this tile's share is added
    float exp2_lowest, exp2_highest;   // -127 and 127, fa_exp2's clamps, read from here: p_micro_kernel
    float *allocation;             // what free() takes
} workspace;

static int64_t keys_padded(int block_n) { return round_up(round_up(block_n, MAX_VEC), 3 * LINE); }

// Every tile but the last three is a whole number of cache lines (D_pad is a multiple of MAX_VEC, N_pad of LINE),
// so each starts on a line when the first does; LINE floats more leave room to move the first to one.
static int64_t workspace_floats(int64_t D, int block_m, int block_n) {
    const int64_t M_pad = round_up(round_up(block_m, MAX_VEC), ROWS);
    const int64_t N_pad = keys_padded(block_n);
    const int64_t D_pad = round_up(D, MAX_VEC);
    return 2 * M_pad * D_pad + 3 * N_pad * D_pad + 2 * D * N_pad + 2 * M_pad * N_pad + ROWS * D_pad + 3 * M_pad + LINE;
}

int64_t flash_backward_regtile_cpu_workspace_bytes(int64_t D, int block_m, int block_n) {
    return workspace_floats(D, block_m, block_n) * (int64_t)sizeof(float);
}

static workspace workspace_alloc(int64_t D, int block_m, int block_n) {
    workspace w;
    w.M_pad = round_up(round_up(block_m, MAX_VEC), ROWS), w.N_pad = keys_padded(block_n);
    w.D_pad = round_up(D, MAX_VEC);
    w.exp2_lowest = -127.0f, w.exp2_highest = 127.0f;
    const int64_t total = workspace_floats(D, block_m, block_n);
    w.allocation = fa_alloc_floats(total, "the tiles of one backward program");
    for (int64_t x = 0; x < total; x++) w.allocation[x] = 0.0f;   // the padding stays zero from here on
    float *next = w.allocation + (LINE - (uintptr_t)w.allocation / sizeof(float) % LINE) % LINE;   // to a line
    w.q_tile = next, next += w.M_pad * w.D_pad;
    w.do_tile = next, next += w.M_pad * w.D_pad;
    w.k_tile = next, next += w.N_pad * w.D_pad;
    w.k_t = next, next += D * w.N_pad;
    w.v_t = next, next += D * w.N_pad;
    w.dk_acc = next, next += w.N_pad * w.D_pad;
    w.dv_acc = next, next += w.N_pad * w.D_pad;
    w.p_tile = next, next += w.M_pad * w.N_pad;
    w.ds_tile = next, next += w.M_pad * w.N_pad;
    w.dq_rows = next, next += ROWS * w.D_pad;
    w.lse2_hi = next, next += w.M_pad;
    w.lse2_lo = next, next += w.M_pad;
    w.delta = next;
    return w;
}

// Rows first .. first + count - 1 of a [S, D] float32 tensor (its head's start, row stride, d stride), times
// `factor`, into tiles: `rows` as [count][D_pad] when it is not NULL, and `cols`, transposed, as [D][cols_pad] when
// it is not NULL. Rows past `exist` are zeros, as the GPU's loads make them. Where d is contiguous, the loop over d
// is a vector copy.
static void stage_rows(const float *x, fa_strides strides, float factor, int64_t first, int64_t count, int64_t exist,
                       int64_t D, int64_t D_pad, float *rows, float *cols, int64_t cols_pad) {
    for (int64_t r = 0; r < count; r++) {
        const float *x_r = x + (first + r) * strides.s;
        const int real = first + r < exist;
        if (rows) {
            if (strides.d == 1)
                for (int64_t d = 0; d < D; d++) rows[r * D_pad + d] = real ? x_r[d] * factor : 0.0f;
            else
                for (int64_t d = 0; d < D; d++) rows[r * D_pad + d] = real ? x_r[d * strides.d] * factor : 0.0f;
        }
        if (cols)
            for (int64_t d = 0; d < D; d++) cols[d * cols_pad + r] = real ? x_r[d * strides.d] * factor : 0.0f;
    }
}

// The two micro-kernels. As in step 1, the ROWS x cols sums are a small local array that GCC and Clang keep in vector
// registers because the row loop is unrolled completely and the column loop vectorised; for that the compiler must
// know `cols`: every call passes it as a literal, 16 or 32 (p_and_ds_block() and along_rows() below pick the call for
// the width block_cols() chose), so that each inlined copy is a block of fixed size. They must be inlined into
// kv_tile_program, which FA_SIMD_CLONES compiles once per instruction set: a micro-kernel the compiler leaves as a
// function of its own is compiled once, for the build's baseline (SSE2), and runs there from every clone (at 6 rows
// GCC stopped inlining them by itself, and the backward ran far slower: hence FA_SIMD_INLINE, fa_simd.h).
// Every product of this file is one of the two, as every mma of the CUDA twin is in mma_along_d() or mma_along_rows().
//
// Sums along d: sum[r][jj] = sum_d a[r][d] * b_t[d][jj] for ROWS rows of a row-major tile a ([rows][D_pad]) and
// `cols` columns of a transposed tile b_t ([D][b_pad]), left in `sum` for the caller to finish while they are in
// registers (p_micro_kernel(), ds_micro_kernel()). Per d it loads `cols` values of b_t once and ROWS values of a, and
// does ROWS * cols multiply-adds with them. The sums start from the first product (d = 0), not from zeros: the same
// values, without clearing ROWS * cols floats first.
FA_SIMD_INLINE void along_d_micro_kernel(int cols, const float *a, int64_t D_pad, const float *b_t, int64_t b_pad,
                                         int64_t D, float sum[ROWS][MAX_VEC]) {
#pragma GCC unroll 8
    for (int r = 0; r < ROWS; r++) {
        const float a_r0 = a[r * D_pad];
#pragma omp simd
        for (int jj = 0; jj < cols; jj++) sum[r][jj] = a_r0 * b_t[jj];
    }
    for (int64_t d = 1; d < D; d++) {
        const float *b_d = b_t + d * b_pad;
#pragma GCC unroll 8
        for (int r = 0; r < ROWS; r++) {
            const float a_rd = a[r * D_pad + d];
#pragma omp simd
            for (int jj = 0; jj < cols; jj++) sum[r][jj] += a_rd * b_d[jj];
        }
    }
}

// ROWS x cols of P, from S = (qk_scale Q) K^T summed in registers: p = 2^((s - hi) - lo) on the way out. The clamps
// of the exponential come from the workspace (fa_exp2_clamped(), fa_exp2.h, says why): with fa_exp2's constants in
// sight, GCC 12 computes each exponential with twice the instructions, close to a tenth of this backward's time.
FA_SIMD_INLINE void p_micro_kernel(int cols, const workspace *w, const float *q, const float *k_t, int64_t D,
                                   const float *hi, const float *lo, float *p) {
    float sum[ROWS][MAX_VEC];
    along_d_micro_kernel(cols, q, w->D_pad, k_t, w->N_pad, D, sum);
    const float lowest = w->exp2_lowest, highest = w->exp2_highest;
#pragma GCC unroll 8
    for (int r = 0; r < ROWS; r++) {
        const float hi_r = hi[r], lo_r = lo[r];
#pragma omp simd
        for (int jj = 0; jj < cols; jj++)
            p[r * w->N_pad + jj] = fa_exp2_clamped((sum[r][jj] - hi_r) - lo_r, lowest, highest);
    }
}

// ROWS x cols of dS, from dP = dO V^T summed in registers: dS = P (dP - Delta) on the way out, with the block of P
// p_micro_kernel() has just stored (in L1 still).
FA_SIMD_INLINE void ds_micro_kernel(int cols, const workspace *w, const float *dout, const float *v_t, int64_t D,
                                    const float *delta, const float *p, float *ds) {
    float sum[ROWS][MAX_VEC];
    along_d_micro_kernel(cols, dout, w->D_pad, v_t, w->N_pad, D, sum);
#pragma GCC unroll 8
    for (int r = 0; r < ROWS; r++) {
        const float delta_r = delta[r];
#pragma omp simd
        for (int jj = 0; jj < cols; jj++) ds[r * w->N_pad + jj] = p[r * w->N_pad + jj] * (sum[r][jj] - delta_r);
    }
}

// Sums along the rows of a tile: acc[r][dd] += sum_i a(r, i) * b[i][dd] over the first n rows of b ([rows][D_pad],
// `cols` dims of it), for ROWS rows of acc ([ROWS][D_pad]). a(r, i) is a[r * a_row + i * a_step]: a tile read as it is
// (dS, a_row = N_pad, a_step = 1) or as its transpose (P^T and dS^T read from P and dS, a_row = 1, a_step = N_pad),
// since each of its values is broadcast alone. acc's rows are acc_row floats apart: a tile's, or dQ's own rows. The
// sums start from acc and add the rows in order: dQ's sum over the K tiles keeps one fixed order.
FA_SIMD_INLINE void along_rows_micro_kernel(int cols, const float *a, int64_t a_row, int64_t a_step, int n,
                                            const float *b, int64_t D_pad, float *acc, int64_t acc_row) {
    float sum[ROWS][MAX_VEC];
    for (int r = 0; r < ROWS; r++)
        for (int dd = 0; dd < cols; dd++) sum[r][dd] = acc[r * acc_row + dd];
    for (int i = 0; i < n; i++) {
        const float *b_i = b + i * D_pad;
#pragma GCC unroll 8
        for (int r = 0; r < ROWS; r++) {
            const float a_ri = a[r * a_row + i * a_step];
#pragma omp simd
            for (int dd = 0; dd < cols; dd++) sum[r][dd] += a_ri * b_i[dd];
        }
    }
    for (int r = 0; r < ROWS; r++)
        for (int dd = 0; dd < cols; dd++) acc[r * acc_row + dd] = sum[r][dd];
}

// The micro-kernels at the width block_cols() chose: `cols` is known only at run time, so each picks between two
// calls that name it as a literal (the branch costs nothing beside the block's ROWS * cols * D multiply-adds).
// p_and_ds_block: the block of P and of dS at queries i0 .. i0 + ROWS - 1, keys j0 .. j0 + cols - 1 of the tile pair.
FA_SIMD_INLINE void p_and_ds_block(int cols, const workspace *w, int i0, int j0, int64_t D) {
    const float *q = w->q_tile + i0 * w->D_pad, *dout = w->do_tile + i0 * w->D_pad;
    const float *k_t = w->k_t + j0, *v_t = w->v_t + j0;
    float *p = w->p_tile + i0 * w->N_pad + j0, *ds = w->ds_tile + i0 * w->N_pad + j0;
    if (cols == 32) {
        p_micro_kernel(32, w, q, k_t, D, w->lse2_hi + i0, w->lse2_lo + i0, p);
        ds_micro_kernel(32, w, dout, v_t, D, w->delta + i0, p, ds);
    } else {
        p_micro_kernel(16, w, q, k_t, D, w->lse2_hi + i0, w->lse2_lo + i0, p);
        ds_micro_kernel(16, w, dout, v_t, D, w->delta + i0, p, ds);
    }
}

FA_SIMD_INLINE void along_rows(int cols, const float *a, int64_t a_row, int64_t a_step, int n, const float *b,
                               int64_t D_pad, float *acc, int64_t acc_row) {
    if (cols == 32) along_rows_micro_kernel(32, a, a_row, a_step, n, b, D_pad, acc, acc_row);
    else along_rows_micro_kernel(16, a, a_row, a_step, n, b, D_pad, acc, acc_row);
}

// 1. Delta_i = sum_d dO_id O_id: phase 4's preprocess, backward_preprocess_cpu(), which also sets dQ = 0.

// 2. One K/V tile of one head: what one block of the dK/dV kernel does, and on the CPU dQ's share too. Keys
// k_start .. k_start + BLOCK_N - 1, against every Q tile that sees them, in order. The GPU computes dQ in a pass of
// its own (or adds it atomically) because its blocks of one head run at the same time; a CPU thread can own a whole
// head, run its K/V tiles one after the other, and add each one's share into dQ in place: the same sum in the same
// order as a separate dQ pass (keys in order, from the running sum), without computing S and dP a second time (five
// products per tile pair instead of seven). With atomic_dq the tiles of one head run on any thread, and each adds its
// share from zero, atomically, in an order that changes from run to run.
FA_SIMD_CLONES
static void kv_tile_program(const fa_shape *shape, int BLOCK_M, int BLOCK_N, int cols, int64_t bh, int64_t k_start,
                            const backward_tensors *t, int atomic_dq, workspace *w) {
    const int64_t S_q = shape->Sq, S_k = shape->Sk, D = shape->D, N_pad = w->N_pad, D_pad = w->D_pad;
    const float scale = shape->scale, qk_scale = scale * LOG2E;
    const int64_t b = bh / shape->H, h = bh % shape->H;
    const float *q = t->q + b * t->q_strides.b + h * t->q_strides.h;
    const float *k = t->k + b * t->k_strides.b + h * t->k_strides.h;
    const float *v = t->v + b * t->v_strides.b + h * t->v_strides.h;
    const float *dout = t->dout + b * t->do_strides.b + h * t->do_strides.h;
    const float *lse = t->lse + bh * S_q, *delta = t->delta + bh * S_q;
    const float *residual = t->lse_residual ? t->lse_residual + bh * S_q : NULL;
    float *dq = t->dq + b * t->dq_strides.b + h * t->dq_strides.h;
    const int keys = (int)(S_k - k_start < BLOCK_N ? S_k - k_start : BLOCK_N);   // key rows in the tile
    const int keys_pad = (int)round_up(keys, cols);   // whole blocks of keys
    float *p = w->p_tile, *ds = w->ds_tile;   // [M_pad][N_pad]

    stage_rows(k, t->k_strides, 1.0f, k_start, BLOCK_N, S_k, D, D_pad, w->k_tile, w->k_t, N_pad);
    stage_rows(v, t->v_strides, 1.0f, k_start, BLOCK_N, S_k, D, D_pad, NULL, w->v_t, N_pad);
    for (int64_t x = 0; x < N_pad * D_pad; x++) w->dk_acc[x] = w->dv_acc[x] = 0.0f;

    // Causal: the Q tiles that end before this K/V tile starts see none of its keys.
    const int64_t n_q_tiles = (S_q + BLOCK_M - 1) / BLOCK_M;
    for (int64_t q_tile = shape->causal ? k_start / BLOCK_M : 0; q_tile < n_q_tiles; q_tile++) {
        const int64_t q_start = q_tile * BLOCK_M;
        const int stage = causal_tile_stage(shape->causal, q_start, k_start, BLOCK_M, BLOCK_N, S_q, S_k);
        if (stage == TILE_FUTURE) continue;
        const int rows = (int)(S_q - q_start < BLOCK_M ? S_q - q_start : BLOCK_M);
        stage_rows(q, t->q_strides, qk_scale, q_start, BLOCK_M, S_q, D, D_pad, w->q_tile, NULL, 0);
        stage_rows(dout, t->do_strides, 1.0f, q_start, BLOCK_M, S_q, D, D_pad, w->do_tile, NULL, 0);
        for (int i = 0; i < BLOCK_M; i++) {
            lse_to_base2(i < rows ? lse[q_start + i] : 0.0f, i < rows && residual ? residual[q_start + i] : 0.0f,
                         &w->lse2_hi[i], &w->lse2_lo[i]);
            w->delta[i] = i < rows ? delta[q_start + i] : 0.0f;
        }

        // P and dS, ROWS queries x `cols` keys at a time: S_ij = (qk_scale Q_i) . K_j becomes P, dP_ij = dO_i . V_j
        // becomes dS = P * (dP - Delta) (p_and_ds_block). The last group may run past the tile's queries, the last
        // block past its keys: what is there is cleared just below.
        const int rows_pad = (int)round_up(rows, ROWS);
        for (int i0 = 0; i0 < rows; i0 += ROWS)
            for (int j0 = 0; j0 < keys_pad; j0 += cols) p_and_ds_block(cols, w, i0, j0, D);
        // What a query does not see has P = dS = 0: keys past S_k, on a diagonal tile the keys after the query, and
        // every key for a row past S_q.
        for (int i = 0; i < rows_pad; i++) {
            const int64_t row = q_start + i;
            int j_end = stage == TILE_DIAGONAL && row - k_start + 1 < keys ? (int)(row - k_start + 1) : keys;
            if (i >= rows || j_end < 0) j_end = 0;   // a row before the tile's first key sees none of it
            for (int j = j_end; j < keys_pad; j++) p[i * N_pad + j] = ds[i * N_pad + j] = 0.0f;
        }

        // dV_c += sum_i P_ic dO_i and dK_c += sum_i dS_ic (qk_scale Q_i): ROWS keys x `cols` dims at a time, P and dS
        // read by columns (as P^T and dS^T), the queries in order. The last group of keys may run past the tile's:
        // their P and dS are 0 and their dK and dV are never stored. The last block of dims may run past D into
        // D_pad's zeros.
        for (int c0 = 0; c0 < keys; c0 += ROWS)
            for (int64_t d0 = 0; d0 < D; d0 += cols) {
                along_rows(cols, p + c0, 1, N_pad, rows, w->do_tile + d0, D_pad, w->dv_acc + c0 * D_pad + d0, D_pad);
                along_rows(cols, ds + c0, 1, N_pad, rows, w->q_tile + d0, D_pad, w->dk_acc + c0 * D_pad + d0, D_pad);
            }

        // This tile's share of dQ: dQ_i += sum_c dS_ic K_c, ROWS queries at a time, the keys in order. Without
        // atomic_dq, added to the running sum this thread keeps in dQ itself (scaled once, at the end of the head):
        // where dQ's rows are contiguous and hold whole blocks of dims, the micro-kernel's sums start from dQ and go
        // back to it; otherwise, and for a last group short of ROWS queries, through dq_rows. With atomic_dq, summed
        // from zero and added atomically, times scale. Queries past `rows` are never added.
        const int64_t dq_s = t->dq_strides.s, dq_d = t->dq_strides.d;
        const int in_place = !atomic_dq && dq_d == 1 && D % cols == 0;
        for (int i0 = 0; i0 < rows; i0 += ROWS) {
            const int group = rows - i0 < ROWS ? rows - i0 : ROWS;
            float *dq_rows = w->dq_rows, *dq_i0 = dq + (q_start + i0) * dq_s;
            if (in_place && group == ROWS) {
                for (int64_t d0 = 0; d0 < D; d0 += cols)
                    along_rows(cols, ds + i0 * N_pad, N_pad, 1, keys, w->k_tile + d0, D_pad, dq_i0 + d0, dq_s);
                continue;
            }
            for (int r = 0; r < ROWS; r++)
                for (int64_t d = 0; d < D; d++)
                    dq_rows[r * D_pad + d] = atomic_dq || r >= group ? 0.0f : dq_i0[r * dq_s + d * dq_d];
            for (int64_t d0 = 0; d0 < D; d0 += cols)
                along_rows(cols, ds + i0 * N_pad, N_pad, 1, keys, w->k_tile + d0, D_pad, dq_rows + d0, D_pad);
            for (int r = 0; r < group; r++)
                for (int64_t d = 0; d < D; d++) {
                    if (atomic_dq) {
#pragma omp atomic update
                        dq_i0[r * dq_s + d * dq_d] += scale * dq_rows[r * D_pad + d];
                    } else {
                        dq_i0[r * dq_s + d * dq_d] = dq_rows[r * D_pad + d];
                    }
                }
        }
    }

    // Each dK_j and dV_j is written once, by the one program that owns its K/V tile. dK summed dS against the
    // staged qk_scale Q: it takes scale / qk_scale = LN2 here, so that dK = scale dS^T Q.
    float *dk = t->dk + b * t->dk_strides.b + h * t->dk_strides.h;
    float *dv = t->dv + b * t->dv_strides.b + h * t->dv_strides.h;
    for (int c = 0; c < keys; c++)
        for (int64_t d = 0; d < D; d++) {
            dk[(k_start + c) * t->dk_strides.s + d * t->dk_strides.d] = LN2 * w->dk_acc[c * D_pad + d];
            dv[(k_start + c) * t->dv_strides.s + d * t->dv_strides.d] = w->dv_acc[c * D_pad + d];
        }
}

// 3. The end of a head, without atomic_dq: its dQ holds sum_j dS_ij K_j; dQ = scale * that, as the dQ pass stores it.
static void scale_dq_head(const fa_shape *shape, int64_t bh, const backward_tensors *t) {
    float *dq = t->dq + bh / shape->H * t->dq_strides.b + bh % shape->H * t->dq_strides.h;
    for (int64_t i = 0; i < shape->Sq; i++)
        for (int64_t d = 0; d < shape->D; d++) dq[i * t->dq_strides.s + d * t->dq_strides.d] *= shape->scale;
}

void flash_backward_regtile_cpu(const fa_shape *shape, int block_m, int block_n, int dq_mode,
                                const backward_tensors *t) {
    if (dq_mode != FA_DQ_DETERMINISTIC && dq_mode != FA_DQ_ATOMIC)
        fa_die("the register-tiled backward runs one dQ variant at a time (deterministic or atomic)");
    const int atomic_dq = dq_mode == FA_DQ_ATOMIC;
    const int64_t BH = shape->B * shape->H;
    const int64_t n_kv_tiles = (shape->Sk + block_n - 1) / block_n;
    const int cols = block_cols();
    backward_preprocess_cpu(shape, t, 1);   // Delta, and dQ = 0 for the sums to start from
#pragma omp parallel
    {
        workspace w = workspace_alloc(shape->D, block_m, block_n);
        if (atomic_dq) {
            // The loops are the CUDA grid, (blockIdx.y, blockIdx.x) = (bh, kv tile): one iteration is one block.
            // Dynamic: under the causal mask the tiles' work differs.
#pragma omp for collapse(2) schedule(dynamic)
            for (int64_t bh = 0; bh < BH; bh++)
                for (int64_t kv_tile = 0; kv_tile < n_kv_tiles; kv_tile++)
                    kv_tile_program(shape, block_m, block_n, cols, bh, kv_tile * block_n, t, 1, &w);
        } else {
            // One head per iteration, its K/V tiles in order on one thread: dQ's sums in one fixed order, whatever
            // the thread count. (A machine with more cores than heads leaves some idle.)
#pragma omp for schedule(dynamic)
            for (int64_t bh = 0; bh < BH; bh++) {
                for (int64_t kv_tile = 0; kv_tile < n_kv_tiles; kv_tile++)
                    kv_tile_program(shape, block_m, block_n, cols, bh, kv_tile * block_n, t, 0, &w);
                scale_dq_head(shape, bh, t);
            }
        }
        free(w.allocation);
    }
}
