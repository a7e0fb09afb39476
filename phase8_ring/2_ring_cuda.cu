// 2_ring_cuda.cu - phase 8, step 2, on GPUs: step 1's ring, with each rank on a GPU of its own (or every rank on one
//   GPU) and the next K/V block's transfer overlapped with this block's compute. The blocks launch on each rank's
//   default stream, the single-GPU kernels' own; the transfers go through a transport (ring_transport.h: NCCL's
//   ncclSend/ncclRecv between GPUs, or cudaMemcpyAsync on one GPU) on communication streams that do not wait for the
//   default stream, and events order the two only where the data needs it.
// Run: build/bin/phase8_ring --impl cuda --ranks 4 --S 8192 --H 16 --D 128 --dtype bf16
//
// CPU twin: phase8_ring/1_ring_cpu.c (the same loops, the ranks in turn). The diffs:
//   diff -u phase8_ring/1_ring_cpu.c phase8_ring/2_ring_cuda.cu      (this step: GPUs, streams, a transport)
//   diff -u phase8_ring/2_ring_cuda.cu phase8_ring/3_zigzag_cuda.cu  (the zigzag layout)
#include "ring_transport.h"

#include <math.h>

#include "fa_cuda_check.h"
#include "fa_tensor.h"
#include "ring_blocks.h"

#define WARP_SIZE 32
#define ROWS_PER_BLOCK 8   // merge_block_kernel: one warp per row, 8 warps per thread block

// Merges one block into the running O and LSE of the rank, for the rows the block covered (q.first .. of the shard).
// Both are attention over some of the keys, each normalised by its own sum and carrying its log-sum-exp; over the
// keys of both, the softmax's sum is exp(lse_run) + exp(lse_block), and each O is weighted by its share of it:
//   lse = log(exp(lse_run) + exp(lse_block)),   O = exp(lse_run - lse) O_run + exp(lse_block - lse) O_block
// computed from the larger of the two LSEs, so that no exponential overflows. It is the combine of split-KV decoding
// (phase6_extensions/splitkv/splitkv_cpu.c), two partials at a time. The LSEs are in double here: at logits of a
// few hundred a float32 LSE is off by up to half a unit in its last place, and every merge rounded in float32 would
// add as much again. Each block's LSE comes rounded once from its own largest score in double (fa_math.h); the
// running LSE is kept as that double split in two floats, lse + lse_lo (step 0 writes lse, lse_lo = 0), so that the
// LSE the ring ends with is rounded once, at its last merge.
// One warp per row (row = bh * q.rows + i of the block): its lanes take the row's D elements in turn.
static __global__ void merge_block_kernel(float *o, float *lse, float *lse_lo_all, const float *o_block_all,
                                          const float *lse_block_all, int64_t BH, int64_t rows, ring_span q,
                                          int64_t D, fa_strides st) {
    const int64_t row = (int64_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / WARP_SIZE;
    if (row >= BH * q.rows) return;
    const int64_t bh = row / q.rows, i = row % q.rows;
    const int lane = threadIdx.x % WARP_SIZE;
    float *lse_run = &lse[bh * rows + q.first + i], *lse_lo = &lse_lo_all[bh * rows + q.first + i];
    const double lse_old = (double)*lse_run + (double)*lse_lo;
    const double lse_block = lse_block_all[bh * q.rows + i];
    if (lse_block == -INFINITY) return;   // the row saw none of the block's keys: nothing to add
    const double lse_max = fmax(lse_old, lse_block);
    const double lse_new = lse_max + log(exp(lse_old - lse_max) + exp(lse_block - lse_max));
    const float w_run = (float)exp(lse_old - lse_new), w_block = (float)exp(lse_block - lse_new);
    float *o_run = o + bh * st.h + (q.first + i) * st.s;
    const float *o_block = o_block_all + bh * st.h + i * st.s;
    for (int64_t d = lane; d < D; d += WARP_SIZE) o_run[d] = w_run * o_run[d] + w_block * o_block[d];
    __syncwarp();   // every lane has read the old LSE before lane 0 overwrites it
    if (lane == 0) {
        *lse_run = (float)lse_new;
        *lse_lo = (float)(lse_new - (double)*lse_run);
    }
}

// Merges one block into the running O and LSE of the rank (1_ring_cpu.c says how), on the rank's default stream.
static void merge_block(const ring_ranks *ranks, ring_rank *rank, ring_span q) {
    const int64_t BH = ranks->shape.B * ranks->shape.H;
    const int64_t blocks = (BH * q.rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
    merge_block_kernel<<<(unsigned int)blocks, ROWS_PER_BLOCK * WARP_SIZE>>>(
        rank->o, rank->lse, rank->lse_lo, rank->o_block, rank->lse_block, BH, rank->shard.rows, q, ranks->shape.D,
        ranks->strides);
    FA_CUDA_CHECK_LAUNCH();
}

// One step of one rank: its queries against the K/V block `kv` that started on rank `source`, then the merge.
static void compute_block(ring_ranks *ranks, int r, int step, const void *kv) {
    const ring_config *c = &ranks->config;
    ring_rank *rank = &ranks->rank[r];
    const int source = ring_source(r, step, c->n_ranks);
    const ring_block block = ring_block_of(RING_CONTIGUOUS, ranks->shape.causal, &rank->shard,
                                           &ranks->rank[source].shard, r, source);
    if (block.q.rows == 0 || block.k.rows == 0) return;   // a block wholly in the future (or an empty shard)
    FA_CUDA_CHECK(cudaSetDevice(rank->device));   // its kernels go to its GPU's default stream
    fa_shape shape = ranks->shape;
    shape.Sq = block.q.rows;
    shape.Sk = block.k.rows;
    shape.causal = block.causal;
    // Step 0 is the rank's own block, which covers all its rows: its kernel writes the running O and LSE themselves.
    // Every later block writes a block O and LSE of its own, which are then merged.
    const int first = step == 0;
    const fa_strides st = ranks->strides;
    const ring_forward_tensors t = {
        .q = ring_rows_at(rank->q, st, block.q.first, c->dtype),
        .k = ring_rows_at(kv, st, block.k.first, c->dtype),
        .v = ring_rows_at(ring_v_of(ranks, kv), st, block.k.first, c->dtype),
        .q_strides = st, .k_strides = st, .v_strides = st,
        .o = first ? rank->o : rank->o_block, .o_strides = st,
        .lse = first ? rank->lse : rank->lse_block};
    ring_block_forward_cuda(&shape, c->dtype, c->block_m, c->block_n, &t);
    const size_t lse_bytes = (size_t)(shape.B * shape.H * block.q.rows) * sizeof(float);   // step 0: all rows
    if (first) FA_CUDA_CHECK(cudaMemsetAsync(rank->lse_lo, 0, lse_bytes));
    else merge_block(ranks, rank, block.q);
}

extern "C" void ring_forward_cuda(ring_ranks *ranks, ring_transport *tr) {
    if (ranks->config.layout != RING_CONTIGUOUS) fa_die("step 2's ring takes ranks with contiguous shards");
    const int N = ranks->config.n_ranks;
    void *current[RING_MAX_RANKS], *next[RING_MAX_RANKS];   // the K/V block each rank computes with, and the next
    for (int r = 0; r < N; r++) current[r] = ranks->rank[r].kv_own;
    for (int step = 0; step < N; step++) {
        // The next block travels while this one computes: the exchange is queued on the communication streams, the
        // blocks on the default streams, and the two run at the same time. It arrives in the ring buffer that the
        // block before this one was computed from (the exchange waits for that block).
        for (int r = 0; r < N; r++) next[r] = ranks->rank[r].kv_ring[step % 2];
        if (step < N - 1) ring_transport_exchange(tr, RING_CHANNEL_KV, current, next, ring_kv_bytes(ranks));
        for (int r = 0; r < N; r++) compute_block(ranks, r, step, current[r]);
        ring_transport_wait(tr, RING_CHANNEL_KV);   // the next step's blocks need their K/V
        for (int r = 0; r < N; r++) current[r] = next[r];
    }
    ring_transport_synchronize(tr);
}
