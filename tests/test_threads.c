/*
 * The thread model (flashcl.h, at flashcl_context): a context is used by one
 * thread at a time; separate contexts are independent. Four threads each
 * create their own context and run the flash and standard forward and
 * backward on the same problem at the same time; every output must be
 * bitwise identical to a single-threaded run.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backward_problem.h"

#define THREADS 4

typedef struct outputs {
    float *o, *lse;               /* flash forward */
    float *grads[2][3];           /* [flash, standard][dq, dk, dv] */
    float *std_o;                 /* standard forward */
    size_t n_o, n_lse, n_grad[3]; /* floats in each buffer (guards included) */
    int ok;
} outputs;

static bw_shape k_shape;

/* One complete run in a new context; runs on any thread. */
static void run_all(outputs *out) {
    memset(out, 0, sizeof *out);
    flashcl_context *ctx = NULL;
    char err[512];
    if (flashcl_context_create(&ctx, NULL, err, sizeof err) != FLASHCL_SUCCESS) {
        fprintf(stderr, "FAIL context: %s\n", err);
        return;
    }
    cl_command_queue queue = flashcl_context_queue(ctx);
    bw_problem p;
    bw_problem_init(&p, flashcl_context_cl_context(ctx), &k_shape);
    bw_grads std_grads;
    bw_grads_init(&std_grads, flashcl_context_cl_context(ctx), &p);
    out->n_o = p.fwd.o.count, out->n_lse = p.fwd.lse_count;
    out->n_grad[0] = p.grads.dq.count, out->n_grad[1] = p.grads.dk.count, out->n_grad[2] = p.grads.dv.count;
    int ok = bw_problem_forward(ctx, &p, NULL) == FLASHCL_SUCCESS;
    ok &= bw_problem_backward(ctx, &p, FLASHCL_PATH_FLASH, &p.grads, 0, NULL, NULL) == FLASHCL_SUCCESS;
    ok &= bw_problem_backward(ctx, &p, FLASHCL_PATH_STANDARD, &std_grads, 0, NULL, NULL) == FLASHCL_SUCCESS;
    if (ok) {
        tu_problem_read(&p.fwd, queue, NULL, &out->o, &out->lse);
        bw_grads_read(&p.grads, queue, NULL, out->grads[0]);
        bw_grads_read(&std_grads, queue, NULL, out->grads[1]);
        float *lse2 = NULL;
        tu_problem_reset_outputs(&p.fwd, queue);
        ok &= tu_problem_run(ctx, &p.fwd, FLASHCL_PATH_STANDARD, 0, NULL, NULL) == FLASHCL_SUCCESS;
        tu_problem_read(&p.fwd, queue, NULL, &out->std_o, &lse2);
        free(lse2);
    } else {
        fprintf(stderr, "FAIL a call failed: %s\n", flashcl_last_error(ctx));
    }
    out->ok = ok;
    clFinish(queue);
    bw_grads_release(&std_grads);
    bw_problem_free(&p);
    flashcl_context_destroy(ctx);
}

static void *thread_main(void *arg) {
    run_all(arg);
    return NULL;
}

static void free_outputs(outputs *o) {
    free(o->o), free(o->lse), free(o->std_o);
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 3; ++j) free(o->grads[i][j]);
}

static int same(const char *what, int t, const float *a, const float *b, size_t n) {
    if (a && b && memcmp(a, b, n * sizeof *a) == 0) return 1;
    fprintf(stderr, "FAIL thread %d: %s differs from the single-threaded run\n", t, what);
    return 0;
}

int main(void) {
    k_shape = bw_shape_make(2, 4, 2, 37, 53, 32, 1, TU_BHSD);
    flashcl_context *probe = tu_context_create(); /* skips (77) when there is no device */
    flashcl_context_destroy(probe);

    outputs single;
    run_all(&single);
    REQUIRE(single.ok);
    pthread_t threads[THREADS];
    outputs results[THREADS];
    for (int t = 0; t < THREADS; ++t) REQUIRE(pthread_create(&threads[t], NULL, thread_main, &results[t]) == 0);
    for (int t = 0; t < THREADS; ++t) REQUIRE(pthread_join(threads[t], NULL) == 0);
    const char *grad_names[2][3] = {{"flash dQ", "flash dK", "flash dV"},
                                    {"standard dQ", "standard dK", "standard dV"}};
    for (int t = 0; t < THREADS; ++t) {
        CHECK(results[t].ok);
        CHECK(same("flash O", t, single.o, results[t].o, single.n_o));
        CHECK(same("flash LSE", t, single.lse, results[t].lse, single.n_lse));
        CHECK(same("standard O", t, single.std_o, results[t].std_o, single.n_o));
        for (int i = 0; i < 2; ++i)
            for (int j = 0; j < 3; ++j)
                CHECK(same(grad_names[i][j], t, single.grads[i][j], results[t].grads[i][j], single.n_grad[j]));
        free_outputs(&results[t]);
    }
    printf("%d threads, each on its own context: flash and standard, forward and backward, bitwise identical\n",
           THREADS);
    free_outputs(&single);
    return tu_finish("test_threads");
}
