// fa_half.c - fp16 and bf16 conversions, and the straightforward half-precision reference.
#include "fa_half.h"
#include "fa_half_inline.h"   // the conversions themselves, written once for this file and the CPU kernels
#include "fa_tensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *fa_dtype_name(int dtype) {
    return dtype == FA_DTYPE_FP16 ? "fp16" : dtype == FA_DTYPE_BF16 ? "bf16" : "fp32";
}

int fa_dtype_parse(const char *text) {
    if (strcmp(text, "fp32") == 0) return FA_DTYPE_FP32;
    if (strcmp(text, "fp16") == 0) return FA_DTYPE_FP16;
    if (strcmp(text, "bf16") == 0) return FA_DTYPE_BF16;
    return -1;
}

double fa_dtype_unit_roundoff(int dtype) {
    return dtype == FA_DTYPE_FP16 ? 0x1p-11 : dtype == FA_DTYPE_BF16 ? 0x1p-8 : 0x1p-24;
}

// float32: 1 sign, 8 exponent (bias 127), 23 mantissa bits. fp16: 1, 5 (bias 15), 10. The mantissa loses 13 bits.
// This one works on the bits, case by case, to produce fp16's own bit pattern; fa_round_to_fp16() (fa_half_inline.h)
// gives the same rounding as a float32 value, without branches, for vector loops.
uint16_t fa_float_to_fp16(float x) {
    const uint32_t bits = fa_float_bits(x);
    const uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
    const uint32_t magnitude = bits & 0x7fffffffu;
    if (magnitude >= 0x7f800000u) {
        // Inf stays Inf; a NaN keeps the top of its payload and is made quiet (so it cannot become Inf).
        if (magnitude == 0x7f800000u) return sign | 0x7c00u;
        return (uint16_t)(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
    }
    if (magnitude >= 0x477ff000u) return sign | 0x7c00u;   // >= 65520 = 65504 + half an ulp: rounds to Inf
    if (magnitude >= 0x38800000u) {
        // A normal fp16 (>= 2^-14): rebias the exponent (127 - 15 = 112), then round the 13 dropped bits to nearest,
        // ties to even: add just under half an ulp, plus one when the kept part is odd. A carry out of the mantissa
        // correctly bumps the exponent.
        uint32_t h = magnitude - (112u << 23);
        h += 0x0fffu + ((h >> 13) & 1u);
        return (uint16_t)(sign | (h >> 13));
    }
    if (magnitude <= 0x33000000u) return sign;   // <= 2^-25, half the smallest subnormal: rounds to (signed) zero
    // A subnormal fp16: the value counted in units of 2^-24 (the smallest subnormal), rounded to nearest even.
    // magnitude = m * 2^(e - 150) with the implicit 1 in m, so the count is m >> (126 - e), shift between 14 and 24.
    const uint32_t e = magnitude >> 23, m = (magnitude & 0x7fffffu) | 0x800000u, shift = 126 - e;
    uint32_t h = m >> shift;
    const uint32_t rest = m & ((1u << shift) - 1u), tie = 1u << (shift - 1u);
    if (rest > tie || (rest == tie && (h & 1u))) h++;   // 1024 units is 2^-14: the smallest normal's bits, as wanted
    return (uint16_t)(sign | h);
}

float fa_fp16_to_float(uint16_t h) { return fa_half_to_float_inline(h, FA_DTYPE_FP16); }

// bf16 is the top half of a float32: x rounded to bf16 (fa_round_to_bf16()) has its low 16 bits zero, the top 16 the
// bf16's.
uint16_t fa_float_to_bf16(float x) { return (uint16_t)(fa_float_bits(fa_round_to_bf16(x)) >> 16); }

float fa_bf16_to_float(uint16_t h) { return fa_half_to_float_inline(h, FA_DTYPE_BF16); }

uint16_t fa_float_to_half(float x, int dtype) {
    return dtype == FA_DTYPE_BF16 ? fa_float_to_bf16(x) : fa_float_to_fp16(x);
}

float fa_half_to_float(uint16_t h, int dtype) { return fa_half_to_float_inline(h, dtype); }

double fa_half_score_in_double(const uint16_t *q_row, int64_t stride_qd, const uint16_t *k, int64_t stride_ks,
                               int64_t stride_kd, int64_t max_key, int64_t D, float scale, int dtype) {
    if (max_key < 0) return NAN;
    const uint16_t *k_row = k + max_key * stride_ks;
    double dot = 0.0;
    for (int64_t d = 0; d < D; d++)
        dot += (double)fa_half_to_float(q_row[d * stride_qd], dtype) *
               (double)fa_half_to_float(k_row[d * stride_kd], dtype);
    return (double)scale * dot;
}

float fa_round_to_dtype(float x, int dtype) {
    return dtype == FA_DTYPE_FP32 ? x : dtype == FA_DTYPE_BF16 ? fa_round_to_bf16(x) : fa_round_to_fp16(x);
}

void fa_round_floats(float *x, int64_t n, int dtype) {
    if (dtype == FA_DTYPE_FP32) return;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) x[i] = fa_round_to_dtype(x[i], dtype);
}

void fa_floats_to_half(const float *x, uint16_t *h, int64_t n, int dtype) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) h[i] = fa_float_to_half(x[i], dtype);
}

static float dot_rows(const float *x, const float *y, int64_t D) {
    float dot = 0.0f;
    for (int64_t d = 0; d < D; d++) dot += x[d] * y[d];
    return dot;
}

// One row of the reference's softmax: p[j] = exp(S_ij - m) for the n keys row i sees, with m its max and l its sum
// (P_ij = p[j] / l). The forward and both passes of the backward compute S_ij with the same float32 operations, so
// that all see the same P.
static void reference_scores(const fa_shape *s, const float *q_i, const float *k_head, int64_t n, float *p, float *m,
                             float *l) {
    const int64_t D = s->D;
    float max = -INFINITY;
    for (int64_t j = 0; j < n; j++) {
        p[j] = s->scale * dot_rows(q_i, k_head + j * D, D);
        max = fmaxf(max, p[j]);
    }
    float sum = 0.0f;
    for (int64_t j = 0; j < n; j++) {
        p[j] = expf(p[j] - max);
        sum += p[j];
    }
    *m = max;
    *l = sum;
}

void fa_half_reference_forward(const fa_shape *s, int dtype, const float *q, const float *k, const float *v,
                               const unsigned char *heads, float *o, float *lse) {
    const int64_t D = s->D, Sq = s->Sq, Sk = s->Sk, BH = s->B * s->H;
#pragma omp parallel
    {
        float *p = fa_alloc_floats(Sk, "the reference's row of P");   // one row of S, then of P
#pragma omp for collapse(2) schedule(dynamic, 16)
        for (int64_t bh = 0; bh < BH; bh++)
            for (int64_t i = 0; i < Sq; i++) {
                if (heads && !heads[bh]) continue;
                const float *q_i = q + (bh * Sq + i) * D, *k_head = k + bh * Sk * D, *v_head = v + bh * Sk * D;
                const int64_t n = s->causal ? (i + 1 < Sk ? i + 1 : Sk) : Sk;   // row i sees keys j <= i
                float m, l;
                reference_scores(s, q_i, k_head, n, p, &m, &l);
                // The one rounding the attention itself adds: P to the half type, before it meets V.
                for (int64_t j = 0; j < n; j++) p[j] = fa_round_to_dtype(p[j] / l, dtype);
                float *o_i = o + (bh * Sq + i) * D;
                for (int64_t d = 0; d < D; d++) o_i[d] = 0.0f;
                for (int64_t j = 0; j < n; j++)
                    for (int64_t d = 0; d < D; d++) o_i[d] += p[j] * v_head[j * D + d];
                lse[bh * Sq + i] = m + logf(l);
            }
        free(p);
    }
}

void fa_half_reference_backward(const fa_shape *s, int dtype, const float *q, const float *k, const float *v,
                                const float *dout, const unsigned char *heads, float *dq, float *dk, float *dv) {
    const int64_t D = s->D, Sq = s->Sq, Sk = s->Sk, BH = s->B * s->H;
    // What the second pass needs of each row: its softmax's max and sum, and Delta.
    float *row_m = fa_alloc_floats(BH * Sq, "the reference's row maxima");
    float *row_l = fa_alloc_floats(BH * Sq, "the reference's row sums");
    float *row_delta = fa_alloc_floats(BH * Sq, "the reference's Delta");

    // Pass 1, by query rows: P, O, Delta, dS and dQ_i = scale sum_j round(dS_ij) K_j.
#pragma omp parallel
    {
        float *p = fa_alloc_floats(Sk, "the reference's row of P");
        float *o_i = fa_alloc_floats(D, "the reference's row of O");
#pragma omp for collapse(2) schedule(dynamic, 16)
        for (int64_t bh = 0; bh < BH; bh++)
            for (int64_t i = 0; i < Sq; i++) {
                if (heads && !heads[bh]) continue;
                const float *q_i = q + (bh * Sq + i) * D, *do_i = dout + (bh * Sq + i) * D;
                const float *k_head = k + bh * Sk * D, *v_head = v + bh * Sk * D;
                const int64_t n = s->causal ? (i + 1 < Sk ? i + 1 : Sk) : Sk;   // row i sees keys j <= i
                float m, l;
                reference_scores(s, q_i, k_head, n, p, &m, &l);
                for (int64_t d = 0; d < D; d++) o_i[d] = 0.0f;
                for (int64_t j = 0; j < n; j++) {
                    const float p_half = fa_round_to_dtype(p[j] / l, dtype);
                    for (int64_t d = 0; d < D; d++) o_i[d] += p_half * v_head[j * D + d];
                }
                const float delta = dot_rows(do_i, o_i, D);
                row_m[bh * Sq + i] = m, row_l[bh * Sq + i] = l, row_delta[bh * Sq + i] = delta;
                float *dq_i = dq + (bh * Sq + i) * D;
                for (int64_t d = 0; d < D; d++) dq_i[d] = 0.0f;
                for (int64_t j = 0; j < n; j++) {
                    const float p_ij = p[j] / l, dp = dot_rows(do_i, v_head + j * D, D);
                    const float ds = fa_round_to_dtype(p_ij * (dp - delta), dtype);
                    for (int64_t d = 0; d < D; d++) dq_i[d] += ds * k_head[j * D + d];
                }
                for (int64_t d = 0; d < D; d++) dq_i[d] *= s->scale;
            }
        free(p);
        free(o_i);
    }

    // Pass 2, by key rows: dV_j = sum_i round(P_ij) dO_i and dK_j = scale sum_i round(dS_ij) Q_i, with P_ij and dS_ij
    // recomputed exactly as pass 1 had them (the same float32 operations on the same numbers).
#pragma omp parallel for collapse(2) schedule(dynamic, 16)
    for (int64_t bh = 0; bh < BH; bh++)
        for (int64_t j = 0; j < Sk; j++) {
            if (heads && !heads[bh]) continue;
            const float *k_j = k + (bh * Sk + j) * D, *v_j = v + (bh * Sk + j) * D;
            float *dk_j = dk + (bh * Sk + j) * D, *dv_j = dv + (bh * Sk + j) * D;
            for (int64_t d = 0; d < D; d++) dk_j[d] = dv_j[d] = 0.0f;
            for (int64_t i = s->causal ? j : 0; i < Sq; i++) {   // the rows that see key j
                const float *q_i = q + (bh * Sq + i) * D, *do_i = dout + (bh * Sq + i) * D;
                const float score = s->scale * dot_rows(q_i, k_j, D);
                const float p_ij = expf(score - row_m[bh * Sq + i]) / row_l[bh * Sq + i];
                const float dp = dot_rows(do_i, v_j, D);
                const float p_half = fa_round_to_dtype(p_ij, dtype);
                const float ds = fa_round_to_dtype(p_ij * (dp - row_delta[bh * Sq + i]), dtype);
                for (int64_t d = 0; d < D; d++) {
                    dv_j[d] += p_half * do_i[d];
                    dk_j[d] += ds * q_i[d];
                }
            }
            for (int64_t d = 0; d < D; d++) dk_j[d] *= s->scale;
        }
    free(row_m);
    free(row_l);
    free(row_delta);
}
