/* Minimal JSON writing helpers. */
#include "json_print.h"

#include <math.h>

/* The two-character escape of c, or NULL when c needs none (or the \u form). */
static const char *short_escape(unsigned char c) {
    static const char from[] = "\"\\\n\r\t", *const to[] = {"\\\"", "\\\\", "\\n", "\\r", "\\t"};
    for (size_t i = 0; i < sizeof to / sizeof to[0]; ++i)
        if (c == (unsigned char)from[i]) return to[i];
    return NULL;
}

void json_string(FILE *out, const char *s) {
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p; ++p) {
        const char *escape = short_escape(*p);
        if (escape != NULL)
            fputs(escape, out);
        else if (*p < 0x20)
            fprintf(out, "\\u%04x", *p);
        else
            fputc(*p, out);
    }
    fputc('"', out);
}

void json_key(FILE *out, const char *key, bool first) {
    if (!first) fputc(',', out);
    json_string(out, key);
    fputc(':', out);
}

void json_number(FILE *out, double value) {
    if (isfinite(value))
        fprintf(out, "%.9g", value);
    else
        fputs("null", out);
}

void json_member_string(FILE *out, const char *key, const char *value) {
    json_key(out, key, false);
    json_string(out, value);
}

void json_member_number(FILE *out, const char *key, double value) {
    json_key(out, key, false);
    json_number(out, value);
}

void json_member_size(FILE *out, const char *key, size_t value) {
    json_key(out, key, false);
    fprintf(out, "%zu", value);
}

void json_member_literal(FILE *out, const char *key, const char *value) {
    json_key(out, key, false);
    fputs(value, out);
}
