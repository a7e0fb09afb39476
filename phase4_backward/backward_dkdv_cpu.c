// backward_dkdv_cpu.c - phase 4, the main pass on the CPU: dK and dV, one program per K/V tile (and, in the atomic
// variant, each tile's share of dQ).
//
// CUDA twin: phase4_backward/backward_dkdv_cuda.cu (one thread block per K/V tile, one thread per key row of it).
// Run:       build/bin/phase4_backward --impl cpu --dq deterministic
//
// Why the outer loop is over K/V tiles: dK_j and dV_j are sums over every query row i. With the K/V tile fixed, a
// program keeps dK_j and dV_j in its own accumulators while it walks over all the Q tiles, and writes each of them to
// memory once, with no other program touching them: no atomics, no second pass. (The forward's loop order, Q tiles
// outside, would instead make every Q tile add into every dK_j and dV_j.) dQ_i, also a sum over keys, is the
// gradient this order leaves behind: backward_dq_cpu.c computes it in its own pass, or, with atomic_dq, this pass
// adds each tile's share into dQ with atomic additions.
#include "fa_baselines.h"
#include "fa_contract.h"   // causal_tile_stage
#include "fa_exp2.h"
#include "fa_tensor.h"

#include <stdlib.h>

#include "fa_math.h"   // LOG2E, LN2 and the log-sum-exp conversions
// The inner loops work on VEC floats at a time (one AVX-512 register, four SSE registers); fixed-length loops over
// small local arrays let the compiler keep them in vector registers, as the CUDA threads keep theirs in registers.
// Tiles are padded with zeros to a multiple of VEC, so no loop needs a remainder.
#define VEC 16

static int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// One thread's working memory: the CPU's stand-in for a CUDA block's shared memory and its threads' registers.
typedef struct {
    int64_t M_pad, N_pad, D_pad;   // BLOCK_M, BLOCK_N and D rounded up to a multiple of VEC
    float *q_t, *do_t;             // [D_pad, M_pad]  Q and dO tiles, transposed: the dot products run along the rows
    float *q_tile, *do_tile;       // [BLOCK_M, D_pad] Q and dO tiles as rows: the dK, dV updates run along d
                                   //                 (both Q tiles times qk_scale, as the forward held Q)
    float *lse2_hi, *lse2_lo;      // [M_pad]         LSE_i * LOG2E = hi + lo (lse_to_base2, fa_math.h)
    float *delta;                  // [M_pad]         Delta_i of the Q tile
    float *k_tile;                 // [N_pad, D_pad]  K_j of each key row (registers on the GPU; shared K for dQ)
    float *v_tile;                 // [BLOCK_N, D_pad] V_j of each key row (registers)
    float *dk_acc, *dv_acc;        // [BLOCK_N, D_pad] dK_j, dV_j accumulators (registers)
    float *s, *p, *dp, *ds;        // [M_pad]         one key row's column of S, P, dP and dS
    float *ds_tile;                // [BLOCK_M, N_pad] dS of the tile, for the atomic dQ share (shared memory)
} dkdv_workspace;

static int64_t workspace_floats(int64_t BLOCK_M, int64_t BLOCK_N, int64_t D) {
    const int64_t M_pad = round_up(BLOCK_M, VEC), N_pad = round_up(BLOCK_N, VEC), D_pad = round_up(D, VEC);
    return 2 * D_pad * M_pad + 2 * BLOCK_M * D_pad + 3 * M_pad + N_pad * D_pad + 3 * BLOCK_N * D_pad +
           4 * M_pad + BLOCK_M * N_pad;
}

int64_t backward_dkdv_cpu_workspace_bytes(int64_t D, int block_m, int block_n) {
    return workspace_floats(block_m, block_n, D) * (int64_t)sizeof(float);
}

// One allocation per thread, cut into the tiles above, all zero (fa_alloc_floats exits 2 if the memory is not there).
static dkdv_workspace workspace_alloc(int64_t BLOCK_M, int64_t BLOCK_N, int64_t D) {
    dkdv_workspace w;
    w.M_pad = round_up(BLOCK_M, VEC), w.N_pad = round_up(BLOCK_N, VEC), w.D_pad = round_up(D, VEC);
    const int64_t total = workspace_floats(BLOCK_M, BLOCK_N, D);
    float *next = fa_alloc_floats(total, "the tiles of one dK/dV program");
    for (int64_t x = 0; x < total; x++) next[x] = 0.0f;   // padding stays zero from here on
    w.q_t = next, next += w.D_pad * w.M_pad;
    w.do_t = next, next += w.D_pad * w.M_pad;
    w.q_tile = next, next += BLOCK_M * w.D_pad;
    w.do_tile = next, next += BLOCK_M * w.D_pad;
    w.lse2_hi = next, next += w.M_pad;
    w.lse2_lo = next, next += w.M_pad;
    w.delta = next, next += w.M_pad;
    w.k_tile = next, next += w.N_pad * w.D_pad;
    w.v_tile = next, next += BLOCK_N * w.D_pad;
    w.dk_acc = next, next += BLOCK_N * w.D_pad;
    w.dv_acc = next, next += BLOCK_N * w.D_pad;
    w.s = next, next += w.M_pad;
    w.p = next, next += w.M_pad;
    w.dp = next, next += w.M_pad;
    w.ds = next, next += w.M_pad;
    w.ds_tile = next;
    return w;
}

// One K/V tile of one head: what one CUDA thread block does. Key rows kv_start .. kv_start + BLOCK_N - 1 of head bh;
// key row c of the tile is key j = kv_start + c of the head, and row r of a Q tile is row i = q_start + r.
static void kv_tile_program(const fa_shape *shape, int block_m, int block_n, int64_t bh, int64_t kv_start,
                            const backward_tensors *t, int atomic_dq, dkdv_workspace *w) {
    const int64_t H = shape->H, S_q = shape->Sq, S_k = shape->Sk, D = shape->D;
    const int64_t BLOCK_M = block_m, BLOCK_N = block_n;
    const int64_t n_q_tiles = (S_q + BLOCK_M - 1) / BLOCK_M;
    const float scale = shape->scale, qk_scale = scale * LOG2E;   // scores in base 2, as the forward has them
    const int causal = shape->causal;
    const fa_strides sq = t->q_strides, sk = t->k_strides, sv = t->v_strides, sdo = t->do_strides;
    const int64_t M_pad = w->M_pad, N_pad = w->N_pad, D_pad = w->D_pad;
    const int64_t b = bh / H, h = bh % H;
    const float *q_head = t->q + b * sq.b + h * sq.h, *do_head = t->dout + b * sdo.b + h * sdo.h;
    const float *k_head = t->k + b * sk.b + h * sk.h, *v_head = t->v + b * sv.b + h * sv.h;
    const float *lse_head = t->lse + bh * S_q, *delta_head = t->delta + bh * S_q;
    const float *residual_head = t->lse_residual ? t->lse_residual + bh * S_q : NULL;
    const int64_t keys = S_k - kv_start < BLOCK_N ? S_k - kv_start : BLOCK_N;   // key rows in the tile

    // K_j and V_j of every key row, and zeroed accumulators (rows past S_k stay zero).
    for (int64_t c = 0; c < BLOCK_N; c++) {
        for (int64_t d = 0; d < D; d++) {
            w->k_tile[c * D_pad + d] = c < keys ? k_head[(kv_start + c) * sk.s + d * sk.d] : 0.0f;
            w->v_tile[c * D_pad + d] = c < keys ? v_head[(kv_start + c) * sv.s + d * sv.d] : 0.0f;
        }
        for (int64_t d = 0; d < D_pad; d++) w->dk_acc[c * D_pad + d] = w->dv_acc[c * D_pad + d] = 0.0f;
    }

    // Causal: query row i sees key j only when j <= i, so Q tiles that end before this K/V tile starts
    // see none of its keys and are skipped (the mirror of the forward's pruning).
    const int64_t first_q_tile = causal ? kv_start / BLOCK_M : 0;
    for (int64_t q_tile = first_q_tile; q_tile < n_q_tiles; q_tile++) {
        const int64_t q_start = q_tile * BLOCK_M;
        // The causal stage of this (Q tile, K tile) pair (fa_contract.h). Past first_q_tile a tile is in
        // the future only where S_q ends before this K/V tile starts (Sq < Sk): no row sees a key here.
        const int stage = causal_tile_stage(causal, q_start, kv_start, block_m, block_n, S_q, S_k);
        if (stage == TILE_FUTURE) continue;
        const int64_t rows = S_q - q_start < BLOCK_M ? S_q - q_start : BLOCK_M;   // query rows in it

        // Stage the Q tile (times qk_scale, as the forward held it) and the dO tile, both layouts, LSE
        // and Delta; rows past S_q are zeros.
        for (int64_t r = 0; r < M_pad; r++) {
            const int exists = r < rows;
            for (int64_t d = 0; d < D; d++) {
                const float q = exists ? q_head[(q_start + r) * sq.s + d * sq.d] * qk_scale : 0.0f;
                const float dout = exists ? do_head[(q_start + r) * sdo.s + d * sdo.d] : 0.0f;
                w->q_t[d * M_pad + r] = q, w->do_t[d * M_pad + r] = dout;
                if (exists) w->q_tile[r * D_pad + d] = q, w->do_tile[r * D_pad + d] = dout;
            }
            const float residual = exists && residual_head ? residual_head[q_start + r] : 0.0f;
            lse_to_base2(exists ? lse_head[q_start + r] : 0.0f, residual, &w->lse2_hi[r], &w->lse2_lo[r]);
            w->delta[r] = exists ? delta_head[q_start + r] : 0.0f;
        }
        for (int64_t c = 0; c < keys; c++) {   // key row j = kv_start + c: one CUDA thread
            const int64_t j = kv_start + c;
            const float *k_j = w->k_tile + c * D_pad, *v_j = w->v_tile + c * D_pad;

            // The thread's loop over the Q tile's rows, split in three loops that each run along the rows
            // (or along d), so that the compiler can vectorise them.
            // 1. s_i = S_ij * LOG2E = (qk_scale Q_i) . K_j, summed as the forward sums it (four parts, dim
            //    d in part d % 4, added in pairs: fa_contract.h), and dp_i = dO_i . V_j in one sum, for
            //    every row i, VEC rows at a time. The tiles are zero past D.
            for (int64_t r0 = 0; r0 < M_pad; r0 += VEC) {
                float s0[VEC] = {0.0f}, s1[VEC] = {0.0f}, s2[VEC] = {0.0f}, s3[VEC] = {0.0f};
                float dp_vec[VEC] = {0.0f};
                for (int64_t d = 0; d < D; d += 4) {
                    const float *q_d = w->q_t + d * M_pad + r0, *do_d = w->do_t + d * M_pad + r0;
#pragma omp simd
                    for (int rr = 0; rr < VEC; rr++) {
                        s0[rr] += q_d[rr] * k_j[d];
                        s1[rr] += q_d[M_pad + rr] * k_j[d + 1];
                        s2[rr] += q_d[2 * M_pad + rr] * k_j[d + 2];
                        s3[rr] += q_d[3 * M_pad + rr] * k_j[d + 3];
                    }
                    for (int e = 0; e < 4; e++) {
                        const float v_d = v_j[d + e];
#pragma omp simd
                        for (int rr = 0; rr < VEC; rr++) dp_vec[rr] += do_d[e * M_pad + rr] * v_d;
                    }
                }
#pragma omp simd
                for (int rr = 0; rr < VEC; rr++)
                    w->s[r0 + rr] = (s0[rr] + s1[rr]) + (s2[rr] + s3[rr]), w->dp[r0 + rr] = dp_vec[rr];
            }
            // 2. P_ij = exp(scale S_ij - LSE_i), recomputed from the saved log-sum-exp in base 2, and
            //    dS_ij = P_ij (dP_ij - Delta_i). A masked key (or a row past S_q) gets p = 0 directly.
#pragma omp simd
            for (int64_t r = 0; r < M_pad; r++) {
                const int visible = r < rows && !(stage == TILE_DIAGONAL && j > q_start + r);
                w->p[r] = visible ? fa_exp2((w->s[r] - w->lse2_hi[r]) - w->lse2_lo[r]) : 0.0f;
                w->ds[r] = w->p[r] * (w->dp[r] - w->delta[r]);
            }
            // 3. dV_j += sum_i P_ij dO_i and dK_j += sum_i dS_ij Q_i (times scale at the end), VEC dims
            //    at a time, kept in registers while i runs.
            float *dk_j = w->dk_acc + c * D_pad, *dv_j = w->dv_acc + c * D_pad;
            for (int64_t d0 = 0; d0 < D_pad; d0 += VEC) {
                float dk_vec[VEC], dv_vec[VEC];
#pragma omp simd
                for (int dd = 0; dd < VEC; dd++) dk_vec[dd] = dk_j[d0 + dd], dv_vec[dd] = dv_j[d0 + dd];
                for (int64_t r = 0; r < rows; r++) {
                    const float p = w->p[r], ds = w->ds[r];
                    const float *do_i = w->do_tile + r * D_pad + d0, *q_i = w->q_tile + r * D_pad + d0;
#pragma omp simd
                    for (int dd = 0; dd < VEC; dd++) {
                        dv_vec[dd] += p * do_i[dd];
                        dk_vec[dd] += ds * q_i[dd];
                    }
                }
#pragma omp simd
                for (int dd = 0; dd < VEC; dd++) dk_j[d0 + dd] = dk_vec[dd], dv_j[d0 + dd] = dv_vec[dd];
            }
            if (atomic_dq)
                for (int64_t r = 0; r < rows; r++) w->ds_tile[r * N_pad + c] = w->ds[r];
        }

        if (atomic_dq) {
            // This tile's share of dQ: dQ_i += scale * sum_j dS_ij K_j, for each row of the Q tile.
            // Other threads add into the same rows of dQ from their own K/V tiles at the same time, so
            // each addition is an atomic read-modify-write: race-free, but in an order that depends on
            // the schedule, so the float sums (and the last bits of dQ) can change from run to run.
            float *dq_head = t->dq + b * t->dq_strides.b + h * t->dq_strides.h;
            for (int64_t r = 0; r < rows; r++) {
                float *dq_i = dq_head + (q_start + r) * t->dq_strides.s;
                for (int64_t d0 = 0; d0 < D_pad; d0 += VEC) {
                    float acc[VEC] = {0.0f};
                    for (int64_t c = 0; c < keys; c++) {
                        const float ds = w->ds_tile[r * N_pad + c], *k_c = w->k_tile + c * D_pad + d0;
#pragma omp simd
                        for (int dd = 0; dd < VEC; dd++) acc[dd] += ds * k_c[dd];
                    }
                    for (int dd = 0; dd < VEC && d0 + dd < D; dd++) {
#pragma omp atomic update
                        dq_i[(d0 + dd) * t->dq_strides.d] += scale * acc[dd];
                    }
                }
            }
        }
    }

    // Each dK_j and dV_j is written exactly once, by the one program that owns its K/V tile. dk_acc summed
    // dS_ij times the staged qk_scale * Q_i, so dK_j = scale * sum_i dS_ij Q_i = LN2 * dk_acc.
    float *dk_head = t->dk + b * t->dk_strides.b + h * t->dk_strides.h;
    float *dv_head = t->dv + b * t->dv_strides.b + h * t->dv_strides.h;
    for (int64_t c = 0; c < keys; c++) {
        float *dk_j = dk_head + (kv_start + c) * t->dk_strides.s;
        float *dv_j = dv_head + (kv_start + c) * t->dv_strides.s;
        for (int64_t d = 0; d < D; d++) {
            dk_j[d * t->dk_strides.d] = LN2 * w->dk_acc[c * D_pad + d];
            dv_j[d * t->dv_strides.d] = w->dv_acc[c * D_pad + d];
        }
    }
}

void backward_dkdv_cpu(const fa_shape *shape, int block_m, int block_n, const backward_tensors *t, int atomic_dq) {
    const int64_t n_kv_tiles = (shape->Sk + block_n - 1) / block_n, BH = shape->B * shape->H;
#pragma omp parallel
    {
        dkdv_workspace w = workspace_alloc(block_m, block_n, shape->D);
        // The grid: (b, h) and the K/V tile are blockIdx.y and blockIdx.x of the CUDA twin. Dynamic scheduling,
        // because under the causal mask the K/V tiles near the end of the sequence have fewer Q tiles to visit.
#pragma omp for collapse(2) schedule(dynamic)
        for (int64_t bh = 0; bh < BH; bh++)
            for (int64_t kv_tile = 0; kv_tile < n_kv_tiles; kv_tile++)
                kv_tile_program(shape, block_m, block_n, bh, kv_tile * block_n, t, atomic_dq, &w);
        free(w.q_t);   // the start of the one allocation
    }
}
