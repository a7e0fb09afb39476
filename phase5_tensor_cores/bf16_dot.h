// bf16_dot.h - phase 5, step 4's CPU twin with bf16 inputs on the CPU's own bf16 arithmetic: every product of the
// backward as 32 x 32 blocks of float32 sums of exact bf16 products (bf16_dot.c), the CPU's nearest thing to a
// tensor core's mma. Three units compute the same block:
//   AMX       (AMX-BF16: tdpbf16ps), a 16 x 16 float32 tile += a 16 x 32 bf16 tile times a 32 x 16 one, in one
//             instruction; four of them make the block. Intel Xeons from Sapphire Rapids on.
//   AVX512    (AVX512_BF16: vdpbf16ps), 16 float32 lanes += 16 pairs of bf16 products, in one instruction.
//   emulated  plain C, one pair of products at a time: what both instructions compute, on any CPU (the tests run
//             the bf16 passes on it where the CPU has neither).
// The best the CPU has is chosen at run time; without either the backward runs its float32 FMAs on widened values
// (4_backward_dkdv_cpu.c, 4_backward_dq_cpu.c) instead. The report says which ran.
#ifndef BF16_DOT_H
#define BF16_DOT_H

#include <stdint.h>

#include "fa_shape.h"   // fa_strides

typedef enum { BF16_DOT_NONE, BF16_DOT_EMULATED, BF16_DOT_AVX512, BF16_DOT_AMX } bf16_dot_unit;

// The unit the backward's products run on for this dtype: AMX, else AVX512, else NONE (fp16, or a CPU with neither;
// the build must be able to compile for them too). The first call asks Linux for the AMX registers
// (arch_prctl(ARCH_REQ_XCOMP_PERM)); call it once before any parallel region.
bf16_dot_unit bf16_dot_unit_for(int dtype);
// The unit bf16_dot_unit_for() returns for bf16 from now on: the driver's --cpu-bf16 and the tests (BF16_DOT_EMULATED
// runs everywhere, BF16_DOT_NONE means the float32 passes; a unit this CPU lacks is refused with exit 2).
void bf16_dot_force(bf16_dot_unit unit);
// What the products run on, for the report: "every product on AMX-BF16 tiles (tdpbf16ps)", ... or "float32 FMAs ...".
const char *bf16_dot_products(int dtype);

// The block: BF16_DOT_BLOCK rows x BF16_DOT_BLOCK columns of float32 sums. The sums run along k, a multiple of
// BF16_DOT_BLOCK (tiles are padded with zeros to it).
#define BF16_DOT_BLOCK 32

// Tiles in the two orders a block reads, as bf16 bits:
//   rows   a[r][k] at a[r * a_pad + k]: the operand whose rows are the block's rows, k contiguous;
//   pairs  b[k][c] at b[((k / 2) * b_pad + c) * 2 + k % 2]: the operand whose columns are the block's columns, in
//          pairs along k, so that one 32-bit word holds b[k][c] and b[k + 1][c] (the order both instructions and
//          AMX's B tile want: one 64-byte row of it is 16 columns' pairs).
// out[r][c] = (accumulate ? out[r][c] : 0) + sum over k < n of a[r][k] * b[k][c], for r, c < BF16_DOT_BLOCK;
// out is [BF16_DOT_BLOCK][out_pad] float32. Each product of two bf16 values is exact in float32; each unit adds
// them in its own order, rounding to float32 (AMX and AVX512 also read subnormal inputs as zero).
// A thread calls bf16_dot_thread_begin() before its first block and bf16_dot_thread_end() after its last (AMX loads
// its tile shapes into each thread's registers); the others need nothing.
void bf16_dot_thread_begin(bf16_dot_unit unit);
void bf16_dot_thread_end(bf16_dot_unit unit);
void bf16_dot_block(bf16_dot_unit unit, const uint16_t *a, int64_t a_pad, const uint16_t *b_pairs, int64_t b_pad,
                    int64_t n, float *out, int64_t out_pad, int accumulate);

// The tiles of one head's [S, D] bf16 tensor (its start and strides), staged once before a pass in one of the two
// orders: tile t holds rows t * block .. t * block + block - 1, padded with zeros to `padded` rows (a multiple of
// BF16_DOT_BLOCK) and to D_pad dims, each tile `padded * D_pad` values from out + t * padded * D_pad:
//   BF16_TILE_ROWS            [padded][D_pad]            the tile as a block's rows, the sums along d
//   BF16_TILE_PAIRS_ALONG_D   [D_pad / 2][padded][2]     the tile as a block's columns, the sums along d
//   BF16_TILE_PAIRS_ALONG_ROWS [padded / 2][D_pad][2]    the tile's dims as a block's columns, the sums along its rows
typedef enum { BF16_TILE_ROWS, BF16_TILE_PAIRS_ALONG_D, BF16_TILE_PAIRS_ALONG_ROWS } bf16_tile_order;
void bf16_dot_stage_tiles(const uint16_t *x, fa_strides strides, int64_t S, int64_t D, int block, int64_t padded,
                          int64_t D_pad, bf16_tile_order order, uint16_t *out);

#endif
