// 1_register_tiles_cpu.c - phase 5, step 1, on the CPU: the forward of phase 3 step 3, with register tiles.
//
// What it adds over phase 3 step 3 (phase3_forward_4d/3_lse_cpu.c): the scores are no longer computed one query row
//   at a time, but a group of rows x VEC keys at a time, in a micro-kernel whose group * VEC sums stay in vector
//   registers while d runs (the inner kernel of every fast SGEMM): each vector of K loaded feeds one vector
//   multiply-add per row of the group instead of one. O += P V is blocked the same way, a group of rows x VEC
//   dimensions. Same algorithm, same arguments, same causal pruning and LSE; what changes is how many loads each
//   multiply-add costs.
// CUDA twin: phase5_tensor_cores/1_register_tiles_cuda.cu
// Diff:      diff -u phase3_forward_4d/3_lse_cpu.c phase5_tensor_cores/1_register_tiles_cpu.c
// Run:       build/bin/phase5_tensor_cores --impl cpu --step 1 --B 1 --H 8 --S 4096 --D 64 --threads 2
//
// Portable C, fast anyway. The micro-kernels are fixed-length loops over small local arrays, which GCC and Clang
// keep in vector registers when told to unroll the loop over a group's rows completely (#pragma GCC unroll) and to
// vectorise the loop over the VEC keys (#pragma omp simd); without the two, GCC keeps the array in memory and the
// kernel runs 10-20 times slower. Which vectors, though, depends on the machine the program runs on (SSE2 only,
// AVX2 with FMA, AVX-512): like every CPU kernel of the suite, the function that holds the loops is marked
// FA_SIMD_CLONES (common/fa_simd.h), compiled once per vector width, and the loader picks the widest the CPU has.
#include "register_tiles.h"
#include "fa_contract.h"

#include "fa_exp2.h"
#include "fa_tensor.h"
#include "fa_simd.h"   // FA_SIMD_CLONES: the hot loops in the CPU's widest vectors

#include <math.h>
#include <stdlib.h>

// Scores are computed in base 2: the Q tile is multiplied by qk_scale = scale * LOG2E once, so that
// exp(scale * q.k - m) = 2^(qk_scale * q.k - m') and every exponential is a cheap 2^x (fa_exp2).
// m_i and l_i are in base 2: LSE = LN2 * m_i + ln(l_i) (LOG2E and LN2: common/fa_math.h)
// The register tile: a group of rows query rows x VEC keys (or VEC dimensions of O), sized to 12 vector registers of
// sums on the CPU the program runs on: 3 x 32 = 96 sums in 12 AVX2 registers (8 floats each), 6 x 32 = 192 sums in
// 12 AVX-512 registers (16 floats each), with room left for the K row and the broadcast q value (AVX2 has 16
// registers, AVX-512 32). Why 12: a fused multiply-add takes 4 cycles and a core starts two per cycle, so 8
// independent sums are the least that keep both units busy, and 8 (a 4 x 16 tile in AVX2) stalled at the slightest
// delay; and per d the 3 x 32 tile loads 4 vectors and 3 broadcasts for 12 multiply-adds, where 4 x 16 loads 2 and 4
// for 8 (fewer instructions per multiply-add, which is what a core that issues a handful per cycle needs). With
// AVX-512's wider vectors the same 3 x 32 tile is only 6 registers of sums, too few; 6 rows make it 12 again. On
// the GPU one thread holds 8 rows x 4 keys: the same idea, sized for 255 scalar registers instead of 16 vectors.
#define VEC 32
#define MAX_ROWS 6   // the largest group; BLOCK_M is padded to a multiple of it, which every group size divides

// Rows in a micro-kernel's group on this CPU: 12 vector registers of sums (fa_simd.h: the vector width of the
// version of the hot loops the CPU runs).
static int rows_per_group(void) { return fa_simd_vector_floats() >= 16 ? 6 : 3; }

static int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// One thread's working memory: the CPU's stand-in for a CUDA block's shared memory.
typedef struct {
    int64_t M_pad, N_pad, D_pad;   // BLOCK_M rounded up to MAX_ROWS, BLOCK_N and D rounded up to VEC
    float *q_tile;                 // [M_pad, D]      the Q tile, times qk_scale (rows past S_q are zeros)
    float *k_tile_t;               // [D, N_pad]      the K tile, transposed: a micro-kernel reads VEC keys per load
    float *v_tile;                 // [N_pad, D_pad]  the V tile
    float *p_tile;                 // [M_pad, N_pad]  scores, then probabilities, of every row (the GPU: P in shared)
    float *alpha;                  // [M_pad]         each row's rescale factor for this tile
    float *acc;                    // [M_pad, D_pad]  unnormalised output rows
    float *m_i, *l_i;              // [M_pad]         running max (base 2) and running sum of each row
    int64_t *max_key;              // [M_pad]         the key that gave each row's max (fa_math.h, score_in_double)
} workspace;

static int64_t workspace_floats(int64_t D, int block_m, int block_n) {
    const int64_t M_pad = round_up(block_m, MAX_ROWS), N_pad = round_up(block_n, VEC), D_pad = round_up(D, VEC);
    return M_pad * D + D * N_pad + N_pad * D_pad + M_pad * N_pad + M_pad * D_pad + 3 * M_pad;
}

int64_t flash_forward_regtile_cpu_workspace_bytes(int64_t D, int block_m, int block_n) {
    return workspace_floats(D, block_m, block_n) * (int64_t)sizeof(float);
}

static workspace workspace_alloc(int64_t D, int block_m, int block_n) {
    workspace w;
    w.M_pad = round_up(block_m, MAX_ROWS);
    w.N_pad = round_up(block_n, VEC);
    w.D_pad = round_up(D, VEC);
    w.q_tile = fa_alloc_floats(workspace_floats(D, block_m, block_n), "the CPU tiles");
    w.k_tile_t = w.q_tile + w.M_pad * D;
    w.v_tile = w.k_tile_t + D * w.N_pad;
    w.p_tile = w.v_tile + w.N_pad * w.D_pad;
    w.acc = w.p_tile + w.M_pad * w.N_pad;
    w.m_i = w.acc + w.M_pad * w.D_pad;
    w.l_i = w.m_i + w.M_pad;
    w.alpha = w.l_i + w.M_pad;
    w.max_key = malloc(sizeof(int64_t) * w.M_pad);
    if (!w.max_key) fa_die("out of memory for the CPU tiles");
    // Zero once: the padding columns of v_tile (d >= D) are never written again, so they stay 0.
    for (int64_t x = 0; x < workspace_floats(D, block_m, block_n); x++) w.q_tile[x] = 0.0f;
    return w;
}

// The score micro-kernel: s[r][jj] = q_r . k_(j0 + jj) for `group` rows and VEC keys. The group x VEC sums live in
// registers for the whole loop over d; per d it loads VEC keys' values once (one row of the transposed K tile) and
// `group` q values, and does group * VEC multiply-adds with them. The sums start from the first product (d = 0), not
// from zeros: the same values, without clearing group * VEC floats in memory first. Every call passes `group` as a
// literal, 3 or 6, so that each inlined copy knows its row count: only then are the loops over r unrolled and the
// sums kept in registers.
FA_SIMD_INLINE void score_micro_kernel(int group, const float *q_rows, int64_t D, const float *k_t, int64_t N_pad,
                                       float *p_rows) {
    float s[MAX_ROWS][VEC];
#pragma GCC unroll 8
    for (int r = 0; r < group; r++) {
        const float q_r0 = q_rows[r * D];
#pragma omp simd
        for (int jj = 0; jj < VEC; jj++) s[r][jj] = q_r0 * k_t[jj];
    }
    for (int64_t d = 1; d < D; d++) {
        const float *k_d = k_t + d * N_pad;
#pragma GCC unroll 8
        for (int r = 0; r < group; r++) {
            const float q_rd = q_rows[r * D + d];
#pragma omp simd
            for (int jj = 0; jj < VEC; jj++) s[r][jj] += q_rd * k_d[jj];
        }
    }
    for (int r = 0; r < group; r++)
        for (int jj = 0; jj < VEC; jj++) p_rows[r * N_pad + jj] = s[r][jj];
}

// The P V micro-kernel: acc[r][d0 + dd] = alpha[r] * acc[r][d0 + dd] + sum_j p[r][j] * v[j][d0 + dd], for `group`
// rows (a literal, as above) and VEC dimensions, the sums in registers for the whole loop over the keys.
FA_SIMD_INLINE void pv_micro_kernel(int group, const float *p_rows, int64_t N_pad, int n_keys, const float *v_tile,
                                    int64_t D_pad, const float *alpha, float *acc_rows) {
    float o[MAX_ROWS][VEC];
    for (int r = 0; r < group; r++)
        for (int dd = 0; dd < VEC; dd++) o[r][dd] = acc_rows[r * D_pad + dd] * alpha[r];
    for (int j = 0; j < n_keys; j++) {
        const float *v_j = v_tile + j * D_pad;
#pragma GCC unroll 8
        for (int r = 0; r < group; r++) {
            const float p = p_rows[r * N_pad + j];
#pragma omp simd
            for (int dd = 0; dd < VEC; dd++) o[r][dd] += p * v_j[dd];
        }
    }
    for (int r = 0; r < group; r++)
        for (int dd = 0; dd < VEC; dd++) acc_rows[r * D_pad + dd] = o[r][dd];
}

// One Q tile of one head: what one CUDA thread block does. Rows q_start .. q_start + BLOCK_M - 1 of head bh.
FA_SIMD_CLONES
static void q_tile_program(const fa_shape *shape, int BLOCK_M, int BLOCK_N, int group, int64_t bh, int64_t q_start,
                           const float *q, fa_strides q_strides, const float *k, fa_strides k_strides, const float *v,
                           fa_strides v_strides, float *o, fa_strides o_strides, float *lse, workspace *w) {
    const int64_t S_q = shape->Sq, S_k = shape->Sk, D = shape->D, D_pad = w->D_pad, N_pad = w->N_pad;
    const float qk_scale = shape->scale * LOG2E;
    // The grid's second index is the head: (b, h) from bh, and where that head starts in each tensor.
    const int64_t b = bh / shape->H, h = bh % shape->H;
    q += b * q_strides.b + h * q_strides.h;
    k += b * k_strides.b + h * k_strides.h;
    v += b * v_strides.b + h * v_strides.h;
    o += b * o_strides.b + h * o_strides.h;
    lse += bh * S_q;   // LSE is contiguous [B, H, Sq]
    // Rows past S_q do not exist. The micro-kernels take `group` rows at a time, so the last group may run past them:
    // those rows are zeros in q_tile, computed like the others and never stored (as on the GPU).
    const int rows = (int)(S_q - q_start < BLOCK_M ? S_q - q_start : BLOCK_M);
    const int rows_padded = (rows + group - 1) / group * group;

    for (int i = 0; i < rows_padded; i++) {
        for (int64_t d = 0; d < D; d++)
            w->q_tile[i * D + d] = i < rows ? q[(q_start + i) * q_strides.s + d * q_strides.d] * qk_scale : 0.0f;
        for (int64_t d = 0; d < D_pad; d++) w->acc[i * D_pad + d] = 0.0f;
        w->m_i[i] = -INFINITY;
        w->l_i[i] = 0.0f;
        w->max_key[i] = -1;
    }

    for (int64_t k_start = 0; k_start < S_k; k_start += BLOCK_N) {
        // The three causal stages: a tile entirely in the future ends the loop before it is loaded (every later
        // tile lies further in the future); a tile entirely in the past needs no mask; a diagonal tile does.
        const int stage = causal_tile_stage(shape->causal, q_start, k_start, BLOCK_M, BLOCK_N, S_q, S_k);
        if (stage == TILE_FUTURE) break;
        // Keys of this tile that exist, and the same rounded up to whole micro-kernels.
        const int n_keys = (int)(S_k - k_start < BLOCK_N ? S_k - k_start : BLOCK_N);
        const int n_keys_pad = (int)round_up(n_keys, VEC);

        // Stage the K tile (transposed) and the V tile once for all rows of the Q tile: that reuse is the point of
        // the tiles (on the GPU this is the copy into shared memory). Keys past the tile's last one are zeros.
        for (int j = 0; j < n_keys_pad; j++) {
            for (int64_t d = 0; d < D; d++) {
                w->k_tile_t[d * N_pad + j] = j < n_keys ? k[(k_start + j) * k_strides.s + d * k_strides.d] : 0.0f;
                w->v_tile[j * D_pad + d] = j < n_keys ? v[(k_start + j) * v_strides.s + d * v_strides.d] : 0.0f;
            }
        }

        // S = Q K^T for the whole tile, `group` rows at a time (on the GPU, all BLOCK_M rows at once, each thread a
        // register tile of them), one VEC-key column of K at a time: that column of the transposed K tile, D x VEC
        // floats, stays in the L1 cache while every row group multiplies with it.
        for (int j0 = 0; j0 < n_keys_pad; j0 += VEC)
            for (int i0 = 0; i0 < rows_padded; i0 += group) {
                const float *q_rows = w->q_tile + i0 * D, *k_t = w->k_tile_t + j0;
                float *p_rows = w->p_tile + i0 * N_pad + j0;
                if (group == 6) score_micro_kernel(6, q_rows, D, k_t, N_pad, p_rows);
                else score_micro_kernel(3, q_rows, D, k_t, N_pad, p_rows);
            }

        // The online softmax, row by row (the rows past S_q are zeros, computed like the others).
        for (int i = 0; i < rows_padded; i++) {
            float *s = w->p_tile + i * N_pad;
            const int64_t row = q_start + i;
            // The last key this row may see: the last one of the tile, and on a diagonal tile the row itself
            // (row i sees keys j <= i). Keys after it get -INFINITY: 2^-inf = 0, they take no part.
            const int64_t last_key = stage == TILE_DIAGONAL && row < k_start + n_keys - 1 ? row
                                                                                          : k_start + n_keys - 1;
            if (k_start + n_keys_pad - 1 > last_key)
                for (int j = 0; j < n_keys_pad; j++)
                    if (k_start + j > last_key) s[j] = -INFINITY;

            // The online softmax. The new max covers every key seen so far, this tile included.
            float m_tile = -INFINITY;
#pragma omp simd reduction(max : m_tile)
            for (int j = 0; j < n_keys_pad; j++) m_tile = s[j] > m_tile ? s[j] : m_tile;
            const float m_old = w->m_i[i], m_new = m_tile > m_old ? m_tile : m_old;
            // The max moved: remember which key holds it, for the LSE (fa_math.h, score_in_double).
            if (m_tile > m_old)
                for (int j = 0; j < n_keys_pad; j++)
                    if (s[j] == m_tile) w->max_key[i] = k_start + j;
            // A row that has seen no key yet has m_new = -inf; subtracting it would give -inf - -inf = NaN.
            const float m_use = m_new == -INFINITY ? 0.0f : m_new;
            float row_sum = 0.0f;
#pragma omp simd reduction(+ : row_sum)
            for (int j = 0; j < n_keys_pad; j++) {
                s[j] = fa_exp2(s[j] - m_use);   // p_ij, relative to the new max
                row_sum += s[j];
            }
            // Everything accumulated so far was relative to the old max: alpha moves it to the new one.
            w->alpha[i] = fa_exp2(m_old - m_use);
            w->l_i[i] = w->l_i[i] * w->alpha[i] + row_sum;
            w->m_i[i] = m_new;
        }

        // acc = acc * alpha + P V_tile, `group` rows and VEC dimensions at a time, one VEC-dimension column of the V
        // tile at a time (it stays in L1 the same way).
        for (int64_t d0 = 0; d0 < D_pad; d0 += VEC)
            for (int i0 = 0; i0 < rows_padded; i0 += group) {
                const float *p_rows = w->p_tile + i0 * N_pad, *v_cols = w->v_tile + d0, *alpha = w->alpha + i0;
                float *acc_rows = w->acc + i0 * D_pad + d0;
                if (group == 6) pv_micro_kernel(6, p_rows, N_pad, n_keys, v_cols, D_pad, alpha, acc_rows);
                else pv_micro_kernel(3, p_rows, N_pad, n_keys, v_cols, D_pad, alpha, acc_rows);
            }
    }

    // One division per row, at the very end; and the row's log-sum-exp, the one number the backward pass needs to
    // rebuild its row of P, from the max key's score in double (fa_math.h, score_in_double).
    for (int i = 0; i < rows; i++) {
        const float inv_l = 1.0f / w->l_i[i];
        for (int64_t d = 0; d < D; d++)
            o[(q_start + i) * o_strides.s + d * o_strides.d] = w->acc[i * D_pad + d] * inv_l;
        float residual;   // (step 1 stores no residual)
        const double s_max = score_in_double(q + (q_start + i) * q_strides.s, q_strides.d, k, k_strides.s,
                                             k_strides.d, w->max_key[i], D, shape->scale);
        lse[q_start + i] = lse_from_max_score(s_max, w->m_i[i], w->l_i[i], &residual);
    }
}

void flash_forward_regtile_cpu(const fa_shape *shape, int block_m, int block_n, const forward_tensors *t) {
    const float *q = t->q, *k = t->k, *v = t->v;
    const fa_strides q_strides = t->q_strides, k_strides = t->k_strides, v_strides = t->v_strides;
    const fa_strides o_strides = t->o_strides;
    float *o = t->o, *lse = t->lse;
    const int64_t n_q_tiles = (shape->Sq + block_m - 1) / block_m, BH = shape->B * shape->H;
    const int group = rows_per_group();
#pragma omp parallel
    {
        workspace w = workspace_alloc(shape->D, block_m, block_n);
        // The two loops are the CUDA grid, (blockIdx.y, blockIdx.x) = (q_tile, bh): one iteration is one thread block.
#pragma omp for collapse(2) schedule(dynamic)
        for (int64_t t = 0; t < n_q_tiles; t++)
            for (int64_t bh = 0; bh < BH; bh++) {
                // Causal: the last Q tiles see the most keys. Starting with those of every head, the short ones fill
                // in at the end.
                const int64_t q_tile = n_q_tiles - 1 - t;
                q_tile_program(shape, block_m, block_n, group, bh, q_tile * block_m, q, q_strides, k, k_strides, v,
                               v_strides, o, o_strides, lse, &w);
            }
        free(w.q_tile);
        free(w.max_key);
    }
}
