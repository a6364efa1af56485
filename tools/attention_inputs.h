/*
 * Loading and checking the .npy inputs of `flashcl attention`: each failure
 * prints one line naming the option and returns TOOL_EXIT_USAGE, before
 * anything has been computed or written.
 */
#ifndef FLASHCL_TOOLS_ATTENTION_INPUTS_H
#define FLASHCL_TOOLS_ATTENTION_INPUTS_H

#include <flashcl.h>

#include "npy.h"

/* Reads path into *out (left zeroed on failure). Returns 0 or TOOL_EXIT_USAGE. */
int attention_load(const char *option, const char *path, npy_array *out);

/*
 * Q [b, sq, hq, d], K and V [b, sk, hkv, d]: fills the sizes of *desc, or
 * reports the first mismatch. Returns 0 or TOOL_EXIT_USAGE.
 */
int attention_check_shapes(const npy_array *q, const npy_array *k, const npy_array *v,
                           flashcl_attention_desc *desc);

/* That `a` (named by option) has exactly the shape of `like` (named by like_option). */
int attention_check_same_shape(const char *option, const npy_array *a, const char *like_option,
                               const npy_array *like);

#endif
