// forward4d.h - phase 3: the FlashAttention forward on [B, H, S, D] tensors, in three steps.
//
//   step 1 (1_grid4d_*): [B, H, S, D] with explicit strides; the grid is (Q tiles, B*H); Sq != Sk works.
//   step 2 (2_causal_*): + the causal mask, with K tiles entirely in the future never loaded, tiles entirely in the
//                          past computed without a mask, and only the tiles on the diagonal masked element by element;
//                          and the Q tiles taken last to first, so that the longest causal tiles start first.
//   step 3 (3_lse_*):    + LSE = log(sum_j exp(scale * q_i . k_j)) per row, [B, H, Sq] float32, for the backward.
//
// The tensors (forward_tensors), the grid limit, the score order, the causal tile rule and the CUDA kernels' float4
// row check are the kernel contract of common/fa_contract.h; step 3, which other phases run too, is declared in
// common/fa_baselines.h with the CPU workspace of all three steps. The CPU functions take any strides. The CUDA
// functions read and write rows as float4s (check_float4_tensors) and exit 2 with one line otherwise.
#ifndef FORWARD4D_H
#define FORWARD4D_H

#include "fa_baselines.h"  // step 3: flash_forward_lse_*, flash_forward_4d_cpu_workspace_bytes
#include "fa_contract.h"
#include "fa_shape.h"

#ifdef __cplusplus
extern "C" {
#endif

// The three steps take the same arguments. tiles_visited may be NULL, else receives the number of (Q tile, K tile)
// pairs the CPU processed (summed over all heads): the tile-count test and --causal's note read it.
// Step 1: the 4D grid (shape->causal must be 0).
void flash_forward_grid4d_cpu(const fa_shape *shape, int block_m, int block_n, const forward_tensors *t,
                              int64_t *tiles_visited);
void flash_forward_grid4d_cuda(const fa_shape *shape, int block_m, int block_n, const forward_tensors *t);
// Step 2: causal block pruning.
void flash_forward_causal_cpu(const fa_shape *shape, int block_m, int block_n, const forward_tensors *t,
                              int64_t *tiles_visited);
void flash_forward_causal_cuda(const fa_shape *shape, int block_m, int block_n, const forward_tensors *t);
// Step 3 (+ LSE): flash_forward_lse_cpu and flash_forward_lse_cuda, in common/fa_baselines.h.

#ifdef __cplusplus
}
#endif

#endif
