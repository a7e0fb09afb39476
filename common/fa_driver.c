// fa_driver.c - the steps every phase driver shares.
#include "fa_driver.h"
#include "fa_gpu.h"
#include "fa_half.h"
#include "fa_npy.h"
#include "fa_oracle.h"
#include "fa_tensor.h"
#include "fa_timer.h"

#include <ctype.h>
#include <float.h>
#include <math.h>
#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

// The oracle is plain double-precision loops; past this many FLOPs per run it checks a sample of heads (heads are
// independent, so a sampled head is still checked exactly) to keep a large run from waiting minutes for its check.
#define ORACLE_FLOP_BUDGET 3e10

void fa_dims_q(const fa_shape *s, int64_t dims[4]) {
    dims[0] = s->B, dims[1] = s->H, dims[2] = s->Sq, dims[3] = s->D;
}
void fa_dims_kv(const fa_shape *s, int64_t dims[4]) {
    dims[0] = s->B, dims[1] = s->H, dims[2] = s->Sk, dims[3] = s->D;
}
void fa_dims_lse(const fa_shape *s, int64_t dims[4]) {
    dims[0] = s->B, dims[1] = s->H, dims[2] = s->Sq, dims[3] = 1;
}

void fa_forward_outputs(fa_implementation *impl, const fa_shape *shape, const fa_reference *ref,
                        float *o_host, float *o_device, float *lse_host, float *lse_device) {
    impl->n_outputs = 0;
    fa_output *o = &impl->outputs[impl->n_outputs++];
    *o = (fa_output){"O", o_host, o_device, {0}, ref->o, ref->tol_forward, ref->scale.o, NULL, 0.0, NULL};
    fa_dims_q(shape, o->dims);
    if (!lse_host) return;
    fa_output *lse = &impl->outputs[impl->n_outputs++];
    *lse = (fa_output){"LSE", lse_host, lse_device, {0}, ref->lse, ref->tol_forward, ref->scale.lse, NULL, 0.0,
                       NULL};
    fa_dims_lse(shape, lse->dims);
}

void fa_backward_outputs(fa_implementation *impl, const fa_shape *shape, const fa_reference *ref, const double tol[3],
                         fa_grads host, fa_grads device) {
    impl->n_outputs = 3;
    impl->outputs[0] = (fa_output){"dQ", host.dq, device.dq, {0}, ref->dq, tol[0], ref->scale.dq, NULL, 0.0, NULL};
    impl->outputs[1] = (fa_output){"dK", host.dk, device.dk, {0}, ref->dk, tol[1], ref->scale.dk, NULL, 0.0, NULL};
    impl->outputs[2] = (fa_output){"dV", host.dv, device.dv, {0}, ref->dv, tol[2], ref->scale.dv, NULL, 0.0, NULL};
    fa_dims_q(shape, impl->outputs[0].dims);
    fa_dims_kv(shape, impl->outputs[1].dims);
    fa_dims_kv(shape, impl->outputs[2].dims);
}

void fa_save_tensor(const fa_options *opt, const char *name, const float *x, const int64_t dims[4]) {
    if (!opt->save_dir) return;
    char path[4096], err[512], lower[16];
    snprintf(lower, sizeof lower, "%s", name);
    for (char *c = lower; *c; c++) *c = (char)tolower((unsigned char)*c);
    snprintf(path, sizeof path, "%s/%s.npy", opt->save_dir, lower);
    int ndim = dims[3] == 1 && strcmp(lower, "lse") == 0 ? 3 : 4;   // LSE is [B, H, Sq]
    if (fa_npy_save(path, x, 4, ndim, dims, err, sizeof err) != 0) fa_die("%s", err);
}

float *fa_load_tensor(const fa_options *opt, const char *name, const int64_t dims[4]) {
    char path[4096], err[600];
    snprintf(path, sizeof path, "%s/%s.npy", opt->load_dir, name);
    float *x = fa_npy_load_f32(path, 4, dims, err, sizeof err);
    if (!x) fa_die("%s", err);
    return x;
}

// mkdir -p: creates dir and any missing parents.
static void make_dirs(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s", dir);
    for (char *c = path + 1; ; c++) {
        if (*c != '/' && *c != '\0') continue;
        char saved = *c;
        *c = '\0';
        if (mkdir(path, 0777) != 0 && errno != EEXIST) fa_die("cannot create %s: %s", path, strerror(errno));
        *c = saved;
        if (saved == '\0') break;
    }
}

void fa_save_command(const fa_options *opt) {
    make_dirs(opt->save_dir);
    char path[4096];
    snprintf(path, sizeof path, "%s/command.txt", opt->save_dir);
    FILE *f = fopen(path, "w");
    if (!f) fa_die("cannot write %s", path);
    for (int i = 0; i < opt->argc; i++) fprintf(f, "%s%s", i ? " " : "", opt->argv[i]);
    fprintf(f, "\n");
    fclose(f);
}

void fa_make_inputs(const fa_options *opt, int with_dout, fa_inputs *in) {
    const fa_shape *s = &opt->shape;
    int64_t dq[4], dkv[4];
    fa_dims_q(s, dq);
    fa_dims_kv(s, dkv);
    memset(in, 0, sizeof *in);
    if (opt->load_dir) {
        in->q = fa_load_tensor(opt, "q", dq);
        in->k = fa_load_tensor(opt, "k", dkv);
        in->v = fa_load_tensor(opt, "v", dkv);
        if (with_dout) in->dout = fa_load_tensor(opt, "do", dq);
    } else {
        in->q = fa_alloc_floats(fa_numel_q(s), "Q");
        in->k = fa_alloc_floats(fa_numel_kv(s), "K");
        in->v = fa_alloc_floats(fa_numel_kv(s), "V");
        fa_fill_random(in->q, fa_numel_q(s), opt->seed, FA_STREAM_Q, 1.0f);
        fa_fill_random(in->k, fa_numel_kv(s), opt->seed, FA_STREAM_K, 1.0f);
        fa_fill_random(in->v, fa_numel_kv(s), opt->seed, FA_STREAM_V, 1.0f);
        if (with_dout) {
            in->dout = fa_alloc_floats(fa_numel_q(s), "dO");
            fa_fill_random(in->dout, fa_numel_q(s), opt->seed, FA_STREAM_DO, 1.0f);
        }
    }
    // --dtype fp16|bf16: every implementation, and the oracle, see the inputs rounded to the half type. --save-dir
    // then writes them as float32 holding those exact values (NumPy has no bfloat16; .astype(np.float16) is exact).
    if (opt->dtype != FA_DTYPE_FP32) {
        fa_round_floats(in->q, fa_numel_q(s), opt->dtype);
        fa_round_floats(in->k, fa_numel_kv(s), opt->dtype);
        fa_round_floats(in->v, fa_numel_kv(s), opt->dtype);
        if (in->dout) fa_round_floats(in->dout, fa_numel_q(s), opt->dtype);   // dO is a half input of the backward
    }
    if (opt->save_dir) {
        fa_save_command(opt);
        fa_save_tensor(opt, "q", in->q, dq);
        fa_save_tensor(opt, "k", in->k, dkv);
        fa_save_tensor(opt, "v", in->v, dkv);
        if (in->dout) fa_save_tensor(opt, "do", in->dout, dq);
    }
}

void fa_free_inputs(fa_inputs *in) {
    free(in->q);
    free(in->k);
    free(in->v);
    free(in->dout);
}

int64_t fa_heads_to_check(const fa_options *opt, double flops_per_head) {
    const int64_t count = opt->check_heads > 0 ? opt->check_heads : (int64_t)(ORACLE_FLOP_BUDGET / flops_per_head);
    return count < 1 ? 1 : count;
}

void fa_choose_heads(unsigned char *heads, int64_t BH, int64_t count) {
    memset(heads, 0, (size_t)BH);
    if (count >= BH) {
        memset(heads, 1, (size_t)BH);
        return;
    }
    for (int64_t i = 0; i < count; i++) heads[count == 1 ? 0 : i * (BH - 1) / (count - 1)] = 1;
}

// The largest finite |x[i]|: an Inf in the inputs must not make the tolerance infinite (every result would pass).
// (a <= FLT_MAX is false for Inf and NaN; written as a select, the loop stays vectorised.)
static float max_abs(const float *x, int64_t n) {
    float m = 0.0f;
#pragma omp parallel for simd reduction(max : m)
    for (int64_t i = 0; i < n; i++) {
        const float a = fabsf(x[i]);
        m = fmaxf(m, a <= FLT_MAX ? a : 0.0f);
    }
    return m;
}

double fa_tolerance_for_inputs(const fa_shape *s, const fa_inputs *in, double base) {
    const double eps = 1.1920929e-7;   // float32 machine epsilon
    double logit_error = eps * sqrt((double)s->D) * s->scale * max_abs(in->q, fa_numel_q(s)) *
                         max_abs(in->k, fa_numel_kv(s));
    return fmax(base, 20.0 * logit_error);
}

// Counts the NaN and Inf values of x and finds the first one (its flat index, or -1).
static int64_t count_nonfinite(const float *x, int64_t n, int64_t *first) {
    int64_t count = 0, first_at = INT64_MAX;
#pragma omp parallel for reduction(+ : count) reduction(min : first_at)
    for (int64_t i = 0; i < n; i++) {
        if (isfinite(x[i])) continue;
        count++;
        if (i < first_at) first_at = i;
    }
    *first = count ? first_at : -1;
    return count;
}

// Inputs with NaN or Inf (they can only come from --load-dir) are computed as they are: the oracle's answer is NaN or
// Inf wherever the math carries them, and every check on such an element fails (docs/robustness.md). Say so up front,
// with the first bad element, so that the failing check block that follows has its explanation.
static void report_nonfinite_inputs(const fa_shape *s, const fa_inputs *in) {
    const struct { const char *name; const float *x; int64_t S; } tensors[] = {
        {"q", in->q, s->Sq}, {"k", in->k, s->Sk}, {"v", in->v, s->Sk}, {"do", in->dout, s->Sq}};
    for (int t = 0; t < 4; t++) {
        if (!tensors[t].x) continue;
        const int64_t S = tensors[t].S, D = s->D;
        int64_t first, count = count_nonfinite(tensors[t].x, s->B * s->H * S * D, &first);
        if (!count) continue;
        fprintf(stderr, "warning: %s holds %lld NaN/Inf value(s), the first at (b,h,s,d) = (%lld,%lld,%lld,%lld); "
                        "every output the math makes NaN/Inf from them fails its check\n",
                tensors[t].name, (long long)count, (long long)(first / (S * D) / s->H),
                (long long)(first / (S * D) % s->H), (long long)(first / D % S), (long long)(first % D));
    }
}

// The oracle's arrays are indexed like the full tensors but only the checked heads are materialised
// (fa_oracle_alloc_heads): a run with billions of elements and --check-heads 2 needs memory for two heads here.
void fa_make_reference(const fa_options *opt, const fa_inputs *in, int backward, fa_reference *ref) {
    const fa_shape *s = &opt->shape;
    const int64_t BH = s->B * s->H;
    memset(ref, 0, sizeof *ref);
    ref->heads = malloc((size_t)BH);
    if (!ref->heads) fa_die("out of host memory: the oracle's head mask needs %lld bytes", (long long)BH);
    // FLOPs per head: the oracle's passes and fa_oracle_magnitudes' (about as many again).
    double per_head = 4.0 * (double)s->Sq * (double)s->Sk * (double)s->D * (backward ? 6.0 : 2.0);
    const int64_t count = fa_heads_to_check(opt, per_head);
    fa_choose_heads(ref->heads, BH, count);
    ref->heads_checked = (int)(count < BH ? count : BH);
    ref->tol_forward = fa_tolerance_for_inputs(s, in, FA_TOL_FORWARD);
    // The same as fa_tolerance_for_inputs(s, in, FA_TOL_BACKWARD) (the logit term is shared), without a second pass
    // over the inputs.
    ref->tol_backward = fmax(FA_TOL_BACKWARD, ref->tol_forward);
    report_nonfinite_inputs(s, in);

    double start = fa_now_ms();
    fprintf(stderr, "oracle: float64 reference for %d of %lld heads...", ref->heads_checked, (long long)BH);
    fflush(stderr);
    fa_set_threads(opt->threads);
    const int64_t q_head = s->Sq * s->D, kv_head = s->Sk * s->D;
    double *q = fa_oracle_heads_to_double(in->q, s, ref->heads, q_head, "oracle Q");
    double *k = fa_oracle_heads_to_double(in->k, s, ref->heads, kv_head, "oracle K");
    double *v = fa_oracle_heads_to_double(in->v, s, ref->heads, kv_head, "oracle V");
    ref->o = fa_oracle_alloc_heads(s, ref->heads, q_head, "oracle O");
    ref->lse = fa_oracle_alloc_heads(s, ref->heads, s->Sq, "oracle LSE");
    fa_oracle_forward(s, q, k, v, ref->heads, ref->o, ref->lse);
    double *dout = NULL;
    if (backward) {
        dout = fa_oracle_heads_to_double(in->dout, s, ref->heads, q_head, "oracle dO");
        ref->dq = fa_oracle_alloc_heads(s, ref->heads, q_head, "oracle dQ");
        ref->dk = fa_oracle_alloc_heads(s, ref->heads, kv_head, "oracle dK");
        ref->dv = fa_oracle_alloc_heads(s, ref->heads, kv_head, "oracle dV");
        fa_oracle_backward(s, q, k, v, dout, ref->o, ref->lse, ref->heads, ref->dq, ref->dk, ref->dv);
    }
    fa_oracle_magnitudes(s, q, k, v, dout, ref->o, ref->lse, ref->heads, &ref->scale);
    free(dout);
    free(q);
    free(k);
    free(v);
    fprintf(stderr, " %.1f s\n", (fa_now_ms() - start) / 1e3);
}

void fa_free_reference(fa_reference *ref) {
    free(ref->heads);
    free(ref->o);
    free(ref->lse);
    free(ref->dq);
    free(ref->dk);
    free(ref->dv);
}

void fa_set_threads(int threads) { omp_set_num_threads(threads); }

int fa_use_gpu(const fa_options *opt, fa_report *report) {
    if (!(opt->impl & FA_IMPL_CUDA)) return 0;
    char why[160];
    if (fa_gpu_available(why, sizeof why)) return 1;
    if (opt->impl == FA_IMPL_CUDA) {
        printf("skipped: --impl cuda asked for the GPU, but %s\n", why);
        exit(FA_EXIT_SKIP);
    }
    fa_report_add_note(report, "GPU rows skipped: %s", why);
    return 0;
}

static int64_t numel_of(const fa_output *out) { return out->dims[0] * out->dims[1] * out->dims[2] * out->dims[3]; }

static void add_timing_row(fa_report *report, const fa_implementation *impl, const char *kind, int threads,
                           fa_timing t, double copy_ms) {
    fa_timing_row row;
    memset(&row, 0, sizeof row);
    snprintf(row.label, sizeof row.label, "%s", impl->label);
    snprintf(row.impl, sizeof row.impl, "%s", kind);
    snprintf(row.status, sizeof row.status, "ok");
    snprintf(row.extra_what, sizeof row.extra_what, "%s", impl->extra_what ? impl->extra_what : "");
    row.threads = threads;
    row.block_m = impl->block_m;
    row.block_n = impl->block_n;
    row.causal = impl->causal;
    row.backward = impl->backward;
    row.median_ms = t.median_ms;
    row.min_ms = t.min_ms;
    row.flops = impl->flops;
    row.extra_bytes = impl->extra_bytes + threads * impl->extra_bytes_per_thread;
    row.copy_ms = copy_ms;
    char check_label[64];
    snprintf(check_label, sizeof check_label, "%s %s", impl->label, impl->is_cuda ? "cuda" : "cpu");
    row.pass = fa_report_label_passed(report, check_label);
    fa_report_add_row(report, &row);
}

void fa_check_and_time(fa_report *report, const fa_options *opt, const fa_reference *ref, fa_implementation *impl) {
    char check_label[64];
    snprintf(check_label, sizeof check_label, "%s %s", impl->label, impl->is_cuda ? "cuda" : "cpu");
#if FA_HAVE_CUDA
    double download_ms = 0.0;   // the GPU rows' copy back, reported apart from the kernel time
#endif

    // 1. Poison every output, run once, and bring the results to the host.
    for (int i = 0; i < impl->n_outputs; i++) {
        fa_output *out = &impl->outputs[i];
        fa_poison(out->host, numel_of(out));
#if FA_HAVE_CUDA
        if (impl->is_cuda) fa_gpu_poison(out->device, numel_of(out));
#endif
    }
    if (!impl->is_cuda) fa_set_threads(opt->threads);
    impl->run(impl->ctx);
#if FA_HAVE_CUDA
    if (impl->is_cuda) {
        fa_gpu_synchronize(check_label);
        double start = fa_now_ms();
        for (int i = 0; i < impl->n_outputs; i++)
            fa_gpu_download(impl->outputs[i].host, impl->outputs[i].device, numel_of(&impl->outputs[i]));
        download_ms = fa_now_ms() - start;
    }
#endif

    // 2. Check every output against the oracle, and save it.
    for (int i = 0; i < impl->n_outputs; i++) {
        const fa_output *out = &impl->outputs[i];
        fa_check check = fa_verify_results_scaled(check_label, out->name, out->host, out->want, out->dims,
                                                  out->heads ? out->heads : ref->heads, out->tolerance,
                                                  out->scale);
        if (out->reference_label)
            fa_check_against_reference(&check, fa_report_find_check(report, out->reference_label, out->name),
                                       out->reference_factor);
        fa_report_add_check(report, check);
        fa_save_tensor(opt, out->name, out->host, out->dims);
    }
    report->heads_checked = ref->heads_checked;

    // 3. Time it.
    if (opt->iters == 0) return;
    if (impl->is_cuda) {
#if FA_HAVE_CUDA
        fa_timing t = fa_gpu_time(impl->run, impl->ctx, opt->warmup, opt->iters);
        add_timing_row(report, impl, "cuda", 0, t, impl->upload_ms + download_ms);
#endif
        return;
    }
    fa_set_threads(1);
    fa_timing single = fa_time_host(impl->run, impl->ctx, opt->warmup, opt->iters);
    add_timing_row(report, impl, "cpu", 1, single, 0.0);
    if (opt->threads > 1) {
        fa_set_threads(opt->threads);
        fa_timing parallel = fa_time_host(impl->run, impl->ctx, opt->warmup, opt->iters);
        add_timing_row(report, impl, "cpu", opt->threads, parallel, 0.0);
    }
}

void fa_exit_out_of_memory(fa_report *report, const char *label, const char *impl, double bytes, const char *what) {
    fa_timing_row row;
    memset(&row, 0, sizeof row);
    snprintf(row.label, sizeof row.label, "%s", label);
    snprintf(row.impl, sizeof row.impl, "%s", impl);
    snprintf(row.status, sizeof row.status, "oom");
    row.causal = report->shape.causal;
    row.extra_bytes = (int64_t)bytes;
    row.pass = -1;
    report->n_rows = 0;
    fa_report_add_row(report, &row);
    if (report->options->csv) fa_report_write_csv(report, report->options->csv);
    char size[32];
    fa_format_bytes(bytes, size, sizeof size);
    fa_die("out of %s memory: %s %s needs %.0f bytes (%s) for %s", impl, label, impl, bytes, size, what);
}

int fa_finish(fa_report *report, const fa_options *opt) {
    fa_report_print(report);
    if (opt->csv) fa_report_write_csv(report, opt->csv);
    return fa_report_all_passed(report) ? 0 : 1;
}

#if FA_HAVE_CUDA
void fa_upload_inputs(const fa_options *opt, const fa_inputs *in, fa_device_inputs *dev) {
    const fa_shape *s = &opt->shape;
    memset(dev, 0, sizeof *dev);
    dev->q = fa_gpu_alloc(fa_numel_q(s), "Q");
    dev->k = fa_gpu_alloc(fa_numel_kv(s), "K");
    dev->v = fa_gpu_alloc(fa_numel_kv(s), "V");
    if (in->dout) dev->dout = fa_gpu_alloc(fa_numel_q(s), "dO");
    double start = fa_now_ms();
    fa_gpu_upload(dev->q, in->q, fa_numel_q(s));
    fa_gpu_upload(dev->k, in->k, fa_numel_kv(s));
    fa_gpu_upload(dev->v, in->v, fa_numel_kv(s));
    if (in->dout) fa_gpu_upload(dev->dout, in->dout, fa_numel_q(s));
    dev->upload_ms = fa_now_ms() - start;
}

void fa_free_device_inputs(fa_device_inputs *dev) {
    fa_gpu_free(dev->q);
    fa_gpu_free(dev->k);
    fa_gpu_free(dev->v);
    if (dev->dout) fa_gpu_free(dev->dout);
}
#endif

// --- Half precision (phase 5) -----------------------------------------------------------------------------------

// A half tensor of n elements is allocated as (n + 1) / 2 floats: the same bytes, and the memory guard and the
// float copies of fa_gpu.h then serve it unchanged.
static uint16_t *alloc_half(int64_t n, const char *what) {
    return (uint16_t *)fa_alloc_floats((n + 1) / 2, what);
}

// The half references' outputs start at zero: the heads the oracle left out are only scanned for NaN.
static float *alloc_zeros(int64_t n, const char *what) {
    float *x = fa_alloc_floats(n, what);
    memset(x, 0, (size_t)n * sizeof(float));
    return x;
}

void fa_make_half_inputs(const fa_options *opt, const fa_inputs *in, fa_half_inputs *half) {
    const fa_shape *s = &opt->shape;
    half->dtype = opt->dtype;
    half->q = alloc_half(fa_numel_q(s), "Q (half)");
    half->k = alloc_half(fa_numel_kv(s), "K (half)");
    half->v = alloc_half(fa_numel_kv(s), "V (half)");
    fa_floats_to_half(in->q, half->q, fa_numel_q(s), opt->dtype);
    fa_floats_to_half(in->k, half->k, fa_numel_kv(s), opt->dtype);
    fa_floats_to_half(in->v, half->v, fa_numel_kv(s), opt->dtype);
    half->dout = NULL;
    if (in->dout) {
        half->dout = alloc_half(fa_numel_q(s), "dO (half)");
        fa_floats_to_half(in->dout, half->dout, fa_numel_q(s), opt->dtype);
    }
}

void fa_free_half_inputs(fa_half_inputs *half) {
    free(half->q);
    free(half->k);
    free(half->v);
    free(half->dout);
}

void fa_make_half_rule(fa_report *report, const fa_options *opt, const fa_inputs *in, const fa_reference *ref,
                       fa_half_rule *rule) {
    const fa_shape *s = &opt->shape;
    const int dtype = opt->dtype;
    int64_t dims_o[4], dims_lse[4];
    fa_dims_q(s, dims_o);
    fa_dims_lse(s, dims_lse);
    float *o = alloc_zeros(fa_numel_q(s), "the half reference's O");
    float *lse = alloc_zeros(fa_numel_lse(s), "the half reference's LSE");
    fa_set_threads(opt->threads);
    fa_half_reference_forward(s, dtype, in->q, in->k, in->v, ref->heads, o, lse);

    // The bound the reference's own arithmetic guarantees. Rounding P_ij to the half type moves it by at most
    // u * P_ij (and, for an fp16 subnormal, by at most 2^-25), and O_i = sum_j P_ij V_j with sum_j P_ij = 1. Errors
    // are measured against the oracle's scale for O (fa_oracle_magnitudes), as every row's are, so that the rule's
    // tolerances below and the rows they are applied to (fa_forward_outputs) use the same unit.
    const double u = fa_dtype_unit_roundoff(dtype), subnormal = dtype == FA_DTYPE_FP16 ? 0x1p-25 * (double)s->Sk : 0.0;
    const double max_v = max_abs(in->v, fa_numel_kv(s));
    const double bound_o = ref->scale.o > 0.0 ? (2.0 * u + subnormal) * max_v / ref->scale.o : 0.0;
    char label[48];
    snprintf(label, sizeof label, "%s reference%s", fa_dtype_name(dtype), s->causal ? " (causal)" : "");
    fa_check check_o = fa_verify_results_scaled(label, "O", o, ref->o, dims_o, ref->heads, bound_o + ref->tol_forward,
                                                ref->scale.o);
    fa_check check_lse = fa_verify_results_scaled(label, "LSE", lse, ref->lse, dims_lse, ref->heads,
                                                  ref->tol_forward, ref->scale.lse);
    fa_report_add_check(report, check_o);
    fa_report_add_check(report, check_lse);

    rule->dtype = dtype;
    rule->ref_err_o = check_o.rel_err;
    rule->ref_err_lse = check_lse.rel_err;
    rule->tol_o = 2.0 * check_o.rel_err + ref->tol_forward;
    rule->tol_lse = 2.0 * check_lse.rel_err + ref->tol_forward;
    fa_report_add_note(report, "%s rule%s: pass at rel err <= 2 x the %s reference's + %.1e (float32): O %.2e, "
                       "LSE %.2e", fa_dtype_name(dtype), s->causal ? " (causal)" : "", fa_dtype_name(dtype),
                       ref->tol_forward, rule->tol_o, rule->tol_lse);
    free(o);
    free(lse);
}

void fa_make_half_backward_rule(fa_report *report, const fa_options *opt, const fa_inputs *in,
                                const fa_reference *ref, fa_half_rule *rule) {
    const fa_shape *s = &opt->shape;
    const int dtype = opt->dtype;
    int64_t dims_q[4], dims_kv[4];
    fa_dims_q(s, dims_q);
    fa_dims_kv(s, dims_kv);
    float *dq = alloc_zeros(fa_numel_q(s), "the half reference's dQ");
    float *dk = alloc_zeros(fa_numel_kv(s), "the half reference's dK");
    float *dv = alloc_zeros(fa_numel_kv(s), "the half reference's dV");
    fa_set_threads(opt->threads);
    fa_half_reference_backward(s, dtype, in->q, in->k, in->v, in->dout, ref->heads, dq, dk, dv);

    // A bound the reference's arithmetic keeps, so that a broken reference cannot loosen the rule. Each gradient is a
    // float32 sum of rounded P or dS times an input; rounding moves each term by at most u times itself, and the
    // oracle's scale of each gradient is the sum of those terms' sizes (fa_oracle_magnitudes): u of the scale per
    // rounding, a few roundings (P or dS, and what feeds Delta). 8u leaves room; an fp16 subnormal P or dS adds at
    // most 2^-25 times the other factor per term (n terms). The float32 tolerance covers the float32 sums.
    const double u = fa_dtype_unit_roundoff(dtype), subnormal = dtype == FA_DTYPE_FP16 ? 0x1p-25 : 0.0;
    const double max_q = max_abs(in->q, fa_numel_q(s)), max_k = max_abs(in->k, fa_numel_kv(s));
    const double max_do = max_abs(in->dout, fa_numel_q(s));
    // The subnormal terms of dQ (dS times K, Sk terms), dK (dS times Q, Sq terms) and dV (P times dO, Sq terms).
    const double sub[3] = {subnormal * (double)s->Sk * s->scale * max_k, subnormal * (double)s->Sq * s->scale * max_q,
                           subnormal * (double)s->Sq * max_do};
    const double scale[3] = {ref->scale.dq, ref->scale.dk, ref->scale.dv};
    double bound[3];
    for (int x = 0; x < 3; x++) bound[x] = 8.0 * u + (scale[x] > 0.0 ? sub[x] / scale[x] : 0.0) + ref->tol_backward;
    char label[64];
    snprintf(label, sizeof label, "%s backward ref%s", fa_dtype_name(dtype), s->causal ? " (causal)" : "");
    fa_check check_dq = fa_verify_results_scaled(label, "dQ", dq, ref->dq, dims_q, ref->heads, bound[0], scale[0]);
    fa_check check_dk = fa_verify_results_scaled(label, "dK", dk, ref->dk, dims_kv, ref->heads, bound[1], scale[1]);
    fa_check check_dv = fa_verify_results_scaled(label, "dV", dv, ref->dv, dims_kv, ref->heads, bound[2], scale[2]);
    fa_report_add_check(report, check_dq);
    fa_report_add_check(report, check_dk);
    fa_report_add_check(report, check_dv);

    rule->ref_err_dq = check_dq.rel_err;
    rule->ref_err_dk = check_dk.rel_err;
    rule->ref_err_dv = check_dv.rel_err;
    rule->tol_dq = 3.0 * check_dq.rel_err + ref->tol_backward;
    rule->tol_dk = 3.0 * check_dk.rel_err + ref->tol_backward;
    rule->tol_dv = 3.0 * check_dv.rel_err + ref->tol_backward;
    fa_report_add_note(report, "%s backward rule%s: pass at rel err <= 3 x the %s reference's + %.1e (float32): "
                       "dQ %.2e, dK %.2e, dV %.2e", fa_dtype_name(dtype), s->causal ? " (causal)" : "",
                       fa_dtype_name(dtype), ref->tol_backward, rule->tol_dq, rule->tol_dk, rule->tol_dv);
    free(dq);
    free(dk);
    free(dv);
}

void fa_half_forward_outputs(fa_implementation *impl, const fa_shape *shape, const fa_reference *ref,
                             const fa_half_rule *rule, float *o_host, float *o_device, float *lse_host,
                             float *lse_device) {
    fa_forward_outputs(impl, shape, ref, o_host, o_device, lse_host, lse_device);
    impl->outputs[0].tolerance = rule->tol_o;
    if (impl->n_outputs > 1) impl->outputs[1].tolerance = rule->tol_lse;
}

#if FA_HAVE_CUDA
static void *upload_half(const uint16_t *host, int64_t n, const char *what) {
    float *device = fa_gpu_alloc((n + 1) / 2, what);
    fa_gpu_upload(device, (const float *)host, (n + 1) / 2);   // bytes: see alloc_half
    return device;
}

void fa_upload_half_inputs(const fa_options *opt, const fa_half_inputs *half, fa_device_half_inputs *dev) {
    const fa_shape *s = &opt->shape;
    const double start = fa_now_ms();
    dev->q = upload_half(half->q, fa_numel_q(s), "Q (half)");
    dev->k = upload_half(half->k, fa_numel_kv(s), "K (half)");
    dev->v = upload_half(half->v, fa_numel_kv(s), "V (half)");
    dev->dout = half->dout ? upload_half(half->dout, fa_numel_q(s), "dO (half)") : NULL;
    dev->upload_ms = fa_now_ms() - start;
}

void fa_free_device_half_inputs(fa_device_half_inputs *dev) {
    fa_gpu_free(dev->q);
    fa_gpu_free(dev->k);
    fa_gpu_free(dev->v);
    if (dev->dout) fa_gpu_free(dev->dout);
}
#endif
