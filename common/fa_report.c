// fa_report.c - the check block, the timing table, and --csv rows.
#include "fa_report.h"
#include "fa_gpu.h"
#include "fa_tensor.h"

#include <math.h>
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

const char *fa_cpu_model(void) {
    static char model[128] = "";
    if (model[0]) return model;
    snprintf(model, sizeof model, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return model;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) == 0 && colon) {
            colon += 2;
            colon[strcspn(colon, "\n")] = '\0';
            snprintf(model, sizeof model, "%s", colon);
            break;
        }
    }
    fclose(f);
    return model;
}

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
    printf("CPU: %s (%d threads)   GPU: %s\n", fa_cpu_model(), o->threads, fa_gpu_name());
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
        if (c->ref_err > 0.0) snprintf(vs_ref, sizeof vs_ref, "%.2fx<=%gx", c->max_abs_err / c->ref_err, c->ref_factor);
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

void fa_report_write_csv(const fa_report *r, const char *path) {
    struct stat st;
    int is_new = stat(path, &st) != 0 || st.st_size == 0;
    FILE *f = fopen(path, "a");
    if (!f) fa_die("cannot append to %s", path);
    if (is_new)
        fprintf(f, "phase,step,impl,threads,B,H,Sq,Sk,D,causal,block_m,block_n,pass,status,median_ms,min_ms,gflops,"
                   "flops,extra_bytes,copy_ms,cpu_model,gpu_name,commit\n");
    const char *commit = getenv("FA_COMMIT") ? getenv("FA_COMMIT") : FA_GIT_COMMIT;
    const fa_shape *s = &r->shape;
    for (int i = 0; i < r->n_rows; i++) {
        const fa_timing_row *row = &r->rows[i];
        double gflops = row->median_ms > 0 ? row->flops / (row->median_ms * 1e6) : 0.0;
        fprintf(f, "%s,", r->program);
        csv_text(f, row->label);
        fprintf(f, ",%s,%d,%lld,%lld,%lld,%lld,%lld,%d,%d,%d,%s,%s,%.6f,%.6f,%.3f,%.6g,%lld,%.6f,", row->impl,
                row->threads, (long long)s->B, (long long)s->H, (long long)s->Sq, (long long)s->Sk, (long long)s->D,
                row->causal, row->block_m, row->block_n, row->pass < 0 ? "" : (row->pass ? "1" : "0"), row->status,
                row->median_ms, row->min_ms, gflops, row->flops, (long long)row->extra_bytes, row->copy_ms);
        csv_text(f, fa_cpu_model());
        fputc(',', f);
        csv_text(f, fa_gpu_name());
        fprintf(f, ",%s\n", commit);
    }
    if (fclose(f) != 0) fa_die("writing %s failed", path);
}
