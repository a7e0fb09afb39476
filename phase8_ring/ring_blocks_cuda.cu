// ring_blocks_cuda.cu - phase 8: one block of the ring on the GPU, with the single-GPU kernels (ring_blocks.h says
// which; the CPU twin of this file is ring_blocks_cpu.c). Each call launches on the current device's default stream.
#include "ring_blocks.h"

#include "fa_half.h"
#include "fa_tensor.h"
#include "fa_baselines.h"   // the single-GPU kernels: phase 3 step 3, phase 4, phase 5 steps 3 and 4

#if !TC_HAVE_MMA_CUDA
// The half kernels exist only in a build with an architecture of sm_80 or newer (phase5_tensor_cores/CMakeLists.txt);
// the driver refuses --dtype fp16|bf16 on the GPU before it gets here when they are missing.
static void no_half_kernels(void) {
    fa_die("the fp16/bf16 ring needs phase 5's tensor-core kernels, which this build left out (no sm_80 or newer)");
}
#endif

extern "C" void ring_block_forward_cuda(const fa_shape *block, int dtype, int block_m, int block_n,
                                        const ring_forward_tensors *t) {
    if (dtype == FA_DTYPE_FP32) {
        const forward_tensors f = {(const float *)t->q, (const float *)t->k, (const float *)t->v, t->q_strides,
                                   t->k_strides, t->v_strides, t->o, t->o_strides, t->lse, NULL};
        flash_forward_lse_cuda(block, block_m, block_n, &f);
    } else {
#if TC_HAVE_MMA_CUDA
        const tc_forward_tensors f = {t->q, t->k, t->v, t->q_strides, t->k_strides, t->v_strides, t->o, t->o_strides,
                                    t->lse};
        flash_forward_pipeline_cuda(block, dtype, block_m, block_n, &f);
#else
        no_half_kernels();
#endif
    }
}

// dQ deterministic: the ring adds each block's dQ into the rank's own, so the sum is the same every run.
extern "C" void ring_block_backward_cuda(const fa_shape *block, int dtype, int block_m, int block_n,
                                         const ring_backward_tensors *t) {
    if (dtype == FA_DTYPE_FP32) {
        const backward_tensors b = {(const float *)t->q, (const float *)t->k, (const float *)t->v, t->o, t->lse,
                                    (const float *)t->dout, t->q_strides, t->k_strides, t->v_strides, t->o_strides,
                                    t->do_strides, t->delta, t->dq, t->dk, t->dv, t->dq_strides, t->dk_strides,
                                    t->dv_strides, NULL};
        flash_backward_cuda(block, block_m, block_n, FA_DQ_DETERMINISTIC, &b);
    } else {
#if TC_HAVE_MMA_CUDA
        const tc_backward_tensors b = {t->q, t->k, t->v, t->o, t->lse, t->dout, t->q_strides, t->k_strides,
                                       t->v_strides, t->o_strides, t->do_strides, t->delta, t->dq, t->dk, t->dv,
                                       t->dq_strides, t->dk_strides, t->dv_strides};
        flash_backward_tc_cuda(block, dtype, block_m, block_n, FA_DQ_DETERMINISTIC, &b);
#else
        no_half_kernels();
#endif
    }
}
