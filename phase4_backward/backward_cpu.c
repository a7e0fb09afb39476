// backward_cpu.c - phase 4 on the CPU: the preprocess (Delta = rowsum(dO * O)) and the backward pass in order.
//
// CUDA twin: backward_cuda.cu.   The passes: backward_dkdv_cpu.c (dK, dV), backward_dq_cpu.c (dQ).
// Run:       build/bin/phase4_backward --impl cpu --S 1024 --D 64 --causal
#include "fa_baselines.h"

#include <stdlib.h>

// Delta_i = sum_d dO[i][d] * O[i][d]. It equals rowsum(P * dP)_i (docs/04-backward.md shows why), which the main pass
// needs for every (i, j): computing it once per row here costs D multiplications instead of a whole row of P and dP.
// Rows are independent: one parallel loop over (b, h) and query rows, like one CUDA warp per row in the twin.
void backward_preprocess_cpu(const fa_shape *shape, const backward_tensors *t, int zero_dq) {
    const int64_t H = shape->H, S_q = shape->Sq, D = shape->D;
    const fa_strides so = t->o_strides, sdo = t->do_strides, sdq = t->dq_strides;
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t bh = 0; bh < shape->B * H; bh++) {
        for (int64_t i = 0; i < S_q; i++) {
            const int64_t b = bh / H, h = bh % H;
            const float *o_row = t->o + b * so.b + h * so.h + i * so.s;
            const float *do_row = t->dout + b * sdo.b + h * sdo.h + i * sdo.s;
            float delta = 0.0f;
            for (int64_t d = 0; d < D; d++) delta += do_row[d * sdo.d] * o_row[d * so.d];
            t->delta[bh * S_q + i] = delta;
            if (zero_dq) {   // the atomic variant adds every tile's share of dQ into this row
                float *dq_row = t->dq + b * sdq.b + h * sdq.h + i * sdq.s;
                for (int64_t d = 0; d < D; d++) dq_row[d * sdq.d] = 0.0f;
            }
        }
    }
}

void flash_backward_cpu(const fa_shape *shape, int block_m, int block_n, int dq_mode, const backward_tensors *t) {
    const int atomic_dq = dq_mode == FA_DQ_ATOMIC;
    backward_preprocess_cpu(shape, t, atomic_dq);
    backward_dkdv_cpu(shape, block_m, block_n, t, atomic_dq);
    if (!atomic_dq) backward_dq_cpu(shape, block_m, block_n, t);
}
