// 4_backward_cpu.c - phase 5, step 4, on the CPU: the numerics of the tensor-core backward, fp16 or bf16 inputs.
//
// What it adds over phase 4 (phase4_backward/backward_dkdv_cpu.c, backward_dq_cpu.c): Q, K, V and dO arrive in a
//   half type and are read into float32 tiles (exactly); every product is a float32 sum of exact products of half
//   values, as on a tensor core; P is rounded to the half type before dV += P^T dO, and dS before dK += dS^T Q and
//   dQ += dS K, because on the GPU each of them becomes the half A operand of an mma; dS itself is formed from the
//   float32 P, and Delta, LSE and the gradients stay float32. The two passes walk the problem the way the GPU's warps
//   do: the dK/dV pass by keys (a warp owns 16 keys and computes S^T = K Q^T), the dQ pass by queries. So the CPU
//   and the GPU round at the same points and agree to float32 differences (the order of the additions).
//   And it is register-blocked as step 1 (phase5_tensor_cores/1_register_tiles_cpu.c), for the same reason: computed
//   one row at a time, a product loads a vector of its second operand for every vector multiply-add, and the loads
//   set the pace. Here each of the five products is computed ROWS rows (keys in the dK/dV pass, queries in the dQ
//   pass) x VEC columns at a time, in one of two micro-kernels named after the CUDA twin's two mma loops: sums along
//   d (along_d_micro_kernel: S^T = K Q^T, dP^T = V dO^T, S = Q K^T, dP = dO V^T) and sums along the rows of a tile
//   (along_rows_micro_kernel: dV += P^T dO, dK += dS^T Q, dQ += dS K). Their ROWS x VEC sums stay in vector registers
//   while d (or the row) runs, so each vector loaded feeds ROWS multiply-adds. P and dS are rounded at the points
//   above. The functions of the two passes carry SIMD_CLONES and the file is compiled with -fno-trapping-math, as
//   step 1 is (its header says why; here it lets the AVX2 version vectorise the loops that form P and dS).
// CUDA twin: phase5_tensor_cores/4_backward_cuda.cu
// Diff:      diff -u phase4_backward/backward_dkdv_cpu.c phase5_tensor_cores/4_backward_cpu.c
// Run:       build/bin/phase5_tensor_cores --impl cpu --step 4 --dtype fp16 --B 1 --H 4 --S 1024 --D 64 --dq both
#include "fa_baselines.h"   // step 4's entry points and tensors

#include "fa_exp2.h"
#include "fa_half.h"
#include "fa_tensor.h"
#include "fa_contract.h"

#include <stdlib.h>

// P = exp(scale S - LSE) = 2^(S * qk_scale - LSE * LOG2E): the forward's base-2 scores, from its natural-log LSE.
// The register block: ROWS rows x VEC columns, 64 float32 sums, 4 AVX-512 or 8 AVX2 registers (step 1's sizes).
// Tiles are padded with zeros to a multiple of VEC columns (and so of ROWS rows).
#define ROWS 4
#define VEC 16

#if defined(__GNUC__) && defined(__x86_64__) && !defined(__INTEL_COMPILER)
#define SIMD_CLONES __attribute__((target_clones("avx512f", "fma", "default")))
#else
#define SIMD_CLONES
#endif

static int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// One thread's working memory, the CPU's stand-in for a block's shared memory and its warps' registers. The two
// passes use the same tiles in their own roles: "rows" are the Q tile's queries, "cols" the K/V tile's keys.
typedef struct {
    int64_t M_pad, N_pad, D_pad;   // BLOCK_M, BLOCK_N, D rounded up to a multiple of VEC
    float *q_tile, *do_tile;       // [M_pad, D_pad]  Q and dO rows (half values, exact in float32)
    float *q_t, *do_t;             // [D, M_pad]      the same, transposed: the dK/dV pass sums along the queries
    float *k_tile, *v_tile;        // [N_pad, D_pad]  K and V rows
    float *k_t, *v_t;              // [D, N_pad]      the same, transposed: the dQ pass sums along the keys
    float *lse2, *delta;           // [M_pad]         LSE_i * LOG2E and Delta_i of the Q tile
    float *acc_a, *acc_b;          // [max(M, N)_pad, D_pad]  dK and dV (dK/dV pass), dQ (dQ pass) accumulators
    float *s, *dp;                 // [ROWS, M_pad] rows of S^T (then P^T, rounded) and of dP^T (then dS^T, rounded);
                                   // [ROWS, N_pad] rows of S and of dP (then dS, rounded) in the dQ pass
    float *ds_tile;                // [M_pad, N_pad]  dS of the tile, rounded, for the atomic dQ (shared memory)
    float *dq_rows;                // [ROWS, D_pad]   the atomic dQ's share of ROWS rows, before it is added
} workspace;

static int64_t workspace_floats(int64_t D, int block_m, int block_n) {
    const int64_t M_pad = round_up(block_m, VEC), N_pad = round_up(block_n, VEC), D_pad = round_up(D, VEC);
    const int64_t R_pad = M_pad > N_pad ? M_pad : N_pad;
    return 2 * M_pad * D_pad + 2 * D * M_pad + 2 * N_pad * D_pad + 2 * D * N_pad + 2 * M_pad + 2 * R_pad * D_pad +
           2 * ROWS * R_pad + M_pad * N_pad + ROWS * D_pad;
}

int64_t flash_backward_tc_cpu_workspace_bytes(int64_t D, int block_m, int block_n) {
    return workspace_floats(D, block_m, block_n) * (int64_t)sizeof(float);
}

static workspace workspace_alloc(int64_t D, int block_m, int block_n) {
    workspace w;
    w.M_pad = round_up(block_m, VEC), w.N_pad = round_up(block_n, VEC), w.D_pad = round_up(D, VEC);
    const int64_t R_pad = w.M_pad > w.N_pad ? w.M_pad : w.N_pad, total = workspace_floats(D, block_m, block_n);
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
    w.s = next, next += ROWS * R_pad;
    w.dp = next, next += ROWS * R_pad;
    w.ds_tile = next, next += w.M_pad * w.N_pad;
    w.dq_rows = next;
    return w;
}

// Rows first .. first + count - 1 of a [S, D] half tensor (its head's start, row stride, d stride) into float32
// tiles: `rows` as [count][D_pad] and, when `cols` is not NULL, transposed as [D][cols_pad]. Rows past `exist` are
// zeros, as the GPU's loads make them.
static void stage_rows(const uint16_t *x, fa_strides strides, int dtype, int64_t first, int64_t count, int64_t exist,
                       int64_t D, int64_t D_pad, float *rows, float *cols, int64_t cols_pad) {
    for (int64_t r = 0; r < count; r++)
        for (int64_t d = 0; d < D; d++) {
            const float value = first + r < exist ? fa_half_to_float(x[(first + r) * strides.s + d * strides.d], dtype)
                                                  : 0.0f;
            rows[r * D_pad + d] = value;
            if (cols) cols[d * cols_pad + r] = value;
        }
}

// The two micro-kernels. As in step 1, the ROWS x VEC sums are a small local array that GCC and Clang keep in vector
// registers because the row loop is unrolled completely and the column loop vectorised; every product of this file
// is one of the two, as every mma of the CUDA twin is in mma_along_d() or mma_along_rows().
//
// Sums along d: out[r][jj] = sum_d a[r][d] * b_t[d][jj] for ROWS rows of a row-major tile a ([rows][D_pad]) and VEC
// columns of a transposed tile b_t ([D][b_pad]), written to out ([ROWS][out_pad]). Per d it loads VEC values of b_t
// once and ROWS values of a, and does ROWS * VEC multiply-adds with them.
static inline void along_d_micro_kernel(const float *a, int64_t D_pad, const float *b_t, int64_t b_pad, int64_t D,
                                        float *out, int64_t out_pad) {
    float sum[ROWS][VEC] = {{0.0f}};
    for (int64_t d = 0; d < D; d++) {
        const float *b_d = b_t + d * b_pad;
#pragma GCC unroll 8
        for (int r = 0; r < ROWS; r++) {
            const float a_rd = a[r * D_pad + d];
#pragma omp simd
            for (int jj = 0; jj < VEC; jj++) sum[r][jj] += a_rd * b_d[jj];
        }
    }
    for (int r = 0; r < ROWS; r++)
        for (int jj = 0; jj < VEC; jj++) out[r * out_pad + jj] = sum[r][jj];
}

// Sums along the rows of a tile: acc[r][dd] += sum_i a[r][i] * b[i][dd] over the first n rows of b ([rows][D_pad],
// VEC dims of it), for ROWS rows of a ([ROWS][a_pad], the rounded P^T, dS^T or dS) and acc ([ROWS][D_pad]). The sums
// start from acc and add the rows in order: dQ's sum over the K tiles keeps one fixed order.
static inline void along_rows_micro_kernel(const float *a, int64_t a_pad, int n, const float *b, int64_t D_pad,
                                           float *acc) {
    float sum[ROWS][VEC];
    for (int r = 0; r < ROWS; r++)
        for (int dd = 0; dd < VEC; dd++) sum[r][dd] = acc[r * D_pad + dd];
    for (int i = 0; i < n; i++) {
        const float *b_i = b + i * D_pad;
#pragma GCC unroll 8
        for (int r = 0; r < ROWS; r++) {
            const float a_ri = a[r * a_pad + i];
#pragma omp simd
            for (int dd = 0; dd < VEC; dd++) sum[r][dd] += a_ri * b_i[dd];
        }
    }
    for (int r = 0; r < ROWS; r++)
        for (int dd = 0; dd < VEC; dd++) acc[r * D_pad + dd] = sum[r][dd];
}

// 1. Delta_i = sum_d dO_id O_id, float32 (dO half, O the forward's float32 output); with zero_dq, dQ = 0 as well.
static void backward_preprocess(const fa_shape *shape, int dtype, const tc_backward_tensors *t, int zero_dq) {
    const int64_t H = shape->H, S_q = shape->Sq, D = shape->D;
    const uint16_t *dout = t->dout;
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t bh = 0; bh < shape->B * H; bh++)
        for (int64_t i = 0; i < S_q; i++) {
            const int64_t b = bh / H, h = bh % H;
            const float *o_i = t->o + b * t->o_strides.b + h * t->o_strides.h + i * t->o_strides.s;
            const uint16_t *do_i = dout + b * t->do_strides.b + h * t->do_strides.h + i * t->do_strides.s;
            float sum = 0.0f;
            for (int64_t d = 0; d < D; d++)
                sum += fa_half_to_float(do_i[d * t->do_strides.d], dtype) * o_i[d * t->o_strides.d];
            t->delta[bh * S_q + i] = sum;
            if (zero_dq) {
                float *dq_i = t->dq + b * t->dq_strides.b + h * t->dq_strides.h + i * t->dq_strides.s;
                for (int64_t d = 0; d < D; d++) dq_i[d * t->dq_strides.d] = 0.0f;
            }
        }
}

// 2. One K/V tile of one head: what one block of the dK/dV kernel does. Keys k_start .. k_start + BLOCK_N - 1.
SIMD_CLONES
static void dkdv_program(const fa_shape *shape, int dtype, int BLOCK_M, int BLOCK_N, int64_t bh, int64_t k_start,
                         const tc_backward_tensors *t, int atomic_dq, workspace *w) {
    const int64_t S_q = shape->Sq, S_k = shape->Sk, D = shape->D, M_pad = w->M_pad, N_pad = w->N_pad;
    const int64_t D_pad = w->D_pad;
    const float scale = shape->scale, qk_scale = scale * LOG2E;
    const int64_t b = bh / shape->H, h = bh % shape->H;
    const uint16_t *q = (const uint16_t *)t->q + b * t->q_strides.b + h * t->q_strides.h;
    const uint16_t *k = (const uint16_t *)t->k + b * t->k_strides.b + h * t->k_strides.h;
    const uint16_t *v = (const uint16_t *)t->v + b * t->v_strides.b + h * t->v_strides.h;
    const uint16_t *dout = (const uint16_t *)t->dout + b * t->do_strides.b + h * t->do_strides.h;
    const float *lse = t->lse + bh * S_q, *delta = t->delta + bh * S_q;
    const int keys = (int)(S_k - k_start < BLOCK_N ? S_k - k_start : BLOCK_N);   // key rows in the tile
    float *dk_acc = w->acc_a, *dv_acc = w->acc_b;

    stage_rows(k, t->k_strides, dtype, k_start, BLOCK_N, S_k, D, D_pad, w->k_tile, NULL, 0);
    stage_rows(v, t->v_strides, dtype, k_start, BLOCK_N, S_k, D, D_pad, w->v_tile, NULL, 0);
    for (int64_t x = 0; x < N_pad * D_pad; x++) dk_acc[x] = dv_acc[x] = 0.0f;

    // Causal: the Q tiles that end before this K/V tile starts see none of its keys.
    const int64_t n_q_tiles = (S_q + BLOCK_M - 1) / BLOCK_M;
    for (int64_t q_tile = shape->causal ? k_start / BLOCK_M : 0; q_tile < n_q_tiles; q_tile++) {
        const int64_t q_start = q_tile * BLOCK_M;
        const int stage = causal_tile_stage(shape->causal, q_start, k_start, BLOCK_M, BLOCK_N, S_q, S_k);
        if (stage == TILE_FUTURE) continue;
        const int rows = (int)(S_q - q_start < BLOCK_M ? S_q - q_start : BLOCK_M);
        stage_rows(q, t->q_strides, dtype, q_start, BLOCK_M, S_q, D, D_pad, w->q_tile, w->q_t, M_pad);
        stage_rows(dout, t->do_strides, dtype, q_start, BLOCK_M, S_q, D, D_pad, w->do_tile, w->do_t, M_pad);
        for (int i = 0; i < BLOCK_M; i++) {
            w->lse2[i] = i < rows ? lse[q_start + i] * LOG2E : 0.0f;
            w->delta[i] = i < rows ? delta[q_start + i] : 0.0f;
        }

        // The warps' keys, ROWS at a time: keys c0 .. c0 + ROWS - 1 are ROWS rows of S^T = K Q^T and dP^T = V dO^T.
        // The last group may run past the tile's keys: those rows of K and V are zeros, their P is 0 and their dK
        // and dV are never stored (as on the GPU).
        for (int c0 = 0; c0 < keys; c0 += ROWS) {
            float *s = w->s, *dp = w->dp;   // [ROWS][M_pad]
            // 1. s_ci = K_c . Q_i and dp_ci = V_c . dO_i for every query i of the tile, float32 sums of exact
            //    products (the first two mmas), VEC queries at a time.
            for (int64_t i0 = 0; i0 < M_pad; i0 += VEC) {
                along_d_micro_kernel(w->k_tile + c0 * D_pad, D_pad, w->q_t + i0, M_pad, D, s + i0, M_pad);
                along_d_micro_kernel(w->v_tile + c0 * D_pad, D_pad, w->do_t + i0, M_pad, D, dp + i0, M_pad);
            }
            // 2. P^T from the log-sum-exp (0 for a key past S_k, a query past S_q or, on a diagonal tile, a query
            //    before the key), dS^T from the float32 P, and then both rounded to the half type: the A operands of
            //    dV's and dK's mmas. (Two loops: the first one vectorises, the rounding is a call per value.)
            for (int r = 0; r < ROWS; r++) {
                const int64_t key = k_start + c0 + r;
                // The queries that see this key: i_first .. i_end - 1 (none for a key past S_k).
                const int64_t i_first = stage == TILE_DIAGONAL && key > q_start ? key - q_start : 0;
                const int64_t i_end = c0 + r < keys ? rows : 0;
                float *s_c = s + r * M_pad, *dp_c = dp + r * M_pad;
#pragma omp simd
                for (int64_t i = 0; i < M_pad; i++) {
                    const float x = s_c[i] * qk_scale - w->lse2[i];
                    const float p = fa_exp2(i >= i_first && i < i_end ? x : -INFINITY);   // 2^-inf = 0
                    dp_c[i] = p * (dp_c[i] - w->delta[i]);
                    s_c[i] = p;
                }
                for (int64_t i = 0; i < M_pad; i++) {
                    s_c[i] = fa_round_to_dtype(s_c[i], dtype);
                    dp_c[i] = fa_round_to_dtype(dp_c[i], dtype);
                }
            }
            // 3. dV_c += sum_i P_ci dO_i and dK_c += sum_i dS_ci Q_i (the second and fourth mmas), ROWS keys x VEC
            //    dims at a time.
            for (int64_t d0 = 0; d0 < D_pad; d0 += VEC) {
                along_rows_micro_kernel(s, M_pad, rows, w->do_tile + d0, D_pad, dv_acc + c0 * D_pad + d0);
                along_rows_micro_kernel(dp, M_pad, rows, w->q_tile + d0, D_pad, dk_acc + c0 * D_pad + d0);
            }
            // The GPU's trip through shared memory: dS^T of every warp, read back as dS rows for dQ.
            if (atomic_dq)
                for (int r = 0; r < ROWS; r++)
                    for (int64_t i = 0; i < M_pad; i++) w->ds_tile[i * N_pad + c0 + r] = dp[r * M_pad + i];
        }

        if (atomic_dq) {
            // This tile's share of dQ: dQ_i += scale * sum_c dS_ic K_c (the fifth mma), ROWS queries at a time,
            // added atomically: other threads add into the same rows from their own K/V tiles, in an order that
            // changes from run to run. Queries past `rows` have dS = 0 and are never added.
            float *dq = t->dq + b * t->dq_strides.b + h * t->dq_strides.h;
            for (int i0 = 0; i0 < rows; i0 += ROWS) {
                for (int64_t x = 0; x < ROWS * D_pad; x++) w->dq_rows[x] = 0.0f;
                for (int64_t d0 = 0; d0 < D_pad; d0 += VEC)
                    along_rows_micro_kernel(w->ds_tile + i0 * N_pad, N_pad, keys, w->k_tile + d0, D_pad,
                                            w->dq_rows + d0);
                for (int r = 0; r < ROWS && i0 + r < rows; r++) {
                    float *dq_i = dq + (q_start + i0 + r) * t->dq_strides.s;
                    for (int64_t d = 0; d < D; d++) {
#pragma omp atomic update
                        dq_i[d * t->dq_strides.d] += scale * w->dq_rows[r * D_pad + d];
                    }
                }
            }
        }
    }

    // Each dK_j and dV_j is written once, by the one program that owns its K/V tile; dK takes the scale here.
    float *dk = t->dk + b * t->dk_strides.b + h * t->dk_strides.h;
    float *dv = t->dv + b * t->dv_strides.b + h * t->dv_strides.h;
    for (int c = 0; c < keys; c++)
        for (int64_t d = 0; d < D; d++) {
            dk[(k_start + c) * t->dk_strides.s + d * t->dk_strides.d] = scale * dk_acc[c * D_pad + d];
            dv[(k_start + c) * t->dv_strides.s + d * t->dv_strides.d] = dv_acc[c * D_pad + d];
        }
}

// 3. One Q tile of one head: what one block of the deterministic dQ kernel does. Queries q_start .. + BLOCK_M - 1.
SIMD_CLONES
static void dq_program(const fa_shape *shape, int dtype, int BLOCK_M, int BLOCK_N, int64_t bh, int64_t q_start,
                       const tc_backward_tensors *t, workspace *w) {
    const int64_t S_q = shape->Sq, S_k = shape->Sk, D = shape->D, M_pad = w->M_pad, N_pad = w->N_pad;
    const int64_t D_pad = w->D_pad;
    const float scale = shape->scale, qk_scale = scale * LOG2E;
    const int64_t b = bh / shape->H, h = bh % shape->H;
    const uint16_t *q = (const uint16_t *)t->q + b * t->q_strides.b + h * t->q_strides.h;
    const uint16_t *k = (const uint16_t *)t->k + b * t->k_strides.b + h * t->k_strides.h;
    const uint16_t *v = (const uint16_t *)t->v + b * t->v_strides.b + h * t->v_strides.h;
    const uint16_t *dout = (const uint16_t *)t->dout + b * t->do_strides.b + h * t->do_strides.h;
    const float *lse = t->lse + bh * S_q, *delta = t->delta + bh * S_q;
    const int rows = (int)(S_q - q_start < BLOCK_M ? S_q - q_start : BLOCK_M);
    float *dq_acc = w->acc_a;

    stage_rows(q, t->q_strides, dtype, q_start, BLOCK_M, S_q, D, D_pad, w->q_tile, NULL, 0);
    stage_rows(dout, t->do_strides, dtype, q_start, BLOCK_M, S_q, D, D_pad, w->do_tile, NULL, 0);
    for (int i = 0; i < BLOCK_M; i++) {
        w->lse2[i] = i < rows ? lse[q_start + i] * LOG2E : 0.0f;
        w->delta[i] = i < rows ? delta[q_start + i] : 0.0f;
    }
    for (int64_t x = 0; x < M_pad * D_pad; x++) dq_acc[x] = 0.0f;

    for (int64_t k_start = 0; k_start < S_k; k_start += BLOCK_N) {
        const int stage = causal_tile_stage(shape->causal, q_start, k_start, BLOCK_M, BLOCK_N, S_q, S_k);
        if (stage == TILE_FUTURE) break;
        const int keys = (int)(S_k - k_start < BLOCK_N ? S_k - k_start : BLOCK_N);
        stage_rows(k, t->k_strides, dtype, k_start, BLOCK_N, S_k, D, D_pad, w->k_tile, w->k_t, N_pad);
        stage_rows(v, t->v_strides, dtype, k_start, BLOCK_N, S_k, D, D_pad, w->v_tile, w->v_t, N_pad);

        // The warps' queries, ROWS at a time: ROWS rows of S and of dP. The last group may run past the tile's
        // queries: those rows of Q and dO are zeros, their dS is 0 and their dQ is never stored.
        for (int i0 = 0; i0 < rows; i0 += ROWS) {
            float *s = w->s, *dp = w->dp;   // [ROWS][N_pad]
            // S_ij = Q_i . K_j and dP_ij = dO_i . V_j, float32 sums of exact products, VEC keys at a time.
            for (int64_t j0 = 0; j0 < N_pad; j0 += VEC) {
                along_d_micro_kernel(w->q_tile + i0 * D_pad, D_pad, w->k_t + j0, N_pad, D, s + j0, N_pad);
                along_d_micro_kernel(w->do_tile + i0 * D_pad, D_pad, w->v_t + j0, N_pad, D, dp + j0, N_pad);
            }
            // P (0 past S_k and, on a diagonal tile, after the row), dS from the float32 P, rounded for dS K (two
            // loops again: the first one vectorises).
            for (int r = 0; r < ROWS; r++) {
                const int64_t row = q_start + i0 + r;
                // The keys this query sees: 0 .. j_end - 1 (on a diagonal tile those up to the row itself; none for
                // a query past S_q).
                int64_t j_end = stage == TILE_DIAGONAL && row - k_start + 1 < keys ? row - k_start + 1 : keys;
                if (i0 + r >= rows) j_end = 0;
                const float *s_i = s + r * N_pad;
                float *dp_i = dp + r * N_pad;
#pragma omp simd
                for (int64_t j = 0; j < N_pad; j++) {
                    const float x = s_i[j] * qk_scale - w->lse2[i0 + r];
                    const float p = fa_exp2(j < j_end ? x : -INFINITY);   // 2^-inf = 0
                    dp_i[j] = p * (dp_i[j] - w->delta[i0 + r]);
                }
                for (int64_t j = 0; j < N_pad; j++) dp_i[j] = fa_round_to_dtype(dp_i[j], dtype);
            }
            // dQ_i += sum_j dS_ij K_j, ROWS queries x VEC dims at a time, in key order: the same sum, in the same
            // order, every run.
            for (int64_t d0 = 0; d0 < D_pad; d0 += VEC)
                along_rows_micro_kernel(dp, N_pad, keys, w->k_tile + d0, D_pad, dq_acc + i0 * D_pad + d0);
        }
    }

    float *dq = t->dq + b * t->dq_strides.b + h * t->dq_strides.h;
    for (int i = 0; i < rows; i++)
        for (int64_t d = 0; d < D; d++)
            dq[(q_start + i) * t->dq_strides.s + d * t->dq_strides.d] = scale * dq_acc[i * D_pad + d];
}

void flash_backward_tc_cpu(const fa_shape *shape, int dtype, int block_m, int block_n, int dq_mode,
                           const tc_backward_tensors *t) {
    if (dq_mode != FA_DQ_DETERMINISTIC && dq_mode != FA_DQ_ATOMIC)
        fa_die("the tensor-core backward runs one dQ variant at a time (deterministic or atomic)");
    const int atomic_dq = dq_mode == FA_DQ_ATOMIC;
    const int64_t BH = shape->B * shape->H;
    const int64_t n_q_tiles = (shape->Sq + block_m - 1) / block_m, n_kv_tiles = (shape->Sk + block_n - 1) / block_n;
    backward_preprocess(shape, dtype, t, atomic_dq);
#pragma omp parallel
    {
        workspace w = workspace_alloc(shape->D, block_m, block_n);
        // The loops are the CUDA grids, (blockIdx.y, blockIdx.x) = (bh, tile): one iteration is one thread block.
        // Dynamic: under the causal mask the tiles' work differs.
#pragma omp for collapse(2) schedule(dynamic)
        for (int64_t bh = 0; bh < BH; bh++)
            for (int64_t kv_tile = 0; kv_tile < n_kv_tiles; kv_tile++)
                dkdv_program(shape, dtype, block_m, block_n, bh, kv_tile * block_n, t, atomic_dq, &w);
        if (!atomic_dq) {
#pragma omp for collapse(2) schedule(dynamic)
            for (int64_t bh = 0; bh < BH; bh++)
                for (int64_t i = 0; i < n_q_tiles; i++) {
                    // Causal: the last Q tiles see the most keys; starting with them, the short ones fill in last.
                    const int64_t q_tile = n_q_tiles - 1 - i;
                    dq_program(shape, dtype, block_m, block_n, bh, q_tile * block_m, t, &w);
                }
        }
        free(w.q_tile);   // the start of the one allocation
    }
}
