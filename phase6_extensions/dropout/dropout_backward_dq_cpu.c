// dropout_backward_dq_cpu.c - phase 6: the backward pass of dropout, on the CPU.
//
// What it adds to phase 4 (phase4_backward/backward_dq_cpu.c):
//   the forward's output was O = Z V with Z_ij = P_ij M_ij / (1 - p) (M_ij: 1 kept, 0 dropped; dropout_cpu.c), so
//   dV_j = sum_i Z_ij dO_i, and the gradient that reaches P is dP_ij = (dO_i . V_j) M_ij / (1 - p). dS keeps phase 4's
//   form, dS_ij = P_ij (dP_ij - Delta_i), and so does Delta_i = dO_i . O_i (= sum_j P_ij dP_ij = sum_j Z_ij dO_i.V_j).
//   The mask M is regenerated from the forward's counters (extensions.h, dropout_keep4), never stored.
// Twin:      phase6_extensions/dropout/dropout_backward_dq_cuda.cu
// Diff:      diff -u phase4_backward/backward_dq_cpu.c phase6_extensions/dropout/dropout_backward_dq_cpu.c
// Run:       build/bin/phase6_extensions --impl cpu --backward --dropout 0.1 --S 1024 --D 64 --causal
#include "backward_ext.h"
#include "extensions.h"   // dropout_keep4
#include "fa_contract.h"   // causal_tile_stage

#include "fa_exp2.h"
#include "fa_tensor.h"

#include <math.h>
#include <stdlib.h>

// Scores are computed in base 2: the Q tile is multiplied by qk_scale = scale * LOG2E once, so that
// exp(scale * q.k - m) = 2^(qk_scale * q.k - m') and every exponential is a cheap 2^x (fa_exp2).
#include "fa_math.h"   // LOG2E, LN2 and the log-sum-exp conversions
// The inner loops work on VEC floats at a time (one AVX-512 register, four SSE registers). A loop of fixed length
// over a small local array lets the compiler keep the array in vector registers, the way the CUDA kernel keeps its
// arrays in registers. The tiles are padded with zeros to a multiple of VEC, so no loop needs a remainder.
#define VEC 16

static int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// One thread's working memory: the CPU's stand-in for a CUDA block's shared memory and its threads' registers.
typedef struct {
    int64_t D_pad, N_pad;     // D and BLOCK_N rounded up to a multiple of VEC
    float *q_tile;            // [BLOCK_M, D_pad]  the Q tile, times qk_scale
    float *do_tile;           // [BLOCK_M, D_pad]  the dO tile
    float *k_tile_t;          // [D_pad, N_pad]    the K tile, transposed: the score loop then runs along j
    float *v_tile_t;          // [D_pad, N_pad]    the V tile, transposed: the dP loop runs along j too
    float *k_tile;            // [N_pad, D_pad]    the K tile as rows: the dQ update runs along d
    float *dq_acc;            // [BLOCK_M, D_pad]  the dQ_i accumulators
    float *lse2_hi, *lse2_lo; // [BLOCK_M]         LSE_i * LOG2E = hi + lo (lse_to_base2, fa_math.h)
    float *delta;             // [BLOCK_M]         Delta_i
    float *s, *dp, *ds;       // [N_pad]           one row's scores S, dP = dO V^T, and dS against the tile
} workspace;

static int64_t workspace_floats(int64_t D, int block_m, int block_n) {
    const int64_t D_pad = round_up(D, VEC), N_pad = round_up(block_n, VEC);
    return 3 * block_m * D_pad + 3 * D_pad * N_pad + 3 * (int64_t)block_m + 3 * N_pad;
}

static workspace workspace_alloc(int64_t D, int block_m, int block_n) {
    workspace w;
    w.D_pad = round_up(D, VEC);
    w.N_pad = round_up(block_n, VEC);
    w.q_tile = fa_alloc_floats(workspace_floats(D, block_m, block_n), "the CPU tiles");
    w.do_tile = w.q_tile + block_m * w.D_pad;
    w.k_tile_t = w.do_tile + block_m * w.D_pad;
    w.v_tile_t = w.k_tile_t + w.D_pad * w.N_pad;
    w.k_tile = w.v_tile_t + w.D_pad * w.N_pad;
    w.dq_acc = w.k_tile + w.N_pad * w.D_pad;
    w.lse2_hi = w.dq_acc + block_m * w.D_pad;
    w.lse2_lo = w.lse2_hi + block_m;
    w.delta = w.lse2_lo + block_m;
    w.s = w.delta + block_m;
    w.dp = w.s + w.N_pad;
    w.ds = w.dp + w.N_pad;
    // Zero once: the padding (every d >= D) is never written again, so it stays 0.
    for (int64_t x = 0; x < workspace_floats(D, block_m, block_n); x++) w.q_tile[x] = 0.0f;
    return w;
}

// One Q tile of one head: what one CUDA thread block does. Rows q_start .. q_start + BLOCK_M - 1 of head bh; row r
// of the tile is row i = q_start + r of the head.
static void q_tile_program(const fa_shape *shape, dropout_params drop, int BLOCK_M, int BLOCK_N, int64_t bh,
                           int64_t q_start, const backward_tensors *t, workspace *w) {
    const int64_t S_q = shape->Sq, S_k = shape->Sk, D = shape->D, D_pad = w->D_pad, N_pad = w->N_pad;
    const float qk_scale = shape->scale * LOG2E;
    // The grid's second index is the head: (b, h) from bh, and where that head starts in each tensor.
    const int64_t b = bh / shape->H, h = bh % shape->H;
    const float *q = t->q + b * t->q_strides.b + h * t->q_strides.h;
    const float *k = t->k + b * t->k_strides.b + h * t->k_strides.h;
    const float *v = t->v + b * t->v_strides.b + h * t->v_strides.h;
    const float *dout = t->dout + b * t->do_strides.b + h * t->do_strides.h;
    float *dq = t->dq + b * t->dq_strides.b + h * t->dq_strides.h;
    // Rows past S_q do not exist: the CPU skips them (the GPU computes them and never stores them).
    const int rows = (int)(S_q - q_start < BLOCK_M ? S_q - q_start : BLOCK_M);

    // Q_i (times qk_scale, as the forward held it), dO_i, LSE_i and Delta_i of every row, and zeroed accumulators.
    for (int r = 0; r < rows; r++) {
        const int64_t i = q_start + r;
        for (int64_t d = 0; d < D; d++) {
            w->q_tile[r * D_pad + d] = q[i * t->q_strides.s + d * t->q_strides.d] * qk_scale;
            w->do_tile[r * D_pad + d] = dout[i * t->do_strides.s + d * t->do_strides.d];
        }
        for (int64_t d = 0; d < D_pad; d++) w->dq_acc[r * D_pad + d] = 0.0f;
        const float residual = t->lse_residual ? t->lse_residual[bh * S_q + i] : 0.0f;
        lse_to_base2(t->lse[bh * S_q + i], residual, &w->lse2_hi[r], &w->lse2_lo[r]);
        w->delta[r] = t->delta[bh * S_q + i];
    }

    for (int64_t k_start = 0; k_start < S_k; k_start += BLOCK_N) {
        // The three causal stages: a tile entirely in the future ends the loop before it is loaded (every later
        // tile lies further in the future); a tile entirely in the past needs no mask; a diagonal tile does.
        const int stage = causal_tile_stage(shape->causal, q_start, k_start, BLOCK_M, BLOCK_N, S_q, S_k);
        if (stage == TILE_FUTURE) break;

        // Stage the K tile (transposed, and as rows) and the V tile (transposed) once for all rows of the Q tile.
        // Keys past S_k, and the padding, are zeros.
        for (int j = 0; j < N_pad; j++) {
            const int key_exists = j < BLOCK_N && k_start + j < S_k;
            for (int64_t d = 0; d < D; d++) {
                const float k_jd = key_exists ? k[(k_start + j) * t->k_strides.s + d * t->k_strides.d] : 0.0f;
                w->k_tile_t[d * N_pad + j] = k_jd, w->k_tile[j * D_pad + d] = k_jd;
                const float v_jd = key_exists ? v[(k_start + j) * t->v_strides.s + d * t->v_strides.d] : 0.0f;
                w->v_tile_t[d * N_pad + j] = v_jd;
            }
        }
        const int keys = (int)(S_k - k_start < BLOCK_N ? S_k - k_start : BLOCK_N);   // keys in this tile

        // Each row is one CUDA thread on the GPU.
        for (int r = 0; r < rows; r++) {
            const float *q_i = w->q_tile + r * D_pad, *do_i = w->do_tile + r * D_pad;
            float *dq_i = w->dq_acc + r * D_pad, *s = w->s, *dp = w->dp, *ds = w->ds;

            // 1. Scores of row i against the tile, in base 2: s[j] = qk_scale * q_i . k_j, summed as the forward sums
            //    them (four parts, dim d in part d % 4, added in pairs: fa_contract.h, CPU_SCORE_PARTS); and
            //    dp[j] = dO_i . V_j in one sum. The tiles are zero past D, so no loop needs a remainder.
            for (int j0 = 0; j0 < N_pad; j0 += VEC) {
                float s0[VEC] = {0.0f}, s1[VEC] = {0.0f}, s2[VEC] = {0.0f}, s3[VEC] = {0.0f};
                float dp_vec[VEC] = {0.0f};
                for (int64_t d = 0; d < D; d += 4) {
                    const float *k_d = w->k_tile_t + d * N_pad + j0, *v_d = w->v_tile_t + d * N_pad + j0;
                    const float q0 = q_i[d], q1 = q_i[d + 1], q2 = q_i[d + 2], q3 = q_i[d + 3];
#pragma omp simd
                    for (int jj = 0; jj < VEC; jj++) {
                        s0[jj] += q0 * k_d[jj];
                        s1[jj] += q1 * k_d[N_pad + jj];
                        s2[jj] += q2 * k_d[2 * N_pad + jj];
                        s3[jj] += q3 * k_d[3 * N_pad + jj];
                    }
                    for (int e = 0; e < 4; e++) {
                        const float do_d = do_i[d + e];
#pragma omp simd
                        for (int jj = 0; jj < VEC; jj++) dp_vec[jj] += do_d * v_d[e * N_pad + jj];
                    }
                }
#pragma omp simd
                for (int jj = 0; jj < VEC; jj++)
                    s[j0 + jj] = (s0[jj] + s1[jj]) + (s2[jj] + s3[jj]), dp[j0 + jj] = dp_vec[jj];
            }
            // The last key this row may see: the last one there is, and on a diagonal tile the row itself (row i
            // sees keys j <= i). A tile in the past keeps the test against S_k alone: no element mask.
            const int64_t i = q_start + r, last_key = stage == TILE_DIAGONAL && i < S_k - 1 ? i : S_k - 1;

            // Dropout: dP through the forward's mask, regenerated: dP_ij M_ij / (1 - p), four keys per call of the
            // generator (as in the forward).
            if (drop.threshold != 0) {
                unsigned keep4 = 0;
                for (int j = 0; j < BLOCK_N && k_start + j < S_k; j++) {
                    const int64_t key = k_start + j;
                    if (j == 0 || key % 4 == 0) keep4 = dropout_keep4(drop.seed, drop.threshold, bh, i, key / 4);
                    dp[j] *= keep4 >> key % 4 & 1u ? drop.keep_scale : 0.0f;
                }
            }

            // 2. P_ij from the saved log-sum-exp, and dS_ij = P_ij (dP_ij - Delta_i); 0 past last_key (and in the
            //    padding).
#pragma omp simd
            for (int j = 0; j < N_pad; j++) {
                const int visible = j < BLOCK_N && k_start + j <= last_key;
                const float p = visible ? fa_exp2((s[j] - w->lse2_hi[r]) - w->lse2_lo[r]) : 0.0f;
                ds[j] = p * (dp[j] - w->delta[r]);
            }

            // 3. dQ_i += sum_j dS_ij K_j, VEC dims at a time, kept in registers while j runs.
            for (int64_t d0 = 0; d0 < D_pad; d0 += VEC) {
                float acc_vec[VEC];
#pragma omp simd
                for (int dd = 0; dd < VEC; dd++) acc_vec[dd] = dq_i[d0 + dd];
                for (int j = 0; j < keys; j++) {
                    const float ds_j = ds[j], *k_j = w->k_tile + j * D_pad + d0;
#pragma omp simd
                    for (int dd = 0; dd < VEC; dd++) acc_vec[dd] += ds_j * k_j[dd];
                }
#pragma omp simd
                for (int dd = 0; dd < VEC; dd++) dq_i[d0 + dd] = acc_vec[dd];
            }
        }
    }

    // dQ = scale * the sum (the scores were in base 2, the gradient is of the natural-log softmax).
    for (int r = 0; r < rows; r++) {
        const int64_t i = q_start + r;
        for (int64_t d = 0; d < D; d++)
            dq[i * t->dq_strides.s + d * t->dq_strides.d] = shape->scale * w->dq_acc[r * D_pad + d];
    }
}

void backward_dq_dropout_cpu(const fa_shape *shape, float dropout_p, uint64_t seed, int block_m, int block_n,
                             const backward_tensors *t) {
    const dropout_params drop = dropout_params_for(dropout_p, seed);
    const int64_t n_q_tiles = (shape->Sq + block_m - 1) / block_m, BH = shape->B * shape->H;
#pragma omp parallel
    {
        workspace w = workspace_alloc(shape->D, block_m, block_n);
        // The two loops are the CUDA grid, (blockIdx.y, blockIdx.x) = (bh, q_tile): one iteration is one thread block.
#pragma omp for collapse(2) schedule(dynamic)
        for (int64_t bh = 0; bh < BH; bh++)
            for (int64_t q_tile = 0; q_tile < n_q_tiles; q_tile++) {
                // The Q tile order. Causal, the last Q tiles see the most keys: starting with them, the short ones
                // fill in at the end instead of a few long ones running last.
                const int64_t q_start = (n_q_tiles - 1 - q_tile) * block_m;
                q_tile_program(shape, drop, block_m, block_n, bh, q_start, t, &w);
            }
        free(w.q_tile);
    }
}
