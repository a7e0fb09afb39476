// tc_backward.h - phase 5, step 4: the backward pass on tensor cores, fp16 or bf16 inputs, float32 accumulation.
//
// Phase 4's algorithm (phase4_backward/backward.h) with every product on mma.m16n8k16:
//   1. preprocess:  Delta_i = rowsum(dO * O)_i, float32, from the forward's float32 O and the half dO
//   2. dK/dV pass:  one program per K/V tile, one warp per 16 keys, walking the Q tiles (causal: from the diagonal
//                   on). Per Q tile it recomputes S^T = K Q^T and P^T = exp(scale S^T - LSE) in float32, then
//                   dV += P^T dO, dP^T = V dO^T, dS^T = P^T * (dP^T - Delta), dK += dS^T Q;
//                   atomic dQ: dQ += scale dS K through a trip of dS through shared memory, added with atomicAdd.
//   3. dQ pass (deterministic, the default): one program per Q tile, one warp per 16 queries; recomputes S, P, dP
//                   and dS for every K/V tile it sees and sums dQ += dS K in a fixed order: the same bits every run.
// Rounding points (those of FlashAttention-2, and of fa_half_reference_backward, the yardstick of the check): the
// inputs Q, K, V, dO are half; P is rounded to the half type before P^T dO, dS before dS^T Q and dS K; every sum is
// float32; dS itself is formed from the float32 P. The gradients are written in float32 (dQ, dK, dV).
//
// Types as in tensor_cores.h: q, k, v and dout are dtype (uint16_t bits on the host, the same bits on the device);
// o and the gradients float32 with their own strides (in elements); lse and delta float32 [B, H, Sq] contiguous.
// The CPU functions take any D, tile and stride. The CUDA functions take D = 64 or 128, the tiles of
// tc_backward_cuda_supports_tiles, strides.d == 1 with the other strides multiples of 8 (half) or 2 (float32) and
// aligned pointers, and a GPU of compute capability 8.0 or newer (tc_cuda_check_device).
#ifndef TC_BACKWARD_H
#define TC_BACKWARD_H

#include <stddef.h>
#include <stdint.h>

#include "fa_cli.h"     // FA_DQ_DETERMINISTIC, FA_DQ_ATOMIC
#include "fa_shape.h"

#ifdef __cplusplus
extern "C" {
#endif

// The tensors of one backward call. CPU functions take host pointers, CUDA functions device pointers.
typedef struct {
    const void *q, *k, *v;       // the forward's inputs in the half type: q [B, H, Sq, D], k and v [B, H, Sk, D]
    const float *o, *lse;        // what the forward (step 3) saved: o [B, H, Sq, D] float32, lse [B, H, Sq]
    const void *dout;            // dO = dL/dO in the half type, [B, H, Sq, D]
    fa_strides q_strides, k_strides, v_strides, o_strides, do_strides;
    float *delta;                // workspace [B, H, Sq]: Delta = rowsum(dO * O), written by the preprocess
    float *dq, *dk, *dv;         // the gradients, float32: dq [B, H, Sq, D], dk and dv [B, H, Sk, D]
    fa_strides dq_strides, dk_strides, dv_strides;
} tc_backward_tensors;

// The whole backward: preprocess, dK/dV pass, and dQ the way dq_mode asks (FA_DQ_DETERMINISTIC or FA_DQ_ATOMIC).
// block_m (BLOCK_M) is the query rows of a Q tile, block_n (BLOCK_N) the key rows of a K/V tile, in both passes.
void flash_backward_tc_cpu(const fa_shape *shape, int dtype, int block_m, int block_n, int dq_mode,
                           const tc_backward_tensors *t);
void flash_backward_tc_cuda(const fa_shape *shape, int dtype, int block_m, int block_n, int dq_mode,
                            const tc_backward_tensors *t);

// Bytes of working memory one CPU thread needs (the larger of the two passes' tiles).
int64_t flash_backward_tc_cpu_workspace_bytes(int64_t D, int block_m, int block_n);
// What the CPU's products run on for this dtype on this CPU, for the report: with bf16 inputs on a CPU with
// AVX512_BF16, the products along d on its dot-product instruction (vdpbf16ps); otherwise float32 FMAs.
const char *flash_backward_tc_cpu_products(int dtype);

// The CUDA kernels are compiled for BLOCK_M x BLOCK_N = 64 x 64 only: 4 warps of 16 keys (dK/dV pass) or of 16
// queries (dQ pass). D = 64 and 128 (tc_cuda_supports_head_dim).
#define TC_BACKWARD_CUDA_TILES_TEXT "64x64"
#define TC_BACKWARD_CUDA_BLOCK_M 64
#define TC_BACKWARD_CUDA_BLOCK_N 64
static inline int tc_backward_cuda_supports_tiles(int block_m, int block_n) {
    return block_m == TC_BACKWARD_CUDA_BLOCK_M && block_n == TC_BACKWARD_CUDA_BLOCK_N;
}
// Shared memory of the larger kernel, the dK/dV pass: the K and V tiles and two buffers of the Q and dO tiles (half),
// dS^T (half, [BLOCK_N][BLOCK_M]), and two buffers of the Q tile's LSE (base 2) and Delta (float32).
static inline int64_t flash_backward_tc_cuda_smem_bytes(int64_t D, int block_m, int block_n) {
    return (2 * (int64_t)block_n + 4 * (int64_t)block_m) * D * 2 + (int64_t)block_n * block_m * 2 +
           4 * (int64_t)block_m * 4;
}

#ifdef __cplusplus
}
#endif

#endif
