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
                const double *q_i = q + (bh * Sq + i) * D;
                const double *k_h = k + kv_head * Sk * D, *v_h = v + kv_head * Sk * D;
                double *o_i = o + (bh * Sq + i) * D;
                int64_t first, last;
                ext_key_range(s->causal, e, Sq, Sk, i, &first, &last);
                if (last < first) {   // a row that sees no key
                    for (int64_t d = 0; d < D; d++) o_i[d] = 0.0;
                    lse[bh * Sq + i] = EMPTY_ROW_LSE;
                    continue;
                }
                double m = -INFINITY;
                for (int64_t j = first; j <= last; j++) {
                    double dot = 0.0;
                    for (int64_t d = 0; d < D; d++) dot += q_i[d] * k_h[j * D + d];
                    double score = (double)s->scale * dot;
                    if (e->softcap > 0.0f) score = (double)e->softcap * tanh(score / (double)e->softcap);
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
                        sum += row[j] * v_h[j * D + d];
                        abs_sum += row[j] * fabs(v_h[j * D + d]);
                    }
                    o_i[d] = sum / l;
                    if (abs_sum / l > mag_o) mag_o = abs_sum / l;
                }
                lse[bh * Sq + i] = m + log(l);
                if (fabs(m) + log(l) > mag_lse) mag_lse = fabs(m) + log(l);
            }
        free(row);
    }
    mag->o = mag_o;
    mag->lse = mag_lse;
}
