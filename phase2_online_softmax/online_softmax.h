// online_softmax.h - phase 2: the FlashAttention forward for one head, with the online softmax.
//
//   Q [S_q, D], K and V [S_k, D], O [S_q, D], contiguous row-major float32 (the chapter's N, Nk and d are S_q,
//   S_k and D here: the names phase 3 keeps). O = softmax(scale * Q K^T) V, without any S_q x S_k buffer: each
//   program owns BLOCK_M query rows and streams K and V past them in tiles of BLOCK_N keys, keeping for each row the
//   running max m_i, the running sum l_i and the unnormalised output acc.
//
// The shape is an fa_shape with B = H = 1 and causal = 0 (the causal mask comes in phase 3).
#ifndef ONLINE_SOFTMAX_H
#define ONLINE_SOFTMAX_H

#include "fa_shape.h"

#ifdef __cplusplus
extern "C" {
#endif

// The tensors of one call (phase 3 adds their strides and the LSE). The CPU function takes host pointers, the CUDA
// function device pointers.
typedef struct {
    const float *q, *k, *v;   // q [S_q, D], k and v [S_k, D]
    float *o;                 // [S_q, D]
} forward_2d_tensors;

// CPU (online_softmax_cpu.c): any D, any tile sizes >= 1. Parallelised with OpenMP over Q tiles.
void flash_forward_2d_cpu(const fa_shape *shape, int block_m, int block_n, const forward_2d_tensors *t);

// Bytes of working memory one CPU thread needs for these tiles (its private "shared memory": the K and V tiles,
// the Q tile, the accumulators); the driver reports threads * this as the extra memory of the flash version.
int64_t flash_forward_2d_cpu_workspace_bytes(int64_t D, int block_m, int block_n);

// CUDA (online_softmax_cuda.cu): D in FLASH2_CUDA_HEAD_DIMS and tiles in FLASH2_CUDA_TILES_TEXT.
// Every pointer is a device pointer. The launcher exits 2 with one line on anything else.
void flash_forward_2d_cuda(const fa_shape *shape, int block_m, int block_n, const forward_2d_tensors *t);

// What the CUDA kernel is compiled for: each (D, BLOCK_M, BLOCK_N) is one template instantiation, and every one
// costs compile time for every GPU architecture, so the list is short.
#define FLASH2_CUDA_HEAD_DIMS {16, 32, 64, 128, 0}
#define FLASH2_CUDA_TILES_TEXT "64x32, 64x64 or 128x64"
static inline int flash2_cuda_supports_tiles(int block_m, int block_n) {
    return (block_m == 64 && (block_n == 32 || block_n == 64)) || (block_m == 128 && block_n == 64);
}

#ifdef __cplusplus
}
#endif

#endif
