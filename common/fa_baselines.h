// fa_baselines.h - the kernels that more than one phase runs, declared once in the foundation so that no phase
// includes another phase's header (docs/architecture.md: the include layering). Each is defined in its own phase:
//   phase 1's standard attention, forward and backward, and its BLAS variant: the baseline rows of phases 2 to 5
//     and the float32 yardstick of phase 4's check;
//   phase 3 step 3's forward with LSE: the forward before every backward, and the row phases 5 and 6 compare with;
//   phase 4's backward and its passes: phase 6's backward passes reuse its preprocess.
#ifndef FA_BASELINES_H
#define FA_BASELINES_H

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

#ifdef __cplusplus
}
#endif

#endif
