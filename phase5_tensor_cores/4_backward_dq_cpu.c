// 4_backward_dq_cpu.c - phase 5, step 4, on the CPU: the deterministic dQ pass of the tensor-core backward.
//
// What it adds over phase 4's dQ pass (phase4_backward/backward_dq_cpu.c): the half inputs and the roundings of the
//   dK/dV pass (4_backward_dkdv_cpu.c says where and why): S = Q K^T and dP = dO V^T are float32 sums of exact
//   products of half values, dS is formed from the float32 P and rounded to the half type before dQ += dS K, as the
//   GPU's mma takes it. The pass walks the problem by queries, as the forward does (a warp owns 16 queries), and is
//   register-blocked 4 queries x 16 columns at a time with AVX2, 8 x 32 with AVX-512 (the micro-kernels of
//   backward_tiles.h, block_rows()). Every dQ_i is
//   summed by one program in one fixed order: the same bits on every run, whatever the number of threads.
// CUDA twin: phase5_tensor_cores/4_backward_dq_cuda.cu
// Diff:      diff -u phase4_backward/backward_dq_cpu.c phase5_tensor_cores/4_backward_dq_cpu.c
// Run:       build/bin/phase5_tensor_cores --impl cpu --step 4 --dtype fp16 --B 1 --H 4 --S 1024 --D 64
#include "backward_tiles.h"   // the tiles and micro-kernels both passes share

#include "fa_exp2.h"
#include "fa_contract.h"
#include "fa_simd.h"   // FA_SIMD_CLONES: the hot loops in the CPU's widest vectors

#include <string.h>

// One Q tile of one head: what one block of the deterministic dQ kernel does. Queries q_start .. + BLOCK_M - 1.
FA_SIMD_CLONES
static void dq_program(const fa_shape *shape, int dtype, int BLOCK_M, int BLOCK_N, int group, int64_t bh,
                       int64_t q_start, const tc_backward_tensors *t, workspace *w) {
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
    const int bf16_dot = bf16_dot_available(dtype);   // then group is 8: bf16_dot_along_d's block
    const int cols = block_cols(group);

    stage_rows(q, t->q_strides, dtype, q_start, BLOCK_M, S_q, D, D_pad, w->q_tile, NULL, 0);
    stage_rows(dout, t->do_strides, dtype, q_start, BLOCK_M, S_q, D, D_pad, w->do_tile, NULL, 0);
    if (bf16_dot) {   // the two passes lay the bf16 tiles out differently: start from zeros
        memset(w->rows_a, 0, 4 * w->R_pad * D_pad * sizeof(uint16_t));
        bf16_dot_stage(q, t->q_strides, q_start, BLOCK_M, S_q, D, D_pad, w->rows_a, NULL, 0);
        bf16_dot_stage(dout, t->do_strides, q_start, BLOCK_M, S_q, D, D_pad, w->rows_b, NULL, 0);
    }
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
        if (bf16_dot) {
            bf16_dot_stage(k, t->k_strides, k_start, BLOCK_N, S_k, D, D_pad, NULL, w->pairs_a, N_pad);
            bf16_dot_stage(v, t->v_strides, k_start, BLOCK_N, S_k, D, D_pad, NULL, w->pairs_b, N_pad);
        }

        // The warps' queries, `group` at a time: `group` rows of S and of dP. The last group may run past the tile's
        // queries: those rows of Q and dO are zeros, their dS is 0 and their dQ is never stored.
        for (int i0 = 0; i0 < rows; i0 += group) {
            float *s = w->s, *dp = w->dp;   // [group][N_pad]
            // S_ij = Q_i . K_j and dP_ij = dO_i . V_j, float32 sums of exact products, `cols` keys at a time.
            for (int64_t j0 = 0; j0 < N_pad; j0 += cols) {
                if (bf16_dot) {
                    bf16_dot_along_d(w->rows_a + i0 * D_pad, D_pad, w->pairs_a + 2 * j0, N_pad, D, s + j0, N_pad);
                    bf16_dot_along_d(w->rows_b + i0 * D_pad, D_pad, w->pairs_b + 2 * j0, N_pad, D, dp + j0, N_pad);
                    continue;
                }
                along_d(group, w->q_tile + i0 * D_pad, D_pad, w->k_t + j0, N_pad, D, s + j0, N_pad);
                along_d(group, w->do_tile + i0 * D_pad, D_pad, w->v_t + j0, N_pad, D, dp + j0, N_pad);
            }
            // P (0 past S_k and, on a diagonal tile, after the row), dS from the float32 P, rounded for dS K (two
            // loops again: the first one vectorises).
            for (int r = 0; r < group; r++) {
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
                round_to_half(dp_i, N_pad, dtype);
            }
            // dQ_i += sum_j dS_ij K_j, `group` queries x `cols` dims at a time, in key order: the same sum, in the same
            // order, every run.
            for (int64_t d0 = 0; d0 < D; d0 += cols)
                along_rows(group, dp, N_pad, keys, w->k_tile + d0, D_pad, dq_acc + i0 * D_pad + d0);
        }
    }

    float *dq = t->dq + b * t->dq_strides.b + h * t->dq_strides.h;
    for (int i = 0; i < rows; i++)
        for (int64_t d = 0; d < D; d++)
            dq[(q_start + i) * t->dq_strides.s + d * t->dq_strides.d] = scale * dq_acc[i * D_pad + d];
}

void backward_tc_dq_cpu(const fa_shape *shape, int dtype, int block_m, int block_n, const tc_backward_tensors *t) {
    const int64_t BH = shape->B * shape->H, n_q_tiles = (shape->Sq + block_m - 1) / block_m;
    const int group = block_rows(dtype);
#pragma omp parallel
    {
        workspace w = workspace_alloc(shape->D, block_m, block_n);
        // The loops are the CUDA grid, (blockIdx.y, blockIdx.x) = (bh, tile): one iteration is one thread block.
#pragma omp for collapse(2) schedule(dynamic)
        for (int64_t bh = 0; bh < BH; bh++)
            for (int64_t i = 0; i < n_q_tiles; i++) {
                // Causal: the last Q tiles see the most keys; starting with them, the short ones fill in last.
                const int64_t q_tile = n_q_tiles - 1 - i;
                dq_program(shape, dtype, block_m, block_n, group, bh, q_tile * block_m, t, &w);
            }
        free(w.q_tile);   // the start of the one allocation
    }
}
