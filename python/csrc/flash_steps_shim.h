// flash_steps_shim.h - what the PyTorch binding calls (python/csrc/flash_steps_shim.c says which kernel serves what).
// python/flash_steps/_library.py mirrors these two structs field by field for ctypes; tests/test_python_shim.c calls
// the four functions from C, so that a machine without PyTorch checks them too.
#ifndef FLASH_STEPS_SHIM_H
#define FLASH_STEPS_SHIM_H

#include <stddef.h>
#include <stdint.h>

#include "fa_shape.h"   // fa_strides

#ifdef __cplusplus
extern "C" {
#endif

// One problem, as the Python side describes it (python/flash_steps/_library.py mirrors this struct field by field).
typedef struct {
    int64_t B, H, H_kv, Sq, Sk, D;        // Q is [B, H, Sq, D]; K and V are [B, H_kv, Sk, D]
    int32_t causal;                       // top-left aligned, as PyTorch's is_causal
    float scale;
    int64_t window_left, window_right;    // -1: no bound on that side (both -1: no window)
    float softcap;                        // 0: off
    int32_t dtype;                        // FA_DTYPE_FP32, FA_DTYPE_FP16 or FA_DTYPE_BF16 (fa_half.h)
    int32_t on_gpu;                       // the pointers are CUDA device pointers
    int32_t deterministic;                // the backward's dQ: 1 deterministic, 0 atomic
} fs_problem;

// A [B, H, S, D] tensor: its data and its strides in elements.
typedef struct {
    void *data;
    fa_strides strides;
} fs_tensor;

// 0 when the kernels take the problem; otherwise -1 and one line in why. Never exits.
int fs_check(const fs_problem *p, char *why, size_t why_len);
// The kernel a problem goes to, in words ("phase 3 step 3 forward, phase 4 backward", ...).
const char *fs_kernel_name(const fs_problem *p);
// Only for problems fs_check accepted. q [B, H, Sq, D] and k, v [B, H_kv, Sk, D] of p's dtype; o float32
// [B, H, Sq, D]; lse and lse_residual float32 [B, H, Sq] contiguous.
void fs_forward(const fs_problem *p, const fs_tensor *q, const fs_tensor *k, const fs_tensor *v, const fs_tensor *o,
                float *lse, float *lse_residual);
// dout of p's dtype [B, H, Sq, D]; o, lse, lse_residual as fs_forward wrote them; delta a float32 [B, H, Sq]
// workspace; dq float32 [B, H, Sq, D], dk and dv float32 [B, H_kv, Sk, D].
void fs_backward(const fs_problem *p, const fs_tensor *q, const fs_tensor *k, const fs_tensor *v, const fs_tensor *o,
                 const float *lse, const float *lse_residual, const fs_tensor *dout, float *delta, const fs_tensor *dq,
                 const fs_tensor *dk, const fs_tensor *dv);

#ifdef __cplusplus
}
#endif

#endif
