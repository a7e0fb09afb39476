// fa_test_grads.h - the gradients of one backward run on the host (dQ, dK, dV), for the tests that compare runs bit
// for bit: phase 4's and phase 5's determinism tests.
#ifndef FA_TEST_GRADS_H
#define FA_TEST_GRADS_H

#include <stdlib.h>
#include <string.h>

#include "fa_shape.h"
#include "fa_tensor.h"

typedef struct {
    float *dq, *dk, *dv;
} grads;

// Poisoned, so that an element a run fails to write cannot pass for a written one.
static inline grads grads_alloc(const fa_shape *s) {
    grads g = {fa_alloc_floats(fa_numel_q(s), "dQ"), fa_alloc_floats(fa_numel_kv(s), "dK"),
               fa_alloc_floats(fa_numel_kv(s), "dV")};
    fa_poison(g.dq, fa_numel_q(s)), fa_poison(g.dk, fa_numel_kv(s)), fa_poison(g.dv, fa_numel_kv(s));
    return g;
}

static inline void grads_free(grads *g) { free(g->dq), free(g->dk), free(g->dv); }

// The first of dQ, dK and dV whose bits differ between two runs, or NULL when all three are identical.
static inline const char *grads_first_difference(const fa_shape *s, const grads *a, const grads *b) {
    if (memcmp(a->dq, b->dq, (size_t)fa_numel_q(s) * sizeof(float)) != 0) return "dQ";
    if (memcmp(a->dk, b->dk, (size_t)fa_numel_kv(s) * sizeof(float)) != 0) return "dK";
    if (memcmp(a->dv, b->dv, (size_t)fa_numel_kv(s) * sizeof(float)) != 0) return "dV";
    return NULL;
}

#endif
