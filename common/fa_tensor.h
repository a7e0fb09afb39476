// fa_tensor.h - host buffers: checked allocation, seeded random inputs, NaN poisoning.
#ifndef FA_TENSOR_H
#define FA_TENSOR_H

#ifdef __cplusplus
extern "C" {
#endif

#include <stddef.h>
#include <stdint.h>

// Exit status for bad input or a request the machine cannot meet (docs/architecture.md, "Conventions": one line on stderr, exit 2).
#define FA_EXIT_BAD_INPUT 2
// Exit status ctest reads as "skipped" (a GPU test on a machine without a GPU).
#define FA_EXIT_SKIP 77
// Exit status for an error the GPU reported (a kernel fault, a failed copy).
#define FA_EXIT_GPU_ERROR 3

// Prints "error: <message>" as one line on stderr and exits with FA_EXIT_BAD_INPUT.
void fa_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

// Allocates count floats (doubles). Refuses, without touching the memory, a request larger than the memory the
// machine has available: Linux would otherwise promise it and kill the process later. Returns NULL on failure.
float *fa_try_alloc_floats(int64_t count);
double *fa_try_alloc_doubles(int64_t count);
// The same, but on failure prints how many bytes `what` needed and exits 2.
float *fa_alloc_floats(int64_t count, const char *what);
double *fa_alloc_doubles(int64_t count, const char *what);
// Allocates two buffers of count floats each (S and P of the naive version, say), checking their combined size
// first: memory malloc has promised but nobody has written yet does not show as used, so two separate checks of
// 16 GiB against 24 GiB free would both pass and the process be killed later. Returns 0, or -1 with both NULL.
int fa_try_alloc_floats_pair(int64_t count, float **first, float **second);
// Bytes of memory the machine can still give this process (MemAvailable), or -1 when unknown.
int64_t fa_host_available_bytes(void);

// Fills x[0..count) with uniform random numbers in [-amplitude, amplitude). The value of element i depends only on
// (seed, stream, i), never on the thread count, so a run is reproducible from its seed alone.
void fa_fill_random(float *x, int64_t count, uint64_t seed, uint64_t stream, float amplitude);

// Random streams of the inputs, so that q, k, v and dO differ for the same seed.
enum { FA_STREAM_Q = 1, FA_STREAM_K = 2, FA_STREAM_V = 3, FA_STREAM_DO = 4 };

// Writes NaN into every element, so that an element the kernel forgets to write cannot pass a check.
void fa_poison(float *x, int64_t count);

#ifdef __cplusplus
}
#endif

#endif
