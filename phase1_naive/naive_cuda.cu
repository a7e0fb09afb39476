// naive_cuda.cu - phase 1 on the GPU: standard attention as three plain kernels, S and P materialised.
//
// CPU twin: naive_cpu.c (each kernel here is one pass there).
// Run:      build/bin/phase1_naive --impl cuda --S 1024 --D 64
//
// Every kernel covers (b, h) with blockIdx.z (and rows with blockIdx.y; both loop when they pass the grid's 65535 limit) and reads and writes global memory (HBM) directly: S is written to
// HBM by the first kernel, read and P written by the second, P read by the third. That traffic, 4 * Sq * Sk floats
// per head, is what FlashAttention removes.
#include "fa_cuda_check.h"
#include "fa_warp.cuh"
#include "fa_baselines.h"

#include <math.h>

#define TILE 16            // scores kernel: a TILE x TILE block of S per thread block
#define SOFTMAX_WARPS 4    // softmax kernel: one warp per row, SOFTMAX_WARPS rows per block
#define OUT_COLS 32        // output kernel: OUT_COLS columns of O (along D) ...
#define OUT_ROWS 8         // ... times OUT_ROWS rows per block
#define MAX_GRID_YZ 65535  // the hardware limit of gridDim.y and gridDim.z; more rows or heads loop inside the kernel

// S[bh][i][j] = scale * q_i . k_j, one element per thread. q: [BH, Sq, D], k: [BH, Sk, D], scores: [BH, Sq, Sk].
__global__ void scores_kernel(const float *q, const float *k, float *scores, int64_t BH, int64_t Sq, int64_t Sk,
                              int64_t D, float scale, int causal) {
    const int64_t j = (int64_t)blockIdx.x * TILE + threadIdx.x;
    if (j >= Sk) return;
    for (int64_t bh = blockIdx.z; bh < BH; bh += gridDim.z) {
        for (int64_t i = (int64_t)blockIdx.y * TILE + threadIdx.y; i < Sq; i += (int64_t)gridDim.y * TILE) {
            float *s = scores + (bh * Sq + i) * Sk + j;
            if (causal && j > i) {
                *s = -INFINITY;
                continue;
            }
            const float *q_row = q + (bh * Sq + i) * D, *k_row = k + (bh * Sk + j) * D;
            float dot = 0.0f;
            for (int64_t d = 0; d < D; d++) dot += q_row[d] * k_row[d];
            *s = scale * dot;
        }
    }
}

// P = softmax(S) for one row per warp, and LSE. The warp's 32 lanes stride over the row together.
__global__ void softmax_kernel(const float *scores, float *probs, float *lse, int64_t Sq, int64_t Sk) {
    const int lane = threadIdx.x % 32;
    const int64_t i = (int64_t)blockIdx.x * SOFTMAX_WARPS + threadIdx.x / 32;
    const int64_t bh = blockIdx.y;
    if (i >= Sq) return;   // the whole warp leaves together, so the shuffles below see all 32 lanes
    const float *s_row = scores + (bh * Sq + i) * Sk;
    float *p_row = probs + (bh * Sq + i) * Sk;

    float row_max = -INFINITY;
    for (int64_t j = lane; j < Sk; j += 32) row_max = fmaxf(row_max, s_row[j]);
    row_max = warp_max(row_max);
    float row_sum = 0.0f;
    for (int64_t j = lane; j < Sk; j += 32) row_sum += expf(s_row[j] - row_max);
    row_sum = warp_sum(row_sum);
    for (int64_t j = lane; j < Sk; j += 32) p_row[j] = expf(s_row[j] - row_max) / row_sum;
    if (lane == 0) lse[bh * Sq + i] = row_max + logf(row_sum);
}

// O[bh][i][d] = sum_j P[bh][i][j] * V[bh][j][d], one element per thread; threadIdx.x runs along d so that a warp
// reads a row of V coalesced.
__global__ void output_kernel(const float *probs, const float *v, float *o, int64_t BH, int64_t Sq, int64_t Sk,
                              int64_t D) {
    const int64_t d = (int64_t)blockIdx.x * OUT_COLS + threadIdx.x;
    if (d >= D) return;
    for (int64_t bh = blockIdx.z; bh < BH; bh += gridDim.z) {
        for (int64_t i = (int64_t)blockIdx.y * OUT_ROWS + threadIdx.y; i < Sq; i += (int64_t)gridDim.y * OUT_ROWS) {
            const float *p_row = probs + (bh * Sq + i) * Sk, *v_head = v + bh * Sk * D;
            float acc = 0.0f;
            for (int64_t j = 0; j < Sk; j++) acc += p_row[j] * v_head[j * D + d];
            o[(bh * Sq + i) * D + d] = acc;
        }
    }
}

static unsigned int blocks_for(int64_t n, int64_t per_block) { return (unsigned int)((n + per_block - 1) / per_block); }

extern "C" void naive_attention_cuda(const fa_shape *shape, const float *q, const float *k, const float *v,
                                     float *scores, float *probs, float *o, float *lse) {
    const int64_t BH = shape->B * shape->H, Sq = shape->Sq, Sk = shape->Sk, D = shape->D;
    const unsigned int grid_z = (unsigned int)(BH < MAX_GRID_YZ ? BH : MAX_GRID_YZ);
    const unsigned int score_rows = blocks_for(Sq, TILE) < MAX_GRID_YZ ? blocks_for(Sq, TILE) : MAX_GRID_YZ;
    const unsigned int out_rows = blocks_for(Sq, OUT_ROWS) < MAX_GRID_YZ ? blocks_for(Sq, OUT_ROWS) : MAX_GRID_YZ;

    dim3 scores_grid(blocks_for(Sk, TILE), score_rows, grid_z);
    scores_kernel<<<scores_grid, dim3(TILE, TILE)>>>(q, k, scores, BH, Sq, Sk, D, shape->scale, shape->causal);
    FA_CUDA_CHECK_LAUNCH();

    // One launch per group of at most 65535 heads keeps blockIdx.y within its limit.
    for (int64_t first = 0; first < BH; first += MAX_GRID_YZ) {
        int64_t heads = BH - first < MAX_GRID_YZ ? BH - first : MAX_GRID_YZ;
        dim3 softmax_grid(blocks_for(Sq, SOFTMAX_WARPS), (unsigned int)heads);
        softmax_kernel<<<softmax_grid, SOFTMAX_WARPS * 32>>>(scores + first * Sq * Sk, probs + first * Sq * Sk,
                                                             lse + first * Sq, Sq, Sk);
        FA_CUDA_CHECK_LAUNCH();
    }

    dim3 output_grid(blocks_for(D, OUT_COLS), out_rows, grid_z);
    output_kernel<<<output_grid, dim3(OUT_COLS, OUT_ROWS)>>>(probs, v, o, BH, Sq, Sk, D);
    FA_CUDA_CHECK_LAUNCH();
}
