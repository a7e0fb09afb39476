// philox.h - Philox4x32-10 (Salmon, Moraes, Dror and Shaw, "Parallel random numbers: as easy as 1, 2, 3", SC 2011),
// the counter-based generator dropout uses (extensions.h, dropout_keep4), on the CPU and the GPU alike.
//
// A counter-based generator is a pure function: four 32-bit words of output from a 128-bit counter and a 64-bit key.
// There is no state to carry from one call to the next, so any thread can ask for the random numbers of any element
// at any time, in any order, and get the same bits: the forward and the backward pass regenerate the same dropout
// mask from the element's coordinates instead of storing it, and the float64 oracle regenerates it once more.
//
// Each of the 10 rounds multiplies two of the four words by fixed odd constants, keeps both halves of each 64-bit
// product, and mixes the high halves into the other two words with the key; the key grows by two fixed constants
// (the golden ratio's and sqrt(3)'s fractional bits) between rounds. tests/test_phase6_tiles.c checks the three
// known-answer vectors the generator's authors publish with it (Random123's tests/kat_vectors).
#ifndef PHILOX_H
#define PHILOX_H

#include <stdint.h>

#include "fa_math.h"   // FA_HOST_DEVICE

typedef struct {
    uint32_t w[4];
} philox4;

#define PHILOX_M0 0xD2511F53u   // the round's multipliers
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u   // the key's increments between rounds
#define PHILOX_W1 0xBB67AE85u

// One round: (hi, lo) = the 64-bit products M0 * c0 and M1 * c2; the two high halves are mixed into c1 and c3.
FA_HOST_DEVICE static inline philox4 philox_round(philox4 c, uint32_t key0, uint32_t key1) {
    const uint64_t product0 = (uint64_t)PHILOX_M0 * c.w[0], product1 = (uint64_t)PHILOX_M1 * c.w[2];
    philox4 out;
    out.w[0] = (uint32_t)(product1 >> 32) ^ c.w[1] ^ key0;
    out.w[1] = (uint32_t)product1;
    out.w[2] = (uint32_t)(product0 >> 32) ^ c.w[3] ^ key1;
    out.w[3] = (uint32_t)product0;
    return out;
}

// Ten rounds: four random 32-bit words for `counter` under the key (key0, key1).
FA_HOST_DEVICE static inline philox4 philox4x32_10(philox4 counter, uint32_t key0, uint32_t key1) {
    for (int round = 0; round < 10; round++) {
        if (round > 0) key0 += PHILOX_W0, key1 += PHILOX_W1;
        counter = philox_round(counter, key0, key1);
    }
    return counter;
}

#endif
