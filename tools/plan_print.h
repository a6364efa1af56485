/* Printing a flashcl_plan: in full for `info`, on one line for `bench`. */
#ifndef FLASHCL_TOOLS_PLAN_PRINT_H
#define FLASHCL_TOOLS_PLAN_PRINT_H

#include <stdio.h>

#include <flashcl.h>

/* "local", "direct" or "unknown". */
const char *plan_staging_name(int staging);

/* Every field, over several lines, each starting with `indent`. */
void plan_print_full(FILE *out, const flashcl_plan *plan, const char *indent);

/* kernel, Br, Bc, WG, staging and local bytes on one line (no newline). */
void plan_print_summary(FILE *out, const flashcl_plan *plan);

#endif
