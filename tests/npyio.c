#include "npyio.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t element_count(const size_t *shape, int rank) {
    size_t n = 1;
    for (int i = 0; i < rank; i++) n *= shape[i];
    return n;
}

static int write_with_order(const char *path, const char *descr, int fortran, const size_t *shape, int rank,
                            const void *data, size_t elem_size) {
    char dict[256];
    int len = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': %s, 'shape': (", descr,
                       fortran ? "True" : "False");
    for (int i = 0; i < rank; i++)
        len += snprintf(dict + len, sizeof dict - (size_t)len, "%zu%s", shape[i],
                        rank == 1 ? "," : (i + 1 < rank ? ", " : ""));
    len += snprintf(dict + len, sizeof dict - (size_t)len, "), }");
    /* Magic (6) + version (2) + length (2) + dict, padded with spaces and a
     * final newline to a multiple of 64 bytes, as numpy writes it. */
    size_t total = 10 + (size_t)len + 1;
    size_t padded = (total + 63) / 64 * 64;
    size_t header_len = padded - 10;

    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    unsigned char pre[10] = {
        0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(header_len & 0xff), (unsigned char)(header_len >> 8)};
    int ok = fwrite(pre, 1, 10, f) == 10 && fwrite(dict, 1, (size_t)len, f) == (size_t)len;
    for (size_t i = (size_t)len; ok && i + 1 < header_len; i++) ok = fputc(' ', f) != EOF;
    ok = ok && fputc('\n', f) != EOF;
    size_t n = element_count(shape, rank);
    ok = ok && fwrite(data, elem_size, n, f) == n;
    return fclose(f) == 0 && ok;
}

int npy_write_raw(const char *path, const char *descr, const size_t *shape, int rank, const void *data,
                  size_t elem_size) {
    return write_with_order(path, descr, 0, shape, rank, data, elem_size);
}

int npy_write_f32_fortran(const char *path, const size_t *shape, int rank, const float *data) {
    const size_t n = element_count(shape, rank);
    float *f = malloc(n ? n * sizeof(float) : 1);
    if (!f) return 0;
    for (size_t i = 0; i < n; i++) { /* C index i -> its digits -> the Fortran offset (first index fastest) */
        size_t rest = i, at = 0, stride = 1, digit[NPY_MAX_RANK];
        for (int d = rank - 1; d >= 0; d--) {
            digit[d] = rest % shape[d];
            rest /= shape[d];
        }
        for (int d = 0; d < rank; d++) {
            at += digit[d] * stride;
            stride *= shape[d];
        }
        f[at] = data[i];
    }
    const int ok = write_with_order(path, "<f4", 1, shape, rank, f, sizeof(float));
    free(f);
    return ok;
}

int npy_write_f32(const char *path, const size_t *shape, int rank, const float *data) {
    return npy_write_raw(path, "<f4", shape, rank, data, sizeof(float));
}

static float *fail(FILE *f, const char *path, const char *why) {
    fprintf(stderr, "npy_read_f32(%s): %s\n", path, why);
    if (f) fclose(f);
    return NULL;
}

float *npy_read_f32(const char *path, size_t *shape, int *rank) {
    FILE *f = fopen(path, "rb");
    if (!f) return fail(NULL, path, "cannot open");
    unsigned char pre[10];
    if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0 || pre[6] != 1)
        return fail(f, path, "not a version 1 .npy file");
    size_t header_len = (size_t)pre[8] | ((size_t)pre[9] << 8);
    char header[65536];
    if (fread(header, 1, header_len, f) != header_len) return fail(f, path, "truncated header");
    header[header_len] = '\0';
    if (!strstr(header, "'descr': '<f4'")) return fail(f, path, "dtype is not <f4");
    if (!strstr(header, "'fortran_order': False")) return fail(f, path, "not C order");
    const char *p = strstr(header, "'shape': (");
    if (!p) return fail(f, path, "no shape");
    p += strlen("'shape': (");
    *rank = 0;
    while (*p != ')') {
        char *end;
        unsigned long long v = strtoull(p, &end, 10);
        if (end == p || *rank == NPY_MAX_RANK) return fail(f, path, "bad shape");
        shape[(*rank)++] = (size_t)v;
        p = end;
        while (*p == ',' || *p == ' ') p++;
    }
    size_t n = element_count(shape, *rank);
    float *data = malloc((n ? n : 1) * sizeof(float));
    if (!data) return fail(f, path, "out of memory");
    if (fread(data, sizeof(float), n, f) != n) {
        free(data);
        return fail(f, path, "truncated data");
    }
    fclose(f);
    return data;
}
