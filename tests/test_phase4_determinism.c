// test_phase4_determinism.c - the deterministic dQ variant gives the same bits on every run.
//
// Usage: test_phase4_determinism cpu|cuda
//   cpu:  the backward (deterministic dQ) with 1, 2 and 3 OpenMP threads must give bitwise identical dQ, dK, dV;
//         the same tensors laid out [B, S, H, D] (a strided view) must give the same bits again; both variants must
//         match the float64 oracle.
//   cuda: two runs of the deterministic backward on the GPU must give bitwise identical dQ, dK, dV, and both variants
//         must match the oracle. Exits 77 (skipped) without a GPU.
// O and LSE come from the float64 oracle rounded to float32, so that this test checks the backward alone.
#include "fa_baselines.h"
#include "fa_gpu.h"
#include "fa_test_device.h"
#include "fa_test_grads.h"
#include "fa_oracle.h"
#include "fa_tensor.h"
#include "fa_verify.h"
#include "fa_test_expect.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


// A problem: float32 inputs, O and LSE, and the oracle's gradients.
typedef struct {
    fa_shape s;
    float *q, *k, *v, *o, *lse, *dout;
    double *dq, *dk, *dv;
} problem;

static float *to_float(const double *x, int64_t n) {
    float *out = fa_alloc_floats(n, "test tensor");
    for (int64_t i = 0; i < n; i++) out[i] = (float)x[i];
    return out;
}

static problem make_problem(fa_shape s, uint64_t seed) {
    problem p;
    p.s = s;
    const int64_t nq = fa_numel_q(&s), nk = fa_numel_kv(&s), nl = fa_numel_lse(&s);
    p.q = fa_alloc_floats(nq, "q"), p.k = fa_alloc_floats(nk, "k"), p.v = fa_alloc_floats(nk, "v");
    p.dout = fa_alloc_floats(nq, "dO");
    fa_fill_random(p.q, nq, seed, FA_STREAM_Q, 1.0f);
    fa_fill_random(p.k, nk, seed, FA_STREAM_K, 1.0f);
    fa_fill_random(p.v, nk, seed, FA_STREAM_V, 1.0f);
    fa_fill_random(p.dout, nq, seed, FA_STREAM_DO, 1.0f);
    double *q = fa_to_double(p.q, nq, "q"), *k = fa_to_double(p.k, nk, "k"), *v = fa_to_double(p.v, nk, "v");
    double *dout = fa_to_double(p.dout, nq, "dO");
    double *o = fa_alloc_doubles(nq, "O"), *lse = fa_alloc_doubles(nl, "LSE");
    p.dq = fa_alloc_doubles(nq, "dQ"), p.dk = fa_alloc_doubles(nk, "dK"), p.dv = fa_alloc_doubles(nk, "dV");
    fa_oracle_forward(&s, q, k, v, NULL, o, lse);
    fa_oracle_backward(&s, q, k, v, dout, o, lse, NULL, p.dq, p.dk, p.dv);
    p.o = to_float(o, nq);
    p.lse = to_float(lse, nl);
    free(q), free(k), free(v), free(dout), free(o), free(lse);
    return p;
}

static void free_problem(problem *p) {
    free(p->q), free(p->k), free(p->v), free(p->o), free(p->lse), free(p->dout);
    free(p->dq), free(p->dk), free(p->dv);
}

static void expect_matches_oracle(const problem *p, const fa_grads *g, const char *what) {
    int64_t dq_dims[4] = {p->s.B, p->s.H, p->s.Sq, p->s.D}, dkv_dims[4] = {p->s.B, p->s.H, p->s.Sk, p->s.D};
    const struct { const char *name; const float *got; const double *want; const int64_t *dims; } t[3] = {
        {"dQ", g->dq, p->dq, dq_dims}, {"dK", g->dk, p->dk, dkv_dims}, {"dV", g->dv, p->dv, dkv_dims}};
    for (int i = 0; i < 3; i++) {
        fa_check c = fa_verify_results(what, t[i].name, t[i].got, t[i].want, t[i].dims, NULL, FA_TOL_BACKWARD);
        printf("  %-34s %s rel err %.2e %s\n", what, t[i].name, c.rel_err, c.pass ? "ok" : "FAIL");
        EXPECT_MSG(c.pass, "%s: %s does not match the oracle (rel err %.3e)", what, t[i].name, c.rel_err);
    }
}

// The tensors of a backward call on contiguous [B, H, S, D] buffers.
static backward_tensors contiguous_tensors(const fa_shape *s, const float *q, const float *k, const float *v,
                                           const float *o, const float *lse, const float *dout, float *delta,
                                           fa_grads *g) {
    const fa_strides sq = fa_strides_contiguous(s->H, s->Sq, s->D), sk = fa_strides_contiguous(s->H, s->Sk, s->D);
    backward_tensors t = {q, k, v, o, lse, dout, sq, sk, sk, sq, sq, delta, g->dq, g->dk, g->dv, sq, sk, sk, NULL};
    return t;
}

// ---------------------------------------------------------------------------------------------------------------
// [B, H, S, D] -> [B, S, H, D]: the same tensor in another layout, and the strides that view it as [B, H, S, D].
static float *to_bshd(const float *x, const fa_shape *s, int64_t S) {
    const int64_t n = s->B * s->H * S * s->D;
    float *out = fa_alloc_floats(n, "BSHD copy");
    for (int64_t b = 0; b < s->B; b++)
        for (int64_t h = 0; h < s->H; h++)
            for (int64_t i = 0; i < S; i++)
                for (int64_t d = 0; d < s->D; d++)
                    out[((b * S + i) * s->H + h) * s->D + d] = x[((b * s->H + h) * S + i) * s->D + d];
    return out;
}
static fa_strides bshd_strides(const fa_shape *s, int64_t S) {
    fa_strides st = {S * s->H * s->D, s->D, s->H * s->D, 1};
    return st;
}

static void test_cpu(const fa_shape *s, int block_m, int block_n) {
    printf("cpu  B=%lld H=%lld Sq=%lld Sk=%lld D=%lld causal=%d tiles %dx%d\n", (long long)s->B, (long long)s->H,
           (long long)s->Sq, (long long)s->Sk, (long long)s->D, s->causal, block_m, block_n);
    problem p = make_problem(*s, 42);
    float *delta = fa_alloc_floats(fa_numel_lse(s), "Delta");
    const int thread_counts[3] = {1, 2, 3};
    fa_grads runs[3];
    for (int r = 0; r < 3; r++) {
        runs[r] = grads_alloc(s);
        backward_tensors t = contiguous_tensors(s, p.q, p.k, p.v, p.o, p.lse, p.dout, delta, &runs[r]);
        omp_set_num_threads(thread_counts[r]);
        flash_backward_cpu(s, block_m, block_n, FA_DQ_DETERMINISTIC, &t);
    }
    expect_matches_oracle(&p, &runs[0], "deterministic, 1 thread");
    expect_same_bits(s, &runs[0], &runs[1], "deterministic, 1 vs 2 threads");
    expect_same_bits(s, &runs[0], &runs[2], "deterministic, 1 vs 3 threads");

    // The same tensors in [B, S, H, D] layout, passed with their strides: the same bits again.
    fa_grads strided = grads_alloc(s);
    float *q = to_bshd(p.q, s, s->Sq), *k = to_bshd(p.k, s, s->Sk), *v = to_bshd(p.v, s, s->Sk);
    float *o = to_bshd(p.o, s, s->Sq), *dout = to_bshd(p.dout, s, s->Sq);
    float *dq = to_bshd(strided.dq, s, s->Sq), *dk = to_bshd(strided.dk, s, s->Sk), *dv = to_bshd(strided.dv, s, s->Sk);
    const fa_strides sq = bshd_strides(s, s->Sq), sk = bshd_strides(s, s->Sk);
    backward_tensors t = {q, k, v, o, p.lse, dout, sq, sk, sk, sq, sq, delta, dq, dk, dv, sq, sk, sk, NULL};
    omp_set_num_threads(2);
    flash_backward_cpu(s, block_m, block_n, FA_DQ_DETERMINISTIC, &t);
    // Back to [B, H, S, D]: element (b, h, i, d) of the view.
    for (int64_t bh = 0; bh < s->B * s->H; bh++) {
        const int64_t b = bh / s->H, h = bh % s->H;
        for (int64_t i = 0; i < s->Sq; i++)
            for (int64_t d = 0; d < s->D; d++)
                strided.dq[(bh * s->Sq + i) * s->D + d] = dq[b * sq.b + h * sq.h + i * sq.s + d];
        for (int64_t j = 0; j < s->Sk; j++)
            for (int64_t d = 0; d < s->D; d++) {
                strided.dk[(bh * s->Sk + j) * s->D + d] = dk[b * sk.b + h * sk.h + j * sk.s + d];
                strided.dv[(bh * s->Sk + j) * s->D + d] = dv[b * sk.b + h * sk.h + j * sk.s + d];
            }
    }
    expect_same_bits(s, &runs[0], &strided, "deterministic, [B,S,H,D] strided view");
    free(q), free(k), free(v), free(o), free(dout), free(dq), free(dk), free(dv);

    // The atomic variant: race-free, so still right (its bits may differ from the deterministic ones).
    fa_grads atomic = grads_alloc(s);
    t = contiguous_tensors(s, p.q, p.k, p.v, p.o, p.lse, p.dout, delta, &atomic);
    omp_set_num_threads(3);
    flash_backward_cpu(s, block_m, block_n, FA_DQ_ATOMIC, &t);
    expect_matches_oracle(&p, &atomic, "atomic, 3 threads");
    // dK and dV do not depend on the dQ variant: the same bits.
    EXPECT_MSG(memcmp(atomic.dk, runs[0].dk, (size_t)fa_numel_kv(s) * sizeof(float)) == 0 &&
               memcmp(atomic.dv, runs[0].dv, (size_t)fa_numel_kv(s) * sizeof(float)) == 0,
           "atomic variant: dK or dV differs from the deterministic run");

    for (int r = 0; r < 3; r++) grads_free(&runs[r]);
    grads_free(&strided);
    grads_free(&atomic);
    free(delta);
    free_problem(&p);
}

#if FA_HAVE_CUDA
// Runs the backward on the GPU and brings dQ, dK, dV back.
static void run_cuda(const problem *p, int block_m, int block_n, int dq_mode, fa_grads *out) {
    const fa_shape *s = &p->s;
    const int64_t nq = fa_numel_q(s), nk = fa_numel_kv(s), nl = fa_numel_lse(s);
    float *q = fa_gpu_alloc(nq, "q"), *k = fa_gpu_alloc(nk, "k"), *v = fa_gpu_alloc(nk, "v");
    float *o = fa_gpu_alloc(nq, "o"), *lse = fa_gpu_alloc(nl, "lse"), *dout = fa_gpu_alloc(nq, "dO");
    float *delta = fa_gpu_alloc(nl, "Delta");
    fa_grads g = {fa_gpu_alloc(nq, "dQ"), fa_gpu_alloc(nk, "dK"), fa_gpu_alloc(nk, "dV")};
    fa_gpu_upload(q, p->q, nq), fa_gpu_upload(k, p->k, nk), fa_gpu_upload(v, p->v, nk);
    fa_gpu_upload(o, p->o, nq), fa_gpu_upload(lse, p->lse, nl), fa_gpu_upload(dout, p->dout, nq);
    fa_gpu_poison(g.dq, nq), fa_gpu_poison(g.dk, nk), fa_gpu_poison(g.dv, nk);
    backward_tensors t = contiguous_tensors(s, q, k, v, o, lse, dout, delta, &g);
    flash_backward_cuda(s, block_m, block_n, dq_mode, &t);
    fa_gpu_synchronize("flash_backward_cuda");
    fa_gpu_download(out->dq, g.dq, nq), fa_gpu_download(out->dk, g.dk, nk), fa_gpu_download(out->dv, g.dv, nk);
    fa_gpu_free(q), fa_gpu_free(k), fa_gpu_free(v), fa_gpu_free(o), fa_gpu_free(lse), fa_gpu_free(dout);
    fa_gpu_free(delta), fa_gpu_free(g.dq), fa_gpu_free(g.dk), fa_gpu_free(g.dv);
}

static void test_cuda(const fa_shape *s, int block_m, int block_n) {
    printf("cuda B=%lld H=%lld Sq=%lld Sk=%lld D=%lld causal=%d tiles %dx%d\n", (long long)s->B, (long long)s->H,
           (long long)s->Sq, (long long)s->Sk, (long long)s->D, s->causal, block_m, block_n);
    problem p = make_problem(*s, 43);
    fa_grads first = grads_alloc(s), second = grads_alloc(s), atomic = grads_alloc(s);
    run_cuda(&p, block_m, block_n, FA_DQ_DETERMINISTIC, &first);
    run_cuda(&p, block_m, block_n, FA_DQ_DETERMINISTIC, &second);
    run_cuda(&p, block_m, block_n, FA_DQ_ATOMIC, &atomic);
    expect_matches_oracle(&p, &first, "cuda deterministic");
    expect_same_bits(s, &first, &second, "cuda deterministic, run 1 vs run 2");
    expect_matches_oracle(&p, &atomic, "cuda atomic");
    grads_free(&first), grads_free(&second), grads_free(&atomic);
    free_problem(&p);
}
#endif

int main(int argc, char **argv) {
    const int on_gpu = fa_test_wants_gpu(argc, argv);
    // Sq != Sk both ways, causal on and off, sizes that are multiples of no tile.
    const fa_shape shapes[] = {
        {.B = 2, .H = 3, .Sq = 77, .Sk = 130, .D = 32, .causal = 1},
        {.B = 1, .H = 2, .Sq = 150, .Sk = 61, .D = 64, .causal = 1},
        {.B = 2, .H = 1, .Sq = 97, .Sk = 97, .D = 16, .causal = 0},
    };
    const int n_shapes = (int)(sizeof shapes / sizeof shapes[0]);
    if (!on_gpu) {
        for (int i = 0; i < n_shapes; i++) {
            fa_shape s = shapes[i];
            s.scale = (float)(1.0 / sqrt((double)s.D));
            test_cpu(&s, 16, 32);   // BLOCK_M != BLOCK_N
            test_cpu(&s, 7, 5);     // odd tiles, many of them
        }
    } else {
#if FA_HAVE_CUDA
        const int head_dims[4] = {16, 32, 64, 128};
        for (int i = 0; i < n_shapes; i++) {
            for (int d = 0; d < 4; d++) {
                fa_shape s = shapes[i];
                s.D = head_dims[d];
                s.scale = (float)(1.0 / sqrt((double)s.D));
                test_cuda(&s, 64, 64);
                test_cuda(&s, 32, 64);
                test_cuda(&s, 64, 32);
            }
        }
#else
        printf("skipped: built without CUDA\n");
        return FA_EXIT_SKIP;
#endif
    }
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("all determinism checks passed\n");
    return 0;
}
