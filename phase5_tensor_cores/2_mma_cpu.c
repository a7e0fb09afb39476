// 2_mma_cpu.c - phase 5, step 2, on the CPU: the numerics of the tensor-core forward, fp16 or bf16 inputs.
//
// What it adds over phase 3 step 3 (phase3_forward_4d/3_lse_cpu.c): Q, K and V arrive in a half type (uint16_t
//   bits, fp16 or bf16) and are read into float32 tiles (exactly: float32 holds every half value); S = Q K^T is summed
//   in float32, as a tensor core does (it multiplies half values exactly and accumulates in float32); P is rounded to
//   the half type before P V, because the GPU turns P into the A operand of its second mma, and an mma operand is
//   half; everything else stays float32, O included. The rows of a Q tile are walked as the GPU's warps own them,
//   16 rows each. So this file says where the GPU rounds, and the CPU and GPU results agree to float32 differences
//   (the order of a tensor core's additions) on top of the same half-precision roundings.
// CUDA twin: phase5_tensor_cores/2_mma_cuda.cu
// Diff:      diff -u phase3_forward_4d/3_lse_cpu.c phase5_tensor_cores/2_mma_cpu.c
// Next:      diff -u phase5_tensor_cores/2_mma_cpu.c phase5_tensor_cores/3_pipeline_cpu.c
// Run:       build/bin/phase5_tensor_cores --impl cpu --step 2 --dtype fp16 --B 1 --H 8 --S 1024 --D 64
#include "tensor_cores.h"

#include "fa_exp2.h"
#include "fa_half.h"
#include "fa_tensor.h"
#include "fa_contract.h"
#include "fa_simd.h"   // FA_SIMD_CLONES: the hot loops in the CPU's widest vectors

#include <math.h>
#include <stdlib.h>

// Scores are computed in base 2: each S element is multiplied by qk_scale = scale * LOG2E, so that
// exp(scale * q.k - m) = 2^(qk_scale * q.k - m') and every exponential is a cheap 2^x (fa_exp2). (Phase 3 scaled the
// Q tile instead; here Q is half and the tensor core multiplies it as it is, so the scale goes on S, in float32.)
// m_i and l_i are in base 2: LSE = LN2 * m_i + log(l_i), where LN2 * m_i is the max key's score again, in double
// (fa_math.h, score_in_double; LOG2E and LN2 there too)
// One warp owns this many query rows (the M of mma.m16n8k16): the rows of a Q tile are walked warp by warp.
#define WARP_ROWS 16
// The inner loops work on VEC floats at a time (one AVX-512 register, four SSE registers). A loop of fixed length
// over a small local array lets the compiler keep the array in vector registers, the way the CUDA kernel keeps its
// arrays in registers. The tiles are padded with zeros to a multiple of VEC, so no loop needs a remainder.
#define VEC 16

static int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// One thread's working memory: the CPU's stand-in for a CUDA block's shared memory and its threads' registers.
typedef struct {
    int64_t D_pad, N_pad;   // D and BLOCK_N rounded up to a multiple of VEC
    float *q_tile;          // [BLOCK_M, D]      the Q tile (half values, held exactly in float32)
    float *k_tile_t;        // [D, N_pad]        the K tile, transposed: the score loop then runs along j
    float *v_tile;          // [N_pad, D_pad]    the V tile
    float *acc;             // [BLOCK_M, D_pad]  unnormalised output rows
    float *m_i, *l_i;       // [BLOCK_M]         running max (base 2) and running sum of each row
    float *s;               // [N_pad]           one row's scores, then its probabilities p, rounded to the half type
    int64_t *max_key;       // [BLOCK_M]         the key that gave each row's max (fa_math.h, score_in_double)
} workspace;

static int64_t workspace_floats(int64_t D, int block_m, int block_n) {
    const int64_t D_pad = round_up(D, VEC), N_pad = round_up(block_n, VEC);
    return block_m * D + D * N_pad + N_pad * D_pad + block_m * D_pad + 2 * (int64_t)block_m + N_pad;
}

int64_t flash_forward_mma_cpu_workspace_bytes(int64_t D, int block_m, int block_n) {
    return workspace_floats(D, block_m, block_n) * (int64_t)sizeof(float);
}

static workspace workspace_alloc(int64_t D, int block_m, int block_n) {
    workspace w;
    w.D_pad = round_up(D, VEC);
    w.N_pad = round_up(block_n, VEC);
    w.q_tile = fa_alloc_floats(workspace_floats(D, block_m, block_n), "the CPU tiles");
    w.k_tile_t = w.q_tile + block_m * D;
    w.v_tile = w.k_tile_t + D * w.N_pad;
    w.acc = w.v_tile + w.N_pad * w.D_pad;
    w.m_i = w.acc + block_m * w.D_pad;
    w.l_i = w.m_i + block_m;
    w.s = w.l_i + block_m;
    w.max_key = malloc(sizeof(int64_t) * block_m);
    if (!w.max_key) fa_die("out of memory for the CPU tiles");
    // Zero once: the padding columns of v_tile (d >= D) are never written again, so they stay 0.
    for (int64_t x = 0; x < workspace_floats(D, block_m, block_n); x++) w.q_tile[x] = 0.0f;
    return w;
}

// One Q tile of one head: what one CUDA thread block does. Rows q_start .. q_start + BLOCK_M - 1 of head bh.
// Returns the number of K tiles it processed.
FA_SIMD_CLONES
static int64_t q_tile_program(const fa_shape *shape, int dtype, int BLOCK_M, int BLOCK_N, int64_t bh,
                              int64_t q_start, const uint16_t *q, fa_strides q_strides, const uint16_t *k,
                              fa_strides k_strides, const uint16_t *v, fa_strides v_strides, float *o,
                              fa_strides o_strides, float *lse, workspace *w) {
    const int64_t S_q = shape->Sq, S_k = shape->Sk, D = shape->D, D_pad = w->D_pad, N_pad = w->N_pad;
    const float qk_scale = shape->scale * LOG2E;
    // The grid's second index is the head: (b, h) from bh, and where that head starts in each tensor.
    const int64_t b = bh / shape->H, h = bh % shape->H;
    q += b * q_strides.b + h * q_strides.h;
    k += b * k_strides.b + h * k_strides.h;
    v += b * v_strides.b + h * v_strides.h;
    o += b * o_strides.b + h * o_strides.h;
    lse += bh * S_q;   // LSE is contiguous [B, H, Sq]
    // Rows past S_q do not exist: the CPU skips them (the GPU computes them and never stores them).
    const int rows = (int)(S_q - q_start < BLOCK_M ? S_q - q_start : BLOCK_M);

    for (int i = 0; i < rows; i++) {
        for (int64_t d = 0; d < D; d++)
            w->q_tile[i * D + d] = fa_half_to_float(q[(q_start + i) * q_strides.s + d * q_strides.d], dtype);
        for (int64_t d = 0; d < D_pad; d++) w->acc[i * D_pad + d] = 0.0f;
        w->m_i[i] = -INFINITY;
        w->l_i[i] = 0.0f;
        w->max_key[i] = -1;
    }

    int64_t tiles = 0;
    for (int64_t k_start = 0; k_start < S_k; k_start += BLOCK_N) {
        // The three causal stages: a tile entirely in the future ends the loop before it is loaded (every later
        // tile lies further in the future); a tile entirely in the past needs no mask; a diagonal tile does.
        const int stage = causal_tile_stage(shape->causal, q_start, k_start, BLOCK_M, BLOCK_N, S_q, S_k);
        if (stage == TILE_FUTURE) break;
        tiles++;

        // Stage the K tile (transposed) and the V tile once for all rows of the Q tile: that reuse is the point of
        // the tiles (on the GPU this is the copy into shared memory). Keys past S_k, and the padding, are zeros.
        for (int j = 0; j < N_pad; j++) {
            const int key_exists = j < BLOCK_N && k_start + j < S_k;
            for (int64_t d = 0; d < D; d++) {
                w->k_tile_t[d * N_pad + j] =
                    key_exists ? fa_half_to_float(k[(k_start + j) * k_strides.s + d * k_strides.d], dtype) : 0.0f;
                w->v_tile[j * D_pad + d] =
                    key_exists ? fa_half_to_float(v[(k_start + j) * v_strides.s + d * v_strides.d], dtype) : 0.0f;
            }
        }

        // The warps of the block, each on its own 16 rows; a row here is one row of the warp's S fragment.
        for (int warp_row0 = 0; warp_row0 < rows; warp_row0 += WARP_ROWS)
            for (int i = warp_row0; i < warp_row0 + WARP_ROWS && i < rows; i++) {
                const float *q_i = w->q_tile + i * D;
                float *acc_i = w->acc + i * D_pad, *s = w->s;

                // Scores of row i against the tile: float32 sums of exact products of half values, the first mma.
                for (int j0 = 0; j0 < N_pad; j0 += VEC) {
                    float s_vec[VEC] = {0.0f};
                    for (int64_t d = 0; d < D; d++) {
                        const float q_d = q_i[d], *k_d = w->k_tile_t + d * N_pad + j0;
                        for (int jj = 0; jj < VEC; jj++) s_vec[jj] += q_d * k_d[jj];
                    }
                    for (int jj = 0; jj < VEC; jj++) s[j0 + jj] = s_vec[jj];
                }
                // The last key this row may see: the last one there is, and on a diagonal tile the row itself (row i
                // sees keys j <= i). A tile in the past keeps step 1's test against S_k alone: no element mask.
                const int64_t row = q_start + i, last_key = stage == TILE_DIAGONAL && row < S_k - 1 ? row : S_k - 1;
                // Keys past last_key (and the padding) get -INFINITY: 2^-inf = 0, they take no part in the softmax.
                // The others are scaled into base 2, in float32 (the GPU multiplies its accumulator fragment).
                for (int j = 0; j < N_pad; j++)
                    s[j] = j >= BLOCK_N || k_start + j > last_key ? -INFINITY : s[j] * qk_scale;

                // The online softmax. The new max covers every key seen so far, this tile included.
                float m_tile = -INFINITY;
#pragma omp simd reduction(max : m_tile)
                for (int j = 0; j < N_pad; j++) m_tile = s[j] > m_tile ? s[j] : m_tile;
                const float m_new = m_tile > w->m_i[i] ? m_tile : w->m_i[i];
                // The max moved: remember which key holds it, for the LSE (fa_math.h, score_in_double).
                if (m_tile > w->m_i[i])
                    for (int j = 0; j < N_pad; j++)
                        if (s[j] == m_tile) w->max_key[i] = k_start + j;
                // A row that has seen no key yet has m_new = -inf; subtracting it would give -inf - -inf = NaN.
                const float m_use = m_new == -INFINITY ? 0.0f : m_new;

                // l_i sums p in float32 as computed; P V uses p rounded to the half type (the GPU converts its
                // float32 p fragment into the half A operand of the second mma: the one rounding attention adds).
                float row_sum = 0.0f;
                for (int j = 0; j < N_pad; j++) {
                    const float p = fa_exp2(s[j] - m_use);   // p_ij, relative to the new max
                    row_sum += p;
                    s[j] = fa_round_to_dtype(p, dtype);
                }
                // Everything accumulated so far was relative to the old max: alpha moves it to the new one.
                const float alpha = fa_exp2(w->m_i[i] - m_use);
                w->l_i[i] = w->l_i[i] * alpha + row_sum;
                w->m_i[i] = m_new;

                // acc = acc * alpha + P V_tile, float32 sums of exact products (the second mma), VEC columns at a
                // time, kept in registers while j runs.
                for (int64_t d0 = 0; d0 < D_pad; d0 += VEC) {
                    float acc_vec[VEC];
                    for (int dd = 0; dd < VEC; dd++) acc_vec[dd] = acc_i[d0 + dd] * alpha;
                    for (int j = 0; j < N_pad; j++) {
                        const float p = s[j], *v_j = w->v_tile + j * D_pad + d0;
                        for (int dd = 0; dd < VEC; dd++) acc_vec[dd] += p * v_j[dd];
                    }
                    for (int dd = 0; dd < VEC; dd++) acc_i[d0 + dd] = acc_vec[dd];
                }
            }
    }

    // One division per row, at the very end; and the row's log-sum-exp, the one number the backward pass needs to
    // rebuild its row of P: P_ij = exp(scale * q_i . k_j - LSE_i).
    for (int i = 0; i < rows; i++) {
        const float inv_l = 1.0f / w->l_i[i];
        for (int64_t d = 0; d < D; d++)
            o[(q_start + i) * o_strides.s + d * o_strides.d] = w->acc[i * D_pad + d] * inv_l;
        // LSE from the max key's score in double, from the half values the products multiplied.
        float residual;   // (the tensor-core forward stores no residual)
        const double s_max = fa_half_score_in_double(q + (q_start + i) * q_strides.s, q_strides.d, k, k_strides.s,
                                                     k_strides.d, w->max_key[i], D, shape->scale, dtype);
        lse[q_start + i] = lse_from_max_score(s_max, w->m_i[i], w->l_i[i], &residual);
    }
    return tiles;
}

void flash_forward_mma_cpu(const fa_shape *shape, int dtype, int block_m, int block_n, const tc_forward_tensors *t,
                           int64_t *tiles_visited) {
    const uint16_t *q = t->q, *k = t->k, *v = t->v;
    const fa_strides q_strides = t->q_strides, k_strides = t->k_strides, v_strides = t->v_strides;
    const fa_strides o_strides = t->o_strides;
    float *o = t->o, *lse = t->lse;
    const int64_t n_q_tiles = (shape->Sq + block_m - 1) / block_m, BH = shape->B * shape->H;
    int64_t visited = 0;
#pragma omp parallel
    {
        workspace w = workspace_alloc(shape->D, block_m, block_n);
        // The two loops are the CUDA grid, (blockIdx.y, blockIdx.x) = (bh, q_tile): one iteration is one thread block.
#pragma omp for collapse(2) schedule(dynamic) reduction(+ : visited)
        for (int64_t bh = 0; bh < BH; bh++)
            for (int64_t t = 0; t < n_q_tiles; t++) {
                // Causal: the last Q tiles see the most keys. Starting with them, the short ones fill in at the end.
                const int64_t q_tile = n_q_tiles - 1 - t;
                visited += q_tile_program(shape, dtype, block_m, block_n, bh, q_tile * block_m, q, q_strides, k,
                                          k_strides, v, v_strides, o, o_strides, lse, &w);
            }
        free(w.q_tile);
        free(w.max_key);
    }
    if (tiles_visited) *tiles_visited = visited;
}
