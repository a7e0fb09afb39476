// naive_backward_cuda.cu - phase 1's backward on the GPU: the gradients of standard attention as plain kernels,
// P, dP and dS materialised in global memory.
//
// CPU twin: naive_backward_cpu.c (each kernel here is one step there).
// Run:      build/bin/phase4_backward --impl cuda   (the "naive backward" rows: phase 4's baseline)
//
// Every kernel covers (b, h) with blockIdx.z (or loops over rows) and reads and writes HBM directly: P and dP/dS are
// written whole by one kernel and read whole by the next, 2 * Sq * Sk floats per head that phase 4 never stores.
#include "fa_cuda_check.h"
#include "fa_warp.cuh"
#include "fa_baselines.h"

#include <math.h>

#define TILE 16             // dP kernel: a TILE x TILE block of the Sq x Sk matrix per thread block
#define OUT_COLS 32         // product kernels: OUT_COLS columns (along D) ...
#define OUT_ROWS 8          // ... times OUT_ROWS rows per block
#define ROW_WARPS 4         // dS kernel: one warp per row, ROW_WARPS rows per block
#define ROW_MAX_BLOCKS 65536
#define MAX_GRID_Y 65535    // the hardware limits of gridDim.y and gridDim.z: more rows of P, or more (b, h),
#define MAX_GRID_Z 65535    // loop inside the kernel

// dP[bh][i][j] = dO_i . v_j, one element per thread.
__global__ void dprobs_kernel(const float *dout, const float *v, float *dprobs, int64_t BH, int64_t Sq, int64_t Sk,
                              int64_t D) {
    const int64_t j = (int64_t)blockIdx.x * TILE + threadIdx.x;
    if (j >= Sk) return;
    for (int64_t i = (int64_t)blockIdx.y * TILE + threadIdx.y; i < Sq; i += (int64_t)gridDim.y * TILE) {
        for (int64_t bh = blockIdx.z; bh < BH; bh += gridDim.z) {
            const float *do_row = dout + (bh * Sq + i) * D, *v_row = v + (bh * Sk + j) * D;
            float dot = 0.0f;
            for (int64_t d = 0; d < D; d++) dot += do_row[d] * v_row[d];
            dprobs[(bh * Sq + i) * Sk + j] = dot;
        }
    }
}

// dS = P * (dP - Delta) over dP, one warp per row (bh, i); Delta_i = dO_i . O_i is summed by the warp first.
__global__ void dscores_kernel(const float *dout, const float *o, const float *probs, float *dscores, int64_t n_rows,
                               int64_t Sk, int64_t D) {
    const int lane = threadIdx.x % 32;
    // The loop index is the same for all lanes of a warp, so the whole warp reaches warp_sum together.
    for (int64_t row = (int64_t)blockIdx.x * ROW_WARPS + threadIdx.x / 32; row < n_rows;
         row += (int64_t)gridDim.x * ROW_WARPS) {
        float partial = 0.0f;
        for (int64_t d = lane; d < D; d += 32) partial += dout[row * D + d] * o[row * D + d];
        const float delta = warp_sum(partial);
        for (int64_t j = lane; j < Sk; j += 32)
            dscores[row * Sk + j] = probs[row * Sk + j] * (dscores[row * Sk + j] - delta);
    }
}

// out[bh][i][d] = alpha * sum_j m[bh][i][j] * x[bh][j][d]: dQ = scale * dS K. m: [BH, rows, inner], x: [BH, inner, D].
// One element per thread; threadIdx.x runs along d so that a warp reads a row of x coalesced.
__global__ void product_kernel(const float *m, const float *x, float *out, int64_t BH, int64_t rows, int64_t inner,
                               int64_t D, float alpha) {
    const int64_t i = (int64_t)blockIdx.x * OUT_ROWS + threadIdx.y;   // rows on grid.x: it has room for 2^31 blocks
    const int64_t d = (int64_t)blockIdx.y * OUT_COLS + threadIdx.x;
    if (i >= rows || d >= D) return;
    for (int64_t bh = blockIdx.z; bh < BH; bh += gridDim.z) {
        const float *m_row = m + (bh * rows + i) * inner, *x_head = x + bh * inner * D;
        float acc = 0.0f;
        for (int64_t j = 0; j < inner; j++) acc += m_row[j] * x_head[j * D + d];
        out[(bh * rows + i) * D + d] = alpha * acc;
    }
}

// out[bh][j][d] = alpha * sum_i m[bh][i][j] * x[bh][i][d]: dV = P^T dO and dK = scale * dS^T Q.
// m: [BH, inner, cols], x: [BH, inner, D], out: [BH, cols, D]. Column j of m is read down its rows.
__global__ void product_transposed_kernel(const float *m, const float *x, float *out, int64_t BH, int64_t inner,
                                          int64_t cols, int64_t D, float alpha) {
    const int64_t j = (int64_t)blockIdx.x * OUT_ROWS + threadIdx.y;
    const int64_t d = (int64_t)blockIdx.y * OUT_COLS + threadIdx.x;
    if (j >= cols || d >= D) return;
    for (int64_t bh = blockIdx.z; bh < BH; bh += gridDim.z) {
        const float *m_head = m + bh * inner * cols, *x_head = x + bh * inner * D;
        float acc = 0.0f;
        for (int64_t i = 0; i < inner; i++) acc += m_head[i * cols + j] * x_head[i * D + d];
        out[(bh * cols + j) * D + d] = alpha * acc;
    }
}

static unsigned int blocks_for(int64_t n, int64_t per_block) { return (unsigned int)((n + per_block - 1) / per_block); }

extern "C" void naive_backward_cuda(const fa_shape *shape, const float *q, const float *k, const float *v,
                                    const float *o, const float *probs, const float *dout, float *dscores,
                                    float *dq, float *dk, float *dv) {
    const int64_t BH = shape->B * shape->H, Sq = shape->Sq, Sk = shape->Sk, D = shape->D;
    const unsigned int grid_z = (unsigned int)(BH < MAX_GRID_Z ? BH : MAX_GRID_Z);
    const unsigned int row_tiles = blocks_for(Sq, TILE) < MAX_GRID_Y ? blocks_for(Sq, TILE) : MAX_GRID_Y;
    const dim3 matrix_grid(blocks_for(Sk, TILE), row_tiles, grid_z);
    const dim3 dq_grid(blocks_for(Sq, OUT_ROWS), blocks_for(D, OUT_COLS), grid_z);
    const dim3 dkdv_grid(blocks_for(Sk, OUT_ROWS), blocks_for(D, OUT_COLS), grid_z);

    // Step 1: dV = P^T dO, with the forward's P.
    product_transposed_kernel<<<dkdv_grid, dim3(OUT_COLS, OUT_ROWS)>>>(probs, dout, dv, BH, Sq, Sk, D, 1.0f);
    FA_CUDA_CHECK_LAUNCH();

    // Step 2: dP = dO V^T.   Step 3: dS = P * (dP - Delta), over dP.
    dprobs_kernel<<<matrix_grid, dim3(TILE, TILE)>>>(dout, v, dscores, BH, Sq, Sk, D);
    FA_CUDA_CHECK_LAUNCH();
    const int64_t row_blocks = blocks_for(BH * Sq, ROW_WARPS);
    dscores_kernel<<<(unsigned int)(row_blocks < ROW_MAX_BLOCKS ? row_blocks : ROW_MAX_BLOCKS), ROW_WARPS * 32>>>(
        dout, o, probs, dscores, BH * Sq, Sk, D);
    FA_CUDA_CHECK_LAUNCH();

    // Step 4: dQ = scale * dS K.   Step 5: dK = scale * dS^T Q.
    product_kernel<<<dq_grid, dim3(OUT_COLS, OUT_ROWS)>>>(dscores, k, dq, BH, Sq, Sk, D, shape->scale);
    FA_CUDA_CHECK_LAUNCH();
    product_transposed_kernel<<<dkdv_grid, dim3(OUT_COLS, OUT_ROWS)>>>(dscores, q, dk, BH, Sq, Sk, D, shape->scale);
    FA_CUDA_CHECK_LAUNCH();
}
