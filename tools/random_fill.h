/* Reproducible random inputs for `bench`: xorshift64, no global state. */
#ifndef FLASHCL_TOOLS_RANDOM_FILL_H
#define FLASHCL_TOOLS_RANDOM_FILL_H

#include <stddef.h>
#include <stdint.h>

/* Fills data with values uniform in [-1, 1), advancing *state (never 0). */
void random_fill_uniform(float *data, size_t count, uint64_t *state);

#endif
