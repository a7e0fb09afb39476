// fma_peak.c - the float32 peak of this CPU's cores, measured: independent fused multiply-adds in ymm (256-bit) and,
// where the CPU has AVX-512, zmm (512-bit) registers, on 1 thread and on all threads.
//
// Why: a CPU kernel's GFLOP/s means little without the ceiling it runs under. A data sheet's peak assumes a clock the
// core may not hold with wide vectors (and a virtual machine's CPU names no clock at all), so the chapters quote
// "% of peak" against this measurement instead. Each thread runs ACC independent chains of vector FMAs (enough to
// cover the FMA latency on every pipe: 4 cycles x 2 pipes needs 8 in flight), nothing but registers, no memory.
// FLOPs: 2 per lane per FMA (a multiply and an add), as every GFLOP/s of the suite counts them.
// Two rates: per second of wall-clock time (what a timed kernel sees), and per second of CPU time the threads
// actually got (the core's own peak, even when other programs share the cores: on a shared machine the first is
// lower, and the ratio of the two says how much of the cores this program had).
//
// Run:  build/bin/fma_peak                      (prints the table; about 3 seconds)
//       build/bin/fma_peak --log FILE           (also writes it to FILE, with the machine and the command)
// The widths are chosen at run time (__builtin_cpu_supports): one binary, any x86-64 CPU.
#include "fa_report.h"   // fa_cpu_model, fa_cpu_simd_offered

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

// `threads` threads each running the chains of one width (lanes 8: ymm, 16: zmm), 5 times: the medians of GFLOP/s per
// wall-clock second (*wall) and per CPU-second of one thread (*per_cpu_second).
static void measure(int lanes, int threads, double *wall, double *per_cpu_second) {
    double runs[5], cpu_runs[5];
    float sink = 0.0f;
    const double flops_per_thread = 2.0 * lanes * ACC * (double)STEPS;
    for (int r = 0; r < 5; r++) {
        double start = 0.0, end = 0.0, cpu = 0.0;
#pragma omp parallel num_threads(threads) reduction(+ : sink, cpu)
        {
#pragma omp barrier
#pragma omp master
            start = omp_get_wtime();
            const double cpu_start = thread_cpu_seconds();
#if FA_X86
            sink += lanes == 16 ? fma_chains_zmm(STEPS, (float)omp_get_thread_num())
                                : fma_chains_ymm(STEPS, (float)omp_get_thread_num());
#endif
            cpu += thread_cpu_seconds() - cpu_start;
#pragma omp barrier
#pragma omp master
            end = omp_get_wtime();
        }
        runs[r] = flops_per_thread * threads / (end - start) / 1e9;
        cpu_runs[r] = flops_per_thread * threads / cpu / 1e9;
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
            fprintf(stderr, "fma_peak: unknown argument '%s' (usage: fma_peak [--log FILE])\n", argv[i]);
            return 2;
        }
    }
    FILE *log = NULL;
    if (log_path && !(log = fopen(log_path, "w"))) {
        fprintf(stderr, "fma_peak: cannot write %s\n", log_path);
        return 2;
    }
#if FA_X86
    __builtin_cpu_init();
    const int have_ymm = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    const int have_zmm = __builtin_cpu_supports("avx512f");
#else
    const int have_ymm = 0, have_zmm = 0;
#endif
    const int cores = omp_get_num_procs();
    char text[2048];
    int used = snprintf(text, sizeof text,
                        "fma_peak: float32 FMA peak, %d independent chains per thread, medians of 5 runs; GFLOP/s per wall-clock "
                        "second, and per core per second of CPU time the threads got\n"
                        "command: fma_peak%s%s\nCPU: %s, %d logical cores; the CPU offers %s\n"
                        "  %-14s %8s %12s %16s %22s\n",
                        ACC, log_path ? " --log " : "", log_path ? log_path : "", fa_cpu_model(), cores,
                        fa_cpu_simd_offered(), "registers", "threads", "GFLOP/s", "GFLOP/s per core",
                        "per core, CPU time");
    const int widths[2] = {8, 16};
    const char *names[2] = {"ymm (256-bit)", "zmm (512-bit)"};
    const int have[2] = {have_ymm, have_zmm};
    for (int w = 0; w < 2; w++) {
        if (!have[w]) {
            used += snprintf(text + used, sizeof text - used, "  %-14s %8s %12s %16s %22s  (the CPU lacks it)\n",
                             names[w], "-", "-", "-", "-");
            continue;
        }
        int thread_counts[2] = {1, cores};
        for (int t = 0; t < (cores > 1 ? 2 : 1); t++) {
            double gflops, per_cpu_second;
            measure(widths[w], thread_counts[t], &gflops, &per_cpu_second);
            used += snprintf(text + used, sizeof text - used, "  %-14s %8d %12.1f %16.1f %22.1f\n", names[w],
                             thread_counts[t], gflops, gflops / thread_counts[t], per_cpu_second);
        }
    }
    fputs(text, stdout);
    if (log) {
        fputs(text, log);
        if (fclose(log) != 0) {
            fprintf(stderr, "fma_peak: writing %s failed\n", log_path);
            return 2;
        }
    }
    return 0;
}
