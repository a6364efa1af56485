/* One-line error reporting shared by the subcommands. */
#include "tool_errors.h"

#include <stdarg.h>

#include <flashcl.h>

/* "flashcl: <message>" on stderr; returns status. */
static int report(int status, const char *fmt, va_list ap) {
    fputs("flashcl: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    return status;
}

int tool_usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int status = report(TOOL_EXIT_USAGE, fmt, ap);
    va_end(ap);
    return status;
}

int tool_failure(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int status = report(TOOL_EXIT_FAILED, fmt, ap);
    va_end(ap);
    return status;
}

void tool_print_one_line(FILE *out, const char *text) {
    int pending_break = 0; /* a break is written only between non-empty lines */
    int wrote_any = 0;
    for (const char *p = text; *p; ++p) {
        if (*p == '\n' || *p == '\r') {
            pending_break = wrote_any;
            continue;
        }
        if (pending_break) {
            fputs(" | ", out);
            pending_break = 0;
        }
        fputc(*p, out);
        wrote_any = 1;
    }
}

int tool_status_error(const char *where, int status, const char *detail) {
    if (detail == NULL || detail[0] == '\0') detail = flashcl_status_string(status);
    fputs("flashcl: ", stderr);
    if (where != NULL) fprintf(stderr, "%s: ", where);
    fprintf(stderr, "%s: ", flashcl_status_name(status));
    tool_print_one_line(stderr, detail);
    fputc('\n', stderr);
    /* A --device that names no device is a bad option, like any other (nothing ran). */
    return status == FLASHCL_ERR_INVALID_DEVICE_SPEC ? TOOL_EXIT_USAGE : TOOL_EXIT_FAILED;
}
