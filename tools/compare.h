/* Element-wise agreement of two outputs, as `bench` checks flash against standard. */
#ifndef FLASHCL_TOOLS_COMPARE_H
#define FLASHCL_TOOLS_COMPARE_H

#include <stdbool.h>
#include <stddef.h>

typedef struct compare_result {
    double max_abs_diff;   /* NaN when some element is NaN in either array */
    size_t mismatches;     /* elements with |a - ref| > atol + rtol * |ref| (or NaN) */
    size_t first_mismatch; /* index of the first one; meaningful when mismatches > 0 */
    bool agree;            /* mismatches == 0 */
} compare_result;

void compare_outputs(const float *actual, const float *reference, size_t count, double atol,
                     double rtol, compare_result *out);

#endif
