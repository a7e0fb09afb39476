// fa_mma.cuh - the PTX helpers of the tensor-core kernels (phase 5's steps 2, 3 and 4): one instruction each, with
// the fragment layout each one reads or writes drawn beside it, and the sizes of one mma.m16n8k16.
// Needs sm_80 or newer (mma.m16n8k16 with bf16, cp.async).
#ifndef FA_MMA_CUH
#define FA_MMA_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <string.h>

#define WARP_ROWS 16   // rows per warp: the M of mma.m16n8k16 (query rows in the forward; keys or queries backward)
#define MMA_N 8        // columns of one mma's output: 8 keys (S = Q K^T) or 8 dimensions (O += P V)
#define MMA_K 16       // the sum inside one mma: 16 dimensions (S = Q K^T) or 16 keys (O += P V)
#define CHUNK 8        // halves in 16 bytes: one row of an 8x8 ldmatrix matrix, one global load, one cp.async

// An 8x8 matrix of 16-bit elements in registers, the unit of every fragment below: lane 4g + t holds row g,
// columns 2t and 2t+1, both in one 32-bit register (the lower column in the low 16 bits):
//
//            cols 0,1   cols 2,3   cols 4,5   cols 6,7
//   row 0    lane 0     lane 1     lane 2     lane 3
//   row 1    lane 4     lane 5     lane 6     lane 7
//   ...
//   row 7    lane 28    lane 29    lane 30    lane 31

// ldmatrix.x4: four 8x8 matrices from shared memory, one register per matrix. Every lane passes the address of one
// matrix row (16 contiguous bytes, 16-byte aligned): lanes 0-7 the rows 0-7 of matrix 0, lanes 8-15 those of
// matrix 1, lanes 16-23 of matrix 2, lanes 24-31 of matrix 3. r[i] is then the register of matrix i drawn above.
// The _at forms take the row's address in the shared state space (a 32-bit byte offset, as __cvta_generic_to_shared
// returns it): a kernel that computes its addresses itself (step 3h: XOR swizzle on that offset) passes them as is.
__device__ __forceinline__ void ldmatrix_x4_at(uint32_t r[4], uint32_t shared_address) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address));
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void *row_address) {
    ldmatrix_x4_at(r, (uint32_t)__cvta_generic_to_shared(row_address));
}

// ldmatrix.x4.trans: the same, each matrix transposed on the way: lane 4g + t receives the elements (2t, g) and
// (2t + 1, g) of the matrix as stored, i.e. two neighbouring ROWS of column g. That turns V, stored [key][d], into
// the B operand of P V, which needs two neighbouring keys of one dimension per register.
__device__ __forceinline__ void ldmatrix_x4_trans_at(uint32_t r[4], uint32_t shared_address) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], const void *row_address) {
    ldmatrix_x4_trans_at(r, (uint32_t)__cvta_generic_to_shared(row_address));
}

// mma.m16n8k16: C (16x8, float32) += A (16x16, half, row-major) * B (16x8, half, stored by columns). Per lane:
//
//   A: four 8x8 matrices             B: two 8x8 matrices, B^T as drawn   C: two 8x8 halves, one float each
//            cols 0-7  cols 8-15         (rows of B^T = columns n of B)           cols 0-7
//   rows 0-7   a[0]     a[2]                     k 0-7    k 8-15           rows 0-7   c[0] (col 2t) c[1] (2t+1)
//   rows 8-15  a[1]     a[3]              n 0-7   b[0]     b[1]            rows 8-15  c[2] (col 2t) c[3] (2t+1)
//
//   so lane 4g + t holds A rows g and g + 8, B column g, and C elements (g, 2t), (g, 2t + 1), (g + 8, 2t),
//   (g + 8, 2t + 1). The C layout of two neighbouring mmas (16 columns) is exactly the A layout: that is what lets
//   P go from the first product's accumulators into the second product's A operand without leaving the registers.
__device__ __forceinline__ void mma_m16n8k16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1, __half) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma_m16n8k16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1,
                                             __nv_bfloat16) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats rounded to the half type (to nearest, ties to even) and packed into one register, lo in the low bits.
__device__ __forceinline__ uint32_t pack_pair(float lo, float hi, __half) {
    const __half2 pair = __floats2half2_rn(lo, hi);
    uint32_t bits;
    memcpy(&bits, &pair, sizeof bits);
    return bits;
}
__device__ __forceinline__ uint32_t pack_pair(float lo, float hi, __nv_bfloat16) {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
    uint32_t bits;
    memcpy(&bits, &pair, sizeof bits);
    return bits;
}


// ex2.approx.ftz.f32: 2^x in one instruction of the special-function unit (MUFU.EX2). exp2f(x) compiles to the same
// instruction wrapped in three more (a test for x < -126, and two multiplies that keep a result below 2^-126, a
// float32 subnormal, exact), because the unit itself flushes subnormals to zero; this helper lets it. In a softmax
// the largest p of a row is exp2(0) = 1, so a p below 2^-126 is lost in the row's float32 sums whether it is flushed
// or not. exp2_ftz(-INFINITY) is exactly 0, as a masked score needs.
__device__ __forceinline__ float exp2_ftz(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// cp.async.cg: copies 16 bytes from global to shared memory without passing through registers, asynchronously; with
// src_bytes = 0 it writes 16 zero bytes and reads nothing (rows past the end of the tensor).
__device__ __forceinline__ void cp_async_16(void *shared_destination, const void *global_source, int src_bytes) {
    const uint32_t address = (uint32_t)__cvta_generic_to_shared(shared_destination);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(address), "l"(global_source), "r"(src_bytes));
}
// Closes the group of cp.async issued so far by this thread; wait_all then waits until all of its groups have landed.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

// The first byte of dynamic shared memory at or after `raw` whose shared-space address is a multiple of ALIGN: a
// kernel whose address arithmetic needs aligned tiles (the XOR addresses of step 3h) asks the launch for ALIGN bytes
// more than its tiles and starts them here.
template <int ALIGN> __device__ __forceinline__ uint8_t *align_shared(void *raw) {
    const uint32_t offset = (ALIGN - (uint32_t)__cvta_generic_to_shared(raw) % ALIGN) % ALIGN;
    return static_cast<uint8_t *>(raw) + offset;
}

// --- The LSE of a row at large logits (fa_math.h, score_in_double), in the tensor-core forwards -----------------
// A row's scores are spread over the 4 lanes of its quad (lanes 4g .. 4g + 3, the C layout above), so the key that
// gave the row's max is agreed over the quad: each lane passes the last of its own keys whose score equals the tile's
// max (or -1), and every lane receives the largest of the four, the last such key of the tile, which is the key the
// CPU twins pick. Called by the whole warp.
__device__ __forceinline__ int64_t quad_last_key(int64_t key) {
    key = max(key, (int64_t)__shfl_xor_sync(0xffffffffu, (long long)key, 1));
    return max(key, (int64_t)__shfl_xor_sync(0xffffffffu, (long long)key, 2));
}
__device__ __forceinline__ int quad_last_key(int key) {   // the same, for keys numbered in 32 bits
    key = max(key, __shfl_xor_sync(0xffffffffu, key, 1));
    return max(key, __shfl_xor_sync(0xffffffffu, key, 2));
}

__device__ __forceinline__ float half_to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float half_to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

// scale * q_row . k_row(max_key) in double, from the half values the mma multiplied (fa_half_score_in_double on the
// CPU): the 4 lanes of the row's quad compute it together. Lane t multiplies the 16-byte chunks t, t + 4, t + 8, ...
// of the two rows (CHUNK halves each), with all of its loads in flight at once, and two shuffles add the quad's four
// partial sums. (One lane walking the D products alone would wait for each load in turn, at the end of the kernel,
// where no other work hides the wait: that costs more than the whole search for the max key.) Every product of two
// halves is exact in double, so only the order of the additions differs from the CPU's, in double's last bits.
// Called by the whole warp with the quad's own max_key; max_key < 0 (the row saw no key, or is past S_q) loads
// nothing and gives NaN. Rows of D contiguous elements, 16-byte aligned, as the kernels' contract requires.
template <typename T, int D>
__device__ __forceinline__ double quad_score_in_double(const T *q_row, const T *k, int64_t stride_ks, int64_t max_key,
                                                       float scale, int t) {
    constexpr int CHUNKS = D / CHUNK;
    double dot = 0.0;
    if (max_key >= 0) {
        const T *k_row = k + max_key * stride_ks;
#pragma unroll
        for (int i = 0; i < (CHUNKS + 3) / 4; i++) {
            const int c = 4 * i + t;
            if (c >= CHUNKS) break;
            const uint4 q_chunk = *reinterpret_cast<const uint4 *>(q_row + c * CHUNK);
            const uint4 k_chunk = *reinterpret_cast<const uint4 *>(k_row + c * CHUNK);
            const T *q_halves = reinterpret_cast<const T *>(&q_chunk), *k_halves = reinterpret_cast<const T *>(&k_chunk);
#pragma unroll
            for (int e = 0; e < CHUNK; e++)
                dot += (double)half_to_float(q_halves[e]) * (double)half_to_float(k_halves[e]);
        }
    }
    dot += __shfl_xor_sync(0xffffffffu, dot, 1);
    dot += __shfl_xor_sync(0xffffffffu, dot, 2);
    return max_key < 0 ? nan("") : (double)scale * dot;
}

#endif
