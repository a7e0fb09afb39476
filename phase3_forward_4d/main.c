// main.c - phase 3 driver: the three steps of the 4D forward (grid, causal pruning, LSE), CPU and GPU, with phase 1's
// naive attention on the same input as the baseline. It runs, checks, times and saves the problem the flags describe;
// with --compare-causal, steps 2 and 3 also run with the causal mask flipped, in rows labelled by their mask and
// checked against their own float64 oracle, so that the timing table shows what block pruning saves (those rows are
// never saved).
//
// Run: build/bin/phase3_forward_4d                              (class defaults: B=1 H=4 S=1024 D=64, all steps)
//      build/bin/phase3_forward_4d --compare-causal              (steps 2 and 3 causal and not, side by side)
//      build/bin/phase3_forward_4d --step 3 --B 4 --H 16 --S 4096 --check-heads 2
//      build/bin/phase3_forward_4d --causal --Sq 500 --Sk 1000  (naive causal; step 1 has no causal mask, skipped)
#include "fa_driver.h"
#include "fa_gpu.h"
#include "fa_tensor.h"
#include "forward4d.h"
#include "fa_baselines.h"

#include <stdio.h>
#include <stdlib.h>

static const int CUDA_HEAD_DIMS[] = FLASH4D_CUDA_HEAD_DIMS;

static const fa_cli_spec SPEC = {
    .program = "phase3_forward_4d",
    .summary = "Phase 3: the 4D forward in three steps: (1) the grid (Q tiles, B*H) with strides, (2) causal block "
               "pruning, (3) the LSE for the backward pass; with phase 1's naive attention on the same input.",
    .defaults = {.B = 1, .H = 4, .Sq = 1024, .Sk = 1024, .D = 64},
    .default_block_m = 64,
    .default_block_n = 32,
    .max_step = 3,
    .has_compare_causal = 1,
    .cuda_head_dims = CUDA_HEAD_DIMS,
};

// One run of one step (or of naive, step 0) on one device; the tensors are contiguous [B, H, S, D].
typedef struct {
    int step;
    const fa_shape *shape;
    int block_m, block_n;
    const float *q, *k, *v;
    float *o, *lse;
    float *scores, *probs;     // naive only
    int64_t tiles_visited;     // CPU steps: (Q tile, K tile) pairs processed
} step_args;

// The step's tensors, contiguous [B, H, S, D] (LSE for step 3 only).
static forward_tensors tensors_of(const step_args *a) {
    const fa_shape *s = a->shape;
    const fa_strides qs = fa_strides_contiguous(s->H, s->Sq, s->D), ks = fa_strides_contiguous(s->H, s->Sk, s->D);
    return (forward_tensors){.q = a->q, .k = a->k, .v = a->v, .q_strides = qs, .k_strides = ks, .v_strides = ks,
                             .o = a->o, .o_strides = qs, .lse = a->lse, .lse_residual = NULL};
}

// What runs each row, on each device.
static void naive_cpu(step_args *a) {
    naive_attention_cpu(a->shape, a->q, a->k, a->v, a->scores, a->probs, a->o, a->lse);
}
static void grid4d_cpu(step_args *a) {
    const forward_tensors t = tensors_of(a);
    flash_forward_grid4d_cpu(a->shape, a->block_m, a->block_n, &t, &a->tiles_visited);
}
static void causal_cpu(step_args *a) {
    const forward_tensors t = tensors_of(a);
    flash_forward_causal_cpu(a->shape, a->block_m, a->block_n, &t, &a->tiles_visited);
}
static void lse_cpu(step_args *a) {
    const forward_tensors t = tensors_of(a);
    flash_forward_lse_cpu(a->shape, a->block_m, a->block_n, &t, &a->tiles_visited);
}
#if FA_HAVE_CUDA
static void naive_cuda(step_args *a) {
    naive_attention_cuda(a->shape, a->q, a->k, a->v, a->scores, a->probs, a->o, a->lse);
}
static void grid4d_cuda(step_args *a) {
    const forward_tensors t = tensors_of(a);
    flash_forward_grid4d_cuda(a->shape, a->block_m, a->block_n, &t);
}
static void causal_cuda(step_args *a) {
    const forward_tensors t = tensors_of(a);
    flash_forward_causal_cuda(a->shape, a->block_m, a->block_n, &t);
}
static void lse_cuda(step_args *a) {
    const forward_tensors t = tensors_of(a);
    flash_forward_lse_cuda(a->shape, a->block_m, a->block_n, &t);
}
#define GPU_ROW(fn) fn
#else
#define GPU_ROW(fn) NULL   // a build without CUDA has no GPU rows
#endif

// The rows: one table, indexed by step (0 = naive), each with its label (and its label in the causal variant) and
// what runs it on the CPU and on the GPU.
typedef struct {
    const char *label, *causal_label;
    void (*cpu)(step_args *a), (*cuda)(step_args *a);
} row_kind;
static const row_kind ROWS[4] = {
    {"naive", "naive (causal)", naive_cpu, GPU_ROW(naive_cuda)},
    {"step 1", "step 1 (causal)", grid4d_cpu, GPU_ROW(grid4d_cuda)},
    {"step 2", "step 2 (causal)", causal_cpu, GPU_ROW(causal_cuda)},
    {"step 3", "step 3 (causal)", lse_cpu, GPU_ROW(lse_cuda)},
};

// The harness calls impl.run(ctx): the args know their step, and the device picks the function.
static void run_on_cpu(void *p) { step_args *a = p; ROWS[a->step].cpu(a); }
static void run_on_gpu(void *p) { step_args *a = p; ROWS[a->step].cuda(a); }

// What one device needs to run every row: the inputs, the output buffers, and where the results come back to.
typedef struct {
    int is_cuda;
    const float *q, *k, *v;    // host or device
    float *o, *lse;            // host or device
    float *o_host, *lse_host;  // where fa_check_and_time brings the results
    double upload_ms;
} device_buffers;

// The variants steps 2 and 3 run: the shape as asked, and (--compare-causal) the same shape with causal flipped,
// whose options have no --save-dir: only the problem asked for is ever saved.
typedef struct {
    const fa_options *opt;
    const fa_reference *ref;
} variant;

// Runs, checks and times one step (0 = naive) of one variant on one device.
static void run_row(fa_report *report, const fa_options *opt, const variant *var, const device_buffers *dev,
                    int step) {
    const fa_options *vopt = var->opt;
    const fa_shape *shape = &vopt->shape;
    step_args args = {.step = step, .shape = shape, .block_m = opt->block_m, .block_n = opt->block_n,
                      .q = dev->q, .k = dev->k, .v = dev->v, .o = dev->o, .lse = dev->lse};
    fa_implementation impl = {.label = shape->causal ? ROWS[step].causal_label : ROWS[step].label,
                              .is_cuda = dev->is_cuda, .ctx = &args, .flops = fa_flops_forward(shape),
                              .causal = shape->causal, .upload_ms = dev->upload_ms,
                              .run = dev->is_cuda ? run_on_gpu : run_on_cpu};
    const int64_t n_scores = fa_numel_scores(shape);
    if (step == 0) {
        // Naive needs S and P; when they do not fit it is left out (the flash steps need neither).
        const double sp_bytes = 2.0 * (double)n_scores * sizeof(float);
        if (dev->is_cuda) {
#if FA_HAVE_CUDA
            args.scores = fa_gpu_try_alloc(n_scores);
            args.probs = args.scores ? fa_gpu_try_alloc(n_scores) : NULL;
#endif
        } else {
            fa_try_alloc_floats_pair(n_scores, &args.scores, &args.probs);
        }
        if (!args.probs) {
            char size[32];
            fa_format_bytes(sp_bytes, size, sizeof size);
            fa_report_add_note(report, "naive %s skipped: its S and P need %s, more than the %s has free",
                               dev->is_cuda ? "cuda" : "cpu", size, dev->is_cuda ? "GPU" : "machine");
        } else {
            impl.extra_bytes = (int64_t)sp_bytes;
            impl.extra_what = "S, P";
            fa_forward_outputs(&impl, shape, var->ref, dev->o_host, dev->is_cuda ? dev->o : NULL, dev->lse_host,
                               dev->is_cuda ? dev->lse : NULL);
            fa_check_and_time(report, vopt, var->ref, &impl);
        }
        if (dev->is_cuda) {
#if FA_HAVE_CUDA
            if (args.scores) fa_gpu_free(args.scores);
            if (args.probs) fa_gpu_free(args.probs);
#endif
        } else {
            free(args.scores);
            free(args.probs);
        }
        return;
    }

    impl.block_m = opt->block_m;
    impl.block_n = opt->block_n;
    if (dev->is_cuda) {
        impl.extra_what = "tiles in shared memory";
    } else {
        impl.extra_bytes_per_thread = flash_forward_4d_cpu_workspace_bytes(shape->D, opt->block_m, opt->block_n);
        impl.extra_what = "per-thread tiles";
    }
    const int with_lse = step == 3;
    fa_forward_outputs(&impl, shape, var->ref, dev->o_host, dev->is_cuda ? dev->o : NULL,
                       with_lse ? dev->lse_host : NULL, with_lse && dev->is_cuda ? dev->lse : NULL);
    fa_check_and_time(report, vopt, var->ref, &impl);

    // What the pruning saved, counted by the CPU kernel itself.
    if (!dev->is_cuda && step == 3 && shape->causal) {
        const int64_t q_tiles = (shape->Sq + opt->block_m - 1) / opt->block_m;
        const int64_t k_tiles = (shape->Sk + opt->block_n - 1) / opt->block_n;
        const int64_t all = shape->B * shape->H * q_tiles * k_tiles;
        fa_report_add_note(report, "causal pruning: step 3 processed %lld of %lld (Q tile, K tile) pairs (%.0f%%)",
                           (long long)args.tiles_visited, (long long)all, 100.0 * (double)args.tiles_visited / all);
    }
}

// Every row the options ask for, on one device: naive, then the steps, each step as asked before its flipped twin.
static void run_device(fa_report *report, const fa_options *opt, const variant vars[2], const device_buffers *dev) {
    const variant *asked = &vars[0], *flipped = &vars[1];
    run_row(report, opt, asked, dev, 0);
    for (int step = 1; step <= 3; step++) {
        if (opt->step != 0 && opt->step != step) continue;
        if (step == 1) {
            if (!opt->shape.causal) run_row(report, opt, asked, dev, 1);
            continue;
        }
        run_row(report, opt, asked, dev, step);
        if (flipped->opt) run_row(report, opt, flipped, dev, step);
    }
}

int main(int argc, char **argv) {
    fa_options opt;
    fa_parse_options(argc, argv, &SPEC, &opt);
    if (opt.step == 1 && opt.shape.causal)
        fa_die("--causal needs --step 2 or 3 (or all): step 1 has no causal mask; step 2 adds it");
    if ((opt.impl & FA_IMPL_CUDA) && !flash4d_cuda_supports_tiles(opt.block_m, opt.block_n))
        fa_die("the CUDA kernels are compiled for --block-m x --block-n = %s (got %d x %d); "
               "use --impl cpu for other tile sizes", FLASH4D_CUDA_TILES_TEXT, opt.block_m, opt.block_n);
    fa_report report;
    fa_report_init(&report, SPEC.program, &opt);
    int use_gpu = fa_use_gpu(&opt, &report);
    if (opt.shape.causal && (opt.step == 0 || opt.step == 1))
        fa_report_add_note(&report, "step 1 rows not run: step 1 has no causal mask (step 2 adds it)");

    // The options as asked, and with --compare-causal a copy with causal flipped and nothing saved, each with its
    // own oracle.
    fa_options flipped_opt = opt;
    flipped_opt.shape.causal = !opt.shape.causal;
    flipped_opt.save_dir = NULL;
    const int need_flipped = opt.compare_causal && opt.step != 1;
    fa_inputs in;
    fa_make_inputs(&opt, 0, &in);
    fa_reference ref, flipped_ref;
    fa_make_reference(&opt, &in, 0, &ref);
    if (need_flipped) fa_make_reference(&flipped_opt, &in, 0, &flipped_ref);
    const variant vars[2] = {{&opt, &ref}, {need_flipped ? &flipped_opt : NULL, need_flipped ? &flipped_ref : NULL}};

    float *o = fa_alloc_floats(fa_numel_q(&opt.shape), "O");
    float *lse = fa_alloc_floats(fa_numel_lse(&opt.shape), "LSE");
    if (opt.impl & FA_IMPL_CPU) {
        device_buffers cpu = {0, in.q, in.k, in.v, o, lse, o, lse, 0.0};
        run_device(&report, &opt, vars, &cpu);
    }
#if FA_HAVE_CUDA
    if (use_gpu) {
        fa_device_inputs dev;
        fa_upload_inputs(&opt, &in, &dev);
        float *o_dev = fa_gpu_alloc(fa_numel_q(&opt.shape), "O");
        float *lse_dev = fa_gpu_alloc(fa_numel_lse(&opt.shape), "LSE");
        device_buffers gpu = {1, dev.q, dev.k, dev.v, o_dev, lse_dev, o, lse, dev.upload_ms};
        run_device(&report, &opt, vars, &gpu);
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
    if (need_flipped) fa_free_reference(&flipped_ref);
    fa_free_inputs(&in);
    return status;
}
