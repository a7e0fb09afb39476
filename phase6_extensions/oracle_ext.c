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

// The factor dropout puts on P_ij of row i of head bh: 1 / (1 - p) when the key is kept, 0 when it is dropped
// (dropout_keep4, the kernels' own mask), 1 without dropout.
static double dropout_factor(const ext_options *e, int64_t bh, int64_t i, int64_t j) {
    if (e->dropout_p == 0.0f) return 1.0;
    const dropout_params drop = dropout_params_for(e->dropout_p, e->dropout_seed);
    return dropout_keep(drop.seed, drop.threshold, bh, i, j) ? 1.0 / (1.0 - (double)e->dropout_p) : 0.0;
}

// One row, row i of head bh: q_i against keys first..last of k_h and v_h (key j at k_h + j * key_stride), into
// o_i[0..D) and *lse_i; and the row's terms of the two scales. row is scratch for the scores, indexed by key.
static void oracle_row(const fa_shape *s, const ext_options *e, int64_t bh, int64_t i, const double *q_i,
                       const double *k_h, const double *v_h, int64_t key_stride, int64_t first, int64_t last,
                       double *row, double *o_i, double *lse_i, double *mag_o, double *mag_lse) {
    const float softcap = e->softcap;
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
    // Dropout acts on P V only: the row's sum l (and LSE) counts every key.
    for (int64_t j = first; j <= last; j++) row[j] *= dropout_factor(e, bh, i, j);
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
                oracle_row(s, e, bh, i, q + (bh * Sq + i) * D, k + kv_head * Sk * D, v + kv_head * Sk * D, D, first,
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
    const ext_options plain = {.H_kv = H, .window_left = -1, .window_right = -1};   // varlen alone, no other feature
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
                oracle_row(s, &plain, b * H + h, i, q + (t * H + h) * D, k + (start * H + h) * D,
                           v + (start * H + h) * D, H * D, 0, last, row, o + (t * H + h) * D, lse + t * H + h, &mag_o,
                           &mag_lse);
        }
        free(row);
    }
    mag->o = mag_o;
    mag->lse = mag_lse;
}

void ext_oracle_backward(const fa_shape *s, const ext_options *e, const double *q, const double *k, const double *v,
                         const double *dout, const double *o, const double *lse, const unsigned char *heads,
                         double *dq, double *dk, double *dv, fa_magnitudes *mag) {
    const int64_t Sq = s->Sq, Sk = s->Sk, D = s->D, H = s->H, group = H / e->H_kv;
    const double scale = s->scale, C = e->softcap;
    double mag_dq = 0.0, mag_dk = 0.0, mag_dv = 0.0;
#pragma omp parallel
    {
        // Per thread: one row's p, dP, slope of the cap and dropout factor, by key; and the scales' sums of one K/V
        // head.
        double *p = fa_alloc_doubles(4 * Sk + 2 * Sk * D, "the oracle's backward rows");
        double *dp = p + Sk, *slope = dp + Sk, *drop = slope + Sk, *abs_dk = drop + Sk, *abs_dv = abs_dk + Sk * D;
        // One program per K/V head: dK and dV of a K/V head are sums over the query heads of its group.
#pragma omp for schedule(dynamic) reduction(max : mag_dq, mag_dk, mag_dv)
        for (int64_t bg = 0; bg < s->B * e->H_kv; bg++) {
            const int64_t b = bg / e->H_kv, g = bg % e->H_kv;
            if (heads && !heads[b * H + g * group]) continue;   // the group is marked whole or not at all
            const double *k_g = k + bg * Sk * D, *v_g = v + bg * Sk * D;
            double *dk_g = dk + bg * Sk * D, *dv_g = dv + bg * Sk * D;
            for (int64_t x = 0; x < Sk * D; x++) dk_g[x] = dv_g[x] = abs_dk[x] = abs_dv[x] = 0.0;
            for (int64_t h = g * group; h < (g + 1) * group; h++) {
                const int64_t bh = b * H + h;
                for (int64_t i = 0; i < Sq; i++) {
                    const double *q_i = q + (bh * Sq + i) * D, *do_i = dout + (bh * Sq + i) * D;
                    const double *o_i = o + (bh * Sq + i) * D;
                    double *dq_i = dq + (bh * Sq + i) * D;
                    for (int64_t d = 0; d < D; d++) dq_i[d] = 0.0;
                    int64_t first, last;
                    ext_key_range(s->causal, e, Sq, Sk, i, &first, &last);
                    double delta = 0.0;   // Delta_i = dO_i . O_i
                    for (int64_t d = 0; d < D; d++) delta += do_i[d] * o_i[d];
                    for (int64_t j = first; j <= last; j++) {
                        double dot = 0.0, dpj = 0.0;
                        for (int64_t d = 0; d < D; d++) {
                            dot += q_i[d] * k_g[j * D + d];
                            dpj += do_i[d] * v_g[j * D + d];
                        }
                        double score = scale * dot;
                        slope[j] = 1.0;
                        if (C > 0.0) {   // softcapping: C tanh(score / C), whose slope is 1 - tanh^2
                            const double th = tanh(score / C);
                            score = C * th;
                            slope[j] = 1.0 - th * th;
                        }
                        p[j] = exp(score - lse[bh * Sq + i]);
                        // Dropout: O = Z V with Z = P * drop, so dV takes Z and dP = (dO . V_j) * drop.
                        drop[j] = dropout_factor(e, bh, i, j);
                        dp[j] = dpj * drop[j];
                    }
                    for (int64_t j = first; j <= last; j++) {
                        const double ds = p[j] * (dp[j] - delta) * slope[j];
                        const double ds_abs = p[j] * (fabs(dp[j]) + fabs(delta)) * slope[j], z = p[j] * drop[j];
                        for (int64_t d = 0; d < D; d++) {
                            dq_i[d] += scale * ds * k_g[j * D + d];
                            dk_g[j * D + d] += scale * ds * q_i[d];
                            dv_g[j * D + d] += z * do_i[d];
                            abs_dk[j * D + d] += scale * ds_abs * fabs(q_i[d]);
                            abs_dv[j * D + d] += z * fabs(do_i[d]);
                        }
                    }
                    for (int64_t d = 0; d < D; d++) {
                        double abs_dq = 0.0;
                        for (int64_t j = first; j <= last; j++)
                            abs_dq += scale * p[j] * (fabs(dp[j]) + fabs(delta)) * slope[j] * fabs(k_g[j * D + d]);
                        if (abs_dq > mag_dq) mag_dq = abs_dq;
                    }
                }
            }
            for (int64_t x = 0; x < Sk * D; x++) {
                if (abs_dk[x] > mag_dk) mag_dk = abs_dk[x];
                if (abs_dv[x] > mag_dv) mag_dv = abs_dv[x];
            }
        }
        free(p);
    }
    mag->dq = mag_dq;
    mag->dk = mag_dk;
    mag->dv = mag_dv;
}
