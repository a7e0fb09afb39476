// fa_shape.c - shape validation and the derived counts.
#include "fa_shape.h"

#include <math.h>
#include <stdio.h>

static int check_dim(const char *name, int64_t value, char *err, size_t err_len) {
    if (value <= 0) {
        snprintf(err, err_len, "%s must be positive (got %lld)", name, (long long)value);
        return -1;
    }
    if (value > FA_MAX_DIM) {
        snprintf(err, err_len, "%s = %lld is too large (at most %lld)", name, (long long)value,
                 (long long)FA_MAX_DIM);
        return -1;
    }
    return 0;
}

// a*b*c*d without overflow: every factor is <= 2^31, so we can check each product against the limit.
static int product_fits(int64_t a, int64_t b, int64_t c, int64_t d) {
    double p = (double)a * (double)b * (double)c * (double)d;
    return p <= (double)FA_MAX_NUMEL;
}

int fa_shape_validate(const fa_shape *s, char *err, size_t err_len) {
    if (check_dim("B", s->B, err, err_len) || check_dim("H", s->H, err, err_len) ||
        check_dim("Sq", s->Sq, err, err_len) || check_dim("Sk", s->Sk, err, err_len) ||
        check_dim("D", s->D, err, err_len))
        return -1;
    if (!product_fits(s->B, s->H, s->Sq, s->D) || !product_fits(s->B, s->H, s->Sk, s->D) ||
        !product_fits(s->B, s->H, s->Sq, s->Sk)) {
        snprintf(err, err_len, "shape B=%lld H=%lld Sq=%lld Sk=%lld D=%lld has more than 2^40 elements in one tensor",
                 (long long)s->B, (long long)s->H, (long long)s->Sq, (long long)s->Sk, (long long)s->D);
        return -1;
    }
    if (!isfinite(s->scale) || s->scale <= 0.0f) {
        snprintf(err, err_len, "scale must be a positive finite number (got %g)", (double)s->scale);
        return -1;
    }
    return 0;
}

int64_t fa_numel_q(const fa_shape *s) { return s->B * s->H * s->Sq * s->D; }
int64_t fa_numel_kv(const fa_shape *s) { return s->B * s->H * s->Sk * s->D; }
int64_t fa_numel_lse(const fa_shape *s) { return s->B * s->H * s->Sq; }
int64_t fa_numel_scores(const fa_shape *s) { return s->B * s->H * s->Sq * s->Sk; }

double fa_visible_pairs(const fa_shape *s) {
    double per_head;
    if (!s->causal) {
        per_head = (double)s->Sq * (double)s->Sk;
    } else {
        // Row i sees min(i + 1, Sk) keys.
        double full_rows = (double)(s->Sq > s->Sk ? s->Sq - s->Sk : 0);
        double tri = s->Sq < s->Sk ? (double)s->Sq : (double)s->Sk;
        per_head = tri * (tri + 1.0) / 2.0 + full_rows * (double)s->Sk;
    }
    return per_head * (double)s->B * (double)s->H;
}

double fa_flops_forward(const fa_shape *s) {
    double full = 4.0 * (double)s->B * (double)s->H * (double)s->Sq * (double)s->Sk * (double)s->D;
    if (s->causal && s->Sq == s->Sk) return full / 2.0;
    if (s->causal) return 4.0 * fa_visible_pairs(s) * (double)s->D;   // not square: count what is visible
    return full;
}

double fa_flops_backward(const fa_shape *s) { return 2.5 * fa_flops_forward(s); }

fa_strides fa_strides_contiguous(int64_t H, int64_t S, int64_t D) {
    fa_strides st = {H * S * D, S * D, D, 1};
    return st;
}
