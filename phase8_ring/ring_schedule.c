// ring_schedule.c - prints the plan of phase 8's ring (phase8_ring/ring.h) for docs/10-ring.md: which rows each rank
// holds, what each rank computes at each step, and the attention matrix with the step that computes each
// (query, key) pair. It calls the functions the ring itself calls (ring_shard_of, ring_source, ring_block_of), so the
// figures are the code's own rule.
//
// Run: build/bin/ring_schedule [--ranks N] [--S S] [--causal] [--zigzag]   (defaults: 4 ranks, S = 16)
#include "ring.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Query-key pairs a block computes: all of them, or with the top-left causal mask on the diagonal block.
static int64_t block_pairs(const ring_block *b) {
    if (!b->causal) return b->q.rows * b->k.rows;
    int64_t pairs = 0;
    for (int64_t i = 0; i < b->q.rows; i++) pairs += i + 1 < b->k.rows ? i + 1 : b->k.rows;
    return pairs;
}

// The sequence row of a rank's local row i.
static int64_t sequence_row(const ring_shard *shard, int64_t i) {
    return i < shard->part[0].rows ? shard->part[0].first + i : shard->part[1].first + (i - shard->part[0].rows);
}

static int parse(const char *flag, const char *value, int lo, int hi) {
    char *end;
    const long x = value ? strtol(value, &end, 10) : 0;
    if (!value || *end != '\0' || x < lo || x > hi) {
        fprintf(stderr, "error: %s expects an integer from %d to %d\n", flag, lo, hi);
        exit(2);
    }
    return (int)x;
}

int main(int argc, char **argv) {
    int N = 4, S = 16, causal = 0, layout = RING_CONTIGUOUS;
    for (int a = 1; a < argc; a++) {
        if (strcmp(argv[a], "--ranks") == 0) N = parse("--ranks", a + 1 < argc ? argv[++a] : NULL, 1, RING_MAX_RANKS);
        else if (strcmp(argv[a], "--S") == 0) S = parse("--S", a + 1 < argc ? argv[++a] : NULL, 1, 4096);
        else if (strcmp(argv[a], "--causal") == 0) causal = 1;
        else if (strcmp(argv[a], "--zigzag") == 0) layout = RING_ZIGZAG;
        else {
            fprintf(stderr, "error: unknown option '%s' (ring_schedule [--ranks N] [--S S] [--causal] [--zigzag])\n",
                    argv[a]);
            return 2;
        }
    }
    ring_shard shards[RING_MAX_RANKS];
    for (int r = 0; r < N; r++) shards[r] = ring_shard_of(layout, S, N, r);

    printf("%s layout, %d ranks, S = %d, %s\n", layout == RING_ZIGZAG ? "zigzag" : "contiguous", N, S,
           causal ? "causal" : "not causal");
    printf("\nrows each rank holds:\n");
    for (int r = 0; r < N; r++) {
        printf("  rank %d:", r);
        for (int p = 0; p < 2; p++)
            if (shards[r].part[p].rows > 0)
                printf(" %lld-%lld", (long long)shards[r].part[p].first,
                       (long long)(shards[r].part[p].first + shards[r].part[p].rows - 1));
        printf("\n");
    }

    // Per step: the K/V block each rank holds and the pairs it computes; a step lasts as long as its busiest rank.
    printf("\nstep by step: source rank of the K/V block / query-key pairs computed\n        ");
    for (int s = 0; s < N; s++) printf("   step %-4d", s);
    printf("    total\n");
    int64_t busiest[RING_MAX_RANKS] = {0}, all_pairs = 0;
    for (int r = 0; r < N; r++) {
        int64_t total = 0;
        printf("  rank %-2d", r);
        for (int s = 0; s < N; s++) {
            const int source = ring_source(r, s, N);
            const ring_block b = ring_block_of(layout, causal, &shards[r], &shards[source], r, source);
            const int64_t pairs = b.q.rows > 0 && b.k.rows > 0 ? block_pairs(&b) : 0;
            printf("  %2d / %-5lld", source, (long long)pairs);
            total += pairs;
            if (pairs > busiest[s]) busiest[s] = pairs;
        }
        printf("  %7lld\n", (long long)total);
        all_pairs += total;
    }
    int64_t ring_time = 0;
    for (int s = 0; s < N; s++) ring_time += busiest[s];
    printf("  busiest");
    for (int s = 0; s < N; s++) printf("       %-5lld", (long long)busiest[s]);
    printf("  %7lld\n", (long long)ring_time);
    printf("\nbalance: all pairs / (ranks x the busiest rank's pairs, summed over steps) = %lld / (%d x %lld) = %.3f\n",
           (long long)all_pairs, N, (long long)ring_time, (double)all_pairs / ((double)N * (double)ring_time));
    printf("(the per-GPU efficiency a ring can reach when a step's time is its busiest rank's compute)\n");

    // The attention matrix: row i (a query), column j (a key); the digit is the step that computes the pair, '.' a
    // pair the causal mask removes. Rows are printed in the order the ranks hold them.
    if (S <= 64) {
        printf("\nattention matrix: query row (holder) x key column; digit = the step that computes the pair\n");
        for (int r = 0; r < N; r++)
            for (int64_t i = 0; i < shards[r].rows; i++) {
                const int64_t row = sequence_row(&shards[r], i);
                printf("  %3lld (rank %d) ", (long long)row, r);
                for (int64_t col = 0; col < S; col++) {
                    int step = -1;
                    for (int s = 0; s < N && step < 0; s++) {
                        const int source = ring_source(r, s, N);
                        const ring_block b = ring_block_of(layout, causal, &shards[r], &shards[source], r, source);
                        for (int64_t j = 0; j < b.k.rows; j++) {
                            const int64_t key = sequence_row(&shards[source], b.k.first + j);
                            const int in_q = i >= b.q.first && i < b.q.first + b.q.rows;
                            const int masked = b.causal && b.k.first + j > i;   // top-left, on the local rows
                            if (key == col && in_q && !masked) step = s;
                        }
                    }
                    putchar(step < 0 ? '.' : (char)('0' + step % 10));
                }
                putchar('\n');
            }
    }
    return 0;
}
