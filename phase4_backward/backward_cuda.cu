// backward_cuda.cu - phase 4 on the GPU: the preprocess (Delta = rowsum(dO * O)) and the backward pass in order.
//
// CPU twin: backward_cpu.c.   The passes: backward_dkdv_cuda.cu (dK, dV), backward_dq_cuda.cu (dQ).
// Run:      build/bin/phase4_backward --impl cuda --S 1024 --D 64 --causal
#include "fa_baselines.h"
#include "fa_row_split.cuh"
#include "fa_cuda_check.h"
#include "fa_warp.cuh"

#define PREPROCESS_WARPS 4            // rows per block of the preprocess: one warp per row
#define PREPROCESS_MAX_BLOCKS 65536   // enough blocks to fill any GPU; the rest of the rows loop inside the kernel


// Delta_i = sum_d dO[i][d] * O[i][d], one warp per row (b, h, i); its lanes stride over d, coalesced. With zero_dq it
// also sets dQ row i to zero, for the atomic variant to add into.
__global__ void backward_preprocess_kernel(backward_tensors t, int64_t H, int64_t S_q, int64_t D, int64_t n_rows,
                                           int zero_dq) {
    const int lane = threadIdx.x % 32;
    // The loop index is the same for all lanes of a warp, so the whole warp reaches warp_sum together.
    for (int64_t row = (int64_t)blockIdx.x * PREPROCESS_WARPS + threadIdx.x / 32; row < n_rows;
         row += (int64_t)gridDim.x * PREPROCESS_WARPS) {
        const int64_t bh = row / S_q, i = row % S_q, b = bh / H, h = bh % H;
        const float *o_row = t.o + b * t.o_strides.b + h * t.o_strides.h + i * t.o_strides.s;
        const float *do_row = t.dout + b * t.do_strides.b + h * t.do_strides.h + i * t.do_strides.s;
        float partial = 0.0f;
        for (int64_t d = lane; d < D; d += 32) partial += do_row[d * t.do_strides.d] * o_row[d * t.o_strides.d];
        const float delta = warp_sum(partial);
        if (lane == 0) t.delta[row] = delta;   // Delta is contiguous [B, H, Sq]: row = bh * S_q + i
        if (zero_dq) {
            float *dq_row = t.dq + b * t.dq_strides.b + h * t.dq_strides.h + i * t.dq_strides.s;
            for (int64_t d = lane; d < D; d += 32) dq_row[d * t.dq_strides.d] = 0.0f;
        }
    }
}

extern "C" void backward_preprocess_cuda(const fa_shape *shape, const backward_tensors *t, int zero_dq) {
    const int64_t n_rows = shape->B * shape->H * shape->Sq;
    const int64_t blocks = (n_rows + PREPROCESS_WARPS - 1) / PREPROCESS_WARPS;
    const unsigned int grid = (unsigned int)(blocks < PREPROCESS_MAX_BLOCKS ? blocks : PREPROCESS_MAX_BLOCKS);
    backward_preprocess_kernel<<<grid, PREPROCESS_WARPS * 32>>>(*t, shape->H, shape->Sq, shape->D, n_rows, zero_dq);
    FA_CUDA_CHECK_LAUNCH();
}

// Three launches on the default stream, so each starts after the one before has finished: the main pass reads the
// whole Delta, and the dQ pass reads nothing the main pass writes (it could even run beside it).
extern "C" void flash_backward_cuda(const fa_shape *shape, int block_m, int block_n, int dq_mode,
                                    const backward_tensors *t) {
    const int atomic_dq = dq_mode == FA_DQ_ATOMIC;
    backward_preprocess_cuda(shape, t, atomic_dq);
    backward_dkdv_cuda(shape, block_m, block_n, t, atomic_dq);
    if (!atomic_dq) backward_dq_cuda(shape, block_m, block_n, t);
}
