// naive_backward.h - phase 1's backward: the gradients of standard attention, with P, dP and dS materialised in
// memory, the oracle's way but in float32. Phase 4 checks and times its FlashAttention backward against it.
//
//   P                             [B, H, Sq, Sk]   the forward's own P (naive_attention_*), kept, not recomputed
//   dV = P^T dO                   [B, H, Sk, D]
//   dP = dO V^T                   [B, H, Sq, Sk]
//   Delta_i = rowsum(dO * O)_i    (one number per row, computed where it is used)
//   dS = P * (dP - Delta)         [B, H, Sq, Sk]   written over dP
//   dQ = scale * dS K             [B, H, Sq, D]
//   dK = scale * dS^T Q           [B, H, Sk, D]
//
// All tensors are contiguous row-major. P and dP/dS are the 2 * Sq * Sk floats per head that phase 4 does without.
// Keeping the P the forward computed, exp(S - rowmax) / rowsum, is what makes this the reference a float32
// FlashAttention backward is measured against (PyTorch's math path does the same): recomputing P from a stored LSE
// costs accuracy at large logits, which is the error the flash backward must keep small (docs/04-backward.md).
#ifndef NAIVE_BACKWARD_H
#define NAIVE_BACKWARD_H

#include "fa_shape.h"

#ifdef __cplusplus
extern "C" {
#endif

// CPU (naive_backward_cpu.c): one OpenMP loop over (b, h) and rows per step above.
// probs is the forward's P (naive_attention_cpu's), dscores a [B, H, Sq, Sk] buffer the caller provides; o is the
// forward's O.
void naive_backward_cpu(const fa_shape *shape, const float *q, const float *k, const float *v, const float *o,
                        const float *probs, const float *dout, float *dscores, float *dq, float *dk, float *dv);

// CUDA (naive_backward_cuda.cu): the same steps as plain kernels. Every pointer is a device pointer.
void naive_backward_cuda(const fa_shape *shape, const float *q, const float *k, const float *v, const float *o,
                         const float *probs, const float *dout, float *dscores, float *dq, float *dk, float *dv);

#ifdef __cplusplus
}
#endif

#endif
