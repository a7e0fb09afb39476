// gqa_backward_dq_cpu.c - phase 6: the backward pass of GQA / MQA, on the CPU.
//
// What it adds to phase 4 (phase4_backward/backward_dq_cpu.c):
//   H query heads share H_kv K/V heads (group = H / H_kv, phase6_extensions/gqa_cpu.c). dQ of query head h reads K/V
//   head h / group. dK and dV of K/V head g are sums over the query heads of its group: one program per (K/V head, key
//   tile) walks the Q tiles of each of the group's heads in turn, in a fixed order, so the sums need no atomics and
//   are the same on every run.
// Twin:      phase6_extensions/gqa_backward_dq_cuda.cu
// Diff:      diff -u phase4_backward/backward_dq_cpu.c phase6_extensions/gqa_backward_dq_cpu.c
// Run:       build/bin/phase6_extensions --impl cpu --backward --H 8 --H-kv 2 --S 1024 --D 64 --causal
//
// dQ_i = scale * sum_j dS_ij K_j is a sum over keys, so its natural owner is a program that holds the Q tile and walks
// over the K/V tiles: the loop order of the forward pass (phase 3 step 3). It recomputes S, P, dP and dS, which the
// main pass already computed once, so the backward does more arithmetic than the atomic variant; in return every
// dQ_i is summed by one program in a fixed order, and the result is the same to the last bit on every run, whatever
// the number of threads.
#include "backward_ext.h"
#include "fa_exp2.h"
#include "fa_tensor.h"

#include <stdlib.h>

#include "fa_math.h"   // LOG2E, LN2 and the log-sum-exp conversions
#define VEC 16                      // floats per step of the inner loops (see backward_dkdv_cpu.c)

static int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// One thread's working memory: the CPU's stand-in for a CUDA block's shared memory and its threads' registers.
typedef struct {
    int64_t N_pad, D_pad;         // BLOCK_N and D rounded up to a multiple of VEC
    float *q_tile, *do_tile;      // [BLOCK_M, D_pad]  qk_scale Q_i and dO_i of each query row (registers on the GPU)
    float *dq_acc;                // [BLOCK_M, D_pad]  the dQ_i accumulators (registers)
    float *lse2_hi, *lse2_lo;     // [BLOCK_M]         LSE_i * LOG2E = hi + lo (lse_to_base2, fa_math.h) (registers)
    float *delta;                 // [BLOCK_M]         Delta_i (registers)
    float *k_t, *v_t;             // [D_pad, N_pad]    the K and V tiles, transposed: the dot products run along j
    float *k_tile;                // [N_pad, D_pad]    the K tile as rows: the dQ update runs along d
    float *s, *dp;                // [N_pad]           one query row's S (then P) and dP (then dS) against the tile
} dq_workspace;

static int64_t workspace_floats(int64_t BLOCK_M, int64_t BLOCK_N, int64_t D) {
    const int64_t N_pad = round_up(BLOCK_N, VEC), D_pad = round_up(D, VEC);
    return 3 * BLOCK_M * D_pad + 3 * BLOCK_M + 2 * D_pad * N_pad + N_pad * D_pad + 2 * N_pad;
}

// One allocation per thread, cut into the tiles above, all zero (fa_alloc_floats exits 2 if the memory is not there).
static dq_workspace workspace_alloc(int64_t BLOCK_M, int64_t BLOCK_N, int64_t D) {
    dq_workspace w;
    w.N_pad = round_up(BLOCK_N, VEC), w.D_pad = round_up(D, VEC);
    const int64_t total = workspace_floats(BLOCK_M, BLOCK_N, D);
    float *next = fa_alloc_floats(total, "the tiles of one dQ program");
    for (int64_t x = 0; x < total; x++) next[x] = 0.0f;   // padding stays zero from here on
    w.q_tile = next, next += BLOCK_M * w.D_pad;
    w.do_tile = next, next += BLOCK_M * w.D_pad;
    w.dq_acc = next, next += BLOCK_M * w.D_pad;
    w.lse2_hi = next, next += BLOCK_M;
    w.lse2_lo = next, next += BLOCK_M;
    w.delta = next, next += BLOCK_M;
    w.k_t = next, next += w.D_pad * w.N_pad;
    w.v_t = next, next += w.D_pad * w.N_pad;
    w.k_tile = next, next += w.N_pad * w.D_pad;
    w.s = next, next += w.N_pad;
    w.dp = next;
    return w;
}

void backward_dq_gqa_cpu(const fa_shape *shape, int64_t H_kv, int block_m, int block_n, const backward_tensors *t) {
    const int64_t H = shape->H, S_q = shape->Sq, S_k = shape->Sk, D = shape->D;
    const int64_t BLOCK_M = block_m, BLOCK_N = block_n;
    const int64_t n_q_tiles = (S_q + BLOCK_M - 1) / BLOCK_M, n_kv_tiles = (S_k + BLOCK_N - 1) / BLOCK_N;
    const float scale = shape->scale, qk_scale = scale * LOG2E;
    const int causal = shape->causal;
    const fa_strides sq = t->q_strides, sk = t->k_strides, sv = t->v_strides, sdo = t->do_strides;

#pragma omp parallel
    {
        dq_workspace w = workspace_alloc(BLOCK_M, BLOCK_N, D);
        const int64_t N_pad = w.N_pad, D_pad = w.D_pad;
        // The grid: (b, h) and the Q tile are blockIdx.y and blockIdx.x of the CUDA twin.
#pragma omp for collapse(2) schedule(dynamic)
        for (int64_t bh = 0; bh < shape->B * H; bh++) {
            for (int64_t q_tile = 0; q_tile < n_q_tiles; q_tile++) {
                // ---- the body of one thread block ----
                const int64_t b = bh / H, h = bh % H;
                const float *q_head = t->q + b * sq.b + h * sq.h, *do_head = t->dout + b * sdo.b + h * sdo.h;
                // GQA: query head h reads K/V head h / group.
                const int64_t g = h / (H / H_kv);
                const float *k_head = t->k + b * sk.b + g * sk.h, *v_head = t->v + b * sv.b + g * sv.h;
                const int64_t q_start = q_tile * BLOCK_M;
                const int64_t rows = S_q - q_start < BLOCK_M ? S_q - q_start : BLOCK_M;   // query rows in this tile

                // Q_i (times qk_scale, as the forward held it), dO_i, LSE_i and Delta_i of every row, and zeroed
                // accumulators.
                for (int64_t r = 0; r < rows; r++) {
                    for (int64_t d = 0; d < D; d++) {
                        w.q_tile[r * D_pad + d] = q_head[(q_start + r) * sq.s + d * sq.d] * qk_scale;
                        w.do_tile[r * D_pad + d] = do_head[(q_start + r) * sdo.s + d * sdo.d];
                    }
                    for (int64_t d = 0; d < D_pad; d++) w.dq_acc[r * D_pad + d] = 0.0f;
                    const float residual = t->lse_residual ? t->lse_residual[bh * S_q + q_start + r] : 0.0f;
                    lse_to_base2(t->lse[bh * S_q + q_start + r], residual, &w.lse2_hi[r], &w.lse2_lo[r]);
                    w.delta[r] = t->delta[bh * S_q + q_start + r];
                }

                // Causal: the tile's last row sees no key after itself, so the K/V tiles past it are skipped (the
                // forward's pruning, exactly).
                int64_t end_kv_tile = n_kv_tiles;
                if (causal) {
                    const int64_t last_key = q_start + rows - 1 < S_k - 1 ? q_start + rows - 1 : S_k - 1;
                    end_kv_tile = last_key / BLOCK_N + 1;
                }
                for (int64_t kv_tile = 0; kv_tile < end_kv_tile; kv_tile++) {
                    const int64_t kv_start = kv_tile * BLOCK_N;
                    const int64_t keys = S_k - kv_start < BLOCK_N ? S_k - kv_start : BLOCK_N;
                    // Stage the K/V tile in both layouts; keys past S_k are zeros.
                    for (int64_t c = 0; c < BLOCK_N; c++) {
                        for (int64_t d = 0; d < D; d++) {
                            const float k = c < keys ? k_head[(kv_start + c) * sk.s + d * sk.d] : 0.0f;
                            w.k_t[d * N_pad + c] = k, w.k_tile[c * D_pad + d] = k;
                            w.v_t[d * N_pad + c] = c < keys ? v_head[(kv_start + c) * sv.s + d * sv.d] : 0.0f;
                        }
                    }
                    const int needs_mask = causal && kv_start + keys - 1 > q_start;   // the tile crosses the diagonal

                    for (int64_t r = 0; r < rows; r++) {   // query row i = q_start + r: one CUDA thread
                        const int64_t i = q_start + r;
                        const float *q_i = w.q_tile + r * D_pad, *do_i = w.do_tile + r * D_pad;
                        // 1. s_j = S_ij * LOG2E = (qk_scale Q_i) . K_j, summed as the forward sums it (four parts, dim
                        //    d in part d % 4, added in pairs: forward4d.h), and dp_j = dO_i . V_j in one sum, for every
                        //    key of the tile, VEC keys at a time. The tiles are zero past D.
                        for (int64_t c0 = 0; c0 < N_pad; c0 += VEC) {
                            float s0[VEC] = {0.0f}, s1[VEC] = {0.0f}, s2[VEC] = {0.0f}, s3[VEC] = {0.0f};
                            float dp_vec[VEC] = {0.0f};
                            for (int64_t d = 0; d < D; d += 4) {
                                const float *k_d = w.k_t + d * N_pad + c0, *v_d = w.v_t + d * N_pad + c0;
                                const float q0 = q_i[d], q1 = q_i[d + 1], q2 = q_i[d + 2], q3 = q_i[d + 3];
#pragma omp simd
                                for (int cc = 0; cc < VEC; cc++) {
                                    s0[cc] += q0 * k_d[cc];
                                    s1[cc] += q1 * k_d[N_pad + cc];
                                    s2[cc] += q2 * k_d[2 * N_pad + cc];
                                    s3[cc] += q3 * k_d[3 * N_pad + cc];
                                }
                                for (int e = 0; e < 4; e++) {
                                    const float do_d = do_i[d + e];
#pragma omp simd
                                    for (int cc = 0; cc < VEC; cc++) dp_vec[cc] += do_d * v_d[e * N_pad + cc];
                                }
                            }
#pragma omp simd
                            for (int cc = 0; cc < VEC; cc++)
                                w.s[c0 + cc] = (s0[cc] + s1[cc]) + (s2[cc] + s3[cc]), w.dp[c0 + cc] = dp_vec[cc];
                        }
                        // 2. P_ij from the saved log-sum-exp, and dS_ij = P_ij (dP_ij - Delta_i); 0 where masked.
#pragma omp simd
                        for (int64_t c = 0; c < N_pad; c++) {
                            const int visible = c < keys && !(needs_mask && kv_start + c > i);
                            const float p = visible ? fa_exp2((w.s[c] - w.lse2_hi[r]) - w.lse2_lo[r]) : 0.0f;
                            w.dp[c] = p * (w.dp[c] - w.delta[r]);
                        }
                        // 3. dQ_i += sum_j dS_ij K_j, VEC dims at a time, kept in registers while j runs.
                        float *dq_i = w.dq_acc + r * D_pad;
                        for (int64_t d0 = 0; d0 < D_pad; d0 += VEC) {
                            float acc[VEC];
#pragma omp simd
                            for (int dd = 0; dd < VEC; dd++) acc[dd] = dq_i[d0 + dd];
                            for (int64_t c = 0; c < keys; c++) {
                                const float ds = w.dp[c], *k_c = w.k_tile + c * D_pad + d0;
#pragma omp simd
                                for (int dd = 0; dd < VEC; dd++) acc[dd] += ds * k_c[dd];
                            }
#pragma omp simd
                            for (int dd = 0; dd < VEC; dd++) dq_i[d0 + dd] = acc[dd];
                        }
                    }
                }

                float *dq_head = t->dq + b * t->dq_strides.b + h * t->dq_strides.h;
                for (int64_t r = 0; r < rows; r++) {
                    float *dq_i = dq_head + (q_start + r) * t->dq_strides.s;
                    for (int64_t d = 0; d < D; d++) dq_i[d * t->dq_strides.d] = scale * w.dq_acc[r * D_pad + d];
                }
            }
        }
        free(w.q_tile);   // the start of the one allocation
    }
}
