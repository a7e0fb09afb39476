// main.c - phase 7 driver: the forward on Hopper's own machinery, beside phase 5's last forward step (mma.sync,
// swizzle, cp.async) on the same input, every row checked against the same float64 oracle by the half-precision
// rule. The CPU row is the twin the phase 7 steps share: phase 5 step 3's, which rounds where they round.
//
// Run: build/bin/phase7_hopper --dtype bf16                           (class defaults: B=1 H=4 S=1024 D=64)
//      build/bin/phase7_hopper --impl cuda --dtype bf16 --B 4 --H 16 --S 4096 --D 128 --check-heads 1
//      build/bin/phase7_hopper --impl cuda --dtype fp16 --Sq 130 --Sk 100 --D 64 --causal
//      build/bin/phase7_hopper --step 6 --dtype bf16 --Sq 130 --Sk 100 --D 128 --causal --dq both   (the backward)
// --step 6 is the backward alone: its rows (phase 5 step 4's CPU twin and GPU kernels, step 6 on wgmma, step 6a with
// its dQ added by the TMA, 6b, its dQ product queued behind dK's, 6c, two warpgroups over 128 keys, 6d, its
// descriptors built once, 6e, exp2 in one instruction, 6f, the element-wise work beside the products, 6g, Q and dO
// by the TMA, 6h, dQ handed to the TMA by each warpgroup, 6i, 128 queries a tile at D = 64, and 6j, dQ transposed
// and 80 queries a tile at D = 128; 6a to 6j atomic only), in each dQ variant --dq asks for, differentiate a
// forward's O and LSE (phase 5 step 3's on the CPU, step 3's on the GPU).
// The timeline build (target phase7_timeline, timeline.h) also takes --timeline FILE: step 3's warp roles over time,
// as CSV for tools/plot_timeline.py; the release build refuses it.
#include "fa_driver.h"
#include "fa_gpu.h"
#include "fa_half.h"
#include "fa_baselines.h"   // phase 5 step 3: the baseline and the CPU twin
#include "fa_backward_rows.h"   // the backward rows of phase 5 step 4, and of step 6
#include "hopper.h"
#include "timeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int CUDA_HEAD_DIMS[] = {64, 128, 0};

static const fa_cli_spec SPEC = {
    .program = "phase7_hopper",
    .summary = "Phase 7: the forward on Hopper (sm_90a): (1) wgmma from shared memory, (2) TMA, (3) warp specialisation, (4) ping-pong of the consumer warpgroups, with (4a) wider wgmmas, (4b) exp2 in one instruction and (4c) three consumers (192-row tiles) at D = 64, (4d) K and V released separately, (4e) softmax beside the previous P V in each turn, (4f) a persistent grid taking tiles from a queue, (4g) the causal bookkeeping worked out once per tile, (4h) the causal queue's heavy tiles in L2-sized groups of heads, (4i) wgmma descriptors built once, (4j) each lane's two row maxima side by side, (5) overlap inside a warpgroup; beside phase 5 step 3 (mma.sync) "
               "on the same input; (6) the backward with wgmma, beside phase 5 step 4.",
    .defaults = {.B = 1, .H = 4, .Sq = 1024, .Sk = 1024, .D = 64},
    .default_block_m = 128,
    .default_block_n = 64,
    .max_step = 6,
    .has_dq_mode = 1,   // step 6: --dq deterministic|atomic|both
    .cuda_head_dims = CUDA_HEAD_DIMS,
    .has_dtype = 1,
};

typedef struct {
    const fa_shape *shape;
    int dtype, block_m, block_n;
    tc_forward_tensors t;   // dtype bits in, float32 out, host or device
} row_args;

static void run_pipeline_cpu(void *p) {
    const row_args *a = p;
    flash_forward_pipeline_cpu(a->shape, a->dtype, a->block_m, a->block_n, &a->t, NULL);
}
#if FA_HAVE_CUDA && TC_HAVE_MMA_CUDA && HOPPER_HAVE_CUDA
static void run_pipeline_cuda(void *p) {
    const row_args *a = p;
    flash_forward_pipeline_cuda(a->shape, a->dtype, a->block_m, a->block_n, &a->t);
}
static void run_wgmma_cuda(void *p) {
    const row_args *a = p;
    flash_forward_wgmma_cuda(a->shape, a->dtype, a->block_m, a->block_n, &a->t);
}
static void run_tma_cuda(void *p) {
    const row_args *a = p;
    flash_forward_tma_cuda(a->shape, a->dtype, a->block_m, a->block_n, &a->t);
}
static void run_warp_specialized_cuda(void *p) {
    const row_args *a = p;
    flash_forward_warp_specialized_cuda(a->shape, a->dtype, a->block_m, a->block_n, &a->t);
}
static void run_overlap_cuda(void *p) {
    const row_args *a = p;
    flash_forward_overlap_cuda(a->shape, a->dtype, a->block_m, a->block_n, &a->t);
}
static void run_pingpong_cuda(void *p) {
    const row_args *a = p;
    flash_forward_pingpong_cuda(a->shape, a->dtype, a->block_m, a->block_n, &a->t);
}
static void run_wide_wgmma_cuda(void *p) {
    const row_args *a = p;
    flash_forward_wide_wgmma_cuda(a->shape, a->dtype, a->block_m, a->block_n, &a->t);
}
static void run_exp2_ftz_cuda(void *p) {
    const row_args *a = p;
    flash_forward_wgmma_exp2_ftz_cuda(a->shape, a->dtype, a->block_m, a->block_n, &a->t);
}
static void run_three_consumers_cuda(void *p) {
    const row_args *a = p;
    flash_forward_three_consumers_cuda(a->shape, a->dtype, a->block_m, a->block_n, &a->t);
}
static void run_split_barriers_cuda(void *p) {
    const row_args *a = p;
    flash_forward_split_barriers_cuda(a->shape, a->dtype, a->block_m, a->block_n, &a->t);
}
static void run_overlap_in_turn_cuda(void *p) {
    const row_args *a = p;
    flash_forward_overlap_in_turn_cuda(a->shape, a->dtype, a->block_m, a->block_n, &a->t);
}
static void run_persistent_cuda(void *p) {
    const row_args *a = p;
    flash_forward_persistent_cuda(a->shape, a->dtype, a->block_m, a->block_n, &a->t);
}
static void run_stages_once_cuda(void *p) {
    const row_args *a = p;
    flash_forward_stages_once_cuda(a->shape, a->dtype, a->block_m, a->block_n, &a->t);
}
static void run_l2_head_groups_cuda(void *p) {
    const row_args *a = p;
    flash_forward_l2_head_groups_cuda(a->shape, a->dtype, a->block_m, a->block_n, &a->t);
}
static void run_descriptors_once_cuda(void *p) {
    const row_args *a = p;
    flash_forward_descriptors_once_cuda(a->shape, a->dtype, a->block_m, a->block_n, &a->t);
}
static void run_two_rows_together_cuda(void *p) {
    const row_args *a = p;
    flash_forward_two_rows_together_cuda(a->shape, a->dtype, a->block_m, a->block_n, &a->t);
}
#else
#define run_pipeline_cuda NULL   // phase 7 is built for sm_90a only (phase7_hopper/CMakeLists.txt)
#define run_wgmma_cuda NULL
#define run_tma_cuda NULL
#define run_warp_specialized_cuda NULL
#define run_pingpong_cuda NULL
#define run_wide_wgmma_cuda NULL
#define run_exp2_ftz_cuda NULL
#define run_three_consumers_cuda NULL
#define run_split_barriers_cuda NULL
#define run_overlap_in_turn_cuda NULL
#define run_persistent_cuda NULL
#define run_stages_once_cuda NULL
#define run_l2_head_groups_cuda NULL
#define run_descriptors_once_cuda NULL
#define run_two_rows_together_cuda NULL
#define run_overlap_cuda NULL
#endif

#define BACKWARD_STEP 6

// The rows, in the order they are printed. step 0: the baseline, run whatever --step says.
typedef struct {
    const char *label;
    int step;
    void (*cpu)(void *args);
    void (*cuda)(void *args);
    int64_t (*cuda_smem_bytes)(int64_t D, int block_m, int block_n);
    int (*cuda_supports)(int64_t D, int block_m, int block_n);   // its kernels have these tiles at this D
    const char *cuda_tiles_text;
} row_kind;

// Which tiles each row's kernels have (only those of steps 4c to 4j depend on D).
static int baseline_tiles(int64_t D, int block_m, int block_n) {
    (void)D;
    return tc_cuda_supports_tiles(block_m, block_n);
}
static int one_consumer_tiles(int64_t D, int block_m, int block_n) {
    (void)D;
    return hopper_cuda_supports_tiles(block_m, block_n);
}
static int warp_specialized_tiles(int64_t D, int block_m, int block_n) {
    (void)D;
    return hopper_ws_cuda_supports_tiles(block_m, block_n);
}

static const row_kind ROWS[] = {
    {"phase 5 step 3", 0, run_pipeline_cpu, run_pipeline_cuda, flash_forward_pipeline_cuda_smem_bytes,
     baseline_tiles, TC_CUDA_TILES_TEXT},
    {"step 1 wgmma", 1, NULL, run_wgmma_cuda, flash_forward_wgmma_cuda_smem_bytes, one_consumer_tiles,
     HOPPER_CUDA_TILES_TEXT},
    {"step 2 tma", 2, NULL, run_tma_cuda, flash_forward_tma_cuda_smem_bytes, one_consumer_tiles,
     HOPPER_CUDA_TILES_TEXT},
    {"step 3 warp roles", 3, NULL, run_warp_specialized_cuda, flash_forward_warp_specialized_cuda_smem_bytes,
     warp_specialized_tiles, HOPPER_WS_CUDA_TILES_TEXT},
    {"step 4 ping-pong", 4, NULL, run_pingpong_cuda, flash_forward_warp_specialized_cuda_smem_bytes,
     warp_specialized_tiles, HOPPER_WS_CUDA_TILES_TEXT},
    {"step 4a wide wgmma", 4, NULL, run_wide_wgmma_cuda, flash_forward_warp_specialized_cuda_smem_bytes,
     warp_specialized_tiles, HOPPER_WS_CUDA_TILES_TEXT},
    {"step 4b exp2 ftz", 4, NULL, run_exp2_ftz_cuda, flash_forward_warp_specialized_cuda_smem_bytes,
     warp_specialized_tiles, HOPPER_WS_CUDA_TILES_TEXT},
    {"step 4c three consumers", 4, NULL, run_three_consumers_cuda, flash_forward_warp_specialized_cuda_smem_bytes,
     hopper_many_consumers_supports, HOPPER_MANY_CONSUMERS_TILES_TEXT},
    {"step 4d split barriers", 4, NULL, run_split_barriers_cuda, flash_forward_split_barriers_cuda_smem_bytes,
     hopper_many_consumers_supports, HOPPER_MANY_CONSUMERS_TILES_TEXT},
    {"step 4e overlap in turn", 4, NULL, run_overlap_in_turn_cuda, flash_forward_split_barriers_cuda_smem_bytes,
     hopper_many_consumers_supports, HOPPER_MANY_CONSUMERS_TILES_TEXT},
    {"step 4f persistent", 4, NULL, run_persistent_cuda, flash_forward_persistent_cuda_smem_bytes,
     hopper_many_consumers_supports, HOPPER_MANY_CONSUMERS_TILES_TEXT},
    {"step 4g stages once", 4, NULL, run_stages_once_cuda, flash_forward_persistent_cuda_smem_bytes,
     hopper_many_consumers_supports, HOPPER_MANY_CONSUMERS_TILES_TEXT},
    {"step 4h l2 head groups", 4, NULL, run_l2_head_groups_cuda, flash_forward_persistent_cuda_smem_bytes,
     hopper_many_consumers_supports, HOPPER_MANY_CONSUMERS_TILES_TEXT},
    {"step 4i descriptors", 4, NULL, run_descriptors_once_cuda, flash_forward_persistent_cuda_smem_bytes,
     hopper_many_consumers_supports, HOPPER_MANY_CONSUMERS_TILES_TEXT},
    {"step 4j rows together", 4, NULL, run_two_rows_together_cuda, flash_forward_persistent_cuda_smem_bytes,
     hopper_many_consumers_supports, HOPPER_MANY_CONSUMERS_TILES_TEXT},
    {"step 5 overlap", 5, NULL, run_overlap_cuda, flash_forward_warp_specialized_cuda_smem_bytes,
     warp_specialized_tiles, HOPPER_WS_CUDA_TILES_TEXT},
};
static const int N_ROWS = (int)(sizeof ROWS / sizeof ROWS[0]);

static int row_selected(const fa_options *opt, const row_kind *row) {
    if (opt->step == BACKWARD_STEP) return 0;   // the backward alone: no forward rows
    return row->step == 0 || opt->step == 0 || opt->step == row->step;
}
// A GPU row runs when its kernels have the tiles asked for (at this D). Otherwise it is left out with a note: the
// baseline's row, and a row beside others of the same step that have them (step 4's variants: only 4c to 4j have
// 192-row tiles). A step none of whose rows has them is an error.
static int row_has_kernel(const fa_options *opt, const row_kind *row) {
    return row->cuda_supports(opt->shape.D, opt->block_m, opt->block_n);
}
static void check_step_has_kernel(const fa_options *opt, int step) {
    // "step 4 ping-pong: 128x64 or 128x128; ..." for the message: step 4's eleven rows take 710 characters.
    char kernels[1024] = "";
    for (int r = 0; r < N_ROWS; r++) {
        if (ROWS[r].step != step) continue;
        if (row_has_kernel(opt, &ROWS[r])) return;
        const size_t used = strlen(kernels);
        snprintf(kernels + used, sizeof kernels - used, "%s%s: %s", used ? "; " : "", ROWS[r].label,
                 ROWS[r].cuda_tiles_text);
    }
    if (kernels[0])
        fa_die("no CUDA kernel of step %d has --block-m x --block-n = %d x %d at D = %lld (%s); use --impl cpu for "
               "other tile sizes", step, opt->block_m, opt->block_n, (long long)opt->shape.D, kernels);
}

static void run_row(fa_report *report, const fa_options *opt, const fa_reference *ref, const fa_half_rule *rule,
                    int is_cuda, const void *q, const void *k, const void *v, float *o, float *lse, float *o_host,
                    float *lse_host, double upload_ms, const row_kind *row) {
    const fa_shape *shape = &opt->shape;
    const fa_strides q_strides = fa_strides_contiguous(shape->H, shape->Sq, shape->D);
    const fa_strides kv_strides = fa_strides_contiguous(shape->H, shape->Sk, shape->D);
    row_args args = {shape, opt->dtype, opt->block_m, opt->block_n,
                     {q, k, v, q_strides, kv_strides, kv_strides, o, q_strides, lse}};
    char label[48];
    snprintf(label, sizeof label, "%s %s", row->label, fa_dtype_name(opt->dtype));
    fa_implementation impl = {.label = label, .is_cuda = is_cuda, .ctx = &args, .run = is_cuda ? row->cuda : row->cpu,
                              .flops = fa_flops_forward(shape), .causal = shape->causal, .upload_ms = upload_ms,
                              .block_m = opt->block_m, .block_n = opt->block_n};
    if (is_cuda) {
        impl.extra_what = "shared memory per block";
        impl.extra_bytes = row->cuda_smem_bytes(shape->D, opt->block_m, opt->block_n);
    } else {
        impl.extra_what = "per-thread tiles";
        impl.extra_bytes = opt->threads * flash_forward_pipeline_cpu_workspace_bytes(shape->D, opt->block_m,
                                                                                      opt->block_n);
    }
    fa_half_forward_outputs(&impl, shape, ref, rule, o_host, is_cuda ? o : NULL, lse_host, is_cuda ? lse : NULL);
    fa_check_and_time(report, opt, ref, &impl);
}

// --- Step 6: the backward ----------------------------------------------------------------------------------------
static void run_backward_tc_cpu(void *p) {
    const backward_args *a = p;   // fa_backward_rows.h
    flash_backward_tc_cpu(a->shape, a->dtype, a->block_m, a->block_n, a->dq_mode, &a->t);
}
#if FA_HAVE_CUDA && TC_HAVE_MMA_CUDA && HOPPER_HAVE_CUDA
static void run_backward_tc_cuda(void *p) {
    const backward_args *a = p;
    flash_backward_tc_cuda(a->shape, a->dtype, a->block_m, a->block_n, a->dq_mode, &a->t);
}
static void run_backward_wgmma_cuda(void *p) {
    const backward_args *a = p;
    flash_backward_wgmma_cuda(a->shape, a->dtype, a->block_m, a->block_n, a->dq_mode, &a->t);
}
static void run_backward_tma_dq_cuda(void *p) {
    const backward_args *a = p;
    flash_backward_tma_dq_cuda(a->shape, a->dtype, a->block_m, a->block_n, a->dq_mode, &a->t);
}
static void run_backward_dq_beside_dkdv_cuda(void *p) {
    const backward_args *a = p;
    flash_backward_dq_beside_dkdv_cuda(a->shape, a->dtype, a->block_m, a->block_n, a->dq_mode, &a->t);
}
static void run_backward_two_warpgroups_cuda(void *p) {
    const backward_args *a = p;
    flash_backward_two_warpgroups_cuda(a->shape, a->dtype, a->block_m, a->block_n, a->dq_mode, &a->t);
}
static void run_backward_descriptors_once_cuda(void *p) {
    const backward_args *a = p;
    flash_backward_descriptors_once_cuda(a->shape, a->dtype, a->block_m, a->block_n, a->dq_mode, &a->t);
}
static void run_backward_exp2_ftz_cuda(void *p) {
    const backward_args *a = p;
    flash_backward_exp2_ftz_cuda(a->shape, a->dtype, a->block_m, a->block_n, a->dq_mode, &a->t);
}
static void run_backward_overlap_products_cuda(void *p) {
    const backward_args *a = p;
    flash_backward_overlap_products_cuda(a->shape, a->dtype, a->block_m, a->block_n, a->dq_mode, &a->t);
}
static void run_backward_q_tiles_by_tma_cuda(void *p) {
    const backward_args *a = p;
    flash_backward_q_tiles_by_tma_cuda(a->shape, a->dtype, a->block_m, a->block_n, a->dq_mode, &a->t);
}
static void run_backward_dq_per_warpgroup_cuda(void *p) {
    const backward_args *a = p;
    flash_backward_dq_per_warpgroup_cuda(a->shape, a->dtype, a->block_m, a->block_n, a->dq_mode, &a->t);
}
static void run_backward_wide_q_tiles_cuda(void *p) {
    const backward_args *a = p;
    flash_backward_wide_q_tiles_cuda(a->shape, a->dtype, a->block_m, a->block_n, a->dq_mode, &a->t);
}
static void run_backward_transposed_dq_cuda(void *p) {
    const backward_args *a = p;
    flash_backward_transposed_dq_cuda(a->shape, a->dtype, a->block_m, a->block_n, a->dq_mode, &a->t);
}
#endif

// The CPU twin: phase 5 step 4's backward of phase 5 step 3's forward.
static void backward_cpu(fa_report *report, const fa_options *opt, const fa_reference *ref,
                         const fa_half_rule *rule, const fa_half_inputs *half, fa_grads host) {
    const fa_shape *s = &opt->shape;
    const fa_strides sq = fa_strides_contiguous(s->H, s->Sq, s->D), sk = fa_strides_contiguous(s->H, s->Sk, s->D);
    float *o = fa_alloc_floats(fa_numel_q(s), "O"), *lse = fa_alloc_floats(fa_numel_lse(s), "LSE");
    float *delta = fa_alloc_floats(fa_numel_lse(s), "Delta");
    fa_set_threads(opt->threads);
    const tc_forward_tensors f = {half->q, half->k, half->v, sq, sk, sk, o, sq, lse};
    flash_forward_pipeline_cpu(s, opt->dtype, opt->block_m, opt->block_n, &f, NULL);
    const tc_backward_tensors t = contiguous_backward(s, half->q, half->k, half->v, half->dout, o, lse, delta, host);
    fa_report_add_library(report, "phase 5 step 4 cpu %s: %s", fa_dtype_name(opt->dtype),
                          flash_backward_tc_cpu_products(opt->dtype));
    const fa_grads no_device = {NULL, NULL, NULL};
    check_and_time_backward(report, opt, ref, rule, "p5 step 4 bwd", run_backward_tc_cpu, 0,
                            flash_backward_tc_cpu_workspace_bytes(s->D, opt->block_m, opt->block_n),
                            flash_backward_tc_cpu_staged_bytes(s, opt->dtype, opt->block_m, opt->block_n), opt->block_m,
                            opt->block_n, t, host, no_device, 0.0);
    free(o), free(lse), free(delta);
}

#if FA_HAVE_CUDA && TC_HAVE_MMA_CUDA && HOPPER_HAVE_CUDA
// On the GPU: step 3's forward (at 128 x 64, or the tiles asked for when it has them), then phase 5 step 4's backward,
// step 6's, 6a's and 6b's, at the 64 x 64 tiles their kernels have, 6c's to 6h's at their 64 x 128,
// 6i's at 128 x 128 (D = 64) or 64 x 128, and 6j's at 128 x 128 (D = 64) or 80 x 128.
static void backward_cuda(fa_report *report, const fa_options *opt, const fa_reference *ref,
                          const fa_half_rule *rule, const fa_device_half_inputs *dev, fa_grads host) {
    const fa_shape *s = &opt->shape;
    const fa_strides sq = fa_strides_contiguous(s->H, s->Sq, s->D), sk = fa_strides_contiguous(s->H, s->Sk, s->D);
    float *o = fa_gpu_alloc(fa_numel_q(s), "O"), *lse = fa_gpu_alloc(fa_numel_lse(s), "LSE");
    float *delta = fa_gpu_alloc(fa_numel_lse(s), "Delta");
    const int ws_tiles = hopper_ws_cuda_supports_tiles(opt->block_m, opt->block_n);
    const tc_forward_tensors f = {dev->q, dev->k, dev->v, sq, sk, sk, o, sq, lse};
    flash_forward_warp_specialized_cuda(s, opt->dtype, ws_tiles ? opt->block_m : 128, ws_tiles ? opt->block_n : 64,
                                        &f);
    if (!tc_backward_cuda_supports_tiles(opt->block_m, opt->block_n))
        fa_report_add_note(report, "the GPU backward rows ran with the only tiles their kernels have, %s (steps 6c "
                           "to 6h: %s; 6i: %s; 6j: %s; --block-m %d --block-n %d set the CPU's)",
                           TC_BACKWARD_CUDA_TILES_TEXT, HOPPER_TWO_WARPGROUPS_TILES_TEXT, HOPPER_WIDE_Q_TILES_TEXT,
                           HOPPER_TRANSPOSED_DQ_TEXT, opt->block_m, opt->block_n);
    fa_grads device = {fa_gpu_alloc(fa_numel_q(s), "dQ"), fa_gpu_alloc(fa_numel_kv(s), "dK"),
                       fa_gpu_alloc(fa_numel_kv(s), "dV")};
    const tc_backward_tensors t = contiguous_backward(s, dev->q, dev->k, dev->v, dev->dout, o, lse, delta, device);
    check_and_time_backward(report, opt, ref, rule, "p5 step 4 bwd", run_backward_tc_cuda, 1, 0, 0,
                            TC_BACKWARD_CUDA_BLOCK_M, TC_BACKWARD_CUDA_BLOCK_N, t, host, device, dev->upload_ms);
    check_and_time_backward(report, opt, ref, rule, "step 6 bwd", run_backward_wgmma_cuda, 1, 0, 0,
                            TC_BACKWARD_CUDA_BLOCK_M, TC_BACKWARD_CUDA_BLOCK_N, t, host, device, dev->upload_ms);
    // Steps 6a to 6j add dQ in the order the TMA's adds arrive: they have atomic rows only.
    if (opt->dq_mode == FA_DQ_DETERMINISTIC) {
        fa_report_add_note(report, "steps 6a to 6j have no deterministic dQ (the TMA adds its shares in arrival "
                           "order): --dq atomic or --dq both runs them");
    } else {
        fa_options atomic_only = *opt;
        atomic_only.dq_mode = FA_DQ_ATOMIC;
        // Each row at its kernels' only tiles: 64 x 64 for 6a and 6b, 64 x 128 (two warpgroups) from 6c on, and
        // 128 x 128 at D = 64 for 6i and 6j, 80 x 128 at D = 128 for 6j.
        const struct { const char *label; void (*run)(void *); int block_m, block_n; } tma_rows[] = {
            {"step 6a bwd", run_backward_tma_dq_cuda, TC_BACKWARD_CUDA_BLOCK_M, TC_BACKWARD_CUDA_BLOCK_N},
            {"step 6b bwd", run_backward_dq_beside_dkdv_cuda, TC_BACKWARD_CUDA_BLOCK_M, TC_BACKWARD_CUDA_BLOCK_N},
            {"step 6c bwd", run_backward_two_warpgroups_cuda, HOPPER_TWO_WARPGROUPS_BLOCK_M,
             HOPPER_TWO_WARPGROUPS_BLOCK_N},
            {"step 6d bwd", run_backward_descriptors_once_cuda, HOPPER_TWO_WARPGROUPS_BLOCK_M,
             HOPPER_TWO_WARPGROUPS_BLOCK_N},
            {"step 6e bwd", run_backward_exp2_ftz_cuda, HOPPER_TWO_WARPGROUPS_BLOCK_M, HOPPER_TWO_WARPGROUPS_BLOCK_N},
            {"step 6f bwd", run_backward_overlap_products_cuda, HOPPER_TWO_WARPGROUPS_BLOCK_M,
             HOPPER_TWO_WARPGROUPS_BLOCK_N},
            {"step 6g bwd", run_backward_q_tiles_by_tma_cuda, HOPPER_TWO_WARPGROUPS_BLOCK_M,
             HOPPER_TWO_WARPGROUPS_BLOCK_N},
            {"step 6h bwd", run_backward_dq_per_warpgroup_cuda, HOPPER_TWO_WARPGROUPS_BLOCK_M,
             HOPPER_TWO_WARPGROUPS_BLOCK_N},
            {"step 6i bwd", run_backward_wide_q_tiles_cuda, flash_backward_wide_q_tiles_block_m(s->D),
             HOPPER_TWO_WARPGROUPS_BLOCK_N},
            {"step 6j bwd", run_backward_transposed_dq_cuda, flash_backward_transposed_dq_block_m(s->D),
             HOPPER_TWO_WARPGROUPS_BLOCK_N},
        };
        for (size_t r = 0; r < sizeof tma_rows / sizeof tma_rows[0]; r++)
            check_and_time_backward(report, &atomic_only, ref, rule, tma_rows[r].label, tma_rows[r].run, 1, 0, 0,
                                    tma_rows[r].block_m, tma_rows[r].block_n, t, host, device, dev->upload_ms);
    }
    fa_gpu_free(device.dq), fa_gpu_free(device.dk), fa_gpu_free(device.dv);
    fa_gpu_free(o), fa_gpu_free(lse), fa_gpu_free(delta);
}
#endif

// --timeline FILE, taken out of argv before the shared parser sees it; NULL when absent.
static const char *take_timeline_flag(int *argc, char **argv) {
    const char *path = NULL;
    for (int i = 1; i < *argc; i++) {
        if (strcmp(argv[i], "--timeline") != 0) continue;
        if (i + 1 >= *argc || argv[i + 1][0] == '\0') fa_die("--timeline needs a file name (the CSV to write)");
        path = argv[i + 1];
        for (int j = i; j + 2 <= *argc; j++) argv[j] = argv[j + 2];   // (argv[argc] is NULL, and moves too)
        *argc -= 2;
        i--;
    }
    if (path && !HOPPER_TIMELINE_BUILD)
        fa_die("--timeline needs the timeline build of phase 7: cmake --build BUILD --target phase7_timeline, then "
               "BUILD/bin/phase7_timeline");
    return path;
}

#if FA_HAVE_CUDA && HOPPER_TIMELINE_BUILD
// Step 3 once more, with its stamps on, and the events as CSV.
static void record_timeline(fa_report *report, const fa_options *opt, const fa_device_half_inputs *dev, float *o,
                            float *lse, const char *path) {
    const fa_shape *shape = &opt->shape;
    const fa_strides q_strides = fa_strides_contiguous(shape->H, shape->Sq, shape->D);
    const fa_strides kv_strides = fa_strides_contiguous(shape->H, shape->Sk, shape->D);
    const tc_forward_tensors t = {dev->q, dev->k, dev->v, q_strides, kv_strides, kv_strides, o, q_strides, lse};
    hopper_timeline_event *events = malloc(sizeof *events * HOPPER_TIMELINE_EVENTS);
    if (!events) fa_die("out of host memory for the timeline");
    flash_forward_warp_specialized_timeline_cuda(shape, opt->dtype, opt->block_m, opt->block_n, &t, events);
    const int64_t written = hopper_timeline_write_csv(path, events, HOPPER_TIMELINE_EVENTS);
    free(events);
    if (written < 0) fa_die("--timeline: cannot write %s", path);
    fa_report_add_note(report, "timeline: %lld events of step 3 (blocks 0-%d of head 0) written to %s",
                       (long long)written, HOPPER_TIMELINE_BLOCKS - 1, path);
}
#endif

int main(int argc, char **argv) {
    const char *timeline_path = take_timeline_flag(&argc, argv);
    fa_options opt;
    fa_parse_options(argc, argv, &SPEC, &opt);
    if (opt.dtype == FA_DTYPE_FP32)
        fa_die("phase 7 computes on tensor cores in half precision: add --dtype fp16 or --dtype bf16");
    const int backward = opt.step == BACKWARD_STEP;
    if (!backward && opt.dq_mode != FA_DQ_BOTH)
        fa_die("--dq applies to step 6 (the backward) only: add --step 6");
    if (backward && timeline_path) fa_die("--timeline records step 3, a forward: leave --step 6 out");
    if (backward && (opt.impl & FA_IMPL_CUDA) && !tc_cuda_supports_head_dim(opt.shape.D))
        fa_die("the GPU backward takes D = 64 or 128 (got %lld); use --impl cpu for other sizes",
               (long long)opt.shape.D);
    if (timeline_path && !hopper_ws_cuda_supports_tiles(opt.block_m, opt.block_n))
        fa_die("--timeline records step 3, whose tiles are --block-m x --block-n = %s (got %d x %d)",
               HOPPER_WS_CUDA_TILES_TEXT, opt.block_m, opt.block_n);
    if (timeline_path && !(opt.impl & FA_IMPL_CUDA)) fa_die("--timeline records a GPU kernel: drop --impl cpu");
    for (int step = 1; step < BACKWARD_STEP && (opt.impl & FA_IMPL_CUDA); step++)
        if (opt.step == 0 || opt.step == step) check_step_has_kernel(&opt, step);

    fa_report report;
    fa_report_init(&report, SPEC.program, &opt);
    int use_gpu = fa_use_gpu(&opt, &report);
#if FA_HAVE_CUDA && TC_HAVE_MMA_CUDA && HOPPER_HAVE_CUDA
    char why[256];
    if (use_gpu && hopper_cuda_check_device(why, sizeof why) != 0) {
        if (!(opt.impl & FA_IMPL_CPU)) {
            printf("skipped: %s\n", why);
            return 77;
        }
        fa_report_add_note(&report, "GPU rows skipped: %s", why);
        use_gpu = 0;
    }
#else
    if (use_gpu) {
        if (!(opt.impl & FA_IMPL_CPU)) {
            printf("skipped: phase 7's kernels are built only where the CUDA build includes sm_90a\n");
            return 77;
        }
        fa_report_add_note(&report, "GPU rows not built: phase 7 is built for sm_90a only");
        use_gpu = 0;
    }
#endif

    fa_inputs in;
    fa_make_inputs(&opt, backward, &in);   // the backward adds dO
    fa_reference ref;
    fa_make_reference(&opt, &in, backward, &ref);
    fa_half_rule rule = {0};
    if (backward)
        fa_make_half_backward_rule(&report, &opt, &in, &ref, &rule);
    else
        fa_make_half_rule(&report, &opt, &in, &ref, &rule);
    fa_half_inputs half = {0};
    fa_make_half_inputs(&opt, &in, &half);

    float *o = fa_alloc_floats(fa_numel_q(&opt.shape), "O");
    float *lse = fa_alloc_floats(fa_numel_lse(&opt.shape), "LSE");
    fa_grads host = {NULL, NULL, NULL};
    if (backward) {
        host.dq = fa_alloc_floats(fa_numel_q(&opt.shape), "dQ");
        host.dk = fa_alloc_floats(fa_numel_kv(&opt.shape), "dK");
        host.dv = fa_alloc_floats(fa_numel_kv(&opt.shape), "dV");
        if (opt.impl & FA_IMPL_CPU) backward_cpu(&report, &opt, &ref, &rule, &half, host);
    }
    for (int r = 0; r < N_ROWS && (opt.impl & FA_IMPL_CPU); r++)
        if (row_selected(&opt, &ROWS[r]) && ROWS[r].cpu)
            run_row(&report, &opt, &ref, &rule, 0, half.q, half.k, half.v, o, lse, o, lse, 0.0, &ROWS[r]);
#if FA_HAVE_CUDA
    if (use_gpu) {
        fa_device_half_inputs dev_half = {0};
        fa_upload_half_inputs(&opt, &half, &dev_half);
        float *o_dev = fa_gpu_alloc(fa_numel_q(&opt.shape), "O");
        float *lse_dev = fa_gpu_alloc(fa_numel_lse(&opt.shape), "LSE");
        for (int r = 0; r < N_ROWS; r++) {
            if (!row_selected(&opt, &ROWS[r]) || !ROWS[r].cuda) continue;
            if (!row_has_kernel(&opt, &ROWS[r])) {
                fa_report_add_note(&report, "%s cuda left out: its kernels have %s tiles, not %d x %d", ROWS[r].label,
                                   ROWS[r].cuda_tiles_text, opt.block_m, opt.block_n);
                continue;
            }
            run_row(&report, &opt, &ref, &rule, 1, dev_half.q, dev_half.k, dev_half.v, o_dev, lse_dev, o, lse,
                    dev_half.upload_ms, &ROWS[r]);
        }
#if TC_HAVE_MMA_CUDA && HOPPER_HAVE_CUDA
        if (backward) backward_cuda(&report, &opt, &ref, &rule, &dev_half, host);
#endif
#if HOPPER_TIMELINE_BUILD
        if (timeline_path) record_timeline(&report, &opt, &dev_half, o_dev, lse_dev, timeline_path);
#endif
        fa_gpu_free(o_dev);
        fa_gpu_free(lse_dev);
        fa_free_device_half_inputs(&dev_half);
    }
#endif
    if (timeline_path && !use_gpu) fa_report_add_note(&report, "timeline not recorded: no Hopper GPU in use");
    int status = fa_finish(&report, &opt);
    free(o);
    free(lse);
    free(host.dq);
    free(host.dk);
    free(host.dv);
    fa_free_reference(&ref);
    fa_free_half_rule(&rule);
    fa_free_half_inputs(&half);
    fa_free_inputs(&in);
    return status;
}
