// register_tiles.h - phase 5, step 1: the 4D forward of phase 3 step 3 (causal pruning, LSE), made fast in float32 by
// register tiles: a group of threads computes a tile of S together, each thread (each SIMD micro-kernel on the CPU)
// a small block of scores held in registers, as a blocked SGEMM does.
//
// The tensors are those of flash_forward_lse_cpu / _cuda, in the same struct (forward_tensors in
// common/fa_contract.h; lse_residual is not written): Q, K, V, O with their strides (fa_strides, in elements); LSE natural-log, contiguous
// [B, H, Sq]; causal pruning with causal_tile_stage(). The CPU takes any D, any strides and any tile size. The CUDA
// kernel takes D in {16, 32, 64, 128}, the tiles below, and rows of 16-byte-aligned contiguous floats (stride d = 1,
// the other strides multiples of 4), and exits 2 with one line otherwise.
#ifndef REGISTER_TILES_H
#define REGISTER_TILES_H

#include "fa_contract.h"  // forward_tensors, backward_tensors (step 5: phase 4's float32 tensors)
#include "fa_shape.h"

#ifdef __cplusplus
extern "C" {
#endif

void flash_forward_regtile_cpu(const fa_shape *shape, int block_m, int block_n, const forward_tensors *t);
void flash_forward_regtile_cuda(const fa_shape *shape, int block_m, int block_n, const forward_tensors *t);

// Bytes of working memory one CPU thread needs (its tiles); the driver reports threads * this.
int64_t flash_forward_regtile_cpu_workspace_bytes(int64_t D, int block_m, int block_n);

// Step 5 (CPU only): the float32 backward, register-tiled as step 4's CPU twin (5_backward_f32_cpu.c), on phase 4's
// tensors (O, LSE and its residual from phase 3 step 3): Delta, dK/dV, and dQ as dq_mode asks (FA_DQ_DETERMINISTIC
// or FA_DQ_ATOMIC). Any D, tile and stride.
void flash_backward_regtile_cpu(const fa_shape *shape, int block_m, int block_n, int dq_mode,
                                const backward_tensors *t);
int64_t flash_backward_regtile_cpu_workspace_bytes(int64_t D, int block_m, int block_n);

// What the CUDA kernel is compiled for: each (D, BLOCK_M, BLOCK_N) is one template instantiation.
#define REGTILE_CUDA_HEAD_DIMS {16, 32, 64, 128, 0}
#define REGTILE_CUDA_TILES_TEXT "128x64, 64x64 or 64x32"
static inline int regtile_cuda_supports_tiles(int block_m, int block_n) {
    return (block_m == 128 && block_n == 64) || (block_m == 64 && (block_n == 64 || block_n == 32));
}
// Bytes of shared memory one CUDA thread block uses: the Q, K and V tiles with rows of D + 4 floats and P with rows
// of BLOCK_M + 4 (the padding that keeps the reads free of bank conflicts; 1_register_tiles_cuda.cu explains it), and
// the key that gave each row's max (8 bytes a row, for the LSE).
#define REGTILE_CUDA_PAD 4
static inline int64_t flash_forward_regtile_cuda_smem_bytes(int64_t D, int block_m, int block_n) {
    const int64_t tile_rows = block_m + 2 * (int64_t)block_n;
    return (tile_rows * (D + REGTILE_CUDA_PAD) + block_n * (int64_t)(block_m + REGTILE_CUDA_PAD)) * 4 + block_m * 8;
}

#ifdef __cplusplus
}
#endif

#endif
