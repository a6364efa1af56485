/*
 * Shared test plumbing: failure reporting, a deterministic RNG, device
 * context set-up with CTest's skip convention, cl_mem helpers and the O/LSE
 * tolerance checks every correctness test uses.
 */
#ifndef FLASHCL_TEST_TESTUTIL_H
#define FLASHCL_TEST_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

#include "flashcl.h"
#include "reference.h"

/* Exit status CTest treats as "skipped" (SKIP_RETURN_CODE in CMakeLists.txt). */
#define TU_EXIT_SKIP 77

/* ------------------------------------------------------------ checks */

/* CHECK records a failure and carries on, so one run reports every problem. */
#define CHECK(expr) ((expr) ? (void)0 : tu_check_failed(__FILE__, __LINE__, #expr))
/* REQUIRE is for set-up the rest of the test depends on: it exits at once. */
#define REQUIRE(expr) ((expr) ? (void)0 : tu_require_failed(__FILE__, __LINE__, #expr))
/* Compares a flashcl_status (or OpenCL code) and prints both names on mismatch. */
#define CHECK_STATUS(expr, expected) tu_check_status(__FILE__, __LINE__, #expr, (int)(expr), (int)(expected))
/* An OpenCL call the test itself makes; failing it is a broken set-up. */
#define REQUIRE_CL(expr) tu_require_cl(__FILE__, __LINE__, #expr, (int)(expr))

void tu_check_failed(const char *file, int line, const char *expr);
void tu_require_failed(const char *file, int line, const char *expr);
int tu_check_status(const char *file, int line, const char *expr, int got, int expected);
void tu_require_cl(const char *file, int line, const char *expr, int err);
/* Counts a failure found by a helper that already printed its own report. */
void tu_fail_count(void);
int tu_failures(void);
/* Prints a summary line; returns the process exit status (0 or 1). */
int tu_finish(const char *test_name);

/* --------------------------------------------------------------- RNG */

/* xorshift64*: tiny, fast and identical on every platform. */
typedef struct tu_rng {
    uint64_t state;
} tu_rng;

tu_rng tu_rng_seed(uint64_t seed);
uint64_t tu_rng_next(tu_rng *rng);
/* Uniform in [lo, hi). */
float tu_rng_float(tu_rng *rng, float lo, float hi);

/* ----------------------------------------------------------- context */

/* FlashCL's default device; exits with TU_EXIT_SKIP when there is none. */
flashcl_context *tu_context_create(void);

/* ----------------------------------------------------------- buffers */

/* A read-write buffer of `count` floats, initialised from `init` when not NULL. */
cl_mem tu_buffer_create(cl_context cl_ctx, size_t count, const float *init);
/* Blocking write/read of a whole buffer, ordered after `after` when not NULL. */
void tu_buffer_write(cl_command_queue queue, cl_mem buf, size_t count, const float *src);
void tu_buffer_read(cl_command_queue queue, cl_mem buf, size_t count, float *dst, cl_event after);

/* Shape of one tensor view: [batch, heads, rows, head_dim]. */
typedef struct tu_dims {
    size_t batch;
    size_t heads;
    size_t rows;
    size_t head_dim;
} tu_dims;

/* One past the largest element index the view touches. */
size_t tu_view_extent(const flashcl_tensor *view, tu_dims dims);
/* Fills every element of the view with uniform values in [lo, hi). */
void tu_fill_view(float *host, const flashcl_tensor *view, tu_dims dims, tu_rng *rng, float lo, float hi);
/* Marks (1) the elements the view covers in a map of `count` bytes. */
void tu_view_mask(unsigned char *mask, size_t count, const flashcl_tensor *view, tu_dims dims);

/*
 * A NaN pattern with the element index in its payload: an output element
 * that a call must not touch has to keep exactly these bits, so misplaced,
 * stale or partial writes all show up.
 */
void tu_fill_sentinel(float *host, size_t count);
/* Bitwise comparison of the elements whose mask byte is 0; reports the first change. */
int tu_check_untouched(const char *label, const float *got, const float *before, const unsigned char *mask,
                       size_t count);

/*
 * Whether msg names tensor `t` ("q", "lse", "dq", ...) as a word: "q.offset",
 * "q:", "q is". "q" inside "dq" or "seqlen_q" does not count.
 */
int tu_names_tensor(const char *msg, const char *t);

/* ------------------------------------------------------ comparisons */

/*
 * O: |got - ref| <= 2e-5 + 1e-4 * |ref| for every element of the view.
 * Reports the worst element (largest error/tolerance ratio); NaN always fails.
 */
int tu_compare_o(const char *label, const ref_problem *p, const float *got, const flashcl_tensor *o_view,
                 const double *ref);
/*
 * LSE: |got - ref| <= 1e-5 + 1e-5 * |ref|; -inf must be matched exactly by
 * -inf. got points at the first LSE element (buffer + lse_offset).
 */
int tu_compare_lse(const char *label, const ref_problem *p, const float *got, const double *ref);

/* The argument-error tests' buffers: `count` buffers of `cap` floats with their host copies (for
   the untouched checks); buffer i holds sentinels (tu_fill_sentinel) when bit i of `outputs` is
   set, else values in [-1, 1) drawn from `seed`. tu_buffers_release frees both. */
void tu_buffers_create(cl_context cl, int count, size_t cap, unsigned outputs, uint64_t seed, cl_mem *buf,
                       float **host);
void tu_buffers_release(int count, cl_mem *buf, float **host);

/* The small call the argument-error tests start from: batch b, heads_q 2, heads_kv 1, seqlen_q and
   seqlen_k 8, head_dim 16 (each test then breaks one field). */
flashcl_attention_desc tu_small_desc(size_t batch);

/* ------------------------------------------------------ plans */

/* The plan of a b=2 hq=4 sq=100 sk=300 call (heads_kv, head_dim, path as given), forward or
   backward, into *plan (filled with garbage first, which the query must overwrite); `label`
   gets "[backward ]plan [path] d=D". 0, with the message printed, when the query failed. */
int tu_query_plan(flashcl_context *ctx, int backward, flashcl_path path, size_t heads_kv, size_t head_dim,
                  flashcl_plan *plan, char *label, size_t label_cap);
/*
 * A plan query's answer is well formed on ctx's device: its strings end inside their arrays
 * (kernel and reason not empty), origin is one of the space-separated `origins`, the tile sizes
 * are >= 1, staging is a known value, the work-group and __local fit the device's limits.
 */
void tu_check_plan_fields(flashcl_context *ctx, const flashcl_plan *plan, const char *origins);
/* "label: kernel=... Br=... Bc=..." and the plan's reason on a second line. */
void tu_print_plan(const char *label, const flashcl_plan *plan);

#endif
