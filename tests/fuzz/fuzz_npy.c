// fuzz_npy.c - fuzz target for the .npy reader (common/fa_npy.c), the suite's one parser of untrusted input.
//
// Every input goes through both entry points: fa_npy_parse_header() on the bytes as they are (the buffer is exactly
// `size` long, so AddressSanitizer sees any read past its end), and fa_npy_load_f32() on the same bytes as a file.
// Beyond "no crash, no leak, no undefined behaviour", the target checks what the reader promises:
//   - a refusal comes with a one-line reason;
//   - an accepted header has 0..8 dimensions, an item size of 4 or 8, numel = the product of the shape, at most 2^40,
//     and its data offset lies inside the buffer;
//   - a load succeeds only when the header parses and the file is exactly header + numel * itemsize bytes, and a
//     float32 load returns the payload bit for bit.
// A broken promise aborts, which libFuzzer reports as a crash and saves the input.
//
// Two builds (tests/hardening.cmake):
//   bin/fuzz_npy         clang -fsanitize=fuzzer,address,undefined: the fuzzer itself (tests/fuzz/run.sh runs it)
//   bin/fuzz_npy_replay  the normal compiler with -DFA_FUZZ_REPLAY: a main() that feeds files to the same target, so
//                        the seed corpus and every saved crash are replayed by ctest, under `make sanitize` too.
#define _GNU_SOURCE
#include "fa_npy.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_NUMEL (INT64_C(1) << 40)

static void expect(int ok, const char *what) {
    if (ok) return;
    fprintf(stderr, "fuzz_npy: broken promise: %s\n", what);
    abort();
}

static void expect_one_line_reason(const char *err) {
    expect(err[0] != '\0', "a refusal has a reason");
    expect(strchr(err, '\n') == NULL, "the reason is one line");
}

// The bytes under test as a file: an anonymous in-memory file (memfd), opened again by its /proc path, so that
// fa_npy_load_f32() runs its real fopen/fread/fseek code without touching the disk.
static const char *as_file(const uint8_t *data, size_t size) {
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("fuzz_npy", 0);
        expect(fd >= 0, "memfd_create works");
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    expect(ftruncate(fd, 0) == 0, "the memfd can be emptied");
    expect(size == 0 || pwrite(fd, data, size, 0) == (ssize_t)size, "the memfd can be written");
    return path;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fa_npy_header h;
    char err[512] = "";
    const int parsed = fa_npy_parse_header(data, size, &h, err, sizeof err) == 0;
    if (parsed) {
        expect(h.ndim >= 0 && h.ndim <= FA_NPY_MAX_DIMS, "0..8 dimensions");
        expect(h.itemsize == 4 || h.itemsize == 8, "item size 4 or 8");
        int64_t numel = 1;
        for (int i = 0; i < h.ndim; i++) {
            expect(h.shape[i] >= 0 && h.shape[i] <= MAX_NUMEL, "each dimension in 0..2^40");
            numel = h.shape[i] == 0 || numel <= MAX_NUMEL / h.shape[i] ? numel * h.shape[i] : MAX_NUMEL + 1;
        }
        expect(numel == h.numel && numel <= MAX_NUMEL, "numel is the product of the shape, at most 2^40");
        expect(h.data_offset <= size, "the data starts inside the buffer");
    } else {
        expect_one_line_reason(err);
    }

    // The load path. Ask for the shape the header declares (so a good header gets as far as the payload checks), or
    // for a fixed (2, 3) when it did not parse.
    int ndim = 2;
    int64_t want[FA_NPY_MAX_DIMS] = {2, 3};
    if (parsed) {
        ndim = h.ndim;
        memcpy(want, h.shape, sizeof want);
    }
    char load_err[1024] = "";
    float *x = fa_npy_load_f32(as_file(data, size), ndim, want, load_err, sizeof load_err);
    if (x) {
        expect(parsed, "a load succeeds only when the header parses");
        expect(size == h.data_offset + (size_t)h.numel * (size_t)h.itemsize, "the file is exactly header + payload");
        if (h.itemsize == 4 && h.numel > 0)
            expect(memcmp(x, data + h.data_offset, (size_t)h.numel * 4) == 0, "float32 data comes back bit for bit");
        free(x);
    } else {
        expect_one_line_reason(load_err);
    }
    return 0;
}

#ifdef FA_FUZZ_REPLAY
// Replays files (or every file of a directory) through the target; prints how many, exits 0 when none aborted.
static int replay_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        exit(2);
    }
    size_t cap = 1 << 16, size = 0;
    uint8_t *data = malloc(cap);
    for (size_t got; data && (got = fread(data + size, 1, cap - size, f)) > 0;) {
        size += got;
        if (size == cap) data = realloc(data, cap *= 2);
    }
    fclose(f);
    if (!data) exit(2);
    // An exact-size copy, so that a read past the end is past the end of the allocation.
    uint8_t *exact = malloc(size ? size : 1);
    memcpy(exact, data, size);
    free(data);
    LLVMFuzzerTestOneInput(exact, size);
    free(exact);
    return 1;
}

static int replay(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "cannot open %s\n", path);
        exit(2);
    }
    if (!S_ISDIR(st.st_mode)) return replay_file(path);
    struct dirent **entries;
    int n = scandir(path, &entries, NULL, alphasort), done = 0;
    for (int i = 0; i < n; i++) {
        char child[4096];
        snprintf(child, sizeof child, "%s/%s", path, entries[i]->d_name);
        if (entries[i]->d_name[0] != '.' && stat(child, &st) == 0 && S_ISREG(st.st_mode)) done += replay_file(child);
        free(entries[i]);
    }
    free(entries);
    return done;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE|DIR...\n", argv[0]);
        return 2;
    }
    int done = 0;
    for (int i = 1; i < argc; i++) done += replay(argv[i]);
    printf("fuzz_npy_replay: %d inputs replayed, every promise kept\n", done);
    return done > 0 ? 0 : 1;
}
#endif
