// wgmma.cuh - phase 7: the Hopper PTX helpers every step shares, one instruction each, with the layouts they assume.
//
// wgmma is the H100's own tensor-core instruction. Where mma.sync (phase 5) is issued by one warp for a 16x8x16
// product with both operands in registers, wgmma is issued by a WARPGROUP (4 consecutive warps, 128 threads, the
// first warp's index a multiple of 4) for a 64xNx16 product, reads its B operand (and, in the _ss form, its A
// operand) straight from shared memory through a 64-bit "matrix descriptor", and runs asynchronously: the warps go
// on issuing instructions while the tensor cores work, and wait for the result only when they need it.
//
// The protocol, in this order, around every batch of wgmmas:
//   keep_in_registers()    the accumulators are pinned in their registers before the batch too: otherwise the
//                          compiler may move them between wgmmas, and then has to insert fences of its own ("warpgroup.
//                          arrive is injected", ptxas says), which serialise the batch;
//   wgmma_fence()          the registers the wgmmas read or accumulate into were written by ordinary instructions
//                          (the softmax rescaling O, P packed into registers): make those writes visible first;
//   wgmma_m64n64k16_*()    issue the products (they queue up);
//   wgmma_commit()         close the batch into one "wgmma group";
//   wgmma_wait<N>()        wait until at most N groups are still in flight (N = 0: all done);
//   keep_in_registers()    tell the compiler the accumulators changed only now, so that it reads them after the wait.
// Shared memory written by ordinary stores or cp.async is seen by wgmma only after fence_proxy_async() in each
// writing thread, followed by a barrier: wgmma reads through the "async proxy", a different path into shared memory.
#ifndef WGMMA_CUH
#define WGMMA_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

// --- Shared memory: the 128-byte swizzle, and the descriptor that tells wgmma where a tile is --------------------
//
// wgmma reads tiles laid out in "swizzle atoms": 8 rows of 128 bytes (64 halves), 1024 bytes, starting on a
// 1024-byte boundary, in which the 16-byte chunk c of row r is stored at chunk position c ^ (r % 8):
//
//   row 0 stores its chunks 0..7 at positions   0 1 2 3 4 5 6 7
//   row 1                                       1 0 3 2 5 4 7 6
//   ...
//   row 7                                       7 6 5 4 3 2 1 0
//
// (the same XOR as phase 5 step 3's swizzle, with the row length fixed at 128 bytes). A tile of ROWS rows of D halves
// is stored as D / 64 column blocks, each ROWS x 64 halves, one after the other: rows of one block are 128 bytes
// apart, 8 rows make an atom, atoms follow each other every 1024 bytes.
#define ATOM_HALVES 64      // halves in one 128-byte row of a swizzle atom
#define ATOM_CHUNKS 8       // 16-byte chunks in that row
#define ATOM_ROWS 8         // rows in one atom (the XOR runs over them)
#define ATOM_BYTES 1024

// Where chunk `chunk` (halves 8 chunk .. 8 chunk + 7 of the row) of row `row` of a ROWS-row tile lives, in halves.
template <int ROWS> __device__ __forceinline__ int swizzle(int row, int chunk) {
    return (chunk / ATOM_CHUNKS) * ROWS * ATOM_HALVES + row * ATOM_HALVES +
           ((chunk % ATOM_CHUNKS) ^ (row % ATOM_ROWS)) * 8;
}

// The matrix descriptor (PTX ISA, "Matrix Descriptor Format"), 64 bits:
//   bits  0-13  start address in shared memory, >> 4
//   bits 16-29  leading-dimension byte offset, >> 4
//   bits 32-45  stride-dimension byte offset, >> 4
//   bits 62-63  swizzle mode: 1 = 128-byte swizzle
// For a "K-major" operand (the sum runs along the contiguous dimension: Q and K in S = Q K^T) the stride offset is
// the distance between consecutive groups of 8 rows (1024 bytes here) and the leading offset is unused (1 by
// convention). For an "MN-major" operand (the sum runs across rows: V in O = P V, summed over keys) the stride offset
// is again the distance between groups of 8 rows (8 keys, 1024 bytes) and the leading offset the distance between
// 64-column blocks (ROWS x 128 bytes). Stepping 16 halves along a K-major row inside an atom is a start address 32
// bytes further on: the hardware applies the XOR to the address it computes, so the atom's swizzle still holds.
__device__ __forceinline__ uint64_t smem_descriptor(const void *start, uint32_t leading_bytes, uint32_t stride_bytes) {
    const uint32_t address = (uint32_t)__cvta_generic_to_shared(start);
    return (uint64_t)((address & 0x3FFFF) >> 4) | (uint64_t)(leading_bytes >> 4) << 16 |
           (uint64_t)(stride_bytes >> 4) << 32 | (uint64_t)1 << 62;
}

// The descriptor of the operand that starts `bytes` further on in shared memory than `base`'s: only the start address
// changes (bits 0-13, in 16-byte units), so one addition moves a descriptor built once along a tile (step 6d), where
// smem_descriptor() converts, masks and shifts an address for every wgmma. The tiles of a block lie far below the
// 256 KiB the field covers, so the sum never carries into the next field.
__device__ __forceinline__ uint64_t descriptor_at(uint64_t base, uint32_t bytes) { return base + (bytes >> 4); }

// --- The asynchronous protocol ------------------------------------------------------------------------------------
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// The compiler does not know that wgmma_wait() is when the accumulators change: an empty asm that "writes" each of
// them pins every later read after the wait.
template <int BLOCKS> __device__ __forceinline__ void keep_in_registers(float d[BLOCKS][4]) {
#pragma unroll
    for (int b = 0; b < BLOCKS; b++)
#pragma unroll
        for (int e = 0; e < 4; e++) asm volatile("" : "+f"(d[b][e])::"memory");
}
// The same for an A operand in registers that a wgmma still in flight reads (step 4): kept where it is until the wait.
template <int BLOCKS> __device__ __forceinline__ void keep_in_registers(uint32_t a[BLOCKS][4]) {
#pragma unroll
    for (int b = 0; b < BLOCKS; b++)
#pragma unroll
        for (int e = 0; e < 4; e++) asm volatile("" : "+r"(a[b][e])::"memory");
}

// --- Registers between warp roles --------------------------------------------------------------------------------
// setmaxnreg moves registers between the warpgroups of a block: a warpgroup that needs few (a producer that only
// issues copies) gives them back with .dec, one that needs many (a consumer holding S, P and O) takes them with .inc.
// The count is per thread, a multiple of 8 from 24 to 256; every thread of the warpgroup executes it. It needs a
// register cap at the kernel's entry (__launch_bounds__ with a minimum of 1 block per SM).
template <int REGISTERS> __device__ __forceinline__ void setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(REGISTERS));
}
template <int REGISTERS> __device__ __forceinline__ void setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(REGISTERS));
}

// --- wgmma.mma_async.m64n64k16: D (64 x 64, float32) += A (64 x 16) * B (16 x 64), fp16 or bf16 -------------------
//
// The accumulator D, per warpgroup: warp w (0-3) holds rows 16w .. 16w + 15, and inside the warp lane 4g + t holds
// what it would hold for eight side-by-side mma.m16n8k16 (phase 5): d[j] is the 16 x 8 block of columns 8j .. 8j + 7,
//
//            cols 8j + 2t   cols 8j + 2t + 1
//   row g      d[j][0]        d[j][1]
//   row g + 8  d[j][2]        d[j][3]
//
// so phase 5's fragment code (the mask, the online softmax, P packed into the A operand) runs on it unchanged.
// A from registers (the _rs form), per warp, 16 rows x 16: a[0] = rows g, cols 2t, 2t + 1; a[1] = rows g + 8, the
// same cols; a[2] = row g, cols 2t + 8, 2t + 9; a[3] = row g + 8, those cols (mma.m16n8k16's A, again).
// The four immediates after the descriptors are scale-d (1: D += A B), the scales of A and B (1) and, for shared
// memory operands, whether A and B are transposed (MN-major): S = Q K^T reads both K-major (0, 0); O += P V reads V
// MN-major (1). The K-major _ss forms take scale-d as SCALE_D: 0 makes the instruction D = A B, the first of a
// product, with no accumulator to set to zero before it (step 4f).
template <int SCALE_D = 1>
__device__ __forceinline__ void wgmma_m64n64k16_ss(float d[8][4], uint64_t desc_a, uint64_t desc_b, __half) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
                 "%32, %33, %34, 1, 1, 0, 0;\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
                   "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
                   "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
                   "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
                   "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
                   "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
                   "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
                   "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
                 : "l"(desc_a), "l"(desc_b), "n"(SCALE_D));
}
template <int SCALE_D = 1>
__device__ __forceinline__ void wgmma_m64n64k16_ss(float d[8][4], uint64_t desc_a, uint64_t desc_b, __nv_bfloat16) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
                 "%32, %33, %34, 1, 1, 0, 0;\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
                   "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
                   "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
                   "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
                   "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
                   "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
                   "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
                   "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
                 : "l"(desc_a), "l"(desc_b), "n"(SCALE_D));
}
__device__ __forceinline__ void wgmma_m64n64k16_rs(float d[8][4], const uint32_t a[4], uint64_t desc_b, __half) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
                 "{%32, %33, %34, %35}, %36, 1, 1, 1, 1;\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
                   "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
                   "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
                   "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
                   "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
                   "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
                   "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
                   "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
}
__device__ __forceinline__ void wgmma_m64n64k16_rs(float d[8][4], const uint32_t a[4], uint64_t desc_b, __nv_bfloat16) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
                 "{%32, %33, %34, %35}, %36, 1, 1, 1, 1;\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
                   "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
                   "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
                   "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
                   "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
                   "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
                   "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
                   "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
}

// Both operands from shared memory and both MN-major (transpose bits 1, 1): A's M and B's N run along the stored rows,
// the sum across them. Step 6a's dQ = dS K reads dS^T [key][query] as A (M = queries) and K [key][d] as B (N = d),
// both summed over the keys, their rows; the descriptors are the MN-major ones (the forward's V descriptor).
__device__ __forceinline__ void wgmma_m64n64k16_ss_mn(float d[8][4], uint64_t desc_a, uint64_t desc_b, __half) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
                 "%32, %33, 1, 1, 1, 1, 1;\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
                   "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
                   "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
                   "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
                   "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
                   "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
                   "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
                   "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
                 : "l"(desc_a), "l"(desc_b));
}
__device__ __forceinline__ void wgmma_m64n64k16_ss_mn(float d[8][4], uint64_t desc_a, uint64_t desc_b, __nv_bfloat16) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
                 "%32, %33, 1, 1, 1, 1, 1;\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
                   "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
                   "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
                   "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
                   "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
                   "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
                   "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
                   "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
                 : "l"(desc_a), "l"(desc_b));
}

// The same product with 32 columns (d[j], j = 0 .. 3: columns 8j .. 8j + 7, as above), both operands MN-major: step
// 6c splits dQ's D columns between two warpgroups, 32 each at D = 64. Its B starts 32 columns (64 bytes) into a
// 64-column block: a start address inside the atom, as the K-major steps along a row are (the XOR is applied to the
// address the hardware computes).
__device__ __forceinline__ void wgmma_m64n32k16_ss_mn(float d[4][4], uint64_t desc_a, uint64_t desc_b, __half) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
                 "%16, %17, 1, 1, 1, 1, 1;\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
                   "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
                   "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
                   "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3])
                 : "l"(desc_a), "l"(desc_b));
}
__device__ __forceinline__ void wgmma_m64n32k16_ss_mn(float d[4][4], uint64_t desc_a, uint64_t desc_b, __nv_bfloat16) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
                 "%16, %17, 1, 1, 1, 1, 1;\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
                   "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
                   "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
                   "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3])
                 : "l"(desc_a), "l"(desc_b));
}

// --- wgmma.mma_async.m64n128k16: the same product with 128 columns (step 4a) ------------------------------------
//
// The layout is the m64n64k16 one above with sixteen 8-column blocks instead of eight: d[j] is columns 8j .. 8j + 7.
// What the width changes: a wgmma reads its shared-memory operands once per instruction. m64n64k16 in the _ss form
// reads A (64 x 16 halves, 2 KiB) and B (2 KiB) for 64 x 64 x 16 products, 32 clocks of an SM's tensor cores at
// their peak: 128 bytes a clock, what an SM's shared memory delivers. m64n128k16 reads A once for 128 columns:
// 6 KiB in 64 clocks, 96 bytes a clock. (At the speeds phase 7 reaches, chapter 09 finds no gain from it.)
template <int SCALE_D = 1>
__device__ __forceinline__ void wgmma_m64n128k16_ss(float d[16][4], uint64_t desc_a, uint64_t desc_b, __half) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
                 "%64, %65, %66, 1, 1, 0, 0;\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
                   "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
                   "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
                   "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
                   "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
                   "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
                   "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
                   "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]),
                   "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]),
                   "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]),
                   "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]),
                   "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]),
                   "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]),
                   "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]),
                   "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]),
                   "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
                 : "l"(desc_a), "l"(desc_b), "n"(SCALE_D));
}
template <int SCALE_D = 1>
__device__ __forceinline__ void wgmma_m64n128k16_ss(float d[16][4], uint64_t desc_a, uint64_t desc_b, __nv_bfloat16) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
                 "%64, %65, %66, 1, 1, 0, 0;\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
                   "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
                   "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
                   "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
                   "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
                   "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
                   "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
                   "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]),
                   "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]),
                   "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]),
                   "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]),
                   "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]),
                   "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]),
                   "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]),
                   "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]),
                   "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
                 : "l"(desc_a), "l"(desc_b), "n"(SCALE_D));
}
__device__ __forceinline__ void wgmma_m64n128k16_rs(float d[16][4], const uint32_t a[4], uint64_t desc_b, __half) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
                 "{%64, %65, %66, %67}, %68, 1, 1, 1, 1;\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
                   "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
                   "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
                   "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
                   "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
                   "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
                   "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
                   "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]),
                   "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]),
                   "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]),
                   "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]),
                   "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]),
                   "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]),
                   "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]),
                   "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]),
                   "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
}
__device__ __forceinline__ void wgmma_m64n128k16_rs(float d[16][4], const uint32_t a[4], uint64_t desc_b, __nv_bfloat16) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
                 "{%64, %65, %66, %67}, %68, 1, 1, 1, 1;\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
                   "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
                   "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
                   "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
                   "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
                   "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
                   "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
                   "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]),
                   "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]),
                   "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]),
                   "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]),
                   "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]),
                   "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]),
                   "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]),
                   "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]),
                   "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
}

// --- m64n80k16: 80 columns, for Q tiles of 80 queries (step 6j) ------------------------------------------------
//
// The m64n64k16 layout with ten 8-column blocks: d[j] is columns 8j .. 8j + 7. wgmma's N may be any multiple of 8 up
// to 256; 80 is what a backward Q tile of 80 queries needs (S^T and dP^T with the queries as N, and dQ^T with them as
// N too). The K-major _ss form, as m64n64k16_ss, and the _ss_mn form (both operands MN-major), as m64n64k16_ss_mn.
template <int SCALE_D = 1>
__device__ __forceinline__ void wgmma_m64n80k16_ss(float d[10][4], uint64_t desc_a, uint64_t desc_b, __half) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n80k16.f32.f16.f16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39}, "
                 "%40, %41, %42, 1, 1, 0, 0;\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
                   "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
                   "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
                   "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
                   "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
                   "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
                   "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
                   "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]),
                   "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]),
                   "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3])
                 : "l"(desc_a), "l"(desc_b), "n"(SCALE_D));
}
template <int SCALE_D = 1>
__device__ __forceinline__ void wgmma_m64n80k16_ss(float d[10][4], uint64_t desc_a, uint64_t desc_b, __nv_bfloat16) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n80k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39}, "
                 "%40, %41, %42, 1, 1, 0, 0;\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
                   "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
                   "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
                   "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
                   "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
                   "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
                   "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
                   "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]),
                   "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]),
                   "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3])
                 : "l"(desc_a), "l"(desc_b), "n"(SCALE_D));
}
__device__ __forceinline__ void wgmma_m64n80k16_ss_mn(float d[10][4], uint64_t desc_a, uint64_t desc_b, __half) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n80k16.f32.f16.f16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39}, "
                 "%40, %41, 1, 1, 1, 1, 1;\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
                   "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
                   "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
                   "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
                   "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
                   "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
                   "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
                   "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]),
                   "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]),
                   "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3])
                 : "l"(desc_a), "l"(desc_b));
}
__device__ __forceinline__ void wgmma_m64n80k16_ss_mn(float d[10][4], uint64_t desc_a, uint64_t desc_b, __nv_bfloat16) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n80k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39}, "
                 "%40, %41, 1, 1, 1, 1, 1;\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
                   "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
                   "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
                   "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
                   "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
                   "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
                   "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
                   "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]),
                   "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]),
                   "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3])
                 : "l"(desc_a), "l"(desc_b));
}


// One wgmma of COLUMNS output columns, 64, 80 or 128 (steps 4a on: all of a 128-key tile, or all of D, in one
// instruction; 6j: an 80-query tile): d points at the first of its COLUMNS / 8 accumulator fragments.
template <int COLUMNS, typename T, int SCALE_D = 1>
__device__ __forceinline__ void wgmma_ss(float d[][4], uint64_t desc_a, uint64_t desc_b, T type) {
    static_assert(COLUMNS == 64 || COLUMNS == 80 || COLUMNS == 128, "a wgmma of 64, 80 or 128 columns");
    if constexpr (COLUMNS == 128) wgmma_m64n128k16_ss<SCALE_D>(d, desc_a, desc_b, type);
    else if constexpr (COLUMNS == 80) wgmma_m64n80k16_ss<SCALE_D>(d, desc_a, desc_b, type);
    else wgmma_m64n64k16_ss<SCALE_D>(d, desc_a, desc_b, type);
}
template <int COLUMNS, typename T>
__device__ __forceinline__ void wgmma_rs(float d[][4], const uint32_t a[4], uint64_t desc_b, T type) {
    if constexpr (COLUMNS == 128) wgmma_m64n128k16_rs(d, a, desc_b, type);
    else wgmma_m64n64k16_rs(d, a, desc_b, type);
}
// Both operands MN-major, 32, 64 or 80 columns (step 6c's share of dQ: D / 2 columns; 6j's dQ^T: 80 queries).
template <int COLUMNS, typename T>
__device__ __forceinline__ void wgmma_ss_mn(float d[][4], uint64_t desc_a, uint64_t desc_b, T type) {
    static_assert(COLUMNS == 32 || COLUMNS == 64 || COLUMNS == 80, "a wgmma of 32, 64 or 80 columns");
    if constexpr (COLUMNS == 32) wgmma_m64n32k16_ss_mn(d, desc_a, desc_b, type);
    else if constexpr (COLUMNS == 80) wgmma_m64n80k16_ss_mn(d, desc_a, desc_b, type);
    else wgmma_m64n64k16_ss_mn(d, desc_a, desc_b, type);
}

#endif
