/*
 * The backward entry points around the kernels: flashcl_backward_host on
 * both paths against the reference, fed by flashcl_forward_host as an
 * application would, and flashcl_backward_plan_query's fields.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backward_problem.h"
#include "grad_check.h"

static const char *path_name(flashcl_path path) { return path == FLASHCL_PATH_FLASH ? "flash" : "standard"; }

/* A host array of n floats plus TU_GUARD sentinels after it. */
static float *guarded(size_t n) {
    float *a = malloc((n + TU_GUARD) * sizeof(float));
    REQUIRE(a != NULL);
    tu_fill_sentinel(a, n + TU_GUARD);
    return a;
}

static void check_backward_host(flashcl_context *ctx) {
    /* GQA, causal, sq > sk (32 rows see no key), batch 2. Packed BSHD inputs
     * at offset 0 are exactly the host layout, so the problem's host images
     * are the arrays to pass. */
    bw_shape shape = bw_shape_make(2, 4, 2, 65, 33, 40, 1, TU_BSHD);
    bw_problem p;
    bw_problem_init(&p, flashcl_context_cl_context(ctx), &shape);
    const ref_problem *r = &p.fwd.ref;
    size_t rows = r->batch * r->heads_q * r->seqlen_q;
    size_t nq = rows * r->head_dim, nk = r->batch * r->heads_kv * r->seqlen_k * r->head_dim;
    float *o = guarded(nq), *lse = guarded(rows);
    CHECK_STATUS(flashcl_forward_host(ctx, &shape.fwd.desc, p.fwd.q.host, p.fwd.k.host, p.fwd.v.host, o, lse),
                 FLASHCL_SUCCESS);

    tu_dims qd = {r->batch, r->heads_q, r->seqlen_q, r->head_dim};
    tu_dims kd = {r->batch, r->heads_kv, r->seqlen_k, r->head_dim};
    flashcl_tensor qv = flashcl_tensor_bshd(NULL, r->seqlen_q, r->heads_q, r->head_dim);
    flashcl_tensor kv = flashcl_tensor_bshd(NULL, r->seqlen_k, r->heads_kv, r->head_dim);
    float *sentinel = guarded(nq > nk ? nq : nk);
    for (int path = 0; path < 2; path++) {
        char label[64];
        snprintf(label, sizeof label, "backward_host [%s]", path_name((flashcl_path)path));
        float *dq = guarded(nq), *dk = guarded(nk), *dv = guarded(nk);
        flashcl_attention_desc d = shape.fwd.desc;
        d.path = (flashcl_path)path;
        flashcl_status st =
            flashcl_backward_host(ctx, &d, p.fwd.q.host, p.fwd.k.host, p.fwd.v.host, o, p.dout.host, lse, dq, dk, dv);
        if (CHECK_STATUS(st, FLASHCL_SUCCESS)) {
            CHECK(flashcl_last_error(ctx)[0] == '\0');
            grad_compare(label, "dq", dq, &qv, qd, p.ref_dq, GRAD_ABS_TOL, GRAD_REL_TOL);
            grad_compare(label, "dk", dk, &kv, kd, p.ref_dk, GRAD_ABS_TOL, GRAD_REL_TOL);
            grad_compare(label, "dv", dv, &kv, kd, p.ref_dv, GRAD_ABS_TOL, GRAD_REL_TOL);
            grad_rows_zero(label, "dq", dq, &qv, qd, r->seqlen_q - r->seqlen_k);
            /* Nothing past the arrays' ends: the call copies out exactly their size. */
            tu_check_untouched(label, dq + nq, sentinel + nq, NULL, TU_GUARD);
            tu_check_untouched(label, dk + nk, sentinel + nk, NULL, TU_GUARD);
            tu_check_untouched(label, dv + nk, sentinel + nk, NULL, TU_GUARD);
        } else {
            fprintf(stderr, "  %s: %s\n", label, flashcl_last_error(ctx));
        }
        free(dq);
        free(dk);
        free(dv);
    }
    free(sentinel);
    free(o);
    free(lse);
    bw_problem_free(&p);
}

static void check_backward_plan(flashcl_context *ctx, flashcl_path path, size_t head_dim) {
    flashcl_plan plan;
    char label[64];
    if (!tu_query_plan(ctx, 1, path, 2, head_dim, &plan, label, sizeof label)) return;
    CHECK(flashcl_last_error(ctx)[0] == '\0');
    tu_check_plan_fields(ctx, &plan, "env table formula fallback"); /* the backward is not tuned */
    size_t rows = 2 * 4 * 100;
    if (path == FLASHCL_PATH_FLASH) {
        /* At least D = rowsum(dO * O), one float per query row; never an N x N matrix. */
        CHECK(plan.scratch_bytes >= rows * sizeof(float));
        CHECK(plan.scratch_bytes < rows * 300 * sizeof(float));
    } else {
        /* P and dS: batch * heads_q * seqlen_q * seqlen_k floats each, at least. */
        CHECK(plan.scratch_bytes >= 2 * rows * 300 * sizeof(float));
    }

    /* Asking again gives the same plan. */
    flashcl_plan again;
    char again_label[64];
    CHECK(tu_query_plan(ctx, 1, path, 2, head_dim, &again, again_label, sizeof again_label));
    CHECK(!strcmp(plan.kernel, again.kernel) && plan.block_rows == again.block_rows &&
          plan.work_group_size == again.work_group_size && plan.scratch_bytes == again.scratch_bytes);
    tu_print_plan(label, &plan);
}

int main(void) {
    flashcl_context *ctx = tu_context_create();
    check_backward_host(ctx);
    check_backward_plan(ctx, FLASHCL_PATH_FLASH, 40);
    check_backward_plan(ctx, FLASHCL_PATH_FLASH, 17);
    check_backward_plan(ctx, FLASHCL_PATH_STANDARD, 40);
    flashcl_context_destroy(ctx);
    return tu_finish("test_backward_api");
}
