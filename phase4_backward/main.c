// main.c - phase 4 driver: the forward (phase 3 step 3), then the backward pass on the CPU and the GPU, checked against
// the float64 oracle and timed against the forward and against phase 1's naive backward.
//
// Run: build/bin/phase4_backward                          (class defaults: B=1 H=4 S=512 D=64, CPU and GPU)
//      build/bin/phase4_backward --S 2048 --causal --dq atomic
//      build/bin/phase4_backward --impl cpu --threads 2 --B 1 --H 8 --S 1024
#include "fa_baselines.h"
#include "fa_driver.h"
#include "fa_gpu.h"
#include "fa_tensor.h"
#include "fa_contract.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int CUDA_HEAD_DIMS[] = FLASH4D_CUDA_HEAD_DIMS;   // the forward's and the backward's CUDA head dims

static const fa_cli_spec SPEC = {
    .program = "phase4_backward",
    .summary = "Phase 4: the backward pass. dQ, dK, dV recomputed tile by tile from the forward's log-sum-exp.",
    .defaults = {.B = 1, .H = 4, .Sq = 512, .Sk = 512, .D = 64},
    .default_block_m = 64,
    .default_block_n = 64,
    .has_dq_mode = 1,
    .cuda_head_dims = CUDA_HEAD_DIMS,
};

// The forward's CUDA kernels have their own tile list (fa_contract.h); where it lacks the backward's tiles, the CUDA
// forward runs with these. The LSE does not depend on the tiles, so the backward is checked all the same.
#define FORWARD_CUDA_BLOCK_M 64
#define FORWARD_CUDA_BLOCK_N 64

// Labels of the rows (the check block adds "cpu" or "cuda").
#define FORWARD_LABEL "forward (phase 3 step 3)"
#define DET_LABEL "backward det"
#define ATOMIC_LABEL "backward atomic"
#define NAIVE_FORWARD_LABEL "naive forward"
#define NAIVE_LABEL "naive backward"

// FlashAttention's rule: on the same inputs, a result's error is at most this many times the error of standard
// attention at the same precision (phase 1's naive forward and backward, run first), measured in the same run.
#define FORWARD_ERROR_FACTOR 2.0
#define BACKWARD_ERROR_FACTOR 3.0

typedef struct {   // phase 3 step 3: O and LSE
    const fa_shape *shape;
    int block_m, block_n;
    const float *q, *k, *v;
    float *o, *lse, *lse_residual;
} forward_args;

typedef struct {   // the FlashAttention backward, one dQ variant
    const fa_shape *shape;
    int block_m, block_n, dq_mode;
    backward_tensors t;
} backward_args;

typedef struct {   // phase 1's naive forward: S and P materialised
    const fa_shape *shape;
    const float *q, *k, *v;
    float *scores, *probs, *o, *lse;
} naive_forward_args;

typedef struct {   // phase 1's naive backward, from the P its forward kept: dP/dS materialised
    const fa_shape *shape;
    const float *q, *k, *v, *o, *probs, *dout;
    float *dscores, *dq, *dk, *dv;
} naive_args;

static void run_forward_cpu(void *p) {
    forward_args *a = p;
    const fa_shape *s = a->shape;
    const fa_strides sq = fa_strides_contiguous(s->H, s->Sq, s->D), sk = fa_strides_contiguous(s->H, s->Sk, s->D);
    const forward_tensors t = {a->q, a->k, a->v, sq, sk, sk, a->o, sq, a->lse, a->lse_residual};
    flash_forward_lse_cpu(s, a->block_m, a->block_n, &t, NULL);
}

static void run_backward_cpu(void *p) {
    backward_args *a = p;
    flash_backward_cpu(a->shape, a->block_m, a->block_n, a->dq_mode, &a->t);
}

static void run_naive_forward_cpu(void *p) {
    naive_forward_args *a = p;
    naive_attention_cpu(a->shape, a->q, a->k, a->v, a->scores, a->probs, a->o, a->lse);
}

static void run_naive_cpu(void *p) {
    naive_args *a = p;
    naive_backward_cpu(a->shape, a->q, a->k, a->v, a->o, a->probs, a->dout, a->dscores, a->dq, a->dk, a->dv);
}

#if FA_HAVE_CUDA
static void run_forward_cuda(void *p) {
    forward_args *a = p;
    const fa_shape *s = a->shape;
    const fa_strides sq = fa_strides_contiguous(s->H, s->Sq, s->D), sk = fa_strides_contiguous(s->H, s->Sk, s->D);
    const forward_tensors t = {a->q, a->k, a->v, sq, sk, sk, a->o, sq, a->lse, a->lse_residual};
    flash_forward_lse_cuda(s, a->block_m, a->block_n, &t);
}

static void run_backward_cuda(void *p) {
    backward_args *a = p;
    flash_backward_cuda(a->shape, a->block_m, a->block_n, a->dq_mode, &a->t);
}

static void run_naive_forward_cuda(void *p) {
    naive_forward_args *a = p;
    naive_attention_cuda(a->shape, a->q, a->k, a->v, a->scores, a->probs, a->o, a->lse);
}

static void run_naive_cuda(void *p) {
    naive_args *a = p;
    naive_backward_cuda(a->shape, a->q, a->k, a->v, a->o, a->probs, a->dout, a->dscores, a->dq, a->dk, a->dv);
}
#endif

// Sets impl->outputs to dQ, dK, dV, checked against the backward oracle, and, when reference_label is not NULL,
// against the error of the naive backward's rows of that label.
static void backward_outputs(fa_implementation *impl, const fa_shape *s, const fa_reference *ref, fa_grads host,
                             fa_grads device, const char *reference_label) {
    const double tol[3] = {ref->tol_backward, ref->tol_backward, ref->tol_backward};
    fa_backward_outputs(impl, s, ref, tol, host, device);
    for (int i = 0; i < impl->n_outputs; i++) {
        impl->outputs[i].reference_label = reference_label;
        impl->outputs[i].reference_factor = BACKWARD_ERROR_FACTOR;
    }
}

// The forward's O and LSE are also held to FlashAttention's rule against the naive forward's rows of that label.
static void compare_with_naive(fa_implementation *impl, const char *reference_label) {
    for (int i = 0; i < impl->n_outputs; i++) {
        impl->outputs[i].reference_label = reference_label;
        impl->outputs[i].reference_factor = FORWARD_ERROR_FACTOR;
    }
}

// The backward's tensors on contiguous [B, H, S, D] buffers.
static backward_tensors contiguous_tensors(const fa_shape *s, const float *q, const float *k, const float *v,
                                           const float *o, const float *lse, const float *lse_residual,
                                           const float *dout, float *delta, fa_grads g) {
    const fa_strides sq = fa_strides_contiguous(s->H, s->Sq, s->D), sk = fa_strides_contiguous(s->H, s->Sk, s->D);
    backward_tensors t = {q, k, v, o, lse, dout, sq, sk, sk, sq, sq, delta, g.dq, g.dk, g.dv, sq, sk, sk, lse_residual};
    return t;
}

// Runs, checks and times the FlashAttention backward in each dQ variant --dq asks for.
static void check_and_time_backward(fa_report *report, const fa_options *opt, const fa_reference *ref, int is_cuda,
                                    backward_tensors t, fa_grads host, fa_grads device, double upload_ms) {
    const fa_shape *s = &opt->shape;
    const int modes[2] = {FA_DQ_DETERMINISTIC, FA_DQ_ATOMIC};
    const char *labels[2] = {DET_LABEL, ATOMIC_LABEL};
    // Extra memory: Delta, and on the CPU each thread's tiles (on the GPU the tiles live in shared memory).
    const int64_t dkdv_ws = backward_dkdv_cpu_workspace_bytes(s->D, opt->block_m, opt->block_n);
    const int64_t dq_ws = backward_dq_cpu_workspace_bytes(s->D, opt->block_m, opt->block_n);
    const int64_t extra = fa_numel_lse(s) * (int64_t)sizeof(float);   // Delta
    const int64_t per_thread = is_cuda ? 0 : (dkdv_ws > dq_ws ? dkdv_ws : dq_ws);
    for (int m = 0; m < 2; m++) {
        if (!(opt->dq_mode & modes[m])) continue;
        backward_args args = {s, opt->block_m, opt->block_n, modes[m], t};
        fa_implementation impl = {.label = labels[m], .is_cuda = is_cuda, .ctx = &args,
                                  .flops = fa_flops_backward(s), .backward = 1, .extra_bytes = extra,
                                  .extra_bytes_per_thread = per_thread,
                                  .extra_what = is_cuda ? "Delta" : "Delta, per-thread tiles",
                                  .block_m = opt->block_m, .block_n = opt->block_n,
                                  .causal = s->causal, .upload_ms = upload_ms};
        impl.run = run_backward_cpu;
#if FA_HAVE_CUDA
        if (is_cuda) impl.run = run_backward_cuda;
#endif
        backward_outputs(&impl, s, ref, host, device, is_cuda ? NAIVE_LABEL " cuda" : NAIVE_LABEL " cpu");
        fa_check_and_time(report, opt, ref, &impl);
    }
}

// The median time of the timing row with this label, device and thread count; 0 when it was not timed.
static double median_ms_of(const fa_report *r, const char *label, const char *impl, int threads) {
    for (int i = 0; i < r->n_rows; i++) {
        const fa_timing_row *row = &r->rows[i];
        if (strcmp(row->label, label) == 0 && strcmp(row->impl, impl) == 0 && row->threads == threads &&
            strcmp(row->status, "ok") == 0)
            return row->median_ms;
    }
    return 0.0;
}

// One note per device: how much longer than the forward each backward takes (by FLOPs it would be 2.5 times).
static void add_ratio_note(fa_report *report, const char *impl, int threads) {
    const double forward = median_ms_of(report, FORWARD_LABEL, impl, threads);
    if (forward <= 0.0) return;
    char line[160], where[32] = "";
    if (threads > 0) snprintf(where, sizeof where, " (%d thread%s)", threads, threads > 1 ? "s" : "");
    int n = snprintf(line, sizeof line, "%s%s backward/forward time:", impl, where);
    const char *labels[3] = {DET_LABEL, ATOMIC_LABEL, NAIVE_LABEL}, *names[3] = {"det", "atomic", "naive"};
    for (int i = 0; i < 3; i++) {
        const double t = median_ms_of(report, labels[i], impl, threads);
        if (t > 0.0 && n < (int)sizeof line)
            n += snprintf(line + n, sizeof line - (size_t)n, " %s %.2fx", names[i], t / forward);
    }
    fa_report_add_note(report, "%s (2.5x by the FLOP count)", line);
}

int main(int argc, char **argv) {
    fa_options opt;
    fa_parse_options(argc, argv, &SPEC, &opt);
    const fa_shape *shape = &opt.shape;
    if ((opt.impl & FA_IMPL_CUDA) && !backward_cuda_supports_tiles(opt.block_m, opt.block_n))
        fa_die("--block-m %d --block-n %d: the CUDA backward is compiled for BLOCK_M x BLOCK_N in "
               BACKWARD_CUDA_TILES_TEXT " only; use --impl cpu for other tiles", opt.block_m, opt.block_n);
    fa_report report;
    fa_report_init(&report, SPEC.program, &opt);
    int use_gpu = fa_use_gpu(&opt, &report);

    fa_inputs in;
    fa_make_inputs(&opt, 1, &in);
    fa_reference ref;
    fa_make_reference(&opt, &in, 1, &ref);
    const int64_t n_q = fa_numel_q(shape), n_kv = fa_numel_kv(shape), n_lse = fa_numel_lse(shape);
    float *o = fa_alloc_floats(n_q, "O"), *lse = fa_alloc_floats(n_lse, "LSE");
    float *lse_residual = fa_alloc_floats(n_lse, "LSE residual");
    float *naive_o = fa_alloc_floats(n_q, "naive O"), *naive_lse = fa_alloc_floats(n_lse, "naive LSE");
    fa_grads host = {fa_alloc_floats(n_q, "dQ"), fa_alloc_floats(n_kv, "dK"), fa_alloc_floats(n_kv, "dV")};
    const fa_grads no_device = {NULL, NULL, NULL};
    // The naive backward's P and dP/dS: the O(S^2) memory the FlashAttention backward does without. Counted in double
    // (B*H*Sq*Sk can pass 2^63 when every tensor is still allowed); past FA_MAX_NUMEL it is not even tried.
    const double scores = (double)shape->B * (double)shape->H * (double)shape->Sq * (double)shape->Sk;
    const int64_t n_scores = scores <= (double)FA_MAX_NUMEL ? (int64_t)scores : 0;
    const double naive_bytes = 2.0 * scores * sizeof(float);
    char naive_size[32];
    fa_format_bytes(naive_bytes, naive_size, sizeof naive_size);

    if (opt.impl & FA_IMPL_CPU) {
        // Standard attention first: its forward keeps P (and S, in the buffer dP/dS takes over next), its backward
        // starts from that P, and the errors of both are what the flash rows below are held to.
        float *probs, *dscores;
        const int have_naive = fa_try_alloc_floats_pair(n_scores, &probs, &dscores) == 0;
        if (have_naive) {
            naive_forward_args nf = {shape, in.q, in.k, in.v, dscores, probs, naive_o, naive_lse};
            fa_implementation naive_forward = {.label = NAIVE_FORWARD_LABEL, .run = run_naive_forward_cpu,
                                               .ctx = &nf, .flops = fa_flops_forward(shape),
                                               .extra_bytes = (int64_t)naive_bytes, .extra_what = "S, P",
                                               .causal = shape->causal};
            fa_forward_outputs(&naive_forward, shape, &ref, naive_o, NULL, naive_lse, NULL);
            fa_check_and_time(&report, &opt, &ref, &naive_forward);   // leaves P in probs, O in naive_o
        } else {
            fa_report_add_note(&report, "naive forward and backward cpu skipped: S/dS and P need %s", naive_size);
        }

        forward_args fwd = {shape, opt.block_m, opt.block_n, in.q, in.k, in.v, o, lse, lse_residual};
        fa_implementation forward = {
            .label = FORWARD_LABEL, .run = run_forward_cpu, .ctx = &fwd, .flops = fa_flops_forward(shape),
            .extra_bytes_per_thread = flash_forward_4d_cpu_workspace_bytes(shape->D, opt.block_m, opt.block_n),
            .extra_what = "per-thread tiles", .block_m = opt.block_m, .block_n = opt.block_n,
            .causal = shape->causal};
        fa_forward_outputs(&forward, shape, &ref, o, NULL, lse, NULL);
        compare_with_naive(&forward, NAIVE_FORWARD_LABEL " cpu");
        fa_check_and_time(&report, &opt, &ref, &forward);   // leaves O and LSE in o, lse for the backward

        if (have_naive) {
            naive_args args = {shape, in.q, in.k, in.v, naive_o, probs, in.dout, dscores, host.dq, host.dk, host.dv};
            fa_implementation naive = {.label = NAIVE_LABEL, .run = run_naive_cpu, .ctx = &args,
                                       .flops = fa_flops_backward(shape), .backward = 1,
                                       .extra_bytes = (int64_t)naive_bytes,
                                       .extra_what = "P, dP/dS", .causal = shape->causal};
            backward_outputs(&naive, shape, &ref, host, no_device, NULL);
            fa_check_and_time(&report, &opt, &ref, &naive);
        }
        free(probs);
        free(dscores);

        float *delta = fa_alloc_floats(n_lse, "Delta");
        backward_tensors t = contiguous_tensors(shape, in.q, in.k, in.v, o, lse, lse_residual, in.dout, delta, host);
        check_and_time_backward(&report, &opt, &ref, 0, t, host, no_device, 0.0);
        free(delta);
        add_ratio_note(&report, "cpu", opt.threads);
    }

#if FA_HAVE_CUDA
    if (use_gpu) {
        fa_device_inputs dev;
        fa_upload_inputs(&opt, &in, &dev);
        float *o_dev = fa_gpu_alloc(n_q, "O"), *lse_dev = fa_gpu_alloc(n_lse, "LSE");
        float *residual_dev = fa_gpu_alloc(n_lse, "LSE residual");
        float *delta_dev = fa_gpu_alloc(n_lse, "Delta");
        fa_grads device = {fa_gpu_alloc(n_q, "dQ"), fa_gpu_alloc(n_kv, "dK"), fa_gpu_alloc(n_kv, "dV")};

        forward_args fwd = {shape, opt.block_m, opt.block_n, dev.q, dev.k, dev.v, o_dev, lse_dev, residual_dev};
        if (!flash4d_cuda_supports_tiles(opt.block_m, opt.block_n)) {
            fwd.block_m = FORWARD_CUDA_BLOCK_M, fwd.block_n = FORWARD_CUDA_BLOCK_N;
            fa_report_add_note(&report, "forward cuda ran with %dx%d tiles: phase 3's CUDA kernels have no %dx%d",
                               fwd.block_m, fwd.block_n, opt.block_m, opt.block_n);
        }
        fa_implementation forward = {.label = FORWARD_LABEL, .is_cuda = 1, .run = run_forward_cuda, .ctx = &fwd,
                                     .flops = fa_flops_forward(shape), .extra_what = "tiles in shared memory",
                                     .block_m = fwd.block_m, .block_n = fwd.block_n, .causal = shape->causal,
                                     .upload_ms = dev.upload_ms};

        // Standard attention first, as on the CPU.
        float *probs = n_scores ? fa_gpu_try_alloc(n_scores) : NULL;
        float *dscores = probs ? fa_gpu_try_alloc(n_scores) : NULL;
        float *naive_o_dev = dscores ? fa_gpu_alloc(n_q, "naive O") : NULL;
        float *naive_lse_dev = dscores ? fa_gpu_alloc(n_lse, "naive LSE") : NULL;
        if (dscores) {
            naive_forward_args nf = {shape, dev.q, dev.k, dev.v, dscores, probs, naive_o_dev, naive_lse_dev};
            fa_implementation naive_forward = {.label = NAIVE_FORWARD_LABEL, .is_cuda = 1,
                                               .run = run_naive_forward_cuda, .ctx = &nf,
                                               .flops = fa_flops_forward(shape), .extra_bytes = (int64_t)naive_bytes,
                                               .extra_what = "S, P", .causal = shape->causal,
                                               .upload_ms = dev.upload_ms};
            fa_forward_outputs(&naive_forward, shape, &ref, naive_o, naive_o_dev, naive_lse, naive_lse_dev);
            fa_check_and_time(&report, &opt, &ref, &naive_forward);
        } else {
            fa_report_add_note(&report, "naive forward and backward cuda skipped: S/dS and P need %s of GPU memory",
                               naive_size);
        }

        fa_forward_outputs(&forward, shape, &ref, o, o_dev, lse, lse_dev);
        compare_with_naive(&forward, NAIVE_FORWARD_LABEL " cuda");
        fa_check_and_time(&report, &opt, &ref, &forward);

        if (dscores) {
            naive_args args = {shape, dev.q, dev.k, dev.v, naive_o_dev, probs, dev.dout, dscores,
                               device.dq, device.dk, device.dv};
            fa_implementation naive = {.label = NAIVE_LABEL, .is_cuda = 1, .run = run_naive_cuda, .ctx = &args,
                                       .flops = fa_flops_backward(shape), .backward = 1,
                                       .extra_bytes = (int64_t)naive_bytes,
                                       .extra_what = "P, dP/dS", .causal = shape->causal,
                                       .upload_ms = dev.upload_ms};
            backward_outputs(&naive, shape, &ref, host, device, NULL);
            fa_check_and_time(&report, &opt, &ref, &naive);
        }
        if (probs) fa_gpu_free(probs);
        if (dscores) fa_gpu_free(dscores);
        if (naive_o_dev) fa_gpu_free(naive_o_dev);
        if (naive_lse_dev) fa_gpu_free(naive_lse_dev);

        backward_tensors t =
            contiguous_tensors(shape, dev.q, dev.k, dev.v, o_dev, lse_dev, residual_dev, dev.dout, delta_dev, device);
        check_and_time_backward(&report, &opt, &ref, 1, t, host, device, dev.upload_ms);
        add_ratio_note(&report, "cuda", 0);

        fa_gpu_free(o_dev);
        fa_gpu_free(lse_dev);
        fa_gpu_free(residual_dev);
        fa_gpu_free(delta_dev);
        fa_gpu_free(device.dq);
        fa_gpu_free(device.dk);
        fa_gpu_free(device.dv);
        fa_free_device_inputs(&dev);
    }
#else
    (void)use_gpu;
#endif

    int status = fa_finish(&report, &opt);
    free(o);
    free(lse);
    free(naive_o);
    free(naive_lse);
    free(lse_residual);
    free(host.dq);
    free(host.dk);
    free(host.dv);
    fa_free_reference(&ref);
    fa_free_inputs(&in);
    return status;
}
