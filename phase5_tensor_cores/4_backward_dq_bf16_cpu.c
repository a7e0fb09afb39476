// 4_backward_dq_bf16_cpu.c - phase 5, step 4, on the CPU, bf16 inputs on the CPU's own bf16 arithmetic: the
// deterministic dQ pass with every product on AMX-BF16 tiles or AVX512_BF16 (bf16_dot.h).
//
// What it changes from the float32 dQ pass (4_backward_dq_cpu.c): the same sums and roundings, every product a
//   32 x 32 block of bf16_dot_block() (4_backward_dkdv_bf16_cpu.c says why the blocks decide how the tiles are laid
//   out). Here the queries are the rows, as the GPU's warps own queries in this pass: S = Q K^T and dP = dO V^T (Q
//   and dO by rows, K and V in pairs along d), dS along each query's row, rounded to bf16 bits, then dQ += dS K (dS
//   by rows, K in pairs along the keys). The K/V tiles stream past every program of their head: staged once for the
//   pass (bf16_stage()). Every dQ_i is summed by one program, along the K tiles in order and, within a block, in the
//   unit's fixed order: the same bits on every run, whatever the number of threads.
// CUDA twin: phase5_tensor_cores/4_backward_dq_cuda.cu
// Diff:      diff -u phase5_tensor_cores/4_backward_dq_cpu.c phase5_tensor_cores/4_backward_dq_bf16_cpu.c
// Run:       build/bin/phase5_tensor_cores --impl cpu --step 4 --dtype bf16 --B 1 --H 4 --S 1024 --D 64
#include "backward_tiles.h"   // the tiles and micro-kernels both passes share

#include "fa_exp2.h"
#include "fa_contract.h"
#include "fa_simd.h"   // FA_SIMD_CLONES: the hot loops in the CPU's widest vectors

// What the pass reads, staged: Q and dO by rows; K and V in pairs along d (S, dP); K in pairs along its rows (dQ).
typedef struct {
    bf16_staged q_rows, do_rows, k_pairs_d, v_pairs_d, k_pairs_rows;
} staged_inputs;

// One Q tile of one head: what one block of the deterministic dQ kernel does. Queries q_start .. + BLOCK_M - 1.
FA_SIMD_CLONES
static void dq_program(const fa_shape *shape, int BLOCK_M, int BLOCK_N, int64_t bh, int64_t q_start,
                       const tc_backward_tensors *t, const staged_inputs *in, bf16_workspace *w) {
    const int64_t S_q = shape->Sq, S_k = shape->Sk, D = shape->D, N_pad = w->N_pad;
    const int64_t D_pad = w->D_pad;
    const float scale = shape->scale, qk_scale = scale * LOG2E;
    const int64_t b = bh / shape->H, h = bh % shape->H;
    const float *lse = t->lse + bh * S_q, *delta = t->delta + bh * S_q;
    const int rows = (int)(S_q - q_start < BLOCK_M ? S_q - q_start : BLOCK_M);
    const int64_t rows_pad = round_up(rows, BF16_DOT_BLOCK), q_tile = q_start / BLOCK_M;
    float *dq_acc = w->acc_a;
    float *s = w->scores, *dp = w->grads;   // [M_pad][N_pad]: S (then P) and dP (then dS), queries x keys
    const bf16_dot_unit unit = w->unit;

    // The Q tile, by rows: the rows of S's and dP's blocks.
    const uint16_t *q_rows = bf16_tile(&in->q_rows, bh, q_tile), *do_rows = bf16_tile(&in->do_rows, bh, q_tile);
    for (int i = 0; i < w->M_pad; i++) {
        w->lse2[i] = i < rows ? lse[q_start + i] * LOG2E : 0.0f;
        w->delta[i] = i < rows ? delta[q_start + i] : 0.0f;
    }
    for (int64_t x = 0; x < w->M_pad * D_pad; x++) dq_acc[x] = 0.0f;

    for (int64_t k_start = 0; k_start < S_k; k_start += BLOCK_N) {
        const int stage = causal_tile_stage(shape->causal, q_start, k_start, BLOCK_M, BLOCK_N, S_q, S_k);
        if (stage == TILE_FUTURE) break;
        const int keys = (int)(S_k - k_start < BLOCK_N ? S_k - k_start : BLOCK_N);
        const int64_t keys_pad = round_up(keys, BF16_DOT_BLOCK), kv_tile = k_start / BLOCK_N;
        // The K/V tile, staged for the pass: nothing to copy here.
        const uint16_t *k_pairs_d = bf16_tile(&in->k_pairs_d, bh, kv_tile);
        const uint16_t *v_pairs_d = bf16_tile(&in->v_pairs_d, bh, kv_tile);

        // S_ij = Q_i . K_j and dP_ij = dO_i . V_j, float32 sums of exact products, 32 queries x 32 keys at a time.
        for (int64_t i0 = 0; i0 < rows_pad; i0 += BF16_DOT_BLOCK)
            for (int64_t c0 = 0; c0 < keys_pad; c0 += BF16_DOT_BLOCK) {
                bf16_dot_block(unit, q_rows + i0 * D_pad, D_pad, k_pairs_d + 2 * c0, N_pad, D_pad,
                               s + i0 * N_pad + c0, N_pad, 0);
                bf16_dot_block(unit, do_rows + i0 * D_pad, D_pad, v_pairs_d + 2 * c0, N_pad, D_pad,
                               dp + i0 * N_pad + c0, N_pad, 0);
            }
        // P (0 for a key past S_k, a query past S_q and, on a diagonal tile, a key after the query), dS from the
        // float32 P, rounded to bf16 for dS K.
        for (int64_t i = 0; i < rows_pad; i++) {
            const int64_t row = q_start + i;
            // The keys this query sees: 0 .. j_end - 1 (none for a query past S_q or before the tile's keys).
            int64_t j_end = stage == TILE_DIAGONAL && row - k_start + 1 < keys ? row - k_start + 1 : keys;
            if (i >= rows || j_end < 0) j_end = 0;
            p_and_ds(s + i * N_pad, dp + i * N_pad, keys_pad, 0, j_end, qk_scale, &w->lse2[i], &w->delta[i], 0);
            round_to_bf16_bits(dp + i * N_pad, w->ds_bits + i * N_pad, keys_pad);
        }
        // dQ_i += sum_j dS_ij K_j, 32 queries x 32 dims at a time, the sums along the tile's keys (K in pairs along
        // them), the K tiles in order: the same sum, in the same order, every run.
        const uint16_t *k_pairs_rows = bf16_tile(&in->k_pairs_rows, bh, kv_tile);
        for (int64_t i0 = 0; i0 < rows_pad; i0 += BF16_DOT_BLOCK)
            for (int64_t d0 = 0; d0 < D_pad; d0 += BF16_DOT_BLOCK)
                bf16_dot_block(unit, w->ds_bits + i0 * N_pad, N_pad, k_pairs_rows + 2 * d0, D_pad, keys_pad,
                               dq_acc + i0 * D_pad + d0, D_pad, 1);
    }

    float *dq = t->dq + b * t->dq_strides.b + h * t->dq_strides.h;
    for (int i = 0; i < rows; i++)
        for (int64_t d = 0; d < D; d++)
            dq[(q_start + i) * t->dq_strides.s + d * t->dq_strides.d] = scale * dq_acc[i * D_pad + d];
}

void backward_bf16_dq_cpu(const fa_shape *shape, int block_m, int block_n, const tc_backward_tensors *t,
                          bf16_dot_unit unit) {
    const int64_t BH = shape->B * shape->H, n_q_tiles = (shape->Sq + block_m - 1) / block_m;
    const int64_t D_pad = round_up(shape->D, BF16_DOT_BLOCK);
    const int64_t Sq = shape->Sq, Sk = shape->Sk;
    staged_inputs in = {
        bf16_stage(shape, t->q, t->q_strides, Sq, block_m, D_pad, BF16_TILE_ROWS),
        bf16_stage(shape, t->dout, t->do_strides, Sq, block_m, D_pad, BF16_TILE_ROWS),
        bf16_stage(shape, t->k, t->k_strides, Sk, block_n, D_pad, BF16_TILE_PAIRS_ALONG_D),
        bf16_stage(shape, t->v, t->v_strides, Sk, block_n, D_pad, BF16_TILE_PAIRS_ALONG_D),
        bf16_stage(shape, t->k, t->k_strides, Sk, block_n, D_pad, BF16_TILE_PAIRS_ALONG_ROWS),
    };
#pragma omp parallel
    {
        bf16_workspace w = bf16_workspace_alloc(unit, shape->D, block_m, block_n);
        bf16_dot_thread_begin(unit);
        // The loops are the CUDA grid, (blockIdx.y, blockIdx.x) = (bh, tile): one iteration is one thread block.
#pragma omp for collapse(2) schedule(dynamic)
        for (int64_t bh = 0; bh < BH; bh++)
            for (int64_t i = 0; i < n_q_tiles; i++) {
                // Causal: the last Q tiles see the most keys; starting with them, the short ones fill in last.
                const int64_t q_tile = n_q_tiles - 1 - i;
                dq_program(shape, block_m, block_n, bh, q_tile * block_m, t, &in, &w);
            }
        bf16_dot_thread_end(unit);
        free(w.scores);   // the start of the one allocation
    }
    free(in.q_rows.bits), free(in.do_rows.bits), free(in.k_pairs_d.bits), free(in.v_pairs_d.bits);
    free(in.k_pairs_rows.bits);
}
