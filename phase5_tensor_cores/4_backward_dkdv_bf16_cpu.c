// 4_backward_dkdv_bf16_cpu.c - phase 5, step 4, on the CPU, bf16 inputs on the CPU's own bf16 arithmetic: the dK/dV
// pass of the tensor-core backward with every product on AMX-BF16 tiles or AVX512_BF16 (bf16_dot.h).
//
// What it changes from the float32 dK/dV pass (4_backward_dkdv_cpu.c): the same sums and the same roundings (P and
//   dS formed in float32 and rounded to bf16 before dV += P^T dO and dK += dS^T Q), but every product is a 32 x 32
//   block of bf16_dot_block(), a float32 sum of exact bf16 products, on the unit the CPU has: the CPU's mma. Such a
//   block reads one operand by rows (the sum runs along them) and the other in pairs along the sum
//   (bf16_dot.h draws both), so the pass arranges its tiles as the GPU's warps do: the keys are the rows.
//   S^T = K Q^T and dP^T = V dO^T (K and V by rows, Q and dO in pairs along d), P^T and dS^T along each key's row,
//   rounded to bf16 bits, then dV += P^T dO and dK += dS^T Q (P^T and dS^T by rows, dO and Q in pairs along the
//   queries). The Q and dO tiles stream past every program of their head, so both orders of them are staged once
//   for the pass, before it (bf16_stage()); a program only points into them.
// The dQ pass: phase5_tensor_cores/4_backward_dq_bf16_cpu.c; the preprocess and the order: 4_backward_cpu.c.
// CUDA twin: phase5_tensor_cores/4_backward_dkdv_cuda.cu
// Diff:      diff -u phase5_tensor_cores/4_backward_dkdv_cpu.c phase5_tensor_cores/4_backward_dkdv_bf16_cpu.c
// Run:       build/bin/phase5_tensor_cores --impl cpu --step 4 --dtype bf16 --B 1 --H 4 --S 1024 --D 64 --dq both
#include "backward_tiles.h"   // the tiles and micro-kernels both passes share

#include "fa_exp2.h"
#include "fa_contract.h"
#include "fa_simd.h"   // FA_SIMD_CLONES: the hot loops in the CPU's widest vectors

// What the pass reads, staged: Q and dO in pairs along d (S^T, dP^T) and along their rows (dK, dV); K and V by rows;
// K in pairs along its rows for the atomic dQ.
typedef struct {
    bf16_staged q_pairs_d, do_pairs_d, q_pairs_rows, do_pairs_rows, k_rows, v_rows, k_pairs_rows;
} staged_inputs;

// One K/V tile of one head: what one block of the dK/dV kernel does. Keys k_start .. k_start + BLOCK_N - 1.
FA_SIMD_CLONES
static void dkdv_program(const fa_shape *shape, int BLOCK_M, int BLOCK_N, int64_t bh, int64_t k_start,
                         const tc_backward_tensors *t, const staged_inputs *in, int atomic_dq, bf16_workspace *w) {
    const int64_t S_q = shape->Sq, S_k = shape->Sk, D = shape->D, M_pad = w->M_pad, N_pad = w->N_pad;
    const int64_t D_pad = w->D_pad;
    const float scale = shape->scale, qk_scale = scale * LOG2E;
    const int64_t b = bh / shape->H, h = bh % shape->H;
    const float *lse = t->lse + bh * S_q, *delta = t->delta + bh * S_q;
    const int keys = (int)(S_k - k_start < BLOCK_N ? S_k - k_start : BLOCK_N);   // key rows in the tile
    const int64_t keys_pad = round_up(keys, BF16_DOT_BLOCK), kv_tile = k_start / BLOCK_N;
    float *dk_acc = w->acc_a, *dv_acc = w->acc_b;
    float *s_t = w->scores, *dp_t = w->grads;   // [N_pad][M_pad]: S^T (then P^T) and dP^T (then dS^T), keys x queries
    const bf16_dot_unit unit = w->unit;

    // The K/V tile, by rows: the rows of S^T's and dP^T's blocks.
    const uint16_t *k_rows = bf16_tile(&in->k_rows, bh, kv_tile), *v_rows = bf16_tile(&in->v_rows, bh, kv_tile);
    for (int64_t x = 0; x < N_pad * D_pad; x++) dk_acc[x] = dv_acc[x] = 0.0f;

    // Causal: the Q tiles that end before this K/V tile starts see none of its keys.
    const int64_t n_q_tiles = (S_q + BLOCK_M - 1) / BLOCK_M;
    for (int64_t q_tile = shape->causal ? k_start / BLOCK_M : 0; q_tile < n_q_tiles; q_tile++) {
        const int64_t q_start = q_tile * BLOCK_M;
        const int stage = causal_tile_stage(shape->causal, q_start, k_start, BLOCK_M, BLOCK_N, S_q, S_k);
        if (stage == TILE_FUTURE) continue;
        const int rows = (int)(S_q - q_start < BLOCK_M ? S_q - q_start : BLOCK_M);
        const int64_t rows_pad = round_up(rows, BF16_DOT_BLOCK);
        // The Q tile, staged for the pass: nothing to copy here.
        const uint16_t *q_pairs_d = bf16_tile(&in->q_pairs_d, bh, q_tile);
        const uint16_t *do_pairs_d = bf16_tile(&in->do_pairs_d, bh, q_tile);
        for (int i = 0; i < M_pad; i++) {
            w->lse2[i] = i < rows ? lse[q_start + i] * LOG2E : 0.0f;
            w->delta[i] = i < rows ? delta[q_start + i] : 0.0f;
        }

        // 1. s_ji = K_j . Q_i and dp_ji = V_j . dO_i, float32 sums of exact products (the first two mmas, S^T = K Q^T
        //    as the GPU computes them), 32 keys x 32 queries at a time. Padding rows are zeros and give zeros.
        for (int64_t c0 = 0; c0 < keys_pad; c0 += BF16_DOT_BLOCK)
            for (int64_t i0 = 0; i0 < rows_pad; i0 += BF16_DOT_BLOCK) {
                bf16_dot_block(unit, k_rows + c0 * D_pad, D_pad, q_pairs_d + 2 * i0, M_pad, D_pad,
                               s_t + c0 * M_pad + i0, M_pad, 0);
                bf16_dot_block(unit, v_rows + c0 * D_pad, D_pad, do_pairs_d + 2 * i0, M_pad, D_pad,
                               dp_t + c0 * M_pad + i0, M_pad, 0);
            }
        // 2. P^T from the log-sum-exp along each key's row (0 for a key past S_k, a query past S_q or, on a diagonal
        //    tile, a query before the key), dS^T from the float32 P, and then both rounded to bf16: the rows of dV's
        //    and dK's blocks, as the A operands of the GPU's mmas.
        for (int64_t c = 0; c < keys_pad; c++) {
            const int64_t key = k_start + c;
            // The queries that see this key: i_first .. i_end - 1 (none for a key past S_k).
            const int64_t i_first = stage == TILE_DIAGONAL && key > q_start ? key - q_start : 0;
            const int64_t i_end = c < keys ? rows : 0;
            p_and_ds(s_t + c * M_pad, dp_t + c * M_pad, rows_pad, i_first, i_end, qk_scale, w->lse2, w->delta, 1);
            round_to_bf16_bits(s_t + c * M_pad, w->p_bits + c * M_pad, rows_pad);
            round_to_bf16_bits(dp_t + c * M_pad, w->ds_bits + c * M_pad, rows_pad);
        }

        // 3. dV_c += sum_i P_ic dO_i and dK_c += sum_i dS_ic Q_i (the second and fourth mmas), 32 keys x 32 dims at a
        //    time, the sums along the tile's queries (dO and Q in pairs along them). Keys past the tile's get sums of
        //    zeros that are never stored (as on the GPU).
        const uint16_t *q_pairs_rows = bf16_tile(&in->q_pairs_rows, bh, q_tile);
        const uint16_t *do_pairs_rows = bf16_tile(&in->do_pairs_rows, bh, q_tile);
        for (int64_t c0 = 0; c0 < keys_pad; c0 += BF16_DOT_BLOCK)
            for (int64_t d0 = 0; d0 < D_pad; d0 += BF16_DOT_BLOCK) {
                bf16_dot_block(unit, w->p_bits + c0 * M_pad, M_pad, do_pairs_rows + 2 * d0, D_pad, rows_pad,
                               dv_acc + c0 * D_pad + d0, D_pad, 1);
                bf16_dot_block(unit, w->ds_bits + c0 * M_pad, M_pad, q_pairs_rows + 2 * d0, D_pad, rows_pad,
                               dk_acc + c0 * D_pad + d0, D_pad, 1);
            }

        if (atomic_dq) {
            // This tile's share of dQ: dQ_i += scale * sum_c dS_ic K_c (the fifth mma), 32 queries at a time, added
            // atomically: other threads add into the same rows from their own K/V tiles, in an order that changes
            // from run to run. Queries past `rows` are never added. dS^T makes a trip to be read by queries (the
            // GPU's makes one through shared memory).
            for (int64_t i = 0; i < rows_pad; i++)
                for (int64_t c = 0; c < keys_pad; c++) w->ds_rows[i * N_pad + c] = w->ds_bits[c * M_pad + i];
            const uint16_t *k_pairs_rows = bf16_tile(&in->k_pairs_rows, bh, kv_tile);
            float *dq = t->dq + b * t->dq_strides.b + h * t->dq_strides.h;
            for (int64_t i0 = 0; i0 < rows; i0 += BF16_DOT_BLOCK) {
                for (int64_t d0 = 0; d0 < D_pad; d0 += BF16_DOT_BLOCK)
                    bf16_dot_block(unit, w->ds_rows + i0 * N_pad, N_pad, k_pairs_rows + 2 * d0, D_pad, keys_pad,
                                   w->dq_rows + d0, D_pad, 0);
                for (int r = 0; r < BF16_DOT_BLOCK && i0 + r < rows; r++) {
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

void backward_bf16_dkdv_cpu(const fa_shape *shape, int block_m, int block_n, const tc_backward_tensors *t,
                            int atomic_dq, bf16_dot_unit unit) {
    const int64_t BH = shape->B * shape->H, n_kv_tiles = (shape->Sk + block_n - 1) / block_n;
    const int64_t D_pad = round_up(shape->D, BF16_DOT_BLOCK);
    const int64_t Sq = shape->Sq, Sk = shape->Sk;
    staged_inputs in = {
        bf16_stage(shape, t->q, t->q_strides, Sq, block_m, D_pad, BF16_TILE_PAIRS_ALONG_D),
        bf16_stage(shape, t->dout, t->do_strides, Sq, block_m, D_pad, BF16_TILE_PAIRS_ALONG_D),
        bf16_stage(shape, t->q, t->q_strides, Sq, block_m, D_pad, BF16_TILE_PAIRS_ALONG_ROWS),
        bf16_stage(shape, t->dout, t->do_strides, Sq, block_m, D_pad, BF16_TILE_PAIRS_ALONG_ROWS),
        bf16_stage(shape, t->k, t->k_strides, Sk, block_n, D_pad, BF16_TILE_ROWS),
        bf16_stage(shape, t->v, t->v_strides, Sk, block_n, D_pad, BF16_TILE_ROWS),
        atomic_dq ? bf16_stage(shape, t->k, t->k_strides, Sk, block_n, D_pad, BF16_TILE_PAIRS_ALONG_ROWS)
                  : (bf16_staged){NULL, 0, 0},
    };
#pragma omp parallel
    {
        bf16_workspace w = bf16_workspace_alloc(unit, shape->D, block_m, block_n);
        bf16_dot_thread_begin(unit);
        // The loops are the CUDA grid, (blockIdx.y, blockIdx.x) = (bh, tile): one iteration is one thread block.
        // Dynamic: under the causal mask the tiles' work differs.
#pragma omp for collapse(2) schedule(dynamic)
        for (int64_t bh = 0; bh < BH; bh++)
            for (int64_t kv_tile = 0; kv_tile < n_kv_tiles; kv_tile++)
                dkdv_program(shape, block_m, block_n, bh, kv_tile * block_n, t, &in, atomic_dq, &w);
        bf16_dot_thread_end(unit);
        free(w.scores);   // the start of the one allocation
    }
    free(in.q_pairs_d.bits), free(in.do_pairs_d.bits), free(in.q_pairs_rows.bits), free(in.do_pairs_rows.bits);
    free(in.k_rows.bits), free(in.v_rows.bits), free(in.k_pairs_rows.bits);
}
