// fa_report.h - the check block, the timing table, and --csv rows.
#ifndef FA_REPORT_H
#define FA_REPORT_H

#ifdef __cplusplus
extern "C" {
#endif

#include <stdint.h>

#include "fa_cli.h"
#include "fa_verify.h"

#define FA_REPORT_MAX_ROWS 96

// One timed implementation.
typedef struct {
    char label[48];         // what ran, e.g. "naive" or "step 2 causal"
    char impl[16];          // "cpu" or "cuda"
    int threads;            // CPU threads (0 for cuda)
    int block_m, block_n;   // tile sizes used (0 when the implementation has none)
    int causal;
    int backward;           // 1 when it timed a backward pass (the CSV's kind column)
    double median_ms, min_ms;
    double flops;           // by the suite's convention (fa_flops_forward / fa_flops_backward)
    int64_t extra_bytes;    // memory beyond inputs and outputs (S and P of the naive version, workspaces)
    char extra_what[32];    // what that memory is, e.g. "S, P"
    double copy_ms;         // cuda: time of the host<->device copies of this run's inputs and outputs
    int pass;               // 1 passed, 0 failed, -1 not checked
    char status[16];        // "ok", "oom" (ran out of memory), "skipped"
} fa_timing_row;

typedef struct {
    const char *program;
    fa_shape shape;
    const fa_options *options;
    int heads_checked;                 // heads the oracle computed
    fa_check checks[FA_REPORT_MAX_ROWS];
    int n_checks;
    fa_timing_row rows[FA_REPORT_MAX_ROWS];
    int n_rows;
    char notes[8][160];                // lines printed under the tables (skipped GPU, copies)
    int n_notes;
    char libraries[2][256];            // lines printed under the machine: libraries a row depends on (its BLAS)
    int n_libraries;
} fa_report;

void fa_report_init(fa_report *report, const char *program, const fa_options *options);
void fa_report_add_check(fa_report *report, fa_check check);
void fa_report_add_row(fa_report *report, const fa_timing_row *row);
void fa_report_add_note(fa_report *report, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// A line printed in the header under the machine: a library that a row's speed depends on (its BLAS).
void fa_report_add_library(fa_report *report, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// The pass flag of all checks whose label is `label` (1 when all passed, 0 when one failed, -1 when none).
int fa_report_label_passed(const fa_report *report, const char *label);
// The check of `tensor` in the rows labelled `label`, or NULL.
const fa_check *fa_report_find_check(const fa_report *report, const char *label, const char *tensor);
// Prints the header (the machine: CPU, SIMD, cores; GPU, SMs, clocks), the check block and the timing table.
void fa_report_print(const fa_report *report);
// The --csv columns (FIELDS in tools/bench.py is the tools' copy; the tools test checks that the two agree): what
// ran (phase, step, kind = forward|backward, impl, threads), the problem, the check (pass, tolerance), the timing,
// FLOPs by the suite's convention (fa_shape.c), memory, and the machine (CPU model, SIMD of the hot loops (the column
// cpu_simd_built: the FA_SIMD_CLONES version this CPU runs, fa_simd.h) and offered,
// cores; GPU, SMs, MHz).
#define FA_CSV_HEADER                                                                                                \
    "phase,step,kind,impl,threads,B,H,Sq,Sk,D,causal,block_m,block_n,pass,tolerance,status,median_ms,min_ms,gflops," \
    "flops,extra_bytes,copy_ms,cpu_model,cpu_simd_built,cpu_simd_offered,cpu_cores,gpu_name,gpu_sms,gpu_clock_mhz,"   \
    "commit"
// Appends one CSV row per timing row to path (with a header line when the file is new). Returns 0 or exits 2.
void fa_report_write_csv(const fa_report *report, const char *path);
// Writes the check block as checks.csv into the run's save folder (fa_save.h; label, tensor, errors, tolerance,
// pass): what a later check of the outputs saved with --save-dir compares against (tools/pytorch_compare.py --check).
// fa_report_print() calls it when --save-dir is given.
void fa_report_save_checks(const fa_report *report);
// 1 when every check passed.
int fa_report_all_passed(const fa_report *report);
// The machine, as the report header and the CSV rows name it. "AMD EPYC ..." from /proc/cpuinfo, or "unknown".
const char *fa_cpu_model(void);
const char *fa_cpu_simd_built(void);     // the widest vector ISA this build may use, e.g. "SSE2 (128-bit)"
const char *fa_cpu_simd_offered(void);   // what the CPU has, e.g. "SSE2 AVX2 FMA AVX-512F"
int fa_cpu_cores(void);                  // logical cores OpenMP may use (omp_get_num_procs)
// "123.4 MiB"-style size.
void fa_format_bytes(double bytes, char *out, int out_len);

#ifdef __cplusplus
}
#endif

#endif
