// ring_blocks.h - phase 8: the single-GPU kernels the ring calls for one block, chosen by the inputs' type.
//
// A ring step computes attention of some of a rank's query rows against some keys of the K/V block it holds: that is
// a whole attention problem of its own (Sq = the rows, Sk = the keys), and the suite's single-GPU kernels solve it:
//   float32 (--dtype fp32):       phase 3 step 3 (forward, O and LSE) and phase 4 (backward, deterministic dQ);
//   fp16 / bf16 (--dtype ...):    phase 5 step 3 (tensor cores, swizzle, cp.async) and phase 5 step 4 (backward).
// Their CPU twins run the same blocks on the CPU, rounding where the GPU rounds. The kernels take strided views, so
// a block's rows are a pointer and the strides of the rank's buffers; no block is ever copied out.
//
// Q, K, V and dO are in the run's type (float, or the bits of a half, fa_half.h); O, LSE and the gradients are float32.
// LSE is contiguous [B, H, rows] (the kernels' layout). The CUDA functions launch on the current device's default
// stream (as every single-GPU kernel of the suite does) and return at once.
#ifndef RING_BLOCKS_H
#define RING_BLOCKS_H

#include <stddef.h>
#include <stdint.h>

#include "fa_shape.h"

#ifdef __cplusplus
extern "C" {
#endif

// The tensors of one forward block: rows of the rank's Q against keys of a K/V block.
typedef struct {
    const void *q, *k, *v;           // the run's type; [B, H, rows, D] and [B, H, keys, D] views
    fa_strides q_strides, k_strides, v_strides;
    float *o;                        // [B, H, rows, D] float32, with o_strides
    fa_strides o_strides;
    float *lse;                      // contiguous [B, H, rows], natural log
} ring_forward_tensors;

// block: B, H, D and scale of the whole problem; Sq = the block's rows, Sk = its keys, causal as the plan says.
void ring_block_forward_cpu(const fa_shape *block, int dtype, int block_m, int block_n, const ring_forward_tensors *t);
void ring_block_forward_cuda(const fa_shape *block, int dtype, int block_m, int block_n,
                             const ring_forward_tensors *t);

// The tensors of one backward block: the forward's tensors, the final O and LSE of those rows (of attention over the
// whole sequence: with them P = exp(S - LSE) of the block is the whole sequence's P), dO, and the block's gradients.
typedef struct {
    const void *q, *k, *v, *dout;    // the run's type
    fa_strides q_strides, k_strides, v_strides, do_strides;
    const float *o, *lse;            // o: [B, H, rows, D] with o_strides; lse contiguous [B, H, rows]
    fa_strides o_strides;
    float *delta;                    // workspace, [B, H, rows]
    float *dq, *dk, *dv;             // written (not added to): dq [B, H, rows, D], dk and dv [B, H, keys, D]
    fa_strides dq_strides, dk_strides, dv_strides;
} ring_backward_tensors;

void ring_block_backward_cpu(const fa_shape *block, int dtype, int block_m, int block_n,
                             const ring_backward_tensors *t);
void ring_block_backward_cuda(const fa_shape *block, int dtype, int block_m, int block_n,
                              const ring_backward_tensors *t);

// Bytes of one element of the run's type: 4 for fp32, 2 for fp16 and bf16.
static inline size_t ring_dtype_bytes(int dtype) { return dtype == 0 ? 4 : 2; }

// A view that starts `rows` rows further down a [B, H, S, D] tensor of the run's type (the strides stay the same).
static inline const void *ring_rows_at(const void *x, fa_strides strides, int64_t rows, int dtype) {
    return (const char *)x + (size_t)(rows * strides.s) * ring_dtype_bytes(dtype);
}

#ifdef __cplusplus
}
#endif

#endif
