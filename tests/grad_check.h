/*
 * How a float32 gradient is judged against the double reference. Gradients
 * sum many terms of both signs, so an element can be near zero while its
 * neighbours are large: the tolerance is relative to the largest reference
 * element of the tensor, not to each element.
 */
#ifndef FLASHCL_TEST_GRAD_CHECK_H
#define FLASHCL_TEST_GRAD_CHECK_H

#include "testutil.h"

/* Absolute and max-relative parts of the float32 gradient tolerance. */
#define GRAD_ABS_TOL 1e-4
#define GRAD_REL_TOL 1e-3

/*
 * |got - ref| <= abs_tol + rel_tol * max|ref| for every element of the view
 * (ref packed [batch, heads, rows, head_dim]); NaN or infinity always fails.
 * Reports the worst element under `label` and `name` ("dq", ...).
 */
int grad_compare(const char *label, const char *name, const float *got, const flashcl_tensor *view, tu_dims dims,
                 const double *ref, double abs_tol, double rel_tol);

/* Every element of rows [0, rows) of each (batch, head) of the view is exactly 0. */
int grad_rows_zero(const char *label, const char *name, const float *got, const flashcl_tensor *view, tu_dims dims,
                   size_t rows);

#endif
