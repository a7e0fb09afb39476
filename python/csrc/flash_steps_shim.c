// flash_steps_shim.c - the one file where the Python package (python/flash_steps/) calls the suite's kernels.
//
// The package loads the shared library built from this file and the kernels' own static libraries
// (python/CMakeLists.txt) with ctypes, and registers PyTorch operators around the four functions below:
//   fs_check        is this problem one the kernels take? 0, or -1 and one line in `why` (never exits);
//   fs_kernel_name  which of the suite's kernels a problem goes to, for messages and logs;
//   fs_forward      O, LSE and LSE's residual;
//   fs_backward     dQ, dK and dV.
// The kernels stop the process on bad input (fa_die, exit status 2), as a command-line program should; a Python
// process must never exit, so the package calls fs_check first and raises a Python error when it fails, and
// fs_forward / fs_backward are only called on problems fs_check accepted. Which kernel serves which problem:
//   float32, no feature       phase 3 step 3 forward (3_lse_*), phase 4 backward (deterministic or atomic dQ)
//   float32 with GQA, a       phase 6's kernel for that feature, forward and backward (deterministic dQ);
//     window or a softcap     one feature at a time, since phase 6 has one kernel per feature
//   fp16 or bf16              phase 5 step 3 forward (3_pipeline_*), step 4 backward (4_backward_*)
// CPU pointers go to the *_cpu twins, GPU pointers to the *_cuda kernels, which run on the CUDA default stream.
#include <math.h>
#include <stdio.h>

#include "flash_steps_shim.h"

#include "backward_ext.h"   // phase 6's backward passes
#include "extensions.h"     // phase 6's forward kernels
#include "fa_baselines.h"   // phase 3 step 3, phase 4, phase 5 steps 3 and 4
#include "fa_contract.h"    // the tensors and the CUDA kernels' head dims and tiles
#include "fa_half.h"

// The tiles. CPU and GPU take the same ones, so that the two compute the same sums in the same order.
#define FP32_BLOCK_M 64   // in both the forward's and the backward's list (fa_contract.h)
#define FP32_BLOCK_N 64
#define HALF_FORWARD_BLOCK_M 128   // phase 5's default forward tile
#define HALF_FORWARD_BLOCK_N 64

enum { KERNEL_PHASE3_PHASE4, KERNEL_GQA, KERNEL_WINDOW, KERNEL_SOFTCAP, KERNEL_PHASE5 };

static int has_window(const fs_problem *p) { return p->window_left >= 0 || p->window_right >= 0; }

static int kernel_of(const fs_problem *p) {
    if (p->dtype != FA_DTYPE_FP32) return KERNEL_PHASE5;
    if (p->H_kv != p->H) return KERNEL_GQA;
    if (has_window(p)) return KERNEL_WINDOW;
    if (p->softcap != 0.0f) return KERNEL_SOFTCAP;
    return KERNEL_PHASE3_PHASE4;
}

const char *fs_kernel_name(const fs_problem *p) {
    switch (kernel_of(p)) {
    case KERNEL_GQA: return "phase 6 gqa (forward and backward)";
    case KERNEL_WINDOW: return "phase 6 window (forward and backward)";
    case KERNEL_SOFTCAP: return "phase 6 softcap (forward and backward)";
    case KERNEL_PHASE5: return "phase 5 step 3 forward, step 4 backward";
    default: return "phase 3 step 3 forward, phase 4 backward";
    }
}

static fa_shape shape_of(const fs_problem *p) {
    const fa_shape s = {.B = p->B, .H = p->H, .Sq = p->Sq, .Sk = p->Sk, .D = p->D, .causal = p->causal,
                        .scale = p->scale};
    return s;
}

int fs_check(const fs_problem *p, char *why, size_t why_len) {
    const fa_shape shape = shape_of(p);
    if (fa_shape_validate(&shape, why, why_len)) return -1;
    if (p->dtype != FA_DTYPE_FP32 && p->dtype != FA_DTYPE_FP16 && p->dtype != FA_DTYPE_BF16) {
        snprintf(why, why_len, "the kernels take float32, float16 or bfloat16");
        return -1;
    }
    if (p->H_kv < 1 || p->H % p->H_kv != 0) {
        snprintf(why, why_len, "the query heads (%lld) must be a multiple of the key/value heads (%lld)",
                 (long long)p->H, (long long)p->H_kv);
        return -1;
    }
    if (p->window_left < -1 || p->window_right < -1) {
        snprintf(why, why_len, "a window bound is a number of keys >= 0, or -1 for none (got %lld, %lld)",
                 (long long)p->window_left, (long long)p->window_right);
        return -1;
    }
    if (p->causal && has_window(p) && p->window_right != 0) {
        snprintf(why, why_len, "causal attention is the window (left, 0): its right bound must be 0 (got %lld)",
                 (long long)p->window_right);
        return -1;
    }
    if (!isfinite(p->softcap) || p->softcap < 0.0f) {
        snprintf(why, why_len, "softcap must be a positive finite number, or 0 for none (got %g)", (double)p->softcap);
        return -1;
    }
    const int features = (p->H_kv != p->H) + has_window(p) + (p->softcap != 0.0f);
    if (features > 0 && p->dtype != FA_DTYPE_FP32) {
        snprintf(why, why_len, "GQA, the window and softcapping are phase 6's kernels, float32 only (got %s)",
                 fa_dtype_name(p->dtype));
        return -1;
    }
    if (features > 1) {
        snprintf(why, why_len, "phase 6 has one kernel per feature: GQA, a window and a softcap one at a time");
        return -1;
    }
    if (features > 0 && !p->deterministic) {
        snprintf(why, why_len, "phase 6's backward passes have the deterministic dQ only");
        return -1;
    }
    if (!p->on_gpu) return 0;   // the CPU twins take any D and any strides
#if FA_HAVE_CUDA
    if (p->dtype == FA_DTYPE_FP32) {
        const int dims[] = FLASH4D_CUDA_HEAD_DIMS;
        for (int i = 0; dims[i]; i++)
            if (dims[i] == p->D) return 0;
        snprintf(why, why_len, "the float32 CUDA kernels are compiled for D in {16, 32, 64, 128}, not %lld",
                 (long long)p->D);
        return -1;
    }
#if TC_HAVE_MMA_CUDA
    if (!tc_cuda_supports_head_dim(p->D)) {
        snprintf(why, why_len, "the tensor-core kernels are compiled for D = 64 or 128, not %lld", (long long)p->D);
        return -1;
    }
    return tc_cuda_check_device(why, why_len);
#else
    snprintf(why, why_len, "this library was built without tensor-core kernels (no architecture >= sm_80)");
    return -1;
#endif
#else
    snprintf(why, why_len, "this library was built without CUDA (configure with the CUDA toolkit present)");
    return -1;
#endif
}

static forward_tensors forward_tensors_of(const fs_tensor *q, const fs_tensor *k, const fs_tensor *v,
                                          const fs_tensor *o, float *lse, float *lse_residual) {
    const forward_tensors t = {.q = q->data, .k = k->data, .v = v->data, .q_strides = q->strides,
                               .k_strides = k->strides, .v_strides = v->strides, .o = o->data,
                               .o_strides = o->strides, .lse = lse, .lse_residual = lse_residual};
    return t;
}

static tc_forward_tensors tc_forward_tensors_of(const fs_tensor *q, const fs_tensor *k, const fs_tensor *v,
                                                const fs_tensor *o, float *lse) {
    const tc_forward_tensors t = {.q = q->data, .k = k->data, .v = v->data, .q_strides = q->strides,
                                  .k_strides = k->strides, .v_strides = v->strides, .o = o->data,
                                  .o_strides = o->strides, .lse = lse};
    return t;
}

static backward_tensors backward_tensors_of(const fs_tensor *q, const fs_tensor *k, const fs_tensor *v,
                                            const fs_tensor *o, const float *lse, const float *lse_residual,
                                            const fs_tensor *dout, float *delta, const fs_tensor *dq,
                                            const fs_tensor *dk, const fs_tensor *dv) {
    const backward_tensors t = {.q = q->data, .k = k->data, .v = v->data, .o = o->data, .lse = lse,
                                .dout = dout->data, .q_strides = q->strides, .k_strides = k->strides,
                                .v_strides = v->strides, .o_strides = o->strides, .do_strides = dout->strides,
                                .delta = delta, .dq = dq->data, .dk = dk->data, .dv = dv->data,
                                .dq_strides = dq->strides, .dk_strides = dk->strides, .dv_strides = dv->strides,
                                .lse_residual = lse_residual};
    return t;
}

static tc_backward_tensors tc_backward_tensors_of(const fs_tensor *q, const fs_tensor *k, const fs_tensor *v,
                                                  const fs_tensor *o, const float *lse, const fs_tensor *dout,
                                                  float *delta, const fs_tensor *dq, const fs_tensor *dk,
                                                  const fs_tensor *dv) {
    const tc_backward_tensors t = {.q = q->data, .k = k->data, .v = v->data, .o = o->data, .lse = lse,
                                   .dout = dout->data, .q_strides = q->strides, .k_strides = k->strides,
                                   .v_strides = v->strides, .o_strides = o->strides, .do_strides = dout->strides,
                                   .delta = delta, .dq = dq->data, .dk = dk->data, .dv = dv->data,
                                   .dq_strides = dq->strides, .dk_strides = dk->strides, .dv_strides = dv->strides};
    return t;
}

// --- Forward: o float32 [B, H, Sq, D]; lse and lse_residual float32 [B, H, Sq] contiguous (fp16/bf16 leave the
// residual alone: their backward does not read it). --------------------------------------------------------------
// The arguments of one forward call, together: the float32 kernels take them as forward_tensors, the half ones as
// tc_forward_tensors (fa_contract.h, fa_baselines.h).
typedef struct {
    const fs_tensor *q, *k, *v, *o;
    float *lse, *lse_residual;
} forward_args;

static void forward_cpu(const fs_problem *p, const fa_shape *s, const forward_args *a) {
    const forward_tensors t = forward_tensors_of(a->q, a->k, a->v, a->o, a->lse, a->lse_residual);
    const tc_forward_tensors th = tc_forward_tensors_of(a->q, a->k, a->v, a->o, a->lse);
    const int bm = FP32_BLOCK_M, bn = FP32_BLOCK_N;
    switch (kernel_of(p)) {
    case KERNEL_PHASE5:
        flash_forward_pipeline_cpu(s, p->dtype, HALF_FORWARD_BLOCK_M, HALF_FORWARD_BLOCK_N, &th, NULL);
        break;
    case KERNEL_GQA: flash_forward_gqa_cpu(s, p->H_kv, bm, bn, &t, NULL); break;
    case KERNEL_WINDOW: flash_forward_window_cpu(s, p->window_left, p->window_right, bm, bn, &t, NULL); break;
    case KERNEL_SOFTCAP: flash_forward_softcap_cpu(s, p->softcap, bm, bn, &t, NULL); break;
    default: flash_forward_lse_cpu(s, bm, bn, &t, NULL);
    }
}

#if FA_HAVE_CUDA
static void forward_cuda(const fs_problem *p, const fa_shape *s, const forward_args *a) {
    const forward_tensors t = forward_tensors_of(a->q, a->k, a->v, a->o, a->lse, a->lse_residual);
    const tc_forward_tensors th = tc_forward_tensors_of(a->q, a->k, a->v, a->o, a->lse);
    const int bm = FP32_BLOCK_M, bn = FP32_BLOCK_N;
    switch (kernel_of(p)) {
    case KERNEL_PHASE5:
#if TC_HAVE_MMA_CUDA
        flash_forward_pipeline_cuda(s, p->dtype, HALF_FORWARD_BLOCK_M, HALF_FORWARD_BLOCK_N, &th);
#else
        (void)th;   // a build without sm_80: fs_check refuses half precision on the GPU
#endif
        break;
    case KERNEL_GQA: flash_forward_gqa_cuda(s, p->H_kv, bm, bn, &t); break;
    case KERNEL_WINDOW: flash_forward_window_cuda(s, p->window_left, p->window_right, bm, bn, &t); break;
    case KERNEL_SOFTCAP: flash_forward_softcap_cuda(s, p->softcap, bm, bn, &t); break;
    default: flash_forward_lse_cuda(s, bm, bn, &t);
    }
}
#endif

void fs_forward(const fs_problem *p, const fs_tensor *q, const fs_tensor *k, const fs_tensor *v, const fs_tensor *o,
                float *lse, float *lse_residual) {
    const fa_shape s = shape_of(p);
    const forward_args a = {q, k, v, o, lse, lse_residual};
#if FA_HAVE_CUDA
    if (p->on_gpu) {
        forward_cuda(p, &s, &a);
        return;
    }
#endif
    forward_cpu(p, &s, &a);
}

// --- Backward: dq float32 [B, H, Sq, D], dk and dv float32 [B, H_kv, Sk, D]; delta float32 [B, H, Sq] is the
// preprocess's workspace. The features' backward is phase 4's preprocess, then the feature's dK/dV and dQ passes
// (backward_ext.h). -----------------------------------------------------------------------------------------------
static void backward_cpu(const fs_problem *p, const fa_shape *s, const backward_tensors *t,
                         const tc_backward_tensors *tc) {
    const int bm = FP32_BLOCK_M, bn = FP32_BLOCK_N;
    const int dq_mode = p->deterministic ? FA_DQ_DETERMINISTIC : FA_DQ_ATOMIC;
    switch (kernel_of(p)) {
    case KERNEL_PHASE5:
        flash_backward_tc_cpu(s, p->dtype, TC_BACKWARD_CUDA_BLOCK_M, TC_BACKWARD_CUDA_BLOCK_N, dq_mode, tc);
        break;
    case KERNEL_GQA:
        backward_preprocess_cpu(s, t, 0);
        backward_dkdv_gqa_cpu(s, p->H_kv, bm, bn, t, 0);
        backward_dq_gqa_cpu(s, p->H_kv, bm, bn, t);
        break;
    case KERNEL_WINDOW:
        backward_preprocess_cpu(s, t, 0);
        backward_dkdv_window_cpu(s, p->window_left, p->window_right, bm, bn, t, 0);
        backward_dq_window_cpu(s, p->window_left, p->window_right, bm, bn, t);
        break;
    case KERNEL_SOFTCAP:
        backward_preprocess_cpu(s, t, 0);
        backward_dkdv_softcap_cpu(s, p->softcap, bm, bn, t, 0);
        backward_dq_softcap_cpu(s, p->softcap, bm, bn, t);
        break;
    default: flash_backward_cpu(s, bm, bn, dq_mode, t);
    }
}

#if FA_HAVE_CUDA
static void backward_cuda(const fs_problem *p, const fa_shape *s, const backward_tensors *t,
                          const tc_backward_tensors *tc) {
    const int bm = FP32_BLOCK_M, bn = FP32_BLOCK_N;
    const int dq_mode = p->deterministic ? FA_DQ_DETERMINISTIC : FA_DQ_ATOMIC;
    switch (kernel_of(p)) {
    case KERNEL_PHASE5:
#if TC_HAVE_MMA_CUDA
        flash_backward_tc_cuda(s, p->dtype, TC_BACKWARD_CUDA_BLOCK_M, TC_BACKWARD_CUDA_BLOCK_N, dq_mode, tc);
#else
        (void)tc;   // a build without sm_80: fs_check refuses half precision on the GPU
#endif
        break;
    case KERNEL_GQA:
        backward_preprocess_cuda(s, t, 0);
        backward_dkdv_gqa_cuda(s, p->H_kv, bm, bn, t, 0);
        backward_dq_gqa_cuda(s, p->H_kv, bm, bn, t);
        break;
    case KERNEL_WINDOW:
        backward_preprocess_cuda(s, t, 0);
        backward_dkdv_window_cuda(s, p->window_left, p->window_right, bm, bn, t, 0);
        backward_dq_window_cuda(s, p->window_left, p->window_right, bm, bn, t);
        break;
    case KERNEL_SOFTCAP:
        backward_preprocess_cuda(s, t, 0);
        backward_dkdv_softcap_cuda(s, p->softcap, bm, bn, t, 0);
        backward_dq_softcap_cuda(s, p->softcap, bm, bn, t);
        break;
    default: flash_backward_cuda(s, bm, bn, dq_mode, t);
    }
}
#endif

void fs_backward(const fs_problem *p, const fs_tensor *q, const fs_tensor *k, const fs_tensor *v, const fs_tensor *o,
                 const float *lse, const float *lse_residual, const fs_tensor *dout, float *delta, const fs_tensor *dq,
                 const fs_tensor *dk, const fs_tensor *dv) {
    const fa_shape s = shape_of(p);
    const backward_tensors t = backward_tensors_of(q, k, v, o, lse, lse_residual, dout, delta, dq, dk, dv);
    const tc_backward_tensors tc = tc_backward_tensors_of(q, k, v, o, lse, dout, delta, dq, dk, dv);
#if FA_HAVE_CUDA
    if (p->on_gpu) {
        backward_cuda(p, &s, &t, &tc);
        return;
    }
#endif
    backward_cpu(p, &s, &t, &tc);
}
