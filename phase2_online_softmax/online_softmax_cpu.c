// online_softmax_cpu.c - phase 2 on the CPU: the FlashAttention forward for one head, with the online softmax.
//   It adds no S or P in memory (phase1_naive/naive_cpu.c has both): each row keeps a running max m_i, sum l_i and
//   output acc, rescaled by alpha = 2^(m_old - m_new) when a tile of keys raises the max.
// Run: build/bin/phase2_online_softmax --impl cpu --S 1024 --D 64
//
// Phase 2, then phase 3 in three steps, each the file before plus one feature (forward4d.h lists the steps; each
// file's CUDA twin is its *_cuda.cu). Read each as its diff against the one before, and phase 4's dQ pass against
// step 3:
//   diff -u phase2_online_softmax/online_softmax_cpu.c phase3_forward_4d/1_grid4d_cpu.c
//   diff -u phase3_forward_4d/1_grid4d_cpu.c phase3_forward_4d/2_causal_cpu.c
//   diff -u phase3_forward_4d/2_causal_cpu.c phase3_forward_4d/3_lse_cpu.c
//   diff -u phase3_forward_4d/3_lse_cpu.c phase4_backward/backward_dq_cpu.c
#include "online_softmax.h"

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
    int64_t D_pad, N_pad;   // D and BLOCK_N rounded up to a multiple of VEC
    float *q_tile;          // [BLOCK_M, D]      the Q tile, times qk_scale
    float *k_tile_t;        // [D, N_pad]        the K tile, transposed: the score loop then runs along j
    float *v_tile;          // [N_pad, D_pad]    the V tile
    float *acc;             // [BLOCK_M, D_pad]  unnormalised output rows
    float *m_i, *l_i;       // [BLOCK_M]         running max (base 2) and running sum of each row
    float *s;               // [N_pad]           one row's scores, then its probabilities p
} workspace;

static int64_t workspace_floats(int64_t D, int block_m, int block_n) {
    const int64_t D_pad = round_up(D, VEC), N_pad = round_up(block_n, VEC);
    return block_m * D + D * N_pad + N_pad * D_pad + block_m * D_pad + 2 * (int64_t)block_m + N_pad;
}

// The tiles' size: the driver reports threads * this.
int64_t flash_forward_2d_cpu_workspace_bytes(int64_t D, int block_m, int block_n) {
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
    // Zero once: the padding (every d >= D) is never written again, so it stays 0.
    for (int64_t x = 0; x < workspace_floats(D, block_m, block_n); x++) w.q_tile[x] = 0.0f;
    return w;
}

// One Q tile: what one CUDA thread block does. Rows q_start .. q_start + BLOCK_M - 1 of O; row r of the tile is
// row i = q_start + r of O.
static void q_tile_program(const fa_shape *shape, int BLOCK_M, int BLOCK_N, int64_t q_start,
                           const forward_2d_tensors *t,
                           workspace *w) {
    const int64_t S_q = shape->Sq, S_k = shape->Sk, D = shape->D, D_pad = w->D_pad, N_pad = w->N_pad;
    const float qk_scale = shape->scale * LOG2E;
    const float *q = t->q, *k = t->k, *v = t->v;
    float *o = t->o;
    // Rows past S_q do not exist: the CPU skips them (the GPU computes them and never stores them).
    const int rows = (int)(S_q - q_start < BLOCK_M ? S_q - q_start : BLOCK_M);

    for (int r = 0; r < rows; r++) {
        const int64_t i = q_start + r;
        for (int64_t d = 0; d < D; d++)
            w->q_tile[r * D + d] = q[i * D + d] * qk_scale;
        for (int64_t d = 0; d < D_pad; d++) w->acc[r * D_pad + d] = 0.0f;
        w->m_i[r] = -INFINITY;
        w->l_i[r] = 0.0f;
    }

    for (int64_t k_start = 0; k_start < S_k; k_start += BLOCK_N) {
        // Stage the K tile (transposed) and the V tile once for all rows of the Q tile: that reuse is the point of
        // the tiles (on the GPU this is the copy into shared memory). Keys past S_k, and the padding, are zeros.
        for (int j = 0; j < N_pad; j++) {
            const int key_exists = j < BLOCK_N && k_start + j < S_k;
            for (int64_t d = 0; d < D; d++) {
                w->k_tile_t[d * N_pad + j] = key_exists ? k[(k_start + j) * D + d] : 0.0f;
                w->v_tile[j * D_pad + d] = key_exists ? v[(k_start + j) * D + d] : 0.0f;
            }
        }

        // Each row is one CUDA thread on the GPU.
        for (int r = 0; r < rows; r++) {
            const float *q_i = w->q_tile + r * D;
            float *acc_i = w->acc + r * D_pad, *s = w->s;

            // Scores of row i against the tile, in base 2: s[j] = qk_scale * q_i . k_j. The loop over d is outside
            // and the VEC partial sums of s_vec stay in registers while d runs.
            for (int j0 = 0; j0 < N_pad; j0 += VEC) {
                float s_vec[VEC] = {0.0f};
                for (int64_t d = 0; d < D; d++) {
                    const float q_d = q_i[d], *k_d = w->k_tile_t + d * N_pad + j0;
                    for (int jj = 0; jj < VEC; jj++) s_vec[jj] += q_d * k_d[jj];
                }
                for (int jj = 0; jj < VEC; jj++) s[j0 + jj] = s_vec[jj];
            }
            // Keys past S_k (and the padding) get -INFINITY: 2^-inf = 0, they take no part in the softmax. Only the
            // last tile, or a padded one, has any.
            if (N_pad > BLOCK_N || k_start + N_pad > S_k)
                for (int j = 0; j < N_pad; j++)
                    if (j >= BLOCK_N || k_start + j >= S_k) s[j] = -INFINITY;

            // The online softmax. The new max covers every key seen so far, this tile included.
            float m_tile = -INFINITY;
#pragma omp simd reduction(max : m_tile)
            for (int j = 0; j < N_pad; j++) m_tile = s[j] > m_tile ? s[j] : m_tile;
            const float m_new = m_tile > w->m_i[r] ? m_tile : w->m_i[r];
            // A row that has seen no key yet has m_new = -inf; subtracting it would give -inf - -inf = NaN.
            const float m_use = m_new == -INFINITY ? 0.0f : m_new;

            float row_sum = 0.0f;
#pragma omp simd reduction(+ : row_sum)
            for (int j = 0; j < N_pad; j++) {
                s[j] = fa_exp2(s[j] - m_use);   // p_ij, relative to the new max
                row_sum += s[j];
            }
            // Everything accumulated so far was relative to the old max: alpha moves it to the new one.
            const float alpha = fa_exp2(w->m_i[r] - m_use);
            w->l_i[r] = w->l_i[r] * alpha + row_sum;
            w->m_i[r] = m_new;

            // acc = acc * alpha + p V_tile, VEC columns at a time, kept in registers while j runs.
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

    // One division per row, at the very end.
    for (int r = 0; r < rows; r++) {
        const int64_t i = q_start + r;
        const float inv_l = 1.0f / w->l_i[r];
        for (int64_t d = 0; d < D; d++) o[i * D + d] = w->acc[r * D_pad + d] * inv_l;
    }
}

void flash_forward_2d_cpu(const fa_shape *shape, int block_m, int block_n, const forward_2d_tensors *t) {
    const int64_t n_q_tiles = (shape->Sq + block_m - 1) / block_m;
#pragma omp parallel
    {
        workspace w = workspace_alloc(shape->D, block_m, block_n);
        // The loop over Q tiles is the CUDA grid (blockIdx.x): one iteration is one thread block.
#pragma omp for schedule(dynamic)
        for (int64_t q_tile = 0; q_tile < n_q_tiles; q_tile++) {
            const int64_t q_start = q_tile * block_m;   // the first row of this Q tile
            q_tile_program(shape, block_m, block_n, q_start, t, &w);
        }
        free(w.q_tile);
    }
}
