/*
 * One table of functions per kernel family (src/backends/<family>/), and the
 * ordered list the calls walk: the first family that covers a call runs it,
 * and the plan queries walk the same list, so what flashcl_plan_query
 * reports is what flashcl_forward runs. A new family is one folder, one
 * table and one line in k_backends (src/dispatch.c).
 */
#ifndef FLASHCL_BACKEND_H
#define FLASHCL_BACKEND_H

#include "internal.h"

typedef enum flashcl__pass { FLASHCL__FORWARD = 0, FLASHCL__BACKWARD = 1 } flashcl__pass;

/* The tensor views of a call, in this order: a forward has the first four. */
enum {
    FLASHCL__VQ,
    FLASHCL__VK,
    FLASHCL__VV,
    FLASHCL__VO,
    FLASHCL__VDO,
    FLASHCL__VDQ,
    FLASHCL__VDK,
    FLASHCL__VDV,
    FLASHCL__BACKWARD_VIEWS
};
#define FLASHCL__FORWARD_VIEWS 4

/* A call after its checks: the resolved descriptor and views, the LSE, the wait list and the event out. */
typedef struct flashcl__call {
    const flashcl_attention_desc *d;
    const flashcl_tensor *views;
    cl_mem lse;
    size_t lse_offset;
    cl_uint num_wait;
    const cl_event *wait_list;
    cl_event *event;
} flashcl__call;

typedef struct flashcl__backend {
    const char *name;  /* "nvidia", "cpu", ...: the plan reason's "not <name>: why" */
    flashcl_path path; /* the descriptor path it serves */
    /* Whether the family runs `pass` of this call on ctx's device. views is NULL for a plan
       query (the answer then holds for views the family can take); when 0, why says why not. */
    int (*covers)(flashcl_context *ctx, flashcl__pass pass, const flashcl_attention_desc *d,
                  const flashcl_tensor *views, char *why, size_t cap);
    /* Plans (and builds) the pass: the public report, scratch_bytes left for scratch_bytes(). */
    flashcl_status (*plan)(flashcl_context *ctx, flashcl__pass pass, const flashcl_attention_desc *d,
                           flashcl_plan *out);
    /* Device scratch the pass needs beyond its outputs (after plan() succeeded for d). */
    size_t (*scratch_bytes)(flashcl_context *ctx, flashcl__pass pass, const flashcl_attention_desc *d);
    flashcl_status (*forward)(flashcl_context *ctx, const flashcl__call *call);
    flashcl_status (*backward)(flashcl_context *ctx, const flashcl__call *call);
    /* Frees the family's plans and state (context destroy). */
    void (*release)(flashcl_context *ctx);
} flashcl__backend;

/* The families, in k_backends order; each keeps its plans in ctx->family[its slot]. KVCACHE is
   flashcl_forward_kvcache's state (src/kvcache_state.c), released with the decode family. */
enum {
    FLASHCL__FAMILY_DECODE,
    FLASHCL__FAMILY_NVIDIA,
    FLASHCL__FAMILY_CPU,
    FLASHCL__FAMILY_PORTABLE,
    FLASHCL__FAMILY_STANDARD,
    FLASHCL__FAMILY_KVCACHE,
    FLASHCL__FAMILY_COUNT
};

extern const flashcl__backend flashcl__backend_decode;
extern const flashcl__backend flashcl__backend_nvidia;
extern const flashcl__backend flashcl__backend_cpu;
extern const flashcl__backend flashcl__backend_portable;
extern const flashcl__backend flashcl__backend_standard;

/* The first family on d->path that covers the call; `skipped` (may be NULL) collects
   "not <name>: <why>" for the families passed over. Never NULL: the portable and
   standard families cover every call of their path. */
const flashcl__backend *flashcl__backend_for(flashcl_context *ctx, flashcl__pass pass, const flashcl_attention_desc *d,
                                             const flashcl_tensor *views, char *skipped, size_t cap);
/* Runs the pass on the family that covers it. */
flashcl_status flashcl__dispatch(flashcl_context *ctx, flashcl__pass pass, const flashcl__call *call);
/* The plan query of a pass (flashcl_plan_query, flashcl_backward_plan_query): checks ctx and out, resolves desc,
   then the covering family's plan, its scratch bytes, and why the families before it did not cover the call. */
flashcl_status flashcl__plan_query(flashcl_context *ctx, flashcl__pass pass, const flashcl_attention_desc *desc,
                                   flashcl_plan *out);
/* Every family's release (context destroy). */
void flashcl__release_backends(flashcl_context *ctx);

/* D = rowsum(dO * O) and LSE hold one float per query row: [batch, heads_q, seqlen_q], or [heads_q, total_q] with varlen. */
size_t flashcl__row_count(const flashcl_attention_desc *d);

#endif
