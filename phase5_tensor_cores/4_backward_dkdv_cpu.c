// 4_backward_dkdv_cpu.c - phase 5, step 4, on the CPU: the dK/dV pass of the tensor-core backward, fp16 or bf16.
//
// What it adds over phase 4's dK/dV pass (phase4_backward/backward_dkdv_cpu.c): Q, K, V and dO arrive in a half type
//   and are read into float32 tiles (exactly); every product is a float32 sum of exact products of half values, as
//   on a tensor core; P is rounded to the half type before dV += P^T dO, and dS before dK += dS^T Q (and, in the
//   atomic variant, dQ += dS K), because on the GPU each of them becomes the half A operand of an mma; dS itself is
//   formed from the float32 P, and Delta, LSE and the gradients stay float32. So the CPU and the GPU round at the
//   same points and agree to float32 differences (the order of the additions).
//   The GPU's warps walk the problem by keys (a warp owns 16 keys and computes S^T = K Q^T); this pass computes the
//   same sums as S = Q K^T, by queries, because on the CPU a transposed copy is a scalar store per value, and the
//   tile to transpose is the one that stays: K and V are staged transposed once per program, and each Q tile is a
//   vector copy of its rows. dV += P^T dO and dK += dS^T Q read P and dS by columns.
//   And it is register-blocked as step 1 (phase5_tensor_cores/1_register_tiles_cpu.c), for the same reason: each
//   product is computed a block of rows x columns at a time, 6 x 16 with AVX2 and 8 x 32 with AVX-512 (sized for the
//   CPU it runs on, block_rows()), in one of two micro-kernels named after the CUDA twin's two mma loops
//   (backward_tiles.h): sums along d (along_d_micro_kernel: S = Q K^T, dP = dO V^T) and sums along the rows of a tile
//   (along_rows_micro_kernel: dV += P^T dO, dK += dS^T Q, dQ += dS K). With bf16 inputs, on a CPU with AMX-BF16 or
//   AVX512_BF16, 4_backward_dkdv_bf16_cpu.c runs instead: the same pass on the CPU's own bf16 arithmetic.
// The dQ pass: phase5_tensor_cores/4_backward_dq_cpu.c; the preprocess and the order: 4_backward_cpu.c.
// CUDA twin: phase5_tensor_cores/4_backward_dkdv_cuda.cu
// Diff:      diff -u phase4_backward/backward_dkdv_cpu.c phase5_tensor_cores/4_backward_dkdv_cpu.c
// Run:       build/bin/phase5_tensor_cores --impl cpu --step 4 --dtype fp16 --B 1 --H 4 --S 1024 --D 64 --dq both
#include "backward_tiles.h"   // the tiles and micro-kernels both passes share

#include "fa_exp2.h"
#include "fa_contract.h"
#include "fa_simd.h"   // FA_SIMD_CLONES: the hot loops in the CPU's widest vectors

// One K/V tile of one head: what one block of the dK/dV kernel does. Keys k_start .. k_start + BLOCK_N - 1.
FA_SIMD_CLONES
static void dkdv_program(const fa_shape *shape, int dtype, int BLOCK_M, int BLOCK_N, int group, int64_t bh,
                         int64_t k_start, const tc_backward_tensors *t, int atomic_dq, workspace *w) {
    const int64_t S_q = shape->Sq, S_k = shape->Sk, D = shape->D, N_pad = w->N_pad;
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
    float *p = w->p_tile, *ds = w->ds_tile;   // [M_pad][N_pad]: P and dS of the tile pair, queries x keys
    const int cols = block_cols(group);
    const int keys_pad = (int)round_up(keys, cols);   // whole blocks of keys

    // The K/V tile, once: transposed for S = Q K^T and dP = dO V^T (keys in vectors), K's rows for the atomic dQ.
    stage_rows(k, t->k_strides, dtype, k_start, BLOCK_N, S_k, D, D_pad, w->k_tile, w->k_t, N_pad);
    stage_rows(v, t->v_strides, dtype, k_start, BLOCK_N, S_k, D, D_pad, w->v_tile, w->v_t, N_pad);
    for (int64_t x = 0; x < N_pad * D_pad; x++) dk_acc[x] = dv_acc[x] = 0.0f;

    // Causal: the Q tiles that end before this K/V tile starts see none of its keys.
    const int64_t n_q_tiles = (S_q + BLOCK_M - 1) / BLOCK_M;
    for (int64_t q_tile = shape->causal ? k_start / BLOCK_M : 0; q_tile < n_q_tiles; q_tile++) {
        const int64_t q_start = q_tile * BLOCK_M;
        const int stage = causal_tile_stage(shape->causal, q_start, k_start, BLOCK_M, BLOCK_N, S_q, S_k);
        if (stage == TILE_FUTURE) continue;
        const int rows = (int)(S_q - q_start < BLOCK_M ? S_q - q_start : BLOCK_M);
        // The Q tile's rows, a vector copy each: the tile that changes every iteration is the one read as it is.
        stage_rows(q, t->q_strides, dtype, q_start, BLOCK_M, S_q, D, D_pad, w->q_tile, NULL, 0);
        stage_rows(dout, t->do_strides, dtype, q_start, BLOCK_M, S_q, D, D_pad, w->do_tile, NULL, 0);
        for (int i = 0; i < BLOCK_M; i++) {
            w->lse2[i] = i < rows ? lse[q_start + i] * LOG2E : 0.0f;
            w->delta[i] = i < rows ? delta[q_start + i] : 0.0f;
        }

        // The queries, `group` at a time: `group` rows of S and of dP. The last group may run past the tile's
        // queries: those rows of Q and dO are zeros, their P and dS are 0 and they add nothing.
        for (int i0 = 0; i0 < rows; i0 += group) {
            // 1. s_ij = Q_i . K_j and dp_ij = dO_i . V_j for every key j of the tile, float32 sums of exact products
            //    (the first two mmas, which the GPU computes transposed, S^T = K Q^T: the same sums), `cols` keys at
            //    a time.
            for (int j0 = 0; j0 < keys_pad; j0 += cols) {
                float *s_block = p + i0 * N_pad + j0, *dp_block = ds + i0 * N_pad + j0;
                along_d(group, w->q_tile + i0 * D_pad, D_pad, w->k_t + j0, N_pad, D, s_block, N_pad);
                along_d(group, w->do_tile + i0 * D_pad, D_pad, w->v_t + j0, N_pad, D, dp_block, N_pad);
            }
            // 2. P from the log-sum-exp (0 for a key past S_k, a query past S_q or, on a diagonal tile, a key after
            //    the query), dS from the float32 P, and then both rounded to the half type: the A operands of dV's
            //    and dK's mmas.
            for (int r = 0; r < group; r++) {
                const int i = i0 + r;
                const int64_t row = q_start + i;
                // The keys this query sees: 0 .. j_end - 1 (none for a query past S_q or before the tile's keys).
                int64_t j_end = stage == TILE_DIAGONAL && row - k_start + 1 < keys ? row - k_start + 1 : keys;
                if (i >= rows || j_end < 0) j_end = 0;
                p_and_ds(p + i * N_pad, ds + i * N_pad, keys_pad, 0, j_end, qk_scale, &w->lse2[i], &w->delta[i], 0);
                round_to_half(p + i * N_pad, keys_pad, dtype);
                round_to_half(ds + i * N_pad, keys_pad, dtype);
            }
        }

        // 3. dV_c += sum_i P_ic dO_i and dK_c += sum_i dS_ic Q_i (the second and fourth mmas), `group` keys x `cols`
        //    dims at a time, P and dS read by columns (as P^T and dS^T), the queries in order. The last group of keys
        //    may run past the tile's: their dK and dV are never stored (as on the GPU). The last block of dims may
        //    run past D, into D_pad's zeros.
        for (int c0 = 0; c0 < keys; c0 += group)
            for (int64_t d0 = 0; d0 < D; d0 += cols) {
                along_rows(group, p + c0, 1, N_pad, rows, w->do_tile + d0, D_pad, dv_acc + c0 * D_pad + d0);
                along_rows(group, ds + c0, 1, N_pad, rows, w->q_tile + d0, D_pad, dk_acc + c0 * D_pad + d0);
            }

        if (atomic_dq) {
            // This tile's share of dQ: dQ_i += scale * sum_c dS_ic K_c (the fifth mma), `group` queries at a time,
            // added atomically: other threads add into the same rows from their own K/V tiles, in an order that
            // changes from run to run. Queries past `rows` are never added. (The GPU's dS^T makes a trip through
            // shared memory to be read as dS; here the dS tile is already by queries.)
            float *dq = t->dq + b * t->dq_strides.b + h * t->dq_strides.h;
            for (int i0 = 0; i0 < rows; i0 += group) {
                for (int64_t x = 0; x < group * D_pad; x++) w->dq_rows[x] = 0.0f;
                for (int64_t d0 = 0; d0 < D; d0 += cols)
                    along_rows(group, ds + i0 * N_pad, N_pad, 1, keys, w->k_tile + d0, D_pad, w->dq_rows + d0);
                for (int r = 0; r < group && i0 + r < rows; r++) {
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

void backward_tc_dkdv_cpu(const fa_shape *shape, int dtype, int block_m, int block_n, const tc_backward_tensors *t,
                          int atomic_dq) {
    const int64_t BH = shape->B * shape->H, n_kv_tiles = (shape->Sk + block_n - 1) / block_n;
    const int group = block_rows();
#pragma omp parallel
    {
        workspace w = workspace_alloc(shape->D, block_m, block_n);
        // The loops are the CUDA grid, (blockIdx.y, blockIdx.x) = (bh, tile): one iteration is one thread block.
        // Dynamic: under the causal mask the tiles' work differs.
#pragma omp for collapse(2) schedule(dynamic)
        for (int64_t bh = 0; bh < BH; bh++)
            for (int64_t kv_tile = 0; kv_tile < n_kv_tiles; kv_tile++)
                dkdv_program(shape, dtype, block_m, block_n, group, bh, kv_tile * block_n, t, atomic_dq, &w);
        free(w.q_tile);   // the start of the one allocation
    }
}
