// fa_row_split.cuh - how the float32 CUDA kernels split a row of D floats over threads, and sum a score over them.
//
// The forward (phase 2, phase 3, the forwards of phase 6) gives each query row one thread, or a pair at D = 128; the
// backward passes (phase 4 and phase 6's) give each row (a key row in the dK/dV pass, a query row in the dQ pass)
// D / 16 threads. Both are one RowSplit with a different cap on the dims a thread holds:
//   FORWARD_MAX_DIMS_PER_THREAD = 64: a thread holds its row's q and acc, 2 * 64 registers already, next to the
//     BLOCK_N scores; a larger D is split over D / 64 threads.
//   BACKWARD_MAX_DIMS_PER_THREAD = SCORE_PART_DIMS = 16: the main pass keeps four such vectors per thread (K_j, V_j,
//     dK_j, dV_j), and the compiler also holds the slice of Q_i and dO_i it reads from shared memory. With 32 dims
//     that is about 230 registers a thread (the compiler's resource report), so only 8 warps fit on an SM and the GPU
//     has little to run while one warp waits for shared memory; with 16 it is about 128 registers and 16 warps, for
//     the price of one more shuffle step per dot product. It is also SCORE_PART_DIMS (fa_contract.h): the forward
//     sums each score in the order this split gives, so that the scores the backward recomputes are the forward's to
//     the last bit.
#ifndef FA_ROW_SPLIT_CUH
#define FA_ROW_SPLIT_CUH

#include "fa_contract.h"   // SCORE_PART_DIMS
#include "fa_warp.cuh"     // FULL_WARP

#define FORWARD_MAX_DIMS_PER_THREAD 64
#define BACKWARD_MAX_DIMS_PER_THREAD SCORE_PART_DIMS

// Dimensions of the row one thread holds, threads per row, and how the row's dims are dealt out to those threads.
template <int D, int MAX_DIMS_PER_THREAD>
struct RowSplit {
    static constexpr int DIMS_PER_THREAD = D < MAX_DIMS_PER_THREAD ? D : MAX_DIMS_PER_THREAD;
    static constexpr int THREADS_PER_ROW = D / DIMS_PER_THREAD;   // forward: 1, 1, 1, 2; backward: 1, 2, 4, 8
    static constexpr int CHUNKS = DIMS_PER_THREAD / 4;            // float4 chunks per thread
    static constexpr int SCORE_PARTS = D / SCORE_PART_DIMS / THREADS_PER_ROW;   // score parts per thread
    static_assert(SCORE_PARTS >= 1 && 4 % SCORE_PARTS == 0, "a float4 splits evenly into the score parts");
    // Interleaved, so that when the threads of a row read one row of a shared-memory tile together they hit
    // neighbouring banks (with contiguous slices, the two threads of a D = 128 forward row would read bytes 256
    // apart, the same banks: a 2-way conflict; dims d and d + 32 of the backward likewise).
    // The forward, float4 by float4: thread `part` of a row holds the chunks part, part + THREADS_PER_ROW, ...
    static __device__ __forceinline__ int chunk(int c, int part) { return c * THREADS_PER_ROW + part; }
    // The backward, float by float: thread `part` of a row holds the dims part, part + THREADS_PER_ROW, ...
    static __device__ __forceinline__ int dim(int part, int t) { return part + THREADS_PER_ROW * t; }
};
template <int D> using ForwardRowSplit = RowSplit<D, FORWARD_MAX_DIMS_PER_THREAD>;
template <int D> using BackwardRowSplit = RowSplit<D, BACKWARD_MAX_DIMS_PER_THREAD>;

// a . b added into PARTS partial sums: element e of the float4 (dim 4c + e of the row) goes to part e % PARTS.
template <int PARTS> __device__ __forceinline__ void dot4_parts(float4 a, float4 b, float (&sum)[PARTS]) {
    sum[0 % PARTS] = fmaf(a.x, b.x, sum[0 % PARTS]);
    sum[1 % PARTS] = fmaf(a.y, b.y, sum[1 % PARTS]);
    sum[2 % PARTS] = fmaf(a.z, b.z, sum[2 % PARTS]);
    sum[3 % PARTS] = fmaf(a.w, b.w, sum[3 % PARTS]);
}

// (x[0] + x[1]) + (x[2] + x[3]): the order of the backward's butterfly (row_sum below).
template <int PARTS> __device__ __forceinline__ float add_in_pairs(float (&x)[PARTS]) {
#pragma unroll
    for (int step = 1; step < PARTS; step *= 2)
#pragma unroll
        for (int p = 0; p + step < PARTS; p += 2 * step) x[p] += x[p + step];
    return x[0];
}

// Sum of x over the THREADS_PER_ROW lanes that share a row; each of them gets the same total (a butterfly: lanes
// part and part ^ offset swap partial sums). Every lane of the warp must call it, so the loops around a call run the
// same number of times in every thread of the block.
template <int THREADS_PER_ROW>
__device__ __forceinline__ float row_sum(float x) {
#pragma unroll
    for (int offset = 1; offset < THREADS_PER_ROW; offset *= 2) x += __shfl_xor_sync(FULL_WARP, x, offset);
    return x;
}

// The backward kernels ask the compiler (through __launch_bounds__) to fit 16 warps on an SM: 512 threads, at most
// 128 of the SM's 65536 registers each. Without the cap the atomic main pass takes about 170 registers at D = 64 and
// only 8 warps run; with it the compiler still needs no spills (check with -DFA_CUDA_RESOURCE_REPORT=ON).
#define THREADS_PER_SM 512
constexpr int min_blocks_per_sm(int threads) { return THREADS_PER_SM / threads > 0 ? THREADS_PER_SM / threads : 1; }

#endif
