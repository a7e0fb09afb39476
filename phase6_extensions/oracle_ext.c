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
// o_i[0..D) and *lse_i; and the row's bounds (row r of b_o and b_lse, fa_oracle.h). row and g are scratch for the
// scores and the logits' error factors, indexed by key; sums holds 3 * D doubles.
static void oracle_row(const fa_shape *s, const ext_options *e, int64_t bh, int64_t i, const double *q_i,
                       const double *k_h, const double *v_h, int64_t key_stride, int64_t first, int64_t last,
                       double *row, double *g, double *sums, double *o_i, double *lse_i, fa_row_bounds *b_o,
                       fa_row_bounds *b_lse, int64_t r) {
    const float softcap = e->softcap;
    const int64_t D = s->D;
    if (last < first) {   // a row that sees no key: its O and LSE are exact conventions
        for (int64_t d = 0; d < D; d++) o_i[d] = 0.0;
        *lse_i = EMPTY_ROW_LSE;
        b_o->scale[r] = b_o->logit[r] = b_o->tiny[r] = b_lse->scale[r] = b_lse->logit[r] = b_lse->tiny[r] = 0.0;
        return;
    }
    double m = -INFINITY;
    for (int64_t j = first; j <= last; j++) {
        double dot = 0.0, abs_terms = 0.0;
        for (int64_t d = 0; d < D; d++) {
            dot += q_i[d] * k_h[j * key_stride + d];
            abs_terms += fabs(q_i[d] * k_h[j * key_stride + d]);
        }
        double score = (double)s->scale * dot;
        // The cap's slope is at most 1: the capped logit's error is at most the uncapped one's.
        if (softcap > 0.0f) score = (double)softcap * tanh(score / (double)softcap);
        row[j] = score;
        g[j] = (double)s->scale * abs_terms;   // a_ij for now: the size of the logit's terms
        if (score > m) m = score;
    }
    double l = 0.0, g_mean = 0.0, a_mean = 0.0;
    for (int64_t j = first; j <= last; j++) {
        row[j] = exp(row[j] - m);
        l += row[j];
    }
    for (int64_t j = first; j <= last; j++) {
        a_mean += row[j] / l * g[j];
        g[j] = fa_logit_error(g[j], D);
        g_mean += row[j] / l * g[j];
    }
    // Dropout acts on P V only: the row's sum l (and LSE) counts every key.
    for (int64_t j = first; j <= last; j++) row[j] *= dropout_factor(e, bh, i, j);
    double *abs_o = sums, *logit_o = sums + D, *factors_o = sums + 2 * D;
    for (int64_t d = 0; d < D; d++) {
        double sum = 0.0, abs_sum = 0.0, logit_sum = 0.0;
        factors_o[d] = 0.0;
        for (int64_t j = first; j <= last; j++) {
            factors_o[d] += fabs(v_h[j * key_stride + d]);
            sum += row[j] * v_h[j * key_stride + d];
            abs_sum += row[j] * fabs(v_h[j * key_stride + d]);
            logit_sum += row[j] * g[j] * fabs(v_h[j * key_stride + d]);
        }
        o_i[d] = sum / l;
        abs_o[d] = abs_sum / l;
        logit_o[d] = logit_sum / l + g_mean * abs_sum / l;
    }
    fa_set_row_bounds(b_o, r, abs_o, logit_o, factors_o, D);
    *lse_i = m + log(l);
    const double lse_scale = fmax(fabs(m) + log(l), a_mean);   // as fa_oracle_magnitudes
    const double no_factors = 0.0;
    fa_set_row_bounds(b_lse, r, &lse_scale, &g_mean, &no_factors, 1);
}

void ext_oracle_forward(const fa_shape *s, const ext_options *e, const double *q, const double *k, const double *v,
                        const unsigned char *heads, double *o, double *lse, fa_magnitudes *mag) {
    const int64_t Sq = s->Sq, Sk = s->Sk, D = s->D, group = s->H / e->H_kv;
    fa_alloc_row_bounds(&mag->o, s, heads, Sq, "the oracle's bounds of O");
    fa_alloc_row_bounds(&mag->lse, s, heads, Sq, "the oracle's bounds of LSE");
#pragma omp parallel
    {
        double *row = fa_alloc_doubles(2 * Sk + 3 * D, "the oracle's score row");
#pragma omp for collapse(2) schedule(dynamic)
        for (int64_t bh = 0; bh < s->B * s->H; bh++)
            for (int64_t i = 0; i < Sq; i++) {
                if (heads && !heads[bh]) continue;
                const int64_t b = bh / s->H, h = bh % s->H, kv_head = b * e->H_kv + h / group;
                int64_t first, last;
                ext_key_range(s->causal, e, Sq, Sk, i, &first, &last);
                oracle_row(s, e, bh, i, q + (bh * Sq + i) * D, k + kv_head * Sk * D, v + kv_head * Sk * D, D, first,
                           last, row, row + Sk, row + 2 * Sk, o + (bh * Sq + i) * D, lse + bh * Sq + i, &mag->o,
                           &mag->lse, bh * Sq + i);
            }
        free(row);
    }
}

void ext_oracle_varlen(const fa_shape *s, const int64_t *cu_seqlens, const double *q, const double *k,
                       const double *v, const unsigned char *tokens, double *o, double *lse, fa_magnitudes *mag) {
    const int64_t H = s->H, D = s->D, total = cu_seqlens[s->B];
    const ext_options plain = {.H_kv = H, .window_left = -1, .window_right = -1};   // varlen alone, no other feature
    // The bounds are indexed like the checked tensors, [total, H] rows: one "head" per token, H rows in it.
    fa_shape token_shape = *s;
    token_shape.B = 1;
    token_shape.H = total;
    fa_alloc_row_bounds(&mag->o, &token_shape, tokens, H, "the oracle's bounds of O");
    fa_alloc_row_bounds(&mag->lse, &token_shape, tokens, H, "the oracle's bounds of LSE");
#pragma omp parallel
    {
        double *row = fa_alloc_doubles(2 * total + 3 * D, "the oracle's score row");
#pragma omp for schedule(dynamic)
        for (int64_t t = 0; t < total; t++) {
            if (tokens && !tokens[t]) continue;
            int64_t b = 0;
            while (cu_seqlens[b + 1] <= t) b++;
            const int64_t start = cu_seqlens[b], i = t - start, len = cu_seqlens[b + 1] - start;
            const int64_t last = s->causal ? i : len - 1;   // a sequence's own keys only; Sq = Sk, so no alignment
            for (int64_t h = 0; h < H; h++)
                oracle_row(s, &plain, b * H + h, i, q + (t * H + h) * D, k + (start * H + h) * D,
                           v + (start * H + h) * D, H * D, 0, last, row, row + total, row + 2 * total,
                           o + (t * H + h) * D, lse + t * H + h, &mag->o, &mag->lse, t * H + h);
        }
        free(row);
    }
}

void ext_oracle_backward(const fa_shape *s, const ext_options *e, const double *q, const double *k, const double *v,
                         const double *dout, const double *o, const double *lse, const unsigned char *heads,
                         double *dq, double *dk, double *dv, fa_magnitudes *mag) {
    const int64_t Sq = s->Sq, Sk = s->Sk, D = s->D, H = s->H, group = H / e->H_kv;
    const double scale = s->scale, C = e->softcap;
    fa_shape kv_shape = *s;
    kv_shape.H = e->H_kv;
    unsigned char *kv_heads = NULL;   // the K/V heads of the marked groups
    if (heads) {
        kv_heads = calloc((size_t)(s->B * e->H_kv), 1);
        if (!kv_heads) fa_die("out of host memory: the oracle's K/V head mask");
        for (int64_t bh = 0; bh < s->B * H; bh++)
            if (heads[bh]) kv_heads[bh / H * e->H_kv + bh % H / group] = 1;
    }
    fa_alloc_row_bounds(&mag->dq, s, heads, Sq, "the oracle's bounds of dQ");
    fa_alloc_row_bounds(&mag->dk, &kv_shape, kv_heads, Sk, "the oracle's bounds of dK");
    fa_alloc_row_bounds(&mag->dv, &kv_shape, kv_heads, Sk, "the oracle's bounds of dV");
#pragma omp parallel
    {
        // Per thread: one row's p, |dP|, slope of the cap, dropout factor and logit error factor g (fa_oracle.h), by
        // key; the dQ row's sums; and the bounds' sums of one K/V head (terms and logit parts of dK and dV).
        double *p = fa_alloc_doubles(6 * Sk + 3 * D + 6 * Sk * D, "the oracle's backward rows");
        double *dp = p + Sk, *slope = dp + Sk, *drop = slope + Sk, *g = drop + Sk, *dp_terms = g + Sk;
        double *abs_dq = dp_terms + Sk, *logit_dq = abs_dq + D, *factors_dq = logit_dq + D;
        double *abs_dk = factors_dq + D, *logit_dk = abs_dk + Sk * D, *factors_dk = logit_dk + Sk * D;
        double *abs_dv = factors_dk + Sk * D, *logit_dv = abs_dv + Sk * D, *factors_dv = logit_dv + Sk * D;
        // One program per K/V head: dK and dV of a K/V head are sums over the query heads of its group.
#pragma omp for schedule(dynamic)
        for (int64_t bg = 0; bg < s->B * e->H_kv; bg++) {
            const int64_t b = bg / e->H_kv, gh = bg % e->H_kv;
            if (heads && !heads[b * H + gh * group]) continue;   // the group is marked whole or not at all
            const double *k_g = k + bg * Sk * D, *v_g = v + bg * Sk * D;
            double *dk_g = dk + bg * Sk * D, *dv_g = dv + bg * Sk * D;
            for (int64_t x = 0; x < Sk * D; x++)
                dk_g[x] = dv_g[x] = abs_dk[x] = abs_dv[x] = logit_dk[x] = logit_dv[x] = factors_dk[x] = factors_dv[x] =
                    0.0;
            for (int64_t h = gh * group; h < (gh + 1) * group; h++) {
                const int64_t bh = b * H + h;
                for (int64_t i = 0; i < Sq; i++) {
                    const double *q_i = q + (bh * Sq + i) * D, *do_i = dout + (bh * Sq + i) * D;
                    const double *o_i = o + (bh * Sq + i) * D;
                    double *dq_i = dq + (bh * Sq + i) * D;
                    for (int64_t d = 0; d < D; d++) dq_i[d] = abs_dq[d] = logit_dq[d] = factors_dq[d] = 0.0;
                    int64_t first, last;
                    ext_key_range(s->causal, e, Sq, Sk, i, &first, &last);
                    double delta = 0.0, delta_terms = 0.0;   // Delta_i = dO_i . O_i, and the size of its terms
                    for (int64_t d = 0; d < D; d++) {
                        delta += do_i[d] * o_i[d];
                        delta_terms += fabs(do_i[d] * o_i[d]);
                    }
                    double g_mean = 0.0, G = 0.0, p_dp = 0.0;   // sum_j p_ij g_ij; what the logits move Delta_i by
                    for (int64_t j = first; j <= last; j++) {
                        double dot = 0.0, dpj = 0.0, abs_terms = 0.0, dpj_terms = 0.0;
                        for (int64_t d = 0; d < D; d++) {
                            dot += q_i[d] * k_g[j * D + d];
                            abs_terms += fabs(q_i[d] * k_g[j * D + d]);
                            dpj += do_i[d] * v_g[j * D + d];
                            dpj_terms += fabs(do_i[d] * v_g[j * D + d]);
                        }
                        double score = scale * dot;
                        slope[j] = 1.0;
                        if (C > 0.0) {   // softcapping: C tanh(score / C), whose slope is 1 - tanh^2
                            const double th = tanh(score / C);
                            score = C * th;
                            slope[j] = 1.0 - th * th;
                        }
                        p[j] = exp(score - lse[bh * Sq + i]);
                        g[j] = fa_logit_error(scale * abs_terms, D);
                        // Dropout: O = Z V with Z = P * drop, so dV takes Z and dP = (dO . V_j) * drop.
                        drop[j] = dropout_factor(e, bh, i, j);
                        dp[j] = dpj * drop[j];
                        dp_terms[j] = dpj_terms * drop[j];   // the size of dP's terms (it may cancel)
                        g_mean += p[j] * g[j];
                        G += p[j] * g[j] * dp_terms[j];
                        p_dp += p[j] * dp_terms[j];
                    }
                    G += g_mean * p_dp;
                    for (int64_t j = first; j <= last; j++) {
                        const double ds = p[j] * (dp[j] - delta) * slope[j];
                        const double ds_abs = p[j] * (dp_terms[j] + delta_terms) * slope[j], z = p[j] * drop[j];
                        // What the logits' error moves dS_ij by: through P, through Delta_i, and through the cap's
                        // slope (its relative change is at most 2 g_ij / C).
                        double ds_logit = p[j] * slope[j] * ((g[j] + g_mean) * (dp_terms[j] + delta_terms) + G);
                        if (C > 0.0) ds_logit += ds_abs * 2.0 * g[j] / C;
                        for (int64_t d = 0; d < D; d++) {
                            dq_i[d] += scale * ds * k_g[j * D + d];
                            dk_g[j * D + d] += scale * ds * q_i[d];
                            dv_g[j * D + d] += z * do_i[d];
                            abs_dq[d] += scale * ds_abs * fabs(k_g[j * D + d]);
                            logit_dq[d] += scale * ds_logit * fabs(k_g[j * D + d]);
                            abs_dk[j * D + d] += scale * ds_abs * fabs(q_i[d]);
                            logit_dk[j * D + d] += scale * ds_logit * fabs(q_i[d]);
                            abs_dv[j * D + d] += z * fabs(do_i[d]);
                            logit_dv[j * D + d] += z * (g[j] + g_mean) * fabs(do_i[d]);
                            // Underflow (fa_row_bounds.tiny): P and dS times their factors.
                            const double ds_factor = scale * (1.0 + dp_terms[j] + delta_terms);
                            factors_dq[d] += ds_factor * fabs(k_g[j * D + d]);
                            factors_dk[j * D + d] += ds_factor * fabs(q_i[d]);
                            factors_dv[j * D + d] += drop[j] * fabs(do_i[d]);
                        }
                    }
                    fa_set_row_bounds(&mag->dq, bh * Sq + i, abs_dq, logit_dq, factors_dq, D);
                }
            }
            for (int64_t j = 0; j < Sk; j++) {
                fa_set_row_bounds(&mag->dk, bg * Sk + j, abs_dk + j * D, logit_dk + j * D, factors_dk + j * D, D);
                fa_set_row_bounds(&mag->dv, bg * Sk + j, abs_dv + j * D, logit_dv + j * D, factors_dv + j * D, D);
            }
        }
        free(p);
    }
    free(kv_heads);
}
