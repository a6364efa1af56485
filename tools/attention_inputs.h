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
 * Q [b, sq, hq, d], K [b, sk, hkv, d], V [b, sk, hkv, d_v] (with varlen:
 * Q [total_q, hq, d], K [total_k, hkv, d], V [total_k, hkv, d_v]): fills the
 * sizes of *desc (head_dim_v too; with varlen batch is left to the caller and
 * seqlen_q/k are the totals), or reports the first mismatch. Returns 0 or
 * TOOL_EXIT_USAGE.
 */
int attention_check_shapes(const npy_array *q, const npy_array *k, const npy_array *v, int varlen,
                           flashcl_attention_desc *desc);

/* That `a` (named by option) has exactly the shape of `like` (named by like_option). */
int attention_check_same_shape(const char *option, const npy_array *a, const char *like_option, const npy_array *like);

#endif
