// naive_backward.h - phase 1's backward: the gradients of standard attention, with P, dP and dS materialised in
// memory, the oracle's way but in float32. Phase 4 times its FlashAttention backward against this baseline.
//
//   P  = exp(S - LSE)             [B, H, Sq, Sk]   S = scale * Q K^T, LSE from the forward (causal: 0 for j > i)
//   dV = P^T dO                   [B, H, Sk, D]
//   dP = dO V^T                   [B, H, Sq, Sk]
//   Delta_i = rowsum(dO * O)_i    (one number per row, computed where it is used)
//   dS = P * (dP - Delta)         [B, H, Sq, Sk]   written over dP
//   dQ = scale * dS K             [B, H, Sq, D]
//   dK = scale * dS^T Q           [B, H, Sk, D]
//
// All tensors are contiguous row-major. P and dP/dS are the 2 * Sq * Sk floats per head that phase 4 does without.
#ifndef NAIVE_BACKWARD_H
#define NAIVE_BACKWARD_H

#include "fa_shape.h"

#ifdef __cplusplus
extern "C" {
#endif

// CPU (naive_backward_cpu.c): one OpenMP loop over (b, h) and rows per step above.
// probs and dscores are [B, H, Sq, Sk] buffers the caller provides.
void naive_backward_cpu(const fa_shape *shape, const float *q, const float *k, const float *v, const float *o,
                        const float *lse, const float *dout, float *probs, float *dscores, float *dq, float *dk,
                        float *dv);

// CUDA (naive_backward_cuda.cu): the same steps as plain kernels. Every pointer is a device pointer.
void naive_backward_cuda(const fa_shape *shape, const float *q, const float *k, const float *v, const float *o,
                         const float *lse, const float *dout, float *probs, float *dscores, float *dq, float *dk,
                         float *dv);

#ifdef __cplusplus
}
#endif

#endif
