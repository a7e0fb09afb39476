// 4_backward_cuda.cu - phase 5, step 4, on the GPU: the backward pass on tensor cores (mma.sync), fp16 or bf16.
//
// What it adds: phase 4's backward (phase4_backward/backward_dkdv_cuda.cu, backward_dq_cuda.cu) with every product
//   on mma.m16n8k16, in the fragments of step 2 (phase5_tensor_cores/2_mma_cuda.cu). Five products per tile pair:
//
//     product          A (16 x 16, row-major)        B (16 x 8, "by columns")          how B is fetched
//     S^T  = K Q^T     K rows of the warp [key][d]   Q^T: column = a query, along d    ldmatrix      (Q is [q][d])
//     dV  += P^T dO    P^T: accumulator -> A         dO:  column = a dim, along q      ldmatrix.trans (dO is [q][d])
//     dP^T = V dO^T    V rows of the warp [key][d]   dO^T: column = a query, along d   ldmatrix      (dO is [q][d])
//     dK  += dS^T Q    dS^T: accumulator -> A        Q:   column = a dim, along q      ldmatrix.trans (Q is [q][d])
//     dQ  += dS K      dS: from dS^T in SHARED       K:   column = a dim, along key    ldmatrix.trans (K is [key][d])
//
//   The dK/dV pass works on the transposed problem (keys are the rows, 16 per warp): then P^T and dS^T come out of
//   their mma as accumulators in exactly the layout of the next product's A operand, as P does in the forward, and
//   never leave the registers. Every B operand is a tile already in shared memory, row-major [row][d]; ldmatrix reads
//   it as it is when the product sums along d, and ldmatrix.trans when it sums along the rows. The one transpose
//   that ldmatrix cannot do is dQ's A operand in the atomic variant: dQ = dS K needs dS with queries as rows, and a
//   warp holds dS^T for its 16 keys and all BLOCK_M queries, while the rows of dQ it would need are spread over all
//   four warps. So dS^T goes to shared memory (half, [key][query]) and every warp reads back the dS rows of its part
//   of dQ with ldmatrix.trans. The deterministic dQ pass needs no such trip: it works in the forward's orientation
//   (queries are the rows), recomputes S and dP, and dS comes out as the A operand of dS K directly.
// The pipeline of step 3: shared tiles XOR-swizzled (swizzle(): ldmatrix without bank conflicts) and loaded with
//   cp.async into two buffers, the next tile of the inner loop (Q and dO in the dK/dV pass, K and V in the dQ pass)
//   arriving while this one is computed.
// Between the products, every score element gets p = exp2(...) and ds = p (dp - Delta) (p_and_ds_by_keys,
//   p_and_ds_by_queries). Only tiles on the diagonal or on the edge of S_q or S_k need the mask; the interior tiles,
//   most of them, take a version of that element loop with no test in it.
// This file: the preprocess (Delta = rowsum(dO * O)) and the passes in order, as phase 4's backward_cuda.cu. The
//   passes: 4_backward_dkdv_cuda.cu (dK, dV; dQ with atomic additions in the atomic variant) and 4_backward_dq_cuda.cu
//   (the deterministic dQ); what they share: backward_tiles.cuh.
// CPU twin:  phase5_tensor_cores/4_backward_cpu.c
// Diff:      diff -u phase4_backward/backward_dkdv_cuda.cu phase5_tensor_cores/4_backward_dkdv_cuda.cu
//            diff -u phase4_backward/backward_dq_cuda.cu phase5_tensor_cores/4_backward_dq_cuda.cu
// Run:       build/bin/phase5_tensor_cores --impl cuda --step 4 --dtype fp16 --B 4 --H 16 --S 4096 --D 64 --dq both
//
// Needs sm_80 or newer. Lane L of a warp is "g = L / 4, t = L % 4" in every fragment drawn below
// and in common/fa_mma.cuh (the PTX helpers).
#include "backward_tiles.cuh"   // the tiles, loads and mma loops both passes share

// ---------------------------------------------------------------------------------------------------------------
// Preprocess: Delta_i = sum_d dO_id O_id, one warp per query row (lanes along d, then a butterfly sum); with
// zero_dq, also dQ_i = 0 (the atomic variant adds into it). grid: (row blocks of WARPS rows, heads of this launch).
template <typename T, int D>
__global__ void __launch_bounds__(THREADS)
backward_preprocess_kernel(const float *__restrict__ o, fa_strides o_strides, const T *__restrict__ dout,
                           fa_strides do_strides, float *__restrict__ delta, float *__restrict__ dq,
                           fa_strides dq_strides, int64_t S_q, int64_t H, int64_t bh_first, int zero_dq) {
    const int64_t bh = bh_first + blockIdx.y, b = bh / H, h = bh % H;
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int64_t row = (int64_t)blockIdx.x * WARPS + warp;
    if (row >= S_q) return;   // a whole warp leaves together: the shuffles below see every lane
    const float *o_i = o + b * o_strides.b + h * o_strides.h + row * o_strides.s;
    const T *do_i = dout + b * do_strides.b + h * do_strides.h + row * do_strides.s;
    float sum = 0.0f;
    for (int d = lane; d < D; d += WARP_SIZE) sum += (float)do_i[d] * o_i[d];
#pragma unroll
    for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2) sum += __shfl_xor_sync(FULL_WARP, sum, offset);
    if (lane == 0) delta[bh * S_q + row] = sum;
    if (zero_dq) {
        float *dq_i = dq + b * dq_strides.b + h * dq_strides.h + row * dq_strides.s;
        for (int d = lane; d < D; d += WARP_SIZE) dq_i[d] = 0.0f;
    }
}

// ---------------------------------------------------------------------------------------------------------------
// The kernels read half rows 16 bytes at a time and read and write float32 rows as float2s (the preprocess reads O
// by elements): each row must start on that many bytes, with its D elements next to each other.
static void check_rows(const char *name, const void *x, fa_strides strides, int element_bytes, int row_align) {
    const int64_t per = row_align / element_bytes;
    const int aligned = ((uintptr_t)x % row_align == 0) && strides.b % per == 0 && strides.h % per == 0 &&
                        strides.s % per == 0;
    if (strides.d != 1 || !aligned)
        fa_die("the tensor-core backward needs %s with stride d = 1, the other strides multiples of %lld and a "
               "%d-byte aligned pointer (got strides %lld, %lld, %lld, %lld)", name, (long long)per, row_align,
               (long long)strides.b, (long long)strides.h, (long long)strides.s, (long long)strides.d);
}

template <typename T, int D>
static void launch_preprocess(const fa_shape *shape, int atomic_dq, const tc_backward_tensors *t) {
    const int64_t BH = shape->B * shape->H, S_q = shape->Sq;
    const unsigned int row_blocks = (unsigned int)((S_q + WARPS - 1) / WARPS);
    for (int64_t bh_first = 0; bh_first < BH; bh_first += MAX_GRID_Y) {
        const unsigned int heads = heads_in_launch(BH, bh_first);   // fa_contract.h: the grid limit
        backward_preprocess_kernel<T, D><<<dim3(row_blocks, heads), THREADS>>>(
            t->o, t->o_strides, static_cast<const T *>(t->dout), t->do_strides, t->delta, t->dq, t->dq_strides, S_q,
            shape->H, bh_first, atomic_dq);
        FA_CUDA_CHECK_LAUNCH();
    }
}

template <typename T>
static void preprocess_head_dim(const fa_shape *shape, int atomic_dq, const tc_backward_tensors *t) {
    switch (shape->D) {
    case 64: launch_preprocess<T, 64>(shape, atomic_dq, t); break;
    case 128: launch_preprocess<T, 128>(shape, atomic_dq, t); break;
    default: fa_die("the tensor-core backward supports D in {64, 128}, not %lld", (long long)shape->D);
    }
}

// The checks every entry makes, then the preprocess; returns whether dQ is the atomic variant.
static int check_and_preprocess(const fa_shape *shape, int dtype, int block_m, int block_n, int dq_mode,
                                const tc_backward_tensors *t) {
    if (!tc_backward_cuda_supports_tiles(block_m, block_n))
        fa_die("the tensor-core backward is compiled for BLOCK_M x BLOCK_N = %s, not %d x %d",
               TC_BACKWARD_CUDA_TILES_TEXT, block_m, block_n);
    if (dq_mode != FA_DQ_DETERMINISTIC && dq_mode != FA_DQ_ATOMIC)
        fa_die("the tensor-core backward runs one dQ variant at a time (deterministic or atomic)");
    if (dtype != FA_DTYPE_FP16 && dtype != FA_DTYPE_BF16)
        fa_die("the tensor-core backward takes fp16 or bf16 inputs, not %s", fa_dtype_name(dtype));
    check_rows("Q", t->q, t->q_strides, 2, 16);
    check_rows("K", t->k, t->k_strides, 2, 16);
    check_rows("V", t->v, t->v_strides, 2, 16);
    check_rows("dO", t->dout, t->do_strides, 2, 16);
    check_rows("O", t->o, t->o_strides, 4, 4);
    check_rows("dQ", t->dq, t->dq_strides, 4, 8);
    check_rows("dK", t->dk, t->dk_strides, 4, 8);
    check_rows("dV", t->dv, t->dv_strides, 4, 8);
    const int atomic_dq = dq_mode == FA_DQ_ATOMIC;
    if (dtype == FA_DTYPE_FP16)
        preprocess_head_dim<__half>(shape, atomic_dq, t);
    else
        preprocess_head_dim<__nv_bfloat16>(shape, atomic_dq, t);
    return atomic_dq;
}

extern "C" void flash_backward_tc_cuda(const fa_shape *shape, int dtype, int block_m, int block_n, int dq_mode,
                                       const tc_backward_tensors *t) {
    const int atomic_dq = check_and_preprocess(shape, dtype, block_m, block_n, dq_mode, t);
    backward_tc_dkdv_cuda(shape, dtype, atomic_dq, t);
    if (!atomic_dq) backward_tc_dq_cuda(shape, dtype, t);
}

// Step 4b (4b_backward_dkdv_cuda.cu, 4b_backward_dq_cuda.cu): the same preprocess, then step 4b's passes.
extern "C" void flash_backward_lean_cuda(const fa_shape *shape, int dtype, int block_m, int block_n, int dq_mode,
                                         const tc_backward_tensors *t) {
    const int atomic_dq = check_and_preprocess(shape, dtype, block_m, block_n, dq_mode, t);
    backward_lean_dkdv_cuda(shape, dtype, atomic_dq, t);
    if (!atomic_dq) backward_lean_dq_cuda(shape, dtype, t);
}

// Step 4c (4c_backward_dq_cuda.cu): step 4b's dK/dV pass, then step 4c's dQ pass (Q and dO held in registers).
extern "C" void flash_backward_held_cuda(const fa_shape *shape, int dtype, int block_m, int block_n, int dq_mode,
                                         const tc_backward_tensors *t) {
    const int atomic_dq = check_and_preprocess(shape, dtype, block_m, block_n, dq_mode, t);
    backward_lean_dkdv_cuda(shape, dtype, atomic_dq, t);
    if (!atomic_dq) backward_held_dq_cuda(shape, dtype, t);
}

// Step 4d (4d_backward_dkdv_cuda.cu): step 4d's dK/dV pass (room for one more block per SM), then step 4c's dQ pass.
extern "C" void flash_backward_occupancy_cuda(const fa_shape *shape, int dtype, int block_m, int block_n,
                                              int dq_mode, const tc_backward_tensors *t) {
    const int atomic_dq = check_and_preprocess(shape, dtype, block_m, block_n, dq_mode, t);
    backward_occupancy_dkdv_cuda(shape, dtype, atomic_dq, t);
    if (!atomic_dq) backward_held_dq_cuda(shape, dtype, t);
}
