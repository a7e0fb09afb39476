// 4_backward_cpu.c - phase 8, step 4, on the CPU: the backward of the ring (step 3's layouts). Each rank keeps its
//   queries, dO, and the forward's O and LSE of its rows; the K/V blocks travel the ring as in the forward, and with
//   each block travel the dK and dV of its keys, to which every rank adds its share. With the final LSE of its rows,
//   a block's P = exp(S - LSE) is the whole sequence's P, so the single-GPU backward of one block gives exactly that
//   block's share of dQ, dK and dV. dQ stays with its queries; dK and dV need one step more than K and V: after
//   the last block, one more exchange brings each block's dK and dV home to the rank that owns its keys.
// Run: build/bin/phase8_ring --impl cpu --ranks 4 --S 1001 --causal --zigzag --backward
//
// CUDA twin: phase8_ring/4_backward_cuda.cu. The diff:
//   diff -u phase8_ring/3_zigzag_cpu.c phase8_ring/4_backward_cpu.c
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

// Adds one block's gradient into a sum, for the rows the block covered (rows.first .. of the sum); both are
// [B, H, max_rows, D] with the ranks' strides.
static void add_block(const ring_ranks *ranks, float *sum, const float *block, ring_span rows) {
    const int64_t BH = ranks->shape.B * ranks->shape.H, D = ranks->shape.D;
    const fa_strides st = ranks->strides;   // [B, H, max_rows, D], so row i of head bh is at bh * st.h + i * st.s
    // The two loops are the CUDA grid of add_block_kernel (4_backward_cuda.cu): one row each.
#pragma omp parallel for collapse(2)
    for (int64_t bh = 0; bh < BH; bh++)
        for (int64_t i = 0; i < rows.rows; i++) {
            float *sum_i = sum + bh * st.h + (rows.first + i) * st.s;
            const float *block_i = block + bh * st.h + i * st.s;
            for (int64_t d = 0; d < D; d++) sum_i[d] += block_i[d];
        }
}

// The LSE of the block's rows, contiguous [B, H, q.rows] as the kernels read it: rows q.first .. of the rank's LSE.
static void lse_of_rows(const ring_ranks *ranks, const ring_rank *rank, ring_span q, float *lse_rows) {
    const int64_t BH = ranks->shape.B * ranks->shape.H, rows = rank->shard.rows;
    for (int64_t bh = 0; bh < BH; bh++)
        memcpy(lse_rows + bh * q.rows, rank->lse + bh * rows + q.first, (size_t)q.rows * sizeof(float));
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
    ring_block_backward_cpu(&shape, c->dtype, c->block_m, c->block_n, &t);
    add_block(ranks, rank->dq, rank->dq_block, block.q);   // dQ stays with its queries
    return block;
}

// Adds the block's dK and dV to those travelling with its K and V (dkv: dK, then dV), to go on to the next rank.
static void add_travelling(const ring_ranks *ranks, const ring_rank *rank, const ring_block *block, float *dkv) {
    if (block->q.rows == 0 || block->k.rows == 0) return;
    add_block(ranks, dkv, rank->dkv_block, block->k);
    add_block(ranks, dkv + ranks->tensor_elems, rank->dkv_block + ranks->tensor_elems, block->k);
}

void ring_backward_cpu(const fa_shape *shape, const ring_config *config, const ring_tensors *t) {
    ring_ranks ranks;   // their shards in config->layout, with dO and the forward's O and LSE
    ring_ranks_create_cpu(&ranks, shape, config, 1, t);
    const int N = config->n_ranks;
    void *current[RING_MAX_RANKS], *next[RING_MAX_RANKS];   // the K/V block each rank computes with, and the next
    float *dkv_current[RING_MAX_RANKS], *dkv_next[RING_MAX_RANKS];   // the dK/dV travelling with the current block
    const size_t gradient_bytes = (size_t)ranks.tensor_elems * sizeof(float);
    for (int r = 0; r < N; r++) {
        current[r] = ranks.rank[r].kv_own;
        memset(ranks.rank[r].dq, 0, gradient_bytes);
        memset(ranks.rank[r].dkv_ring[0], 0, 2 * gradient_bytes);   // the dK, dV of its own block start at zero
    }
    for (int step = 0; step < N; step++) {
        // The next block travels while this one computes (on GPUs at the same time; here, first). It arrives in the
        // ring buffer that the block before this one was computed from, which nobody needs any more.
        for (int r = 0; r < N; r++) next[r] = ranks.rank[r].kv_ring[step % 2];
        if (step < N - 1) exchange(&ranks, current, next, ring_kv_bytes(&ranks));
        ring_block blocks[RING_MAX_RANKS];
        for (int r = 0; r < N; r++) blocks[r] = compute_block(&ranks, r, step, current[r]);
        // The dK and dV travelling with this step's K/V block arrived with it (on GPUs: wait for them here).
        for (int r = 0; r < N; r++) {
            dkv_current[r] = ranks.rank[r].dkv_ring[step % 2];
            dkv_next[r] = ranks.rank[r].dkv_ring[(step + 1) % 2];
            add_travelling(&ranks, &ranks.rank[r], &blocks[r], dkv_current[r]);
        }
        // They go on with the block, one step behind its K and V (they are complete only now); the exchange after the
        // last step brings each home, to the rank whose keys they belong to.
        exchange(&ranks, (void *const *)dkv_current, (void *const *)dkv_next, ring_dkv_bytes(&ranks));
        for (int r = 0; r < N; r++) current[r] = next[r];
    }
    ring_ranks_gather_backward_cpu(&ranks, t->dq, t->dk, t->dv);
    ring_ranks_free_cpu(&ranks);
}
