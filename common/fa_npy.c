// fa_npy.c - .npy reading and writing (format: https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html).
#include "fa_npy.h"
#include "fa_tensor.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const unsigned char NPY_MAGIC[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
#define NPY_MAX_HEADER_LEN 10000   // numpy.lib.format's max_header_size

static int fail(char *err, size_t err_len, const char *message) {
    snprintf(err, err_len, "%s", message);
    return -1;
}

// The header is the text of a Python dict literal that NumPy reads with ast.literal_eval and then requires to have
// exactly the keys 'descr', 'fortran_order' and 'shape'. This parser accepts the subset of such literals that NumPy
// writes and reads alike: the three keys once each, in any order, quoted with ' or "; descr '<f4' or '<f8';
// fortran_order False; shape a tuple of decimal sizes (a 1-tuple needs its comma, "(5)" is the number 5 to Python,
// and a leading zero is a syntax error); an optional comma after the last entry; spaces, tabs and newlines between
// the tokens and after the closing brace. Anything else (a duplicate key, which NumPy reads as the last one, a fourth
// key, comments, other literals) is refused with one line.
typedef struct {
    const char *at;
} cursor;

static void skip_space(cursor *c) {
    while (*c->at == ' ' || *c->at == '\t' || *c->at == '\n') c->at++;
}

// A quoted string of letters, digits, '_', '<': its content into out. 0, or -1 when there is none.
static int take_string(cursor *c, char *out, size_t out_len) {
    const char quote = *c->at;
    if (quote != '\'' && quote != '"') return -1;
    const char *start = ++c->at;
    while (*c->at && *c->at != quote) {
        const char ch = *c->at;
        if (!(isalnum((unsigned char)ch) || ch == '_' || ch == '<')) return -1;
        c->at++;
    }
    if (*c->at != quote || (size_t)(c->at - start) >= out_len) return -1;
    snprintf(out, out_len, "%.*s", (int)(c->at - start), start);
    c->at++;
    return 0;
}

static int parse_shape(cursor *c, fa_npy_header *h, char *err, size_t err_len) {
    if (*c->at != '(') return fail(err, err_len, "npy header: 'shape' is not a tuple");
    c->at++;
    h->ndim = 0;
    h->numel = 1;
    int trailing_comma = 0;
    for (;;) {
        skip_space(c);
        if (*c->at == ')') break;
        if (!isdigit((unsigned char)*c->at)) return fail(err, err_len, "npy header: 'shape' holds something other than sizes");
        if (c->at[0] == '0' && isdigit((unsigned char)c->at[1]))
            return fail(err, err_len, "npy header: a size in 'shape' has a leading zero");
        if (h->ndim == FA_NPY_MAX_DIMS) return fail(err, err_len, "npy header: more than 8 dimensions");
        errno = 0;
        char *end;
        long long n = strtoll(c->at, &end, 10);
        if (errno || n < 0 || n > (1LL << 40)) return fail(err, err_len, "npy header: a dimension is out of range");
        h->shape[h->ndim++] = n;
        // numel stays at most 2^40: the product is checked by division before it is formed, so it never overflows
        // (two factors of 2^40 each would).
        if (n > 0 && h->numel > (INT64_C(1) << 40) / n)
            return fail(err, err_len, "npy header: the declared shape is too large");
        h->numel *= n;
        c->at = end;
        skip_space(c);
        trailing_comma = *c->at == ',';
        if (trailing_comma) c->at++;
        else if (*c->at != ')') return fail(err, err_len, "npy header: malformed 'shape'");
    }
    if (h->ndim == 1 && !trailing_comma)   // "(5)" is not a tuple: NumPy refuses it
        return fail(err, err_len, "npy header: 'shape' is not a tuple (a 1-tuple is written (N,))");
    c->at++;
    return 0;
}

static int parse_dict(const char *text, fa_npy_header *h, char *err, size_t err_len) {
    cursor c = {text};
    if (*c.at != '{') return fail(err, err_len, "npy header is not a dictionary");
    c.at++;
    int seen_descr = 0, seen_order = 0, seen_shape = 0;
    for (;;) {
        skip_space(&c);
        if (*c.at == '}') break;
        char key[32];
        if (take_string(&c, key, sizeof key) != 0) return fail(err, err_len, "npy header: malformed key");
        skip_space(&c);
        if (*c.at != ':') return fail(err, err_len, "npy header: a key without ':'");
        c.at++;
        skip_space(&c);
        if (strcmp(key, "descr") == 0) {
            char descr[8];
            if (seen_descr++) return fail(err, err_len, "npy header: 'descr' appears twice");
            if (take_string(&c, descr, sizeof descr) != 0 ||
                (strcmp(descr, "<f4") != 0 && strcmp(descr, "<f8") != 0))
                return fail(err, err_len, "npy dtype is not little-endian float32 or float64");
            h->itemsize = descr[2] == '4' ? 4 : 8;
        } else if (strcmp(key, "fortran_order") == 0) {
            if (seen_order++) return fail(err, err_len, "npy header: 'fortran_order' appears twice");
            if (strncmp(c.at, "True", 4) == 0) return fail(err, err_len, "npy array is in Fortran order; save it in C order");
            if (strncmp(c.at, "False", 5) != 0) return fail(err, err_len, "npy header: malformed 'fortran_order'");
            c.at += 5;
        } else if (strcmp(key, "shape") == 0) {
            if (seen_shape++) return fail(err, err_len, "npy header: 'shape' appears twice");
            if (parse_shape(&c, h, err, err_len) != 0) return -1;
        } else {
            return fail(err, err_len, "npy header has a key other than 'descr', 'fortran_order' and 'shape'");
        }
        skip_space(&c);
        if (*c.at == ',') c.at++;
        else if (*c.at != '}') return fail(err, err_len, "npy header: malformed dictionary");
    }
    if (!seen_descr) return fail(err, err_len, "npy header has no 'descr'");
    if (!seen_order) return fail(err, err_len, "npy header has no 'fortran_order'");
    if (!seen_shape) return fail(err, err_len, "npy header has no 'shape'");
    c.at++;
    skip_space(&c);
    if (*c.at != '\0') return fail(err, err_len, "npy header: text after the dictionary");
    return 0;
}

int fa_npy_parse_header(const unsigned char *buf, size_t len, fa_npy_header *h, char *err, size_t err_len) {
    memset(h, 0, sizeof *h);
    if (len < 10 || memcmp(buf, NPY_MAGIC, 6) != 0) return fail(err, err_len, "not a .npy file (bad magic)");
    // Versions 1.0 (a 2-byte header length), 2.0 and 3.0 (4 bytes; 3.0's text is UTF-8): NumPy reads no other.
    int major = buf[6], minor = buf[7];
    size_t header_len, prefix;
    if (major == 1 && minor == 0) {
        header_len = (size_t)buf[8] | (size_t)buf[9] << 8;
        prefix = 10;
    } else if ((major == 2 || major == 3) && minor == 0) {
        if (len < 12) return fail(err, err_len, "npy header is truncated");
        header_len = (size_t)buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 | (size_t)buf[11] << 24;
        prefix = 12;
    } else {
        return fail(err, err_len, "unsupported .npy format version");
    }
    // NumPy (1.24 on) refuses longer headers as unsafe; the suite's are under 200 bytes.
    if (header_len > NPY_MAX_HEADER_LEN) return fail(err, err_len, "npy header is longer than NumPy reads (10000)");
    if (len < prefix + header_len) return fail(err, err_len, "npy header is truncated");

    char text[NPY_MAX_HEADER_LEN + 1];
    memcpy(text, buf + prefix, header_len);
    text[header_len] = '\0';
    if (strlen(text) != header_len) return fail(err, err_len, "npy header contains a NUL byte");
    if (parse_dict(text, h, err, err_len) != 0) return -1;
    h->data_offset = prefix + header_len;
    return 0;
}

// Opens path and parses its header; returns the open file (at an unspecified position), or NULL with err set.
static FILE *open_and_parse(const char *path, fa_npy_header *h, char *err, size_t err_len) {
    char why[200];
    // O_NONBLOCK: opening a pipe with no writer would otherwise wait forever; only a regular file is read.
    const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, err_len, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        if (S_ISDIR(st.st_mode)) snprintf(err, err_len, "cannot read %s: %s", path, strerror(EISDIR));
        else snprintf(err, err_len, "%s is not a regular file (a pipe, a device or a socket): give a .npy file", path);
        close(fd);
        return NULL;
    }
    FILE *f = fcntl(fd, F_SETFL, 0) == 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        snprintf(err, err_len, "cannot open %s: %s", path, strerror(errno));
        close(fd);
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
    // The first failure's errno is the reason (a later fclose or remove would overwrite it).
    int why = 0;
    if (fwrite(prefix, 1, 10, f) != 10 || fwrite(dict, 1, (size_t)n, f) != (size_t)n) why = errno;
    for (int i = 0; !why && i < pad; i++)
        if (fputc(' ', f) == EOF) why = errno;
    if (!why && fputc('\n', f) == EOF) why = errno;
    if (!why && fwrite(data, (size_t)itemsize, (size_t)numel, f) != (size_t)numel) why = errno;
    if (!why && fflush(f) != 0) why = errno;
    if (fclose(f) != 0 && !why) why = errno;
    if (!why && rename(tmp, path) != 0) why = errno;
    if (why) {
        snprintf(err, err_len, "writing %s failed: %s", path, strerror(why ? why : EIO));
        remove(tmp);
        return -1;
    }
    return 0;
}
