// main.c - phase 5 driver: how FlashAttention gets fast. Each step is a row of the tables, next to the baselines a
// user would pick instead: phase 3 step 3 (the same algorithm, one thread per query row) and, on the CPU, naive
// attention with BLAS (two sgemm calls and a vectorised softmax, S materialised; built when CMake finds a BLAS).
// Every row runs on the same input and is checked against the same float64 oracle. Step 3 is eleven rows, one technique
// each: "step 3a swizzle", "step 3b cp.async" (GPU only: they change how the GPU moves data, and step 2's CPU row is
// their twin), "step 3 pipeline" (exp2 with the scale folded in), then "step 3c row blocks" (32 query rows per warp),
// "step 3d exp2 ftz" (one instruction per exponential), "step 3e copy loop" (the copies' index arithmetic done once),
// "step 3f lazy rescale" (O rescaled only where a max moved), and, on step 3e, "step 3g invariants" (what every key
// tile shares worked out before the loop), "step 3h xor addresses" (ldmatrix addresses by one XOR each), "step 3i key
// offsets" (the max-key search and the mask in 32-bit offsets) and "step 3j rows together" (each lane's four row maxima
// side by side), GPU only, with step 3's CPU row as their twin. Step 4 is the backward: the rows "step 4 bwd det" and
// "step 4 bwd atomic" (--dq deterministic|atomic|both, as in phase 4) differentiate the step 3 forward's O and LSE, and
// are checked by the half-precision rule for gradients; on the GPU, "step 4b bwd det" and "step 4b bwd atomic" are the
// same backward with the forward's instruction cuts (step 4's CPU row is their twin), "step 4c bwd det" step 4b with Q
// and dO held in the dQ pass's registers, and "step 4d bwd det" step 4c with room for one more dK/dV block per SM. Step
// 5 is the float32 backward with step 4's register tiles, on the CPU only: rows "step 5 bwd det" and "step 5 bwd
// atomic" beside phase 4's backward ("phase 4 bwd det"), all differentiating phase 3 step 3's O and LSE, checked as
// phase 4 is.
//
// Run: build/bin/phase5_tensor_cores                              (class defaults: B=1 H=4 S=1024 D=64, every step)
//      build/bin/phase5_tensor_cores --step 1 --B 4 --H 16 --S 4096 --D 128 --causal --check-heads 2
//      build/bin/phase5_tensor_cores --impl cpu --step 1 --B 1 --H 8 --S 4096 --D 64 --threads 2 --check-heads 1
//      build/bin/phase5_tensor_cores --dtype bf16 --step 3 --B 4 --H 16 --S 4096 --D 128 --check-heads 2
//      build/bin/phase5_tensor_cores --dtype fp16 --step 4 --dq both --B 4 --H 16 --S 4096 --D 64 --check-heads 1
//      build/bin/phase5_tensor_cores --impl cpu --step 5 --dq both --B 1 --H 8 --S 2048 --D 64 --threads 2
#include "fa_driver.h"
#include "bf16_dot.h"
#include "fa_gpu.h"
#include "fa_half.h"
#include "fa_tensor.h"
#include "fa_baselines.h"   // phase 3 step 3 and naive attention with BLAS, the baseline rows
#include "register_tiles.h"
#include "tensor_cores.h"
#include "fa_backward_rows.h"   // step 4's rows of the table

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int CUDA_HEAD_DIMS[] = REGTILE_CUDA_HEAD_DIMS;

static const fa_cli_spec SPEC = {
    .program = "phase5_tensor_cores",
    .summary = "Phase 5: how FlashAttention gets fast. (1) register tiles in float32, (2) mma.sync tensor cores, (3) "
               "swizzle (3a), cp.async (3b), exp2 with the scale folded in (3), two row blocks per warp (3c), "
               "exp2 without its subnormal path (3d), the copies' index arithmetic done once (3e), O rescaled "
               "only where a max moved (3f), loop invariants before the key loop (3g), ldmatrix addresses by XOR "
               "(3h), the max-key search in 32-bit offsets (3i), each lane's four row maxima side by side (3j; "
               "--step 3 runs all eleven), (4) the backward on tensor cores, (5) the float32 backward with step 4's "
               "register tiles (CPU); with phase 3 step 3 (phase 4 for step 5) and, on the CPU, naive attention with "
               "BLAS on the same input.",
    .defaults = {.B = 1, .H = 4, .Sq = 1024, .Sk = 1024, .D = 64},
    .default_block_m = 128,
    .default_block_n = 64,
    .max_step = 5,
    .has_baselines = 1,   // --no-baselines: naive BLAS, phase 3 step 3 and phase 4 left out
    .has_dq_mode = 1,   // steps 4 and 5: --dq deterministic|atomic|both, as in phase 4
    .cuda_head_dims = CUDA_HEAD_DIMS,
    .has_dtype = 1,   // steps 2 and 3 compute in fp16 or bf16; the float32 rows run on the same rounded inputs
    .has_cpu_bf16 = 1,   // --cpu-bf16: step 4's bf16 CPU products on AMX, AVX512_BF16, plain C or float32 FMAs
};

// What every row of the tables gets: the problem, the contiguous [B, H, S, D] tensors (host or device) and the
// tile sizes. Steps 2 and 3 add their half-precision inputs here.
typedef struct {
    const fa_shape *shape;
    int block_m, block_n;
    fa_strides q_strides, kv_strides;   // Q and O; K and V
    const float *q, *k, *v;
    float *o, *lse;
    float *scores;                      // naive with BLAS: S of one head, [Sq, Sk], and its row sums, [Sq]
    int dtype;                          // steps 2 and 3: the inputs' half type, and the same Q, K, V in it
    const void *q_half, *k_half, *v_half;
} row_args;

// The half inputs of a row, with their strides, as steps 2 and 3 take them.
static tc_forward_tensors half_forward_tensors(const row_args *a) {
    return (tc_forward_tensors){a->q_half, a->k_half, a->v_half, a->q_strides, a->kv_strides, a->kv_strides, a->o,
                                a->q_strides, a->lse};
}
static void run_lse_cpu(void *p) {
    const row_args *a = p;
    const forward_tensors t = {a->q, a->k, a->v, a->q_strides, a->kv_strides, a->kv_strides, a->o, a->q_strides,
                               a->lse, NULL};
    flash_forward_lse_cpu(a->shape, a->block_m, a->block_n, &t, NULL);
}
static void run_regtile_cpu(void *p) {
    const row_args *a = p;
    const forward_tensors t = {a->q, a->k, a->v, a->q_strides, a->kv_strides, a->kv_strides, a->o, a->q_strides,
                               a->lse, NULL};
    flash_forward_regtile_cpu(a->shape, a->block_m, a->block_n, &t);
}
static void run_mma_cpu(void *p) {
    const row_args *a = p;
    const tc_forward_tensors t = half_forward_tensors(a);
    flash_forward_mma_cpu(a->shape, a->dtype, a->block_m, a->block_n, &t, NULL);
}
static void run_pipeline_cpu(void *p) {
    const row_args *a = p;
    const tc_forward_tensors t = half_forward_tensors(a);
    flash_forward_pipeline_cpu(a->shape, a->dtype, a->block_m, a->block_n, &t, NULL);
}
#if FA_HAVE_BLAS
static void run_naive_blas_cpu(void *p) {
    const row_args *a = p;
    naive_attention_blas_cpu(a->shape, a->q, a->k, a->v, a->scores, a->o, a->lse);
}
#endif
#if FA_HAVE_CUDA
static void run_lse_cuda(void *p) {
    const row_args *a = p;
    const forward_tensors t = {a->q, a->k, a->v, a->q_strides, a->kv_strides, a->kv_strides, a->o, a->q_strides,
                               a->lse, NULL};
    flash_forward_lse_cuda(a->shape, a->block_m, a->block_n, &t);
}
static void run_regtile_cuda(void *p) {
    const row_args *a = p;
    const forward_tensors t = {a->q, a->k, a->v, a->q_strides, a->kv_strides, a->kv_strides, a->o, a->q_strides,
                               a->lse, NULL};
    flash_forward_regtile_cuda(a->shape, a->block_m, a->block_n, &t);
}
#else
#define run_lse_cuda NULL
#define run_regtile_cuda NULL
#endif
#if FA_HAVE_CUDA && TC_HAVE_MMA_CUDA
static void run_mma_cuda(void *p) {
    const row_args *a = p;
    const tc_forward_tensors t = half_forward_tensors(a);
    flash_forward_mma_cuda(a->shape, a->dtype, a->block_m, a->block_n, &t);
}
static void run_swizzle_cuda(void *p) {
    const row_args *a = p;
    const tc_forward_tensors t = half_forward_tensors(a);
    flash_forward_swizzle_cuda(a->shape, a->dtype, a->block_m, a->block_n, &t);
}
static void run_cp_async_cuda(void *p) {
    const row_args *a = p;
    const tc_forward_tensors t = half_forward_tensors(a);
    flash_forward_cp_async_cuda(a->shape, a->dtype, a->block_m, a->block_n, &t);
}
static void run_pipeline_cuda(void *p) {
    const row_args *a = p;
    const tc_forward_tensors t = half_forward_tensors(a);
    flash_forward_pipeline_cuda(a->shape, a->dtype, a->block_m, a->block_n, &t);
}
static void run_two_row_blocks_cuda(void *p) {
    const row_args *a = p;
    const tc_forward_tensors t = half_forward_tensors(a);
    flash_forward_two_row_blocks_cuda(a->shape, a->dtype, a->block_m, a->block_n, &t);
}
static void run_exp2_ftz_cuda(void *p) {
    const row_args *a = p;
    const tc_forward_tensors t = half_forward_tensors(a);
    flash_forward_exp2_ftz_cuda(a->shape, a->dtype, a->block_m, a->block_n, &t);
}
static void run_copy_loop_cuda(void *p) {
    const row_args *a = p;
    const tc_forward_tensors t = half_forward_tensors(a);
    flash_forward_copy_loop_cuda(a->shape, a->dtype, a->block_m, a->block_n, &t);
}
static void run_loop_invariants_cuda(void *p) {
    const row_args *a = p;
    const tc_forward_tensors t = half_forward_tensors(a);
    flash_forward_loop_invariants_cuda(a->shape, a->dtype, a->block_m, a->block_n, &t);
}
static void run_xor_addresses_cuda(void *p) {
    const row_args *a = p;
    const tc_forward_tensors t = half_forward_tensors(a);
    flash_forward_xor_addresses_cuda(a->shape, a->dtype, a->block_m, a->block_n, &t);
}
static void run_key_offsets_cuda(void *p) {
    const row_args *a = p;
    const tc_forward_tensors t = half_forward_tensors(a);
    flash_forward_key_offsets_cuda(a->shape, a->dtype, a->block_m, a->block_n, &t);
}
static void run_rows_together_cuda(void *p) {
    const row_args *a = p;
    const tc_forward_tensors t = half_forward_tensors(a);
    flash_forward_rows_together_cuda(a->shape, a->dtype, a->block_m, a->block_n, &t);
}
static void run_lazy_rescale_cuda(void *p) {
    const row_args *a = p;
    const tc_forward_tensors t = half_forward_tensors(a);
    flash_forward_lazy_rescale_cuda(a->shape, a->dtype, a->block_m, a->block_n, &t);
}
#else
#define run_mma_cuda NULL        // no architecture of this build is sm_80 or newer (phase5_tensor_cores/CMakeLists.txt)
#define run_swizzle_cuda NULL
#define run_cp_async_cuda NULL
#define run_pipeline_cuda NULL
#define run_two_row_blocks_cuda NULL
#define run_exp2_ftz_cuda NULL
#define run_copy_loop_cuda NULL
#define run_lazy_rescale_cuda NULL
#define run_loop_invariants_cuda NULL
#define run_xor_addresses_cuda NULL
#define run_key_offsets_cuda NULL
#define run_rows_together_cuda NULL
#endif

// The rows, in the order they are printed. step 0 marks a baseline, run whatever --step says; a step row runs when
// --step is all or its number. A row without a cpu (cuda) function has no CPU (GPU) side: steps 3a and 3b change only
// how the GPU moves data, so their CPU twin is step 2's row; steps 3c to 3j change which warp computes a row, the
// exponential's subnormal results, the instructions around the mma and when O is rescaled, and their twin is step
// 3's (--step 3 runs 3a, 3b, 3, 3c to 3j, the rows of one ablation).
typedef struct {
    const char *label;
    int step;
    void (*cpu)(void *args);
    void (*cuda)(void *args);
    int needs_scores;   // naive: S of one head, [Sq, Sk] (and [Sq] row sums), instead of per-thread tiles
    int64_t (*cpu_workspace_bytes)(int64_t D, int block_m, int block_n);
    int64_t (*cuda_smem_bytes)(int64_t D, int block_m, int block_n);   // NULL: not reported
    int (*cuda_supports_tiles)(int block_m, int block_n);
    const char *cuda_tiles_text;
    int half;           // steps 2 and 3: fp16/bf16 inputs, run with --dtype fp16|bf16, checked by the half rule
} row_kind;

static const row_kind ROWS[] = {
#if FA_HAVE_BLAS
    {"naive BLAS", 0, run_naive_blas_cpu, NULL, 1, NULL, NULL, NULL, NULL, 0},
#endif
    {"phase 3 step 3", 0, run_lse_cpu, run_lse_cuda, 0, flash_forward_4d_cpu_workspace_bytes, NULL,
     flash4d_cuda_supports_tiles, FLASH4D_CUDA_TILES_TEXT, 0},
    {"step 1 register tiles", 1, run_regtile_cpu, run_regtile_cuda, 0, flash_forward_regtile_cpu_workspace_bytes,
     flash_forward_regtile_cuda_smem_bytes, regtile_cuda_supports_tiles, REGTILE_CUDA_TILES_TEXT, 0},
    {"step 2 mma", 2, run_mma_cpu, run_mma_cuda, 0, flash_forward_mma_cpu_workspace_bytes,
     flash_forward_mma_cuda_smem_bytes, tc_cuda_supports_tiles, TC_CUDA_TILES_TEXT, 1},
    {"step 3a swizzle", 3, NULL, run_swizzle_cuda, 0, NULL, flash_forward_mma_cuda_smem_bytes, tc_cuda_supports_tiles,
     TC_CUDA_TILES_TEXT, 1},
    {"step 3b cp.async", 3, NULL, run_cp_async_cuda, 0, NULL, flash_forward_pipeline_cuda_smem_bytes,
     tc_cuda_supports_tiles, TC_CUDA_TILES_TEXT, 1},
    {"step 3 pipeline", 3, run_pipeline_cpu, run_pipeline_cuda, 0, flash_forward_pipeline_cpu_workspace_bytes,
     flash_forward_pipeline_cuda_smem_bytes, tc_cuda_supports_tiles, TC_CUDA_TILES_TEXT, 1},
    {"step 3c row blocks", 3, NULL, run_two_row_blocks_cuda, 0, NULL, flash_forward_pipeline_cuda_smem_bytes,
     tc_cuda_supports_tiles, TC_CUDA_TILES_TEXT, 1},
    {"step 3d exp2 ftz", 3, NULL, run_exp2_ftz_cuda, 0, NULL, flash_forward_pipeline_cuda_smem_bytes,
     tc_cuda_supports_tiles, TC_CUDA_TILES_TEXT, 1},
    {"step 3e copy loop", 3, NULL, run_copy_loop_cuda, 0, NULL, flash_forward_pipeline_cuda_smem_bytes,
     tc_cuda_supports_tiles, TC_CUDA_TILES_TEXT, 1},
    {"step 3f lazy rescale", 3, NULL, run_lazy_rescale_cuda, 0, NULL, flash_forward_pipeline_cuda_smem_bytes,
     tc_cuda_supports_tiles, TC_CUDA_TILES_TEXT, 1},
    {"step 3g invariants", 3, NULL, run_loop_invariants_cuda, 0, NULL, flash_forward_pipeline_cuda_smem_bytes,
     tc_cuda_supports_tiles, TC_CUDA_TILES_TEXT, 1},
    {"step 3h xor addresses", 3, NULL, run_xor_addresses_cuda, 0, NULL, flash_forward_pipeline_cuda_smem_bytes,
     tc_cuda_supports_tiles, TC_CUDA_TILES_TEXT, 1},
    {"step 3i key offsets", 3, NULL, run_key_offsets_cuda, 0, NULL, flash_forward_pipeline_cuda_smem_bytes,
     key_offsets_cuda_supports_tiles, KEY_OFFSETS_CUDA_TILES_TEXT, 1},
    {"step 3j rows together", 3, NULL, run_rows_together_cuda, 0, NULL, flash_forward_pipeline_cuda_smem_bytes,
     key_offsets_cuda_supports_tiles, KEY_OFFSETS_CUDA_TILES_TEXT, 1},
};
static const int N_ROWS = (int)(sizeof ROWS / sizeof ROWS[0]);

static int row_selected(const fa_options *opt, const row_kind *row) {
    if (row->half && opt->dtype == FA_DTYPE_FP32) return 0;   // steps 2 and 3 need --dtype fp16|bf16
    if (opt->step >= 4) return 0;                             // the backward alone: no forward rows
    if (row->step == 0) return !opt->no_baselines;
    return opt->step == 0 || opt->step == row->step;
}

// Where one device's rows read their inputs and write their outputs, and where the results come back to.
typedef struct {
    int is_cuda;
    const float *q, *k, *v;    // host or device
    float *o, *lse;            // host or device
    float *o_host, *lse_host;  // where fa_check_and_time brings the results
    double upload_ms;
    const void *q_half, *k_half, *v_half;   // --dtype fp16|bf16: the inputs in that type (host or device)
    const fa_half_rule *rule;               // and the rule the half rows are checked by
} device_buffers;

// Runs, checks and times one row on one device.
static void run_row(fa_report *report, const fa_options *opt, const fa_reference *ref, const device_buffers *dev,
                    const row_kind *row) {
    const fa_shape *shape = &opt->shape;
    row_args args = {.shape = shape, .block_m = opt->block_m, .block_n = opt->block_n,
                     .q_strides = fa_strides_contiguous(shape->H, shape->Sq, shape->D),
                     .kv_strides = fa_strides_contiguous(shape->H, shape->Sk, shape->D),
                     .q = dev->q, .k = dev->k, .v = dev->v, .o = dev->o, .lse = dev->lse};
    fa_implementation impl = {.label = row->label, .is_cuda = dev->is_cuda, .ctx = &args,
                              .run = dev->is_cuda ? row->cuda : row->cpu, .flops = fa_flops_forward(shape),
                              .causal = shape->causal, .upload_ms = dev->upload_ms,
                              .block_m = opt->block_m, .block_n = opt->block_n};
    char half_label[48];
#if FA_HAVE_BLAS
    if (row->needs_scores) {   // the naive row names its BLAS: "naive BLAS (OpenBLAS)", "naive BLAS (reference)"
        snprintf(half_label, sizeof half_label, "%s (%s)", row->label, naive_blas_library_short());
        impl.label = half_label;
    }
#endif
    if (row->half) {
        args.dtype = opt->dtype;
        args.q_half = dev->q_half, args.k_half = dev->k_half, args.v_half = dev->v_half;
        snprintf(half_label, sizeof half_label, "%s %s", row->label, fa_dtype_name(opt->dtype));
        impl.label = half_label;
    }
    if (dev->is_cuda) {
        // Phase 3 does not export its shared-memory size: its row says what the memory is, as its own driver does.
        impl.extra_what = row->cuda_smem_bytes ? "shared memory per block" : "tiles in shared memory";
        if (row->cuda_smem_bytes) impl.extra_bytes = row->cuda_smem_bytes(shape->D, opt->block_m, opt->block_n);
    } else if (row->needs_scores) {
        // Naive keeps S (then P, in place) for one head at a time. When even that does not fit, or a size passes
        // what a BLAS int holds, the row is left out with a note.
        impl.block_m = impl.block_n = 0;
        impl.extra_bytes = shape->Sq * (shape->Sk + 1) * (int64_t)sizeof(float);
        impl.extra_what = "S of one head";
        const int fits_int = shape->Sq <= INT_MAX && shape->Sk <= INT_MAX && shape->D <= INT_MAX;
        args.scores = fits_int ? fa_try_alloc_floats(shape->Sq * (shape->Sk + 1)) : NULL;
        if (!args.scores) {
            char size[32];
            fa_format_bytes((double)impl.extra_bytes, size, sizeof size);
            if (fits_int) fa_report_add_note(report, "%s skipped: its S needs %s, more than the machine has free",
                                             row->label, size);
            else fa_report_add_note(report, "%s skipped: a size is larger than a BLAS int", row->label);
            return;
        }
    } else {
        impl.extra_bytes = opt->threads * row->cpu_workspace_bytes(shape->D, opt->block_m, opt->block_n);
        impl.extra_what = "per-thread tiles";
    }
    if (row->half)
        fa_half_forward_outputs(&impl, shape, ref, dev->rule, dev->o_host, dev->is_cuda ? dev->o : NULL,
                                dev->lse_host, dev->is_cuda ? dev->lse : NULL);
    else
        fa_forward_outputs(&impl, shape, ref, dev->o_host, dev->is_cuda ? dev->o : NULL, dev->lse_host,
                           dev->is_cuda ? dev->lse : NULL);
    fa_check_and_time(report, opt, ref, &impl);
    free(args.scores);
}

static void run_device(fa_report *report, const fa_options *opt, const fa_reference *ref, const device_buffers *dev) {
    for (int r = 0; r < N_ROWS; r++) {
        const row_kind *row = &ROWS[r];
        if (!row_selected(opt, row) || (dev->is_cuda ? row->cuda : row->cpu) == NULL) continue;
        if (dev->is_cuda && row->cuda_supports_tiles && !row->cuda_supports_tiles(opt->block_m, opt->block_n)) {
            fa_report_add_note(report, "%s skipped on the GPU: its kernels are compiled for %s, not %d x %d",
                               row->label, row->cuda_tiles_text, opt->block_m, opt->block_n);
            continue;
        }
        run_row(report, opt, ref, dev, row);
    }
}

// --- Step 4: the backward ----------------------------------------------------------------------------------------
static void run_backward_cpu(void *p) {
    const backward_args *a = p;   // fa_backward_rows.h
    flash_backward_tc_cpu(a->shape, a->dtype, a->block_m, a->block_n, a->dq_mode, &a->t);
}
#if FA_HAVE_CUDA && TC_HAVE_MMA_CUDA
static void run_backward_cuda(void *p) {
    const backward_args *a = p;
    flash_backward_tc_cuda(a->shape, a->dtype, a->block_m, a->block_n, a->dq_mode, &a->t);
}
static void run_backward_lean_cuda(void *p) {
    const backward_args *a = p;
    flash_backward_lean_cuda(a->shape, a->dtype, a->block_m, a->block_n, a->dq_mode, &a->t);
}
static void run_backward_held_cuda(void *p) {
    const backward_args *a = p;
    flash_backward_held_cuda(a->shape, a->dtype, a->block_m, a->block_n, a->dq_mode, &a->t);
}
static void run_backward_occupancy_cuda(void *p) {
    const backward_args *a = p;
    flash_backward_occupancy_cuda(a->shape, a->dtype, a->block_m, a->block_n, a->dq_mode, &a->t);
}
#endif

// --- Step 5: the float32 backward with register tiles, on the CPU, beside phase 4's --------------------------------
typedef struct {
    const fa_shape *shape;
    int block_m, block_n, dq_mode;
    backward_tensors t;
} f32_backward_args;

static void run_phase4_backward_cpu(void *p) {
    const f32_backward_args *a = p;
    flash_backward_cpu(a->shape, a->block_m, a->block_n, a->dq_mode, &a->t);
}
static void run_regtile_backward_cpu(void *p) {
    const f32_backward_args *a = p;
    flash_backward_regtile_cpu(a->shape, a->block_m, a->block_n, a->dq_mode, &a->t);
}

// Phase 3 step 3's forward (O, LSE and its residual), then phase 4's deterministic backward and step 5 in each dQ
// variant --dq asks for, checked against the float64 oracle with phase 4's float32 tolerance.
static void check_and_time_f32_backward(fa_report *report, const fa_options *opt, const fa_reference *ref,
                                        const fa_inputs *in, fa_grads host) {
    const fa_shape *s = &opt->shape;
    const fa_strides sq = fa_strides_contiguous(s->H, s->Sq, s->D), sk = fa_strides_contiguous(s->H, s->Sk, s->D);
    float *o = fa_alloc_floats(fa_numel_q(s), "O"), *lse = fa_alloc_floats(fa_numel_lse(s), "LSE");
    float *residual = fa_alloc_floats(fa_numel_lse(s), "LSE residual");
    float *delta = fa_alloc_floats(fa_numel_lse(s), "Delta");
    fa_set_threads(opt->threads);
    const forward_tensors fwd = {in->q, in->k, in->v, sq, sk, sk, o, sq, lse, residual};
    flash_forward_lse_cpu(s, opt->block_m, opt->block_n, &fwd, NULL);
    const backward_tensors t = {in->q, in->k, in->v, o, lse, in->dout, sq, sk, sk, sq, sq, delta,
                                host.dq, host.dk, host.dv, sq, sk, sk, residual};
    const struct {
        const char *label;
        int dq_mode;
        void (*run)(void *);
        int64_t (*workspace)(int64_t D, int block_m, int block_n);
    } rows[3] = {{"phase 4 bwd det", FA_DQ_DETERMINISTIC, run_phase4_backward_cpu, backward_dkdv_cpu_workspace_bytes},
                 {"step 5 bwd det fp32", FA_DQ_DETERMINISTIC, run_regtile_backward_cpu,
                  flash_backward_regtile_cpu_workspace_bytes},
                 {"step 5 bwd atomic fp32", FA_DQ_ATOMIC, run_regtile_backward_cpu,
                  flash_backward_regtile_cpu_workspace_bytes}};
    const double tol[3] = {ref->tol_backward, ref->tol_backward, ref->tol_backward};
    const fa_grads no_device = {NULL, NULL, NULL};
    for (int r = 0; r < 3; r++) {
        if (r == 0 ? opt->no_baselines : !(opt->dq_mode & rows[r].dq_mode)) continue;
        f32_backward_args args = {s, opt->block_m, opt->block_n, rows[r].dq_mode, t};
        fa_implementation impl = {.label = rows[r].label, .is_cuda = 0, .ctx = &args, .run = rows[r].run,
                                  .flops = fa_flops_backward(s), .backward = 1,
                                  .extra_bytes = fa_numel_lse(s) * (int64_t)sizeof(float),   // Delta
                                  .extra_what = "Delta, per-thread tiles", .block_m = opt->block_m,
                                  .block_n = opt->block_n, .causal = s->causal,
                                  .extra_bytes_per_thread = rows[r].workspace(s->D, opt->block_m, opt->block_n)};
        fa_backward_outputs(&impl, s, ref, tol, host, no_device);
        fa_check_and_time(report, opt, ref, &impl);
    }
    free(o);
    free(lse);
    free(residual);
    free(delta);
}

int main(int argc, char **argv) {
    fa_options opt;
    fa_parse_options(argc, argv, &SPEC, &opt);
    if (opt.step >= 1 && opt.step <= 3 && opt.dq_mode != FA_DQ_BOTH)
        fa_die("--dq applies to steps 4 and 5 (the backward) only, not to --step %d", opt.step);
    if (opt.step == 5 && opt.dtype != FA_DTYPE_FP32)
        fa_die("--step 5 is the float32 backward: leave --dtype out (--dtype %s runs step 4)", fa_dtype_name(opt.dtype));
    if (opt.step >= 2 && opt.step <= 4 && opt.dtype == FA_DTYPE_FP32)
        fa_die("--step %d computes on tensor cores in half precision: add --dtype fp16 or --dtype bf16", opt.step);
    // Step 4 runs where the inputs are half and --step is 4 or all.
    const int backward = opt.dtype != FA_DTYPE_FP32 && (opt.step == 0 || opt.step == 4);
    if (opt.cpu_bf16) {   // what step 4's bf16 CPU products run on (bf16_dot.h); the default picks the best
        if (opt.dtype != FA_DTYPE_BF16 || !backward || !(opt.impl & FA_IMPL_CPU))
            fa_die("--cpu-bf16 chooses the unit of step 4's bf16 CPU backward: it needs --dtype bf16, the CPU and "
                   "--step 4 or all");
        if (strcmp(opt.cpu_bf16, "amx") == 0) bf16_dot_force(BF16_DOT_AMX);
        else if (strcmp(opt.cpu_bf16, "avx512") == 0) bf16_dot_force(BF16_DOT_AVX512);
        else if (strcmp(opt.cpu_bf16, "emulated") == 0) bf16_dot_force(BF16_DOT_EMULATED);
        else if (strcmp(opt.cpu_bf16, "fma") == 0) bf16_dot_force(BF16_DOT_NONE);
    }
    // Step 5 runs where the inputs are float32 and --step is 5 or all, on the CPU.
    const int f32_backward = opt.dtype == FA_DTYPE_FP32 && (opt.step == 0 || opt.step == 5) && (opt.impl & FA_IMPL_CPU);
    if ((opt.impl & FA_IMPL_CUDA) && backward && !tc_cuda_supports_head_dim(opt.shape.D))
        fa_die("the tensor-core backward (step 4) takes D = 64 or 128 (got %lld); use --impl cpu for other sizes",
               (long long)opt.shape.D);
    // Checked in a build without CUDA too, so that a command line means the same on every machine. A GPU row whose
    // kernels are not compiled for the tiles is skipped with a note (--step 3 --block-n 128 runs steps 3i and 3j
    // alone); tiles that no selected step's GPU row is compiled for are refused.
    const row_kind *refused = NULL;
    int gpu_steps_for_tiles = 0;
    for (int r = 0; r < N_ROWS; r++) {
        const row_kind *row = &ROWS[r];
        if (!(opt.impl & FA_IMPL_CUDA) || !row_selected(&opt, row) || !row->cuda_supports_tiles || row->step == 0)
            continue;   // a baseline's row does not decide
        if (row->cuda_supports_tiles(opt.block_m, opt.block_n)) gpu_steps_for_tiles++;
        else if (!refused) refused = row;
    }
    if (refused && gpu_steps_for_tiles == 0)
        fa_die("the CUDA kernels of %s are compiled for --block-m x --block-n = %s (got %d x %d); "
               "use --impl cpu for other tile sizes", refused->label, refused->cuda_tiles_text, opt.block_m,
               opt.block_n);
    for (int r = 0; r < N_ROWS; r++) {
        const row_kind *row = &ROWS[r];
        if ((opt.impl & FA_IMPL_CUDA) && row_selected(&opt, row) && row->half &&
            !tc_cuda_supports_head_dim(opt.shape.D))
            fa_die("the tensor-core kernels of %s take D = 64 or 128 (got %lld); use --impl cpu for other sizes",
                   row->label, (long long)opt.shape.D);
    }

    fa_report report;
    fa_report_init(&report, SPEC.program, &opt);
    int use_gpu = fa_use_gpu(&opt, &report);
#if FA_HAVE_BLAS
    if (opt.impl & FA_IMPL_CPU) fa_report_add_library(&report, "naive BLAS row: %s", naive_blas_library());
#else
    if (opt.impl & FA_IMPL_CPU)
        fa_report_add_note(&report, "naive BLAS row skipped: this build found no BLAS (install OpenBLAS, e.g. "
                                    "libopenblas-openmp-dev, and configure again)");
#endif
    if (opt.dtype == FA_DTYPE_FP32 && opt.step == 0)
        fa_report_add_note(&report, "step 2 to 4 rows not run: they compute in half precision (--dtype fp16|bf16)");
    if (use_gpu && opt.step == 5)
        fa_report_add_note(&report, "step 5 has no GPU rows: on the GPU the float32 backward is phase 4's");
#if FA_HAVE_CUDA && TC_HAVE_MMA_CUDA
    char why[256];
    if (use_gpu && opt.dtype != FA_DTYPE_FP32 && opt.step != 1 && tc_cuda_check_device(why, sizeof why) != 0)
        fa_die("%s", why);
#else
    if (use_gpu && opt.dtype != FA_DTYPE_FP32 && opt.step != 1)
        fa_report_add_note(&report, "step 2 to 4 GPU rows not built: no architecture of this build is sm_80 or newer");
#endif

    // With --dtype fp16|bf16 the inputs are rounded to that type (every row and the oracle see the same numbers);
    // the half rows read them in that type and are checked by the half-precision rule.
    // Step 4 adds dO (rounded like the other inputs), the oracle's gradients and the rule for them.
    fa_inputs in;
    fa_make_inputs(&opt, backward || f32_backward, &in);
    fa_reference ref;
    fa_make_reference(&opt, &in, backward || f32_backward, &ref);
    fa_half_inputs half = {0};
    fa_half_rule rule = {0};
    if (opt.dtype != FA_DTYPE_FP32) {
        if (opt.step != 4) fa_make_half_rule(&report, &opt, &in, &ref, &rule);
        if (backward) fa_make_half_backward_rule(&report, &opt, &in, &ref, &rule);
        fa_make_half_inputs(&opt, &in, &half);
    }
    const fa_strides q_strides = fa_strides_contiguous(opt.shape.H, opt.shape.Sq, opt.shape.D);
    const fa_strides kv_strides = fa_strides_contiguous(opt.shape.H, opt.shape.Sk, opt.shape.D);
    fa_grads host = {NULL, NULL, NULL};
    float *delta = NULL;
    if (backward || f32_backward) {
        host.dq = fa_alloc_floats(fa_numel_q(&opt.shape), "dQ");
        host.dk = fa_alloc_floats(fa_numel_kv(&opt.shape), "dK");
        host.dv = fa_alloc_floats(fa_numel_kv(&opt.shape), "dV");
        delta = fa_alloc_floats(fa_numel_lse(&opt.shape), "Delta");
    }

    float *o = fa_alloc_floats(fa_numel_q(&opt.shape), "O");
    float *lse = fa_alloc_floats(fa_numel_lse(&opt.shape), "LSE");
    if (opt.impl & FA_IMPL_CPU) {
        device_buffers cpu = {0, in.q, in.k, in.v, o, lse, o, lse, 0.0, half.q, half.k, half.v, &rule};
        run_device(&report, &opt, &ref, &cpu);
        if (backward) {
            // The forward the backward differentiates: step 3's O and LSE (its own row, if run, checked them).
            fa_set_threads(opt.threads);
            const tc_forward_tensors f = {half.q, half.k, half.v, q_strides, kv_strides, kv_strides, o, q_strides, lse};
            flash_forward_pipeline_cpu(&opt.shape, opt.dtype, opt.block_m, opt.block_n, &f, NULL);
            const tc_backward_tensors t =
                contiguous_backward(&opt.shape, half.q, half.k, half.v, half.dout, o, lse, delta, host);
            fa_report_add_library(&report, "step 4 cpu %s: %s", fa_dtype_name(opt.dtype),
                                  flash_backward_tc_cpu_products(opt.dtype));
            const fa_grads no_device = {NULL, NULL, NULL};
            check_and_time_backward(&report, &opt, &ref, &rule, "step 4 bwd", run_backward_cpu, 0,
                                    flash_backward_tc_cpu_workspace_bytes(opt.shape.D, opt.block_m, opt.block_n),
                                    flash_backward_tc_cpu_staged_bytes(&opt.shape, opt.dtype, opt.block_m, opt.block_n),
                                    opt.block_m, opt.block_n, t, host, no_device, 0.0);
        }
        if (f32_backward) check_and_time_f32_backward(&report, &opt, &ref, &in, host);
    }
#if FA_HAVE_CUDA
    if (use_gpu) {
        fa_device_inputs dev;
        fa_upload_inputs(&opt, &in, &dev);
        float *o_dev = fa_gpu_alloc(fa_numel_q(&opt.shape), "O");
        float *lse_dev = fa_gpu_alloc(fa_numel_lse(&opt.shape), "LSE");
        device_buffers gpu = {1, dev.q, dev.k, dev.v, o_dev, lse_dev, o, lse, dev.upload_ms, NULL, NULL, NULL, &rule};
        fa_device_half_inputs dev_half = {0};
        if (opt.dtype != FA_DTYPE_FP32) {
            fa_upload_half_inputs(&opt, &half, &dev_half);
            gpu.q_half = dev_half.q, gpu.k_half = dev_half.k, gpu.v_half = dev_half.v;
        }
        run_device(&report, &opt, &ref, &gpu);
#if TC_HAVE_MMA_CUDA
        if (backward) {
            // Step 3's forward first, at the tiles its kernels have; the backward's kernels have 64x64 only.
            const int fwd_m = tc_cuda_supports_tiles(opt.block_m, opt.block_n) ? opt.block_m : 128;
            const int fwd_n = tc_cuda_supports_tiles(opt.block_m, opt.block_n) ? opt.block_n : 64;
            const tc_forward_tensors f = {dev_half.q, dev_half.k, dev_half.v, q_strides, kv_strides, kv_strides,
                                          o_dev, q_strides, lse_dev};
            flash_forward_pipeline_cuda(&opt.shape, opt.dtype, fwd_m, fwd_n, &f);
            if (!tc_backward_cuda_supports_tiles(opt.block_m, opt.block_n))
                fa_report_add_note(&report, "step 4 cuda ran with %s tiles, the only ones its kernels have "
                                   "(--block-m %d --block-n %d set the CPU's and the forward's)",
                                   TC_BACKWARD_CUDA_TILES_TEXT, opt.block_m, opt.block_n);
            fa_grads device = {fa_gpu_alloc(fa_numel_q(&opt.shape), "dQ"), fa_gpu_alloc(fa_numel_kv(&opt.shape), "dK"),
                            fa_gpu_alloc(fa_numel_kv(&opt.shape), "dV")};
            float *delta_dev = fa_gpu_alloc(fa_numel_lse(&opt.shape), "Delta");
            const tc_backward_tensors t = contiguous_backward(&opt.shape, dev_half.q, dev_half.k, dev_half.v,
                                                              dev_half.dout, o_dev, lse_dev, delta_dev, device);
            check_and_time_backward(&report, &opt, &ref, &rule, "step 4 bwd", run_backward_cuda, 1, 0, 0,
                                    TC_BACKWARD_CUDA_BLOCK_M, TC_BACKWARD_CUDA_BLOCK_N,
                                    t, host, device, dev.upload_ms + dev_half.upload_ms);
            // Step 4b: the same backward with the forward's instruction cuts (GPU only: step 4's CPU row is its twin).
            check_and_time_backward(&report, &opt, &ref, &rule, "step 4b bwd", run_backward_lean_cuda, 1, 0, 0,
                                    TC_BACKWARD_CUDA_BLOCK_M, TC_BACKWARD_CUDA_BLOCK_N,
                                    t, host, device, dev.upload_ms + dev_half.upload_ms);
            // Steps 4c and 4d change only the deterministic passes (with atomic dQ they are step 4b): det rows only.
            fa_options det_only = opt;
            det_only.dq_mode &= FA_DQ_DETERMINISTIC;
            check_and_time_backward(&report, &det_only, &ref, &rule, "step 4c bwd", run_backward_held_cuda, 1, 0, 0,
                                    TC_BACKWARD_CUDA_BLOCK_M, TC_BACKWARD_CUDA_BLOCK_N,
                                    t, host, device, dev.upload_ms + dev_half.upload_ms);
            check_and_time_backward(&report, &det_only, &ref, &rule, "step 4d bwd", run_backward_occupancy_cuda, 1,
                                    0, 0, TC_BACKWARD_CUDA_BLOCK_M, TC_BACKWARD_CUDA_BLOCK_N,
                                    t, host, device, dev.upload_ms + dev_half.upload_ms);
            fa_gpu_free(device.dq);
            fa_gpu_free(device.dk);
            fa_gpu_free(device.dv);
            fa_gpu_free(delta_dev);
        }
#endif
        if (opt.dtype != FA_DTYPE_FP32) fa_free_device_half_inputs(&dev_half);
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
    free(host.dq);
    free(host.dk);
    free(host.dv);
    free(delta);
    fa_free_reference(&ref);
    fa_free_half_rule(&rule);
    if (opt.dtype != FA_DTYPE_FP32) fa_free_half_inputs(&half);
    fa_free_inputs(&in);
    return status;
}
