// 4_backward_cpu.c - phase 5, step 4, on the CPU: the tensor-core backward's preprocess (Delta = rowsum(dO * O)) and
// its two passes in order, as phase 4's backward_cpu.c.
//
// The passes: 4_backward_dkdv_cpu.c (dK, dV; and dQ with atomic additions in the atomic variant) and
// 4_backward_dq_cpu.c (the deterministic dQ), or, with bf16 inputs on a CPU with bf16 arithmetic, the same two on it
// (4_backward_dkdv_bf16_cpu.c, 4_backward_dq_bf16_cpu.c); what they share: backward_tiles.h.
// CUDA twin: phase5_tensor_cores/4_backward_cuda.cu
// Run:       build/bin/phase5_tensor_cores --impl cpu --step 4 --dtype fp16 --B 1 --H 4 --S 1024 --D 64 --dq both
#include "backward_tiles.h"

// Delta_i = sum_d dO_id O_id, float32 (dO half, O the forward's float32 output); with zero_dq, dQ = 0 as well.
static void backward_preprocess(const fa_shape *shape, int dtype, const tc_backward_tensors *t, int zero_dq) {
    const int64_t H = shape->H, S_q = shape->Sq, D = shape->D;
    const uint16_t *dout = t->dout;
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t bh = 0; bh < shape->B * H; bh++)
        for (int64_t i = 0; i < S_q; i++) {
            const int64_t b = bh / H, h = bh % H;
            const float *o_i = t->o + b * t->o_strides.b + h * t->o_strides.h + i * t->o_strides.s;
            const uint16_t *do_i = dout + b * t->do_strides.b + h * t->do_strides.h + i * t->do_strides.s;
            float sum = 0.0f;
            for (int64_t d = 0; d < D; d++)
                sum += fa_half_to_float(do_i[d * t->do_strides.d], dtype) * o_i[d * t->o_strides.d];
            t->delta[bh * S_q + i] = sum;
            if (zero_dq) {
                float *dq_i = t->dq + b * t->dq_strides.b + h * t->dq_strides.h + i * t->dq_strides.s;
                for (int64_t d = 0; d < D; d++) dq_i[d * t->dq_strides.d] = 0.0f;
            }
        }
}

int64_t flash_backward_tc_cpu_workspace_bytes(int64_t D, int block_m, int block_n) {
    const int64_t float32 = workspace_floats(D, block_m, block_n) * (int64_t)sizeof(float);
    const int64_t bf16 = bf16_workspace_bytes(D, block_m, block_n);
    return float32 > bf16 ? float32 : bf16;
}

int64_t flash_backward_tc_cpu_staged_bytes(const fa_shape *shape, int dtype, int block_m, int block_n) {
    if (bf16_dot_unit_for(dtype) == BF16_DOT_NONE) return 0;
    // Each pass stages tensors of its tiles: four of Q's shape and two of K's (dK/dV pass, a third for the atomic
    // dQ), two of Q's and three of K's (dQ pass); the larger set, for the atomic variant, is the bound.
    const int64_t D_pad = round_up(shape->D, BF16_DOT_BLOCK), BH = shape->B * shape->H;
    const int64_t q_values = BH * bf16_staged_head_values(shape->Sq, block_m, D_pad);
    const int64_t k_values = BH * bf16_staged_head_values(shape->Sk, block_n, D_pad);
    const int64_t dkdv = 4 * q_values + 3 * k_values, dq = 2 * q_values + 3 * k_values;
    return (dkdv > dq ? dkdv : dq) * (int64_t)sizeof(uint16_t);
}

void flash_backward_tc_cpu(const fa_shape *shape, int dtype, int block_m, int block_n, int dq_mode,
                           const tc_backward_tensors *t) {
    if (dq_mode != FA_DQ_DETERMINISTIC && dq_mode != FA_DQ_ATOMIC)
        fa_die("the tensor-core backward runs one dQ variant at a time (deterministic or atomic)");
    const int atomic_dq = dq_mode == FA_DQ_ATOMIC;
    backward_preprocess(shape, dtype, t, atomic_dq);
    // bf16 on a CPU with bf16 arithmetic (AMX-BF16 or AVX512_BF16): the passes whose every product is on it.
    const bf16_dot_unit unit = bf16_dot_unit_for(dtype);
    if (unit != BF16_DOT_NONE) {
        backward_bf16_dkdv_cpu(shape, block_m, block_n, t, atomic_dq, unit);
        if (!atomic_dq) backward_bf16_dq_cpu(shape, block_m, block_n, t, unit);
        return;
    }
    backward_tc_dkdv_cpu(shape, dtype, block_m, block_n, t, atomic_dq);
    if (!atomic_dq) backward_tc_dq_cpu(shape, dtype, block_m, block_n, t);
}

const char *flash_backward_tc_cpu_products(int dtype) { return bf16_dot_products(dtype); }
