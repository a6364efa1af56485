/*
 * Strict reader and writer for NumPy .npy files, format versions 1.0, 2.0
 * and 3.0. The writer writes float32 ('<f4'), C order. The reader takes
 * floating-point arrays (float16, float32 or float64, either byte order:
 * '<f2', '>f2', '<f4', '>f4', '<f8', '>f8'), handed to the caller as float32,
 * and, where the caller allows them, int32 ('<i4'), uint8 ('|u1') and bool
 * ('|b1', every byte 0 or 1); C or Fortran order, handed over in C order.
 * NumPy saves float64 by default and Fortran order for a transposed array,
 * so a user's own files are taken as they are (float64 rounds to float32).
 *
 * The reader is meant to face hostile files: every length is bounds-checked,
 * every size product is overflow-checked, and anything it does not fully
 * understand is refused with a specific message rather than guessed at.
 * Every function returns 0 on success and -1 on failure, with the reason in
 * err (a sentence without the file name; callers prefix it).
 */
#ifndef FLASHCL_TOOLS_NPY_H
#define FLASHCL_TOOLS_NPY_H

#include <stddef.h>
#include <stdio.h>

/* More dimensions than NumPy itself allows (32 before 2.0, 64 after) is never needed here. */
#define NPY_MAX_DIMS 32
/* NumPy refuses headers over 10000 bytes by default; allow more, but not gigabytes. */
#define NPY_MAX_HEADER_BYTES ((size_t)1 << 20)

/* Element types the reader knows; values are bits so callers can allow several. */
typedef enum npy_dtype {
    NPY_FLOAT32 = 1, /* any of the float descrs above, read as float32 */
    NPY_INT32 = 2,   /* '<i4' */
    NPY_UINT8 = 4,   /* '|u1' */
    NPY_BOOL = 8     /* '|b1' */
} npy_dtype;

/* "float32", "int32", "uint8", "bool". */
const char *npy_dtype_name(npy_dtype dtype);

typedef struct npy_header {
    int major, minor; /* format version */
    npy_dtype dtype;  /* 0 when descr names a type the reader does not know */
    char descr[32];   /* the descr string as written in the file */
    size_t elem_size; /* bytes per element in the file (2, 4 or 8 for floats) */
    int big_endian;   /* the file's elements are big-endian ('>' descr) */
    int fortran;      /* fortran_order: the file lists the first index fastest */
    size_t ndim;
    size_t shape[NPY_MAX_DIMS];
    size_t count;       /* elements: the product of shape (1 for a 0-d array) */
    size_t data_bytes;  /* count * elem_size */
    size_t data_offset; /* bytes from the start of the file to the data */
} npy_header;

typedef struct npy_array {
    size_t ndim;
    size_t shape[NPY_MAX_DIMS];
    size_t count;
    npy_dtype dtype;
    void *bytes; /* count elements of dtype (float32 for floats) in host byte order, C order;
                    free with npy_array_free */
    float *data; /* the same memory when dtype is float32, else NULL */
} npy_array;

/*
 * Parses the magic, version, header length and header dictionary at the
 * start of bytes[0..len). len must cover at least the whole header; the
 * array data after it is not looked at.
 */
int npy_parse_header(const unsigned char *bytes, size_t len, npy_header *hdr, char *err, size_t err_size);

/* Reads a whole floating-point .npy file as float32; its size must be exactly header + data. */
int npy_read_file(const char *path, npy_array *out, char *err, size_t err_size);

/* The same for any dtype in `accepted` (NPY_FLOAT32 | NPY_INT32 | ...). */
int npy_read_file_typed(const char *path, unsigned accepted, npy_array *out, char *err, size_t err_size);

/* Same checks as npy_read_file, on a file already in memory (for fuzzing). */
int npy_read_memory(const unsigned char *bytes, size_t len, npy_array *out, char *err, size_t err_size);

void npy_array_free(npy_array *a);

/*
 * Writes a float32 C-order array: format 1.0 (2.0 when the header would not
 * fit in 1.0's 16-bit length), the header padded with spaces and ended by
 * '\n' so the data starts at a multiple of 64 bytes, as NumPy does.
 */
int npy_write(FILE *f, const size_t *shape, size_t ndim, const float *data, char *err, size_t err_size);

/* "(2, 128, 8, 64)", "(3,)" or "()" into buf, truncated to fit. */
void npy_format_shape(const size_t *shape, size_t ndim, char *buf, size_t buf_size);

#endif
