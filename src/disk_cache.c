/*
 * On-disk cache of program binaries, so a second process skips the OpenCL
 * compiler (seconds per variant on POCL, more on some GPU drivers).
 *
 * File <dir>/<key>.clbin:
 *   "FLASHCLB" | u32 format | u32 identity length | identity text
 *   | u64 binary length | binary | u64 FNV-1a of everything before it
 * The identity text names the device, driver, platform, source hash and
 * options; it must equal the current one byte for byte, so a hash collision
 * or a file from another device is rebuilt, never trusted. Files are written
 * to a temporary name and renamed, so readers never see half a file. Any
 * problem (unreadable, truncated, mismatched, unwritable directory) means
 * "build from source"; the cache never makes a call fail.
 */
#define _POSIX_C_SOURCE 200809L
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CACHE_MAGIC "FLASHCLB"
#define CACHE_FORMAT 1u
#define MAX_BINARY_BYTES (256u << 20)

/* mkdir -p; failures are ignored here and show up as an unusable directory later. */
static void make_dirs(char *path) {
    for (char *p = path + 1; *p; ++p) {
        if (*p != '/') continue;
        *p = '\0';
        mkdir(path, 0755);
        *p = '/';
    }
    mkdir(path, 0755);
}

void flashcl__cache_dir_init(flashcl_context *ctx) {
    ctx->cache_dir[0] = '\0';
    ctx->cache_dir_named[0] = '\0';
    const char *env = getenv("FLASHCL_CACHE_DIR");
    char dir[sizeof ctx->cache_dir];
    if (flashcl__env_off(env)) return;
    if (env && *env) {
        flashcl__copy_str(dir, sizeof dir, env);
    } else {
        const char *xdg = getenv("XDG_CACHE_HOME");
        const char *home = getenv("HOME");
        int n;
        if (xdg && *xdg)
            n = snprintf(dir, sizeof dir, "%s/flashcl", xdg);
        else if (home && *home)
            n = snprintf(dir, sizeof dir, "%s/.cache/flashcl", home);
        else
            return;
        if (n < 0 || (size_t)n >= sizeof dir) return;
    }
    make_dirs(dir);
    flashcl__copy_str(ctx->cache_dir_named, sizeof ctx->cache_dir_named, dir); /* the tuning file's, even read-only */
    if (access(dir, W_OK | X_OK) != 0) return; /* unwritable: run without a disk cache */
    flashcl__copy_str(ctx->cache_dir, sizeof ctx->cache_dir, dir);
}

/* The text that must match exactly for a cached binary to be used. */
static char *identity(const flashcl_context *ctx, const char *source, const char *options) {
    uint64_t src_hash = flashcl__fnv1a(FLASHCL__FNV_SEED, source, strlen(source));
    const flashcl__device_info *d = &ctx->info;
    const char *fmt = "format=%u\ndevice=%s\nvendor=%s\ndevice_version=%s\ndriver=%s\nplatform=%s\n"
                      "platform_version=%s\nsource=%016llx:%zu\noptions=%s\n";
    int n = snprintf(NULL, 0, fmt, CACHE_FORMAT, d->name, d->vendor, d->version, d->driver, d->platform_name,
                     d->platform_version, (unsigned long long)src_hash, strlen(source), options);
    if (n < 0) return NULL;
    char *text = malloc((size_t)n + 1);
    if (!text) return NULL;
    snprintf(text, (size_t)n + 1, fmt, CACHE_FORMAT, d->name, d->vendor, d->version, d->driver, d->platform_name,
             d->platform_version, (unsigned long long)src_hash, strlen(source), options);
    return text;
}

static int cache_path(const flashcl_context *ctx, const char *ident, char *out, size_t cap) {
    uint64_t key = flashcl__fnv1a(FLASHCL__FNV_SEED, ident, strlen(ident));
    int n = snprintf(out, cap, "%s/%016llx.clbin", ctx->cache_dir, (unsigned long long)key);
    return n > 0 && (size_t)n < cap;
}

static int read_exact(FILE *f, void *buf, size_t n) { return fread(buf, 1, n, f) == n; }

cl_program flashcl__cache_load(flashcl_context *ctx, const char *source, const char *options) {
    if (!ctx->cache_dir[0]) return NULL;
    char *ident = identity(ctx, source, options);
    if (!ident) return NULL;
    char path[1200];
    cl_program program = NULL;
    unsigned char *file = NULL;
    FILE *f = NULL;
    if (!cache_path(ctx, ident, path, sizeof path) || !(f = fopen(path, "rb"))) goto done;

    /* Read the whole file (bounded) and parse it from memory. */
    if (fseek(f, 0, SEEK_END) != 0) goto done;
    long size = ftell(f);
    if (size < 0 || (unsigned long)size > MAX_BINARY_BYTES + 65536u || fseek(f, 0, SEEK_SET) != 0) goto done;
    file = malloc((size_t)size + 1);
    if (!file || !read_exact(f, file, (size_t)size)) goto done;

    size_t ident_len = strlen(ident), pos = 0, total = (size_t)size;
    uint32_t format = 0, stored_ident_len = 0;
    uint64_t bin_len = 0, stored_sum = 0;
    if (total < 8 + 4 + 4 || memcmp(file, CACHE_MAGIC, 8) != 0) goto done;
    pos = 8;
    memcpy(&format, file + pos, 4);
    memcpy(&stored_ident_len, file + pos + 4, 4);
    pos += 8;
    if (format != CACHE_FORMAT || stored_ident_len != ident_len || total - pos < ident_len + 8) goto done;
    if (memcmp(file + pos, ident, ident_len) != 0) goto done;
    pos += ident_len;
    memcpy(&bin_len, file + pos, 8);
    pos += 8;
    if (bin_len == 0 || bin_len > MAX_BINARY_BYTES || total - pos != bin_len + 8) goto done;
    memcpy(&stored_sum, file + pos + bin_len, 8);
    if (flashcl__fnv1a(FLASHCL__FNV_SEED, file, pos + (size_t)bin_len) != stored_sum) goto done;

    const unsigned char *binary = file + pos;
    size_t binary_len = (size_t)bin_len;
    cl_int status = CL_SUCCESS, err = CL_SUCCESS;
    program = clCreateProgramWithBinary(ctx->cl_ctx, 1, &ctx->device, &binary_len, &binary, &status, &err);
    if (err != CL_SUCCESS || status != CL_SUCCESS) {
        if (program) clReleaseProgram(program);
        program = NULL;
        goto done;
    }
    if (clBuildProgram(program, 1, &ctx->device, options, NULL, NULL) != CL_SUCCESS) {
        clReleaseProgram(program);
        program = NULL;
    }
done:
    if (f) fclose(f);
    free(file);
    free(ident);
    return program;
}

static int write_all(FILE *f, const void *p, size_t n) { return fwrite(p, 1, n, f) == n; }

void flashcl__cache_store(flashcl_context *ctx, const char *source, const char *options, cl_program program) {
    if (!ctx->cache_dir[0]) return;
    size_t bin_size = 0;
    if (clGetProgramInfo(program, CL_PROGRAM_BINARY_SIZES, sizeof bin_size, &bin_size, NULL) != CL_SUCCESS ||
        bin_size == 0 || bin_size > MAX_BINARY_BYTES)
        return;
    char *ident = identity(ctx, source, options);
    size_t ident_len = ident ? strlen(ident) : 0;
    size_t head_len = 8 + 4 + 4 + ident_len + 8;
    unsigned char *buf = ident ? malloc(head_len + bin_size + 8) : NULL;
    char path[1200], tmp[1300];
    if (!buf || !cache_path(ctx, ident, path, sizeof path)) goto done;
    unsigned char *binary = buf + head_len;
    if (clGetProgramInfo(program, CL_PROGRAM_BINARIES, sizeof binary, &binary, NULL) != CL_SUCCESS) goto done;

    uint32_t format = CACHE_FORMAT, il = (uint32_t)ident_len;
    uint64_t bl = bin_size;
    memcpy(buf, CACHE_MAGIC, 8);
    memcpy(buf + 8, &format, 4);
    memcpy(buf + 12, &il, 4);
    memcpy(buf + 16, ident, ident_len);
    memcpy(buf + 16 + ident_len, &bl, 8);
    uint64_t sum = flashcl__fnv1a(FLASHCL__FNV_SEED, buf, head_len + bin_size);
    memcpy(buf + head_len + bin_size, &sum, 8);

    /* Unique temporary name per process and context, then an atomic rename. */
    int n = snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%p", path, (long)getpid(), (void *)ctx);
    if (n < 0 || (size_t)n >= sizeof tmp) goto done;
    FILE *f = fopen(tmp, "wb");
    if (!f) goto done;
    int ok = write_all(f, buf, head_len + bin_size + 8);
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) remove(tmp);
done:
    free(buf);
    free(ident);
}
