// backward.h - phase 4: the FlashAttention backward pass, dQ, dK and dV by recomputation from the log-sum-exp.
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
#ifndef BACKWARD_H
#define BACKWARD_H

#include "fa_cli.h"     // FA_DQ_DETERMINISTIC, FA_DQ_ATOMIC
#include "fa_shape.h"

#ifdef __cplusplus
extern "C" {
#endif

// The tensors of one backward call. CPU functions take host pointers, CUDA functions device pointers.
typedef struct {
    const float *q, *k, *v;      // the forward's inputs: q [B, H, Sq, D], k and v [B, H, Sk, D]
    const float *o, *lse;        // what the forward saved: o [B, H, Sq, D], lse [B, H, Sq] (natural log)
    const float *dout;           // dO = dL/dO, [B, H, Sq, D]
    fa_strides q_strides, k_strides, v_strides, o_strides, do_strides;
    float *delta;                // workspace [B, H, Sq]: Delta = rowsum(dO * O), written by the preprocess
    float *dq, *dk, *dv;         // the gradients: dq [B, H, Sq, D], dk and dv [B, H, Sk, D]
    fa_strides dq_strides, dk_strides, dv_strides;
    const float *lse_residual;   // [B, H, Sq]: what LSE's float32 rounding lost (phase 3 step 3, fa_math.h); NULL = 0
} backward_tensors;

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

// The CUDA kernels are templates compiled for a few sizes only: D in {16, 32, 64, 128} (the driver's cli spec lists
// them) and these (BLOCK_M, BLOCK_N) pairs. The CPU takes any sizes. The CUDA launchers dispatch on exactly this list.
#define BACKWARD_CUDA_TILES_TEXT "64x64, 32x64, 64x32"
static inline int backward_cuda_supports_tiles(int block_m, int block_n) {
    return (block_m == 64 && block_n == 64) || (block_m == 32 && block_n == 64) || (block_m == 64 && block_n == 32);
}

#ifdef __cplusplus
}
#endif

#endif
