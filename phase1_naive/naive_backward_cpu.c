// naive_backward_cpu.c - phase 1's backward on the CPU: the gradients of standard attention, P, dP and dS
// materialised, each step its own parallel loop (the oracle's way, in float32).
//
// CUDA twin: naive_backward_cuda.cu (each step below is one kernel there).
// Run:       build/bin/phase4_backward --impl cpu   (the "naive backward" rows: phase 4's baseline)
//
// Every step reads whole Sq x Sk matrices the step before wrote: that memory and traffic is what the FlashAttention
// backward of phase 4 removes by recomputing P from the saved LSE, one tile at a time.
#include "fa_baselines.h"

#include <math.h>

static float dot(const float *a, const float *b, int64_t D) {
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t d = 0; d < D; d++) sum += a[d] * b[d];
    return sum;
}

void naive_backward_cpu(const fa_shape *shape, const float *q, const float *k, const float *v, const float *o,
                        const float *probs, const float *dout, float *dscores, float *dq, float *dk, float *dv) {
    const int64_t BH = shape->B * shape->H, Sq = shape->Sq, Sk = shape->Sk, D = shape->D;
    const float scale = shape->scale;
    // q, o, dout, dq: [BH, Sq, D]; k, v, dk, dv: [BH, Sk, D]; probs (the forward's P), dscores: [BH, Sq, Sk].

    // Step 1: dV = P^T dO. Key row j gathers column j of P.
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t bh = 0; bh < BH; bh++) {
        for (int64_t j = 0; j < Sk; j++) {
            float *dv_row = dv + (bh * Sk + j) * D;
            for (int64_t d = 0; d < D; d++) dv_row[d] = 0.0f;
            for (int64_t i = 0; i < Sq; i++) {
                const float p = probs[(bh * Sq + i) * Sk + j];
                const float *do_row = dout + (bh * Sq + i) * D;
#pragma omp simd
                for (int64_t d = 0; d < D; d++) dv_row[d] += p * do_row[d];
            }
        }
    }

    // Step 2: dP = dO V^T.
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t bh = 0; bh < BH; bh++) {
        for (int64_t i = 0; i < Sq; i++) {
            float *dp_row = dscores + (bh * Sq + i) * Sk;
            for (int64_t j = 0; j < Sk; j++) dp_row[j] = dot(dout + (bh * Sq + i) * D, v + (bh * Sk + j) * D, D);
        }
    }

    // Step 3: dS = P * (dP - Delta), with Delta_i = rowsum(dO * O)_i; dS is written over dP.
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t bh = 0; bh < BH; bh++) {
        for (int64_t i = 0; i < Sq; i++) {
            const float delta = dot(dout + (bh * Sq + i) * D, o + (bh * Sq + i) * D, D);
            const float *p_row = probs + (bh * Sq + i) * Sk;
            float *ds_row = dscores + (bh * Sq + i) * Sk;
            for (int64_t j = 0; j < Sk; j++) ds_row[j] = p_row[j] * (ds_row[j] - delta);
        }
    }

    // Step 4: dQ = scale * dS K.
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t bh = 0; bh < BH; bh++) {
        for (int64_t i = 0; i < Sq; i++) {
            const float *ds_row = dscores + (bh * Sq + i) * Sk;
            float *dq_row = dq + (bh * Sq + i) * D;
            for (int64_t d = 0; d < D; d++) dq_row[d] = 0.0f;
            for (int64_t j = 0; j < Sk; j++) {
                const float *k_row = k + (bh * Sk + j) * D;
                const float ds = ds_row[j];
#pragma omp simd
                for (int64_t d = 0; d < D; d++) dq_row[d] += ds * k_row[d];
            }
            for (int64_t d = 0; d < D; d++) dq_row[d] *= scale;
        }
    }

    // Step 5: dK = scale * dS^T Q. Key row j gathers column j of dS.
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t bh = 0; bh < BH; bh++) {
        for (int64_t j = 0; j < Sk; j++) {
            float *dk_row = dk + (bh * Sk + j) * D;
            for (int64_t d = 0; d < D; d++) dk_row[d] = 0.0f;
            for (int64_t i = 0; i < Sq; i++) {
                const float ds = dscores[(bh * Sq + i) * Sk + j];
                const float *q_row = q + (bh * Sq + i) * D;
#pragma omp simd
                for (int64_t d = 0; d < D; d++) dk_row[d] += ds * q_row[d];
            }
            for (int64_t d = 0; d < D; d++) dk_row[d] *= scale;
        }
    }
}
