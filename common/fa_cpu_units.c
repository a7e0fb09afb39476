// fa_cpu_units.c - the CPU's bf16 units: found (CPUID) and, for AMX, asked of Linux and configured (fa_cpu_units.h).
#include "fa_cpu_units.h"

#include <stdint.h>

#if FA_CPU_UNITS
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

// AMX's tile data, as Linux names it for arch_prctl.
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

int fa_cpu_has_avx512_bf16(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bf16");
}

int fa_cpu_amx_granted(void) {
    static int granted = -1;   // asked once: the first call comes before any parallel region
    if (granted < 0) {
        unsigned eax, ebx, ecx, edx;
        const unsigned amx_bf16 = 1u << 22, amx_tile = 1u << 24;   // CPUID.(7, 0):EDX
        const int has = __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && (edx & amx_bf16) && (edx & amx_tile);
        granted = has && syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
    }
    return granted;
}

// The 64 bytes ldtilecfg reads: a palette (1: eight tiles of up to 16 rows x 64 bytes), then each tile's bytes per
// row and rows.
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t bytes_per_row[16];
    uint8_t rows[16];
} amx_tile_shapes;

// A constant object, not a local one: GCC's intrinsic tells the compiler that ldtilecfg reads only 8 bytes, so the
// stores that fill a configuration on the stack beyond them may be dropped as dead, and ldtilecfg then faults.
static const amx_tile_shapes EIGHT_FULL_TILES __attribute__((aligned(64))) = {
    .palette = 1, .bytes_per_row = {64, 64, 64, 64, 64, 64, 64, 64}, .rows = {16, 16, 16, 16, 16, 16, 16, 16}};

__attribute__((target("amx-tile"))) void fa_amx_thread_begin(void) { _tile_loadconfig(&EIGHT_FULL_TILES); }
__attribute__((target("amx-tile"))) void fa_amx_thread_end(void) { _tile_release(); }
#else
int fa_cpu_has_avx512_bf16(void) { return 0; }
int fa_cpu_amx_granted(void) { return 0; }
void fa_amx_thread_begin(void) {}
void fa_amx_thread_end(void) {}
#endif
