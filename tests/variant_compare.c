/* Variant result comparisons; see variant_compare.h. */
#include "variant_compare.h"

#include <math.h>
#include <stdio.h>

#include "testutil.h"

/* ---------------------------------------------------------- comparisons */

/* Largest |got - ref| (infinite for NaN or mismatched infinities) and where. */
static double max_error(const float *got, const double *ref, size_t n, size_t *at) {
    double worst = 0.0;
    *at = 0;
    for (size_t e = 0; e < n; e++) {
        double err;
        if (isinf(ref[e]) || isinf(got[e]))
            err = (double)got[e] == ref[e] ? 0.0 : INFINITY;
        else
            err = isfinite(got[e]) ? fabs((double)got[e] - ref[e]) : INFINITY;
        if (!(err <= worst)) {
            worst = err;
            *at = e;
        }
    }
    return worst;
}

static double max_error_double(const double *a, const double *ref, size_t n) {
    double worst = 0.0;
    for (size_t e = 0; e < n; e++)
        if (isfinite(ref[e])) worst = fmax(worst, fabs(a[e] - ref[e]));
    return worst;
}

/* Elementwise |got - ref| <= abs_tol + rel_tol * |ref| (per element, like tu_compare_o). */
int vcmp_elementwise(const char *label, const char *name, const float *got, const double *ref, size_t n, double abs_tol,
                     double rel_tol) {
    return vcmp_elementwise_slack(label, name, got, ref, n, abs_tol, rel_tol, NULL);
}

int vcmp_elementwise_slack(const char *label, const char *name, const float *got, const double *ref, size_t n,
                           double abs_tol, double rel_tol, const double *slack) {
    size_t bad = 0, worst_at = 0;
    double worst = -1.0;
    for (size_t e = 0; e < n; e++) {
        double ratio;
        if (isnan(got[e]) || isnan(ref[e]))
            ratio = INFINITY;
        else if (isinf(ref[e]) || isinf(got[e]))
            ratio = (double)got[e] == ref[e] ? 0.0 : INFINITY;
        else
            ratio = fabs((double)got[e] - ref[e]) / (abs_tol + rel_tol * fabs(ref[e]) + (slack ? slack[e] : 0.0));
        bad += !(ratio <= 1.0);
        if (!(ratio <= worst)) {
            worst = ratio;
            worst_at = e;
        }
    }
    if (!bad) return 1;
    fprintf(stderr,
            "FAIL %s: %s has %zu of %zu element(s) out of tolerance; worst at %zu: got "
            "%.9g, reference %.9g\n",
            label, name, bad, n, worst_at, (double)got[worst_at], ref[worst_at]);
    tu_fail_count();
    return 0;
}

/* |got - ref| <= abs_tol + rel_tol * max|ref| (grad_check.h's rule). */
int vcmp_max_relative(const char *label, const char *name, const float *got, const double *ref, size_t n,
                      double abs_tol, double rel_tol) {
    double max_ref = 0.0;
    for (size_t e = 0; e < n; e++) max_ref = fmax(max_ref, fabs(ref[e]));
    size_t at;
    double err = max_error(got, ref, n, &at);
    double tol = abs_tol + rel_tol * max_ref;
    if (err <= tol) return 1;
    fprintf(stderr,
            "FAIL %s: %s max error %.3g > %.3g (at %zu: got %.9g, reference %.9g; "
            "max|ref| %.3g)\n",
            label, name, err, tol, at, (double)got[at], ref[at], max_ref);
    tu_fail_count();
    return 0;
}

static int g_quiet;

void vcmp_set_quiet(int quiet) { g_quiet = quiet; }

/* FlashAttention's criterion: error <= 2 * the plain low-precision error + floor. */
int vcmp_lowp(const char *label, const char *name, const float *got, const double *ref, const double *base, size_t n) {
    return vcmp_lowp_allowing(label, name, got, ref, base, n, 0.0);
}

int vcmp_lowp_allowing(const char *label, const char *name, const float *got, const double *ref, const double *base,
                       size_t n, double extra) {
    size_t at;
    double err = max_error(got, ref, n, &at);
    double base_err = max_error_double(base, ref, n);
    double tol = 2.0 * base_err + VCMP_LOWP_FLOOR + extra;
    if (err <= tol) {
        /* Not the word "error": the Oclgrind wrapper fails any output containing it. */
        if (!g_quiet) printf("     %s: %s max |diff| %.3g, plain implementation's %.3g\n", label, name, err, base_err);
        return 1;
    }
    fprintf(stderr,
            "FAIL %s: %s max error %.3g > 2 x plain-implementation error %.3g + %g + %.3g (at "
            "%zu: got %.9g, reference %.9g)\n",
            label, name, err, base_err, VCMP_LOWP_FLOOR, extra, at, (double)got[at], ref[at]);
    tu_fail_count();
    return 0;
}
