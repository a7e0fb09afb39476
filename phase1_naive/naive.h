// naive.h - phase 1: standard attention, with S and P materialised in memory.
//
//   S = scale * Q K^T          [B, H, Sq, Sk]   (causal: S[i][j] = -inf for j > i)
//   P = softmax(S) by rows     [B, H, Sq, Sk]
//   O = P V                    [B, H, Sq, D]
//   LSE[i] = log(sum_j exp(S[i][j]))   [B, H, Sq]
//
// All tensors are contiguous row-major. S and P are the O(Sq*Sk) memory that FlashAttention removes.
#ifndef NAIVE_H
#define NAIVE_H

#include "fa_shape.h"

#ifdef __cplusplus
extern "C" {
#endif

// CPU (naive_cpu.c): three passes, each parallelised with OpenMP over (b, h) and rows.
void naive_attention_cpu(const fa_shape *shape, const float *q, const float *k, const float *v,
                         float *scores, float *probs, float *o, float *lse);

// CUDA (naive_cuda.cu): the same three passes as three kernels. Every pointer is a device pointer.
void naive_attention_cuda(const fa_shape *shape, const float *q, const float *k, const float *v,
                          float *scores, float *probs, float *o, float *lse);

#ifdef __cplusplus
}
#endif

#endif
