// fa_npy.h - NumPy .npy files: write float32/float64 arrays that numpy.load reads as they are, and read them back.
//
// The reader is the one parser of untrusted input in the suite: it accepts format versions 1.0, 2.0 and 3.0,
// little-endian float32 ('<f4') or float64 ('<f8'), C order, at most FA_NPY_MAX_DIMS dimensions, and a payload of
// exactly the declared size. Anything else is refused with a one-line reason.
#ifndef FA_NPY_H
#define FA_NPY_H

#ifdef __cplusplus
extern "C" {
#endif

#include <stddef.h>
#include <stdint.h>

#define FA_NPY_MAX_DIMS 8

typedef struct {
    int ndim;
    int64_t shape[FA_NPY_MAX_DIMS];
    int itemsize;          // 4 (float32) or 8 (float64)
    size_t data_offset;    // where the array data starts in the file
    int64_t numel;         // product of shape
} fa_npy_header;

// Parses the header at the start of buf[0..len). Returns 0, or -1 with a reason in err.
int fa_npy_parse_header(const unsigned char *buf, size_t len, fa_npy_header *header, char *err, size_t err_len);

// Reads and parses the header of the .npy file at path (its shape, without reading the data). Returns 0, or -1 with
// a reason in err.
int fa_npy_read_header(const char *path, fa_npy_header *header, char *err, size_t err_len);

// Reads a float32 or float64 .npy file whose shape must equal shape[0..ndim) and returns it as float32
// (a newly allocated array). Returns NULL with a reason in err when anything is wrong.
float *fa_npy_load_f32(const char *path, int ndim, const int64_t *shape, char *err, size_t err_len);

// Writes data (float32 when itemsize is 4, float64 when 8) as path. The file is written to a temporary name and
// renamed at the end, so a failure never leaves a half-written file. Returns 0, or -1 with a reason in err.
int fa_npy_save(const char *path, const void *data, int itemsize, int ndim, const int64_t *shape,
                char *err, size_t err_len);

#ifdef __cplusplus
}
#endif

#endif
