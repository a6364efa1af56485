/*
 * The tuning file: where it lives, what it must say to be read, and the
 * lookup the families make (tuning.h).
 *
 * <cache dir>/tuning-<16 hex of the identity>.txt (FLASHCL_TUNING=PATH names
 * another file, FLASHCL_TUNING=off none):
 *   FLASHCL-TUNING 1
 *   device=... vendor=... device_version=... driver=... platform=...
 *   platform_version=... library=...           (one per line: the identity)
 *   tuned d=64 dtype=f32 causal=0 tile=kernel=cpu,br=16,bc=96
 *   measured ...                                (the tuner's own record, skipped here)
 *   checksum=<FNV-1a 64 of every byte before this line, 16 hex>
 * The identity must equal this context's byte for byte: a file from another
 * device, driver or library version is ignored, never trusted, as is a file
 * whose checksum line is missing (truncated) or wrong (corrupt), or any line
 * that does not parse. Ignoring is all-or-nothing and says why in
 * ctx->tuning_note, which every plan's reason carries (the library never prints).
 */
#include "tuning.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TUNING_MAGIC "FLASHCL-TUNING 1\n"
#define MAX_TUNING_BYTES (1u << 20)
#define MAX_TUNED_ENTRIES 4096

static int key_dtype(flashcl_dtype dt) { return dt == FLASHCL_DTYPE_DEFAULT ? FLASHCL_DTYPE_F32 : (int)dt; }

static const char *const cache_names[] = {"same", "fp8_e4m3", "fp8_e5m2"};

void flashcl__tuned_key_text(const flashcl__tuned_key *k, char *out, size_t cap) {
    const char *dt = flashcl__dtype_name((flashcl_dtype)k->dtype);
    if (k->kind == FLASHCL__TUNED_DECODE)
        snprintf(out, cap, "decode d=%d dtype=%s cache=%s rows=%d", k->head_dim, dt, cache_names[k->cache], k->rows);
    else
        snprintf(out, cap, "d=%d dtype=%s causal=%d", k->head_dim, dt, k->causal);
}

/* The packed-rows bucket of a decode key: rows per KV head, a power of two, at most 16. */
static int decode_rows_bucket(size_t packed) {
    int r = 1;
    while ((size_t)r < packed && r < FLASHCL__TUNED_DECODE_MAX_ROWS) r *= 2;
    return r;
}

/* The header text a file must start with, malloc'd. */
static char *identity(const flashcl_context *ctx) {
    const flashcl__device_info *d = &ctx->info;
    const char *fmt = TUNING_MAGIC "device=%s\nvendor=%s\ndevice_version=%s\ndriver=%s\nplatform=%s\n"
                                   "platform_version=%s\nlibrary=%s\n";
    int n = snprintf(NULL, 0, fmt, d->name, d->vendor, d->version, d->driver, d->platform_name, d->platform_version,
                     FLASHCL_VERSION_STRING);
    char *text = n < 0 ? NULL : malloc((size_t)n + 1);
    if (text)
        snprintf(text, (size_t)n + 1, fmt, d->name, d->vendor, d->version, d->driver, d->platform_name,
                 d->platform_version, FLASHCL_VERSION_STRING);
    return text;
}

static void tuning_path(flashcl_context *ctx, const char *ident) {
    ctx->tuning_path[0] = '\0';
    const char *env = getenv("FLASHCL_TUNING");
    ctx->tuning_off = flashcl__env_off(env);
    if (ctx->tuning_off) return;
    if (env && *env) {
        flashcl__copy_str(ctx->tuning_path, sizeof ctx->tuning_path, env);
        return;
    }
    /* The cache directory even where it is read-only (the program cache is off there): reading needs no write. */
    if (!ctx->cache_dir_named[0]) return;
    uint64_t h = flashcl__fnv1a(FLASHCL__FNV_SEED, ident, strlen(ident));
    int n = snprintf(ctx->tuning_path, sizeof ctx->tuning_path, "%s/tuning-%016llx.txt", ctx->cache_dir_named,
                     (unsigned long long)h);
    if (n < 0 || (size_t)n >= sizeof ctx->tuning_path) ctx->tuning_path[0] = '\0';
}

/* The whole file, NUL-terminated, or NULL: *missing when it does not exist, else why it cannot be
   used in `why` (a path that opens but cannot be read, such as a directory, is unreadable, not empty). */
static char *read_file(const char *path, size_t *len, int *missing, char *why, size_t cap) {
    *missing = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        const int e = errno;
        *missing = e == ENOENT; /* another failure (no permission) is a file we cannot read */
        snprintf(why, cap, "cannot be opened (%s)", strerror(e));
        return NULL;
    }
    char *buf = malloc(MAX_TUNING_BYTES + 1);
    errno = 0;
    size_t n = buf ? fread(buf, 1, MAX_TUNING_BYTES + 1, f) : 0;
    const int failed = ferror(f), e = errno;
    fclose(f);
    if (!buf)
        snprintf(why, cap, "out of host memory reading it");
    else if (failed)
        snprintf(why, cap, "%s", e == EISDIR ? "is a directory" : "cannot be read");
    else if (n > MAX_TUNING_BYTES)
        snprintf(why, cap, "is over %u bytes", MAX_TUNING_BYTES);
    if (!buf || failed || n > MAX_TUNING_BYTES) {
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

static int is_decode_kernel(int kernel) {
    return kernel == FLASHCL__TILE_KERNEL_DECODE || kernel == FLASHCL__TILE_KERNEL_DECODE_CPU;
}

/* "d=64 dtype=f32 causal=0 tile=..." or "decode d=128 dtype=f32 cache=same rows=4 tile=..." -> entry; 0 when
   anything is off, a decode key naming another family's kernel or a forward key naming a decode kernel included. */
static int parse_entry(const char *line, flashcl__tuned_entry *e) {
    int d = 0, causal = 0, rows = 0, used = 0, cache = -1;
    char dtype[8] = "", cache_name[12] = "", tile[sizeof e->tile + 1] = "";
    const int decode = strncmp(line, "decode ", 7) == 0;
    if (decode) {
        if (sscanf(line, "decode d=%d dtype=%7s cache=%11s rows=%d tile=%96s%n", &d, dtype, cache_name, &rows, tile,
                   &used) != 5)
            return 0;
        for (int i = 0; i < 3; ++i)
            if (strcmp(cache_name, cache_names[i]) == 0) cache = i;
        if (cache < 0 || rows < 1 || rows > FLASHCL__TUNED_DECODE_MAX_ROWS || (rows & (rows - 1)) != 0) return 0;
    } else if (sscanf(line, "d=%d dtype=%7s causal=%d tile=%96s%n", &d, dtype, &causal, tile, &used) != 4) {
        return 0;
    }
    if (line[used] != '\0' || d < 1 || d > 1024 || (causal != 0 && causal != 1) || strlen(tile) >= sizeof e->tile)
        return 0;
    int dt = strcmp(dtype, "f32") == 0    ? FLASHCL_DTYPE_F32
             : strcmp(dtype, "f16") == 0  ? FLASHCL_DTYPE_F16
             : strcmp(dtype, "bf16") == 0 ? FLASHCL_DTYPE_BF16
                                          : -1;
    flashcl__tile_override ov;
    if (dt < 0 || flashcl__parse_tile_spec(NULL, tile, &ov) != FLASHCL_SUCCESS || is_decode_kernel(ov.kernel) != decode)
        return 0;
    memset(&e->key, 0, sizeof e->key);
    e->key.head_dim = d;
    e->key.dtype = dt;
    e->key.causal = causal;
    e->key.kind = decode ? FLASHCL__TUNED_DECODE : FLASHCL__TUNED_FORWARD;
    e->key.cache = decode ? cache : 0;
    e->key.rows = rows;
    flashcl__copy_str(e->tile, sizeof e->tile, tile);
    return 1;
}

/* The identity's value of `field` in a foreign header, for the note; 0 when the header has none. */
static int field_of(const char *text, const char *field, char *out, size_t cap) {
    out[0] = '\0';
    size_t fl = strlen(field);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, field, fl) == 0 && p[fl] == '=') {
            size_t n = strcspn(p + fl + 1, "\n");
            snprintf(out, cap, "%.*s", (int)(n < 80 ? n : 80), p + fl + 1);
            return 1;
        }
    return 0;
}

/* Appends each identity field whose value in the file's header differs from this context's, with both
   values ("driver: the file's 'X', this context's 'Y'"); the header's fields in ident's order. */
static void foreign_fields(const char *text, const char *ident, char *note, size_t cap) {
    int named = 0;
    for (const char *p = ident + strlen(TUNING_MAGIC); *p;) {
        const size_t len = strcspn(p, "\n"), kl = strcspn(p, "=\n");
        if (kl < len && kl < 32) {
            char key[32], ours[96], theirs[96];
            memcpy(key, p, kl);
            key[kl] = '\0';
            snprintf(ours, sizeof ours, "%.*s", (int)(len - kl - 1 < 80 ? len - kl - 1 : 80), p + kl + 1);
            const int found = field_of(text, key, theirs, sizeof theirs);
            if (!found || strcmp(ours, theirs) != 0) {
                flashcl__appendf(note, cap, "%s%s: ", named++ ? "; " : "", key);
                if (found)
                    flashcl__appendf(note, cap, "the file's '%s', this context's '%s'", theirs, ours);
                else
                    flashcl__appendf(note, cap, "not in the file, this context's '%s'", ours);
            }
        }
        p += len + (p[len] == '\n');
    }
    /* Every value the same (a value longer than the 80 characters compared, or a field out of order). */
    if (!named) flashcl__appendf(note, cap, "the header differs from this context's identity");
}

/* Parses text into ctx's entries, or says in ctx->tuning_note why not (and keeps none). */
static void parse_file(flashcl_context *ctx, const char *ident, char *text, size_t len) {
    char *note = ctx->tuning_note;
    const size_t cap = sizeof ctx->tuning_note;
    const char *path = ctx->tuning_path;
    /* The checksum line must be the last one, whole. */
    char *last = NULL;
    if (len > 0 && text[len - 1] == '\n') {
        text[len - 1] = '\0';
        last = strrchr(text, '\n');
        last = last ? last + 1 : text;
        text[len - 1] = '\n';
    }
    unsigned long long stored = 0;
    int used = 0;
    if (!last || sscanf(last, "checksum=%16llx%n", &stored, &used) != 1 || used != 25 || last[used] != '\n') {
        flashcl__appendf(note, cap,
                         "tuning file %s ignored: truncated or not a tuning file (no checksum line at its end)", path);
        return;
    }
    size_t body = (size_t)(last - text);
    if (flashcl__fnv1a(FLASHCL__FNV_SEED, text, body) != stored) {
        flashcl__appendf(note, cap, "tuning file %s ignored: corrupt (checksum mismatch)", path);
        return;
    }
    size_t il = strlen(ident);
    if (body < strlen(TUNING_MAGIC) || memcmp(text, TUNING_MAGIC, strlen(TUNING_MAGIC)) != 0) {
        flashcl__appendf(note, cap, "tuning file %s ignored: not a FlashCL tuning file of format 1", path);
        return;
    }
    if (body < il || memcmp(text, ident, il) != 0) {
        text[body] = '\0';
        flashcl__appendf(note, cap, "tuning file %s ignored: written for another device, driver or library (", path);
        foreign_fields(text, ident, note, cap);
        flashcl__appendf(note, cap, ")");
        return;
    }
    text[body] = '\0';
    flashcl__tuned_entry *entries = NULL;
    size_t count = 0, line_no = 8;
    for (char *p = text + il; *p;) {
        char *nl = strchr(p, '\n');
        if (!nl) break; /* the body ends with the newline before the checksum line */
        *nl = '\0';
        ++line_no;
        flashcl__tuned_entry e;
        int ok = 1;
        if (strncmp(p, "tuned ", 6) == 0) {
            ok = count < MAX_TUNED_ENTRIES && parse_entry(p + 6, &e);
            if (ok) {
                flashcl__tuned_entry *grown = realloc(entries, (count + 1) * sizeof *entries);
                if (!grown) {
                    flashcl__appendf(note, cap, "tuning file %s ignored: out of host memory", path);
                    free(entries);
                    return;
                }
                entries = grown;
                entries[count++] = e;
            }
        } else if (strncmp(p, "measured ", 9) != 0) {
            ok = 0;
        }
        if (!ok) {
            flashcl__appendf(note, cap, "tuning file %s ignored: line %zu does not parse", path, line_no);
            free(entries);
            return;
        }
        p = nl + 1;
    }
    ctx->tuned = entries;
    ctx->tuned_count = count;
}

void flashcl__tuning_load(flashcl_context *ctx) {
    ctx->tuned = NULL;
    ctx->tuned_count = 0;
    ctx->tuning_note[0] = '\0';
    char *ident = identity(ctx);
    if (!ident) return;
    tuning_path(ctx, ident);
    size_t len = 0;
    int missing = 0;
    char why[128] = "";
    char *text = ctx->tuning_path[0] ? read_file(ctx->tuning_path, &len, &missing, why, sizeof why) : NULL;
    if (text)
        parse_file(ctx, ident, text, len);
    else if (ctx->tuning_path[0] && !missing)
        flashcl__appendf(ctx->tuning_note, sizeof ctx->tuning_note, "tuning file %s ignored: %s", ctx->tuning_path,
                         why);
    free(text);
    free(ident);
}

void flashcl__tuning_release(flashcl_context *ctx) {
    free(ctx->tuned);
    ctx->tuned = NULL;
    ctx->tuned_count = 0;
}

/* Tunable: plain attention in any storage (the variants keep their planners' choice). */
static int tunable(const flashcl_attention_desc *desc) {
    flashcl_attention_desc f32 = *desc;
    f32.dtype = FLASHCL_DTYPE_F32;
    return flashcl__desc_is_plain(&f32);
}

static int same_key(const flashcl__tuned_key *a, const flashcl__tuned_key *b) {
    return a->head_dim == b->head_dim && a->dtype == b->dtype && a->causal == b->causal && a->kind == b->kind &&
           a->cache == b->cache && a->rows == b->rows;
}

/* The file's entry for key (the last one: the tuner appends), else the built-in table's for this device. */
static int lookup(const flashcl_context *ctx, const flashcl__tuned_key *key, flashcl__tile_override *ov,
                  const char **origin, char *why, size_t cap) {
    char kt[96];
    flashcl__tuned_key_text(key, kt, sizeof kt);
    for (size_t i = ctx->tuned_count; i-- > 0;) /* the last entry for a key wins: the tuner appends */
        if (same_key(&ctx->tuned[i].key, key) && flashcl__parse_tile_spec(NULL, ctx->tuned[i].tile, ov) == 0) {
            *origin = "tuned";
            why[0] = '\0';
            flashcl__appendf(why, cap, "tuned: %s -> %s (tuning file %s)", kt, ctx->tuned[i].tile, ctx->tuning_path);
            return 1;
        }
    for (size_t i = 0; i < flashcl__builtin_tuned_count; ++i) {
        const flashcl__builtin_tuned *b = &flashcl__builtin_tuned_table[i];
        if (strcmp(b->vendor, ctx->info.vendor) == 0 && strcmp(b->device, ctx->info.name) == 0 &&
            same_key(&b->entry.key, key) && flashcl__parse_tile_spec(NULL, b->entry.tile, ov) == 0) {
            *origin = "table";
            why[0] = '\0';
            flashcl__appendf(why, cap, "table: tuned on this device model (%s) for %s -> %s", b->device, kt,
                             b->entry.tile);
            return 1;
        }
    }
    return 0;
}

int flashcl__tuned_plan(const flashcl_context *ctx, const flashcl_attention_desc *desc, flashcl__tile_override *ov,
                        const char **origin, char *why, size_t cap) {
    if (!tunable(desc)) return 0;
    flashcl__tuned_key key = {
        (int)desc->head_dim, key_dtype(desc->dtype), desc->causal ? 1 : 0, FLASHCL__TUNED_FORWARD, 0, 0};
    return lookup(ctx, &key, ov, origin, why, cap);
}

int flashcl__tuned_decode_plan(const flashcl_context *ctx, const flashcl_attention_desc *desc, int cache_dtype,
                               flashcl__tile_override *ov, const char **origin, char *why, size_t cap) {
    if (!tunable(desc) || desc->heads_kv == 0 || cache_dtype < 0 || cache_dtype > 2) return 0;
    const size_t packed = desc->heads_q / desc->heads_kv * desc->max_seqlen_q;
    flashcl__tuned_key key = {(int)desc->head_dim, key_dtype(desc->dtype),    0, FLASHCL__TUNED_DECODE,
                              cache_dtype,         decode_rows_bucket(packed)};
    return lookup(ctx, &key, ov, origin, why, cap);
}

/* ---- public */

flashcl_status flashcl_tuning_query(const flashcl_context *cctx, flashcl_tuning_info *out) {
    if (!cctx) return FLASHCL_ERR_INVALID_CONTEXT;
    /* Only the last-error message changes, as for every other call (the context itself was
       allocated writable by flashcl_context_create): a refusal names its field and a success
       clears what an earlier call left. */
    flashcl_context *ctx = (flashcl_context *)cctx;
    flashcl__clear_error(ctx);
    if (!out) return flashcl__fail(ctx, FLASHCL_ERR_INVALID_ARGUMENT, "out is NULL");
    if (out->struct_size != sizeof *out)
        return flashcl__fail(ctx, FLASHCL_ERR_INVALID_STRUCT_SIZE,
                             "out->struct_size (%zu) is not sizeof(flashcl_tuning_info) (%zu): set it before the call",
                             out->struct_size, sizeof *out);
    char *ident = identity(ctx);
    if (!ident) return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_HOST_MEMORY, "out of host memory for the identity");
    memset(out, 0, sizeof *out);
    out->struct_size = sizeof *out;
    flashcl__copy_str(out->path, sizeof out->path, ctx->tuning_path);
    flashcl__copy_str(out->identity, sizeof out->identity, ident);
    flashcl__copy_str(out->note, sizeof out->note, ctx->tuning_note);
    out->entries = ctx->tuned_count;
    out->off = ctx->tuning_off;
    free(ident);
    return FLASHCL_SUCCESS;
}

uint64_t flashcl_tuning_checksum(const char *text, size_t length) {
    return flashcl__fnv1a(FLASHCL__FNV_SEED, text, length);
}
