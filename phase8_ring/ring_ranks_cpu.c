// ring_ranks_cpu.c - phase 8: the ranks' buffers on the host, for the CPU twin of the ring (ring_ranks.h; the GPU
// twin of this file is ring_ranks_cuda.cu).
#include "ring_ranks.h"

#include <stdlib.h>
#include <string.h>

#include "fa_tensor.h"

// A buffer of `bytes`, filled with NaN: an element the ring forgets to write cannot pass a check.
static float *alloc_poisoned(size_t bytes, const char *what) {
    float *x = fa_alloc_floats((int64_t)((bytes + 3) / 4), what);
    fa_poison(x, (int64_t)((bytes + 3) / 4));
    return x;
}

// Copies `rows` rows of row_bytes of each of BH heads, from row from_row of src (whose heads are src_rows rows apart)
// to row to_row of dst (whose heads are dst_rows rows apart).
static void copy_rows(void *dst, int64_t dst_rows, int64_t to_row, const void *src, int64_t src_rows,
                      int64_t from_row, int64_t rows, int64_t BH, size_t row_bytes) {
    for (int64_t bh = 0; bh < BH; bh++)
        memcpy((char *)dst + (size_t)(bh * dst_rows + to_row) * row_bytes,
               (const char *)src + (size_t)(bh * src_rows + from_row) * row_bytes, (size_t)rows * row_bytes);
}

// Both parts of a rank's shard, from the whole tensor ([B*H, S] rows) into the rank's buffer ([B*H, buffer_rows]
// rows: max_rows for [B, H, rows, D] tensors, the rank's rows for LSE), and back.
static void scatter_shard(const ring_ranks *ranks, const ring_rank *rank, void *buffer, int64_t buffer_rows,
                          const void *whole, size_t row_bytes) {
    const int64_t BH = ranks->shape.B * ranks->shape.H, S = ranks->shape.Sq;
    const ring_span *part = rank->shard.part;
    copy_rows(buffer, buffer_rows, 0, whole, S, part[0].first, part[0].rows, BH, row_bytes);
    copy_rows(buffer, buffer_rows, part[0].rows, whole, S, part[1].first, part[1].rows, BH, row_bytes);
}
static void gather_shard(const ring_ranks *ranks, const ring_rank *rank, const void *buffer, int64_t buffer_rows,
                         void *whole, size_t row_bytes) {
    const int64_t BH = ranks->shape.B * ranks->shape.H, S = ranks->shape.Sq;
    const ring_span *part = rank->shard.part;
    copy_rows(whole, S, part[0].first, buffer, buffer_rows, 0, part[0].rows, BH, row_bytes);
    copy_rows(whole, S, part[1].first, buffer, buffer_rows, part[0].rows, part[1].rows, BH, row_bytes);
}

void ring_ranks_create_cpu(ring_ranks *ranks, const fa_shape *shape, const ring_config *config, int backward,
                           const ring_tensors *t) {
    memset(ranks, 0, sizeof *ranks);
    ranks->shape = *shape;
    ranks->config = *config;
    ranks->backward = backward;
    ranks->max_rows = ring_max_rows(config->layout, shape->Sq, config->n_ranks);
    ranks->strides = fa_strides_contiguous(shape->H, ranks->max_rows, shape->D);
    ranks->tensor_elems = shape->B * shape->H * ranks->max_rows * shape->D;
    const int64_t BH = shape->B * shape->H, n = ranks->tensor_elems, max_rows = ranks->max_rows;
    const size_t elem = ring_dtype_bytes(config->dtype), row = (size_t)shape->D * elem;
    const size_t float_row = (size_t)shape->D * sizeof(float);
    for (int r = 0; r < config->n_ranks; r++) {
        ring_rank *rank = &ranks->rank[r];
        rank->shard = ring_shard_of(config->layout, shape->Sq, config->n_ranks, r);
        const int64_t rows = rank->shard.rows;
        rank->q = alloc_poisoned((size_t)n * elem, "a rank's Q");
        rank->kv_own = alloc_poisoned(2 * (size_t)n * elem, "a rank's K and V");
        for (int i = 0; i < 2; i++) rank->kv_ring[i] = alloc_poisoned(2 * (size_t)n * elem, "a rank's K/V ring buffer");
        rank->o = alloc_poisoned((size_t)n * sizeof(float), "a rank's O");
        const size_t row_stats = (size_t)(BH * (rows > 0 ? rows : 1)) * sizeof(float);
        rank->lse = alloc_poisoned(row_stats, "a rank's LSE");
        rank->lse_lo = alloc_poisoned(row_stats, "a rank's LSE, low part");
        rank->o_block = alloc_poisoned((size_t)n * sizeof(float), "a rank's block O");
        rank->lse_block = alloc_poisoned((size_t)(BH * max_rows) * sizeof(float), "a rank's block LSE");
        scatter_shard(ranks, rank, rank->q, max_rows, t->q, row);
        scatter_shard(ranks, rank, rank->kv_own, max_rows, t->k, row);
        scatter_shard(ranks, rank, (char *)rank->kv_own + (size_t)n * elem, max_rows, t->v, row);   // V after K
        if (!backward) continue;
        rank->dout = alloc_poisoned((size_t)n * elem, "a rank's dO");
        rank->dq = alloc_poisoned((size_t)n * sizeof(float), "a rank's dQ");
        rank->dq_block = alloc_poisoned((size_t)n * sizeof(float), "a rank's block dQ");
        for (int i = 0; i < 2; i++)
            rank->dkv_ring[i] = alloc_poisoned(2 * (size_t)n * sizeof(float), "a rank's dK/dV ring buffer");
        rank->dkv_block = alloc_poisoned(2 * (size_t)n * sizeof(float), "a rank's block dK and dV");
        rank->delta = alloc_poisoned((size_t)(BH * max_rows) * sizeof(float), "a rank's Delta");
        scatter_shard(ranks, rank, rank->dout, max_rows, t->dout, row);
        scatter_shard(ranks, rank, rank->o, max_rows, t->o, float_row);
        scatter_shard(ranks, rank, rank->lse, rows, t->lse, sizeof(float));
    }
}

void ring_ranks_gather_forward_cpu(const ring_ranks *ranks, float *o, float *lse) {
    const size_t float_row = (size_t)ranks->shape.D * sizeof(float);
    for (int r = 0; r < ranks->config.n_ranks; r++) {
        const ring_rank *rank = &ranks->rank[r];
        gather_shard(ranks, rank, rank->o, ranks->max_rows, o, float_row);
        gather_shard(ranks, rank, rank->lse, rank->shard.rows, lse, sizeof(float));
    }
}

// dK and dV have come home: after the last step they are in the ring buffer the last exchange wrote (4_backward_*).
void ring_ranks_gather_backward_cpu(const ring_ranks *ranks, float *dq, float *dk, float *dv) {
    const size_t float_row = (size_t)ranks->shape.D * sizeof(float);
    const int home = ranks->config.n_ranks % 2;
    for (int r = 0; r < ranks->config.n_ranks; r++) {
        const ring_rank *rank = &ranks->rank[r];
        gather_shard(ranks, rank, rank->dq, ranks->max_rows, dq, float_row);
        gather_shard(ranks, rank, rank->dkv_ring[home], ranks->max_rows, dk, float_row);
        gather_shard(ranks, rank, rank->dkv_ring[home] + ranks->tensor_elems, ranks->max_rows, dv, float_row);
    }
}

void ring_ranks_free_cpu(ring_ranks *ranks) {
    for (int r = 0; r < ranks->config.n_ranks; r++) {
        ring_rank *rank = &ranks->rank[r];
        void *buffers[] = {rank->q, rank->dout, rank->kv_own, rank->kv_ring[0], rank->kv_ring[1], rank->o,
                           rank->lse, rank->lse_lo, rank->o_block, rank->lse_block, rank->dq, rank->dq_block,
                           rank->dkv_ring[0], rank->dkv_ring[1], rank->dkv_block, rank->delta};
        for (size_t i = 0; i < sizeof buffers / sizeof buffers[0]; i++) free(buffers[i]);
    }
}
