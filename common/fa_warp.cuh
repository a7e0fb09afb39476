// fa_warp.cuh - the warp helpers of every CUDA kernel: FULL_WARP, the mask of a shuffle that every lane of the warp
// takes part in, and the sum and max of a value over the 32 lanes of a warp, for the kernels that give one row to a
// warp (phase 1's softmax and dS, phase 4's Delta, phase 6's split-KV). Every lane gets the result: a butterfly, in
// which lanes i and i ^ offset swap partial results, five steps for 32 lanes. Every lane of the warp must call it.
#ifndef FA_WARP_CUH
#define FA_WARP_CUH

#define WARP_SIZE 32
#define FULL_WARP 0xffffffffu   // every lane of the warp takes part in the shuffle

static __device__ __forceinline__ float warp_sum(float x) {
    for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(FULL_WARP, x, offset);
    return x;
}

static __device__ __forceinline__ float warp_max(float x) {
    for (int offset = 16; offset > 0; offset /= 2) x = fmaxf(x, __shfl_xor_sync(FULL_WARP, x, offset));
    return x;
}

#endif
