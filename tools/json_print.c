/* Minimal JSON writing helpers. */
#include "json_print.h"

#include <math.h>

void json_string(FILE *out, const char *s)
{
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p; ++p) {
        switch (*p) {
        case '"':
            fputs("\\\"", out);
            break;
        case '\\':
            fputs("\\\\", out);
            break;
        case '\n':
            fputs("\\n", out);
            break;
        case '\r':
            fputs("\\r", out);
            break;
        case '\t':
            fputs("\\t", out);
            break;
        default:
            if (*p < 0x20)
                fprintf(out, "\\u%04x", *p);
            else
                fputc(*p, out);
        }
    }
    fputc('"', out);
}

void json_key(FILE *out, const char *key, bool first)
{
    if (!first)
        fputc(',', out);
    json_string(out, key);
    fputc(':', out);
}

void json_number(FILE *out, double value)
{
    if (isfinite(value))
        fprintf(out, "%.9g", value);
    else
        fputs("null", out);
}
