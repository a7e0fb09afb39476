// fa_oracle.c - float64 attention forward and backward, one query row (or one key row) at a time.
#include "fa_oracle.h"
#include "fa_tensor.h"

#include <math.h>
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

void fa_oracle_magnitudes(const fa_shape *s, const double *q, const double *k, const double *v, const double *dout,
                          const double *o, const double *lse, const unsigned char *heads, fa_magnitudes *mag) {
    const int64_t D = s->D, BH = s->B * s->H;
    double mag_o = 0.0, mag_lse = 0.0, mag_dq = 0.0, mag_dk = 0.0, mag_dv = 0.0;
    // |Delta_i| = |dO_i . O_i| of every row, once: both passes below need it.
    double *delta = dout ? fa_oracle_alloc_heads(s, heads, s->Sq, "oracle |Delta|") : NULL;
    // Rows: O, LSE and dQ are sums over the keys of one query row.
#pragma omp parallel if (worth_threads(s)) reduction(max : mag_o, mag_lse, mag_dq)
    {
        double *sum_o = fa_alloc_doubles(2 * D, "oracle magnitudes"), *sum_dq = sum_o + D;
#pragma omp for collapse(2) schedule(dynamic, 16)
        for (int64_t bh = 0; bh < BH; bh++) {
            for (int64_t i = 0; i < s->Sq; i++) {
                if (heads && !heads[bh]) continue;
                const int64_t row = bh * s->Sq + i;
                const double *q_row = q + row * D, *k_head = k + bh * s->Sk * D, *v_head = v + bh * s->Sk * D;
                if (delta) delta[row] = fabs(dot(dout + row * D, o + row * D, D));
                double max_score = -INFINITY;
                for (int64_t d = 0; d < D; d++) sum_o[d] = sum_dq[d] = 0.0;
                for (int64_t j = 0; j < visible_keys(s, i); j++) {
                    const double score = s->scale * dot(q_row, k_head + j * D, D);
                    const double p = exp(score - lse[row]);
                    if (score > max_score) max_score = score;
                    const double ds_terms =
                        delta ? p * (fabs(dot(dout + row * D, v_head + j * D, D)) + delta[row]) : 0.0;
                    for (int64_t d = 0; d < D; d++) {
                        sum_o[d] += p * fabs(v_head[j * D + d]);
                        sum_dq[d] += s->scale * ds_terms * fabs(k_head[j * D + d]);
                    }
                }
                for (int64_t d = 0; d < D; d++) {
                    mag_o = fmax(mag_o, sum_o[d]);
                    mag_dq = fmax(mag_dq, sum_dq[d]);
                }
                if (visible_keys(s, i) > 0) mag_lse = fmax(mag_lse, fabs(max_score) + (lse[row] - max_score));
            }
        }
        free(sum_o);
    }
    // Columns: dK and dV are sums over the query rows that see one key.
    if (dout) {
#pragma omp parallel if (worth_threads(s)) reduction(max : mag_dk, mag_dv)
        {
            double *sum_dk = fa_alloc_doubles(2 * D, "oracle magnitudes"), *sum_dv = sum_dk + D;
#pragma omp for collapse(2) schedule(dynamic, 16)
            for (int64_t bh = 0; bh < BH; bh++) {
                for (int64_t j = 0; j < s->Sk; j++) {
                    if (heads && !heads[bh]) continue;
                    const double *k_row = k + (bh * s->Sk + j) * D, *v_row = v + (bh * s->Sk + j) * D;
                    for (int64_t d = 0; d < D; d++) sum_dk[d] = sum_dv[d] = 0.0;
                    for (int64_t i = s->causal ? j : 0; i < s->Sq; i++) {
                        const int64_t row = bh * s->Sq + i;
                        const double *q_row = q + row * D, *do_row = dout + row * D;
                        const double p = exp(s->scale * dot(q_row, k_row, D) - lse[row]);
                        const double ds_terms = p * (fabs(dot(do_row, v_row, D)) + delta[row]);
                        for (int64_t d = 0; d < D; d++) {
                            sum_dv[d] += p * fabs(do_row[d]);
                            sum_dk[d] += s->scale * ds_terms * fabs(q_row[d]);
                        }
                    }
                    for (int64_t d = 0; d < D; d++) {
                        mag_dk = fmax(mag_dk, sum_dk[d]);
                        mag_dv = fmax(mag_dv, sum_dv[d]);
                    }
                }
            }
            free(sum_dk);
        }
    }
    free(delta);
    *mag = (fa_magnitudes){mag_o, mag_lse, mag_dq, mag_dk, mag_dv};
}
