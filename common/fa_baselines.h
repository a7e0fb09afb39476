// fa_baselines.h - the kernels that more than one phase runs, declared once in the foundation so that no phase
// includes another phase's header (docs/architecture.md: the include layering). Each is defined in its own phase:
//   phase 1's standard attention, forward and backward, and its BLAS variant: the baseline rows of phases 2 to 5
//     and the float32 yardstick of phase 4's check;
//   phase 3 step 3's forward with LSE: the forward before every backward, and the row phases 5 and 6 compare with;
//   phase 4's backward and its passes: phase 6's backward passes reuse its preprocess;
//   phase 5's tensor-core forward (step 3) and backward (step 4): phase 7's baseline and CPU twin, phase 8's blocks.
#ifndef FA_BASELINES_H
#define FA_BASELINES_H

#include <stddef.h>
#include <stdint.h>

#include "fa_cli.h"       // FA_DQ_DETERMINISTIC, FA_DQ_ATOMIC
#include "fa_contract.h"  // forward_tensors, backward_tensors
#include "fa_shape.h"

#ifdef __cplusplus
extern "C" {
#endif

// --- Phase 1: standard attention, with S and P materialised in memory (phase1_naive/) ---------------------------
//   S = scale * Q K^T          [B, H, Sq, Sk]   (causal: S[i][j] = -inf for j > i)
//   P = softmax(S) by rows     [B, H, Sq, Sk]
//   O = P V                    [B, H, Sq, D]
//   LSE[i] = log(sum_j exp(S[i][j]))   [B, H, Sq]
// All tensors are contiguous row-major. S and P are the O(Sq*Sk) memory that FlashAttention removes.
// CPU (naive_cpu.c): three passes, each parallelised with OpenMP over (b, h) and rows.
void naive_attention_cpu(const fa_shape *shape, const float *q, const float *k, const float *v,
                         float *scores, float *probs, float *o, float *lse);
// CUDA (naive_cuda.cu): the same three passes as three kernels. Every pointer is a device pointer.
void naive_attention_cuda(const fa_shape *shape, const float *q, const float *k, const float *v,
                          float *scores, float *probs, float *o, float *lse);

// Phase 1's backward: the gradients of standard attention, with P, dP and dS materialised in memory, the oracle's
// way but in float32. Phase 4 checks and times its FlashAttention backward against it.
//   P                             [B, H, Sq, Sk]   the forward's own P (naive_attention_*), kept, not recomputed
//   dV = P^T dO                   [B, H, Sk, D]
//   dP = dO V^T                   [B, H, Sq, Sk]
//   Delta_i = rowsum(dO * O)_i    (one number per row, computed where it is used)
//   dS = P * (dP - Delta)         [B, H, Sq, Sk]   written over dP
//   dQ = scale * dS K             [B, H, Sq, D]
//   dK = scale * dS^T Q           [B, H, Sk, D]
// All tensors are contiguous row-major. P and dP/dS are the 2 * Sq * Sk floats per head that phase 4 does without.
// Keeping the P the forward computed, exp(S - rowmax) / rowsum, is what makes this the reference a float32
// FlashAttention backward is measured against (PyTorch's math path does the same): recomputing P from a stored LSE
// costs accuracy at large logits, which is the error the flash backward must keep small (docs/04-backward.md).
// CPU (naive_backward_cpu.c): one OpenMP loop over (b, h) and rows per step above.
// probs is the forward's P (naive_attention_cpu's), dscores a [B, H, Sq, Sk] buffer the caller provides; o is the
// forward's O.
void naive_backward_cpu(const fa_shape *shape, const float *q, const float *k, const float *v, const float *o,
                        const float *probs, const float *dout, float *dscores, float *dq, float *dk, float *dv);
// CUDA (naive_backward_cuda.cu): the same steps as plain kernels. Every pointer is a device pointer.
void naive_backward_cuda(const fa_shape *shape, const float *q, const float *k, const float *v, const float *o,
                         const float *probs, const float *dout, float *dscores, float *dq, float *dk, float *dv);

// The baseline a CPU user would pick instead of FlashAttention: naive attention with BLAS (naive_blas_cpu.c).
//   S = scale * Q K^T   one sgemm per head           [Sq, Sk]  (S materialised, one head at a time)
//   P = softmax(S)      a vectorised exp (fa_exp2)   in place of S (causal: P[i][j] = 0 for j > i), not yet divided
//                                                    by the row sums
//   O = P V             one sgemm per head           [Sq, D], then each row divided by its sum
//   LSE[i] = log(sum_j exp(S[i][j]))                 [B, H, Sq]
// Built only when CMake finds a BLAS (FA_HAVE_BLAS); the phase 5 driver shows it as the "naive BLAS" row.
// q, o: contiguous [B, H, Sq, D]; k, v: contiguous [B, H, Sk, D]; scores: Sq * (Sk + 1) floats of working memory
// (S of one head, then its Sq row sums).
// Sq, Sk and D must each fit in an int (the BLAS interface takes ints).
void naive_attention_blas_cpu(const fa_shape *shape, const float *q, const float *k, const float *v, float *scores,
                              float *o, float *lse);
// The BLAS that runs, as the library itself says (OpenBLAS, MKL, BLIS), or the reference implementation when none of
// their queries answers: a line for the report's header, and a short name for the row ("OpenBLAS", "reference").
const char *naive_blas_library(void);
const char *naive_blas_library_short(void);

// --- Phase 3 step 3: the 4D causal forward that stores LSE (phase3_forward_4d/3_lse_*) --------------------------
// The forward entry points all take (shape, block_m, block_n, tensors) (phase3_forward_4d/forward4d.h lists the
// three steps); tiles_visited may be NULL, else receives the number of (Q tile, K tile) pairs the CPU processed.
// LSE (natural log) is contiguous [B, H, Sq], and lse_residual [B, H, Sq]: what LSE's float32 rounding lost, in base
// 2 (fa_math.h; NULL when not wanted). Phase 4's backward pass uses these two.
void flash_forward_lse_cpu(const fa_shape *shape, int block_m, int block_n, const forward_tensors *t,
                           int64_t *tiles_visited);
void flash_forward_lse_cuda(const fa_shape *shape, int block_m, int block_n, const forward_tensors *t);
// Bytes of working memory one CPU thread needs (its tiles); the driver reports threads * this. The three steps'
// tiles are the same, so one function (in step 1) gives all of them.
int64_t flash_forward_4d_cpu_workspace_bytes(int64_t D, int block_m, int block_n);

// --- Phase 4: the backward pass, dQ, dK and dV by recomputation from the log-sum-exp (phase4_backward/) -----------
//
// Given the forward's inputs Q, K, V, its saved outputs O and LSE (phase 3 step 3), and dO = dL/dO:
//   1. preprocess:  Delta_i = rowsum(dO * O)_i                                 [B, H, Sq]
//   2. main pass:   one program per K/V tile; for every Q tile it recomputes S = scale Q K^T and P = exp(S - LSE),
//                   and accumulates dV += P^T dO, dP = dO V^T, dS = P * (dP - Delta), dK += scale dS^T Q
//   3. dQ = scale dS K, deterministic: a separate pass, one program per Q tile, that recomputes P and dS again;
//      or atomic: each program of the main pass adds its tile's share of dQ with atomic adds (faster, but the order
//      of the additions, and so the last bits of dQ, change from run to run).
// No Sq x Sk matrix is ever held: the only extra memory is Delta, one float per query row.
//
// Every [B, H, S, D] tensor is passed with its own strides (in elements, as in phase 3), so that a view of a larger
// tensor works without a copy. LSE and Delta are contiguous [B, H, Sq].
//
// The whole backward pass: preprocess, main pass, and dQ the way dq_mode asks (FA_DQ_DETERMINISTIC or FA_DQ_ATOMIC).
// block_m (BLOCK_M) is the number of query rows per tile, block_n (BLOCK_N) the number of key rows per tile.
void flash_backward_cpu(const fa_shape *shape, int block_m, int block_n, int dq_mode, const backward_tensors *t);
void flash_backward_cuda(const fa_shape *shape, int block_m, int block_n, int dq_mode, const backward_tensors *t);

// The passes one by one (flash_backward_* calls them in this order).
// 1. Delta = rowsum(dO * O) into t->delta; with zero_dq, also dQ = 0 (the atomic variant adds into it).
void backward_preprocess_cpu(const fa_shape *shape, const backward_tensors *t, int zero_dq);
void backward_preprocess_cuda(const fa_shape *shape, const backward_tensors *t, int zero_dq);
// 2. dK and dV (backward_dkdv_*.c/.cu); with atomic_dq, also dQ += this tile's share, added atomically.
void backward_dkdv_cpu(const fa_shape *shape, int block_m, int block_n, const backward_tensors *t, int atomic_dq);
void backward_dkdv_cuda(const fa_shape *shape, int block_m, int block_n, const backward_tensors *t, int atomic_dq);
// 3. dQ, deterministic (backward_dq_*.c/.cu).
void backward_dq_cpu(const fa_shape *shape, int block_m, int block_n, const backward_tensors *t);
void backward_dq_cuda(const fa_shape *shape, int block_m, int block_n, const backward_tensors *t);

// Bytes of working memory one CPU thread needs in each pass (its tiles: the stand-in for shared memory and
// registers). The passes run one after the other, so a run needs threads * the larger of the two.
int64_t backward_dkdv_cpu_workspace_bytes(int64_t D, int block_m, int block_n);
int64_t backward_dq_cpu_workspace_bytes(int64_t D, int block_m, int block_n);


// --- Phase 5 step 3: the tensor-core forward (phase5_tensor_cores/3_pipeline_*), and step 4: its backward -------
// fp16 or bf16 inputs, float32 accumulation. Phase 7 runs step 3 as its baseline and CPU twin, phase 8 runs both on
// every block of its ring.
// Types: Q, K, V and dO are dtype (FA_DTYPE_FP16 or FA_DTYPE_BF16, fa_half.h): uint16_t bits on the host, the same
// bits on the device (`const void *`, __half or __nv_bfloat16 there). O is float32 [B, H, Sq, D] (the check then
// sees the kernel's own error, not a last rounding; a model that wants half O rounds it once more), LSE float32
// [B, H, Sq] contiguous, natural log. Strides are in elements, as in phase 3.
// The CPU functions take any D, any strides and any tile size. The CUDA functions take D = 64 or 128, the tiles of
// tc_cuda_supports_tiles (forward) and tc_backward_cuda_supports_tiles, strides.d == 1 with the other strides
// multiples of 8 (half) or 2 (float32) and 16-byte aligned pointers (rows are read 16 bytes at a time), and a GPU of
// compute capability 8.0 or newer (tc_cuda_check_device).

// The tensors of one forward call of steps 2 and 3 (the half twin of forward_tensors).
typedef struct {
    const void *q, *k, *v;       // dtype: q [B, H, Sq, D], k and v [B, H, Sk, D]
    fa_strides q_strides, k_strides, v_strides;
    float *o;                    // float32 [B, H, Sq, D]
    fa_strides o_strides;
    float *lse;                  // float32 [B, H, Sq], contiguous
} tc_forward_tensors;

// Step 3: swizzle, cp.async pipeline, exp2 with the scale folded in. tiles_visited may be NULL, else receives the
// (Q tile, K tile) pairs processed.
void flash_forward_pipeline_cpu(const fa_shape *shape, int dtype, int block_m, int block_n,
                                const tc_forward_tensors *t, int64_t *tiles_visited);
void flash_forward_pipeline_cuda(const fa_shape *shape, int dtype, int block_m, int block_n,
                                 const tc_forward_tensors *t);
// Bytes of working memory one CPU thread needs (its tiles).
int64_t flash_forward_pipeline_cpu_workspace_bytes(int64_t D, int block_m, int block_n);

// What the CUDA kernels of steps 2 and 3 are compiled for (each D, tile and dtype is one instantiation per GPU
// architecture). BLOCK_M = 16 rows per warp times 4 or 8 warps; BLOCK_N = 64 keys; 128x64 is the default.
#define TC_CUDA_TILES_TEXT "64x64 or 128x64"
static inline int tc_cuda_supports_tiles(int block_m, int block_n) {
    return (block_m == 64 || block_m == 128) && block_n == 64;
}
static inline int tc_cuda_supports_head_dim(int64_t D) { return D == 64 || D == 128; }
// Shared memory per block of step 3: the Q tile and two buffers of the K and V tiles, halves.
static inline int64_t flash_forward_pipeline_cuda_smem_bytes(int64_t D, int block_m, int block_n) {
    return ((int64_t)block_m + 4 * (int64_t)block_n) * D * 2;
}
// 0 when the GPU can run steps 2 to 4 (compute capability 8.0 or newer, and the kernels were built for it);
// otherwise -1 and one line in why. Only in a CUDA build with TC_HAVE_MMA_CUDA (CMake leaves the kernels out when
// no architecture of the build is sm_80 or newer).
int tc_cuda_check_device(char *why, size_t why_len);

// Step 4 (phase5_tensor_cores/4_backward_*): the backward pass on tensor cores.
// Phase 4's algorithm (common/fa_baselines.h) with every product on mma.m16n8k16:
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
// Its two passes on the GPU, each alone (64 x 64 tiles; the preprocess has written Delta, and for the atomic dQ
// zeroed dQ): phase 7's wgmma backward replaces the first and runs the second as it is.
void backward_tc_dkdv_cuda(const fa_shape *shape, int dtype, int atomic_dq, const tc_backward_tensors *t);
void backward_tc_dq_cuda(const fa_shape *shape, int dtype, const tc_backward_tensors *t);

// Bytes of working memory one CPU thread needs (the larger of the two passes' tiles).
int64_t flash_backward_tc_cpu_workspace_bytes(int64_t D, int block_m, int block_n);
// Bytes the CPU backward holds for the whole problem on top: with bf16 inputs on the CPU's bf16 units, the larger of
// the two passes' staged tiles (backward_tiles.h, bf16_stage()); 0 otherwise.
int64_t flash_backward_tc_cpu_staged_bytes(const fa_shape *shape, int dtype, int block_m, int block_n);
// What the CPU's products run on for this dtype on this CPU, for the report: with bf16 inputs on a CPU with AMX-BF16
// or AVX512_BF16, every product on it (tdpbf16ps or vdpbf16ps, phase5_tensor_cores/bf16_dot.h); otherwise float32
// FMAs.
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
