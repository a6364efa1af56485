/* Just enough JSON output for `bench --json`: strings, numbers, booleans. */
#ifndef FLASHCL_TOOLS_JSON_PRINT_H
#define FLASHCL_TOOLS_JSON_PRINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* A quoted, escaped string (bytes >= 0x80 are passed through as UTF-8). */
void json_string(FILE *out, const char *s);

/* "key": with the comma before it unless it is the object's first member. */
void json_key(FILE *out, const char *key, bool first);

/* A number to 9 significant digits; NaN and infinities become null. */
void json_number(FILE *out, double value);

/* ,"key":value: a member after an object's first one. */
void json_member_string(FILE *out, const char *key, const char *value);
void json_member_number(FILE *out, const char *key, double value);
void json_member_size(FILE *out, const char *key, size_t value);
/* value is written as is: true, false, null. */
void json_member_literal(FILE *out, const char *key, const char *value);

#endif
