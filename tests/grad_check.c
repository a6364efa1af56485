#include "grad_check.h"

#include <math.h>
#include <stdio.h>

int grad_compare(const char *label, const char *name, const float *got, const flashcl_tensor *view, tu_dims dims,
                 const double *ref, double abs_tol, double rel_tol) {
    flashcl_tensor t = ref_resolve_view(view, dims.rows, dims.heads, dims.head_dim);
    size_t n = dims.batch * dims.heads * dims.rows * dims.head_dim;
    double max_ref = 0.0;
    for (size_t e = 0; e < n; e++)
        if (fabs(ref[e]) > max_ref) max_ref = fabs(ref[e]);
    double tol = abs_tol + rel_tol * max_ref;

    double worst = -1.0;
    size_t worst_at = 0, bad = 0;
    for (size_t e = 0; e < n; e++) {
        size_t c = e % dims.head_dim, r = e / dims.head_dim % dims.rows;
        size_t h = e / dims.head_dim / dims.rows % dims.heads;
        size_t b = e / dims.head_dim / dims.rows / dims.heads;
        double g = got[ref_index(&t, b, h, r, c)];
        /* isfinite also rejects NaN, so a NaN can never hide as "not worse". */
        double err = isfinite(g) ? fabs(g - ref[e]) : INFINITY;
        bad += !(err <= tol);
        if (err > worst) {
            worst = err;
            worst_at = e;
        }
    }
    if (!bad) return 1;
    size_t c = worst_at % dims.head_dim, r = worst_at / dims.head_dim % dims.rows;
    size_t h = worst_at / dims.head_dim / dims.rows % dims.heads;
    size_t b = worst_at / dims.head_dim / dims.rows / dims.heads;
    fprintf(stderr,
            "FAIL %s: %s has %zu of %zu element(s) out of tolerance; worst at b=%zu h=%zu "
            "row=%zu col=%zu: got %.9g, reference %.9g (|diff| %.3g, tolerance %.3g = %g + %g * "
            "max|ref| %.3g)\n",
            label, name, bad, n, b, h, r, c, (double)got[ref_index(&t, b, h, r, c)], ref[worst_at], worst, tol, abs_tol,
            rel_tol, max_ref);
    tu_fail_count();
    return 0;
}

int grad_rows_zero(const char *label, const char *name, const float *got, const flashcl_tensor *view, tu_dims dims,
                   size_t rows) {
    flashcl_tensor t = ref_resolve_view(view, dims.rows, dims.heads, dims.head_dim);
    size_t bad = 0;
    for (size_t b = 0; b < dims.batch; b++)
        for (size_t h = 0; h < dims.heads; h++)
            for (size_t r = 0; r < rows && r < dims.rows; r++)
                for (size_t c = 0; c < dims.head_dim; c++) {
                    float g = got[ref_index(&t, b, h, r, c)];
                    if (g != 0.0f) {
                        if (!bad)
                            fprintf(stderr,
                                    "FAIL %s: %s row %zu (b=%zu h=%zu) sees no key but "
                                    "col %zu is %.9g, not 0\n",
                                    label, name, r, b, h, c, (double)g);
                        bad++;
                    }
                }
    if (!bad) return 1;
    fprintf(stderr, "FAIL %s: %zu element(s) of fully masked %s rows are not 0\n", label, bad, name);
    tu_fail_count();
    return 0;
}
