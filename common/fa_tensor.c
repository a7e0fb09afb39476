// fa_tensor.c - host buffers: checked allocation, seeded random inputs, NaN poisoning.
#define _GNU_SOURCE
#include "fa_tensor.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void fa_die(const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    fputs("error: ", stderr);
    vfprintf(stderr, fmt, args);
    fputc('\n', stderr);
    va_end(args);
    exit(FA_EXIT_BAD_INPUT);
}

int64_t fa_host_available_bytes(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return -1;
    char line[256];
    long long kib = -1;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "MemAvailable: %lld kB", &kib) == 1) break;
    }
    fclose(f);
    return kib < 0 ? -1 : (int64_t)kib * 1024;
}

static void *try_alloc(int64_t count, size_t elem) {
    if (count <= 0 || (uint64_t)count > SIZE_MAX / elem) return NULL;
    int64_t bytes = count * (int64_t)elem;
    int64_t available = fa_host_available_bytes();
    if (available >= 0 && bytes > available) return NULL;
    return malloc((size_t)bytes);
}

float *fa_try_alloc_floats(int64_t count) { return try_alloc(count, sizeof(float)); }
double *fa_try_alloc_doubles(int64_t count) { return try_alloc(count, sizeof(double)); }

int fa_try_alloc_floats_pair(int64_t count, float **first, float **second) {
    *first = *second = NULL;
    const int64_t available = fa_host_available_bytes();
    if (count <= 0 || (available >= 0 && 2.0 * (double)count * sizeof(float) > (double)available)) return -1;
    *first = fa_try_alloc_floats(count);
    *second = *first ? fa_try_alloc_floats(count) : NULL;
    if (!*second) {
        free(*first);
        *first = NULL;
        return -1;
    }
    return 0;
}

float *fa_alloc_floats(int64_t count, const char *what) {
    float *p = fa_try_alloc_floats(count);
    if (!p) fa_die("out of host memory: %s needs %.0f bytes", what, (double)count * sizeof(float));
    return p;
}

double *fa_alloc_doubles(int64_t count, const char *what) {
    double *p = fa_try_alloc_doubles(count);
    if (!p) fa_die("out of host memory: %s needs %.0f bytes", what, (double)count * sizeof(double));
    return p;
}

// splitmix64: a tiny, well-mixed hash; counter-based so every element can be drawn independently.
static uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

void fa_fill_random(float *x, int64_t count, uint64_t seed, uint64_t stream, float amplitude) {
    uint64_t base = splitmix64(seed * 0x632BE59BD9B4E019ull + stream);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < count; i++) {
        uint64_t bits = splitmix64(base + (uint64_t)i);
        double unit = (double)(bits >> 11) * (1.0 / 9007199254740992.0);   // 53 random bits in [0, 1)
        x[i] = (float)((2.0 * unit - 1.0) * amplitude);
    }
}

void fa_poison(float *x, int64_t count) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < count; i++) x[i] = NAN;
}
