/* Strict .npy (C order; float32, int32, uint8, bool) reading and writing; see npy.h. */
#include "npy.h"

#include "float16.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const unsigned char npy_magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
enum { NPY_PREAMBLE = 8 }; /* magic + major + minor */

/* Reading grows the data buffer from this size up, so a tiny file that
 * claims a huge shape fails on its truncated data, not on a huge allocation. */
#define NPY_READ_STEP ((size_t)64 << 20)

static int fail(char *err, size_t err_size, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static int fail(char *err, size_t err_size, const char *fmt, ...) {
    if (err != NULL && err_size > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_size, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static bool host_is_little_endian(void) {
    const uint32_t one = 1;
    unsigned char first;
    memcpy(&first, &one, 1);
    return first == 1;
}

const char *npy_dtype_name(npy_dtype dtype) {
    switch (dtype) {
    case NPY_FLOAT32:
        return "float32";
    case NPY_INT32:
        return "int32";
    case NPY_UINT8:
        return "uint8";
    case NPY_BOOL:
        return "bool";
    }
    return "unknown";
}

/* The descr strings NumPy writes for the types the reader knows; the "<f4" entry stands for every
   float descr (is_float_descr matches them first), and messages name it "a float16, float32 or
   float64 array". */
static const struct {
    const char *descr;
    npy_dtype dtype;
    size_t size;
} known_descrs[] = {{"<f4", NPY_FLOAT32, 4}, {"<i4", NPY_INT32, 4}, {"|u1", NPY_UINT8, 1}, {"|b1", NPY_BOOL, 1}};

/* '<f2', '>f2', '<f4', '>f4', '<f8' or '>f8': *size the element's bytes, *big its byte order. */
static bool is_float_descr(const char *descr, size_t *size, int *big) {
    if ((descr[0] != '<' && descr[0] != '>') || descr[1] != 'f' || descr[3] != '\0') return false;
    if (descr[2] != '2' && descr[2] != '4' && descr[2] != '8') return false;
    *size = (size_t)(descr[2] - '0');
    *big = descr[0] == '>';
    return true;
}

/* .npy data is little-endian; on a big-endian host each 4-byte element is reversed. */
static void swap_float_bytes(void *data, size_t count) {
    unsigned char *b = data;
    for (size_t i = 0; i < count; ++i, b += 4) {
        unsigned char t0 = b[0], t1 = b[1];
        b[0] = b[3];
        b[1] = b[2];
        b[2] = t1;
        b[3] = t0;
    }
}

void npy_format_shape(const size_t *shape, size_t ndim, char *buf, size_t buf_size) {
    size_t used = 0;
    if (buf_size == 0) return;
    buf[0] = '\0';
#define NPY_APPEND(...)                                                                                                \
    do {                                                                                                               \
        if (used < buf_size) {                                                                                         \
            int n_ = snprintf(buf + used, buf_size - used, __VA_ARGS__);                                               \
            used = n_ < 0 ? buf_size : used + (size_t)n_;                                                              \
        }                                                                                                              \
    } while (0)
    NPY_APPEND("(");
    for (size_t i = 0; i < ndim; ++i) NPY_APPEND("%s%zu", i == 0 ? "" : ", ", shape[i]);
    NPY_APPEND(ndim == 1 ? ",)" : ")");
#undef NPY_APPEND
}

/* ------------------------------------------------------------ preamble */

/* Checks magic and version; sets the size of the length field that follows. */
static int parse_preamble(const unsigned char *bytes, size_t len, npy_header *hdr, size_t *length_field_size, char *err,
                          size_t err_size) {
    size_t magic_len = len < sizeof npy_magic ? len : sizeof npy_magic;
    if (memcmp(bytes, npy_magic, magic_len) != 0) return fail(err, err_size, "bad magic: not a .npy file");
    if (len < NPY_PREAMBLE)
        return fail(err, err_size, "file is truncated: %zu bytes, shorter than the .npy preamble", len);
    hdr->major = bytes[6];
    hdr->minor = bytes[7];
    if (hdr->minor != 0 || hdr->major < 1 || hdr->major > 3)
        return fail(err, err_size, "unsupported .npy format version %d.%d (supported: 1.0, 2.0, 3.0)", hdr->major,
                    hdr->minor);
    *length_field_size = hdr->major == 1 ? 2 : 4;
    return 0;
}

static size_t read_le_length(const unsigned char *p, size_t size) {
    size_t value = 0;
    for (size_t i = size; i-- > 0;) value = (value << 8) | p[i];
    return value;
}

/* ---------------------------------------------------- header dictionary */

/* A cursor over the header text; it never reads at or past `end`. */
typedef struct header_cursor {
    const char *p;
    const char *end;
    char *err;
    size_t err_size;
} header_cursor;

static void skip_space(header_cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) c->p++;
}

static bool at_char(header_cursor *c, char ch) {
    skip_space(c);
    return c->p < c->end && *c->p == ch;
}

static bool expect_char(header_cursor *c, char ch, const char *context) {
    if (!at_char(c, ch)) {
        fail(c->err, c->err_size, "header: expected '%c' %s", ch, context);
        return false;
    }
    c->p++;
    return true;
}

/* A Python string literal without escapes: all that .npy headers use. */
static bool parse_string(header_cursor *c, char *out, size_t out_size, const char *what) {
    skip_space(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) {
        fail(c->err, c->err_size, "header: expected a quoted string for %s", what);
        return false;
    }
    char quote = *c->p++;
    const char *start = c->p;
    while (c->p < c->end && *c->p != quote) {
        unsigned char ch = (unsigned char)*c->p;
        if (ch == '\\' || ch < 0x20 || ch >= 0x7f) {
            fail(c->err, c->err_size, "header: unsupported character in %s", what);
            return false;
        }
        c->p++;
    }
    if (c->p >= c->end) {
        fail(c->err, c->err_size, "header: unterminated string for %s", what);
        return false;
    }
    size_t n = (size_t)(c->p - start);
    if (n >= out_size) {
        fail(c->err, c->err_size, "header: %s is too long", what);
        return false;
    }
    memcpy(out, start, n);
    out[n] = '\0';
    c->p++; /* closing quote */
    return true;
}

static bool parse_bool(header_cursor *c, bool *out, const char *what) {
    skip_space(c);
    size_t left = (size_t)(c->end - c->p);
    if (left >= 4 && memcmp(c->p, "True", 4) == 0) {
        c->p += 4;
        *out = true;
    } else if (left >= 5 && memcmp(c->p, "False", 5) == 0) {
        c->p += 5;
        *out = false;
    } else {
        fail(c->err, c->err_size, "header: %s must be True or False", what);
        return false;
    }
    /* "Truex" is not True. */
    if (c->p < c->end && ((*c->p >= 'A' && *c->p <= 'Z') || (*c->p >= 'a' && *c->p <= 'z') ||
                          (*c->p >= '0' && *c->p <= '9') || *c->p == '_')) {
        fail(c->err, c->err_size, "header: %s must be True or False", what);
        return false;
    }
    return true;
}

static bool parse_dim(header_cursor *c, size_t *out) {
    skip_space(c);
    if (c->p >= c->end || *c->p < '0' || *c->p > '9') {
        fail(c->err, c->err_size, "header: shape must hold non-negative integers");
        return false;
    }
    size_t value = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        size_t digit = (size_t)(*c->p - '0');
        if (value > (SIZE_MAX - digit) / 10) {
            fail(c->err, c->err_size, "header: a shape dimension is too large for this machine");
            return false;
        }
        value = value * 10 + digit;
        c->p++;
    }
    /* Files written by NumPy under Python 2 spell dimensions as "3L". */
    if (c->p < c->end && (*c->p == 'L' || *c->p == 'l')) c->p++;
    *out = value;
    return true;
}

static bool parse_shape(header_cursor *c, npy_header *hdr) {
    if (!expect_char(c, '(', "to open the shape tuple")) return false;
    hdr->ndim = 0;
    if (at_char(c, ')')) {
        c->p++;
        return true;
    }
    for (;;) {
        if (hdr->ndim == NPY_MAX_DIMS) {
            fail(c->err, c->err_size, "header: shape has more than %d dimensions", NPY_MAX_DIMS);
            return false;
        }
        if (!parse_dim(c, &hdr->shape[hdr->ndim])) return false;
        hdr->ndim++;
        if (at_char(c, ',')) {
            c->p++;
            if (at_char(c, ')')) {
                c->p++;
                return true;
            }
            continue;
        }
        if (at_char(c, ')')) {
            /* "(3)" is the integer 3 in Python, not a tuple. */
            if (hdr->ndim == 1) {
                fail(c->err, c->err_size, "header: shape (%zu) is not a tuple; write (%zu,)", hdr->shape[0],
                     hdr->shape[0]);
                return false;
            }
            c->p++;
            return true;
        }
        fail(c->err, c->err_size, "header: expected ',' or ')' in the shape tuple");
        return false;
    }
}

/* The header is a Python dict literal with exactly the keys descr,
 * fortran_order and shape, in any order, optionally with a trailing comma. */
static int parse_dict(header_cursor *c, npy_header *hdr) {
    char descr[32] = "";
    bool fortran_order = false;
    bool seen_descr = false, seen_fortran = false, seen_shape = false;

    if (!expect_char(c, '{', "at the start of the header")) return -1;
    for (;;) {
        if (at_char(c, '}')) {
            c->p++;
            break;
        }
        char key[32];
        if (!parse_string(c, key, sizeof key, "a dictionary key")) return -1;
        if (!expect_char(c, ':', "after a dictionary key")) return -1;
        bool *seen;
        if (strcmp(key, "descr") == 0) {
            seen = &seen_descr;
            if (at_char(c, '[') || at_char(c, '(')) {
                return fail(c->err, c->err_size, "structured dtypes are not supported: expected a float array");
            }
            if (!parse_string(c, descr, sizeof descr, "descr")) return -1;
        } else if (strcmp(key, "fortran_order") == 0) {
            seen = &seen_fortran;
            if (!parse_bool(c, &fortran_order, "fortran_order")) return -1;
        } else if (strcmp(key, "shape") == 0) {
            seen = &seen_shape;
            if (!parse_shape(c, hdr)) return -1;
        } else {
            return fail(c->err, c->err_size, "header: unknown key '%s'", key);
        }
        if (*seen) return fail(c->err, c->err_size, "header: duplicate key '%s'", key);
        *seen = true;
        if (at_char(c, ',')) {
            c->p++;
            continue;
        }
        if (!expect_char(c, '}', "or ',' after a dictionary value")) return -1;
        break;
    }
    skip_space(c);
    if (c->p != c->end) return fail(c->err, c->err_size, "header: unexpected text after the dictionary");
    if (!seen_descr) return fail(c->err, c->err_size, "header: missing key 'descr'");
    if (!seen_fortran) return fail(c->err, c->err_size, "header: missing key 'fortran_order'");
    if (!seen_shape) return fail(c->err, c->err_size, "header: missing key 'shape'");
    /* An unknown descr is refused by the reader, which knows what it accepts. */
    snprintf(hdr->descr, sizeof hdr->descr, "%s", descr);
    hdr->dtype = 0;
    hdr->elem_size = 1;
    hdr->big_endian = 0;
    hdr->fortran = fortran_order;
    if (is_float_descr(descr, &hdr->elem_size, &hdr->big_endian)) {
        hdr->dtype = NPY_FLOAT32;
        return 0;
    }
    for (size_t i = 0; i < sizeof known_descrs / sizeof known_descrs[0]; ++i) {
        if (strcmp(descr, known_descrs[i].descr) == 0) {
            hdr->dtype = known_descrs[i].dtype;
            hdr->elem_size = known_descrs[i].size;
        }
    }
    return 0;
}

/* Element count and byte size, refusing any product that overflows size_t. */
static int compute_sizes(npy_header *hdr, char *err, size_t err_size) {
    size_t count = 1;
    for (size_t i = 0; i < hdr->ndim; ++i) {
        size_t dim = hdr->shape[i];
        if (dim != 0 && count > SIZE_MAX / dim) {
            char shape[128];
            npy_format_shape(hdr->shape, hdr->ndim, shape, sizeof shape);
            return fail(err, err_size, "shape %s has too many elements for this machine", shape);
        }
        count *= dim;
    }
    if (count > (SIZE_MAX - hdr->data_offset) / hdr->elem_size) {
        char shape[128];
        npy_format_shape(hdr->shape, hdr->ndim, shape, sizeof shape);
        return fail(err, err_size, "shape %s is too large for this machine", shape);
    }
    hdr->count = count;
    hdr->data_bytes = count * hdr->elem_size;
    return 0;
}

/* "expected '<f4' (little-endian float32)" or a list of what is accepted. */
static int refuse_dtype(const npy_header *hdr, unsigned accepted, char *err, size_t err_size) {
    char list[160] = "";
    size_t used = 0, n = 0, total = 0;
    for (size_t i = 0; i < sizeof known_descrs / sizeof known_descrs[0]; ++i)
        total += (accepted & known_descrs[i].dtype) != 0;
    for (size_t i = 0; i < sizeof known_descrs / sizeof known_descrs[0]; ++i) {
        if (!(accepted & known_descrs[i].dtype)) continue;
        const char *sep = n == 0 ? "" : n + 1 == total ? " or " : ", ";
        int w = known_descrs[i].dtype == NPY_FLOAT32
                    ? snprintf(list + used, sizeof list - used, "%sa float16, float32 or float64 array", sep)
                    : snprintf(list + used, sizeof list - used, "%s'%s' (%s%s)", sep, known_descrs[i].descr,
                               known_descrs[i].size > 1 ? "little-endian " : "", npy_dtype_name(known_descrs[i].dtype));
        if (w > 0 && (size_t)w < sizeof list - used) used += (size_t)w;
        n++;
    }
    return fail(err, err_size, "dtype '%s' is not supported: expected %s", hdr->descr, list);
}

/* A bool array whose bytes are not all 0 or 1 was not written by NumPy. */
static int check_bools(const npy_header *hdr, const unsigned char *data, char *err, size_t err_size) {
    if (hdr->dtype != NPY_BOOL) return 0;
    for (size_t i = 0; i < hdr->count; ++i)
        if (data[i] > 1)
            return fail(err, err_size, "bool element %zu holds the byte %u, not 0 or 1", i, (unsigned)data[i]);
    return 0;
}

/* The header length field after the preamble (len: the bytes at hand, from the file's start), checked against
   the bytes there are and NPY_MAX_HEADER_BYTES; npy_parse_header and read_header both need it first. */
static int read_header_length(const unsigned char *bytes, size_t len, size_t length_field_size, size_t *header_len,
                              char *err, size_t err_size) {
    if (len < NPY_PREAMBLE + length_field_size)
        return fail(err, err_size, "file is truncated inside the header length");
    *header_len = read_le_length(bytes + NPY_PREAMBLE, length_field_size);
    if (*header_len > NPY_MAX_HEADER_BYTES)
        return fail(err, err_size, "header length %zu is larger than the %zu bytes allowed", *header_len,
                    NPY_MAX_HEADER_BYTES);
    return 0;
}

int npy_parse_header(const unsigned char *bytes, size_t len, npy_header *hdr, char *err, size_t err_size) {
    memset(hdr, 0, sizeof *hdr);
    size_t length_field_size;
    if (parse_preamble(bytes, len, hdr, &length_field_size, err, err_size) != 0) return -1;
    size_t header_len = 0;
    if (read_header_length(bytes, len, length_field_size, &header_len, err, err_size) != 0) return -1;
    size_t header_start = NPY_PREAMBLE + length_field_size;
    if (len - header_start < header_len)
        return fail(err, err_size, "file is truncated inside the header (%zu of %zu bytes)", len - header_start,
                    header_len);
    hdr->data_offset = header_start + header_len;

    header_cursor c = {(const char *)bytes + header_start, (const char *)bytes + header_start + header_len, err,
                       err_size};
    if (parse_dict(&c, hdr) != 0) return -1;
    return compute_sizes(hdr, err, err_size);
}

/* Element i of a float array in the file's width and byte order, as float32 (float64 rounds). */
static float file_float(const unsigned char *raw, size_t i, const npy_header *hdr, bool swap) {
    unsigned char b[8] = {0};
    const size_t n = hdr->elem_size;
    for (size_t k = 0; k < n; ++k) b[k] = raw[i * n + (swap ? n - 1 - k : k)];
    if (n == 2) {
        uint16_t h;
        memcpy(&h, b, 2);
        return flashcl__f16_to_float(h);
    }
    if (n == 8) {
        double x;
        memcpy(&x, b, 8);
        return (float)x;
    }
    float x;
    memcpy(&x, b, 4);
    return x;
}

/* The element of C-order index i in a Fortran-order file: the C index's digits (last dimension
   fastest) weighed by Fortran strides (first dimension fastest). */
static size_t fortran_index(const npy_header *hdr, size_t i) {
    size_t at = 0, stride = 1, digits[NPY_MAX_DIMS];
    for (size_t d = hdr->ndim; d-- > 0;) {
        digits[d] = i % hdr->shape[d];
        i /= hdr->shape[d];
    }
    for (size_t d = 0; d < hdr->ndim; ++d) {
        at += digits[d] * stride;
        stride *= hdr->shape[d];
    }
    return at;
}

/* The file's data in the caller's form: floats as float32 in host byte order, everything in C
   order. Returns raw itself when it already is (float32 of the host's order, C order), else a new
   buffer (raw freed), NULL when that cannot be allocated (raw kept). */
static unsigned char *to_caller_form(const npy_header *hdr, unsigned char *raw) {
    const bool little = host_is_little_endian();
    const bool floats = hdr->dtype == NPY_FLOAT32;
    const bool swap = floats ? hdr->big_endian == little : !little && hdr->elem_size == 4;
    const bool order = hdr->fortran && hdr->ndim > 1 && hdr->count > 1;
    if (floats && (hdr->elem_size != 4 || swap || order)) {
        if (hdr->count > SIZE_MAX / sizeof(float)) return NULL;
        float *out = malloc(hdr->count > 0 ? hdr->count * sizeof(float) : 1);
        if (!out) return NULL;
        for (size_t i = 0; i < hdr->count; ++i) out[i] = file_float(raw, order ? fortran_index(hdr, i) : i, hdr, swap);
        free(raw);
        return (unsigned char *)out;
    }
    if (swap) swap_float_bytes(raw, hdr->count); /* int32 on a big-endian host */
    if (order) {
        const size_t n = hdr->elem_size;
        unsigned char *out = malloc(hdr->count * n);
        if (!out) return NULL;
        for (size_t i = 0; i < hdr->count; ++i) memcpy(out + i * n, raw + fortran_index(hdr, i) * n, n);
        free(raw);
        return out;
    }
    return raw;
}

/* out takes the data (in the caller's form); -1 with err when the conversion cannot be allocated. */
static int fill_array(npy_array *out, const npy_header *hdr, unsigned char *data, char *err, size_t err_size) {
    unsigned char *ready = to_caller_form(hdr, data);
    if (!ready) {
        free(data);
        return fail(err, err_size, "cannot allocate memory to convert the data to float32 in C order");
    }
    out->ndim = hdr->ndim;
    memcpy(out->shape, hdr->shape, sizeof out->shape);
    out->count = hdr->count;
    out->dtype = hdr->dtype;
    out->bytes = ready;
    out->data = hdr->dtype == NPY_FLOAT32 ? (float *)ready : NULL;
    return 0;
}

static int size_mismatch(const npy_header *hdr, size_t have, char *err, size_t err_size) {
    char shape[128];
    npy_format_shape(hdr->shape, hdr->ndim, shape, sizeof shape);
    if (have < hdr->data_bytes)
        return fail(err, err_size, "data is truncated: shape %s needs %zu bytes, file has %zu", shape, hdr->data_bytes,
                    have);
    return fail(err, err_size, "file has bytes after the data of shape %s (%zu bytes expected)", shape,
                hdr->data_bytes);
}

int npy_read_memory(const unsigned char *bytes, size_t len, npy_array *out, char *err, size_t err_size) {
    npy_header hdr;
    memset(out, 0, sizeof *out);
    if (npy_parse_header(bytes, len, &hdr, err, err_size) != 0) return -1;
    if (hdr.dtype != NPY_FLOAT32) return refuse_dtype(&hdr, NPY_FLOAT32, err, err_size);
    size_t have = len - hdr.data_offset;
    if (have != hdr.data_bytes) return size_mismatch(&hdr, have, err, err_size);
    unsigned char *data = malloc(hdr.data_bytes > 0 ? hdr.data_bytes : 1);
    if (data == NULL) return fail(err, err_size, "cannot allocate %zu bytes for the data", hdr.data_bytes);
    memcpy(data, bytes + hdr.data_offset, hdr.data_bytes);
    return fill_array(out, &hdr, data, err, err_size);
}

/* Reads up to n bytes; returns how many arrived. */
static size_t read_some(FILE *f, void *buf, size_t n) { return fread(buf, 1, n, f); }

/* Reads the header of an open file into a fresh buffer and parses it. */
static int read_header(FILE *f, npy_header *hdr, char *err, size_t err_size) {
    unsigned char start[NPY_PREAMBLE + 4];
    errno = 0;
    size_t got = read_some(f, start, NPY_PREAMBLE);
    /* A directory opens but cannot be read (EISDIR): say so, not "truncated". */
    if (got < NPY_PREAMBLE && ferror(f)) return fail(err, err_size, "read error: %s", strerror(errno));
    size_t length_field_size;
    if (parse_preamble(start, got, hdr, &length_field_size, err, err_size) != 0) return -1;
    got += read_some(f, start + NPY_PREAMBLE, length_field_size);
    size_t header_len = 0;
    if (read_header_length(start, got, length_field_size, &header_len, err, err_size) != 0) return -1;
    size_t total = got + header_len;
    unsigned char *buf = malloc(total);
    if (buf == NULL) return fail(err, err_size, "cannot allocate %zu bytes for the header", total);
    memcpy(buf, start, got);
    got += read_some(f, buf + got, header_len);
    int rc = npy_parse_header(buf, got, hdr, err, err_size);
    free(buf);
    return rc;
}

int npy_read_file(const char *path, npy_array *out, char *err, size_t err_size) {
    return npy_read_file_typed(path, NPY_FLOAT32, out, err, err_size);
}

int npy_read_file_typed(const char *path, unsigned accepted, npy_array *out, char *err, size_t err_size) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (f == NULL) return fail(err, err_size, "cannot open: %s", strerror(errno));

    npy_header hdr;
    unsigned char *data = NULL;
    int rc = read_header(f, &hdr, err, err_size);
    if (rc == 0 && !(hdr.dtype & accepted)) rc = refuse_dtype(&hdr, accepted, err, err_size);
    if (rc == 0) {
        size_t capacity = 0, have = 0;
        while (have < hdr.data_bytes) {
            if (have == capacity) {
                /* Start with one step, then double, never past what the
                 * header promised: memory follows the bytes that arrive. */
                size_t left = hdr.data_bytes - capacity;
                size_t grow = capacity == 0 ? NPY_READ_STEP : capacity;
                if (grow > left) grow = left;
                unsigned char *bigger = realloc(data, capacity + grow);
                if (bigger == NULL) {
                    rc = fail(err, err_size, "cannot allocate %zu bytes for the data", hdr.data_bytes);
                    break;
                }
                data = bigger;
                capacity += grow;
            }
            size_t n = read_some(f, data + have, capacity - have);
            have += n;
            if (n == 0) break;
        }
        if (rc == 0 && ferror(f))
            rc = fail(err, err_size, "read error: %s", strerror(errno));
        else if (rc == 0 && have < hdr.data_bytes)
            rc = size_mismatch(&hdr, have, err, err_size);
        else if (rc == 0 && fgetc(f) != EOF)
            rc = size_mismatch(&hdr, hdr.data_bytes + 1, err, err_size);
        if (rc == 0 && data != NULL) rc = check_bools(&hdr, data, err, err_size);
    }
    fclose(f);
    if (rc != 0) {
        free(data);
        return -1;
    }
    if (data == NULL && (data = malloc(1)) == NULL) /* a 0-element array still gets a pointer */
        return fail(err, err_size, "cannot allocate memory");
    return fill_array(out, &hdr, data, err, err_size);
}

void npy_array_free(npy_array *a) {
    free(a->bytes);
    a->bytes = NULL;
    a->data = NULL;
    a->count = 0;
    a->ndim = 0;
}

/* -------------------------------------------------------------- writing */

static int write_bytes(FILE *f, const void *p, size_t n, char *err, size_t err_size) {
    if (n > 0 && fwrite(p, 1, n, f) != n) return fail(err, err_size, "write error: %s", strerror(errno));
    return 0;
}

int npy_write(FILE *f, const size_t *shape, size_t ndim, const float *data, char *err, size_t err_size) {
    if (ndim > NPY_MAX_DIMS) return fail(err, err_size, "cannot write more than %d dimensions", NPY_MAX_DIMS);
    size_t count = 1;
    for (size_t i = 0; i < ndim; ++i) {
        if (shape[i] != 0 && count > SIZE_MAX / sizeof(float) / shape[i])
            return fail(err, err_size, "array is too large to write");
        count *= shape[i];
    }

    /* The dict exactly as NumPy's repr writes it, keys in sorted order. */
    char shape_text[NPY_MAX_DIMS * 22 + 4];
    npy_format_shape(shape, ndim, shape_text, sizeof shape_text);
    char dict[sizeof shape_text + 64];
    int dict_len = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }", shape_text);
    if (dict_len < 0 || (size_t)dict_len >= sizeof dict) return fail(err, err_size, "cannot format the header");

    /* Version 1.0 stores the header length in 16 bits; 2.0 in 32. */
    size_t length_field_size = 2;
    size_t unpadded = NPY_PREAMBLE + length_field_size + (size_t)dict_len + 1; /* + '\n' */
    size_t padding = (64 - unpadded % 64) % 64;
    if ((size_t)dict_len + padding + 1 > 0xffff) {
        length_field_size = 4;
        unpadded = NPY_PREAMBLE + length_field_size + (size_t)dict_len + 1;
        padding = (64 - unpadded % 64) % 64;
    }
    size_t header_len = (size_t)dict_len + padding + 1;

    unsigned char preamble[NPY_PREAMBLE + 4];
    memcpy(preamble, npy_magic, sizeof npy_magic);
    preamble[6] = length_field_size == 2 ? 1 : 2;
    preamble[7] = 0;
    for (size_t i = 0; i < length_field_size; ++i) preamble[NPY_PREAMBLE + i] = (unsigned char)(header_len >> (8 * i));
    if (write_bytes(f, preamble, NPY_PREAMBLE + length_field_size, err, err_size) != 0 ||
        write_bytes(f, dict, (size_t)dict_len, err, err_size) != 0)
        return -1;
    for (size_t i = 0; i < padding; ++i)
        if (fputc(' ', f) == EOF) return fail(err, err_size, "write error: %s", strerror(errno));
    if (fputc('\n', f) == EOF) return fail(err, err_size, "write error: %s", strerror(errno));

    if (host_is_little_endian()) return write_bytes(f, data, count * sizeof(float), err, err_size);
    /* Big-endian host: convert through a small buffer, leaving data untouched. */
    float chunk[1024];
    for (size_t done = 0; done < count;) {
        size_t n = count - done < 1024 ? count - done : 1024;
        memcpy(chunk, data + done, n * sizeof(float));
        swap_float_bytes(chunk, n);
        if (write_bytes(f, chunk, n * sizeof(float), err, err_size) != 0) return -1;
        done += n;
    }
    return 0;
}
