// main.c - phase 2 driver: the online-softmax forward next to phase 1's naive attention, on the same input,
// CPU and GPU, checked against the float64 oracle and timed, with the memory each one needs.
//
// Run: build/bin/phase2_online_softmax                      (class defaults: N=1024 d=64, CPU and GPU)
//      build/bin/phase2_online_softmax --S 4096 --D 64      (watch the extra memory column: naive's S and P)
//      build/bin/phase2_online_softmax --Sq 1000 --Sk 77 --block-m 64 --block-n 32
#include "fa_driver.h"
#include "fa_gpu.h"
#include "fa_tensor.h"
#include "fa_baselines.h"
#include "online_softmax.h"

#include <stdlib.h>

static const int CUDA_HEAD_DIMS[] = FLASH2_CUDA_HEAD_DIMS;

static const fa_cli_spec SPEC = {
    .program = "phase2_online_softmax",
    .summary = "Phase 2: the FlashAttention forward for one [N, d] head (online softmax), next to phase 1's naive.",
    .defaults = {.B = 1, .H = 1, .Sq = 1024, .Sk = 1024, .D = 64},
    .default_block_m = 64,
    .default_block_n = 32,
    .two_d = 1,
    .cuda_head_dims = CUDA_HEAD_DIMS,
};

typedef struct {
    const fa_shape *shape;
    int block_m, block_n;
    const float *q, *k, *v;
    float *scores, *probs, *o, *lse;   // scores, probs and lse: naive only
} run_args;

static void run_naive_cpu(void *p) {
    run_args *a = p;
    naive_attention_cpu(a->shape, a->q, a->k, a->v, a->scores, a->probs, a->o, a->lse);
}

static void run_flash_cpu(void *p) {
    run_args *a = p;
    const forward_2d_tensors t = {a->q, a->k, a->v, a->o};
    flash_forward_2d_cpu(a->shape, a->block_m, a->block_n, &t);
}

#if FA_HAVE_CUDA
static void run_naive_cuda(void *p) {
    run_args *a = p;
    naive_attention_cuda(a->shape, a->q, a->k, a->v, a->scores, a->probs, a->o, a->lse);
}

static void run_flash_cuda(void *p) {
    run_args *a = p;
    const forward_2d_tensors t = {a->q, a->k, a->v, a->o};
    flash_forward_2d_cuda(a->shape, a->block_m, a->block_n, &t);
}
#endif

int main(int argc, char **argv) {
    fa_options opt;
    fa_parse_options(argc, argv, &SPEC, &opt);
    const fa_shape *shape = &opt.shape;
    if ((opt.impl & FA_IMPL_CUDA) && !flash2_cuda_supports_tiles(opt.block_m, opt.block_n))
        fa_die("the CUDA kernel is compiled for --block-m x --block-n = %s (got %d x %d); "
               "use --impl cpu for other tile sizes", FLASH2_CUDA_TILES_TEXT, opt.block_m, opt.block_n);
    fa_report report;
    fa_report_init(&report, SPEC.program, &opt);
    int use_gpu = fa_use_gpu(&opt, &report);

    const int64_t n_scores = fa_numel_scores(shape);
    const double sp_bytes = 2.0 * (double)n_scores * sizeof(float);   // naive's S and P
    char sp_size[32];
    fa_format_bytes(sp_bytes, sp_size, sizeof sp_size);

    fa_inputs in;
    fa_make_inputs(&opt, 0, &in);
    fa_reference ref;
    fa_make_reference(&opt, &in, 0, &ref);
    float *o = fa_alloc_floats(fa_numel_q(shape), "O");
    float *lse = fa_alloc_floats(fa_numel_lse(shape), "LSE");

    if (opt.impl & FA_IMPL_CPU) {
        // Naive, when its S and P fit: the online softmax needs neither.
        float *scores, *probs;
        if (fa_try_alloc_floats_pair(n_scores, &scores, &probs) == 0) {
            run_args args = {shape, 0, 0, in.q, in.k, in.v, scores, probs, o, lse};
            fa_implementation impl = {.label = "naive", .run = run_naive_cpu, .ctx = &args,
                                      .flops = fa_flops_forward(shape), .extra_bytes = (int64_t)sp_bytes,
                                      .extra_what = "S, P"};
            fa_forward_outputs(&impl, shape, &ref, o, NULL, lse, NULL);
            fa_check_and_time(&report, &opt, &ref, &impl);
        } else {
            fa_report_add_note(&report, "naive cpu skipped: its S and P need %s, more than this machine has", sp_size);
        }
        free(scores);
        free(probs);

        run_args args = {shape, opt.block_m, opt.block_n, in.q, in.k, in.v, NULL, NULL, o, NULL};
        fa_implementation impl = {
            .label = "online softmax", .run = run_flash_cpu, .ctx = &args, .flops = fa_flops_forward(shape),
            .extra_bytes_per_thread = flash_forward_2d_cpu_workspace_bytes(shape->D, opt.block_m, opt.block_n),
            .extra_what = "per-thread tiles", .block_m = opt.block_m, .block_n = opt.block_n};
        fa_forward_outputs(&impl, shape, &ref, o, NULL, NULL, NULL);
        fa_check_and_time(&report, &opt, &ref, &impl);
    }

#if FA_HAVE_CUDA
    if (use_gpu) {
        fa_device_inputs dev;
        fa_upload_inputs(&opt, &in, &dev);
        float *o_dev = fa_gpu_alloc(fa_numel_q(shape), "O"), *lse_dev = fa_gpu_alloc(fa_numel_lse(shape), "LSE");

        float *scores = fa_gpu_try_alloc(n_scores), *probs = scores ? fa_gpu_try_alloc(n_scores) : NULL;
        if (probs) {
            run_args args = {shape, 0, 0, dev.q, dev.k, dev.v, scores, probs, o_dev, lse_dev};
            fa_implementation impl = {.label = "naive", .is_cuda = 1, .run = run_naive_cuda, .ctx = &args,
                                      .flops = fa_flops_forward(shape), .extra_bytes = (int64_t)sp_bytes,
                                      .extra_what = "S, P", .upload_ms = dev.upload_ms};
            fa_forward_outputs(&impl, shape, &ref, o, o_dev, lse, lse_dev);
            fa_check_and_time(&report, &opt, &ref, &impl);
        } else {
            fa_report_add_note(&report, "naive cuda skipped: its S and P need %s, more than the GPU has free", sp_size);
        }
        if (scores) fa_gpu_free(scores);
        if (probs) fa_gpu_free(probs);

        run_args args = {shape, opt.block_m, opt.block_n, dev.q, dev.k, dev.v, NULL, NULL, o_dev, NULL};
        fa_implementation impl = {.label = "online softmax", .is_cuda = 1, .run = run_flash_cuda, .ctx = &args,
                                  .flops = fa_flops_forward(shape), .extra_what = "tiles in shared memory",
                                  .block_m = opt.block_m, .block_n = opt.block_n, .upload_ms = dev.upload_ms};
        fa_forward_outputs(&impl, shape, &ref, o, o_dev, NULL, NULL);
        fa_check_and_time(&report, &opt, &ref, &impl);
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
