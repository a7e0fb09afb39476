// ring_blocks_cpu.c - phase 8: one block of the ring on the CPU, with the single-GPU kernels' CPU twins
// (ring_blocks.h says which; the CUDA twin of this file is ring_blocks_cuda.cu).
#include "ring_blocks.h"

#include "fa_half.h"
#include "fa_baselines.h"   // the single-GPU kernels: phase 3 step 3, phase 4, phase 5 steps 3 and 4

void ring_block_forward_cpu(const fa_shape *block, int dtype, int block_m, int block_n, const ring_forward_tensors *t) {
    if (dtype == FA_DTYPE_FP32) {
        const forward_tensors f = {(const float *)t->q, (const float *)t->k, (const float *)t->v, t->q_strides,
                                   t->k_strides, t->v_strides, t->o, t->o_strides, t->lse, NULL};
        flash_forward_lse_cpu(block, block_m, block_n, &f, NULL);
    } else {
        const tc_forward_tensors f = {t->q, t->k, t->v, t->q_strides, t->k_strides, t->v_strides, t->o, t->o_strides,
                                    t->lse};
        flash_forward_pipeline_cpu(block, dtype, block_m, block_n, &f, NULL);
    }
}

// dQ deterministic: the ring adds each block's dQ into the rank's own, so the sum is the same every run.
void ring_block_backward_cpu(const fa_shape *block, int dtype, int block_m, int block_n,
                             const ring_backward_tensors *t) {
    if (dtype == FA_DTYPE_FP32) {
        const backward_tensors b = {(const float *)t->q, (const float *)t->k, (const float *)t->v, t->o, t->lse,
                                    (const float *)t->dout, t->q_strides, t->k_strides, t->v_strides, t->o_strides,
                                    t->do_strides, t->delta, t->dq, t->dk, t->dv, t->dq_strides, t->dk_strides,
                                    t->dv_strides, NULL};
        flash_backward_cpu(block, block_m, block_n, FA_DQ_DETERMINISTIC, &b);
    } else {
        const tc_backward_tensors b = {t->q, t->k, t->v, t->o, t->lse, t->dout, t->q_strides, t->k_strides,
                                       t->v_strides, t->o_strides, t->do_strides, t->delta, t->dq, t->dk, t->dv,
                                       t->dq_strides, t->dk_strides, t->dv_strides};
        flash_backward_tc_cpu(block, dtype, block_m, block_n, FA_DQ_DETERMINISTIC, &b);
    }
}
