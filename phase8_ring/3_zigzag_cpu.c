// 3_zigzag_cpu.c - phase 8, step 3, on the CPU: step 1's ring with the zigzag layout for causal attention. With
//   contiguous shards, a causal ring gives rank r work at r + 1 of its N steps: the last rank computes at every step
//   while the first waits, and the ring is as slow as its busiest rank. Cut the sequence into 2N chunks and give rank r
//   chunks r and 2N-1-r: every rank then has one early and one late chunk, and at every step off the diagonal every
//   rank computes exactly half a block (ring_block_of in ring.h says which half; docs/10-ring.md draws it).
// Run: build/bin/phase8_ring --impl cpu --ranks 4 --S 1001 --causal --zigzag
//
// CUDA twin: phase8_ring/3_zigzag_cuda.cu. The diffs:
//   diff -u phase8_ring/1_ring_cpu.c phase8_ring/3_zigzag_cpu.c      (this step: the layout)
//   diff -u phase8_ring/3_zigzag_cpu.c phase8_ring/4_backward_cpu.c  (the backward)
#include "ring_ranks.h"

#include <math.h>
#include <string.h>

#include "ring_blocks.h"

// The ring's one message: every rank r sends send[r] to rank r + 1, which receives it into recv[r + 1]. On the CPU a
// copy; the ranks run in turn, so it is done before the block that follows it starts.
static void exchange(const ring_ranks *ranks, void *const send[], void *const recv[], size_t bytes) {
    const int N = ranks->config.n_ranks;
    for (int r = 0; r < N; r++) memcpy(recv[(r + 1) % N], send[r], bytes);
}

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
static void merge_block(const ring_ranks *ranks, ring_rank *rank, ring_span q) {
    const int64_t BH = ranks->shape.B * ranks->shape.H, D = ranks->shape.D, rows = rank->shard.rows;
    const fa_strides st = ranks->strides;   // [B, H, max_rows, D], so row i of head bh is at bh * st.h + i * st.s
    // The two loops are the CUDA grid of merge_block_kernel (2_ring_cuda.cu): one row each (a warp on the GPU).
#pragma omp parallel for collapse(2)
    for (int64_t bh = 0; bh < BH; bh++)
        for (int64_t i = 0; i < q.rows; i++) {
            float *lse_run = &rank->lse[bh * rows + q.first + i], *lse_lo = &rank->lse_lo[bh * rows + q.first + i];
            const double lse_old = (double)*lse_run + (double)*lse_lo;
            const double lse_block = rank->lse_block[bh * q.rows + i];
            if (lse_block == -INFINITY) continue;   // the row saw none of the block's keys: nothing to add
            const double lse_max = fmax(lse_old, lse_block);
            const double lse = lse_max + log(exp(lse_old - lse_max) + exp(lse_block - lse_max));
            const float w_run = (float)exp(lse_old - lse), w_block = (float)exp(lse_block - lse);
            float *o_run = rank->o + bh * st.h + (q.first + i) * st.s;
            const float *o_block = rank->o_block + bh * st.h + i * st.s;
            for (int64_t d = 0; d < D; d++) o_run[d] = w_run * o_run[d] + w_block * o_block[d];
            *lse_run = (float)lse;
            *lse_lo = (float)(lse - (double)*lse_run);
        }
}

// One step of one rank: its queries against the K/V block `kv` that started on rank `source`, then the merge.
static void compute_block(ring_ranks *ranks, int r, int step, const void *kv) {
    const ring_config *c = &ranks->config;
    ring_rank *rank = &ranks->rank[r];
    const int source = ring_source(r, step, c->n_ranks);
    const ring_block block = ring_block_of(c->layout, ranks->shape.causal, &rank->shard,
                                           &ranks->rank[source].shard, r, source);
    if (block.q.rows == 0 || block.k.rows == 0) return;   // a block wholly in the future (or an empty shard)
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
    ring_block_forward_cpu(&shape, c->dtype, c->block_m, c->block_n, &t);
    const size_t lse_bytes = (size_t)(shape.B * shape.H * block.q.rows) * sizeof(float);   // step 0: all rows
    if (first) memset(rank->lse_lo, 0, lse_bytes);
    else merge_block(ranks, rank, block.q);
}

void ring_zigzag_forward_cpu(const fa_shape *shape, const ring_config *config, const ring_tensors *t) {
    ring_ranks ranks;   // their shards in config->layout
    ring_ranks_create_cpu(&ranks, shape, config, 0, t);
    const int N = config->n_ranks;
    void *current[RING_MAX_RANKS], *next[RING_MAX_RANKS];   // the K/V block each rank computes with, and the next
    for (int r = 0; r < N; r++) current[r] = ranks.rank[r].kv_own;
    for (int step = 0; step < N; step++) {
        // The next block travels while this one computes (on GPUs at the same time; here, first). It arrives in the
        // ring buffer that the block before this one was computed from, which nobody needs any more.
        for (int r = 0; r < N; r++) next[r] = ranks.rank[r].kv_ring[step % 2];
        if (step < N - 1) exchange(&ranks, current, next, ring_kv_bytes(&ranks));
        for (int r = 0; r < N; r++) compute_block(&ranks, r, step, current[r]);
        for (int r = 0; r < N; r++) current[r] = next[r];
    }
    ring_ranks_gather_forward_cpu(&ranks, t->o, t->lse);
    ring_ranks_free_cpu(&ranks);
}
