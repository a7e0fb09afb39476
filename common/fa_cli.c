// fa_cli.c - the shared command line.
#include "fa_cli.h"
#include "fa_half.h"
#include "fa_npy.h"
#include "fa_save.h"
#include "fa_tensor.h"

#include <errno.h>
#include <float.h>
#include <getopt.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    OPT_B = 1000, OPT_H, OPT_SQ, OPT_SK, OPT_S, OPT_D, OPT_CAUSAL, OPT_SCALE, OPT_BLOCK_M, OPT_BLOCK_N, OPT_IMPL,
    OPT_THREADS, OPT_SEED, OPT_WARMUP, OPT_ITERS, OPT_SAVE, OPT_LOAD, OPT_CSV, OPT_CHECK_HEADS, OPT_STEP, OPT_DQ,
    OPT_COMPARE_CAUSAL, OPT_HELP, OPT_DTYPE, OPT_THREADS_ONLY, OPT_NO_BASELINES, OPT_CPU_BF16
};

static const struct option LONG_OPTIONS[] = {
    {"B", required_argument, 0, OPT_B},           {"H", required_argument, 0, OPT_H},
    {"Sq", required_argument, 0, OPT_SQ},         {"Sk", required_argument, 0, OPT_SK},
    {"S", required_argument, 0, OPT_S},           {"D", required_argument, 0, OPT_D},
    {"causal", no_argument, 0, OPT_CAUSAL},       {"scale", required_argument, 0, OPT_SCALE},
    {"block-m", required_argument, 0, OPT_BLOCK_M}, {"block-n", required_argument, 0, OPT_BLOCK_N},
    {"impl", required_argument, 0, OPT_IMPL},     {"threads", required_argument, 0, OPT_THREADS},
    {"seed", required_argument, 0, OPT_SEED},     {"warmup", required_argument, 0, OPT_WARMUP},
    {"iters", required_argument, 0, OPT_ITERS},   {"save-dir", required_argument, 0, OPT_SAVE},
    {"load-dir", required_argument, 0, OPT_LOAD}, {"csv", required_argument, 0, OPT_CSV},
    {"check-heads", required_argument, 0, OPT_CHECK_HEADS},
    {"step", required_argument, 0, OPT_STEP},     {"dq", required_argument, 0, OPT_DQ},
    {"compare-causal", no_argument, 0, OPT_COMPARE_CAUSAL},
    {"help", no_argument, 0, OPT_HELP},           {"dtype", required_argument, 0, OPT_DTYPE},
    {"threads-only", no_argument, 0, OPT_THREADS_ONLY}, {"no-baselines", no_argument, 0, OPT_NO_BASELINES},
    {"cpu-bf16", required_argument, 0, OPT_CPU_BF16},
    {0, 0, 0, 0}};

// --load-dir: the files hold the shape, so a run takes it from them: (B, H, Sq, D) from q.npy and Sk from k.npy. A
// size also given as a flag must agree with the files (0 marks a size not given; a given one is at least 1).
static void take_size(const char *flag, int64_t *given, int64_t from_file, const char *file, const char *dir) {
    if (*given != 0 && *given != from_file)
        fa_die("%s %lld contradicts %s/%s, which holds %lld", flag, (long long)*given, dir, file, (long long)from_file);
    if (from_file < 1 || from_file > FA_MAX_DIM)
        fa_die("%s/%s: its size for %s is %lld; sizes must be between 1 and %lld", dir, file, flag,
               (long long)from_file, (long long)FA_MAX_DIM);
    *given = from_file;
}

static void shape_from_files(const char *dir, int64_t *B, int64_t *H, int64_t *Sq, int64_t *Sk, int64_t *D) {
    char path[4096], err[600];
    fa_npy_header q, k;
    snprintf(path, sizeof path, "%s/q.npy", dir);
    if (fa_npy_read_header(path, &q, err, sizeof err) != 0) fa_die("%s", err);
    snprintf(path, sizeof path, "%s/k.npy", dir);
    if (fa_npy_read_header(path, &k, err, sizeof err) != 0) fa_die("%s", err);
    if (q.ndim != 4 || k.ndim != 4)
        fa_die("--load-dir %s: q.npy and k.npy must be [B, H, S, D] arrays (they have %d and %d dimensions)", dir,
               q.ndim, k.ndim);
    take_size("--B", B, q.shape[0], "q.npy", dir);
    take_size("--H", H, q.shape[1], "q.npy", dir);
    take_size("--Sq", Sq, q.shape[2], "q.npy", dir);
    take_size("--D", D, q.shape[3], "q.npy", dir);
    take_size("--Sk", Sk, k.shape[2], "k.npy", dir);
}

static void print_help(const fa_cli_spec *spec) {
    const fa_shape *d = &spec->defaults;
    printf("usage: %s [options]\n%s\n\n", spec->program, spec->summary);
    printf("Shape (tensors are float32 [B, H, S, D]; Q and O use Sq, K and V use Sk):\n");
    if (spec->two_d) {
        printf("  --S N          N (queries) and Nk (keys) both          (default %lld)\n", (long long)d->Sq);
        printf("  --Sq N         N, the query rows                        \n");
        printf("  --Sk N         Nk, the key/value rows\n");
        printf("  --D N          d, the head dimension                    (default %lld)\n", (long long)d->D);
    } else {
        printf("  --B N          batch size                               (default %lld)\n", (long long)d->B);
        printf("  --H N          heads                                    (default %lld)\n", (long long)d->H);
        printf("  --S N          Sq and Sk both                           (default %lld)\n", (long long)d->Sq);
        printf("  --Sq N         query length\n");
        printf("  --Sk N         key/value length (cross attention when != Sq)\n");
        printf("  --D N          head dimension                           (default %lld)\n", (long long)d->D);
        printf("  --causal       row i sees keys j <= i (top-left aligned)\n");
    }
    printf("  --scale X      softmax scale                            (default 1/sqrt(D))\n");
    if (spec->default_block_m > 0) {
        printf("  --block-m N    query rows per tile (BLOCK_M)            (default %d)\n", spec->default_block_m);
        printf("  --block-n N    key rows per tile (BLOCK_N)              (default %d)\n", spec->default_block_n);
    }
    if (spec->max_step > 0) printf("  --step K|all   run only step K (1..%d)                   (default all)\n", spec->max_step);
    if (spec->has_compare_causal)
        printf("  --compare-causal  steps 2 and 3 also run with the causal mask flipped, in rows of their own\n"
               "                 (labelled, checked against their own oracle, timed, never saved)\n");
    if (spec->has_baselines)
        printf("  --no-baselines the steps' rows only, without the baselines beside them\n");
    if (spec->has_dq_mode)
        printf("  --dq MODE      deterministic | atomic | both (how dQ is accumulated, default both)\n");
    if (spec->has_dtype)
        printf("  --dtype T      fp32 | fp16 | bf16: the inputs' type (half: float32 accumulation; default fp32)\n");
    if (spec->has_cpu_bf16)
        printf("  --cpu-bf16 U   auto | amx | avx512 | emulated | fma: what step 4's bf16 CPU products\n"
               "                 run on (default auto: AMX-BF16, else AVX512_BF16, else float32 FMAs;\n"
               "                 a unit this CPU lacks is refused)\n");
    printf("\nRun:\n");
    printf("  --impl WHICH   cpu | cuda | all                         (default all)\n");
    printf("  --threads N    OpenMP threads of the parallel CPU run   (default: all %d cores)\n", omp_get_num_procs());
    printf("  --threads-only time the CPU rows on --threads only, without the 1-thread run\n");
    printf("  --seed N       seed of the random inputs                (default 1)\n");
    printf("  --warmup N     untimed runs before timing               (default 1)\n");
    printf("  --iters N      timed runs; the table shows the median   (default 5; 0 = check only)\n");
    printf("  --check-heads N  heads the float64 oracle checks         (default: all that fit a time budget)\n");
    printf("  --save-dir DIR write inputs and outputs as .npy files (NumPy loads them as they are)\n");
    printf("  --load-dir DIR read the inputs, and so the shape, from .npy files written by --save-dir\n");
    printf("  --csv FILE     append one row per timed run to FILE\n");
    printf("  --help         this text\n");
    printf("\nExit status: 0 all checks passed, 1 a check failed, 2 bad input, 3 GPU error, 77 GPU asked for but absent.\n");
}

int64_t fa_parse_int(const char *flag, const char *text, int64_t lo, int64_t hi) {
    errno = 0;
    char *end;
    const long long value = strtoll(text, &end, 10);
    if (end == text || *end != '\0') fa_die("%s expects an integer, got '%s'", flag, text);
    // Too long for 64 bits (ERANGE) is out of range like any other value past the limits: one message for both.
    if (errno == ERANGE || value < lo || value > hi)
        fa_die("%s must be between %lld and %lld (got %s)", flag, (long long)lo, (long long)hi, text);
    return value;
}

float fa_parse_float32(const char *flag, const char *text, double lo, int lo_open, double hi, int hi_open) {
    errno = 0;
    char *end;
    const double value = strtod(text, &end);
    if (end == text || *end != '\0' || isnan(value)) fa_die("%s expects a number, got '%s'", flag, text);
    const int below = lo_open ? !(value > lo) : !(value >= lo), above = hi_open ? !(value < hi) : !(value <= hi);
    if (below || above)
        fa_die("%s must be %s %g and %s %g (got %s)", flag, lo_open ? "above" : "at least", lo,
               hi_open ? "below" : "at most", hi, text);
    // What the run computes with is the float32: it must still be the number the user meant.
    const float f = (float)value;
    if (!isfinite(f)) fa_die("%s %s is too large for float32 (at most %g)", flag, text, (double)FLT_MAX);
    if (f == 0.0f && value != 0.0)
        fa_die("%s %s becomes 0 in float32 (the smallest is %g)", flag, text, (double)FLT_TRUE_MIN);
    if ((double)f > hi || (hi_open && (double)f >= hi) || (double)f < lo || (lo_open && (double)f <= lo))
        fa_die("%s %s rounds to %.9g in float32, outside the range", flag, text, (double)f);
    return f;
}

// --dtype: only binaries whose spec says so take it; the others compute in float32 only.
static void parse_dtype(const fa_cli_spec *spec, const char *text, fa_options *opt) {
    if (!spec->has_dtype) fa_die("--dtype does not apply to %s: it computes in float32 only", spec->program);
    opt->dtype = fa_dtype_parse(text);
    if (opt->dtype < 0) fa_die("--dtype expects fp32, fp16 or bf16, got '%s'", text);
}

int fa_cuda_supports_head_dim(const fa_cli_spec *spec, int64_t D) {
    if (!spec->cuda_head_dims) return 1;
    for (const int *d = spec->cuda_head_dims; *d; d++)
        if (*d == D) return 1;
    return 0;
}

void fa_parse_options(int argc, char **argv, const fa_cli_spec *spec, fa_options *opt) {
    memset(opt, 0, sizeof *opt);
    opt->shape = spec->defaults;
    opt->block_m = spec->default_block_m;
    opt->block_n = spec->default_block_n;
    opt->impl = FA_IMPL_ALL;
    opt->threads = omp_get_num_procs();
    opt->seed = 1;
    opt->warmup = 1;
    opt->iters = 5;
    opt->dq_mode = FA_DQ_BOTH;
    opt->argc = argc;
    opt->argv = argv;
    float scale = 0.0f;                                 // 0: not given (1/sqrt(D))
    int64_t B = 0, H = 0, Sq = 0, Sk = 0, D = 0;        // 0: not given on the command line (a given size is >= 1)

    opterr = 0;   // we print our own one-line errors
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, ":", LONG_OPTIONS, NULL)) != -1) {
        switch (c) {
        // Sizes are checked as typed: 1 .. FA_MAX_DIM each (fa_shape_validate then checks their products).
        case OPT_B: B = fa_parse_int("--B", optarg, 1, FA_MAX_DIM); break;
        case OPT_H: H = fa_parse_int("--H", optarg, 1, FA_MAX_DIM); break;
        case OPT_SQ: Sq = fa_parse_int("--Sq", optarg, 1, FA_MAX_DIM); break;
        case OPT_SK: Sk = fa_parse_int("--Sk", optarg, 1, FA_MAX_DIM); break;
        case OPT_S: Sq = Sk = fa_parse_int("--S", optarg, 1, FA_MAX_DIM); break;
        case OPT_D: D = fa_parse_int("--D", optarg, 1, FA_MAX_DIM); break;
        case OPT_CAUSAL:
            if (spec->two_d) fa_die("--causal is not part of %s (phase 3 adds it)", spec->program);
            opt->shape.causal = 1;
            break;
        case OPT_SCALE: scale = fa_parse_float32("--scale", optarg, 0.0, 1, INFINITY, 1); break;
        case OPT_BLOCK_M:
        case OPT_BLOCK_N:
            if (spec->default_block_m == 0) fa_die("%s has no tiles: --block-m/--block-n do not apply", spec->program);
            if (c == OPT_BLOCK_M) opt->block_m = (int)fa_parse_int("--block-m", optarg, 1, 4096);
            else opt->block_n = (int)fa_parse_int("--block-n", optarg, 1, 4096);
            break;
        case OPT_IMPL:
            if (strcmp(optarg, "cpu") == 0) opt->impl = FA_IMPL_CPU;
            else if (strcmp(optarg, "cuda") == 0) opt->impl = FA_IMPL_CUDA;
            else if (strcmp(optarg, "all") == 0) opt->impl = FA_IMPL_ALL;
            else fa_die("--impl expects cpu, cuda or all, got '%s'", optarg);
            break;
        case OPT_THREADS: opt->threads = (int)fa_parse_int("--threads", optarg, 1, 4096); break;
        case OPT_THREADS_ONLY: opt->threads_only = 1; break;
        case OPT_NO_BASELINES:
            if (!spec->has_baselines) fa_die("--no-baselines applies to phase 5 only");
            opt->no_baselines = 1;
            break;
        case OPT_SEED: opt->seed = (uint64_t)fa_parse_int("--seed", optarg, 0, INT64_MAX); break;
        case OPT_WARMUP: opt->warmup = (int)fa_parse_int("--warmup", optarg, 0, 100000); break;
        case OPT_ITERS: opt->iters = (int)fa_parse_int("--iters", optarg, 0, 100000); break;
        case OPT_CHECK_HEADS:   // given: at least one head (0 means not given: the time budget decides)
            opt->check_heads = (int)fa_parse_int("--check-heads", optarg, 1, INT32_MAX);
            break;
        case OPT_SAVE: opt->save_dir = optarg; break;
        case OPT_LOAD: opt->load_dir = optarg; break;
        case OPT_CSV: opt->csv = optarg; break;
        case OPT_STEP:
            if (spec->max_step == 0) fa_die("%s has no steps: --step does not apply", spec->program);
            opt->step = strcmp(optarg, "all") == 0 ? 0 : (int)fa_parse_int("--step", optarg, 1, spec->max_step);
            break;
        case OPT_DQ:
            if (!spec->has_dq_mode) fa_die("--dq applies to the backward pass (phase 4) only");
            if (strcmp(optarg, "deterministic") == 0) opt->dq_mode = FA_DQ_DETERMINISTIC;
            else if (strcmp(optarg, "atomic") == 0) opt->dq_mode = FA_DQ_ATOMIC;
            else if (strcmp(optarg, "both") == 0) opt->dq_mode = FA_DQ_BOTH;
            else fa_die("--dq expects deterministic, atomic or both, got '%s'", optarg);
            break;
        case OPT_COMPARE_CAUSAL:
            if (!spec->has_compare_causal) fa_die("--compare-causal applies to phase 3 only");
            opt->compare_causal = 1;
            break;
        case OPT_DTYPE: parse_dtype(spec, optarg, opt); break;
        case OPT_CPU_BF16:
            if (!spec->has_cpu_bf16) fa_die("--cpu-bf16 applies to phase 5 only");
            if (strcmp(optarg, "auto") != 0 && strcmp(optarg, "amx") != 0 && strcmp(optarg, "avx512") != 0 &&
                strcmp(optarg, "emulated") != 0 && strcmp(optarg, "fma") != 0)
                fa_die("--cpu-bf16 expects auto, amx, avx512, emulated or fma, got '%s'", optarg);
            opt->cpu_bf16 = optarg;
            break;
        case OPT_HELP: print_help(spec); exit(0);
        case ':': fa_die("%s needs a value (see --help)", argv[optind - 1]);
        default: fa_die("unknown option '%s' (see --help)", argv[optind - 1]);
        }
    }
    if (optind < argc) fa_die("unexpected argument '%s' (see --help)", argv[optind]);

    if (opt->load_dir) shape_from_files(opt->load_dir, &B, &H, &Sq, &Sk, &D);
    if (spec->two_d && B != 0 && B != 1) fa_die("%s works on one [N, d] head: --B must be 1", spec->program);
    if (spec->two_d && H != 0 && H != 1) fa_die("%s works on one [N, d] head: --H must be 1", spec->program);
    if (B) opt->shape.B = B;
    if (H) opt->shape.H = H;
    if (Sq) opt->shape.Sq = Sq;
    if (Sk) opt->shape.Sk = Sk;
    if (D) opt->shape.D = D;
    // Validate the sizes before using D for the default scale.
    opt->shape.scale = 1.0f;
    char err[256];
    if (fa_shape_validate(&opt->shape, err, sizeof err) != 0) fa_die("%s", err);
    opt->shape.scale = scale > 0.0f ? scale : (float)(1.0 / sqrt((double)opt->shape.D));
    if (fa_shape_validate(&opt->shape, err, sizeof err) != 0) fa_die("%s", err);

    if ((opt->impl & FA_IMPL_CUDA) && !fa_cuda_supports_head_dim(spec, opt->shape.D)) {
        char dims[64] = "";
        for (const int *d = spec->cuda_head_dims; *d; d++)
            snprintf(dims + strlen(dims), sizeof dims - strlen(dims), "%s%d", dims[0] ? ", " : "", *d);
        fa_die("D=%lld is not supported by the CUDA kernels of %s (supported: %s); use --impl cpu for other sizes",
               (long long)opt->shape.D, spec->program, dims);
    }
    // Where the run writes is checked now, before anything is computed (fa_save.h).
    if (opt->save_dir) fa_save_begin(opt->save_dir);
    if (opt->csv) fa_csv_begin(opt->csv);
}
