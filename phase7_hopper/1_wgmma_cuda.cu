// 1_wgmma_cuda.cu - phase 7, step 1, on the GPU: the tensor-core forward on Hopper's own instruction, wgmma, fed
// straight from shared memory, fp16 or bf16 inputs.
//
// What it changes against phase 5's last forward step (phase5_tensor_cores/3_pipeline_cuda.cu):
//   - S = Q K^T and O += P V are wgmma.mma_async.m64n64k16 (wgmma.cuh): one instruction for a whole warpgroup, 64
//     query rows by 64 keys (or 64 dimensions) by 16, where mma.sync covered 16 x 8 x 16 for one warp. Q and K are
//     read by the tensor cores from shared memory through descriptors: no ldmatrix, no Q fragments held in registers.
//     P stays in registers, as the A operand of P V, exactly as in phase 5.
//   - the shared-memory tiles use wgmma's 128-byte swizzle atoms (wgmma.cuh's swizzle: the same XOR, with a D = 128
//     row split into two 64-half column blocks);
//   - the wgmma protocol: fence, issue, commit, wait; and fence.proxy.async after the cp.async copies land.
// Everything else is phase 5 step 3's: the cp.async double buffer, the online softmax on the accumulator fragments,
// exp2 with the scale folded in, the causal stages, the LSE. The tensor cores wait for the softmax and the softmax
// for the tensor cores: the later steps overlap them.
// CPU twin:  phase5_tensor_cores/3_pipeline_cpu.c (the same rounding points: P rounded to the half type before P V,
//            float32 accumulation; only the order of the sums inside a product differs)
// Diff:      diff -u phase5_tensor_cores/3_pipeline_cuda.cu phase7_hopper/1_wgmma_cuda.cu
// Run:       build/bin/phase7_hopper --impl cuda --step 1 --dtype bf16 --B 4 --H 16 --S 4096 --D 128
//
// Needs sm_90a (an H100 or H200): built only for it. Thread mapping: block = BLOCK_M / 64 warpgroups; warpgroup wg
// owns query rows q_start + 64wg .. + 63 and warp w of the block rows q_start + 16w .. 16w + 15, as in phase 5; lane
// L of a warp is "g = L / 4, t = L % 4" in every fragment.
#include "fa_cuda_check.h"
#include "fa_mma.cuh"    // pack_pair, cp.async, the sizes of one mma (wgmma keeps its fragments)
#include "fa_warp.cuh"   // WARP_SIZE, FULL_WARP
#include "fa_half.h"
#include "fa_contract.h"
#include "hopper.h"
#include "max_key.cuh"
#include "wgmma.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define WARPGROUP_ROWS 64   // query rows per warpgroup: the M of wgmma.m64n64k16
#define WGMMA_N 64          // columns of one wgmma's output: 64 keys (S = Q K^T) or 64 dimensions (O += P V)

// ---------------------------------------------------------------------------------------------------------------
// The PTX helpers: wgmma, its descriptors and its protocol in wgmma.cuh; P's packing and cp.async in fa_mma.cuh.

// ---------------------------------------------------------------------------------------------------------------
// Starts copying rows first_row .. first_row + ROWS - 1 of a [S, D] half tensor into a [ROWS][D] tile in shared
// memory laid out in 128-byte swizzle atoms (wgmma.cuh), 16 bytes per thread per step (consecutive threads on
// consecutive 16 bytes: coalesced reads). Rows past n_rows are zeros. The copy lands later: cp_async_wait_all,
// fence_proxy_async and a barrier come before a wgmma reads the tile.
template <typename T, int D, int ROWS, int THREADS>
__device__ __forceinline__ void load_tile_async(T *tile, const T *src, int64_t stride_s, int64_t first_row,
                                                int64_t n_rows) {
    constexpr int ROW_CHUNKS = D / CHUNK;
#pragma unroll
    for (int c = threadIdx.x; c < ROWS * ROW_CHUNKS; c += THREADS) {
        const int row = c / ROW_CHUNKS, chunk = c % ROW_CHUNKS;
        const bool exists = first_row + row < n_rows;
        // A row that does not exist reads nothing (0 source bytes); its address is then only a valid placeholder.
        const T *from = exists ? src + (first_row + row) * stride_s + chunk * CHUNK : src;
        cp_async_16(tile + swizzle<ROWS>(row, chunk), from, exists ? 16 : 0);
    }
}

// grid: (number of Q tiles, heads of this launch), block: BLOCK_M / 64 warpgroups.
// q: [B, H, S_q, D], k, v: [B, H, S_k, D] in T (stride d is 1); o: [B, H, S_q, D] float32; lse: [B, H, S_q].
// Shared memory: the Q tile [BLOCK_M][D], and two buffers of the K tile and the V tile [BLOCK_N][D], all T, in
// swizzle atoms, each tile starting on a 1024-byte boundary.
template <typename T, int D, int BLOCK_M, int BLOCK_N>
__global__ void __launch_bounds__(BLOCK_M / WARP_ROWS * WARP_SIZE)
flash_forward_wgmma_kernel(const T *__restrict__ q, fa_strides q_strides, const T *__restrict__ k,
                           fa_strides k_strides, const T *__restrict__ v, fa_strides v_strides,
                           float *__restrict__ o, fa_strides o_strides, float *__restrict__ lse, int64_t S_q,
                           int64_t S_k, int64_t H, int64_t bh_first, float scale, float qk_scale, int causal) {
    constexpr int THREADS = BLOCK_M / WARP_ROWS * WARP_SIZE;
    constexpr int D_STEPS = D / MMA_K;            // wgmma steps of S = Q K^T along d
    constexpr int KEY_BLOCKS = BLOCK_N / MMA_N;   // 8-key column blocks of S (one accumulator fragment each)
    constexpr int KEY_STEPS = BLOCK_N / MMA_K;    // wgmma steps of O += P V along the keys
    constexpr int D_BLOCKS = D / MMA_N;           // 8-dimension column blocks of O (one accumulator fragment each)
    constexpr int FRAGMENTS = WGMMA_N / MMA_N;    // accumulator fragments one wgmma writes
    extern __shared__ uint8_t smem_raw[];
    constexpr int TILE = BLOCK_N * D;             // halves in one K (or V) tile
    // wgmma's swizzle atoms start on 1024-byte boundaries: the launch asks for ATOM_BYTES more than the tiles need.
    uint8_t *smem = smem_raw + (ATOM_BYTES - (uint32_t)__cvta_generic_to_shared(smem_raw) % ATOM_BYTES) % ATOM_BYTES;
    T *q_tile = reinterpret_cast<T *>(smem);      // [BLOCK_M][D]
    T *k_tiles = q_tile + BLOCK_M * D;            // [2][BLOCK_N][D]: buffer n % 2 holds K tile n
    T *v_tiles = k_tiles + 2 * TILE;              // [2][BLOCK_N][D]
    float2 *max_copies = reinterpret_cast<float2 *>(v_tiles + 2 * TILE);   // the score copies (max_key.cuh)

    // The grid's second index is the head: (b, h) from bh, and where that head starts in each tensor.
    const int64_t bh = bh_first + blockIdx.y, b = bh / H, h = bh % H;
    q += b * q_strides.b + h * q_strides.h;
    k += b * k_strides.b + h * k_strides.h;
    v += b * v_strides.b + h * v_strides.h;
    o += b * o_strides.b + h * o_strides.h;
    lse += bh * S_q;

    // Causal: the last Q tiles see the most keys, and the first blocks launched get them.
    const int64_t q_start = (int64_t)(gridDim.x - 1 - blockIdx.x) * BLOCK_M;
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE, g = lane / 4, t = lane % 4;
    const int warpgroup = warp / 4;
    // This lane's two query rows: row_g (C elements 0 and 1 of every fragment) and row_g + 8 (elements 2 and 3).
    // Rows past S_q load zeros, compute like the others and store nothing.
    const int64_t row_g = q_start + warp * WARP_ROWS + g;

    // The Q tile and the first K and V tiles are requested together, as one group of copies, and waited for at once.
    load_tile_async<T, D, BLOCK_M, THREADS>(q_tile, q + q_start * q_strides.s, q_strides.s, 0, S_q - q_start);
    load_tile_async<T, D, BLOCK_N, THREADS>(k_tiles, k, k_strides.s, 0, S_k);
    load_tile_async<T, D, BLOCK_N, THREADS>(v_tiles, v, v_strides.s, 0, S_k);
    cp_async_commit();
    cp_async_wait_all();
    fence_proxy_async();   // the tiles were written through the generic proxy; wgmma reads through the async one
    __syncthreads();
    // Q stays in shared memory: each wgmma of S = Q K^T reads its warpgroup's 64 rows x 16 dimensions there.
    const T *q_rows = q_tile + warpgroup * WARPGROUP_ROWS * ATOM_HALVES;

    // O and the row statistics, in registers: o_acc[db] is the accumulator fragment of dimensions 8db .. 8db + 7.
    float o_acc[D_BLOCKS][4];
#pragma unroll
    for (int db = 0; db < D_BLOCKS; db++) o_acc[db][0] = o_acc[db][1] = o_acc[db][2] = o_acc[db][3] = 0.0f;
    float m_i[2] = {-INFINITY, -INFINITY}, l_i[2] = {0.0f, 0.0f};   // rows row_g and row_g + 8, raw-score max
    int max_tile[2] = {-1, -1};   // the first key of the tile where each row's max last moved (max_key.cuh)

    // Tile 0 always exists and is never in the future (row q_start sees key 0).
    for (int64_t k_start = 0, n = 0; k_start < S_k; k_start += BLOCK_N, n++) {
        // The three causal stages, as in phase 3; the stage depends on the block's indices only.
        const int stage = causal_tile_stage(causal, q_start, k_start, BLOCK_M, BLOCK_N, S_q, S_k);
        if (stage == TILE_FUTURE) break;
        // Tile n has landed (the only copy in flight), and every warp is done with tile n - 1, whose buffer the
        // next copy overwrites: one barrier says both.
        if (n > 0) {
            cp_async_wait_all();
            fence_proxy_async();
            __syncthreads();
        }
        // The pipeline: request tile n + 1 now, when it is needed at all; it arrives while tile n is computed.
        const int64_t k_next = k_start + BLOCK_N;
        if (k_next < S_k && causal_tile_stage(causal, q_start, k_next, BLOCK_M, BLOCK_N, S_q, S_k) != TILE_FUTURE) {
            load_tile_async<T, D, BLOCK_N, THREADS>(k_tiles + (n + 1) % 2 * TILE, k, k_strides.s, k_next, S_k);
            load_tile_async<T, D, BLOCK_N, THREADS>(v_tiles + (n + 1) % 2 * TILE, v, v_strides.s, k_next, S_k);
            cp_async_commit();
        }
        const T *k_tile = k_tiles + n % 2 * TILE, *v_tile = v_tiles + n % 2 * TILE;

        // S = Q K^T, 64 rows x BLOCK_N keys per warpgroup: s[kb] is this lane's accumulator fragment of keys
        // 8kb .. 8kb + 7, the layout of phase 5 (wgmma.cuh). One wgmma covers 64 keys and 16 dimensions; A (Q) and
        // B (K, stored [key][d]: "K-major", as the product wants) are both read from shared memory.
        float s[KEY_BLOCKS][4];
#pragma unroll
        for (int kb = 0; kb < KEY_BLOCKS; kb++) s[kb][0] = s[kb][1] = s[kb][2] = s[kb][3] = 0.0f;
        keep_in_registers<KEY_BLOCKS>(s);
        wgmma_fence();
#pragma unroll
        for (int ds = 0; ds < D_STEPS; ds++) {
            const uint64_t q_desc = smem_descriptor(q_rows + swizzle<BLOCK_M>(0, ds * MMA_K / CHUNK), 16, ATOM_BYTES);
#pragma unroll
            for (int kb = 0; kb < KEY_BLOCKS; kb += FRAGMENTS) {
                const T *keys = k_tile + swizzle<BLOCK_N>(kb * MMA_N, ds * MMA_K / CHUNK);
                wgmma_m64n64k16_ss(&s[kb], q_desc, smem_descriptor(keys, 16, ATOM_BYTES), T());
            }
        }
        wgmma_commit();
        wgmma_wait<0>();
        keep_in_registers<KEY_BLOCKS>(s);

        // Mask: keys past the last one a row may see (S_k; on a diagonal tile, the row itself) get -INFINITY. Only
        // the diagonal tiles and the last tile have any (a test uniform over the block). The scores stay raw.
        if (stage == TILE_DIAGONAL || k_start + BLOCK_N > S_k) {
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const int64_t row = row_g + 8 * r, last_key = stage == TILE_DIAGONAL && row < S_k - 1 ? row : S_k - 1;
#pragma unroll
                for (int kb = 0; kb < KEY_BLOCKS; kb++)
#pragma unroll
                    for (int e = 0; e < 2; e++)
                        if (k_start + kb * MMA_N + 2 * t + e > last_key) s[kb][2 * r + e] = -INFINITY;
            }
        }

        // The online softmax, per row. A row's BLOCK_N scores are spread over the 4 lanes of a quad (t = 0..3, the
        // same g): each lane reduces its own, then two shuffles within the quad combine them.
        float m_scaled[2], alpha[2], row_sum[2] = {0.0f, 0.0f};
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float m_tile = -INFINITY;
#pragma unroll
            for (int kb = 0; kb < KEY_BLOCKS; kb++) m_tile = fmaxf(m_tile, fmaxf(s[kb][2 * r], s[kb][2 * r + 1]));
            m_tile = fmaxf(m_tile, __shfl_xor_sync(FULL_WARP, m_tile, 1));
            m_tile = fmaxf(m_tile, __shfl_xor_sync(FULL_WARP, m_tile, 2));
            update_max_tile<KEY_BLOCKS>(max_tile[r], max_copies, warp, lane, s, r, m_tile, m_i[r], k_start);
            const float m_new = fmaxf(m_i[r], m_tile);
            // A row that has seen no key yet has m_new = -inf; subtracting it would give -inf - -inf = NaN.
            const float m_use = m_new == -INFINITY ? 0.0f : m_new;
            m_scaled[r] = m_use * qk_scale;
            // Everything accumulated so far was relative to the old max: alpha moves it to the new one.
            alpha[r] = exp2f((m_i[r] - m_use) * qk_scale);
            m_i[r] = m_new;
        }
#pragma unroll
        for (int kb = 0; kb < KEY_BLOCKS; kb++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                s[kb][e] = exp2f(fmaf(s[kb][e], qk_scale, -m_scaled[e / 2]));   // p_ij: one FMA, one exp2
                row_sum[e / 2] += s[kb][e];
            }
#pragma unroll
        for (int r = 0; r < 2; r++) {
            row_sum[r] += __shfl_xor_sync(FULL_WARP, row_sum[r], 1);
            row_sum[r] += __shfl_xor_sync(FULL_WARP, row_sum[r], 2);
            l_i[r] = l_i[r] * alpha[r] + row_sum[r];
        }
#pragma unroll
        for (int db = 0; db < D_BLOCKS; db++)
#pragma unroll
            for (int e = 0; e < 4; e++) o_acc[db][e] *= alpha[e / 2];

        // O += P V. The A operand of keys 16ks .. 16ks + 15 is the two S fragments of key blocks 2ks and 2ks + 1,
        // rounded to T in registers (l_i summed them unrounded, in float32, above). V is stored [key][d]: the sum
        // runs across its rows, so wgmma reads it "MN-major" (transposed), 16 keys x 64 dimensions per instruction.
        uint32_t p_frag[KEY_STEPS][4];
#pragma unroll
        for (int ks = 0; ks < KEY_STEPS; ks++) {
            p_frag[ks][0] = pack_pair(s[2 * ks][0], s[2 * ks][1], T());
            p_frag[ks][1] = pack_pair(s[2 * ks][2], s[2 * ks][3], T());
            p_frag[ks][2] = pack_pair(s[2 * ks + 1][0], s[2 * ks + 1][1], T());
            p_frag[ks][3] = pack_pair(s[2 * ks + 1][2], s[2 * ks + 1][3], T());
        }
        keep_in_registers<D_BLOCKS>(o_acc);
        wgmma_fence();   // o_acc was rescaled and p_frag written by ordinary instructions
#pragma unroll
        for (int ks = 0; ks < KEY_STEPS; ks++)
#pragma unroll
            for (int db = 0; db < D_BLOCKS; db += FRAGMENTS) {
                const T *values = v_tile + swizzle<BLOCK_N>(ks * MMA_K, db * MMA_N / CHUNK);
                wgmma_m64n64k16_rs(&o_acc[db], p_frag[ks], smem_descriptor(values, BLOCK_N * 128, ATOM_BYTES), T());
            }
        wgmma_commit();
        wgmma_wait<0>();
        keep_in_registers<D_BLOCKS>(o_acc);
    }

    // One division per row, at the very end, and the row's log-sum-exp. Every lane of a quad holds the same m_i and
    // l_i; lane t stores dimensions 8db + 2t and 8db + 2t + 1 of its two rows.
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int64_t row = row_g + 8 * r;
        // The LSE from the max key's score in double (max_key.cuh): the whole quad computes it, before the row test.
        const int key = max_key_of_row<KEY_BLOCKS>(max_copies, warp, lane, r, row < S_q ? max_tile[r] : -1, m_i[r]);
        const float lse_r = row_lse<T, D>(q + row * q_strides.s, k, k_strides.s,
                                         key, scale, qk_scale, m_i[r], l_i[r], t);
        if (row >= S_q) continue;
        const float inv_l = 1.0f / l_i[r];
#pragma unroll
        for (int db = 0; db < D_BLOCKS; db++)
            *reinterpret_cast<float2 *>(o + row * o_strides.s + db * MMA_N + 2 * t) =
                make_float2(o_acc[db][2 * r] * inv_l, o_acc[db][2 * r + 1] * inv_l);
        if (t == 0) lse[row] = lse_r;
    }
}

// The kernel reads rows of T 16 bytes at a time and writes O as float2s: each row must start on that many bytes,
// with its D elements next to each other.
static void check_rows(const char *name, const void *x, fa_strides strides, int element_bytes, int row_align) {
    const int64_t per = row_align / element_bytes;   // elements in one aligned unit
    const int aligned = ((uintptr_t)x % row_align == 0) && strides.b % per == 0 && strides.h % per == 0 &&
                        strides.s % per == 0;
    if (strides.d != 1 || !aligned)
        fa_die("the Hopper kernels need %s with stride d = 1, the other strides multiples of %lld and a "
               "%d-byte aligned pointer (got strides %lld, %lld, %lld, %lld)", name, (long long)per, row_align,
               (long long)strides.b, (long long)strides.h, (long long)strides.s, (long long)strides.d);
}

// Launches one instantiation. The tiles pass the 48 KiB a kernel gets without asking (D = 128, 128 x 128 tiles need
// 160 KiB with the two K/V buffers), so the kernel asks for what it uses, plus the 1024 bytes of alignment.
template <typename T, int D, int BLOCK_M, int BLOCK_N>
static void launch(const fa_shape *shape, const void *q, fa_strides q_strides, const void *k, fa_strides k_strides,
                   const void *v, fa_strides v_strides, float *o, fa_strides o_strides, float *lse) {
    auto kernel = flash_forward_wgmma_kernel<T, D, BLOCK_M, BLOCK_N>;
    const int smem_bytes = (int)flash_forward_wgmma_cuda_smem_bytes(D, BLOCK_M, BLOCK_N);
    FA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
    const unsigned int q_tiles = (unsigned int)((shape->Sq + BLOCK_M - 1) / BLOCK_M);
    const float qk_scale = shape->scale * LOG2E;
    const int64_t BH = shape->B * shape->H;
    for (int64_t bh_first = 0; bh_first < BH; bh_first += MAX_GRID_Y) {   // fa_contract.h: the grid limit
        kernel<<<dim3(q_tiles, heads_in_launch(BH, bh_first)), BLOCK_M / WARP_ROWS * WARP_SIZE, smem_bytes>>>(
            static_cast<const T *>(q), q_strides, static_cast<const T *>(k), k_strides, static_cast<const T *>(v),
            v_strides, o, o_strides, lse, shape->Sq, shape->Sk, shape->H, bh_first, shape->scale, qk_scale,
            shape->causal);
        FA_CUDA_CHECK_LAUNCH();
    }
}

template <typename T, int D>
static void launch_tiles(const fa_shape *shape, int block_m, int block_n, const void *q, fa_strides q_strides,
                         const void *k, fa_strides k_strides, const void *v, fa_strides v_strides, float *o,
                         fa_strides o_strides, float *lse) {
    if (block_m == 64 && block_n == 64)
        launch<T, D, 64, 64>(shape, q, q_strides, k, k_strides, v, v_strides, o, o_strides, lse);
    else if (block_m == 128 && block_n == 64)
        launch<T, D, 128, 64>(shape, q, q_strides, k, k_strides, v, v_strides, o, o_strides, lse);
    else if (block_m == 128 && block_n == 128)
        launch<T, D, 128, 128>(shape, q, q_strides, k, k_strides, v, v_strides, o, o_strides, lse);
    else
        fa_die("the Hopper kernels are compiled for BLOCK_M x BLOCK_N = %s, not %d x %d", HOPPER_CUDA_TILES_TEXT,
               block_m, block_n);
}

template <typename T>
static void launch_head_dim(const fa_shape *shape, int block_m, int block_n, const void *q, fa_strides q_strides,
                            const void *k, fa_strides k_strides, const void *v, fa_strides v_strides, float *o,
                            fa_strides o_strides, float *lse) {
    switch (shape->D) {
    case 64:
        launch_tiles<T, 64>(shape, block_m, block_n, q, q_strides, k, k_strides, v, v_strides, o, o_strides, lse);
        break;
    case 128:
        launch_tiles<T, 128>(shape, block_m, block_n, q, q_strides, k, k_strides, v, v_strides, o, o_strides, lse);
        break;
    default: fa_die("the Hopper kernels support D in {64, 128}, not %lld", (long long)shape->D);
    }
}

extern "C" void flash_forward_wgmma_cuda(const fa_shape *shape, int dtype, int block_m, int block_n,
                                         const tc_forward_tensors *t) {
    const void *q = t->q, *k = t->k, *v = t->v;
    const fa_strides q_strides = t->q_strides, k_strides = t->k_strides, v_strides = t->v_strides;
    const fa_strides o_strides = t->o_strides;
    float *o = t->o, *lse = t->lse;
    check_rows("Q", q, q_strides, 2, 16);
    check_rows("K", k, k_strides, 2, 16);
    check_rows("V", v, v_strides, 2, 16);
    check_rows("O", o, o_strides, 4, 8);
    if (dtype == FA_DTYPE_FP16)
        launch_head_dim<__half>(shape, block_m, block_n, q, q_strides, k, k_strides, v, v_strides, o, o_strides, lse);
    else if (dtype == FA_DTYPE_BF16)
        launch_head_dim<__nv_bfloat16>(shape, block_m, block_n, q, q_strides, k, k_strides, v, v_strides, o,
                                       o_strides, lse);
    else
        fa_die("the Hopper kernels take fp16 or bf16 inputs, not %s", fa_dtype_name(dtype));
}

extern "C" int hopper_cuda_check_device(char *why, size_t why_len) {
    int device = 0;
    cudaDeviceProp prop;
    FA_CUDA_CHECK(cudaGetDevice(&device));
    FA_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    if (prop.major == 9 && prop.minor == 0) return 0;
    snprintf(why, why_len, "phase 7 needs a Hopper GPU (sm_90a: H100 or H200); this one is %s, compute capability %d.%d",
             prop.name, prop.major, prop.minor);
    return -1;
}
