// tensor_cores.h - phase 5, steps 2 and 3: the forward on tensor cores, fp16 or bf16 inputs, float32 accumulation.
//
//   step 2 (2_mma_*):      tensor cores through mma.sync.m16n8k16 (inline PTX) fed by ldmatrix; one warp owns 16
//                          query rows, keeps its Q fragments in registers for the whole K loop, runs the online
//                          softmax on its accumulator fragments and turns P into the A operand of P V in registers.
//   step 3a (3a_swizzle_cuda.cu):  + XOR-swizzled shared memory (ldmatrix without bank conflicts); GPU only, its CPU
//                          twin is step 2's (the same arithmetic).
//   step 3b (3b_cp_async_cuda.cu): + cp.async double-buffered K/V tiles (the next tile loads while this one
//                          computes); GPU only, its CPU twin is step 2's.
//   step 3 (3_pipeline_*): + exp2 with the scale folded into one FMA: the complete step 3 (declared in fa_baselines.h).
//   step 3c (3c_two_row_blocks_cuda.cu): + two 16-row blocks of queries per warp, so that every K and V fragment
//                          feeds two mma (Q re-read from shared memory to make room); GPU only, its CPU twin is
//                          step 3's (the same arithmetic).
//   step 3d (3d_exp2_ftz_cuda.cu): + every exponential one MUFU.EX2 instruction (exp2_ftz: no subnormal path); GPU
//                          only, its CPU twin is step 3's.
//   step 3e (3e_copy_loop_cuda.cu): + the tile copies' index arithmetic done once per thread (a trip count the
//                          compiler knows); GPU only, its CPU twin is step 3's.
//   step 3f (3f_lazy_rescale_cuda.cu): + O rescaled only in tiles where a row's max moved (alpha is exactly 1
//                          elsewhere): step 3e's bits, fewer instructions, no time gained; GPU only, its CPU twin is
//                          step 3's.
//   step 3g (3g_loop_invariants_cuda.cu): step 3e + what is the same for every key tile worked out before the loop
//                          (the tile count, the first tile that needs a mask, each thread's copy addresses, moved by
//                          one add per tile); GPU only, its CPU twin is step 3's.
//   step 3h (3h_xor_addresses_cuda.cu): + each lane's ldmatrix addresses computed once, every later one a single
//                          XOR (the swizzle) and an offset; GPU only, its CPU twin is step 3's.
//   step 3i (3i_key_offsets_cuda.cu): + the max-key search and the mask on 32-bit offsets within the tile (a
//                          constant per score of the unrolled loop); GPU only, its CPU twin is step 3's.
//   step 3j (3j_rows_together_cuda.cu): + the maxima of each lane's four rows found side by side, their searches
//                          after; GPU only, its CPU twin is step 3's. The fastest forward of this phase.
// All keep phase 3's causal pruning (causal_tile_stage) and store the LSE.
//
// Types: Q, K and V are dtype (FA_DTYPE_FP16 or FA_DTYPE_BF16, fa_half.h): uint16_t bits on the host, the same bits
// on the device (`const void *`, __half or __nv_bfloat16 there). O is float32 [B, H, Sq, D] (the check then sees the
// kernel's own error, not a last rounding; a model that wants half O rounds it once more), LSE float32 [B, H, Sq]
// contiguous, natural log. Strides are in elements, as in phase 3.
// The CPU functions take any D, any strides and any tile size. The CUDA functions take D = 64 or 128, the
// tiles of tc_cuda_supports_tiles, strides.d == 1 with the other strides multiples of 8 and 16-byte aligned pointers
// (rows are read 16 bytes at a time), and a GPU of compute capability 8.0 or newer (tc_cuda_check_device).
#ifndef TENSOR_CORES_H
#define TENSOR_CORES_H

#include <stddef.h>
#include <stdint.h>

#include "fa_baselines.h"   // tc_forward_tensors, step 3 and what the CUDA kernels take
#include "fa_shape.h"

#ifdef __cplusplus
extern "C" {
#endif

// --- Step 2: mma.sync and ldmatrix. tiles_visited may be NULL, else receives the (Q tile, K tile) pairs processed.
void flash_forward_mma_cpu(const fa_shape *shape, int dtype, int block_m, int block_n, const tc_forward_tensors *t,
                           int64_t *tiles_visited);
void flash_forward_mma_cuda(const fa_shape *shape, int dtype, int block_m, int block_n, const tc_forward_tensors *t);

// Bytes of working memory one CPU thread needs (its tiles); one copy per step file, like phase 3.
int64_t flash_forward_mma_cpu_workspace_bytes(int64_t D, int block_m, int block_n);

// Steps 3a and 3b, the CUDA kernels alone (their CPU twin is flash_forward_mma_cpu): the arguments of step 2.
void flash_forward_swizzle_cuda(const fa_shape *shape, int dtype, int block_m, int block_n,
                                const tc_forward_tensors *t);
void flash_forward_cp_async_cuda(const fa_shape *shape, int dtype, int block_m, int block_n,
                                 const tc_forward_tensors *t);
// Steps 3c to 3j, the CUDA kernels alone (their CPU twin is flash_forward_pipeline_cpu): the arguments of step 3,
// and its shared memory (flash_forward_pipeline_cuda_smem_bytes).
void flash_forward_two_row_blocks_cuda(const fa_shape *shape, int dtype, int block_m, int block_n,
                                       const tc_forward_tensors *t);
void flash_forward_exp2_ftz_cuda(const fa_shape *shape, int dtype, int block_m, int block_n,
                                 const tc_forward_tensors *t);
void flash_forward_copy_loop_cuda(const fa_shape *shape, int dtype, int block_m, int block_n,
                                  const tc_forward_tensors *t);
void flash_forward_loop_invariants_cuda(const fa_shape *shape, int dtype, int block_m, int block_n,
                                        const tc_forward_tensors *t);
void flash_forward_xor_addresses_cuda(const fa_shape *shape, int dtype, int block_m, int block_n,
                                      const tc_forward_tensors *t);
void flash_forward_key_offsets_cuda(const fa_shape *shape, int dtype, int block_m, int block_n,
                                    const tc_forward_tensors *t);
void flash_forward_rows_together_cuda(const fa_shape *shape, int dtype, int block_m, int block_n,
                                      const tc_forward_tensors *t);
// Steps 3i and 3j are also compiled for 128 x 128, the tile FlashAttention-2 takes at D = 64: each K/V tile then
// serves 128 keys, so what a tile costs besides its products (the barriers, the copy wait, the row max's shuffles,
// rescaling O) comes half as often per key (docs/06, "Wider key tiles"). Step 3j has step 3i's tiles.
#define KEY_OFFSETS_CUDA_TILES_TEXT "64x64, 128x64 or 128x128"
static inline int key_offsets_cuda_supports_tiles(int block_m, int block_n) {
    return tc_cuda_supports_tiles(block_m, block_n) || (block_m == 128 && block_n == 128);
}
void flash_forward_lazy_rescale_cuda(const fa_shape *shape, int dtype, int block_m, int block_n,
                                     const tc_forward_tensors *t);

// Step 4b (4b_backward_dkdv_cuda.cu, 4b_backward_dq_cuda.cu): step 4's backward with the forward's instruction cuts
// (exp2_ftz, loop invariants, XOR addresses), GPU only; the arguments and rules of flash_backward_tc_cuda
// (fa_baselines.h), whose CPU twin is its twin. The entry (in 4_backward_cuda.cu) runs the preprocess and the passes.
void flash_backward_lean_cuda(const fa_shape *shape, int dtype, int block_m, int block_n, int dq_mode,
                              const tc_backward_tensors *t);
void backward_lean_dkdv_cuda(const fa_shape *shape, int dtype, int atomic_dq, const tc_backward_tensors *t);
void backward_lean_dq_cuda(const fa_shape *shape, int dtype, const tc_backward_tensors *t);

// Step 4c (4c_backward_dq_cuda.cu): step 4b's dK/dV pass, then a dQ pass that holds the warp's Q and dO fragments in
// registers. Step 4d (4d_backward_dkdv_cuda.cu): step 4c with a dK/dV pass that leaves room for one more block per SM.
// Both change only the deterministic variant (the atomic one has no dQ pass, and 4d keeps its bounds): with
// FA_DQ_ATOMIC they run step 4b's kernels. The same arguments, rules and bits as flash_backward_lean_cuda.
void flash_backward_held_cuda(const fa_shape *shape, int dtype, int block_m, int block_n, int dq_mode,
                              const tc_backward_tensors *t);
void flash_backward_occupancy_cuda(const fa_shape *shape, int dtype, int block_m, int block_n, int dq_mode,
                                   const tc_backward_tensors *t);
void backward_held_dq_cuda(const fa_shape *shape, int dtype, const tc_backward_tensors *t);
void backward_occupancy_dkdv_cuda(const fa_shape *shape, int dtype, int atomic_dq, const tc_backward_tensors *t);

// Shared memory per block of steps 2 and 3a: the Q tile and the K and V tiles, halves. (Step 3b: that of step 3,
// flash_forward_pipeline_cuda_smem_bytes, two buffers of the K and V tiles.)
static inline int64_t flash_forward_mma_cuda_smem_bytes(int64_t D, int block_m, int block_n) {
    return ((int64_t)block_m + 2 * (int64_t)block_n) * D * 2;
}

#ifdef __cplusplus
}
#endif

#endif
