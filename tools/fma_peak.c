// fma_peak.c - the float32 peak of this CPU's cores, measured: independent fused multiply-adds in ymm (256-bit) and,
// where the CPU has AVX-512, zmm (512-bit) registers, on 1 thread and on all threads; and where the CPU has them, the
// peaks of its bf16 units, which phase 5's bf16 backward runs on (phase5_tensor_cores/bf16_dot.h): vdpbf16ps in zmm
// registers (AVX512_BF16) and AMX's tdpbf16ps.
//
// Why: a CPU kernel's GFLOP/s means little without the ceiling it runs under. A data sheet's peak assumes a clock the
// core may not hold with wide vectors (and a virtual machine's CPU names no clock at all), so the chapters quote
// "% of peak" against this measurement instead. Each thread runs ACC independent chains of vector FMAs (enough to
// cover the FMA latency on every pipe: 4 cycles x 2 pipes needs 8 in flight), nothing but registers, no memory.
// FLOPs: 2 per lane per FMA (a multiply and an add), as every GFLOP/s of the suite counts them; 2 per multiply-add of
// two bf16 values likewise: 64 per vdpbf16ps in zmm (16 lanes, 2 products each), 16,384 per tdpbf16ps (16 x 16 x 32).
// Two rates: per second of wall-clock time (what a timed kernel sees), and per second of CPU time the threads
// actually got (the core's own peak, even when other programs share the cores: on a shared machine the first is
// lower, and the ratio of the two says how much of the cores this program had).
//
// Run:  build/bin/fma_peak                      (prints the table; about 3 seconds)
//       build/bin/fma_peak --log FILE           (also writes it to FILE, with the machine and the command)
// The widths are chosen at run time (__builtin_cpu_supports): one binary, any x86-64 CPU.
#include "fa_report.h"   // fa_cpu_model, fa_cpu_simd_offered
#include "fa_cpu_units.h"   // which bf16 units this CPU has; AMX's registers asked of Linux and configured

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define FA_X86 1
#else
#define FA_X86 0
#endif

#define ACC 12          // independent accumulator chains per thread (12 of the 16 ymm registers)
#define STEPS 20000000  // loop iterations per timed run (about 0.1 s at 3 GHz); each does ACC FMAs
#define AMX_STEPS 1000000   // AMX: each iteration is 4 tdpbf16ps of 16 x 16 x 32 multiply-adds

// What a row measures.
enum { YMM, ZMM, DPBF16_ZMM, AMX_TILES, N_KINDS };
static const char *const KIND_NAMES[N_KINDS] = {"ymm (256-bit)", "zmm (512-bit)", "vdpbf16ps (zmm)",
                                                "tdpbf16ps (AMX)"};
// FLOPs one thread does in one timed run of each.
static double flops_per_thread(int kind) {
    switch (kind) {
    case YMM: return 2.0 * 8 * ACC * (double)STEPS;
    case ZMM: return 2.0 * 16 * ACC * (double)STEPS;
    case DPBF16_ZMM: return 4.0 * 16 * ACC * (double)STEPS;
    default: return 2.0 * 16 * 16 * 32 * 4 * (double)AMX_STEPS;
    }
}

#if FA_X86
// ACC chains of acc = acc * a + b, each depending only on itself; a and b keep the values bounded (|a| < 1).
__attribute__((target("avx2,fma"))) static float fma_chains_ymm(long steps, float seed) {
    __m256 acc[ACC];
    for (int c = 0; c < ACC; c++) acc[c] = _mm256_set1_ps(seed + (float)c);
    const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(0.001f);
    for (long s = 0; s < steps; s++)
        for (int c = 0; c < ACC; c++) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
    __m256 sum = acc[0];
    for (int c = 1; c < ACC; c++) sum = _mm256_add_ps(sum, acc[c]);
    float out[8];
    _mm256_storeu_ps(out, sum);
    return out[0];
}

__attribute__((target("avx512f"))) static float fma_chains_zmm(long steps, float seed) {
    __m512 acc[ACC];
    for (int c = 0; c < ACC; c++) acc[c] = _mm512_set1_ps(seed + (float)c);
    const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(0.001f);
    for (long s = 0; s < steps; s++)
        for (int c = 0; c < ACC; c++) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
    __m512 sum = acc[0];
    for (int c = 1; c < ACC; c++) sum = _mm512_add_ps(sum, acc[c]);
    return _mm512_reduce_add_ps(sum);
}

#if FA_CPU_UNITS
// ACC chains of acc += a0 * b0 + a1 * b1 (vdpbf16ps: 16 lanes, a pair of bf16 products each); every a and b is
// 2^-10, so the sums grow by 2^-19 a step and stay far from overflow.
__attribute__((target("avx512bf16,avx512f"))) static float dpbf16_chains_zmm(long steps, float seed) {
    __m512 acc[ACC];
    for (int c = 0; c < ACC; c++) acc[c] = _mm512_set1_ps(seed + (float)c);
    const __m512bh a = (__m512bh)_mm512_set1_epi32(0x3A803A80);   // bf16 2^-10, twice
    for (long s = 0; s < steps; s++)
        for (int c = 0; c < ACC; c++) acc[c] = _mm512_dpbf16_ps(acc[c], a, a);
    __m512 sum = acc[0];
    for (int c = 1; c < ACC; c++) sum = _mm512_add_ps(sum, acc[c]);
    return _mm512_reduce_add_ps(sum);
}

// Four independent 16 x 16 float32 tiles, each += a 16 x 32 bf16 tile times a 32 x 16 one per step (the tile shapes
// fa_amx_thread_begin() configures; tiles 4-7 hold 2^-10 everywhere).
__attribute__((target("amx-tile,amx-bf16"))) static float amx_chains(long steps) {
    static const uint16_t small[512] = {[0 ... 511] = 0x3A80};   // one tile: 16 rows x 64 bytes
    float out[256];
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, small, 64);
    _tile_loadd(5, small, 64);
    _tile_loadd(6, small, 64);
    _tile_loadd(7, small, 64);
    for (long s = 0; s < steps; s++) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, out, 64);
    return out[0];
}
#endif
#endif

static double thread_cpu_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double median5(double runs[5]) {
    for (int i = 1; i < 5; i++)
        for (int j = i; j > 0 && runs[j] < runs[j - 1]; j--) {
            const double t = runs[j];
            runs[j] = runs[j - 1];
            runs[j - 1] = t;
        }
    return runs[2];
}

// `threads` threads each running the chains of one kind, 5 times: the medians of GFLOP/s per wall-clock second (*wall)
// and per CPU-second of one thread (*per_cpu_second).
static void measure(int kind, int threads, double *wall, double *per_cpu_second) {
    double runs[5], cpu_runs[5];
    float sink = 0.0f;
    const double flops = flops_per_thread(kind);
    for (int r = 0; r < 5; r++) {
        double start = 0.0, end = 0.0, cpu = 0.0;
#pragma omp parallel num_threads(threads) reduction(+ : sink, cpu)
        {
#if FA_CPU_UNITS
            if (kind == AMX_TILES) fa_amx_thread_begin();   // each thread loads the tile shapes, before the clock
#endif
#pragma omp barrier
#pragma omp master
            start = omp_get_wtime();
            const double cpu_start = thread_cpu_seconds();
#if FA_X86
            const float seed = (float)omp_get_thread_num();
            if (kind == YMM) sink += fma_chains_ymm(STEPS, seed);
            if (kind == ZMM) sink += fma_chains_zmm(STEPS, seed);
#endif
#if FA_CPU_UNITS
            if (kind == DPBF16_ZMM) sink += dpbf16_chains_zmm(STEPS, seed);
            if (kind == AMX_TILES) sink += amx_chains(AMX_STEPS);
#endif
            cpu += thread_cpu_seconds() - cpu_start;
#pragma omp barrier
#pragma omp master
            end = omp_get_wtime();
#if FA_CPU_UNITS
            if (kind == AMX_TILES) fa_amx_thread_end();
#endif
        }
        runs[r] = flops * threads / (end - start) / 1e9;
        cpu_runs[r] = flops * threads / cpu / 1e9;
    }
    if (sink == 12345.0f) printf(" ");   // keeps the sums alive
    *wall = median5(runs);
    *per_cpu_second = median5(cpu_runs);
}

int main(int argc, char **argv) {
    const char *log_path = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--log") == 0 && i + 1 < argc) log_path = argv[++i];
        else {
            fprintf(stderr, "error: fma_peak: unknown argument '%s' (usage: fma_peak [--log FILE])\n", argv[i]);
            return 2;
        }
    }
    FILE *log = NULL;
    if (log_path && !(log = fopen(log_path, "w"))) {
        fprintf(stderr, "error: fma_peak: cannot write %s\n", log_path);
        return 2;
    }
#if FA_X86
    __builtin_cpu_init();
    const int have_ymm = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    const int have_zmm = __builtin_cpu_supports("avx512f");
    const int have_dpbf16 = FA_CPU_UNITS && fa_cpu_has_avx512_bf16();
    const int have_amx = FA_CPU_UNITS && fa_cpu_amx_granted();   // asks Linux for AMX's registers
#else
    const int have_ymm = 0, have_zmm = 0, have_dpbf16 = 0, have_amx = 0;
#endif
    const int cores = omp_get_num_procs();
    char text[2048];
    int used = snprintf(text, sizeof text,
                        "fma_peak: float32 FMA peak, %d independent chains per thread, medians of 5 runs; GFLOP/s per wall-clock "
                        "second, and per core per second of CPU time the threads got; then the bf16 units the CPU has "
                        "(2 FLOPs per multiply-add of bf16 products)\n"
                        "command: fma_peak%s%s\nCPU: %s, %d logical cores; the CPU offers %s\n"
                        "  %-16s %8s %12s %16s %22s\n",
                        ACC, log_path ? " --log " : "", log_path ? log_path : "", fa_cpu_model(), cores,
                        fa_cpu_simd_offered(), "registers", "threads", "GFLOP/s", "GFLOP/s per core",
                        "per core, CPU time");
    const int have[N_KINDS] = {have_ymm, have_zmm, have_dpbf16, have_amx};
    for (int kind = 0; kind < N_KINDS; kind++) {
        if (!have[kind]) {   // the float32 rows always print; a bf16 unit the CPU lacks is left out
            if (kind == YMM || kind == ZMM)
                used += snprintf(text + used, sizeof text - used, "  %-16s %8s %12s %16s %22s  (the CPU lacks it)\n",
                                 KIND_NAMES[kind], "-", "-", "-", "-");
            continue;
        }
        int thread_counts[2] = {1, cores};
        for (int t = 0; t < (cores > 1 ? 2 : 1); t++) {
            double gflops, per_cpu_second;
            measure(kind, thread_counts[t], &gflops, &per_cpu_second);
            used += snprintf(text + used, sizeof text - used, "  %-16s %8d %12.1f %16.1f %22.1f\n", KIND_NAMES[kind],
                             thread_counts[t], gflops, gflops / thread_counts[t], per_cpu_second);
        }
    }
    fputs(text, stdout);
    if (log) {
        fputs(text, log);
        if (fclose(log) != 0) {
            fprintf(stderr, "error: fma_peak: writing %s failed\n", log_path);
            return 2;
        }
    }
    return 0;
}
