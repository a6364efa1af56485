/*
 * A set of .npy output files that appear together or not at all: every file
 * is written in full to its temporary file first, and only when all of them
 * are complete are they renamed into place. A failure while writing leaves
 * none of them behind.
 */
#ifndef FLASHCL_TOOLS_NPY_OUTPUTS_H
#define FLASHCL_TOOLS_NPY_OUTPUTS_H

#include <stddef.h>

typedef struct npy_output {
    const char *option; /* the option that named the file, e.g. "--dq", for messages */
    const char *path;   /* NULL: this output was not asked for and is skipped */
    const size_t *shape;
    size_t ndim;
    const float *data; /* product(shape) floats */
} npy_output;

/* Returns 0, or TOOL_EXIT_FAILED after printing one line about the failure. */
int npy_outputs_write(const npy_output *outputs, size_t count);

#endif
