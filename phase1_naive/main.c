// main.c - phase 1 driver: standard attention on the CPU and the GPU, checked against the float64 oracle and timed.
//
// Run: build/bin/phase1_naive                     (class defaults: B=1 H=4 S=1024 D=64, CPU and GPU)
//      build/bin/phase1_naive --S 4096 --causal   (watch the extra memory column: S and P grow as S^2)
#include "fa_driver.h"
#include "fa_gpu.h"
#include "fa_tensor.h"
#include "fa_baselines.h"

#include <stdlib.h>

static const fa_cli_spec SPEC = {
    .program = "phase1_naive",
    .summary = "Phase 1: standard attention. S = scale*QK^T and P = softmax(S) are materialised, O = PV.",
    .defaults = {.B = 1, .H = 4, .Sq = 1024, .Sk = 1024, .D = 64},
};

typedef struct {
    const fa_shape *shape;
    const float *q, *k, *v;
    float *scores, *probs, *o, *lse;
} naive_args;

static void run_naive_cpu(void *p) {
    naive_args *a = p;
    naive_attention_cpu(a->shape, a->q, a->k, a->v, a->scores, a->probs, a->o, a->lse);
}

#if FA_HAVE_CUDA
static void run_naive_cuda(void *p) {
    naive_args *a = p;
    naive_attention_cuda(a->shape, a->q, a->k, a->v, a->scores, a->probs, a->o, a->lse);
}
#endif

int main(int argc, char **argv) {
    fa_options opt;
    fa_parse_options(argc, argv, &SPEC, &opt);
    const fa_shape *shape = &opt.shape;
    fa_report report;
    fa_report_init(&report, SPEC.program, &opt);
    int use_gpu = fa_use_gpu(&opt, &report);
    const int64_t n_scores = fa_numel_scores(shape);
    const double sp_bytes = 2.0 * (double)n_scores * sizeof(float);   // S and P: the O(S^2) wall
    float *scores = NULL, *probs = NULL;
    // Before any other work, so that a run too large for the machine stops at once.
    if ((opt.impl & FA_IMPL_CPU) && fa_try_alloc_floats_pair(n_scores, &scores, &probs) != 0)
        fa_exit_out_of_memory(&report, "naive", "cpu", sp_bytes, "S and P");

    fa_inputs in;
    fa_make_inputs(&opt, 0, &in);
    fa_reference ref;
    fa_make_reference(&opt, &in, 0, &ref);
    float *o = fa_alloc_floats(fa_numel_q(shape), "O");
    float *lse = fa_alloc_floats(fa_numel_lse(shape), "LSE");

    if (opt.impl & FA_IMPL_CPU) {
        naive_args args = {shape, in.q, in.k, in.v, scores, probs, o, lse};
        fa_implementation impl = {.label = "naive", .run = run_naive_cpu, .ctx = &args,
                                  .flops = fa_flops_forward(shape), .extra_bytes = (int64_t)sp_bytes,
                                  .extra_what = "S, P", .causal = shape->causal};
        fa_forward_outputs(&impl, shape, &ref, o, NULL, lse, NULL);
        fa_check_and_time(&report, &opt, &ref, &impl);
        free(scores);
        free(probs);
    }

#if FA_HAVE_CUDA
    if (use_gpu) {
        fa_device_inputs dev;
        fa_upload_inputs(&opt, &in, &dev);
        float *scores = fa_gpu_try_alloc(n_scores), *probs = scores ? fa_gpu_try_alloc(n_scores) : NULL;
        if (!probs) fa_exit_out_of_memory(&report, "naive", "cuda", sp_bytes, "S and P");
        float *o_dev = fa_gpu_alloc(fa_numel_q(shape), "O"), *lse_dev = fa_gpu_alloc(fa_numel_lse(shape), "LSE");
        naive_args args = {shape, dev.q, dev.k, dev.v, scores, probs, o_dev, lse_dev};
        fa_implementation impl = {.label = "naive", .is_cuda = 1, .run = run_naive_cuda, .ctx = &args,
                                  .flops = fa_flops_forward(shape), .extra_bytes = (int64_t)sp_bytes,
                                  .extra_what = "S, P", .causal = shape->causal, .upload_ms = dev.upload_ms};
        fa_forward_outputs(&impl, shape, &ref, o, o_dev, lse, lse_dev);
        fa_check_and_time(&report, &opt, &ref, &impl);
        fa_gpu_free(scores);
        fa_gpu_free(probs);
        fa_gpu_free(o_dev);
        fa_gpu_free(lse_dev);
        fa_free_device_inputs(&dev);
    }
#else
    (void)use_gpu;
#endif

    int status = fa_finish(&report, &opt);
    free(o);
    free(lse);
    fa_free_reference(&ref);
    fa_free_inputs(&in);
    return status;
}
