// oracle_ext.c - the float64 oracle of phase 6 (oracle_ext.h): plain loops, one row at a time, written for clarity.
#include "oracle_ext.h"

#include <math.h>
#include <stdlib.h>

#include "fa_tensor.h"

double ext_visible_pairs(const fa_shape *s, const ext_options *e) {
    double pairs = 0.0;
    for (int64_t i = 0; i < s->Sq; i++) {
        int64_t first, last;
        ext_key_range(s->causal, e, s->Sq, s->Sk, i, &first, &last);
        if (last >= first) pairs += (double)(last - first + 1);
    }
    return pairs * (double)s->B * (double)s->H;
}

// One row: q_i against keys first..last of k_h and v_h (key j at k_h + j * key_stride), into o_i[0..D) and *lse_i;
// and the row's terms of the two scales. row is scratch for the scores, indexed by key.
static void oracle_row(const fa_shape *s, float softcap, const double *q_i, const double *k_h, const double *v_h,
                       int64_t key_stride, int64_t first, int64_t last, double *row, double *o_i, double *lse_i,
                       double *mag_o, double *mag_lse) {
    const int64_t D = s->D;
    if (last < first) {   // a row that sees no key
        for (int64_t d = 0; d < D; d++) o_i[d] = 0.0;
        *lse_i = EMPTY_ROW_LSE;
        return;
    }
    double m = -INFINITY;
    for (int64_t j = first; j <= last; j++) {
        double dot = 0.0;
        for (int64_t d = 0; d < D; d++) dot += q_i[d] * k_h[j * key_stride + d];
        double score = (double)s->scale * dot;
        if (softcap > 0.0f) score = (double)softcap * tanh(score / (double)softcap);
        row[j] = score;
        if (score > m) m = score;
    }
    double l = 0.0;
    for (int64_t j = first; j <= last; j++) {
        row[j] = exp(row[j] - m);
        l += row[j];
    }
    for (int64_t d = 0; d < D; d++) {
        double sum = 0.0, abs_sum = 0.0;
        for (int64_t j = first; j <= last; j++) {
            sum += row[j] * v_h[j * key_stride + d];
            abs_sum += row[j] * fabs(v_h[j * key_stride + d]);
        }
        o_i[d] = sum / l;
        if (abs_sum / l > *mag_o) *mag_o = abs_sum / l;
    }
    *lse_i = m + log(l);
    if (fabs(m) + log(l) > *mag_lse) *mag_lse = fabs(m) + log(l);
}

void ext_oracle_forward(const fa_shape *s, const ext_options *e, const double *q, const double *k, const double *v,
                        const unsigned char *heads, double *o, double *lse, fa_magnitudes *mag) {
    const int64_t Sq = s->Sq, Sk = s->Sk, D = s->D, group = s->H / e->H_kv;
    double mag_o = 0.0, mag_lse = 0.0;
#pragma omp parallel
    {
        double *row = fa_alloc_doubles(Sk, "the oracle's score row");
#pragma omp for collapse(2) schedule(dynamic) reduction(max : mag_o, mag_lse)
        for (int64_t bh = 0; bh < s->B * s->H; bh++)
            for (int64_t i = 0; i < Sq; i++) {
                if (heads && !heads[bh]) continue;
                const int64_t b = bh / s->H, h = bh % s->H, kv_head = b * e->H_kv + h / group;
                int64_t first, last;
                ext_key_range(s->causal, e, Sq, Sk, i, &first, &last);
                oracle_row(s, e->softcap, q + (bh * Sq + i) * D, k + kv_head * Sk * D, v + kv_head * Sk * D, D, first,
                           last, row, o + (bh * Sq + i) * D, lse + bh * Sq + i, &mag_o, &mag_lse);
            }
        free(row);
    }
    mag->o = mag_o;
    mag->lse = mag_lse;
}

void ext_oracle_varlen(const fa_shape *s, const int64_t *cu_seqlens, const double *q, const double *k,
                       const double *v, const unsigned char *tokens, double *o, double *lse, fa_magnitudes *mag) {
    const int64_t H = s->H, D = s->D, total = cu_seqlens[s->B];
    double mag_o = 0.0, mag_lse = 0.0;
#pragma omp parallel
    {
        double *row = fa_alloc_doubles(total, "the oracle's score row");
#pragma omp for schedule(dynamic) reduction(max : mag_o, mag_lse)
        for (int64_t t = 0; t < total; t++) {
            if (tokens && !tokens[t]) continue;
            int64_t b = 0;
            while (cu_seqlens[b + 1] <= t) b++;
            const int64_t start = cu_seqlens[b], i = t - start, len = cu_seqlens[b + 1] - start;
            const int64_t last = s->causal ? i : len - 1;   // a sequence's own keys only; Sq = Sk, so no alignment
            for (int64_t h = 0; h < H; h++)
                oracle_row(s, 0.0f, q + (t * H + h) * D, k + (start * H + h) * D, v + (start * H + h) * D, H * D, 0,
                           last, row, o + (t * H + h) * D, lse + t * H + h, &mag_o, &mag_lse);
        }
        free(row);
    }
    mag->o = mag_o;
    mag->lse = mag_lse;
}
