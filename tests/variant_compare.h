/*
 * How variant results are judged against the double-precision reference:
 * elementwise (O, LSE), relative to the largest reference element
 * (gradients), and FlashAttention's low-precision criterion (f16/bf16).
 * Each prints the worst element under `label` and counts a failure.
 */
#ifndef FLASHCL_TEST_VARIANT_COMPARE_H
#define FLASHCL_TEST_VARIANT_COMPARE_H

#include <stddef.h>

/* The absolute floor of the f16/bf16 criterion. */
#define VCMP_LOWP_FLOOR 1e-5

/* |got - ref| <= abs_tol + rel_tol * |ref| for each element; infinities must match exactly. */
int vcmp_elementwise(const char *label, const char *name, const float *got, const double *ref, size_t n, double abs_tol,
                     double rel_tol);

/* As vcmp_elementwise, each element's allowance widened by slack[e] (NULL: none). */
int vcmp_elementwise_slack(const char *label, const char *name, const float *got, const double *ref, size_t n,
                           double abs_tol, double rel_tol, const double *slack);

/* |got - ref| <= abs_tol + rel_tol * max|ref| (grad_check.h's rule). */
int vcmp_max_relative(const char *label, const char *name, const float *got, const double *ref, size_t n,
                      double abs_tol, double rel_tol);

/* max|got - ref| <= 2 * max|base - ref| + VCMP_LOWP_FLOOR, base being the plain
   implementation in the storage type. */
int vcmp_lowp(const char *label, const char *name, const float *got, const double *ref, const double *base, size_t n);
/* The same with `extra` added to the tolerance: an error the plain implementation does not
   make but FlashAttention's algorithm does by design (see vp_check_backward's dsinks). */
int vcmp_lowp_allowing(const char *label, const char *name, const float *got, const double *ref, const double *base,
                       size_t n, double extra);

/* Quiet: passing checks print nothing (the soak makes thousands). Failures always print. */
void vcmp_set_quiet(int quiet);

#endif
