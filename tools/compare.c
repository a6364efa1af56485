/* Output comparison with an absolute + relative tolerance. */
#include "compare.h"

#include <math.h>

void compare_outputs(const float *actual, const float *reference, size_t count, double atol,
                     double rtol, compare_result *out)
{
    out->max_abs_diff = 0.0;
    out->mismatches = 0;
    out->first_mismatch = 0;
    bool saw_nan = false;
    for (size_t i = 0; i < count; ++i) {
        double a = actual[i], r = reference[i];
        double diff = fabs(a - r);
        /* Written so that a NaN anywhere counts as a mismatch. */
        bool close = diff <= atol + rtol * fabs(r);
        if (isnan(diff))
            saw_nan = true;
        else if (diff > out->max_abs_diff)
            out->max_abs_diff = diff;
        if (!close) {
            if (out->mismatches == 0)
                out->first_mismatch = i;
            out->mismatches++;
        }
    }
    if (saw_nan)
        out->max_abs_diff = NAN;
    out->agree = out->mismatches == 0;
}
