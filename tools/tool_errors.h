/* Exit statuses and the one-line error messages every subcommand prints. */
#ifndef FLASHCL_TOOLS_TOOL_ERRORS_H
#define FLASHCL_TOOLS_TOOL_ERRORS_H

#include <stdio.h>

/* Scripts tell "you called it wrong" (2) from "it ran and failed" (1). */
enum tool_exit {
    TOOL_EXIT_OK = 0,
    TOOL_EXIT_FAILED = 1, /* the library, OpenCL or the output files failed */
    TOOL_EXIT_USAGE = 2,  /* bad option, bad input file or shape: nothing was written */
    /* Not an exit status: a command returns it for --help, and flashcl.c
     * prints that command's help and exits with TOOL_EXIT_OK. */
    TOOL_SHOW_HELP = -1
};

#if defined(__GNUC__)
#define TOOL_PRINTF(fmt_index, first_arg) __attribute__((format(printf, fmt_index, first_arg)))
#else
#define TOOL_PRINTF(fmt_index, first_arg)
#endif

/* Prints "flashcl: <message>" to stderr and returns TOOL_EXIT_USAGE. */
int tool_usage_error(const char *fmt, ...) TOOL_PRINTF(1, 2);

/* Prints "flashcl: <message>" to stderr and returns TOOL_EXIT_FAILED. */
int tool_failure(const char *fmt, ...) TOOL_PRINTF(1, 2);

/*
 * Prints "flashcl: [where: ]STATUS_NAME: detail" on one line and returns
 * TOOL_EXIT_FAILED (TOOL_EXIT_USAGE for FLASHCL_ERR_INVALID_DEVICE_SPEC: a
 * bad --device). detail is normally flashcl_last_error(ctx); when it is
 * NULL or empty the status's generic description is used instead.
 */
int tool_status_error(const char *where, int status, const char *detail);

/*
 * Writes text with its line breaks folded into " | ", so a multi-line
 * message (a build log) still takes one line of stderr.
 */
void tool_print_one_line(FILE *out, const char *text);

#endif
