// 4_backward_cuda.cu - phase 8, step 4, on GPUs: the backward of the ring (step 3's layouts). dQ stays with its
//   queries; dK and dV travel with their K and V, one step behind on a channel of their own, and come home after the
//   last step (4_backward_cpu.c says why a block's backward is the single-GPU backward with the final LSE). The dK/dV
//   transfer of one step overlaps the next step's block, which needs them only when it adds its own share.
// Run: build/bin/phase8_ring --impl cuda --ranks 4 --S 8192 --H 16 --D 128 --dtype bf16 --causal --zigzag --backward
//
// CPU twin: phase8_ring/4_backward_cpu.c. The diff:
//   diff -u phase8_ring/3_zigzag_cuda.cu phase8_ring/4_backward_cuda.cu
#include "ring_transport.h"

#include <math.h>

#include "fa_cuda_check.h"
#include "fa_tensor.h"
#include "ring_blocks.h"

#define WARP_SIZE 32
#define ROWS_PER_BLOCK 8   // add_block_kernel: one warp per row, 8 warps per thread block

// Adds one block's gradient into a sum, for the rows the block covered (rows.first .. of the shard). One warp per
// row (row = bh * rows.rows + i of the block): its lanes take the row's D elements in turn.
static __global__ void add_block_kernel(float *sum, const float *block, int64_t BH, ring_span rows, int64_t D,
                                        fa_strides st) {
    const int64_t row = (int64_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / WARP_SIZE;
    if (row >= BH * rows.rows) return;
    const int64_t bh = row / rows.rows, i = row % rows.rows;
    const int lane = threadIdx.x % WARP_SIZE;
    float *sum_i = sum + bh * st.h + (rows.first + i) * st.s;
    const float *block_i = block + bh * st.h + i * st.s;
    for (int64_t d = lane; d < D; d += WARP_SIZE) sum_i[d] += block_i[d];
}

// Adds one block's gradient into a sum, for the rows the block covered (4_backward_cpu.c), on the default stream.
static void add_block(const ring_ranks *ranks, float *sum, const float *block, ring_span rows) {
    const int64_t BH = ranks->shape.B * ranks->shape.H;
    const int64_t blocks = (BH * rows.rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
    add_block_kernel<<<(unsigned int)blocks, ROWS_PER_BLOCK * WARP_SIZE>>>(sum, block, BH, rows, ranks->shape.D,
                                                                           ranks->strides);
    FA_CUDA_CHECK_LAUNCH();
}

// The LSE of the block's rows, contiguous [B, H, q.rows] as the kernels read it: rows q.first .. of the rank's LSE,
// one row of q.rows floats per head.
static void lse_of_rows(const ring_ranks *ranks, const ring_rank *rank, ring_span q, float *lse_rows) {
    const int64_t BH = ranks->shape.B * ranks->shape.H, rows = rank->shard.rows;
    FA_CUDA_CHECK(cudaMemcpy2DAsync(lse_rows, (size_t)q.rows * sizeof(float), rank->lse + q.first,
                                    (size_t)rows * sizeof(float), (size_t)q.rows * sizeof(float), (size_t)BH,
                                    cudaMemcpyDeviceToDevice, cudaStreamLegacy));
}

// One step of one rank: the gradients of its queries against the K/V block `kv` that started on rank `source`. dQ is
// added to the rank's own; dK and dV stay in dkv_block for add_travelling. Returns the block it computed.
static ring_block compute_block(ring_ranks *ranks, int r, int step, const void *kv) {
    const ring_config *c = &ranks->config;
    ring_rank *rank = &ranks->rank[r];
    const int source = ring_source(r, step, c->n_ranks);
    const ring_block block = ring_block_of(c->layout, ranks->shape.causal, &rank->shard,
                                           &ranks->rank[source].shard, r, source);
    if (block.q.rows == 0 || block.k.rows == 0) return block;   // a block wholly in the future (or an empty shard)
    FA_CUDA_CHECK(cudaSetDevice(rank->device));   // its kernels go to its GPU's default stream
    fa_shape shape = ranks->shape;
    shape.Sq = block.q.rows;
    shape.Sk = block.k.rows;
    shape.causal = block.causal;
    lse_of_rows(ranks, rank, block.q, rank->lse_block);
    const fa_strides st = ranks->strides;
    const ring_backward_tensors t = {
        .q = ring_rows_at(rank->q, st, block.q.first, c->dtype),
        .k = ring_rows_at(kv, st, block.k.first, c->dtype),
        .v = ring_rows_at(ring_v_of(ranks, kv), st, block.k.first, c->dtype),
        .dout = ring_rows_at(rank->dout, st, block.q.first, c->dtype),
        .q_strides = st, .k_strides = st, .v_strides = st, .do_strides = st,
        .o = rank->o + block.q.first * st.s, .lse = rank->lse_block, .o_strides = st,
        .delta = rank->delta,
        .dq = rank->dq_block, .dk = rank->dkv_block, .dv = rank->dkv_block + ranks->tensor_elems,
        .dq_strides = st, .dk_strides = st, .dv_strides = st};
    ring_block_backward_cuda(&shape, c->dtype, c->block_m, c->block_n, &t);
    add_block(ranks, rank->dq, rank->dq_block, block.q);   // dQ stays with its queries
    return block;
}

// Adds the block's dK and dV to those travelling with its K and V (dkv: dK, then dV), to go on to the next rank.
static void add_travelling(const ring_ranks *ranks, const ring_rank *rank, const ring_block *block, float *dkv) {
    if (block->q.rows == 0 || block->k.rows == 0) return;
    FA_CUDA_CHECK(cudaSetDevice(rank->device));
    add_block(ranks, dkv, rank->dkv_block, block->k);
    add_block(ranks, dkv + ranks->tensor_elems, rank->dkv_block + ranks->tensor_elems, block->k);
}

extern "C" void ring_backward_cuda(ring_ranks *ranks, ring_transport *tr) {   // shards in config.layout
    if (!ranks->backward) fa_die("the ring's backward needs ranks made with its buffers (ring_ranks_create_cuda)");
    const int N = ranks->config.n_ranks;
    void *current[RING_MAX_RANKS], *next[RING_MAX_RANKS];   // the K/V block each rank computes with, and the next
    float *dkv_current[RING_MAX_RANKS], *dkv_next[RING_MAX_RANKS];   // the dK/dV travelling with the current block
    const size_t gradient_bytes = (size_t)ranks->tensor_elems * sizeof(float);
    for (int r = 0; r < N; r++) {
        current[r] = ranks->rank[r].kv_own;
        FA_CUDA_CHECK(cudaSetDevice(ranks->rank[r].device));
        FA_CUDA_CHECK(cudaMemsetAsync(ranks->rank[r].dq, 0, gradient_bytes, cudaStreamLegacy));
        // the dK, dV of its own block start at zero
        FA_CUDA_CHECK(cudaMemsetAsync(ranks->rank[r].dkv_ring[0], 0, 2 * gradient_bytes, cudaStreamLegacy));
    }
    for (int step = 0; step < N; step++) {
        // The next block travels while this one computes: the exchange is queued on the communication streams, the
        // blocks on the default streams, and the two run at the same time. It arrives in the ring buffer that the
        // block before this one was computed from (the exchange waits for that block).
        for (int r = 0; r < N; r++) next[r] = ranks->rank[r].kv_ring[step % 2];
        if (step < N - 1) ring_transport_exchange(tr, RING_CHANNEL_KV_BACKWARD, current, next, ring_kv_bytes(ranks));
        ring_block blocks[RING_MAX_RANKS];
        for (int r = 0; r < N; r++) blocks[r] = compute_block(ranks, r, step, current[r]);
        // The dK and dV travelling with this step's K/V block were sent one step later than it: wait for them only
        // now, after this step's blocks were queued, so that their transfer overlaps those blocks.
        ring_transport_wait(tr, RING_CHANNEL_DKV);
        for (int r = 0; r < N; r++) {
            dkv_current[r] = ranks->rank[r].dkv_ring[step % 2];
            dkv_next[r] = ranks->rank[r].dkv_ring[(step + 1) % 2];
            add_travelling(ranks, &ranks->rank[r], &blocks[r], dkv_current[r]);
        }
        // They go on with the block, one step behind its K and V (they are complete only now); the exchange after the
        // last step brings each home, to the rank whose keys they belong to.
        ring_transport_exchange(tr, RING_CHANNEL_DKV, (void *const *)dkv_current, (void *const *)dkv_next,
                                ring_dkv_bytes(ranks));
        ring_transport_wait(tr, RING_CHANNEL_KV_BACKWARD);   // the next step's blocks need their K/V
        for (int r = 0; r < N; r++) current[r] = next[r];
    }
    ring_transport_synchronize(tr);
}
