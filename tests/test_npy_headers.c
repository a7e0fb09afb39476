// test_npy_headers.c - the .npy reader against the table of headers in tests/fixtures/npy_headers.txt: it reads the
// headers NumPy and it both read, as the table's dtype and shape, and refuses every other one (those NumPy refuses, and
// those NumPy reads but the reader leaves out: a duplicate key, which NumPy reads as the last, hex sizes, comments).
// tests/check_npy_headers.py holds NumPy to the same table, so that the two agree wherever the reader says yes. Also:
// a header longer than NumPy (1.24 on) reads, and a pipe and a folder given as the file, refused at once.
//
// Usage: test_npy_headers TABLE WORKDIR
#include "fa_npy.h"
#include "fa_test_expect.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// "a\nb" as written in the table, to the bytes it stands for.
static size_t unescape(const char *text, char *out, size_t out_len) {
    size_t n = 0;
    for (const char *c = text; *c && n + 1 < out_len; c++) {
        if (c[0] == '\\' && (c[1] == 'n' || c[1] == 't' || c[1] == '\\')) {
            out[n++] = c[1] == 'n' ? '\n' : c[1] == 't' ? '\t' : '\\';
            c++;
        } else {
            out[n++] = *c;
        }
    }
    out[n] = '\0';
    return n;
}

// The file's first bytes: magic, version, header length (2 bytes for 1.x, 4 after), the header.
static size_t npy_bytes(int major, int minor, const char *header, size_t header_len, unsigned char *out) {
    const unsigned char magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
    memcpy(out, magic, 6);
    out[6] = (unsigned char)major, out[7] = (unsigned char)minor;
    const size_t len_bytes = major == 1 ? 2 : 4;
    for (size_t b = 0; b < len_bytes; b++) out[8 + b] = (unsigned char)(header_len >> (8 * b));
    memcpy(out + 8 + len_bytes, header, header_len);
    return 8 + len_bytes + header_len;
}

static void check_line(char *line, int number) {
    char *fields[5];
    char *at = line;
    for (int f = 0; f < 4; f++) {
        fields[f] = at;
        at = strchr(at, '|');
        if (!at) {
            EXPECT_MSG(0, "table line %d has fewer than 5 fields", number);
            return;
        }
        *at++ = '\0';
    }
    fields[4] = at;
    const char *who = fields[0], *dtype = fields[2], *shape = fields[3];
    int major = 0, minor = 0;
    sscanf(fields[1], "%d.%d", &major, &minor);
    char header[1024];
    const size_t header_len = unescape(fields[4], header, sizeof header);
    unsigned char bytes[1100];
    const size_t n = npy_bytes(major, minor, header, header_len, bytes);
    fa_npy_header h;
    char err[256] = "";
    const int accepted = fa_npy_parse_header(bytes, n, &h, err, sizeof err) == 0;
    if (strcmp(who, "both") != 0) {
        EXPECT_MSG(!accepted, "line %d (%s reads it): the reader accepts %s", number, who, fields[4]);
        return;
    }
    EXPECT_MSG(accepted, "line %d: the reader refuses %s: %s", number, fields[4], err);
    if (!accepted) return;
    char got[128] = "";
    for (int d = 0; d < h.ndim; d++) snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? "," : "", (long long)h.shape[d]);
    EXPECT_MSG(strcmp(got, shape) == 0 && h.itemsize == (strcmp(dtype, "f4") == 0 ? 4 : 8),
               "line %d: the reader reads shape (%s), itemsize %d; the table says (%s), %s", number, got, h.itemsize,
               shape, dtype);
}

// A header of 10001 characters (NumPy's limit is 10000) around a valid dictionary.
static void check_too_long(void) {
    static char header[10002];
    static unsigned char bytes[10020];
    const char *dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    memset(header, ' ', 10001);
    memcpy(header, dict, strlen(dict));
    header[10000] = '\n';
    fa_npy_header h;
    char err[256];
    EXPECT(fa_npy_parse_header(bytes, npy_bytes(2, 0, header, 10001, bytes), &h, err, sizeof err) != 0);
    EXPECT(fa_npy_parse_header(bytes, npy_bytes(2, 0, header, 10000, bytes), &h, err, sizeof err) == 0);
}

// A pipe with no writer would block a plain fopen: the reader must refuse it at once. And a folder.
static void check_not_regular(const char *work) {
    char path[4096], err[600];
    fa_npy_header h;
    snprintf(path, sizeof path, "%s/pipe.npy", work);
    unlink(path);
    EXPECT(mkfifo(path, 0666) == 0);
    alarm(20);   // a reader that waits fails the test instead of hanging it
    EXPECT(fa_npy_read_header(path, &h, err, sizeof err) != 0 && strstr(err, "not a regular file"));
    alarm(0);
    unlink(path);
    snprintf(path, sizeof path, "%s/folder.npy", work);
    rmdir(path);
    EXPECT(mkdir(path, 0777) == 0);
    EXPECT(fa_npy_read_header(path, &h, err, sizeof err) != 0 && strstr(err, "Is a directory"));
    rmdir(path);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s TABLE WORKDIR\n", argv[0]);
        return 2;
    }
    FILE *table = fopen(argv[1], "r");
    if (!table) {
        fprintf(stderr, "cannot open %s\n", argv[1]);
        return 2;
    }
    char line[2048];
    int number = 0, entries = 0;
    while (fgets(line, sizeof line, table)) {
        number++;
        line[strcspn(line, "\n")] = '\0';
        if (line[0] == '#' || line[0] == '\0') continue;
        check_line(line, number);
        entries++;
    }
    fclose(table);
    check_too_long();
    mkdir(argv[2], 0777);
    check_not_regular(argv[2]);
    if (failures) fprintf(stderr, "%d check(s) failed\n", failures);
    else printf("All %d headers of the table, the long header, the pipe and the folder: as expected.\n", entries);
    return failures ? 1 : 0;
}
