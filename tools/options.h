/*
 * Command-line option parsing shared by the subcommands, so each of them
 * reports a bad option the same way: one line on stderr naming the option.
 *
 * Options are "--name value" or "--name=value"; flags are "--name" alone.
 * Every parse function prints its own error and returns false; the caller
 * then returns TOOL_EXIT_USAGE.
 */
#ifndef FLASHCL_TOOLS_OPTIONS_H
#define FLASHCL_TOOLS_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>

#include "flashcl.h"

typedef struct option_cursor {
    int argc;
    char **argv;
    int next;                 /* index of the next argv element to look at */
    const char *command;      /* subcommand name, for "unknown option" messages */
    const char *name;         /* the current option, e.g. "--seqlen" */
    const char *inline_value; /* the text after '=' in "--name=value", else NULL */
    char name_buf[64];        /* holds name when it came as "--name=value" */
} option_cursor;

/* argv[0..argc) are the arguments after the subcommand name. */
void options_begin(option_cursor *c, const char *command, int argc, char **argv);

/*
 * Moves to the next option: returns 1 with c->name set, 0 when there are no
 * more arguments, and -1 (after printing why) for an argument that is not an
 * option: no subcommand takes positional arguments.
 */
int options_next(option_cursor *c);

/* Whether the current option's name (as "--name" or "--name=value") came earlier in the arguments. */
bool options_repeated(const option_cursor *c);

/* Whether the current option is `name` (e.g. "--causal"). */
bool options_is(const option_cursor *c, const char *name);

/* Whether the current option is --help or -h (the command then returns TOOL_SHOW_HELP). */
bool options_is_help(const option_cursor *c);

/* Takes the current option's value: "--q Q.npy" or "--q=Q.npy". */
bool options_value(option_cursor *c, const char **value);

/* The same; a missing value's message says what was expected (e.g. "SLOPES.npy or 'standard'"). */
bool options_value_expecting(option_cursor *c, const char *expected, const char **value);

/* Accepts the current option as a flag; "--causal=1" is an error. */
bool options_flag(const option_cursor *c);

/* Takes an unsigned decimal integer in [min, max]. */
bool options_size(option_cursor *c, size_t min, size_t max, size_t *out);

/* Takes a finite number >= min. */
bool options_float(option_cursor *c, float min, float *out);

/* Takes one of `count` words; *index is the position of the one given. */
bool options_choice(option_cursor *c, const char *const *choices, size_t count, size_t *index);

/* Takes a storage type: f32, f16 or bf16. */
bool options_dtype(option_cursor *c, flashcl_dtype *out);

/* Prints "unknown option" for the current option; returns TOOL_EXIT_USAGE. */
int options_unknown(const option_cursor *c);

/* Parses an unsigned decimal integer with no sign, space or suffix. */
bool parse_size_text(const char *text, size_t *out);

#endif
