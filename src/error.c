/* The per-context "last error" message: names a field, an OpenCL call, or carries a build log. */
#define _POSIX_C_SOURCE 200809L
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Grows the message buffer to hold `need` bytes; false when the host is out of memory. */
static int reserve(flashcl_context *ctx, size_t need) {
    if (need <= ctx->error_cap) return 1;
    size_t cap = ctx->error_cap ? ctx->error_cap : 256;
    while (cap < need) cap *= 2;
    char *p = realloc(ctx->error, cap);
    if (!p) return 0;
    ctx->error = p;
    ctx->error_cap = cap;
    return 1;
}

static void set_message_v(flashcl_context *ctx, const char *fmt, va_list ap) {
    va_list copy;
    va_copy(copy, ap);
    int n = vsnprintf(NULL, 0, fmt, copy);
    va_end(copy);
    if (n < 0 || !reserve(ctx, (size_t)n + 1)) return;
    vsnprintf(ctx->error, (size_t)n + 1, fmt, ap);
}

flashcl_status flashcl__fail(flashcl_context *ctx, flashcl_status status, const char *fmt, ...) {
    if (!ctx) return status;
    va_list ap;
    va_start(ap, fmt);
    set_message_v(ctx, fmt, ap);
    va_end(ap);
    return status;
}

flashcl_status flashcl__fail_cl(flashcl_context *ctx, cl_int err, const char *what) {
    return flashcl__fail(ctx, (flashcl_status)err, "%s failed: %s (%d)", what, flashcl__cl_error_name(err), (int)err);
}

void flashcl__clear_error(flashcl_context *ctx) {
    if (ctx && ctx->error) ctx->error[0] = '\0';
}

void flashcl__append_error(flashcl_context *ctx, const char *text) {
    if (!ctx || !text) return;
    size_t have = ctx->error ? strlen(ctx->error) : 0;
    size_t add = strlen(text);
    if (!reserve(ctx, have + add + 1)) return;
    memcpy(ctx->error + have, text, add + 1);
}

const char *flashcl_last_error(const flashcl_context *ctx) {
    if (!ctx) return "the FlashCL context is NULL";
    return ctx->error ? ctx->error : "";
}

void flashcl__copy_str(char *dst, size_t cap, const char *src) {
    if (!cap) return;
    snprintf(dst, cap, "%s", src ? src : "");
}

void flashcl__cut_text(char *s, size_t keep) {
    size_t at = keep;
    for (size_t i = keep; i > keep / 2; --i)
        if (s[i] == ';' && s[i + 1] == ' ') {
            at = i;
            break;
        }
    if (at == keep)
        for (size_t i = keep; i > keep / 2; --i)
            if (s[i] == ' ') {
                at = i;
                break;
            }
    memcpy(s + at, "...", 4);
}

void flashcl__mark_truncated(char *dst, size_t cap) {
    if (cap < 4) return;
    flashcl__cut_text(dst, cap - 4);
}

void flashcl__prepend(char *dst, size_t cap, const char *prefix, const char *separator) {
    if (!prefix[0]) return;
    char rest[512];
    flashcl__copy_str(rest, sizeof rest, dst);
    dst[0] = '\0';
    flashcl__appendf(dst, cap, "%s%s%s", prefix, separator, rest);
}

/* "off" in any case ("OFF", as CMake spells it, too) or "0". */
int flashcl__env_off(const char *value) {
    if (!value) return 0;
    if (strcmp(value, "0") == 0) return 1;
    static const char off[] = "off";
    for (size_t i = 0; i < sizeof off; ++i) {
        const char c = value[i] >= 'A' && value[i] <= 'Z' ? (char)(value[i] - 'A' + 'a') : value[i];
        if (c != off[i]) return 0;
    }
    return 1;
}

void flashcl__appendf(char *dst, size_t cap, const char *fmt, ...) {
    size_t have = strnlen(dst, cap);
    if (have + 1 >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dst + have, cap - have, fmt, ap);
    va_end(ap);
}
