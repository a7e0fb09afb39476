// main.c - phase 8 driver: ring attention over --ranks N ranks, against the single-GPU kernel on the whole problem.
// Every row runs on the same input and is checked against the float64 oracle on the whole sequence:
//   single             the single-GPU kernel on the whole sequence (phase 3 step 3 in float32, phase 5 step 3 in
//                      fp16/bf16): the time a ring is measured against;
//   ring N ranks       step 1 (CPU twin) and step 2 (GPU), contiguous shards;
//   zigzag N ranks     --zigzag: step 3, the zigzag layout, beside the contiguous ring;
//   ... bwd            --backward: step 4, dQ, dK and dV, against phase 4 (phase 5 step 4) on the whole sequence.
// The GPU rows run on --ranks GPUs through NCCL when this build has it and the machine has them, else every rank on
// one GPU through the loopback transport (--transport says which). The notes give each ring's per-GPU efficiency:
// single / (GPUs x ring), the fraction of the ideal N-fold speed-up a ring keeps (the loopback uses one GPU).
//
// Run: build/bin/phase8_ring                                   (class defaults: B=1 H=4 S=1001 D=64, 4 ranks)
//      build/bin/phase8_ring --impl cpu --ranks 3 --S 1000 --causal --zigzag --backward
//      build/bin/phase8_ring --impl cuda --dtype bf16 --ranks 4 --B 1 --H 16 --S 32768 --D 128 --causal --zigzag
//      build/bin/phase8_ring --impl cuda --dtype bf16 --ranks 4 --H 16 --S 131072 --D 128 --causal --zigzag --time-only
//      build/bin/phase8_ring --impl cuda --dtype bf16 --ranks 4 --H 16 --S 32768 --D 128 --time-only --timeline t.csv
// --timeline FILE runs each GPU ring row once more with the transport's trace on (ring_transport.h) and writes what
// every rank's streams did, as CSV, for tools/plot_ring_timeline.py.
#include "fa_driver.h"
#include "fa_gpu.h"
#include "fa_half.h"
#include "fa_tensor.h"
#include "fa_baselines.h"   // the single-GPU kernels: phase 3 step 3, phase 4, phase 5 steps 3 and 4
#include "ring.h"
#include "ring_blocks.h"
#include "ring_ranks.h"
#if FA_HAVE_CUDA
#include "ring_transport.h"
#endif

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int CUDA_HEAD_DIMS[] = {16, 32, 64, 128, 0};

static const fa_cli_spec SPEC = {
    .program = "phase8_ring",
    .summary = "Phase 8: ring attention, the sequence split over --ranks ranks: (1) the ring on the CPU, (2) on GPUs "
               "(NCCL, or a loopback on one GPU), (3) --zigzag for causal load balance, (4) --backward; against the "
               "single-GPU kernel on the whole sequence.",
    .defaults = {.B = 1, .H = 4, .Sq = 1001, .Sk = 1001, .D = 64},
    .default_block_m = 64,
    .default_block_n = 64,
    .cuda_head_dims = CUDA_HEAD_DIMS,
    .has_dtype = 1,
};

// --- Phase 8's own flags, taken out of argv before the shared parser sees the rest ---------------------------------
enum { TRANSPORT_AUTO = -1 };
typedef struct {
    int n_ranks, zigzag, backward, transport;
    int time_only;   // --time-only: no oracle, no check (sizes whose float64 check would take longer than the run)
    const char *timeline;   // --timeline FILE, or NULL
} ring_flags;

static void print_ring_help(void) {
    printf("Phase 8 (ring attention):\n");
    printf("  --ranks N      ranks of the ring, 1..%d                  (default 4)\n", RING_MAX_RANKS);
    printf("  --zigzag       also the zigzag layout (step 3): rank i holds chunks i and 2N-1-i of 2N\n");
    printf("  --backward     also the backward (step 4): dK, dV travel the ring home, dQ stays\n");
    printf("  --transport T  nccl | loopback: how the GPU rows pass blocks (default: nccl when built and N GPUs\n"
           "                 are there, else loopback: every rank on GPU 0)\n");
    printf("  --time-only    time the rows without the float64 oracle and without checks (for sizes whose\n"
           "                 check would take longer than the run; the same code is checked at smaller sizes);\n"
           "                 the ring rows then leave O and LSE (the gradients) on the ranks, as a ring does\n");
    printf("  --timeline F   run each GPU ring row once more, traced, and write what every rank's compute and\n"
           "                 communication streams did to the CSV file F (tools/plot_ring_timeline.py draws it)\n\n");
}

static int take_ring_flags(int argc, char **argv, ring_flags *f) {
    *f = (ring_flags){4, 0, 0, TRANSPORT_AUTO, 0, NULL};
    int kept = 1;
    for (int a = 1; a < argc; a++) {
        const char *value = NULL;
        if (strcmp(argv[a], "--zigzag") == 0) {
            f->zigzag = 1;
        } else if (strcmp(argv[a], "--backward") == 0) {
            f->backward = 1;
        } else if (strcmp(argv[a], "--time-only") == 0) {
            f->time_only = 1;
        } else if (strcmp(argv[a], "--ranks") == 0 || strncmp(argv[a], "--ranks=", 8) == 0) {
            if (argv[a][7] == '=') value = argv[a] + 8;
            else if (a + 1 < argc) value = argv[++a];
            else fa_die("--ranks needs a value (see --help)");
            errno = 0;
            char *end;
            const long n = strtol(value, &end, 10);
            if (errno || end == value || *end != '\0' || n < 1 || n > RING_MAX_RANKS)
                fa_die("--ranks expects an integer from 1 to %d, got '%s'", RING_MAX_RANKS, value);
            f->n_ranks = (int)n;
        } else if (strcmp(argv[a], "--transport") == 0 || strncmp(argv[a], "--transport=", 12) == 0) {
            if (argv[a][11] == '=') value = argv[a] + 12;
            else if (a + 1 < argc) value = argv[++a];
            else fa_die("--transport needs a value (see --help)");
            if (strcmp(value, "nccl") == 0) f->transport = RING_NCCL;
            else if (strcmp(value, "loopback") == 0) f->transport = RING_LOOPBACK;
            else fa_die("--transport expects nccl or loopback, got '%s'", value);
        } else if (strcmp(argv[a], "--timeline") == 0 || strncmp(argv[a], "--timeline=", 11) == 0) {
            if (argv[a][10] == '=') value = argv[a] + 11;
            else if (a + 1 < argc) value = argv[++a];
            else fa_die("--timeline needs a file name (the CSV to write)");
            if (value[0] == '\0') fa_die("--timeline needs a file name (the CSV to write)");
            f->timeline = value;
        } else {
            if (strcmp(argv[a], "--help") == 0) print_ring_help();
            argv[kept++] = argv[a];
        }
    }
    argv[kept] = NULL;
    return kept;
}

// --- The rows ---------------------------------------------------------------------------------------------------
enum { ROW_SINGLE, ROW_RING, ROW_ZIGZAG };

typedef struct {
    const fa_shape *shape;
    ring_config config;      // layout: the ring's
    int kind;                // ROW_*
    ring_tensors t;          // the whole problem: host pointers (CPU rows), or GPU 0's (the single GPU rows)
    float *delta;            // single backward: [B, H, S]
#if FA_HAVE_CUDA
    ring_ranks *ranks;       // GPU ring rows: the ranks on their GPUs, and the transport between them
    ring_transport *tr;
    int gather;              // GPU ring rows: bring the results to GPU 0 for the check (not with --time-only)
#endif
} row_args;

static ring_forward_tensors whole_forward(const row_args *a) {
    const fa_strides st = fa_strides_contiguous(a->shape->H, a->shape->Sq, a->shape->D);
    return (ring_forward_tensors){a->t.q, a->t.k, a->t.v, st, st, st, a->t.o, st, a->t.lse};
}
static ring_backward_tensors whole_backward(const row_args *a) {
    const fa_strides st = fa_strides_contiguous(a->shape->H, a->shape->Sq, a->shape->D);
    return (ring_backward_tensors){a->t.q, a->t.k, a->t.v, a->t.dout, st, st, st, st, a->t.o, a->t.lse, st,
                                   a->delta, a->t.dq, a->t.dk, a->t.dv, st, st, st};
}

static void run_forward_cpu(void *p) {
    const row_args *a = p;
    if (a->kind == ROW_SINGLE) {
        const ring_forward_tensors t = whole_forward(a);
        ring_block_forward_cpu(a->shape, a->config.dtype, a->config.block_m, a->config.block_n, &t);
    } else if (a->kind == ROW_RING) {
        ring_forward_cpu(a->shape, &a->config, &a->t);
    } else {
        ring_zigzag_forward_cpu(a->shape, &a->config, &a->t);
    }
}
static void run_backward_cpu(void *p) {
    const row_args *a = p;
    if (a->kind == ROW_SINGLE) {
        const ring_backward_tensors t = whole_backward(a);
        ring_block_backward_cpu(a->shape, a->config.dtype, a->config.block_m, a->config.block_n, &t);
    } else {
        ring_backward_cpu(a->shape, &a->config, &a->t);
    }
}
#if FA_HAVE_CUDA
// A GPU ring row runs the ring, then brings O and LSE (the gradients) from the ranks to GPU 0, where the harness
// reads them: a copy of S x D floats, small beside the blocks, but not part of a ring (--time-only leaves it out).
static void run_forward_cuda(void *p) {
    const row_args *a = p;
    if (a->kind == ROW_SINGLE) {
        const ring_forward_tensors t = whole_forward(a);
        ring_block_forward_cuda(a->shape, a->config.dtype, a->config.block_m, a->config.block_n, &t);
        return;
    }
    if (a->kind == ROW_RING) ring_forward_cuda(a->ranks, a->tr);
    else ring_zigzag_forward_cuda(a->ranks, a->tr);
    if (a->gather) ring_ranks_gather_forward_cuda(a->ranks, a->t.o, a->t.lse);
}
static void run_backward_cuda(void *p) {
    const row_args *a = p;
    if (a->kind == ROW_SINGLE) {
        const ring_backward_tensors t = whole_backward(a);
        ring_block_backward_cuda(a->shape, a->config.dtype, a->config.block_m, a->config.block_n, &t);
        return;
    }
    ring_backward_cuda(a->ranks, a->tr);
    if (a->gather) ring_ranks_gather_backward_cuda(a->ranks, a->t.dq, a->t.dk, a->t.dv);
}
#endif

// What the checks of one run need: the oracle, and for half inputs the rule.
typedef struct {
    const fa_options *opt;
    const fa_reference *ref;
    const fa_half_rule *rule;
} checker;

static void row_label(char *label, size_t size, const fa_options *opt, int kind, int backward, int n_ranks) {
    static const char *const NAMES[] = {"single", "ring", "zigzag"};
    char ranks[24] = "";
    if (kind != ROW_SINGLE) snprintf(ranks, sizeof ranks, " %d ranks", n_ranks);
    snprintf(label, size, "%s%s%s%s%s", NAMES[kind], backward ? " bwd" : "", ranks,
             opt->dtype == FA_DTYPE_FP32 ? "" : " ", opt->dtype == FA_DTYPE_FP32 ? "" : fa_dtype_name(opt->dtype));
}

// Runs, checks and times one row. host: where the results land on the host; device: the GPU's outputs (NULLs: CPU).
static void run_row(fa_report *report, const checker *ck, row_args *args, int is_cuda, int backward,
                    const ring_tensors *host, const ring_tensors *device) {
    const fa_options *opt = ck->opt;
    const fa_shape *s = &opt->shape;
    char label[48];
    row_label(label, sizeof label, opt, args->kind, backward, args->config.n_ranks);
    fa_implementation impl = {.label = label, .is_cuda = is_cuda, .ctx = args, .causal = s->causal,
                              .backward = backward, .block_m = args->config.block_m, .block_n = args->config.block_n,
                              .flops = backward ? fa_flops_backward(s) : fa_flops_forward(s)};
#if FA_HAVE_CUDA
    if (is_cuda) impl.run = backward ? run_backward_cuda : run_forward_cuda;
    else impl.run = backward ? run_backward_cpu : run_forward_cpu;
#else
    impl.run = backward ? run_backward_cpu : run_forward_cpu;
#endif
    if (args->kind != ROW_SINGLE) {
        impl.extra_bytes = ring_ranks_bytes(s, &args->config, backward);
        impl.extra_what = "the ranks' buffers";
    }
    if (!ck->ref) {   // --time-only: the timing row alone, marked as not checked
        fa_timing_row row = {.threads = is_cuda ? 0 : opt->threads, .block_m = impl.block_m, .block_n = impl.block_n,
                             .causal = impl.causal, .backward = backward, .flops = impl.flops,
                             .extra_bytes = impl.extra_bytes, .pass = -1};
        snprintf(row.label, sizeof row.label, "%s", label);
        snprintf(row.impl, sizeof row.impl, "%s", is_cuda ? "cuda" : "cpu");
        snprintf(row.status, sizeof row.status, "ok");
        snprintf(row.extra_what, sizeof row.extra_what, "%s", impl.extra_what ? impl.extra_what : "");
        fa_set_threads(opt->threads);
        fa_timing t = {0.0, 0.0, 0};
#if FA_HAVE_CUDA
        if (is_cuda) t = fa_gpu_time(impl.run, impl.ctx, opt->warmup > 0 ? opt->warmup : 1, opt->iters);
#endif
        if (!is_cuda) t = fa_time_host(impl.run, impl.ctx, opt->warmup > 0 ? opt->warmup : 1, opt->iters);
        row.median_ms = t.median_ms;
        row.min_ms = t.min_ms;
        fa_report_add_row(report, &row);
        return;
    }
    if (backward) {
        const double tol_f32[3] = {ck->ref->tol_backward, ck->ref->tol_backward, ck->ref->tol_backward};
        const fa_grads h = {host->dq, host->dk, host->dv};
        const fa_grads d = {device ? device->dq : NULL, device ? device->dk : NULL, device ? device->dv : NULL};
        if (opt->dtype == FA_DTYPE_FP32) fa_backward_outputs(&impl, s, ck->ref, tol_f32, h, d);
        else fa_half_backward_outputs(&impl, s, ck->ref, ck->rule, h, d);
    } else if (opt->dtype == FA_DTYPE_FP32) {
        fa_forward_outputs(&impl, s, ck->ref, host->o, device ? device->o : NULL, host->lse,
                           device ? device->lse : NULL);
    } else {
        fa_half_forward_outputs(&impl, s, ck->ref, ck->rule, host->o, device ? device->o : NULL, host->lse,
                                device ? device->lse : NULL);
    }
    fa_check_and_time(report, opt, ck->ref, &impl);
}

// The median of the last timing row with this label on this device (threads: the CPU's parallel run), or 0.
static double median_of(const fa_report *report, const fa_options *opt, int kind, int backward, int n_ranks,
                        int is_cuda) {
    char label[48];
    row_label(label, sizeof label, opt, kind, backward, n_ranks);
    double ms = 0.0;
    for (int i = 0; i < report->n_rows; i++) {
        const fa_timing_row *row = &report->rows[i];
        if (strcmp(row->label, label) != 0 || strcmp(row->impl, is_cuda ? "cuda" : "cpu") != 0) continue;
        if (!is_cuda && row->threads != opt->threads) continue;
        ms = row->median_ms;
    }
    return ms;
}

// The note of one device: each ring's per-GPU efficiency, single / (GPUs x ring).
static void add_efficiency_note(fa_report *report, const fa_options *opt, const ring_flags *f, int is_cuda, int gpus,
                                const char *how) {
    if (opt->iters == 0) return;
    char text[160];
    int len = snprintf(text, sizeof text, "%s per-%s efficiency, single / (%d x ring):", is_cuda ? "cuda" : "cpu",
                       is_cuda ? "GPU" : "device", gpus);
    for (int backward = 0; backward <= f->backward; backward++)
        for (int kind = ROW_RING; kind <= (f->zigzag ? ROW_ZIGZAG : ROW_RING); kind++) {
            const double single = median_of(report, opt, ROW_SINGLE, backward, f->n_ranks, is_cuda);
            const double ring = median_of(report, opt, kind, backward, f->n_ranks, is_cuda);
            if (single > 0.0 && ring > 0.0 && len < (int)sizeof text)
                len += snprintf(text + len, sizeof text - (size_t)len, " %s%s %.2f",
                                kind == ROW_RING ? "ring" : "zigzag", backward ? " bwd" : "", single / (gpus * ring));
        }
    fa_report_add_note(report, "%s (%s)", text, how);
}

// --- The CPU rows ---------------------------------------------------------------------------------------------------
static void run_cpu(fa_report *report, const checker *ck, const ring_flags *f, ring_tensors whole, float *delta) {
    const fa_options *opt = ck->opt;
    row_args args = {.shape = &opt->shape, .t = whole, .delta = delta,
                     .config = {opt->dtype, f->n_ranks, RING_CONTIGUOUS, opt->block_m, opt->block_n}};
    for (int kind = ROW_SINGLE; kind <= (f->zigzag ? ROW_ZIGZAG : ROW_RING); kind++) {
        args.kind = kind;
        args.config.layout = kind == ROW_ZIGZAG ? RING_ZIGZAG : RING_CONTIGUOUS;
        run_row(report, ck, &args, 0, 0, &whole, NULL);
    }
    if (f->backward) {
        // The O and LSE the backward differentiates: the ring's own forward's, in the layout of the backward's ring.
        args.config.layout = f->zigzag ? RING_ZIGZAG : RING_CONTIGUOUS;
        fa_set_threads(opt->threads);
        ring_zigzag_forward_cpu(&opt->shape, &args.config, &whole);
        for (int kind = ROW_SINGLE; kind <= ROW_RING; kind++) {
            args.kind = kind == ROW_SINGLE ? ROW_SINGLE : (f->zigzag ? ROW_ZIGZAG : ROW_RING);
            run_row(report, ck, &args, 0, 1, &whole, NULL);
        }
    }
    add_efficiency_note(report, opt, f, 0, 1, "ranks in turn on the same cores");
}

// --- The GPU rows ---------------------------------------------------------------------------------------------------
#if FA_HAVE_CUDA
static void *upload_bytes(const void *host, size_t bytes, const char *what) {
    float *device = fa_gpu_alloc((int64_t)((bytes + 3) / 4), what);
    fa_gpu_upload(device, (const float *)host, (int64_t)((bytes + 3) / 4));
    return device;
}

// --timeline: one more run of a GPU ring row with the transport's trace on, its intervals appended to `out`.
// Returns the number of intervals.
static int record_timeline(const fa_options *opt, FILE *out, row_args *args, int backward, const char *path) {
    char label[48];
    row_label(label, sizeof label, opt, args->kind, backward, args->config.n_ranks);
    const int gather = args->gather;   // the ring alone: its results stay on the ranks
    args->gather = 0;
    ring_transport_trace_begin(args->tr);
    if (backward) run_backward_cuda(args);
    else run_forward_cuda(args);
    args->gather = gather;
    const int lines = ring_transport_trace_write(args->tr, out, label);
    if (lines < 0) fa_die("--timeline: cannot write %s", path);
    return lines;
}

static void run_cuda(fa_report *report, const checker *ck, const ring_flags *f, const ring_tensors *host_in,
                     ring_tensors host_out, FILE *timeline) {
    const fa_options *opt = ck->opt;
    const fa_shape *s = &opt->shape;
    const int kind = f->transport == TRANSPORT_AUTO ? ring_transport_auto(f->n_ranks) : f->transport;
    char why[200];
    ring_transport *tr = ring_transport_create(kind, f->n_ranks, why, sizeof why);
    if (!tr) {   // NCCL asked for where it cannot be had: like a GPU that is not there, the GPU rows are skipped
        if (timeline) remove(f->timeline);   // nothing will be traced: no file is left with a header alone
        if (opt->impl == FA_IMPL_CUDA) {
            printf("skipped: --transport %s: %s\n", ring_transport_name(kind), why);
            exit(FA_EXIT_SKIP);
        }
        fa_report_add_note(report, "GPU rows skipped: --transport %s: %s", ring_transport_name(kind), why);
        return;
    }

    // The single rows' inputs on GPU 0, and every row's outputs there.
    const size_t q_bytes = (size_t)fa_numel_q(s) * ring_dtype_bytes(opt->dtype);
    ring_tensors dev = {upload_bytes(host_in->q, q_bytes, "Q"), upload_bytes(host_in->k, q_bytes, "K"),
                        upload_bytes(host_in->v, q_bytes, "V"), fa_gpu_alloc(fa_numel_q(s), "O"),
                        fa_gpu_alloc(fa_numel_lse(s), "LSE"), NULL, NULL, NULL, NULL};
    float *delta = NULL;
    if (f->backward) {
        dev.dout = upload_bytes(host_in->dout, q_bytes, "dO");
        dev.dq = fa_gpu_alloc(fa_numel_q(s), "dQ");
        dev.dk = fa_gpu_alloc(fa_numel_q(s), "dK");
        dev.dv = fa_gpu_alloc(fa_numel_q(s), "dV");
        delta = fa_gpu_alloc(fa_numel_lse(s), "Delta");
    }
    row_args args = {.shape = s, .t = dev, .delta = delta, .tr = tr, .gather = !f->time_only,
                     .config = {opt->dtype, f->n_ranks, RING_CONTIGUOUS, opt->block_m, opt->block_n}};
    ring_ranks *ranks[2] = {NULL, NULL};   // the contiguous ring's, and the zigzag's
    int intervals = 0, traced = 0;         // --timeline
    for (int k = ROW_SINGLE; k <= (f->zigzag ? ROW_ZIGZAG : ROW_RING); k++) {
        args.kind = k;
        args.config.layout = k == ROW_ZIGZAG ? RING_ZIGZAG : RING_CONTIGUOUS;
        if (k != ROW_SINGLE) {
            // The ranks of this layout, with the backward's buffers if the backward will run on them.
            ring_ranks **r = &ranks[k == ROW_ZIGZAG];
            *r = malloc(sizeof **r);
            if (!*r) fa_die("out of host memory: the ranks");
            const int with_backward = f->backward && (k == ROW_ZIGZAG) == (f->zigzag != 0);
            ring_ranks_create_cuda(*r, s, &args.config, with_backward, ring_transport_devices(tr), host_in);
            args.ranks = *r;
        }
        run_row(report, ck, &args, 1, 0, &host_out, &dev);
        if (timeline && k != ROW_SINGLE) {
            intervals += record_timeline(opt, timeline, &args, 0, f->timeline);
            traced++;
        }
    }
    if (f->backward) {
        // The backward differentiates the ring's own O and LSE, which the forward row left on the ranks (and on GPU 0
        // for the single row); one more forward makes sure they are those of the last run.
        args.kind = f->zigzag ? ROW_ZIGZAG : ROW_RING;
        args.config.layout = f->zigzag ? RING_ZIGZAG : RING_CONTIGUOUS;
        args.ranks = ranks[f->zigzag != 0];
        run_forward_cuda(&args);
        fa_gpu_synchronize("the forward the backward differentiates");
        for (int k = ROW_SINGLE; k <= ROW_RING; k++) {
            args.kind = k == ROW_SINGLE ? ROW_SINGLE : (f->zigzag ? ROW_ZIGZAG : ROW_RING);
            run_row(report, ck, &args, 1, 1, &host_out, &dev);
        }
        if (timeline) {
            intervals += record_timeline(opt, timeline, &args, 1, f->timeline);
            traced++;
        }
    }
    char how[96];
    snprintf(how, sizeof how, "%s: %d rank%s on %d GPU%s", ring_transport_name(kind), f->n_ranks,
             f->n_ranks > 1 ? "s" : "", ring_transport_gpus(tr), ring_transport_gpus(tr) > 1 ? "s" : "");
    add_efficiency_note(report, opt, f, 1, ring_transport_gpus(tr), how);
    if (timeline)
        fa_report_add_note(report, "timeline: %d intervals of %d traced ring rows written to %s", intervals, traced,
                           f->timeline);

    for (int i = 0; i < 2; i++)
        if (ranks[i]) {
            ring_ranks_free_cuda(ranks[i]);
            free(ranks[i]);
        }
    void *buffers[] = {(void *)dev.q, (void *)dev.k, (void *)dev.v, dev.o, dev.lse, (void *)dev.dout, dev.dq, dev.dk,
                       dev.dv, delta};
    for (size_t i = 0; i < sizeof buffers / sizeof buffers[0]; i++)
        if (buffers[i]) fa_gpu_free(buffers[i]);
    ring_transport_destroy(tr);
}
#endif

// What the GPU kernels take; checked in a build without CUDA too, so that a command line means the same everywhere.
static void check_cuda_options(const fa_options *opt, const ring_flags *f) {
    if (!(opt->impl & FA_IMPL_CUDA)) return;
    const int half = opt->dtype != FA_DTYPE_FP32;
    if (half && !tc_cuda_supports_head_dim(opt->shape.D))
        fa_die("the fp16/bf16 GPU blocks (phase 5) take D = 64 or 128 (got %lld); use --impl cpu for other sizes",
               (long long)opt->shape.D);
    const int forward_ok = half ? tc_cuda_supports_tiles(opt->block_m, opt->block_n)
                                : flash4d_cuda_supports_tiles(opt->block_m, opt->block_n);
    if (!forward_ok)
        fa_die("the GPU blocks are compiled for --block-m x --block-n = %s (got %d x %d); use --impl cpu for others",
               half ? TC_CUDA_TILES_TEXT : FLASH4D_CUDA_TILES_TEXT, opt->block_m, opt->block_n);
    if (f->backward && !(opt->block_m == 64 && opt->block_n == 64))
        fa_die("the GPU backward blocks run with --block-m 64 --block-n 64 (the tiles both backward kernels have); "
               "got %d x %d", opt->block_m, opt->block_n);
}

int main(int argc, char **argv) {
    ring_flags f;
    argc = take_ring_flags(argc, argv, &f);
    fa_options opt;
    fa_parse_options(argc, argv, &SPEC, &opt);
    if (opt.shape.Sq != opt.shape.Sk)
        fa_die("ring attention shards one sequence (its queries, keys and values are the same tokens): --Sq %lld "
               "and --Sk %lld must be equal (use --S)", (long long)opt.shape.Sq, (long long)opt.shape.Sk);
    check_cuda_options(&opt, &f);
    if (f.timeline && !(opt.impl & FA_IMPL_CUDA))
        fa_die("--timeline traces the GPU ring rows: drop --impl cpu");

    fa_report report;
    fa_report_init(&report, SPEC.program, &opt);
    const int use_gpu = fa_use_gpu(&opt, &report);
#if FA_HAVE_CUDA && TC_HAVE_MMA_CUDA
    char why[256];
    if (use_gpu && opt.dtype != FA_DTYPE_FP32 && tc_cuda_check_device(why, sizeof why) != 0) fa_die("%s", why);
#else
    if (use_gpu && opt.dtype != FA_DTYPE_FP32)
        fa_die("--dtype %s on the GPU needs phase 5's tensor-core kernels, which this build left out (no sm_80 or "
               "newer); use --impl cpu", fa_dtype_name(opt.dtype));
#endif

    // --timeline: the file is opened now, so that a name that cannot be written is refused before any work.
    FILE *timeline = NULL;
    if (f.timeline && use_gpu) {
        timeline = fopen(f.timeline, "w");
        if (!timeline) fa_die("--timeline: cannot write %s: %s", f.timeline, strerror(errno));
        fprintf(timeline, "row,rank,gpu,what,index,start_us,end_us\n");
    }
    if (f.timeline && !use_gpu) fa_report_add_note(&report, "--timeline: no GPU in use, %s not written", f.timeline);

    // The inputs (rounded to --dtype; the oracle sees the same numbers), and the oracle on the whole sequence.
    fa_inputs in;
    fa_make_inputs(&opt, f.backward, &in);
    fa_reference ref = {0};
    fa_half_inputs half = {0};
    fa_half_rule rule = {0};
    if (!f.time_only) fa_make_reference(&opt, &in, f.backward, &ref);
    else fa_report_add_note(&report, "--time-only: nothing was checked (make test-phase8 checks this code)");
    if (opt.dtype != FA_DTYPE_FP32) {
        if (!f.time_only) fa_make_half_rule(&report, &opt, &in, &ref, &rule);
        if (!f.time_only && f.backward) fa_make_half_backward_rule(&report, &opt, &in, &ref, &rule);
        fa_make_half_inputs(&opt, &in, &half);
    }
    const checker ck = {&opt, f.time_only ? NULL : &ref, &rule};
    const int is_half = opt.dtype != FA_DTYPE_FP32;
    const int64_t n = fa_numel_q(&opt.shape);
    ring_tensors whole = {is_half ? (const void *)half.q : in.q, is_half ? (const void *)half.k : in.k,
                          is_half ? (const void *)half.v : in.v, fa_alloc_floats(n, "O"),
                          fa_alloc_floats(fa_numel_lse(&opt.shape), "LSE"), NULL, NULL, NULL, NULL};
    float *delta = NULL;
    if (f.backward) {
        whole.dout = is_half ? (const void *)half.dout : in.dout;
        whole.dq = fa_alloc_floats(n, "dQ");
        whole.dk = fa_alloc_floats(n, "dK");
        whole.dv = fa_alloc_floats(n, "dV");
        delta = fa_alloc_floats(fa_numel_lse(&opt.shape), "Delta");
    }

    if (opt.impl & FA_IMPL_CPU) run_cpu(&report, &ck, &f, whole, delta);
#if FA_HAVE_CUDA
    if (use_gpu) run_cuda(&report, &ck, &f, &whole, whole, timeline);
#endif
    if (timeline && fclose(timeline) != 0) fa_die("--timeline: cannot write %s: %s", f.timeline, strerror(errno));

    const int status = fa_finish(&report, &opt);
    free(whole.o);
    free(whole.lse);
    free(whole.dq);
    free(whole.dk);
    free(whole.dv);
    free(delta);
    if (!f.time_only) fa_free_reference(&ref);
    fa_free_half_rule(&rule);
    if (is_half) fa_free_half_inputs(&half);
    fa_free_inputs(&in);
    return status;
}
