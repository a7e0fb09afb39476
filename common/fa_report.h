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
} fa_report;

void fa_report_init(fa_report *report, const char *program, const fa_options *options);
void fa_report_add_check(fa_report *report, fa_check check);
void fa_report_add_row(fa_report *report, const fa_timing_row *row);
void fa_report_add_note(fa_report *report, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// The pass flag of all checks whose label is `label` (1 when all passed, 0 when one failed, -1 when none).
int fa_report_label_passed(const fa_report *report, const char *label);
// The check of `tensor` in the rows labelled `label`, or NULL.
const fa_check *fa_report_find_check(const fa_report *report, const char *label, const char *tensor);
// Prints the header, the check block and the timing table.
void fa_report_print(const fa_report *report);
// Appends one CSV row per timing row to path (with a header line when the file is new). Returns 0 or exits 2.
void fa_report_write_csv(const fa_report *report, const char *path);
// 1 when every check passed.
int fa_report_all_passed(const fa_report *report);
// "Intel(R) Xeon(R) ..." from /proc/cpuinfo, or "unknown".
const char *fa_cpu_model(void);
// "123.4 MiB"-style size.
void fa_format_bytes(double bytes, char *out, int out_len);

#ifdef __cplusplus
}
#endif

#endif
