// naive_cpu.c - phase 1 on the CPU: standard attention in three passes, S and P materialised.
//
// CUDA twin: naive_cuda.cu (each pass below is one kernel there).
// Run:       build/bin/phase1_naive --impl cpu --S 1024 --D 64
//
// Each pass is its own parallel loop over (b, h) and query rows, the way each CUDA kernel is its own launch over a
// grid that covers (b, h): the whole S must be written before the softmax reads it, and the whole P before O.
#include "fa_baselines.h"

#include <math.h>

void naive_attention_cpu(const fa_shape *shape, const float *q, const float *k, const float *v,
                         float *scores, float *probs, float *o, float *lse) {
    const int64_t BH = shape->B * shape->H, Sq = shape->Sq, Sk = shape->Sk, D = shape->D;
    const float scale = shape->scale;

    // Pass 1: S = scale * Q K^T. q, o: [BH, Sq, D]; k, v: [BH, Sk, D]; scores, probs: [BH, Sq, Sk].
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t bh = 0; bh < BH; bh++) {
        for (int64_t i = 0; i < Sq; i++) {
            const float *q_row = q + (bh * Sq + i) * D;
            float *s_row = scores + (bh * Sq + i) * Sk;
            for (int64_t j = 0; j < Sk; j++) {
                if (shape->causal && j > i) {
                    s_row[j] = -INFINITY;   // a future key: exp(-inf) = 0 in the softmax
                    continue;
                }
                const float *k_row = k + (bh * Sk + j) * D;
                float dot = 0.0f;
                // The reduction clause lets the compiler reorder the sum, and so vectorise it.
#pragma omp simd reduction(+ : dot)
                for (int64_t d = 0; d < D; d++) dot += q_row[d] * k_row[d];
                s_row[j] = scale * dot;
            }
        }
    }

    // Pass 2: P = softmax(S) row by row. Subtracting the row max keeps exp() from overflowing; the max is finite
    // because every row sees at least key 0.
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t bh = 0; bh < BH; bh++) {
        for (int64_t i = 0; i < Sq; i++) {
            const float *s_row = scores + (bh * Sq + i) * Sk;
            float *p_row = probs + (bh * Sq + i) * Sk;
            float row_max = -INFINITY;
            for (int64_t j = 0; j < Sk; j++) row_max = fmaxf(row_max, s_row[j]);
            float row_sum = 0.0f;
            for (int64_t j = 0; j < Sk; j++) {
                p_row[j] = expf(s_row[j] - row_max);
                row_sum += p_row[j];
            }
            for (int64_t j = 0; j < Sk; j++) p_row[j] /= row_sum;
            lse[bh * Sq + i] = row_max + logf(row_sum);
        }
    }

    // Pass 3: O = P V.
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t bh = 0; bh < BH; bh++) {
        for (int64_t i = 0; i < Sq; i++) {
            const float *p_row = probs + (bh * Sq + i) * Sk;
            float *o_row = o + (bh * Sq + i) * D;
            for (int64_t d = 0; d < D; d++) o_row[d] = 0.0f;
            for (int64_t j = 0; j < Sk; j++) {
                const float *v_row = v + (bh * Sk + j) * D;
                const float p = p_row[j];
#pragma omp simd
                for (int64_t d = 0; d < D; d++) o_row[d] += p * v_row[d];
            }
        }
    }
}
