// fa_npy.c - .npy reading and writing (format: https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html).
#include "fa_npy.h"
#include "fa_tensor.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const unsigned char NPY_MAGIC[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
#define NPY_MAX_HEADER_LEN 65536   // real headers are under 200 bytes; anything this long is not ours

// Finds the value that follows the dictionary key 'name' (or "name") in the header text, or NULL.
static const char *find_key(const char *text, const char *name) {
    char quoted[32];
    const char quotes[2] = {'\'', '"'};
    for (int q = 0; q < 2; q++) {
        snprintf(quoted, sizeof quoted, "%c%s%c", quotes[q], name, quotes[q]);
        const char *at = strstr(text, quoted);
        if (!at) continue;
        at += strlen(quoted);
        while (*at == ' ') at++;
        if (*at != ':') return NULL;
        at++;
        while (*at == ' ') at++;
        return at;
    }
    return NULL;
}

static int fail(char *err, size_t err_len, const char *message) {
    snprintf(err, err_len, "%s", message);
    return -1;
}

static int parse_shape(const char *at, fa_npy_header *h, char *err, size_t err_len) {
    if (*at != '(') return fail(err, err_len, "npy header: 'shape' is not a tuple");
    at++;
    h->ndim = 0;
    h->numel = 1;
    for (;;) {
        while (*at == ' ') at++;
        if (*at == ')') break;
        if (!isdigit((unsigned char)*at)) return fail(err, err_len, "npy header: 'shape' holds something other than sizes");
        if (h->ndim == FA_NPY_MAX_DIMS) return fail(err, err_len, "npy header: more than 8 dimensions");
        errno = 0;
        char *end;
        long long n = strtoll(at, &end, 10);
        if (errno || n < 0 || n > (1LL << 40)) return fail(err, err_len, "npy header: a dimension is out of range");
        h->shape[h->ndim++] = n;
        // numel stays at most 2^40: the product is checked by division before it is formed, so it never overflows
        // (two factors of 2^40 each would).
        if (n > 0 && h->numel > (INT64_C(1) << 40) / n)
            return fail(err, err_len, "npy header: the declared shape is too large");
        h->numel *= n;
        at = end;
        while (*at == ' ') at++;
        if (*at == ',') at++;
        else if (*at != ')') return fail(err, err_len, "npy header: malformed 'shape'");
    }
    return 0;
}

int fa_npy_parse_header(const unsigned char *buf, size_t len, fa_npy_header *h, char *err, size_t err_len) {
    memset(h, 0, sizeof *h);
    if (len < 10 || memcmp(buf, NPY_MAGIC, 6) != 0) return fail(err, err_len, "not a .npy file (bad magic)");
    int major = buf[6];
    size_t header_len, prefix;
    if (major == 1) {
        header_len = (size_t)buf[8] | (size_t)buf[9] << 8;
        prefix = 10;
    } else if (major == 2 || major == 3) {
        if (len < 12) return fail(err, err_len, "npy header is truncated");
        header_len = (size_t)buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 | (size_t)buf[11] << 24;
        prefix = 12;
    } else {
        return fail(err, err_len, "unsupported .npy format version");
    }
    if (header_len > NPY_MAX_HEADER_LEN) return fail(err, err_len, "npy header is implausibly long");
    if (len < prefix + header_len) return fail(err, err_len, "npy header is truncated");

    char text[NPY_MAX_HEADER_LEN + 1];
    memcpy(text, buf + prefix, header_len);
    text[header_len] = '\0';
    if (strlen(text) != header_len) return fail(err, err_len, "npy header contains a NUL byte");

    const char *descr = find_key(text, "descr");
    if (!descr) return fail(err, err_len, "npy header has no 'descr'");
    if (strncmp(descr, "'<f4'", 5) == 0 || strncmp(descr, "\"<f4\"", 5) == 0) h->itemsize = 4;
    else if (strncmp(descr, "'<f8'", 5) == 0 || strncmp(descr, "\"<f8\"", 5) == 0) h->itemsize = 8;
    else return fail(err, err_len, "npy dtype is not little-endian float32 or float64");

    const char *order = find_key(text, "fortran_order");
    if (!order) return fail(err, err_len, "npy header has no 'fortran_order'");
    if (strncmp(order, "True", 4) == 0) return fail(err, err_len, "npy array is in Fortran order; save it in C order");
    if (strncmp(order, "False", 5) != 0) return fail(err, err_len, "npy header: malformed 'fortran_order'");

    const char *shape = find_key(text, "shape");
    if (!shape) return fail(err, err_len, "npy header has no 'shape'");
    if (parse_shape(shape, h, err, err_len) != 0) return -1;
    h->data_offset = prefix + header_len;
    return 0;
}

// Opens path and parses its header; returns the open file (at an unspecified position), or NULL with err set.
static FILE *open_and_parse(const char *path, fa_npy_header *h, char *err, size_t err_len) {
    char why[200];
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, err_len, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    unsigned char head[NPY_MAX_HEADER_LEN + 12];
    size_t got = fread(head, 1, sizeof head, f);
    if (ferror(f)) {   // a folder, a device that cannot be read, ...
        snprintf(err, err_len, "cannot read %s: %s", path, strerror(errno));
        fclose(f);
        return NULL;
    }
    if (fa_npy_parse_header(head, got, h, why, sizeof why) != 0) {
        snprintf(err, err_len, "%s: %s", path, why);
        fclose(f);
        return NULL;
    }
    return f;
}

int fa_npy_read_header(const char *path, fa_npy_header *h, char *err, size_t err_len) {
    FILE *f = open_and_parse(path, h, err, err_len);
    if (!f) return -1;
    fclose(f);
    return 0;
}

float *fa_npy_load_f32(const char *path, int ndim, const int64_t *shape, char *err, size_t err_len) {
    fa_npy_header h;
    FILE *f = open_and_parse(path, &h, err, err_len);
    if (!f) return NULL;
    int same = h.ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = h.shape[i] == shape[i];
    if (!same) {
        char want[160] = "", have[160] = "";
        for (int i = 0; i < ndim; i++) snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", i ? "," : "", (long long)shape[i]);
        for (int i = 0; i < h.ndim; i++) snprintf(have + strlen(have), sizeof have - strlen(have), "%s%lld", i ? "," : "", (long long)h.shape[i]);
        snprintf(err, err_len, "%s has shape (%s), the run expects (%s)", path, have, want);
        fclose(f);
        return NULL;
    }
    // The payload must be exactly the declared size: a truncated or padded file is refused.
    if (fseek(f, 0, SEEK_END) != 0) {
        snprintf(err, err_len, "%s: cannot seek", path);
        fclose(f);
        return NULL;
    }
    long long file_size = ftell(f);
    long long payload = (long long)h.numel * h.itemsize;
    if (file_size < 0 || file_size - (long long)h.data_offset != payload) {
        snprintf(err, err_len, "%s: data is %lld bytes, the header declares %lld", path,
                 file_size - (long long)h.data_offset, payload);
        fclose(f);
        return NULL;
    }
    float *out = fa_try_alloc_floats(h.numel > 0 ? h.numel : 1);
    void *raw = h.itemsize == 4 ? (void *)out : malloc((size_t)payload > 0 ? (size_t)payload : 1);
    if (!out || !raw) {
        snprintf(err, err_len, "%s: out of memory reading %lld bytes", path, payload);
        if (raw != out) free(raw);
        free(out);
        fclose(f);
        return NULL;
    }
    if (fseek(f, (long)h.data_offset, SEEK_SET) != 0 || fread(raw, 1, (size_t)payload, f) != (size_t)payload) {
        snprintf(err, err_len, "%s: read failed", path);
        if (raw != out) free(raw);
        free(out);
        fclose(f);
        return NULL;
    }
    fclose(f);
    if (h.itemsize == 8) {
        const double *d = raw;
        for (int64_t i = 0; i < h.numel; i++) out[i] = (float)d[i];
        free(raw);
    }
    return out;
}

int fa_npy_save(const char *path, const void *data, int itemsize, int ndim, const int64_t *shape,
                char *err, size_t err_len) {
    char shape_text[256] = "";
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        snprintf(shape_text + strlen(shape_text), sizeof shape_text - strlen(shape_text), "%lld%s",
                 (long long)shape[i], ndim == 1 ? "," : (i + 1 < ndim ? ", " : ""));
        numel *= shape[i];
    }
    char dict[400];
    int n = snprintf(dict, sizeof dict, "{'descr': '<f%d', 'fortran_order': False, 'shape': (%s), }", itemsize, shape_text);
    // Pad with spaces so that the data starts on a 64-byte boundary; the header ends with '\n'.
    int total = 10 + n + 1;
    int pad = (64 - total % 64) % 64;
    unsigned char prefix[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0, 0};
    int header_len = n + pad + 1;
    prefix[8] = (unsigned char)(header_len & 0xff);
    prefix[9] = (unsigned char)(header_len >> 8);

    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        snprintf(err, err_len, "cannot write %s: %s", tmp, strerror(errno));
        return -1;
    }
    int ok = fwrite(prefix, 1, 10, f) == 10 && fwrite(dict, 1, (size_t)n, f) == (size_t)n;
    for (int i = 0; ok && i < pad; i++) ok = fputc(' ', f) != EOF;
    ok = ok && fputc('\n', f) != EOF;
    ok = ok && fwrite(data, (size_t)itemsize, (size_t)numel, f) == (size_t)numel;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        snprintf(err, err_len, "writing %s failed: %s", path, strerror(errno));
        remove(tmp);
        return -1;
    }
    return 0;
}
