/* Shared option parsing: values, ranges and one-line errors. */
#include "options.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tool_errors.h"

void options_begin(option_cursor *c, const char *command, int argc, char **argv) {
    memset(c, 0, sizeof *c);
    c->argc = argc;
    c->argv = argv;
    c->command = command;
}

int options_next(option_cursor *c) {
    if (c->next >= c->argc) return 0;
    const char *arg = c->argv[c->next++];
    if (arg[0] != '-' || arg[1] == '\0') {
        tool_usage_error("%s: unexpected argument '%s' (try 'flashcl help %s')", c->command, arg, c->command);
        return -1;
    }
    c->inline_value = NULL;
    c->name = arg;
    const char *eq = strchr(arg, '=');
    if (eq != NULL && arg[1] == '-') {
        /* "--name=value": keep a copy of the name part; an over-long name is
         * truncated, which only matters for the "unknown option" message. */
        size_t len = (size_t)(eq - arg);
        if (len >= sizeof c->name_buf) len = sizeof c->name_buf - 1;
        memcpy(c->name_buf, arg, len);
        c->name_buf[len] = '\0';
        c->name = c->name_buf;
        c->inline_value = eq + 1;
    }
    return 1;
}

bool options_repeated(const option_cursor *c) {
    const size_t len = strlen(c->name);
    for (int i = 0; i + 1 < c->next; ++i) {
        const char *arg = c->argv[i];
        if (strncmp(arg, c->name, len) == 0 && (arg[len] == '\0' || arg[len] == '=')) return true;
    }
    return false;
}

bool options_is(const option_cursor *c, const char *name) { return strcmp(c->name, name) == 0; }

bool options_is_help(const option_cursor *c) { return options_is(c, "--help") || options_is(c, "-h"); }

bool options_value(option_cursor *c, const char **value) { return options_value_expecting(c, NULL, value); }

bool options_value_expecting(option_cursor *c, const char *expected, const char **value) {
    if (c->inline_value != NULL) {
        *value = c->inline_value;
        return true;
    }
    /* "--q --k K.npy" is a forgotten value, not a file called "--k";
     * "--q=--k" is the way to name such a file. */
    if (c->next >= c->argc || strncmp(c->argv[c->next], "--", 2) == 0) {
        if (expected != NULL)
            tool_usage_error("%s: missing value: expected %s", c->name, expected);
        else
            tool_usage_error("%s: missing value", c->name);
        return false;
    }
    *value = c->argv[c->next++];
    return true;
}

bool options_flag(const option_cursor *c) {
    if (c->inline_value != NULL) {
        tool_usage_error("%s: takes no value, got '%s'", c->name, c->inline_value);
        return false;
    }
    return true;
}

bool parse_size_text(const char *text, size_t *out) {
    size_t value = 0;
    if (text[0] == '\0') return false;
    for (const char *p = text; *p; ++p) {
        if (*p < '0' || *p > '9') return false;
        size_t digit = (size_t)(*p - '0');
        if (value > (SIZE_MAX - digit) / 10) return false;
        value = value * 10 + digit;
    }
    *out = value;
    return true;
}

bool options_size(option_cursor *c, size_t min, size_t max, size_t *out) {
    const char *text;
    if (!options_value(c, &text)) return false;
    size_t value;
    if (!parse_size_text(text, &value) || value < min || value > max) {
        tool_usage_error("%s: expected an integer from %zu to %zu, got '%s'", c->name, min, max, text);
        return false;
    }
    *out = value;
    return true;
}

bool options_float(option_cursor *c, float min, float *out) {
    const char *text;
    if (!options_value(c, &text)) return false;
    char *end = NULL;
    errno = 0;
    /* strtof skips leading space and reads "nan"/"inf"; both are refused. */
    float value = strtof(text, &end);
    bool ok = text[0] != '\0' && text[0] != ' ' && text[0] != '\t' && end != NULL && *end == '\0' && errno != ERANGE &&
              isfinite(value) && value >= min;
    if (!ok && end != NULL && *end == '\0' && errno == ERANGE && isfinite(value) && value >= min) {
        /* Underflow: the text is a number, nonzero and finite, but below float32's normal range. */
        tool_usage_error("%s: '%s' is too small for float32 (it underflows); give 0 or a magnitude of at least %g",
                         c->name, text, (double)FLT_MIN);
        return false;
    }
    if (!ok && end != NULL && *end == '\0' && errno == ERANGE && !isfinite(value)) {
        tool_usage_error("%s: '%s' is beyond float32's range (largest %g)", c->name, text, (double)FLT_MAX);
        return false;
    }
    if (!ok) {
        if (isfinite(min))
            tool_usage_error("%s: expected a finite number >= %g, got '%s'", c->name, (double)min, text);
        else
            tool_usage_error("%s: expected a finite number, got '%s'", c->name, text);
        return false;
    }
    *out = value;
    return true;
}

bool options_choice(option_cursor *c, const char *const *choices, size_t count, size_t *index) {
    const char *text;
    if (!options_value(c, &text)) return false;
    for (size_t i = 0; i < count; ++i) {
        if (strcmp(text, choices[i]) == 0) {
            *index = i;
            return true;
        }
    }
    fprintf(stderr, "flashcl: %s: expected ", c->name);
    for (size_t i = 0; i < count; ++i)
        fprintf(stderr, "%s%s", i == 0 ? "" : (i + 1 == count ? " or " : ", "), choices[i]);
    fprintf(stderr, ", got '%s'\n", text);
    return false;
}

bool options_dtype(option_cursor *c, flashcl_dtype *out) {
    static const char *const names[] = {"f32", "f16", "bf16"};
    static const flashcl_dtype types[] = {FLASHCL_DTYPE_F32, FLASHCL_DTYPE_F16, FLASHCL_DTYPE_BF16};
    size_t index;
    if (!options_choice(c, names, sizeof names / sizeof names[0], &index)) return false;
    *out = types[index];
    return true;
}

int options_unknown(const option_cursor *c) {
    return tool_usage_error("%s: unknown option '%s' (try 'flashcl help %s')", c->command, c->name, c->command);
}
