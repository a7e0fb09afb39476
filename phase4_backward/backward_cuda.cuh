// backward_cuda.cuh - what the phase 4 kernels share: how a row of D floats is split over threads, the sum across
// those threads, and the named constants.
#ifndef BACKWARD_CUDA_CUH
#define BACKWARD_CUDA_CUH

#include <stdint.h>

#include "forward4d.h"   // SCORE_PART_DIMS, causal_tile_stage, MAX_GRID_Y and heads_in_launch

#include "fa_math.h"   // LOG2E, LN2 and the log-sum-exp conversions
#define FULL_WARP 0xffffffffu       // every lane of the warp takes part in the shuffle

// A thread owns one row (a key row in the main pass, a query row in the dQ pass) and keeps its vectors in
// registers. A row of D floats is split over THREADS_PER_ROW neighbouring lanes of one warp, each holding
// DIMS_PER_THREAD of the dims. Why at most MAX_DIMS_PER_THREAD = 16: the main pass keeps four such vectors per thread
// (K_j, V_j, dK_j, dV_j), and the compiler also holds the slice of Q_i and dO_i it reads from shared memory. With 32
// dims that is about 230 registers a thread (the compiler's resource report), so only 8 warps fit on an SM and the
// GPU has little to run while one warp waits for shared memory; with 16 it is about 128 registers and 16 warps, for
// the price of one more shuffle step per dot product.
// It is also SCORE_PART_DIMS (forward4d.h): the forward sums each score in the order this split gives, so that the
// scores recomputed here are the forward's to the last bit.
#define MAX_DIMS_PER_THREAD SCORE_PART_DIMS
template <int D>
struct RowSplit {
    static constexpr int DIMS_PER_THREAD = D < MAX_DIMS_PER_THREAD ? D : MAX_DIMS_PER_THREAD;
    static constexpr int THREADS_PER_ROW = D / DIMS_PER_THREAD;   // 1, 2, 4, 8 for D = 16, 32, 64, 128
    // Thread `part` of a row holds dims part, part + THREADS_PER_ROW, part + 2 * THREADS_PER_ROW, ...: interleaved,
    // so that when the row's threads read one row of a shared-memory tile together they hit neighbouring banks
    // (with contiguous slices, dims d and d + 32 would fall in the same bank and the reads would be serialised).
    static __device__ __forceinline__ int dim(int part, int t) { return part + THREADS_PER_ROW * t; }
};

// Sum of x over the THREADS_PER_ROW lanes that share a row; each of them gets the same total (a butterfly: lanes
// part and part ^ offset swap partial sums). Every lane of the warp must call it, so the loops around a call run the
// same number of times in every thread of the block.
template <int THREADS_PER_ROW>
__device__ __forceinline__ float row_sum(float x) {
#pragma unroll
    for (int offset = 1; offset < THREADS_PER_ROW; offset *= 2) x += __shfl_xor_sync(FULL_WARP, x, offset);
    return x;
}

// The kernels ask the compiler (through __launch_bounds__) to fit 16 warps on an SM: 512 threads, at most 128 of the
// SM's 65536 registers each. Without the cap the atomic main pass takes about 170 registers at D = 64 and only 8 warps
// run; with it the compiler still needs no spills (check with -DFA_CUDA_RESOURCE_REPORT=ON).
#define THREADS_PER_SM 512
constexpr int min_blocks_per_sm(int threads) { return THREADS_PER_SM / threads > 0 ? THREADS_PER_SM / threads : 1; }

#endif
