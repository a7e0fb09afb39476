// fa_report.c - the check block, the timing table, and --csv rows.
#include "fa_report.h"
#include "fa_save.h"
#include "fa_gpu.h"
#include "fa_simd.h"
#include "fa_tensor.h"

#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifndef FA_GIT_COMMIT
#define FA_GIT_COMMIT "unknown"
#endif

void fa_report_init(fa_report *r, const char *program, const fa_options *options) {
    memset(r, 0, sizeof *r);
    r->program = program;
    r->shape = options->shape;
    r->options = options;
}

void fa_report_add_check(fa_report *r, fa_check check) {
    if (r->n_checks < FA_REPORT_MAX_ROWS) r->checks[r->n_checks++] = check;
}

void fa_report_add_row(fa_report *r, const fa_timing_row *row) {
    if (r->n_rows < FA_REPORT_MAX_ROWS) r->rows[r->n_rows++] = *row;
}

void fa_report_add_library(fa_report *r, const char *fmt, ...) {
    if (r->n_libraries >= 2) return;
    va_list args;
    va_start(args, fmt);
    vsnprintf(r->libraries[r->n_libraries++], sizeof r->libraries[0], fmt, args);
    va_end(args);
}

void fa_report_add_note(fa_report *r, const char *fmt, ...) {
    if (r->n_notes >= 8) return;
    va_list args;
    va_start(args, fmt);
    vsnprintf(r->notes[r->n_notes++], sizeof r->notes[0], fmt, args);
    va_end(args);
}

const fa_check *fa_report_find_check(const fa_report *r, const char *label, const char *tensor) {
    for (int i = 0; i < r->n_checks; i++)
        if (strcmp(r->checks[i].label, label) == 0 && strcmp(r->checks[i].tensor, tensor) == 0) return &r->checks[i];
    return NULL;
}

int fa_report_label_passed(const fa_report *r, const char *label) {
    int result = -1;
    for (int i = 0; i < r->n_checks; i++) {
        if (strcmp(r->checks[i].label, label) != 0) continue;
        if (!r->checks[i].pass) return 0;
        result = 1;
    }
    return result;
}

int fa_report_all_passed(const fa_report *r) {
    for (int i = 0; i < r->n_checks; i++)
        if (!r->checks[i].pass) return 0;
    return 1;
}

// The first line of /proc/cpuinfo that starts with `key`, after its colon, or "" when there is none.
static void cpuinfo_field(const char *key, char *out, size_t out_len) {
    out[0] = '\0';
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[4096];
    size_t key_len = strlen(key);
    while (fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, key, key_len) == 0 && colon) {
            colon += colon[1] == ' ' ? 2 : 1;
            colon[strcspn(colon, "\n")] = '\0';
            snprintf(out, out_len, "%s", colon);
            break;
        }
    }
    fclose(f);
}

const char *fa_cpu_model(void) {
    static char model[128] = "";
    if (model[0]) return model;
    cpuinfo_field("model name", model, sizeof model);
    if (!model[0]) snprintf(model, sizeof model, "unknown");
    return model;
}

// The widest vector instructions the compiler was allowed to use for this build (its -m flags; none means the
// architecture's baseline): what code outside the FA_SIMD_CLONES functions runs.
const char *fa_cpu_simd_built(void) {
#if defined(__AVX512F__)
    return "AVX-512 (512-bit)";
#elif defined(__AVX2__)
    return "AVX2 (256-bit)";
#elif defined(__AVX__)
    return "AVX (256-bit)";
#elif defined(__SSE2__)
    return "SSE2 (128-bit)";
#elif defined(__ARM_NEON)
    return "NEON (128-bit)";
#else
    return "scalar";
#endif
}

// The version of the FA_SIMD_CLONES functions (the CPU kernels' hot loops) that this CPU runs: the loader takes the
// first of the clones' instruction sets (fa_simd.h) that the CPU has, in this order.
// The floats in a vector of the clone the loader picks (16 for "avx512f", 8 for "fma"); 0 when it picks "default"
// or the build has no clones.
static int cloned_vector_floats(void) {
#if FA_SIMD_HAVE_CLONES
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return 16;
    if (__builtin_cpu_supports("fma")) return 8;
#endif
    return 0;
}

const char *fa_simd_hot_loops(void) {
    switch (cloned_vector_floats()) {
    case 16: return "AVX-512F (512-bit, FMA)";
    case 8: return "AVX + FMA (256-bit)";
    default: return fa_cpu_simd_built();
    }
}

int fa_simd_vector_floats(void) {
    const int cloned = cloned_vector_floats();
    if (cloned) return cloned;
#if defined(__AVX512F__)
    return 16;
#elif defined(__AVX__)
    return 8;
#else
    return 4;
#endif
}

// The vector extensions this CPU offers, from the flags line of /proc/cpuinfo: the ones that set the float32 width,
// and the bf16 units phase 5's bf16 backward can run on.
const char *fa_cpu_simd_offered(void) {
    static char offered[96] = "";
    if (offered[0]) return offered;
    char flags[4096];
    cpuinfo_field("flags", flags, sizeof flags);
    if (!flags[0]) cpuinfo_field("Features", flags, sizeof flags);   // ARM
    char padded[sizeof flags + 2];   // " flag1 flag2 ... ": every flag between two spaces, for a whole-word search
    snprintf(padded, sizeof padded, " %s ", flags);
    static const char *const names[][2] = {{"sse2", "SSE2"}, {"avx2", "AVX2"}, {"fma", "FMA"},
                                           {"avx512f", "AVX-512F"}, {"avx512_bf16", "AVX512_BF16"},
                                           {"amx_bf16", "AMX-BF16"}, {"asimd", "NEON"}, {"sve", "SVE"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char word[16];
        snprintf(word, sizeof word, " %s ", names[i][0]);
        if (!strstr(padded, word)) continue;
        size_t used = strlen(offered);
        snprintf(offered + used, sizeof offered - used, "%s%s", used ? " " : "", names[i][1]);
    }
    if (!offered[0]) snprintf(offered, sizeof offered, "unknown");
    return offered;
}

int fa_cpu_cores(void) { return omp_get_num_procs(); }

void fa_format_bytes(double bytes, char *out, int out_len) {
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024.0 && u < 4) {
        bytes /= 1024.0;
        u++;
    }
    snprintf(out, (size_t)out_len, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
}

static void print_header(const fa_report *r) {
    const fa_shape *s = &r->shape;
    const fa_options *o = r->options;
    printf("%s  B=%lld H=%lld Sq=%lld Sk=%lld D=%lld causal=%s scale=%.6g  seed=%llu%s%s\n", r->program,
           (long long)s->B, (long long)s->H, (long long)s->Sq, (long long)s->Sk, (long long)s->D,
           s->causal ? "yes" : "no", (double)s->scale, (unsigned long long)o->seed,
           o->load_dir ? "  inputs from " : "", o->load_dir ? o->load_dir : "");
    printf("CPU: %s, %d logical cores, %d threads used; hot loops run %s (build baseline %s), the CPU offers %s\n",
           fa_cpu_model(), fa_cpu_cores(), o->threads, fa_simd_hot_loops(), fa_cpu_simd_built(), fa_cpu_simd_offered());
    for (int i = 0; i < r->n_libraries; i++) printf("  %s\n", r->libraries[i]);
    const fa_gpu_facts *g = fa_gpu_info();
    if (g->sms == 0) {
        printf("GPU: %s\n", fa_gpu_name());
        return;
    }
    printf("GPU: %s, compute capability %d.%d, %d SMs, %d MHz (memory %d MHz)", fa_gpu_name(), g->cc_major,
           g->cc_minor, g->sms, g->clock_mhz, g->memory_clock_mhz);
    if (fa_gpu_fp32_peak_tflops() > 0)
        printf("; float32 FMA peak %.1f TFLOP/s (%d SMs x %d lanes x 2 x clock)", fa_gpu_fp32_peak_tflops(), g->sms,
               g->fp32_lanes_per_sm);
    printf("\n");
}

static void print_checks(const fa_report *r) {
    int64_t bh = r->shape.B * r->shape.H;
    printf("\nCheck against the float64 oracle (%d of %lld heads compared; NaN/Inf scanned everywhere)\n",
           r->heads_checked, (long long)bh);
    printf("  %-28s %-6s %12s %10s %9s  %-12s %-22s %s\n", "implementation", "tensor", "max abs err", "rel err",
           "tol", "vs naive", "worst (b,h,s,d)", "result");
    for (int i = 0; i < r->n_checks; i++) {
        const fa_check *c = &r->checks[i];
        char where[48];
        snprintf(where, sizeof where, "(%lld,%lld,%lld,%lld)", (long long)c->worst[0], (long long)c->worst[1],
                 (long long)c->worst[2], (long long)c->worst[3]);
        char result[48];
        if (c->nonfinite) snprintf(result, sizeof result, "FAIL (%lld NaN/Inf)", (long long)c->nonfinite);
        else snprintf(result, sizeof result, "%s", c->pass ? "PASS" : "FAIL");
        // FlashAttention's rule, where a straightforward implementation ran beside: its error times the factor.
        char vs_ref[24] = "";
        if (c->ref_err > 0.0) snprintf(vs_ref, sizeof vs_ref, "%.2fx<=%gx", c->max_rel_err / c->ref_err, c->ref_factor);
        else if (c->ref_err == 0.0) snprintf(vs_ref, sizeof vs_ref, "ref exact");
        printf("  %-28s %-6s %12.3e %10.3e %9.1e  %-12s %-22s %s\n", c->label, c->tensor, c->max_abs_err, c->rel_err,
               c->tolerance, vs_ref, where, result);
    }
}

// The single-thread CPU row of the same label: the baseline of the speedup column.
static const fa_timing_row *baseline_of(const fa_report *r, const fa_timing_row *row) {
    for (int i = 0; i < r->n_rows; i++) {
        const fa_timing_row *b = &r->rows[i];
        if (strcmp(b->label, row->label) == 0 && b->causal == row->causal && strcmp(b->impl, "cpu") == 0 &&
            b->threads == 1 && strcmp(b->status, "ok") == 0)
            return b;
    }
    return NULL;
}

static void print_timings(const fa_report *r) {
    const fa_options *o = r->options;
    printf("\nTiming (median of %d runs after %d warm-up; speedup over the 1-thread CPU run of the same row)\n",
           o->iters, o->warmup);
    printf("  %-28s %-7s %-8s %7s %11s %11s %10s %9s  %s\n", "implementation", "causal", "impl", "threads",
           "median ms", "min ms", "GFLOP/s", "speedup", "extra memory");
    for (int i = 0; i < r->n_rows; i++) {
        const fa_timing_row *row = &r->rows[i];
        char threads[16], extra[64], speedup[16] = "-";
        snprintf(threads, sizeof threads, row->threads > 0 ? "%d" : "-", row->threads);
        if (strcmp(row->status, "ok") != 0) {
            printf("  %-28s %-7s %-8s %7s  %s\n", row->label, row->causal ? "yes" : "no", row->impl, threads,
                   row->status);
            continue;
        }
        fa_format_bytes((double)row->extra_bytes, extra, sizeof extra);
        if (row->extra_what[0]) snprintf(extra + strlen(extra), sizeof extra - strlen(extra), " (%s)", row->extra_what);
        const fa_timing_row *base = baseline_of(r, row);
        if (base && row->median_ms > 0) snprintf(speedup, sizeof speedup, "%.2fx", base->median_ms / row->median_ms);
        double gflops = row->median_ms > 0 ? row->flops / (row->median_ms * 1e6) : 0.0;
        printf("  %-28s %-7s %-8s %7s %11.3f %11.3f %10.1f %9s  %s%s\n", row->label, row->causal ? "yes" : "no",
               row->impl, threads, row->median_ms, row->min_ms, gflops, speedup, extra,
               row->pass == 0 ? "  [check FAILED]" : "");
    }
}

void fa_report_print(const fa_report *r) {
    if (fa_save_folder() && r->n_checks) fa_report_save_checks(r);
    print_header(r);
    print_checks(r);
    if (r->n_rows > 0) print_timings(r);
    if (r->n_notes) printf("\n");
    for (int i = 0; i < r->n_notes; i++) printf("  note: %s\n", r->notes[i]);
    printf("\n%s\n", fa_report_all_passed(r) ? "All checks passed." : "SOME CHECKS FAILED.");
    fflush(stdout);
}

// CSV fields never contain commas we did not put there: replace any in free text.
static void csv_text(FILE *f, const char *text) {
    for (const char *c = text; *c; c++) fputc(*c == ',' ? ';' : *c, f);
}

// The tolerance the row's outputs were checked with (the largest, when it has several: dQ, dK, dV after O, LSE),
// or 0 when it was not checked.
static double row_tolerance(const fa_report *r, const fa_timing_row *row) {
    char label[64];
    snprintf(label, sizeof label, "%s %s", row->label, row->impl);
    double tol = 0.0;
    for (int i = 0; i < r->n_checks; i++)
        if (strcmp(r->checks[i].label, label) == 0 && r->checks[i].tolerance > tol) tol = r->checks[i].tolerance;
    return tol;
}

// The step's name without a "(causal)" its label may carry for the check block: the causal column says it.
static void csv_step(FILE *f, const fa_timing_row *row) {
    char step[sizeof row->label];
    snprintf(step, sizeof step, "%s", row->label);
    char *suffix = strstr(step, " (causal)");
    if (row->causal && suffix && suffix[9] == '\0') *suffix = '\0';
    csv_text(f, step);
}

void fa_report_write_csv(const fa_report *r, const char *path) {
    struct stat st;
    int is_new = stat(path, &st) != 0 || st.st_size == 0;
    // The rows are formatted in memory and appended with one write (fa_csv_append): the file gets all of them or none.
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) fa_die("out of host memory: the --csv rows");
    if (is_new) fprintf(f, "%s\n", FA_CSV_HEADER);
    const char *commit = getenv("FA_COMMIT") ? getenv("FA_COMMIT") : FA_GIT_COMMIT;
    const fa_shape *s = &r->shape;
    const fa_gpu_facts *g = fa_gpu_info();
    for (int i = 0; i < r->n_rows; i++) {
        const fa_timing_row *row = &r->rows[i];
        double gflops = row->median_ms > 0 ? row->flops / (row->median_ms * 1e6) : 0.0;
        fprintf(f, "%s,", r->program);
        csv_step(f, row);
        fprintf(f, ",%s,%s,%d,%lld,%lld,%lld,%lld,%lld,%d,%d,%d,%s,%.3g,%s,%.6f,%.6f,%.3f,%.6g,%lld,%.6f,",
                row->backward ? "backward" : "forward", row->impl, row->threads, (long long)s->B, (long long)s->H, (long long)s->Sq,
                (long long)s->Sk, (long long)s->D, row->causal, row->block_m, row->block_n,
                row->pass < 0 ? "" : (row->pass ? "1" : "0"), row_tolerance(r, row), row->status, row->median_ms,
                row->min_ms, gflops, row->flops, (long long)row->extra_bytes, row->copy_ms);
        csv_text(f, fa_cpu_model());
        // Through csv_text, like every text field: on an AVX-512 CPU the hot loops' name holds a comma.
        fputc(',', f);
        csv_text(f, fa_simd_hot_loops());
        fputc(',', f);
        csv_text(f, fa_cpu_simd_offered());
        fprintf(f, ",%d,", fa_cpu_cores());
        csv_text(f, fa_gpu_name());
        fprintf(f, ",%d,%d,%s\n", g->sms, g->clock_mhz, commit);
    }
    fclose(f);
    fa_csv_append(path, text, len);
    free(text);
}

void fa_report_save_checks(const fa_report *r) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) fa_die("out of host memory: checks.csv");
    fprintf(f, "label,tensor,max_abs_err,rel_err,tolerance,pass\n");
    for (int i = 0; i < r->n_checks; i++) {
        const fa_check *c = &r->checks[i];
        csv_text(f, c->label);
        fprintf(f, ",%s,%.6e,%.6e,%.6e,%d\n", c->tensor, c->max_abs_err, c->rel_err, c->tolerance, c->pass);
    }
    fclose(f);
    fa_save_text("checks.csv", text);
    free(text);
}
