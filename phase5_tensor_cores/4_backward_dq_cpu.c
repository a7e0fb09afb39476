// 4_backward_dq_cpu.c - phase 5, step 4, on the CPU: the deterministic dQ pass of the tensor-core backward.
//
// What it adds over phase 4's dQ pass (phase4_backward/backward_dq_cpu.c): the half inputs and the roundings of the
//   dK/dV pass (4_backward_dkdv_cpu.c says where and why): S = Q K^T and dP = dO V^T are float32 sums of exact
//   products of half values, dS is formed from the float32 P and rounded to the half type before dQ += dS K, as the
//   GPU's mma takes it. The GPU's warps walk the problem by queries, as the forward does (a warp owns 16 queries);
//   this pass computes the same sums as S^T = K Q^T and dP^T = V dO^T, by keys, the mirror of the dK/dV pass: Q and
//   dO, the tiles that stay, are staged transposed once per program, each K/V tile is a vector copy of its rows, and
//   dQ += dS K reads dS by columns of dS^T. Register-blocked 6 rows x 16 columns at a time with AVX2, 8 x 32 with
//   AVX-512 (the micro-kernels of backward_tiles.h, block_rows()). Every dQ_i is summed by one program in one fixed
//   order: the same bits on every run, whatever the number of threads.
// CUDA twin: phase5_tensor_cores/4_backward_dq_cuda.cu
// Diff:      diff -u phase4_backward/backward_dq_cpu.c phase5_tensor_cores/4_backward_dq_cpu.c
// Run:       build/bin/phase5_tensor_cores --impl cpu --step 4 --dtype fp16 --B 1 --H 4 --S 1024 --D 64
#include "backward_tiles.h"   // the tiles and micro-kernels both passes share

#include "fa_exp2.h"
#include "fa_contract.h"
#include "fa_simd.h"   // FA_SIMD_CLONES: the hot loops in the CPU's widest vectors

// One Q tile of one head: what one block of the deterministic dQ kernel does. Queries q_start .. + BLOCK_M - 1.
FA_SIMD_CLONES
static void dq_program(const fa_shape *shape, int dtype, int BLOCK_M, int BLOCK_N, int group, int64_t bh,
                       int64_t q_start, const tc_backward_tensors *t, workspace *w) {
    const int64_t S_q = shape->Sq, S_k = shape->Sk, D = shape->D, M_pad = w->M_pad;
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
    float *s_t = w->p_tile, *ds_t = w->ds_tile;   // [N_pad][M_pad]: S^T (then P^T) and dS^T, keys x queries
    const int cols = block_cols(group);
    const int rows_pad = (int)round_up(rows, cols);   // whole blocks of queries

    // The Q tile, once: transposed for S^T = K Q^T and dP^T = V dO^T (queries in vectors).
    stage_rows(q, t->q_strides, dtype, q_start, BLOCK_M, S_q, D, D_pad, w->q_tile, w->q_t, M_pad);
    stage_rows(dout, t->do_strides, dtype, q_start, BLOCK_M, S_q, D, D_pad, w->do_tile, w->do_t, M_pad);
    for (int i = 0; i < BLOCK_M; i++) {
        w->lse2[i] = i < rows ? lse[q_start + i] * LOG2E : 0.0f;
        w->delta[i] = i < rows ? delta[q_start + i] : 0.0f;
    }
    for (int64_t x = 0; x < M_pad * D_pad; x++) dq_acc[x] = 0.0f;

    for (int64_t k_start = 0; k_start < S_k; k_start += BLOCK_N) {
        const int stage = causal_tile_stage(shape->causal, q_start, k_start, BLOCK_M, BLOCK_N, S_q, S_k);
        if (stage == TILE_FUTURE) break;
        const int keys = (int)(S_k - k_start < BLOCK_N ? S_k - k_start : BLOCK_N);
        // The K/V tile's rows, a vector copy each: the tile that changes every iteration is the one read as it is.
        stage_rows(k, t->k_strides, dtype, k_start, BLOCK_N, S_k, D, D_pad, w->k_tile, NULL, 0);
        stage_rows(v, t->v_strides, dtype, k_start, BLOCK_N, S_k, D, D_pad, w->v_tile, NULL, 0);

        // The keys, `group` at a time: `group` rows of S^T and of dP^T. The last group may run past the tile's
        // keys: those rows of K and V are zeros, their dS is 0 and they add nothing.
        for (int c0 = 0; c0 < keys; c0 += group) {
            // S_ij = Q_i . K_j and dP_ij = dO_i . V_j, float32 sums of exact products, computed as S^T = K Q^T and
            // dP^T = V dO^T (the same sums; the GPU computes S and dP), `cols` queries at a time.
            for (int i0 = 0; i0 < rows_pad; i0 += cols) {
                float *s_block = s_t + c0 * M_pad + i0, *dp_block = ds_t + c0 * M_pad + i0;
                along_d(group, w->k_tile + c0 * D_pad, D_pad, w->q_t + i0, M_pad, D, s_block, M_pad);
                along_d(group, w->v_tile + c0 * D_pad, D_pad, w->do_t + i0, M_pad, D, dp_block, M_pad);
            }
            // P (0 for a key past S_k, a query past S_q and, on a diagonal tile, a query before the key), dS from the
            // float32 P, rounded for dS K.
            for (int r = 0; r < group; r++) {
                const int64_t key = k_start + c0 + r;
                // The queries that see this key: i_first .. i_end - 1 (none for a key past S_k).
                const int64_t i_first = stage == TILE_DIAGONAL && key > q_start ? key - q_start : 0;
                const int64_t i_end = c0 + r < keys ? rows : 0;
                float *ds_c = ds_t + (c0 + r) * M_pad;
                p_and_ds(s_t + (c0 + r) * M_pad, ds_c, rows_pad, i_first, i_end, qk_scale, w->lse2, w->delta, 1);
                round_to_half(ds_c, rows_pad, dtype);
            }
        }
        // dQ_i += sum_j dS_ij K_j, `group` queries x `cols` dims at a time, dS read by columns of dS^T, in key order:
        // the same sum, in the same order, every run.
        for (int i0 = 0; i0 < rows; i0 += group)
            for (int64_t d0 = 0; d0 < D; d0 += cols)
                along_rows(group, ds_t + i0, 1, M_pad, keys, w->k_tile + d0, D_pad, dq_acc + i0 * D_pad + d0);
    }

    float *dq = t->dq + b * t->dq_strides.b + h * t->dq_strides.h;
    for (int i = 0; i < rows; i++)
        for (int64_t d = 0; d < D; d++)
            dq[(q_start + i) * t->dq_strides.s + d * t->dq_strides.d] = scale * dq_acc[i * D_pad + d];
}

void backward_tc_dq_cpu(const fa_shape *shape, int dtype, int block_m, int block_n, const tc_backward_tensors *t) {
    const int64_t BH = shape->B * shape->H, n_q_tiles = (shape->Sq + block_m - 1) / block_m;
    const int group = block_rows();
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
