// tma.cuh - phase 7: the Tensor Memory Accelerator (TMA), the mbarriers it reports to, and named barriers; the PTX
// helpers every step from 2 on shares, and the host function that describes a tensor to it.
//
// TMA is a copy engine beside each SM. One thread hands it a "tensor map" (the tensor's address, sizes and strides,
// made once on the host), the coordinates of a box and a shared-memory destination; the engine fetches the whole box
// (here 64 halves x ROWS rows: one column block of a tile), writes it in the 128-byte swizzle wgmma reads
// (wgmma.cuh), fills rows past the end of the tensor with zeros, and counts the bytes it delivered on an mbarrier.
// No thread computes an address or waits in a register: the 128 threads that issued 16-byte cp.async copies in
// step 1 are free.
//
// An mbarrier is a 64-bit counter in shared memory with a phase bit. Here it is used as "the tile has landed":
//   mbarrier_init(bar, 1)              once: one arrival completes a phase;
//   mbarrier_arrive_expect_tx(bar, n)  the issuing thread arrives and announces n bytes to come;
//   tma_load_*(..., bar)               the copies; each delivered byte counts down what was announced;
//   mbarrier_wait(bar, phase)          everyone waits until the phase with that parity has completed: one arrival and
//                                      all n bytes.
// A barrier is reused for every tile that lands in its buffer; its phase parity flips each time.
#ifndef TMA_CUH
#define TMA_CUH

#include <cuda.h>          // CUtensorMap and its enums (types only: no link with the driver library)
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled
#include <stdint.h>

#include "fa_cuda_check.h"
#include "fa_shape.h"
#include "fa_tensor.h"

__device__ __forceinline__ uint32_t smem_address(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void mbarrier_init(uint64_t *bar, uint32_t arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_address(bar)), "r"(arrivals));
}
// The barriers' initialisation must be seen by the copy engine (another proxy) before a copy reports to them.
__device__ __forceinline__ void fence_barrier_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }

__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t *bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_address(bar)), "r"(bytes)
                 : "memory");
}
// A plain arrival (the consumers' "this buffer is free again").
__device__ __forceinline__ void mbarrier_arrive(uint64_t *bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_address(bar)) : "memory");
}
// Spins (in hardware-assisted try_wait steps) until the phase of parity `phase` has completed.
__device__ __forceinline__ void mbarrier_wait(uint64_t *bar, uint32_t phase) {
    asm volatile("{\n"
                 ".reg .pred done;\n"
                 "wait_loop:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra wait_loop;\n"
                 "}\n" ::"r"(smem_address(bar)),
                 "r"(phase)
                 : "memory");
}

// One box of a 4D tensor map (d, s, h, b: the innermost first) into shared memory; the engine counts its bytes on
// bar. d0 is the first dimension of the box (0 or 64), s0 its first row.
__device__ __forceinline__ void tma_load_4d(void *destination, const CUtensorMap *map, int d0, int s0, int h, int b,
                                            uint64_t *bar) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, "
                 "%5}], [%6];\n" ::"r"(smem_address(destination)),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(d0), "r"(s0), "r"(h), "r"(b), "r"(smem_address(bar))
                 : "memory");
}

// Named barriers, the hardware's 16 per block (0 is __syncthreads's): bar.sync waits until `threads` threads have
// reached barrier `id` (counting those that only arrive); bar.arrive counts this thread and goes on. Step 4's two
// consumer warpgroups take turns on them (one syncs while the other arrives: 256 threads); the backward's warpgroups
// meet their own 128 threads on one, or tell each other they are done with a buffer.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// The other direction, and a reduction on the way (step 6a's dQ): the engine reads one box out of shared memory and
// ADDS it, element by element, into the 4D float32 tensor of the map, at L2 (the tensor map's data type says float32,
// the instruction says add). Rows past the end of the tensor are left alone. The read of shared memory, and the adds,
// finish later: the issuing thread groups its reduce-adds (bulk_commit) and waits on the groups (bulk_wait_read: the
// box may be overwritten; bulk_wait: the adds are done). Before the issue, every thread that wrote the box fences
// its stores into the async proxy (fence_proxy_async, wgmma.cuh) and a barrier follows, as for wgmma.
__device__ __forceinline__ void tma_reduce_add_4d(const CUtensorMap *map, const void *source, int d0, int s0, int h,
                                                  int b) {
    asm volatile("cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.bulk_group [%0, {%1, %2, %3, %4}], [%5];\n"
                 ::"l"(reinterpret_cast<uint64_t>(map)), "r"(d0), "r"(s0), "r"(h), "r"(b), "r"(smem_address(source))
                 : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// At most N groups of this thread still reading shared memory.
template <int N> __device__ __forceinline__ void bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
// At most N groups of this thread not yet complete (their adds done).
template <int N> __device__ __forceinline__ void bulk_wait() {
    asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}

// --- The host side: a [B, H, S, D] tensor with its strides, described as TMA boxes of box_columns x box_rows -------
// The driver API's cuTensorMapEncodeTiled, found through the runtime (cudaGetDriverEntryPointByVersion), so the
// build links no extra library. Boxes land in (or leave) shared memory in the 128-byte swizzle, so a box row is at
// most 128 bytes: 64 halves, or 32 floats.
static inline CUtensorMap encode_tensor_map(const void *base, CUtensorMapDataType type, int element_bytes,
                                            fa_strides strides, const fa_shape *shape, int64_t S, int box_columns,
                                            int box_rows) {
    static PFN_cuTensorMapEncodeTiled_v12000 encode = NULL;
    if (!encode) {
        cudaDriverEntryPointQueryResult found;
        FA_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void **)&encode, 12000,
                                                       cudaEnableDefault, &found));
        if (found != cudaDriverEntryPointSuccess || !encode)
            fa_die("the CUDA driver has no cuTensorMapEncodeTiled (TMA needs CUDA 12 or newer)");
    }
    const cuuint64_t dims[4] = {(cuuint64_t)shape->D, (cuuint64_t)S, (cuuint64_t)shape->H, (cuuint64_t)shape->B};
    // Strides in bytes of dimensions 1..3 (dimension 0, d, is contiguous); TMA needs them multiples of 16.
    const cuuint64_t byte_strides[3] = {(cuuint64_t)(strides.s * element_bytes),
                                        (cuuint64_t)(strides.h * element_bytes),
                                        (cuuint64_t)(strides.b * element_bytes)};
    const cuuint32_t box[4] = {(cuuint32_t)box_columns, (cuuint32_t)box_rows, 1, 1}, element_strides[4] = {1, 1, 1, 1};
    CUtensorMap map;
    const CUresult r = encode(&map, type, 4, const_cast<void *>(base), dims, byte_strides,
                              box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                              CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        fa_die("cuTensorMapEncodeTiled refused the tensor (error %d): TMA needs 16-byte aligned rows and strides", (int)r);
    return map;
}

// A half tensor (Q, K, V) in boxes of 64 x box_rows: what the forward's and the backward's loads read.
static inline CUtensorMap make_tensor_map(const void *base, fa_strides strides, const fa_shape *shape, int64_t S,
                                          int box_rows) {
    return encode_tensor_map(base, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, strides, shape, S, 64, box_rows);
}
// A float32 tensor (dQ) in boxes of box_columns x box_rows.
static inline CUtensorMap make_float_tensor_map(float *base, fa_strides strides, const fa_shape *shape, int64_t S,
                                                int box_columns, int box_rows) {
    return encode_tensor_map(base, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, strides, shape, S, box_columns, box_rows);
}

#endif
