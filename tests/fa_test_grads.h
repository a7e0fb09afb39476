// fa_test_grads.h - the gradients of one backward run on the host (fa_grads: dQ, dK, dV), for the tests that compare
// runs bit for bit: phase 4's and phase 5's determinism tests.
#ifndef FA_TEST_GRADS_H
#define FA_TEST_GRADS_H

#include <stdlib.h>
#include <string.h>

#include "fa_driver.h"   // fa_grads
#include "fa_shape.h"
#include "fa_tensor.h"
#include "fa_test_expect.h"

// Poisoned, so that an element a run fails to write cannot pass for a written one.
static inline fa_grads grads_alloc(const fa_shape *s) {
    fa_grads g = {fa_alloc_floats(fa_numel_q(s), "dQ"), fa_alloc_floats(fa_numel_kv(s), "dK"),
                  fa_alloc_floats(fa_numel_kv(s), "dV")};
    fa_poison(g.dq, fa_numel_q(s)), fa_poison(g.dk, fa_numel_kv(s)), fa_poison(g.dv, fa_numel_kv(s));
    return g;
}

static inline void grads_free(fa_grads *g) { free(g->dq), free(g->dk), free(g->dv); }

// A failed expectation (fa_test_expect.h) unless dQ, dK and dV of two runs are identical to the bit; it names the
// first that differs.
static inline void expect_same_bits(const fa_shape *s, const fa_grads *a, const fa_grads *b, const char *what) {
    const char *differs = NULL;
    if (memcmp(a->dq, b->dq, (size_t)fa_numel_q(s) * sizeof(float)) != 0) differs = "dQ";
    else if (memcmp(a->dk, b->dk, (size_t)fa_numel_kv(s) * sizeof(float)) != 0) differs = "dK";
    else if (memcmp(a->dv, b->dv, (size_t)fa_numel_kv(s) * sizeof(float)) != 0) differs = "dV";
    EXPECT_MSG(differs == NULL, "%s: %s differs", what, differs);
}

#endif
