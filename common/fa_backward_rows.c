// fa_backward_rows.c - the driver rows of a tensor-core backward (fa_backward_rows.h).
#include "fa_backward_rows.h"

#include <stdio.h>

tc_backward_tensors contiguous_backward(const fa_shape *s, const void *q, const void *k, const void *v,
                                        const void *dout, const float *o, const float *lse, float *delta, fa_grads g) {
    const fa_strides sq = fa_strides_contiguous(s->H, s->Sq, s->D), sk = fa_strides_contiguous(s->H, s->Sk, s->D);
    tc_backward_tensors t = {q, k, v, o, lse, dout, sq, sk, sk, sq, sq, delta, g.dq, g.dk, g.dv, sq, sk, sk};
    return t;
}

void check_and_time_backward(fa_report *report, const fa_options *opt, const fa_reference *ref,
                             const fa_half_rule *rule, const char *label_stem, void (*run)(void *), int is_cuda,
                             int64_t bytes_per_thread, int64_t staged_bytes, int block_m, int block_n,
                             tc_backward_tensors t, fa_grads host, fa_grads device, double upload_ms) {
    const fa_shape *s = &opt->shape;
    const int modes[2] = {FA_DQ_DETERMINISTIC, FA_DQ_ATOMIC};
    const char *variants[2] = {"det", "atomic"};   // (short: the tables give a label 28 columns)
    for (int m = 0; m < 2; m++) {
        if (!(opt->dq_mode & modes[m])) continue;
        backward_args args = {s, opt->dtype, block_m, block_n, modes[m], t};
        char label[48];
        snprintf(label, sizeof label, "%s %s %s", label_stem, variants[m], fa_dtype_name(opt->dtype));
        fa_implementation impl = {.label = label, .is_cuda = is_cuda, .ctx = &args, .run = run,
                                  .flops = fa_flops_backward(s), .backward = 1,
                                  .extra_bytes = fa_numel_lse(s) * (int64_t)sizeof(float) + staged_bytes,
                                  .extra_what = is_cuda        ? "Delta"
                                                : staged_bytes ? "Delta, staged + thread tiles"
                                                               : "Delta, per-thread tiles",
                                  .block_m = block_m, .block_n = block_n, .causal = s->causal,
                                  .upload_ms = upload_ms, .extra_bytes_per_thread = bytes_per_thread};
        fa_half_backward_outputs(&impl, s, ref, rule, host, device);
        fa_check_and_time(report, opt, ref, &impl);
    }
}
