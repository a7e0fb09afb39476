// fa_backward_rows.h - the rows of a driver's table that run, check and time a tensor-core backward (phase 5 step 4 and
// phase 7 step 6): one row per dQ variant that --dq asks for, on the forward's O and LSE. The phase 5 and phase 7
// drivers (main.c) both build their backward rows with it.
#ifndef FA_BACKWARD_ROWS_H
#define FA_BACKWARD_ROWS_H

#include "fa_baselines.h"   // tc_backward_tensors
#include "fa_driver.h"
#include "fa_half.h"

// What one run of a backward needs: fa_implementation's ctx. A driver's run functions take it as void *.
typedef struct {
    const fa_shape *shape;
    int dtype, block_m, block_n, dq_mode;
    tc_backward_tensors t;
} backward_args;

// The backward's tensors on contiguous [B, H, S, D] buffers: the half inputs, the forward's O and LSE, the gradients.
tc_backward_tensors contiguous_backward(const fa_shape *s, const void *q, const void *k, const void *v,
                                        const void *dout, const float *o, const float *lse, float *delta, fa_grads g);

// Runs, checks (by the half rule for gradients) and times one backward, `run` on the CPU or the GPU (is_cuda), once
// per dQ variant --dq asks for, labelled "LABEL_STEM det DTYPE" and "LABEL_STEM atomic DTYPE". bytes_per_thread: the
// working memory of each CPU thread (flash_backward_tc_cpu_workspace_bytes), 0 on the GPU; staged_bytes: what the CPU
// run holds for the whole problem besides (flash_backward_tc_cpu_staged_bytes: the bf16 passes' staged tiles), 0 on
// the GPU.
void check_and_time_backward(fa_report *report, const fa_options *opt, const fa_reference *ref,
                             const fa_half_rule *rule, const char *label_stem, void (*run)(void *), int is_cuda,
                             int64_t bytes_per_thread, int64_t staged_bytes, int block_m, int block_n,
                             tc_backward_tensors t, fa_grads host, fa_grads device, double upload_ms);

#endif
