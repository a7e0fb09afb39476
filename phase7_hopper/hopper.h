// hopper.h - phase 7: the forward (and, step 6, the backward) on Hopper's own machinery (wgmma, TMA, warp roles),
// fp16 or bf16 inputs, float32 accumulation, for sm_90a only.
//
//   step 1 (1_wgmma_*): wgmma.mma_async from shared memory (Q, K) and registers (P), one 64-row warpgroup per
//                       wgmma; phase 5 step 3's cp.async double buffer and online softmax around it.
//   step 2 (2_tma_*):   + the tiles come in through TMA (one thread asks, the copy engine writes the swizzle and
//                       reports to an mbarrier), a ring of K/V buffers; one __grid_constant__ parameter struct.
//   step 3 (3_warp_specialized_*): + a producer warpgroup that only issues copies and two consumer warpgroups that
//                       only compute, "empty" barriers instead of a block-wide barrier, setmaxnreg.
//   step 4 (4_pingpong_*): + the two consumer warpgroups take turns on the tensor cores (named barriers): one's
//                       softmax runs while the other's products do.
//   step 4a (4a_wide_wgmma_*): step 4 with one wgmma per 128 columns of a product (m64n128k16) where it issued two.
//   step 4b (4b_exp2_ftz_*): step 4a with each exp2 of the softmax one MUFU.EX2 (exp2_ftz), not exp2f's four.
//   step 4c (4c_three_consumers_*): step 4b with three consumer warpgroups, 192 query rows per block, at D = 64.
//   step 4d (4d_split_barriers_*): step 4c with a landed/empty barrier pair per K buffer and per V buffer, so that
//                       a K buffer is refilled as soon as S = Q K^T has read it.
//   step 4e (4e_overlap_in_turn_*): step 4d with the softmax of tile n beside tile n - 1's P V inside each turn.
//   step 4f (4f_persistent_*): step 4e as a persistent kernel: a block per SM takes Q tiles from a queue.
//   step 4g (4g_stages_once_*): step 4f with the causal bookkeeping (how many tiles, which need the mask, each row's
//                       last key) worked out once per Q tile, the mask on 32-bit offsets.
//   step 4h (4h_l2_head_groups_*): step 4g with its causal queue's heavy tiles taken in groups of heads whose K and
//                       V fit in half the L2, heaviest first inside each group, and the lightest tiles of all last.
//   step 4i (4i_descriptors_once_*): step 4h with its wgmma descriptors built once, in uniform registers.
//   step 4j (4j_two_rows_together_*): step 4i with the maxima of each lane's two rows found side by side.
//   step 5 (5_overlap_*): step 3 with two wgmma groups in flight in each consumer: tile n's softmax runs while the
//                       tensor cores compute tile n - 1's P V.
//   step 6 (6_backward_*): the backward: phase 5 step 4's with its dK/dV products on wgmma;
//   step 6a (6a_dq_by_tma_*): step 6 in one pass, dQ on wgmma and summed into global memory by the TMA;
//   step 6b (6b_dq_beside_dkdv_*): step 6a with dQ's product queued behind dV's and dK's.
//   step 6c (6c_two_key_warpgroups_*): step 6a with two warpgroups over 128 keys, sharing the Q tiles' loads.
//   step 6d (6d_descriptors_once_*): step 6c with its wgmma descriptors built once, in uniform registers.
//   step 6e (6e_exp2_ftz_*): step 6d with each exp2 of P^T one MUFU.EX2 (exp2_ftz).
//   step 6f (6f_overlap_products_*): step 6e with P^T, dS^T and their stores computed while products still run.
//   step 6g (6g_q_tiles_by_tma_*): step 6f with Q and dO loaded by the TMA onto mbarriers: two barriers a tile fewer.
//   step 6h (6h_dq_per_warpgroup_*): step 6g with dQ in a buffer of its own, handed to the TMA by each warpgroup.
//   step 6i (6i_wide_q_tiles_*): step 6h with Q tiles of 128 queries at D = 64.
//   step 6j (6j_transposed_dq_*): step 6i with dQ computed transposed, and Q tiles of 80 queries at D = 128.
//
// Types and layouts as phase 5's (tc_forward_tensors, common/fa_baselines.h): Q, K, V are dtype bits ([B, H, S, D], strides in elements,
// stride d = 1, the other strides multiples of 8, 16-byte aligned pointers), O float32 [B, H, Sq, D], LSE float32
// [B, H, Sq] contiguous, natural log. D = 64 or 128; the tiles of hopper_cuda_supports_tiles.
// The CPU twin of step 1 is phase 5 step 3's (flash_forward_pipeline_cpu): it changes how the GPU multiplies, not
// what it computes or where it rounds.
#ifndef HOPPER_H
#define HOPPER_H

#include <stddef.h>
#include <stdint.h>

#include "fa_baselines.h"   // tc_forward_tensors, and phase 5 step 3 (the baseline and CPU twin)
#include "fa_shape.h"

#ifdef __cplusplus
extern "C" {
#endif

void flash_forward_wgmma_cuda(const fa_shape *shape, int dtype, int block_m, int block_n,
                              const tc_forward_tensors *t);

void flash_forward_tma_cuda(const fa_shape *shape, int dtype, int block_m, int block_n,
                            const tc_forward_tensors *t);

void flash_forward_warp_specialized_cuda(const fa_shape *shape, int dtype, int block_m, int block_n,
                                         const tc_forward_tensors *t);

void flash_forward_pingpong_cuda(const fa_shape *shape, int dtype, int block_m, int block_n,
                                 const tc_forward_tensors *t);

void flash_forward_wide_wgmma_cuda(const fa_shape *shape, int dtype, int block_m, int block_n,
                                   const tc_forward_tensors *t);

void flash_forward_wgmma_exp2_ftz_cuda(const fa_shape *shape, int dtype, int block_m, int block_n,
                                       const tc_forward_tensors *t);

void flash_forward_three_consumers_cuda(const fa_shape *shape, int dtype, int block_m, int block_n,
                                       const tc_forward_tensors *t);

void flash_forward_split_barriers_cuda(const fa_shape *shape, int dtype, int block_m, int block_n,
                                       const tc_forward_tensors *t);

void flash_forward_overlap_in_turn_cuda(const fa_shape *shape, int dtype, int block_m, int block_n,
                                        const tc_forward_tensors *t);

// Step 4f (4f_persistent_cuda.cu): step 4e as a persistent kernel (a block per SM takes Q tiles from a queue; causal,
// the heaviest first); the same tiles, arguments and bits.
void flash_forward_persistent_cuda(const fa_shape *shape, int dtype, int block_m, int block_n,
                                   const tc_forward_tensors *t);
// Step 4g (4g_stages_once_cuda.cu): step 4f with each Q tile's causal bookkeeping worked out before its K loop; the
// same tiles, arguments, shared memory (flash_forward_persistent_cuda_smem_bytes) and bits.
void flash_forward_stages_once_cuda(const fa_shape *shape, int dtype, int block_m, int block_n,
                                    const tc_forward_tensors *t);
// Step 4h (4h_l2_head_groups_cuda.cu): step 4g with its causal queue's heavy tiles in groups of heads sized to the L2
// (the host asks the GPU for its L2's size at every launch), then the lightest tiles of every head; the same tiles,
// arguments, shared memory and bits.
void flash_forward_l2_head_groups_cuda(const fa_shape *shape, int dtype, int block_m, int block_n,
                                       const tc_forward_tensors *t);
// Step 4i (4i_descriptors_once_cuda.cu): step 4h with its wgmma descriptors built once and moved by additions; the
// same tiles, arguments, shared memory and bits.
void flash_forward_descriptors_once_cuda(const fa_shape *shape, int dtype, int block_m, int block_n,
                                         const tc_forward_tensors *t);
// Step 4j (4j_two_rows_together_cuda.cu): step 4i with the two rows' maxima side by side in softmax_tile(); the same
// tiles, arguments, shared memory and bits. (Phase 5's step 3j does the same for four rows per lane.)
void flash_forward_two_rows_together_cuda(const fa_shape *shape, int dtype, int block_m, int block_n,
                                          const tc_forward_tensors *t);

void flash_forward_overlap_cuda(const fa_shape *shape, int dtype, int block_m, int block_n,
                                const tc_forward_tensors *t);

#define HOPPER_CUDA_TILES_TEXT "64x64, 128x64 or 128x128"
static inline int hopper_cuda_supports_tiles(int block_m, int block_n) {
    return (block_m == 64 && block_n == 64) || (block_m == 128 && (block_n == 64 || block_n == 128));
}
// Step 3: two consumer warpgroups, so BLOCK_M = 128.
#define HOPPER_WS_CUDA_TILES_TEXT "128x64 or 128x128"
static inline int hopper_ws_cuda_supports_tiles(int block_m, int block_n) {
    return block_m == 128 && (block_n == 64 || block_n == 128);
}
// Step 4c: two consumer warpgroups (BLOCK_M = 128) or, at D = 64, three (BLOCK_M = 192).
#define HOPPER_MANY_CONSUMERS_TILES_TEXT "128x64 or 128x128, and at D = 64 192x64 or 192x128"
static inline int hopper_many_consumers_supports(int64_t D, int block_m, int block_n) {
    return (block_m == 128 || (block_m == 192 && D == 64)) && (block_n == 64 || block_n == 128);
}
// Shared memory per block: the Q tile, two K and two V tiles (halves), the copies of the scores of the tiles where
// a row's max moved (one float per score of the BLOCK_M x BLOCK_N tile, max_key.cuh), and 1024 bytes to align the
// swizzle atoms.
static inline int64_t flash_forward_wgmma_cuda_smem_bytes(int64_t D, int block_m, int block_n) {
    return ((int64_t)block_m + 4 * (int64_t)block_n) * D * 2 + (int64_t)block_m * block_n * 4 + 1024;
}

// Step 2: two K/V buffers in the ring, and three mbarriers (8 bytes each) after them.
static inline int64_t flash_forward_tma_cuda_smem_bytes(int64_t D, int block_m, int block_n) {
    return flash_forward_wgmma_cuda_smem_bytes(D, block_m, block_n) + 3 * 8;
}

// Step 3: the same tiles, and five mbarriers.
static inline int64_t flash_forward_warp_specialized_cuda_smem_bytes(int64_t D, int block_m, int block_n) {
    return flash_forward_wgmma_cuda_smem_bytes(D, block_m, block_n) + 5 * 8;
}

// Steps 4d and 4e: the same tiles, and nine mbarriers (Q, and a landed/empty pair for each of two K and two V buffers).
static inline int64_t flash_forward_split_barriers_cuda_smem_bytes(int64_t D, int block_m, int block_n) {
    return flash_forward_wgmma_cuda_smem_bytes(D, block_m, block_n) + 9 * 8;
}

// Step 4f: step 4e's, one mbarrier more (Q empty) and the slot of the block's current tile number (8 bytes).
static inline int64_t flash_forward_persistent_cuda_smem_bytes(int64_t D, int block_m, int block_n) {
    return flash_forward_split_barriers_cuda_smem_bytes(D, block_m, block_n) + 2 * 8;
}

// Step 6 (6_backward_cuda.cu): the backward, its dK/dV pass on wgmma (one warpgroup per 64 keys), dQ by phase 5
// step 4's deterministic pass or by atomics (dq_mode FA_DQ_DETERMINISTIC or FA_DQ_ATOMIC); phase 5 step 4's tensors,
// tiles (64 x 64: tc_backward_cuda_supports_tiles), rounding points and CPU twin (flash_backward_tc_cpu).
void flash_backward_wgmma_cuda(const fa_shape *shape, int dtype, int block_m, int block_n, int dq_mode,
                               const tc_backward_tensors *t);
// Shared memory of its dK/dV pass: phase 5 step 4's, and 1024 bytes to align the swizzle atoms.
static inline int64_t flash_backward_wgmma_cuda_smem_bytes(int64_t D, int block_m, int block_n) {
    return flash_backward_tc_cuda_smem_bytes(D, block_m, block_n) + 1024;
}

// Step 6a (6a_dq_by_tma_cuda.cu): step 6's backward in one pass, dQ on wgmma in the dK/dV pass and added into dQ by
// the TMA (cp.reduce.async.bulk.tensor), in arrival order: the atomic dQ only (dq_mode FA_DQ_ATOMIC). Step 6's
// tensors, tiles, rounding points and CPU twin.
void flash_backward_tma_dq_cuda(const fa_shape *shape, int dtype, int block_m, int block_n, int dq_mode,
                                const tc_backward_tensors *t);
// Its shared memory is step 6's (flash_backward_wgmma_cuda_smem_bytes): a Q tile's float32 share of dQ takes the
// place of the tile's Q and dO once their products are done.
// Step 6b (6b_dq_beside_dkdv_cuda.cu): step 6a with dQ's wgmmas queued behind dV's and dK's, one wait for the three;
// the same arguments, shared memory and atomic dQ only.
void flash_backward_dq_beside_dkdv_cuda(const fa_shape *shape, int dtype, int block_m, int block_n, int dq_mode,
                                        const tc_backward_tensors *t);
// Step 6c (6c_two_key_warpgroups_cuda.cu): step 6a with two consumer warpgroups over a K/V tile of 128 keys, which
// share each Q tile's loads and split its dQ columns; 64 x 128 tiles, shared memory
// flash_backward_wgmma_cuda_smem_bytes(D, 64, 128), atomic dQ only, step 6's tensors, rounding points and CPU twin.
#define HOPPER_TWO_WARPGROUPS_TILES_TEXT "64x128"
#define HOPPER_TWO_WARPGROUPS_BLOCK_M 64
#define HOPPER_TWO_WARPGROUPS_BLOCK_N 128
void flash_backward_two_warpgroups_cuda(const fa_shape *shape, int dtype, int block_m, int block_n, int dq_mode,
                                        const tc_backward_tensors *t);
// Step 6d (6d_descriptors_once_cuda.cu): step 6c with each wgmma descriptor built once and moved by additions;
// step 6e (6e_exp2_ftz_cuda.cu): step 6d with exp2_ftz for P^T; step 6f (6f_overlap_products_cuda.cu): step 6e
// with the element-wise work done while the products still run. Step 6c's tiles, shared memory and arguments.
void flash_backward_descriptors_once_cuda(const fa_shape *shape, int dtype, int block_m, int block_n, int dq_mode,
                                          const tc_backward_tensors *t);
void flash_backward_exp2_ftz_cuda(const fa_shape *shape, int dtype, int block_m, int block_n, int dq_mode,
                                  const tc_backward_tensors *t);
void flash_backward_overlap_products_cuda(const fa_shape *shape, int dtype, int block_m, int block_n, int dq_mode,
                                          const tc_backward_tensors *t);
// Step 6g (6g_q_tiles_by_tma_cuda.cu): step 6f with each Q tile's Q and dO loaded by the TMA, reported on one mbarrier
// per buffer; step 6c's tiles and arguments, and step 6's shared memory with the two mbarriers (8 bytes each).
void flash_backward_q_tiles_by_tma_cuda(const fa_shape *shape, int dtype, int block_m, int block_n, int dq_mode,
                                        const tc_backward_tensors *t);
static inline int64_t flash_backward_q_tiles_by_tma_cuda_smem_bytes(int64_t D, int block_m, int block_n) {
    return flash_backward_wgmma_cuda_smem_bytes(D, block_m, block_n) + 2 * 8;
}
// Step 6h (6h_dq_per_warpgroup_cuda.cu): step 6g with dQ's shares in a buffer of their own and dS^T in two, each
// warpgroup handing its dQ columns to the TMA behind its own barrier; step 6g's tiles and arguments, and its shared
// memory with the second dS^T buffer (BLOCK_N x BLOCK_M halves) and dQ's (BLOCK_M x D float32).
void flash_backward_dq_per_warpgroup_cuda(const fa_shape *shape, int dtype, int block_m, int block_n, int dq_mode,
                                          const tc_backward_tensors *t);
static inline int64_t flash_backward_dq_per_warpgroup_cuda_smem_bytes(int64_t D, int block_m, int block_n) {
    return flash_backward_q_tiles_by_tma_cuda_smem_bytes(D, block_m, block_n) + (int64_t)block_n * block_m * 2 +
           (int64_t)block_m * D * 4;
}
// Step 6i (6i_wide_q_tiles_cuda.cu): step 6h with Q tiles of 128 queries at D = 64 (128 x 128 tiles; 64 x 128 at
// D = 128, as step 6h); step 6h's arguments and shared memory at those tiles.
#define HOPPER_WIDE_Q_TILES_TEXT "128x128 at D = 64, 64x128 at D = 128"
#define HOPPER_WIDE_Q_TILES_BLOCK_M_D64 128
void flash_backward_wide_q_tiles_cuda(const fa_shape *shape, int dtype, int block_m, int block_n, int dq_mode,
                                      const tc_backward_tensors *t);
static inline int flash_backward_wide_q_tiles_block_m(int64_t D) {
    return D == 64 ? HOPPER_WIDE_Q_TILES_BLOCK_M_D64 : HOPPER_TWO_WARPGROUPS_BLOCK_M;
}
// Step 6j (6j_transposed_dq_cuda.cu): step 6i with dQ computed transposed (dQ^T = K^T dS^T), so that a Q tile has 80
// queries at D = 128 (80 x 128 tiles; 128 x 128 at D = 64, as 6i), and dS^T in one buffer, its rows padded to 128
// queries; step 6i's arguments. Shared memory: step 6g's at these tiles with dS^T's rows padded to a multiple of 64
// queries, and dQ's share (BLOCK_M x D float32).
#define HOPPER_TRANSPOSED_DQ_TEXT "128x128 at D = 64, 80x128 at D = 128"
#define HOPPER_TRANSPOSED_DQ_BLOCK_M_D128 80
void flash_backward_transposed_dq_cuda(const fa_shape *shape, int dtype, int block_m, int block_n, int dq_mode,
                                       const tc_backward_tensors *t);
static inline int flash_backward_transposed_dq_block_m(int64_t D) {
    return D == 64 ? HOPPER_WIDE_Q_TILES_BLOCK_M_D64 : HOPPER_TRANSPOSED_DQ_BLOCK_M_D128;
}
static inline int64_t flash_backward_transposed_dq_cuda_smem_bytes(int64_t D, int block_m, int block_n) {
    const int64_t ds_padding = (block_m + 63) / 64 * 64 - block_m;   // queries added to each row of dS^T
    return flash_backward_q_tiles_by_tma_cuda_smem_bytes(D, block_m, block_n) + (int64_t)block_n * ds_padding * 2 +
           (int64_t)block_m * D * 4;
}

// 0 when the GPU runs sm_90a code (compute capability 9.0); otherwise -1 and one line in why.
int hopper_cuda_check_device(char *why, size_t why_len);

#ifdef __cplusplus
}
#endif

#endif
