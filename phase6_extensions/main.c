// main.c - phase 6 driver: the extensions real models use, each its own kernel (a short diff from phase 3 step 3),
// CPU and GPU, checked against the phase-6 float64 oracle (oracle_ext.h), with phase 3 step 3 beside them wherever
// it computes the same problem.
//
// One feature per run, given by its flag (each feature is a separate file, so two cannot be combined):
//   --H-kv N                      GQA / MQA: N K/V heads, H divisible by N
//   --window LEFT,RIGHT           sliding window (-1: unbounded side); with --causal, RIGHT is 0
//   --softcap C                   scores become C * tanh(s / C), C > 0
//   --causal-align top-left|bottom-right   with --causal: where the diagonal sits when Sq != Sk
//   --seqlens L1,L2,...           variable-length batch: the sequences packed as [total, H, D] (sets B, Sq, Sk)
//   --dropout P                   dropout with probability P (0 <= P < 1), the mask drawn from --seed
//   --backward                    with --softcap, --H-kv, --window or --dropout: the feature's forward, then its
//                                 backward
// Without a feature flag, the feature kernels that have an "off" (gqa with H_kv = H, window with no bound, align
// top-left, dropout with P = 0) run beside phase 3 step 3 on the same problem: what each feature costs when it is
// off. Split-KV decoding
// runs whenever Sq <= SPLITKV_MAX_SQ and the problem is one it computes (no GQA, window or softcap; causal aligned
// bottom-right, as a decode step is), beside phase 3 step 3 where that applies.
//
// Run: build/bin/phase6_extensions                                  (B=1 H=4 S=512 D=64: phase 3 and the "off" rows)
//      build/bin/phase6_extensions --H 8 --H-kv 2 --causal
//      build/bin/phase6_extensions --S 4096 --window 256,0 --causal
//      build/bin/phase6_extensions --Sq 130 --Sk 100 --causal --causal-align bottom-right
//      build/bin/phase6_extensions --seqlens 3,17,1000,130 --H 4 --causal
//      build/bin/phase6_extensions --dropout 0.1 --seed 7 --causal --backward
//      build/bin/phase6_extensions --impl cuda --B 4 --H 32 --Sq 1 --Sk 131072 --D 128 --check-heads 2
#include "backward_ext.h"
#include "extensions.h"
#include "oracle_ext.h"

#include "fa_driver.h"
#include "fa_gpu.h"
#include "fa_tensor.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int CUDA_HEAD_DIMS[] = FLASH4D_CUDA_HEAD_DIMS;

static const fa_cli_spec SPEC = {
    .program = "phase6_extensions",
    .summary = "Phase 6: the extensions (GQA/MQA, sliding window, softcapping, causal alignment, variable-length "
               "batches, dropout, split-KV decoding; the backward of GQA, the window, softcapping and dropout), each "
               "a short diff from phase 3 step 3 (or phase 4), checked against the phase-6 float64 oracle.",
    .defaults = {.B = 1, .H = 4, .Sq = 512, .Sk = 512, .D = 64},
    .default_block_m = 64,
    .default_block_n = 32,
    .cuda_head_dims = CUDA_HEAD_DIMS,
};

// --- Phase 6's own flags: taken out of argv before the shared parser sees the rest. -----------------------------
typedef struct {
    ext_options e;
    int has_H_kv, has_window, has_softcap, has_align, has_dropout;
    int64_t n_seqs;          // --seqlens: the number of sequences (0: not a varlen run)
    int64_t *cu_seqlens;     // ... and their cumulative offsets, n_seqs + 1 entries
    int has_size_flag;       // --B, --S, --Sq or --Sk was given (--seqlens sets them)
    int backward;            // --backward: the feature's backward pass too
} ext_flags;

static void print_ext_help(void) {
    printf("Phase 6 features (one per run; each is its own kernel, diffable against phase 3 step 3):\n");
    printf("  --H-kv N       GQA / MQA: N K/V heads shared by groups of H / N query heads (H divisible by N)\n");
    printf("  --window L,R   sliding window: row i sees keys i - L .. i + R (-1: unbounded); with --causal R is 0\n");
    printf("  --softcap C    softcapping: scores become C * tanh(s / C) before the softmax (C > 0)\n");
    printf("  --causal-align top-left|bottom-right   with --causal: row i sees keys j <= i (top-left) or\n"
           "                 j <= i + Sk - Sq (bottom-right, FlashAttention's); rows that see no key give O = 0\n");
    printf("  --seqlens L1,L2,...   variable-length batch: sequences of these lengths packed as [total, H, D]\n"
           "                 (FlashAttention's cu_seqlens); sets B, Sq and Sk; --check-heads counts query tokens\n");
    printf("  --dropout P    dropout: each probability is dropped with probability P (0 <= P < 1) and the kept\n"
           "                 ones scaled by 1 / (1 - P); the mask comes from --seed (Philox), the backward\n"
           "                 regenerates it\n");
    printf("  --backward     with --softcap, --H-kv, --window or --dropout: the feature's forward, then its "
           "backward\n");
    printf("Split-KV decoding runs by itself when Sq <= %d (K/V split over blocks of %d keys).\n\n", SPLITKV_MAX_SQ,
           SPLITKV_KEYS_PER_SPLIT);
}

// Every value is checked as typed, with the shared parsers (fa_parse_int, fa_parse_float32: one message for a number
// past the limits and for one too long for its type, and a float32 check of what the kernels will use).
static void parse_window(const char *text, ext_options *e) {
    const char *comma = strchr(text, ',');
    if (!comma) fa_die("--window expects LEFT,RIGHT (two integers, -1 for unbounded), got '%s'", text);
    char left[64];
    if (comma - text >= (ptrdiff_t)sizeof left) fa_die("--window LEFT must be between -1 and %lld (got %.*s)",
                                                       (long long)FA_MAX_DIM, (int)(comma - text), text);
    snprintf(left, sizeof left, "%.*s", (int)(comma - text), text);
    e->window_left = fa_parse_int("--window LEFT", left, -1, FA_MAX_DIM);
    e->window_right = fa_parse_int("--window RIGHT", comma + 1, -1, FA_MAX_DIM);
}

static void parse_softcap(const char *text, ext_options *e) {
    e->softcap = fa_parse_float32("--softcap", text, 0.0, 1, 1e30, 0);   // C > 0: scores become C * tanh(s / C)
}

static void parse_dropout(const char *text, ext_options *e) {
    // 0 <= P < 1: P = 1 would drop every key, and a P that rounds to 1 in float32 is refused by the parser.
    e->dropout_p = fa_parse_float32("--dropout", text, 0.0, 0, 1.0, 1);
}

// --seqlens 3,17,1000: lengths >= 1, at most FA_MAX_DIM tokens in all.
static void parse_seqlens(const char *text, ext_flags *f) {
    int64_t n = 1;
    for (const char *c = text; *c; c++) n += *c == ',';
    f->cu_seqlens = malloc((size_t)(n + 1) * sizeof(int64_t));
    if (!f->cu_seqlens) fa_die("out of host memory: --seqlens");
    f->cu_seqlens[0] = 0;
    const char *item = text;
    for (int64_t b = 0; b < n; b++) {
        const char *end = strchr(item, ',');
        const size_t len = end ? (size_t)(end - item) : strlen(item);
        char number[32];
        if (len == 0) fa_die("--seqlens expects lengths separated by commas, got '%s'", text);
        if (len >= sizeof number) fa_die("--seqlens must be between 1 and %lld (got %.*s)", (long long)FA_MAX_DIM,
                                         (int)len, item);
        memcpy(number, item, len);
        number[len] = '\0';
        const int64_t L = fa_parse_int("--seqlens", number, 1, FA_MAX_DIM);
        if (L > FA_MAX_DIM - f->cu_seqlens[b])
            fa_die("--seqlens: the total must be at most %lld, got '%s'", (long long)FA_MAX_DIM, text);
        f->cu_seqlens[b + 1] = f->cu_seqlens[b] + L;
        item = end ? end + 1 : item + len;
    }
    f->n_seqs = n;
}

// Takes the phase-6 flags (as --flag VALUE or --flag=VALUE) out of argv; returns the new argc.
static int take_ext_flags(int argc, char **argv, ext_flags *f) {
    static const char *const NAMES[] = {"--H-kv", "--window", "--softcap", "--causal-align", "--seqlens",
                                        "--dropout"};
    int kept = 1;
    for (int a = 1; a < argc; a++) {
        int which = -1;
        const char *value = NULL;
        for (int n = 0; n < 6; n++) {
            const size_t len = strlen(NAMES[n]);
            if (strcmp(argv[a], NAMES[n]) == 0) {
                if (a + 1 >= argc) fa_die("%s needs a value (see --help)", NAMES[n]);
                which = n, value = argv[++a];
            } else if (strncmp(argv[a], NAMES[n], len) == 0 && argv[a][len] == '=') {
                which = n, value = argv[a] + len + 1;
            }
        }
        if (strcmp(argv[a], "--backward") == 0) {
            f->backward = 1;
            continue;
        }
        if (which < 0) {
            if (strcmp(argv[a], "--help") == 0) print_ext_help();
            static const char *const SIZES[] = {"--B", "--S", "--Sq", "--Sk"};
            for (int n = 0; n < 4; n++)
                if (strncmp(argv[a], SIZES[n], strlen(SIZES[n])) == 0 &&
                    (argv[a][strlen(SIZES[n])] == '\0' || argv[a][strlen(SIZES[n])] == '='))
                    f->has_size_flag = 1;
            argv[kept++] = argv[a];
            continue;
        }
        switch (which) {
        case 0:
            f->e.H_kv = fa_parse_int("--H-kv", value, 1, FA_MAX_DIM);
            f->has_H_kv = 1;
            break;
        case 1: parse_window(value, &f->e); f->has_window = 1; break;
        case 2: parse_softcap(value, &f->e); f->has_softcap = 1; break;
        case 4: parse_seqlens(value, f); break;
        case 5: parse_dropout(value, &f->e); f->has_dropout = 1; break;
        case 3:
            if (strcmp(value, "top-left") == 0) f->e.bottom_right = 0;
            else if (strcmp(value, "bottom-right") == 0) f->e.bottom_right = 1;
            else fa_die("--causal-align expects top-left or bottom-right, got '%s'", value);
            f->has_align = 1;
        }
    }
    argv[kept] = NULL;
    return kept;
}

// The combinations a run may ask for; anything else is refused with one line.
static void check_ext_flags(const fa_options *opt, ext_flags *f) {
    const fa_shape *s = &opt->shape;
    if (!f->has_H_kv) f->e.H_kv = s->H;
    if (f->e.H_kv > s->H || s->H % f->e.H_kv != 0)
        fa_die("--H-kv %lld must divide --H %lld (each K/V head serves H / H_kv query heads)", (long long)f->e.H_kv,
               (long long)s->H);
    if (f->has_H_kv + f->has_window + f->has_softcap + f->has_align + f->has_dropout + (f->n_seqs > 0) > 1)
        fa_die("give one of --H-kv, --window, --softcap, --causal-align, --seqlens, --dropout per run: each feature "
               "is its own kernel (phase6_extensions/*_cpu.c), a short diff from phase 3 step 3");
    if (f->n_seqs && f->has_size_flag)
        fa_die("--seqlens sets B (the number of sequences) and Sq = Sk (each one's length): give no --B, --S, --Sq "
               "or --Sk with it");
    if (f->has_align && !s->causal) fa_die("--causal-align applies to --causal attention only");
    if (f->backward && !f->has_softcap && !f->has_H_kv && !f->has_window && !f->has_dropout)
        fa_die("--backward is built for --softcap, --H-kv, --window and --dropout (phase6_extensions/*_backward_*); "
               "give one of them");
    if (f->backward && (opt->impl & FA_IMPL_CUDA) && !backward_cuda_supports_tiles(opt->block_m, opt->block_n))
        fa_die("--backward on the GPU needs --block-m x --block-n in both the forward's (%s) and the backward's (%s) "
               "lists (got %d x %d)", FLASH4D_CUDA_TILES_TEXT, BACKWARD_CUDA_TILES_TEXT, opt->block_m, opt->block_n);
    if (s->causal && f->e.window_right > 0)
        fa_die("--causal with --window %lld,%lld: causal is the window (LEFT, 0), so RIGHT must be 0 or -1",
               (long long)f->e.window_left, (long long)f->e.window_right);
    if (s->causal) f->e.window_right = 0;   // causal is the window (LEFT, 0): the window kernel needs no other flag
    f->e.dropout_seed = opt->seed;         // the mask is drawn from the run's seed, as the inputs are
    if (f->n_seqs && (opt->save_dir || opt->load_dir))
        fa_die("--seqlens with --%s: a varlen batch is packed [total, H, D], which the .npy files of --save-dir and "
               "--load-dir ([B, H, S, D]) do not hold", opt->save_dir ? "save-dir" : "load-dir");
}

// --- The rows: one table (ROWS, below), one entry per kernel: its label, whether it is a backward, and what runs
// it on the CPU and on the GPU. The enum names the table's entries, in the order the report prints them.
enum {
    ROW_PHASE3, ROW_GQA, ROW_WINDOW, ROW_SOFTCAP, ROW_ALIGN, ROW_SPLITKV, ROW_VARLEN, ROW_SOFTCAP_BACKWARD,
    ROW_GQA_BACKWARD, ROW_WINDOW_BACKWARD, ROW_DROPOUT, ROW_DROPOUT_BACKWARD, N_ROW_KINDS
};

// The forward rows' tensors, the same on both devices: without the LSE residual, with it (the rows a backward
// follows), and packed (varlen).
typedef struct {
    forward_tensors plain, with_residual, packed;
} row_tensors;

typedef struct {
    int kind;
    const fa_shape *shape;
    const ext_options *e;
    int block_m, block_n;
    const float *q, *k, *v;
    float *o, *lse, *partials;
    const int64_t *cu_seqlens, *cu_q_tiles;   // varlen (host or device)
    int64_t n_q_tiles;                        // varlen: cu_q_tiles[B]
    float *lse_residual;                      // --backward: the forward's, for the backward
    backward_tensors *bwd;                    // --backward: the backward's tensors (common/fa_contract.h)
    int64_t tiles_visited;   // CPU tile kernels: (Q tile, K tile) pairs processed
    row_tensors tensors;     // the forward rows' tensors (row_tensors_of)
} row_args;

// The packed [total, H, D] layout of a varlen run, as strides (stride b unused: sequences start at cu_seqlens).
static fa_strides packed_strides(const fa_shape *s) { return (fa_strides){0, s->D, s->H * s->D, 1}; }

// The tensors of a forward row, with their strides (common/fa_contract.h): Q and O with q_strides, K and V
// with k_strides; lse_residual NULL where the row does not keep it.
static forward_tensors forward_args(const row_args *a, fa_strides q_strides, fa_strides k_strides,
                                    float *lse_residual) {
    return (forward_tensors){.q = a->q, .k = a->k, .v = a->v, .q_strides = q_strides, .k_strides = k_strides,
                             .v_strides = k_strides, .o = a->o, .o_strides = q_strides, .lse = a->lse,
                             .lse_residual = lse_residual};
}

static row_tensors row_tensors_of(const row_args *a) {
    const fa_shape *s = a->shape;
    const fa_strides qs = fa_strides_contiguous(s->H, s->Sq, s->D), ks = fa_strides_contiguous(a->e->H_kv, s->Sk, s->D);
    return (row_tensors){forward_args(a, qs, ks, NULL), forward_args(a, qs, ks, a->lse_residual),
                         forward_args(a, packed_strides(s), packed_strides(s), NULL)};
}

// What runs each row, on each device: the kernel's entry point with the row's tensors and the feature's parameters.
// A backward row runs phase 4's plan: Delta, then dK and dV, then dQ (deterministic; no atomic variant here).
static void phase3_cpu(row_args *a) {
    flash_forward_lse_cpu(a->shape, a->block_m, a->block_n, &a->tensors.plain, &a->tiles_visited);
}
static void gqa_cpu(row_args *a) {
    flash_forward_gqa_cpu(a->shape, a->e->H_kv, a->block_m, a->block_n, &a->tensors.with_residual,
                          &a->tiles_visited);
}
static void gqa_backward_cpu(row_args *a) {
    backward_preprocess_cpu(a->shape, a->bwd, 0);
    backward_dkdv_gqa_cpu(a->shape, a->e->H_kv, a->block_m, a->block_n, a->bwd, 0);
    backward_dq_gqa_cpu(a->shape, a->e->H_kv, a->block_m, a->block_n, a->bwd);
}
static void window_cpu(row_args *a) {
    flash_forward_window_cpu(a->shape, a->e->window_left, a->e->window_right, a->block_m, a->block_n,
                             &a->tensors.with_residual, &a->tiles_visited);
}
static void window_backward_cpu(row_args *a) {
    backward_preprocess_cpu(a->shape, a->bwd, 0);
    backward_dkdv_window_cpu(a->shape, a->e->window_left, a->e->window_right, a->block_m, a->block_n, a->bwd, 0);
    backward_dq_window_cpu(a->shape, a->e->window_left, a->e->window_right, a->block_m, a->block_n, a->bwd);
}
static void softcap_cpu(row_args *a) {
    flash_forward_softcap_cpu(a->shape, a->e->softcap, a->block_m, a->block_n, &a->tensors.with_residual,
                              &a->tiles_visited);
}
static void softcap_backward_cpu(row_args *a) {
    backward_preprocess_cpu(a->shape, a->bwd, 0);
    backward_dkdv_softcap_cpu(a->shape, a->e->softcap, a->block_m, a->block_n, a->bwd, 0);
    backward_dq_softcap_cpu(a->shape, a->e->softcap, a->block_m, a->block_n, a->bwd);
}
static void dropout_cpu(row_args *a) {
    flash_forward_dropout_cpu(a->shape, a->e->dropout_p, a->e->dropout_seed, a->block_m, a->block_n,
                              &a->tensors.with_residual, &a->tiles_visited);
}
static void dropout_backward_cpu(row_args *a) {
    backward_preprocess_cpu(a->shape, a->bwd, 0);
    backward_dkdv_dropout_cpu(a->shape, a->e->dropout_p, a->e->dropout_seed, a->block_m, a->block_n, a->bwd, 0);
    backward_dq_dropout_cpu(a->shape, a->e->dropout_p, a->e->dropout_seed, a->block_m, a->block_n, a->bwd);
}
static void align_cpu(row_args *a) {
    flash_forward_align_cpu(a->shape, a->e->bottom_right, a->block_m, a->block_n, &a->tensors.plain,
                            &a->tiles_visited);
}
static void varlen_cpu(row_args *a) {
    flash_forward_varlen_cpu(a->shape, a->cu_seqlens, a->cu_q_tiles, a->block_m, a->block_n,
                             &a->tensors.packed, &a->tiles_visited);
}
static void splitkv_cpu(row_args *a) {
    flash_decode_splitkv_cpu(a->shape, a->e->bottom_right, a->q, a->k, a->v, a->o, a->lse, a->partials);
}

#if FA_HAVE_CUDA
static void phase3_cuda(row_args *a) {
    flash_forward_lse_cuda(a->shape, a->block_m, a->block_n, &a->tensors.plain);
}
static void gqa_cuda(row_args *a) {
    flash_forward_gqa_cuda(a->shape, a->e->H_kv, a->block_m, a->block_n, &a->tensors.with_residual);
}
static void gqa_backward_cuda(row_args *a) {
    backward_preprocess_cuda(a->shape, a->bwd, 0);
    backward_dkdv_gqa_cuda(a->shape, a->e->H_kv, a->block_m, a->block_n, a->bwd, 0);
    backward_dq_gqa_cuda(a->shape, a->e->H_kv, a->block_m, a->block_n, a->bwd);
}
static void window_cuda(row_args *a) {
    flash_forward_window_cuda(a->shape, a->e->window_left, a->e->window_right, a->block_m, a->block_n,
                              &a->tensors.with_residual);
}
static void window_backward_cuda(row_args *a) {
    backward_preprocess_cuda(a->shape, a->bwd, 0);
    backward_dkdv_window_cuda(a->shape, a->e->window_left, a->e->window_right, a->block_m, a->block_n, a->bwd, 0);
    backward_dq_window_cuda(a->shape, a->e->window_left, a->e->window_right, a->block_m, a->block_n, a->bwd);
}
static void softcap_cuda(row_args *a) {
    flash_forward_softcap_cuda(a->shape, a->e->softcap, a->block_m, a->block_n, &a->tensors.with_residual);
}
static void softcap_backward_cuda(row_args *a) {
    backward_preprocess_cuda(a->shape, a->bwd, 0);
    backward_dkdv_softcap_cuda(a->shape, a->e->softcap, a->block_m, a->block_n, a->bwd, 0);
    backward_dq_softcap_cuda(a->shape, a->e->softcap, a->block_m, a->block_n, a->bwd);
}
static void dropout_cuda(row_args *a) {
    flash_forward_dropout_cuda(a->shape, a->e->dropout_p, a->e->dropout_seed, a->block_m, a->block_n,
                               &a->tensors.with_residual);
}
static void dropout_backward_cuda(row_args *a) {
    backward_preprocess_cuda(a->shape, a->bwd, 0);
    backward_dkdv_dropout_cuda(a->shape, a->e->dropout_p, a->e->dropout_seed, a->block_m, a->block_n, a->bwd, 0);
    backward_dq_dropout_cuda(a->shape, a->e->dropout_p, a->e->dropout_seed, a->block_m, a->block_n, a->bwd);
}
static void align_cuda(row_args *a) {
    flash_forward_align_cuda(a->shape, a->e->bottom_right, a->block_m, a->block_n, &a->tensors.plain);
}
static void varlen_cuda(row_args *a) {
    flash_forward_varlen_cuda(a->shape, a->cu_seqlens, a->cu_q_tiles, a->n_q_tiles, a->block_m, a->block_n,
                              &a->tensors.packed);
}
static void splitkv_cuda(row_args *a) {
    flash_decode_splitkv_cuda(a->shape, a->e->bottom_right, a->q, a->k, a->v, a->o, a->lse, a->partials);
}
#define GPU_ROW(fn) fn
#else
#define GPU_ROW(fn) NULL   // a build without CUDA has no GPU rows
#endif

typedef struct {
    const char *label;
    int backward;                  // a backward row: the same feature's forward runs before it and makes O and LSE
    void (*cpu)(row_args *a), (*cuda)(row_args *a);
} row_kind;

static const row_kind ROWS[N_ROW_KINDS] = {
    [ROW_PHASE3] = {"phase 3 step 3", 0, phase3_cpu, GPU_ROW(phase3_cuda)},
    [ROW_GQA] = {"gqa", 0, gqa_cpu, GPU_ROW(gqa_cuda)},
    [ROW_WINDOW] = {"window", 0, window_cpu, GPU_ROW(window_cuda)},
    [ROW_SOFTCAP] = {"softcap", 0, softcap_cpu, GPU_ROW(softcap_cuda)},
    [ROW_ALIGN] = {"align", 0, align_cpu, GPU_ROW(align_cuda)},
    [ROW_SPLITKV] = {"split-kv", 0, splitkv_cpu, GPU_ROW(splitkv_cuda)},
    [ROW_VARLEN] = {"varlen", 0, varlen_cpu, GPU_ROW(varlen_cuda)},
    [ROW_SOFTCAP_BACKWARD] = {"softcap backward", 1, softcap_backward_cpu, GPU_ROW(softcap_backward_cuda)},
    [ROW_GQA_BACKWARD] = {"gqa backward", 1, gqa_backward_cpu, GPU_ROW(gqa_backward_cuda)},
    [ROW_WINDOW_BACKWARD] = {"window backward", 1, window_backward_cpu, GPU_ROW(window_backward_cuda)},
    [ROW_DROPOUT] = {"dropout", 0, dropout_cpu, GPU_ROW(dropout_cuda)},
    [ROW_DROPOUT_BACKWARD] = {"dropout backward", 1, dropout_backward_cpu, GPU_ROW(dropout_backward_cuda)},
};

// The harness calls impl.run(ctx): the row's args know their row, and the row's device picks the function.
static void run_on_cpu(void *p) { row_args *a = p; ROWS[a->kind].cpu(a); }
static void run_on_gpu(void *p) { row_args *a = p; ROWS[a->kind].cuda(a); }

// Which kernels this run asks for.
static void choose_rows(const fa_options *opt, const ext_flags *f, int run[N_ROW_KINDS]) {
    const fa_shape *s = &opt->shape;
    const ext_options *e = &f->e;
    if (f->n_seqs) {   // a varlen run is the varlen kernel alone (its layout is its own)
        for (int kind = 0; kind < N_ROW_KINDS; kind++) run[kind] = kind == ROW_VARLEN;
        return;
    }
    if (f->backward) {   // the forward (which also makes O and LSE for the backward), then the backward
        for (int kind = 0; kind < N_ROW_KINDS; kind++) run[kind] = 0;
        if (f->has_softcap) run[ROW_SOFTCAP] = run[ROW_SOFTCAP_BACKWARD] = 1;
        if (f->has_H_kv) run[ROW_GQA] = run[ROW_GQA_BACKWARD] = 1;
        if (f->has_window) run[ROW_WINDOW] = run[ROW_WINDOW_BACKWARD] = 1;
        if (f->has_dropout) run[ROW_DROPOUT] = run[ROW_DROPOUT_BACKWARD] = 1;
        return;
    }
    const int no_flag = !f->has_H_kv && !f->has_window && !f->has_softcap && !f->has_align && !f->has_dropout;
    const int dropout_on = e->dropout_p > 0.0f;
    const int gqa_on = e->H_kv != s->H, window_on = e->window_left >= 0 || (!s->causal && e->window_right >= 0);
    // The diagonal moves only when the alignment is bottom-right, the attention causal and Sq != Sk.
    const int shifted = e->bottom_right && s->causal && s->Sq != s->Sk;
    // Phase 3 step 3 computes the problem when no feature changes it.
    run[ROW_PHASE3] = !gqa_on && !window_on && !f->has_softcap && !shifted && !dropout_on;
    run[ROW_GQA] = no_flag || f->has_H_kv;
    run[ROW_WINDOW] = no_flag || f->has_window;
    run[ROW_SOFTCAP] = f->has_softcap;
    run[ROW_ALIGN] = no_flag || f->has_align;
    run[ROW_DROPOUT] = no_flag || f->has_dropout;
    // Split-KV: a decode-sized Sq, and a problem it computes (its causal mask is aligned bottom-right).
    run[ROW_VARLEN] = run[ROW_SOFTCAP_BACKWARD] = run[ROW_GQA_BACKWARD] = run[ROW_WINDOW_BACKWARD] = 0;
    run[ROW_DROPOUT_BACKWARD] = 0;
    run[ROW_SPLITKV] = s->Sq <= SPLITKV_MAX_SQ && !gqa_on && !window_on && !f->has_softcap && !dropout_on &&
                       (!s->causal || e->bottom_right || s->Sq == s->Sk);
}

// Inputs from --seed, as fa_make_inputs makes them (the same streams), or from --load-dir: Q [B, H, Sq, D], K and V
// [B, H_kv, Sk, D] (varlen: n_q = n_kv = total * H * D, from --seed only). With --save-dir they are written as
// q, k, v (and do) .npy files, and command.txt holds the whole command line, the feature's flags included.
static void make_inputs(const fa_options *opt, int64_t H_kv, int64_t n_q, int64_t n_kv, int with_dout,
                        fa_inputs *in) {
    const fa_shape *s = &opt->shape;
    const int64_t dims_q[4] = {s->B, s->H, s->Sq, s->D}, dims_kv[4] = {s->B, H_kv, s->Sk, s->D};
    memset(in, 0, sizeof *in);
    if (opt->load_dir) {
        in->q = fa_load_tensor(opt, "q", dims_q);
        in->k = fa_load_tensor(opt, "k", dims_kv);
        in->v = fa_load_tensor(opt, "v", dims_kv);
        if (with_dout) in->dout = fa_load_tensor(opt, "do", dims_q);
    } else {
        if (with_dout) {
            in->dout = fa_alloc_floats(n_q, "dO");
            fa_fill_random(in->dout, n_q, opt->seed, FA_STREAM_DO, 1.0f);
        }
        in->q = fa_alloc_floats(n_q, "Q");
        in->k = fa_alloc_floats(n_kv, "K");
        in->v = fa_alloc_floats(n_kv, "V");
        fa_fill_random(in->q, n_q, opt->seed, FA_STREAM_Q, 1.0f);
        fa_fill_random(in->k, n_kv, opt->seed, FA_STREAM_K, 1.0f);
        fa_fill_random(in->v, n_kv, opt->seed, FA_STREAM_V, 1.0f);
    }
    if (opt->save_dir) {
        fa_save_command(opt);
        fa_save_tensor(opt, "q", in->q, dims_q);
        fa_save_tensor(opt, "k", in->k, dims_kv);
        fa_save_tensor(opt, "v", in->v, dims_kv);
        if (in->dout) fa_save_tensor(opt, "do", in->dout, dims_q);
    }
}

// The phase-6 oracle on the heads --check-heads (or the time budget) selects, and the scales and tolerance of the
// checks, as fa_make_reference gives them in phases 1-5.
// *kv_heads_out: the K/V heads the oracle computed (dK and dV are checked on those).
static void make_reference(const fa_options *opt, const ext_options *e, const fa_inputs *in, int backward,
                           fa_reference *ref, unsigned char **kv_heads_out) {
    const fa_shape *s = &opt->shape;
    const int64_t BH = s->B * s->H, group = s->H / e->H_kv;
    memset(ref, 0, sizeof *ref);
    ref->heads = malloc((size_t)BH);
    unsigned char *kv_heads = calloc((size_t)(s->B * e->H_kv), 1);
    if (!ref->heads || !kv_heads) fa_die("out of host memory: the oracle's head masks");
    const double per_head = 4.0 * (double)s->Sq * (double)s->Sk * (double)s->D * (backward ? 6.0 : 2.0);
    fa_choose_heads(ref->heads, BH, fa_heads_to_check(opt, per_head));
    for (int64_t bh = 0; bh < BH; bh++)
        if (ref->heads[bh]) kv_heads[bh / s->H * e->H_kv + bh % s->H / group] = 1;
    // A GQA group is checked whole or not at all (the backward's dK and dV of a K/V head sum over its group).
    ref->heads_checked = 0;
    for (int64_t bh = 0; bh < BH; bh++) {
        ref->heads[bh] = kv_heads[bh / s->H * e->H_kv + bh % s->H / group];
        ref->heads_checked += ref->heads[bh];
    }
    ref->tol_forward = FA_TOL_FORWARD;   // each row adds its logit part (fa_oracle.h)
    ref->tol_backward = FA_TOL_BACKWARD;

    fa_set_threads(opt->threads);
    fa_shape kv_shape = *s;
    kv_shape.H = e->H_kv;
    double *q = fa_oracle_heads_to_double(in->q, s, ref->heads, s->Sq * s->D, "oracle Q");
    double *k = fa_oracle_heads_to_double(in->k, &kv_shape, kv_heads, s->Sk * s->D, "oracle K");
    double *v = fa_oracle_heads_to_double(in->v, &kv_shape, kv_heads, s->Sk * s->D, "oracle V");
    ref->o = fa_oracle_alloc_heads(s, ref->heads, s->Sq * s->D, "oracle O");
    ref->lse = fa_oracle_alloc_heads(s, ref->heads, s->Sq, "oracle LSE");
    ext_oracle_forward(s, e, q, k, v, ref->heads, ref->o, ref->lse, &ref->scale);
    if (backward) {
        double *dout = fa_oracle_heads_to_double(in->dout, s, ref->heads, s->Sq * s->D, "oracle dO");
        ref->dq = fa_oracle_alloc_heads(s, ref->heads, s->Sq * s->D, "oracle dQ");
        ref->dk = fa_oracle_alloc_heads(&kv_shape, kv_heads, s->Sk * s->D, "oracle dK");
        ref->dv = fa_oracle_alloc_heads(&kv_shape, kv_heads, s->Sk * s->D, "oracle dV");
        ext_oracle_backward(s, e, q, k, v, dout, ref->o, ref->lse, ref->heads, ref->dq, ref->dk, ref->dv,
                            &ref->scale);
        free(dout);
    }
    free(q);
    free(k);
    free(v);
    int64_t dims_q[4], dims_lse[4], dims_kv[4];   // refuses inputs no float32 check can judge, before any output
    fa_dims_q(s, dims_q);
    fa_dims_lse(s, dims_lse);
    fa_dims_kv(&kv_shape, dims_kv);
    fa_refuse_unjudgeable_rows("O", &ref->scale.o, dims_q, ref->heads);
    fa_refuse_unjudgeable_rows("LSE", &ref->scale.lse, dims_lse, ref->heads);
    if (backward) {
        fa_refuse_unjudgeable_rows("dQ", &ref->scale.dq, dims_q, ref->heads);
        fa_refuse_unjudgeable_rows("dK", &ref->scale.dk, dims_kv, kv_heads);
        fa_refuse_unjudgeable_rows("dV", &ref->scale.dv, dims_kv, kv_heads);
    }
    fprintf(stderr, "oracle: float64 reference for %d of %lld heads, done\n", ref->heads_checked, (long long)BH);
    *kv_heads_out = kv_heads;
}

// The varlen oracle: every head of the query tokens --check-heads (which counts tokens here) or the time budget
// selects; O and LSE are checked as (1, total, H, D) and (1, total, H, 1), so the oracle's sample is a sample of
// tokens (the check's "heads"), and every head of a sampled token is compared.
static void make_reference_varlen(const fa_options *opt, const ext_flags *f, const fa_inputs *in, fa_reference *ref,
                                  fa_report *report) {
    const fa_shape *s = &opt->shape;   // B sequences, Sq = Sk = total tokens
    const int64_t total = s->Sq, n = total * s->H * s->D;
    memset(ref, 0, sizeof *ref);
    ref->heads = malloc((size_t)total);
    if (!ref->heads) fa_die("out of host memory: the oracle's token mask");
    const double per_token = 4.0 * (double)total / (double)f->n_seqs * (double)s->H * (double)s->D * 2.0;
    const int64_t count = fa_heads_to_check(opt, per_token);
    fa_choose_heads(ref->heads, total, count);
    ref->heads_checked = (int)(s->B * s->H);
    fa_report_add_note(report, "varlen: the oracle checks %lld of %lld query tokens, every head of each",
                       (long long)(count < total ? count : total), (long long)total);
    ref->tol_forward = FA_TOL_FORWARD;   // each row adds its logit part (fa_oracle.h)

    fa_set_threads(opt->threads);
    fa_shape token_shape = *s;   // the oracle's arrays as [total "heads", H * D] and [total, H]
    token_shape.B = 1;
    token_shape.H = total;
    double *q = fa_to_double(in->q, n, "oracle Q"), *k = fa_to_double(in->k, n, "oracle K");
    double *v = fa_to_double(in->v, n, "oracle V");
    ref->o = fa_oracle_alloc_heads(&token_shape, ref->heads, s->H * s->D, "oracle O");
    ref->lse = fa_oracle_alloc_heads(&token_shape, ref->heads, s->H, "oracle LSE");
    ext_oracle_varlen(s, f->cu_seqlens, q, k, v, ref->heads, ref->o, ref->lse, &ref->scale);
    const int64_t dims_o[4] = {1, total, s->H, s->D}, dims_lse[4] = {1, total, s->H, 1};
    fa_refuse_unjudgeable_rows("O", &ref->scale.o, dims_o, ref->heads);
    fa_refuse_unjudgeable_rows("LSE", &ref->scale.lse, dims_lse, ref->heads);
    fprintf(stderr, "oracle: float64 reference for %lld of %lld query tokens, done\n",
            (long long)(count < total ? count : total), (long long)total);
    free(q);
    free(k);
    free(v);
}

// Where the rows of one device read and write.
typedef struct {
    int is_cuda;
    const float *q, *k, *v;
    float *o, *lse, *partials;     // host or device
    float *o_host, *lse_host;      // where fa_check_and_time brings the results
    double upload_ms;
    const int64_t *cu_seqlens, *cu_q_tiles;   // varlen, on this device
    float *lse_residual;                      // --backward: written by the forward, read by the backward
    backward_tensors *bwd;                    // --backward: on this device
    float *dq_host, *dk_host, *dv_host;       // --backward: where the gradients come back to
} device_buffers;

// What a run computes beyond opt->shape: the features, its FLOPs, and for varlen the tile count.
typedef struct {
    const ext_options *e;
    double flops;          // 4 * D * the (query, key) pairs the mask lets through, for every row alike
    int64_t n_q_tiles;     // varlen: the real Q tiles of the batch
    const unsigned char *kv_heads;   // the K/V heads the oracle computed (B * H_kv bytes; dK and dV are checked there)
} problem;

static void run_row(fa_report *report, const fa_options *opt, const problem *p, const fa_reference *ref,
                    const device_buffers *dev, int kind) {
    const fa_shape *s = &opt->shape;
    row_args args = {.kind = kind, .shape = s, .e = p->e, .block_m = opt->block_m, .block_n = opt->block_n,
                     .q = dev->q, .k = dev->k, .v = dev->v, .o = dev->o, .lse = dev->lse,
                     .partials = dev->partials, .cu_seqlens = dev->cu_seqlens, .cu_q_tiles = dev->cu_q_tiles,
                     .n_q_tiles = p->n_q_tiles, .lse_residual = dev->lse_residual, .bwd = dev->bwd};
    args.tensors = row_tensors_of(&args);
    fa_implementation impl = {.label = ROWS[kind].label, .is_cuda = dev->is_cuda, .ctx = &args, .flops = p->flops,
                              .causal = s->causal, .upload_ms = dev->upload_ms,
                              .run = dev->is_cuda ? run_on_gpu : run_on_cpu};
    if (kind == ROW_SPLITKV) {
        impl.extra_bytes = splitkv_partial_floats(s) * (int64_t)sizeof(float);
        impl.extra_what = "partial O, m, l, key";
    } else if (ROWS[kind].backward) {
        const int64_t dkdv_bytes = backward_dkdv_cpu_workspace_bytes(s->D, opt->block_m, opt->block_n);
        const int64_t dq_bytes = backward_dq_cpu_workspace_bytes(s->D, opt->block_m, opt->block_n);
        impl.flops = 2.5 * p->flops;   // the suite's convention: the backward is 2.5 forwards
        impl.backward = 1;
        impl.block_m = opt->block_m;
        impl.block_n = opt->block_n;
        impl.extra_bytes = fa_numel_lse(s) * (int64_t)sizeof(float);
        impl.extra_bytes_per_thread = dev->is_cuda ? 0 : dkdv_bytes > dq_bytes ? dkdv_bytes : dq_bytes;
        impl.extra_what = dev->is_cuda ? "Delta" : "Delta, per-thread tiles";
    } else {
        impl.block_m = opt->block_m;
        impl.block_n = opt->block_n;
        impl.extra_bytes_per_thread =
            dev->is_cuda ? 0 : flash_forward_4d_cpu_workspace_bytes(s->D, opt->block_m, opt->block_n);
        impl.extra_what = dev->is_cuda ? "tiles in shared memory" : "per-thread tiles";
    }
    if (ROWS[kind].backward) {
        const backward_tensors *t = dev->bwd;
        const double tol[3] = {ref->tol_backward, ref->tol_backward, ref->tol_backward};
        const fa_grads host = {dev->dq_host, dev->dk_host, dev->dv_host};
        const fa_grads device = {dev->is_cuda ? t->dq : NULL, dev->is_cuda ? t->dk : NULL, dev->is_cuda ? t->dv : NULL};
        fa_backward_outputs(&impl, s, ref, tol, host, device);
        // dK and dV have the K/V heads (GQA), and are checked on the K/V heads the oracle computed.
        for (int x = 1; x <= 2; x++) {
            impl.outputs[x].dims[1] = p->e->H_kv;
            impl.outputs[x].heads = p->kv_heads;
        }
    } else if (kind == ROW_VARLEN) {   // packed O [total, H, D] and LSE [total, H] (make_reference_varlen)
        impl.n_outputs = 2;
        impl.outputs[0] = (fa_output){"O", dev->o_host, dev->is_cuda ? dev->o : NULL, {1, s->Sq, s->H, s->D},
                                      ref->o, ref->tol_forward, ref->scale.o, NULL, 0.0, NULL, NULL};
        impl.outputs[1] = (fa_output){"LSE", dev->lse_host, dev->is_cuda ? dev->lse : NULL, {1, s->Sq, s->H, 1},
                                      ref->lse, ref->tol_forward, ref->scale.lse, NULL, 0.0, NULL, NULL};
    } else {
        fa_forward_outputs(&impl, s, ref, dev->o_host, dev->is_cuda ? dev->o : NULL, dev->lse_host,
                           dev->is_cuda ? dev->lse : NULL);
    }
    fa_check_and_time(report, opt, ref, &impl);

    // What the window's pruning saved, counted by the CPU kernel itself.
    if (!dev->is_cuda && kind == ROW_VARLEN)
        fa_report_add_note(report, "varlen: the grid is the batch's %lld real Q tiles per head; the kernel processed "
                           "%lld (Q tile, K tile) pairs", (long long)p->n_q_tiles, (long long)args.tiles_visited);
    if (!dev->is_cuda && kind == ROW_WINDOW) {
        const int64_t q_tiles = (s->Sq + opt->block_m - 1) / opt->block_m;
        const int64_t k_tiles = (s->Sk + opt->block_n - 1) / opt->block_n;
        const int64_t all = s->B * s->H * q_tiles * k_tiles;
        fa_report_add_note(report, "window pruning: the window kernel processed %lld of %lld (Q tile, K tile) pairs "
                           "(%.1f%%)", (long long)args.tiles_visited, (long long)all,
                           100.0 * (double)args.tiles_visited / (double)all);
    }
}

#if FA_HAVE_CUDA
// Split-KV is judged by the bandwidth it reads K and V at (decoding reads each once): a note beside the table.
static void note_splitkv_bandwidth(fa_report *report, const fa_options *opt, const ext_options *e) {
    const fa_shape *s = &opt->shape;
    const double kv_bytes = 2.0 * (double)(s->B * e->H_kv * s->Sk * s->D) * sizeof(float);
    double split_ms = 0.0, phase3_ms = 0.0;
    for (int r = 0; r < report->n_rows; r++) {
        const fa_timing_row *row = &report->rows[r];
        if (strcmp(row->impl, "cuda") != 0) continue;
        if (strcmp(row->label, ROWS[ROW_SPLITKV].label) == 0) split_ms = row->median_ms;
        if (strcmp(row->label, ROWS[ROW_PHASE3].label) == 0) phase3_ms = row->median_ms;
    }
    if (split_ms <= 0.0) return;
    fa_report_add_note(report, "split-KV cuda: K and V (%.2f GB) read at %.0f GB/s; %lld splits of %d keys per head",
                       kv_bytes / 1e9, kv_bytes / (split_ms * 1e-3) / 1e9, (long long)splitkv_num_splits(s->Sk),
                       SPLITKV_KEYS_PER_SPLIT);
    if (phase3_ms > 0.0)
        fa_report_add_note(report, "split-KV cuda: %.1fx the speed of phase 3 step 3 on the same problem",
                           phase3_ms / split_ms);
}
#endif

static void run_device(fa_report *report, const fa_options *opt, const problem *p, const fa_reference *ref,
                       const device_buffers *dev, const int run[N_ROW_KINDS]) {
    for (int kind = 0; kind < N_ROW_KINDS; kind++)
        if (run[kind]) run_row(report, opt, p, ref, dev, kind);
}

// --backward: the backward's tensors on one device (common/fa_contract.h), all contiguous [B, H, S, D].
static backward_tensors make_backward_tensors(const fa_shape *s, int64_t H_kv, const float *q, const float *k,
                                              const float *v, const float *o, const float *lse,
                                              const float *lse_residual, const float *dout, float *delta, float *dq,
                                              float *dk, float *dv) {
    const fa_strides sq = fa_strides_contiguous(s->H, s->Sq, s->D), skv = fa_strides_contiguous(H_kv, s->Sk, s->D);
    return (backward_tensors){.q = q, .k = k, .v = v, .o = o, .lse = lse, .dout = dout, .q_strides = sq,
                              .k_strides = skv, .v_strides = skv, .o_strides = sq, .do_strides = sq, .delta = delta,
                              .dq = dq, .dk = dk, .dv = dv, .dq_strides = sq, .dk_strides = skv, .dv_strides = skv,
                              .lse_residual = lse_residual};
}

// Varlen: the packed batch as a shape (B sequences, Sq = Sk = total tokens), its real Q tiles, and its FLOPs: the
// pairs each sequence's own mask lets through.
static void setup_varlen(fa_options *opt, const ext_flags *f, problem *p, int64_t **cu_q_tiles, fa_report *report) {
    fa_shape *s = &opt->shape;
    s->B = f->n_seqs;
    s->Sq = s->Sk = f->cu_seqlens[f->n_seqs];
    *cu_q_tiles = malloc((size_t)(f->n_seqs + 1) * sizeof(int64_t));
    if (!*cu_q_tiles) fa_die("out of host memory: the varlen tile table");
    varlen_q_tiles(f->n_seqs, f->cu_seqlens, opt->block_m, *cu_q_tiles);
    p->n_q_tiles = (*cu_q_tiles)[f->n_seqs];
    double pairs = 0.0;
    int64_t longest = 0;
    for (int64_t b = 0; b < f->n_seqs; b++) {
        const double L = (double)(f->cu_seqlens[b + 1] - f->cu_seqlens[b]);
        pairs += s->causal ? L * (L + 1.0) / 2.0 : L * L;
        if (L > longest) longest = (int64_t)L;
    }
    p->flops = 4.0 * (double)s->D * (double)s->H * pairs;
    fa_report_add_note(report, "varlen: %lld sequences, %lld tokens packed as [total, H, D]; padded, the batch would "
                       "be B=%lld S=%lld (phase3_forward_4d --step 3)", (long long)f->n_seqs, (long long)s->Sq,
                       (long long)f->n_seqs, (long long)longest);
}

int main(int argc, char **argv) {
    ext_flags flags = {.e = {.window_left = -1, .window_right = -1}};
    // The whole command line, the feature's flags included, for --save-dir's command.txt.
    const int all_argc = argc;
    char **all_argv = malloc(((size_t)argc + 1) * sizeof *all_argv);
    if (!all_argv) fa_die("out of host memory: the command line");
    memcpy(all_argv, argv, ((size_t)argc + 1) * sizeof *all_argv);
    argc = take_ext_flags(argc, argv, &flags);
    fa_options opt;
    fa_parse_options(argc, argv, &SPEC, &opt);
    opt.argc = all_argc;
    opt.argv = all_argv;
    check_ext_flags(&opt, &flags);
    const ext_options *e = &flags.e;
    if ((opt.impl & FA_IMPL_CUDA) && !flash4d_cuda_supports_tiles(opt.block_m, opt.block_n))
        fa_die("the CUDA kernels are compiled for --block-m x --block-n = %s (got %d x %d); "
               "use --impl cpu for other tile sizes", FLASH4D_CUDA_TILES_TEXT, opt.block_m, opt.block_n);
    int run[N_ROW_KINDS];
    choose_rows(&opt, &flags, run);

    problem prob = {.e = e};
    int64_t *cu_q_tiles = NULL;
    fa_report report;
    fa_report_init(&report, SPEC.program, &opt);
    if (flags.n_seqs) {
        setup_varlen(&opt, &flags, &prob, &cu_q_tiles, &report);
        report.shape = opt.shape;
    } else {
        prob.flops = 4.0 * (double)opt.shape.D * ext_visible_pairs(&opt.shape, e);
        fa_report_add_note(&report, "features: H_kv %lld, window (%lld, %lld), softcap %g, causal alignment %s, "
                           "dropout %g (seed %llu)", (long long)e->H_kv, (long long)e->window_left,
                           (long long)e->window_right, (double)e->softcap,
                           e->bottom_right ? "bottom-right" : "top-left", (double)e->dropout_p,
                           (unsigned long long)e->dropout_seed);
    }
    const int use_gpu = fa_use_gpu(&opt, &report);

    // Element counts: Q and O, K and V, LSE (varlen: all packed, total * H rows).
    const fa_shape *s = &opt.shape;
    const int64_t n_q = flags.n_seqs ? s->Sq * s->H * s->D : fa_numel_q(s);
    const int64_t n_kv = flags.n_seqs ? n_q : s->B * e->H_kv * s->Sk * s->D;
    const int64_t n_lse = flags.n_seqs ? s->Sq * s->H : fa_numel_lse(s);
    const int64_t n_partials = run[ROW_SPLITKV] ? splitkv_partial_floats(s) : 0;
    fa_inputs in;
    make_inputs(&opt, e->H_kv, n_q, n_kv, flags.backward, &in);
    fa_reference ref;
    if (flags.n_seqs) make_reference_varlen(&opt, &flags, &in, &ref, &report);
    unsigned char *kv_heads = NULL;
    if (!flags.n_seqs) make_reference(&opt, e, &in, flags.backward, &ref, &kv_heads);
    prob.kv_heads = kv_heads;

    float *o = fa_alloc_floats(n_q, "O");
    float *lse = fa_alloc_floats(n_lse, "LSE");
    // --backward: the LSE residual the forward writes, Delta, and the gradients (the GPU's come back here too).
    float *lse_residual = NULL, *delta = NULL, *dq = NULL, *dk = NULL, *dv = NULL;
    if (flags.backward) {
        lse_residual = fa_alloc_floats(n_lse, "LSE residual");
        delta = fa_alloc_floats(n_lse, "Delta");
        dq = fa_alloc_floats(n_q, "dQ");
        dk = fa_alloc_floats(n_kv, "dK");
        dv = fa_alloc_floats(n_kv, "dV");
    }
    if (opt.impl & FA_IMPL_CPU) {
        float *partials = n_partials ? fa_alloc_floats(n_partials, "split-KV partials") : NULL;
        backward_tensors bwd = make_backward_tensors(s, e->H_kv, in.q, in.k, in.v, o, lse, lse_residual, in.dout,
                                                     delta, dq, dk, dv);
        const device_buffers cpu = {0, in.q, in.k, in.v, o, lse, partials, o, lse, 0.0, flags.cu_seqlens,
                                    cu_q_tiles, lse_residual, &bwd, dq, dk, dv};
        run_device(&report, &opt, &prob, &ref, &cpu, run);
        free(partials);
    }
#if FA_HAVE_CUDA
    if (use_gpu) {
        float *q_dev = fa_gpu_alloc(n_q, "Q"), *k_dev = fa_gpu_alloc(n_kv, "K"), *v_dev = fa_gpu_alloc(n_kv, "V");
        float *o_dev = fa_gpu_alloc(n_q, "O"), *lse_dev = fa_gpu_alloc(n_lse, "LSE");
        float *partials_dev = n_partials ? fa_gpu_alloc(n_partials, "split-KV partials") : NULL;
        // The varlen tables are int64; fa_gpu_alloc and fa_gpu_upload count floats and copy bytes: 2 floats each.
        const int64_t table_floats = flags.n_seqs ? 2 * (flags.n_seqs + 1) : 0;
        float *cu_seqlens_dev = table_floats ? fa_gpu_alloc(table_floats, "cu_seqlens") : NULL;
        float *cu_q_tiles_dev = table_floats ? fa_gpu_alloc(table_floats, "the varlen tile table") : NULL;
        const double start = fa_now_ms();
        fa_gpu_upload(q_dev, in.q, n_q);
        fa_gpu_upload(k_dev, in.k, n_kv);
        fa_gpu_upload(v_dev, in.v, n_kv);
        if (table_floats) {
            fa_gpu_upload(cu_seqlens_dev, (const float *)flags.cu_seqlens, table_floats);
            fa_gpu_upload(cu_q_tiles_dev, (const float *)cu_q_tiles, table_floats);
        }
        // --backward: dO, and what the forward writes for the backward and the backward writes, on the GPU.
        float *bwd_dev[6] = {NULL};   // dO, LSE residual, Delta, dQ, dK, dV
        if (flags.backward) {
            const int64_t counts[6] = {n_q, n_lse, n_lse, n_q, n_kv, n_kv};
            static const char *const NAMES[6] = {"dO", "LSE residual", "Delta", "dQ", "dK", "dV"};
            for (int x = 0; x < 6; x++) bwd_dev[x] = fa_gpu_alloc(counts[x], NAMES[x]);
            fa_gpu_upload(bwd_dev[0], in.dout, n_q);
        }
        backward_tensors bwd = make_backward_tensors(s, e->H_kv, q_dev, k_dev, v_dev, o_dev, lse_dev, bwd_dev[1],
                                                     bwd_dev[0], bwd_dev[2], bwd_dev[3], bwd_dev[4], bwd_dev[5]);
        const device_buffers gpu = {1, q_dev, k_dev, v_dev, o_dev, lse_dev, partials_dev, o, lse,
                                    fa_now_ms() - start, (const int64_t *)cu_seqlens_dev,
                                    (const int64_t *)cu_q_tiles_dev, bwd_dev[1], &bwd, dq, dk, dv};
        run_device(&report, &opt, &prob, &ref, &gpu, run);
        for (int x = 0; x < 6; x++)
            if (bwd_dev[x]) fa_gpu_free(bwd_dev[x]);
        note_splitkv_bandwidth(&report, &opt, e);
        fa_gpu_free(q_dev);
        fa_gpu_free(k_dev);
        fa_gpu_free(v_dev);
        fa_gpu_free(o_dev);
        fa_gpu_free(lse_dev);
        if (partials_dev) fa_gpu_free(partials_dev);
        if (cu_seqlens_dev) fa_gpu_free(cu_seqlens_dev);
        if (cu_q_tiles_dev) fa_gpu_free(cu_q_tiles_dev);
    }
#else
    (void)use_gpu;
#endif

    const int status = fa_finish(&report, &opt);
    free(o);
    free(lse);
    free(cu_q_tiles);
    free(flags.cu_seqlens);
    free(kv_heads);
    free(lse_residual);
    free(delta);
    free(dq);
    free(dk);
    free(dv);
    fa_free_reference(&ref);
    fa_free_inputs(&in);
    free(all_argv);
    return status;
}
