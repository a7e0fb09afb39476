// fa_oracle.c - float64 attention forward and backward, one query row (or one key row) at a time.
#include "fa_oracle.h"
#include "fa_tensor.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

double *fa_to_double(const float *x, int64_t count, const char *what) {
    double *out = fa_alloc_doubles(count, what);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < count; i++) out[i] = (double)x[i];
    return out;
}

double *fa_oracle_alloc_heads(const fa_shape *s, const unsigned char *heads, int64_t per_head, const char *what) {
    const int64_t BH = s->B * s->H;
    int64_t kept = 0;
    for (int64_t bh = 0; bh < BH; bh++) kept += !heads || heads[bh];
    const double touched = (double)kept * (double)per_head * sizeof(double);
    const int64_t available = fa_host_available_bytes();
    if (available >= 0 && touched > (double)available)
        fa_die("out of host memory: %s needs %.0f bytes for %lld heads", what, touched, (long long)kept);
    double *x = calloc((size_t)(BH * per_head), sizeof(double));
    if (!x)
        fa_die("out of host memory: %s needs %.0f bytes of address space", what,
               (double)BH * (double)per_head * sizeof(double));
    return x;
}

double *fa_oracle_heads_to_double(const float *x, const fa_shape *s, const unsigned char *heads, int64_t per_head,
                                  const char *what) {
    double *out = fa_oracle_alloc_heads(s, heads, per_head, what);
    for (int64_t bh = 0; bh < s->B * s->H; bh++) {
        if (heads && !heads[bh]) continue;
        const float *from = x + bh * per_head;
        double *to = out + bh * per_head;
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < per_head; i++) to[i] = (double)from[i];
    }
    return out;
}

// Threads only pay off past about a million multiply-adds: below that (the tiny shapes of the gradient checks,
// which call the oracle thousands of times) starting a parallel region costs more than the work.
static int worth_threads(const fa_shape *s) {
    return (double)s->B * (double)s->H * (double)s->Sq * (double)s->Sk * (double)s->D > 1e6;
}

static int64_t visible_keys(const fa_shape *s, int64_t i) {
    if (!s->causal) return s->Sk;
    return i + 1 < s->Sk ? i + 1 : s->Sk;   // row i sees keys 0..i
}

static double dot(const double *a, const double *b, int64_t n) {
    double sum = 0.0;
    for (int64_t d = 0; d < n; d++) sum += a[d] * b[d];
    return sum;
}

// The size of a dot product's terms, sum_d |a_d b_d|: what a float32 dot product's error is measured against (its
// result may cancel to nearly 0, its error does not).
static double abs_dot(const double *a, const double *b, int64_t n) {
    double sum = 0.0;
    for (int64_t d = 0; d < n; d++) sum += fabs(a[d] * b[d]);
    return sum;
}

// One query row: scores into p[0..n) (as probabilities on return), and the row's log-sum-exp.
static double softmax_row(const fa_shape *s, const double *q_row, const double *k_head, int64_t n, double *p) {
    double m = -INFINITY;
    for (int64_t j = 0; j < n; j++) {
        p[j] = s->scale * dot(q_row, k_head + j * s->D, s->D);
        if (p[j] > m) m = p[j];
    }
    double l = 0.0;
    for (int64_t j = 0; j < n; j++) {
        p[j] = exp(p[j] - m);
        l += p[j];
    }
    for (int64_t j = 0; j < n; j++) p[j] /= l;
    return m + log(l);
}

void fa_oracle_forward(const fa_shape *s, const double *q, const double *k, const double *v,
                       const unsigned char *heads, double *o, double *lse) {
    const int64_t D = s->D, BH = s->B * s->H;
    // Rows are independent: parallelise over (head, row) so that one long head still uses every core.
#pragma omp parallel if (worth_threads(s))
    {
        double *p = fa_alloc_doubles(s->Sk, "oracle row of P");
#pragma omp for collapse(2) schedule(dynamic, 16)
        for (int64_t bh = 0; bh < BH; bh++) {
            for (int64_t i = 0; i < s->Sq; i++) {
                if (heads && !heads[bh]) continue;
                const double *q_row = q + (bh * s->Sq + i) * D;
                const double *k_head = k + bh * s->Sk * D, *v_head = v + bh * s->Sk * D;
                int64_t n = visible_keys(s, i);
                double row_lse = softmax_row(s, q_row, k_head, n, p);
                double *o_row = o + (bh * s->Sq + i) * D;
                for (int64_t d = 0; d < D; d++) o_row[d] = 0.0;
                for (int64_t j = 0; j < n; j++)
                    for (int64_t d = 0; d < D; d++) o_row[d] += p[j] * v_head[j * D + d];
                lse[bh * s->Sq + i] = row_lse;
            }
        }
        free(p);
    }
}

void fa_oracle_backward(const fa_shape *s, const double *q, const double *k, const double *v, const double *dout,
                        const double *o, const double *lse, const unsigned char *heads, double *dq, double *dk,
                        double *dv) {
    const int64_t D = s->D, BH = s->B * s->H;
    double *delta = fa_oracle_alloc_heads(s, heads, s->Sq, "oracle Delta");

    // Pass 1, one query row at a time: Delta_i = dO_i . O_i, and dQ_i = scale * sum_j dS_ij k_j.
#pragma omp parallel if (worth_threads(s))
    {
        double *p = fa_alloc_doubles(s->Sk, "oracle row of P");
#pragma omp for collapse(2) schedule(dynamic, 16)
        for (int64_t bh = 0; bh < BH; bh++) {
            for (int64_t i = 0; i < s->Sq; i++) {
                if (heads && !heads[bh]) continue;
                const int64_t row = bh * s->Sq + i;
                const double *k_head = k + bh * s->Sk * D, *v_head = v + bh * s->Sk * D;
                const double *do_row = dout + row * D;
                delta[row] = dot(do_row, o + row * D, D);
                int64_t n = visible_keys(s, i);
                softmax_row(s, q + row * D, k_head, n, p);
                double *dq_row = dq + row * D;
                for (int64_t d = 0; d < D; d++) dq_row[d] = 0.0;
                for (int64_t j = 0; j < n; j++) {
                    double dp = dot(do_row, v_head + j * D, D);
                    double ds = p[j] * (dp - delta[row]);
                    for (int64_t d = 0; d < D; d++) dq_row[d] += s->scale * ds * k_head[j * D + d];
                }
            }
        }
        free(p);
    }

    // Pass 2, one key row at a time: dV_j = sum_i P_ij dO_i and dK_j = scale * sum_i dS_ij q_i, with
    // P_ij = exp(S_ij - LSE_i) recomputed from the stored log-sum-exp.
#pragma omp parallel for collapse(2) schedule(dynamic, 16) if (worth_threads(s))
    for (int64_t bh = 0; bh < BH; bh++) {
        for (int64_t j = 0; j < s->Sk; j++) {
            if (heads && !heads[bh]) continue;
            const double *k_row = k + (bh * s->Sk + j) * D, *v_row = v + (bh * s->Sk + j) * D;
            double *dk_row = dk + (bh * s->Sk + j) * D, *dv_row = dv + (bh * s->Sk + j) * D;
            for (int64_t d = 0; d < D; d++) dk_row[d] = dv_row[d] = 0.0;
            for (int64_t i = s->causal ? j : 0; i < s->Sq; i++) {
                const int64_t row = bh * s->Sq + i;
                const double *q_row = q + row * D, *do_row = dout + row * D;
                double pij = exp(s->scale * dot(q_row, k_row, D) - lse[row]);
                double ds = pij * (dot(do_row, v_row, D) - delta[row]);
                for (int64_t d = 0; d < D; d++) {
                    dv_row[d] += pij * do_row[d];
                    dk_row[d] += s->scale * ds * q_row[d];
                }
            }
        }
    }
    free(delta);
}

double fa_logit_error(double abs_terms, int64_t D) {
    const double eps = 1.1920929e-7;   // float32 machine epsilon
    // fmin: an infinite bound (an Inf input) stays finite, so that a key of weight 0 times it is still 0.
    return expm1(fmin(FA_LOGIT_ERROR_FACTOR * eps * sqrt((double)D) * abs_terms, 700.0));
}

void fa_alloc_row_bounds(fa_row_bounds *b, const fa_shape *s, const unsigned char *heads, int64_t rows_per_head,
                         const char *what) {
    b->scale = fa_oracle_alloc_heads(s, heads, rows_per_head, what);
    b->logit = fa_oracle_alloc_heads(s, heads, rows_per_head, what);
    b->tiny = fa_oracle_alloc_heads(s, heads, rows_per_head, what);
}

void fa_set_row_bounds(fa_row_bounds *b, int64_t r, const double *scale_d, const double *logit_d,
                       const double *factors_d, int64_t D) {
    double scale = 0.0, logit = 0.0, factors = 0.0;
    for (int64_t d = 0; d < D; d++) {   // fmax leaves a NaN out
        scale = fmax(scale, scale_d[d]);
        logit = fmax(logit, logit_d[d]);
        factors = fmax(factors, factors_d[d]);
    }
    b->scale[r] = scale;
    b->logit[r] = scale > 0.0 ? logit / scale : 0.0;
    b->tiny[r] = FLT_MIN * factors;
}

void fa_free_magnitudes(fa_magnitudes *m) {
    fa_row_bounds *all[5] = {&m->o, &m->lse, &m->dq, &m->dk, &m->dv};
    for (int x = 0; x < 5; x++) {
        free(all[x]->scale);
        free(all[x]->logit);
        free(all[x]->tiny);
        all[x]->scale = all[x]->logit = all[x]->tiny = NULL;
    }
}

void fa_refuse_unjudgeable_rows(const char *tensor, const fa_row_bounds *b, const int64_t dims[4],
                                const unsigned char *heads) {
    if (!b->logit) return;
    const int64_t rows = dims[0] * dims[1] * dims[2];
    for (int64_t r = 0; r < rows; r++) {
        if (heads && !heads[r / dims[2]]) continue;
        if (!(b->logit[r] > FA_LOGIT_LIMIT)) continue;   // (NaN: a NaN input, checked as such)
        char by[32];
        if (b->logit[r] < 1.0) snprintf(by, sizeof by, "%.2g of", b->logit[r]);
        else snprintf(by, sizeof by, "more than");
        fa_die("the inputs are outside the range the float32 check can judge: in row (%lld,%lld,%lld) of %s the "
               "logits are so large that their float32 rounding alone may move the result by %s its size (the "
               "check needs under %g); make the inputs or --scale smaller",
               (long long)(r / dims[2] / dims[1]), (long long)(r / dims[2] % dims[1]), (long long)(r % dims[2]),
               tensor, by, FA_LOGIT_LIMIT);
    }
}

void fa_oracle_magnitudes(const fa_shape *s, const double *q, const double *k, const double *v, const double *dout,
                          const double *o, const double *lse, const unsigned char *heads, fa_magnitudes *mag) {
    const int64_t D = s->D, BH = s->B * s->H;
    memset(mag, 0, sizeof *mag);
    fa_alloc_row_bounds(&mag->o, s, heads, s->Sq, "oracle bounds of O");
    fa_alloc_row_bounds(&mag->lse, s, heads, s->Sq, "oracle bounds of LSE");
    // Per query row, for the backward: |Delta_i|, the row's weighted logit error g_i = sum_j p_ij g_ij, and G_i, what
    // the logits' error may move Delta_i by (Delta_i = sum_j p_ij dP_ij).
    double *delta = NULL, *g_row = NULL, *G_row = NULL;
    if (dout) {
        fa_alloc_row_bounds(&mag->dq, s, heads, s->Sq, "oracle bounds of dQ");
        fa_alloc_row_bounds(&mag->dk, s, heads, s->Sk, "oracle bounds of dK");
        fa_alloc_row_bounds(&mag->dv, s, heads, s->Sk, "oracle bounds of dV");
        delta = fa_oracle_alloc_heads(s, heads, s->Sq, "oracle |Delta|");
        g_row = fa_oracle_alloc_heads(s, heads, s->Sq, "oracle logit errors");
        G_row = fa_oracle_alloc_heads(s, heads, s->Sq, "oracle logit errors");
    }
    // Rows: O, LSE and dQ are sums over the keys of one query row.
#pragma omp parallel if (worth_threads(s))
    {
        double *p = fa_alloc_doubles(3 * s->Sk + 6 * D, "oracle magnitudes");
        double *g = p + s->Sk, *dp = g + s->Sk;
        double *sum_o = dp + s->Sk, *logit_o = sum_o + D, *sum_dq = logit_o + D, *logit_dq = sum_dq + D;
        double *factors_o = logit_dq + D, *factors_dq = factors_o + D;   // the sizes of the factors beside P and dS
#pragma omp for collapse(2) schedule(dynamic, 16)
        for (int64_t bh = 0; bh < BH; bh++) {
            for (int64_t i = 0; i < s->Sq; i++) {
                if (heads && !heads[bh]) continue;
                const int64_t row = bh * s->Sq + i, n = visible_keys(s, i);
                const double *q_row = q + row * D, *k_head = k + bh * s->Sk * D, *v_head = v + bh * s->Sk * D;
                double max_score = -INFINITY, g_mean = 0.0, a_mean = 0.0, pg_dp = 0.0, p_dp = 0.0;
                for (int64_t d = 0; d < D; d++)
                    sum_o[d] = logit_o[d] = sum_dq[d] = logit_dq[d] = factors_o[d] = factors_dq[d] = 0.0;
                for (int64_t j = 0; j < n; j++) {
                    const double *k_row = k_head + j * D;
                    double score = 0.0, abs_terms = 0.0;
                    for (int64_t d = 0; d < D; d++) {
                        score += q_row[d] * k_row[d];
                        abs_terms += fabs(q_row[d] * k_row[d]);
                    }
                    score *= s->scale;
                    if (score > max_score) max_score = score;
                    p[j] = exp(score - lse[row]);
                    g[j] = fa_logit_error(s->scale * abs_terms, D);
                    g_mean += p[j] * g[j];
                    a_mean += p[j] * s->scale * abs_terms;
                    for (int64_t d = 0; d < D; d++) {
                        sum_o[d] += p[j] * fabs(v_head[j * D + d]);
                        logit_o[d] += p[j] * g[j] * fabs(v_head[j * D + d]);
                        factors_o[d] += fabs(v_head[j * D + d]);
                    }
                    if (dout) {
                        dp[j] = abs_dot(dout + row * D, v_head + j * D, D);
                        pg_dp += p[j] * g[j] * dp[j];
                        p_dp += p[j] * dp[j];
                    }
                }
                for (int64_t d = 0; d < D; d++) logit_o[d] += g_mean * sum_o[d];
                fa_set_row_bounds(&mag->o, row, sum_o, logit_o, factors_o, D);
                // LSE_i moves by sum_j p_ij delta_ij to first order. Its scale is the size of the sums that make it:
                // |max| + log(l), or the size of the logits' own terms when larger (terms that cancel).
                const double lse_scale = n > 0 ? fmax(fabs(max_score) + (lse[row] - max_score), a_mean) : 0.0;
                const double no_factors = 0.0;   // LSE sums no underflowing products
                fa_set_row_bounds(&mag->lse, row, &lse_scale, &g_mean, &no_factors, 1);
                if (!dout) continue;
                delta[row] = abs_dot(dout + row * D, o + row * D, D);
                g_row[row] = g_mean;
                G_row[row] = pg_dp + g_mean * p_dp;
                for (int64_t j = 0; j < n; j++) {
                    // dS_ij = p_ij (dP_ij - Delta_i): its terms, and what the logits' error moves it by.
                    const double ds_terms = p[j] * (dp[j] + delta[row]);
                    const double ds_logit = p[j] * ((g[j] + g_mean) * (dp[j] + delta[row]) + G_row[row]);
                    for (int64_t d = 0; d < D; d++) {
                        sum_dq[d] += s->scale * ds_terms * fabs(k_head[j * D + d]);
                        logit_dq[d] += s->scale * ds_logit * fabs(k_head[j * D + d]);
                        // dS_ij underflows, and so does P_ij inside it: FLT_MIN times (1 + its factors).
                        factors_dq[d] += s->scale * (1.0 + dp[j] + delta[row]) * fabs(k_head[j * D + d]);
                    }
                }
                fa_set_row_bounds(&mag->dq, row, sum_dq, logit_dq, factors_dq, D);
            }
        }
        free(p);
    }
    // Columns: dK and dV are sums over the query rows that see one key.
    if (dout) {
#pragma omp parallel if (worth_threads(s))
        {
            double *sum_dk = fa_alloc_doubles(6 * D, "oracle magnitudes");
            double *logit_dk = sum_dk + D, *sum_dv = logit_dk + D, *logit_dv = sum_dv + D;
            double *factors_dk = logit_dv + D, *factors_dv = factors_dk + D;
#pragma omp for collapse(2) schedule(dynamic, 16)
            for (int64_t bh = 0; bh < BH; bh++) {
                for (int64_t j = 0; j < s->Sk; j++) {
                    if (heads && !heads[bh]) continue;
                    const double *k_row = k + (bh * s->Sk + j) * D, *v_row = v + (bh * s->Sk + j) * D;
                    for (int64_t d = 0; d < D; d++)
                        sum_dk[d] = logit_dk[d] = sum_dv[d] = logit_dv[d] = factors_dk[d] = factors_dv[d] = 0.0;
                    for (int64_t i = s->causal ? j : 0; i < s->Sq; i++) {
                        const int64_t row = bh * s->Sq + i;
                        const double *q_row = q + row * D, *do_row = dout + row * D;
                        double score = 0.0, abs_terms = 0.0;
                        for (int64_t d = 0; d < D; d++) {
                            score += q_row[d] * k_row[d];
                            abs_terms += fabs(q_row[d] * k_row[d]);
                        }
                        const double p = exp(s->scale * score - lse[row]);
                        const double g = fa_logit_error(s->scale * abs_terms, D), dp = abs_dot(do_row, v_row, D);
                        const double ds_terms = p * (dp + delta[row]);
                        const double ds_logit = p * ((g + g_row[row]) * (dp + delta[row]) + G_row[row]);
                        for (int64_t d = 0; d < D; d++) {
                            sum_dv[d] += p * fabs(do_row[d]);
                            logit_dv[d] += p * (g + g_row[row]) * fabs(do_row[d]);
                            sum_dk[d] += s->scale * ds_terms * fabs(q_row[d]);
                            logit_dk[d] += s->scale * ds_logit * fabs(q_row[d]);
                            factors_dv[d] += fabs(do_row[d]);
                            factors_dk[d] += s->scale * (1.0 + dp + delta[row]) * fabs(q_row[d]);
                        }
                    }
                    fa_set_row_bounds(&mag->dk, bh * s->Sk + j, sum_dk, logit_dk, factors_dk, D);
                    fa_set_row_bounds(&mag->dv, bh * s->Sk + j, sum_dv, logit_dv, factors_dv, D);
                }
            }
            free(sum_dk);
        }
    }
    free(delta);
    free(g_row);
    free(G_row);
}
