/*
 * Setting kernel arguments and chaining launches: the one way every kernel
 * family does both.
 *
 * Arguments: flashcl__args collects a kernel's arguments in order. The first
 * clSetKernelArg failure sticks (later calls do nothing), so a launch sets the
 * whole list and checks once, with flashcl__args_check naming the kernel.
 *
 * Launches: a flashcl__chain enqueues a call's kernels. The first wait for the
 * caller's wait list (and for the scratch's last user, when the call uses
 * scratch); later ones for the launches they name. The chain ends in one
 * event (a marker when several launches finish the call), which becomes the
 * call's event and, with scratch, the scratch's newest user. The first
 * failure sticks too, and ending a failed chain releases every event it made.
 */
#ifndef FLASHCL_LAUNCH_H
#define FLASHCL_LAUNCH_H

#include "internal.h"

typedef struct flashcl__args {
    cl_kernel kernel;
    const char *name; /* for the message: "clSetKernelArg(name)" */
    cl_uint index;
    cl_int err;
} flashcl__args;

flashcl__args flashcl__args_for(cl_kernel kernel, const char *name);
void flashcl__arg(flashcl__args *a, size_t size, const void *value);
void flashcl__arg_mem(flashcl__args *a, cl_mem m);
void flashcl__arg_int(flashcl__args *a, cl_int v);
void flashcl__arg_uint(flashcl__args *a, cl_uint v);
void flashcl__arg_ulong(flashcl__args *a, cl_ulong v);
void flashcl__arg_float(flashcl__args *a, cl_float v);
/* A tensor view: buffer, offset and the three strides (VIEW_ARGS in cl/common.cl). */
void flashcl__arg_view(flashcl__args *a, const flashcl_tensor *t);
/* views[which[0]], views[which[1]], ... */
void flashcl__arg_views(flashcl__args *a, const flashcl_tensor *views, const int *which, int n);
/* What every forward kernel takes after its tensors: LSE buffer, offset and whether to write
   it, seqlen_q, seqlen_k, heads_q, the GQA group and scale*log2(e). `dummy` stands in for a
   NULL lse (never written then). */
void flashcl__arg_forward(flashcl__args *a, const flashcl_attention_desc *d, cl_mem lse, size_t lse_offset,
                          cl_mem dummy);
/* seqlen_q, seqlen_k, heads_q, the GQA group, scale*log2(e), scale: the backward kernels' sizes. */
void flashcl__arg_backward_sizes(flashcl__args *a, const flashcl_attention_desc *d);
/* The VARIANT_ARGS group (cl/variants.cl); `dummy` is bound for the buffers of features that are off. */
void flashcl__arg_variants(flashcl__args *a, const flashcl_attention_desc *d, cl_mem dummy);
/* FLASHCL_SUCCESS, or the first failure as "clSetKernelArg(name) failed: ...". */
flashcl_status flashcl__args_check(flashcl_context *ctx, const flashcl__args *a);

#define FLASHCL__CHAIN_MAX 16
#define FLASHCL__AFTER_START (-1) /* a launch that waits for the chain's start */

typedef struct flashcl__chain {
    flashcl_context *ctx;
    flashcl__waits start;
    int uses_scratch;
    cl_event events[FLASHCL__CHAIN_MAX];
    int count;
    flashcl_status status;
} flashcl__chain;

/* Starts a call's chain (FLASHCL_ERR_INVALID_ARGUMENT for a wait list that is too long). */
flashcl_status flashcl__chain_begin(flashcl__chain *c, flashcl_context *ctx, cl_uint num_wait,
                                    const cl_event *wait_list, int uses_scratch);
/* Enqueues the kernel after launch `after` (an index an earlier launch returned, or
   FLASHCL__AFTER_START); returns its index, or -1 once the chain has failed. */
int flashcl__chain_launch(flashcl__chain *c, cl_kernel kernel, const char *name, cl_uint dims, const size_t *global,
                          const size_t *local, int after);
/* Enqueues a non-blocking write of `bytes` from `host` into `buffer` after launch `after`, as a
   link of the chain (its index, or -1 once the chain has failed). `host` must stay unchanged until
   the write's event completes: the caller owns that (see src/kvcache_state.c). */
int flashcl__chain_write(flashcl__chain *c, cl_mem buffer, size_t bytes, const void *host, int after);
/* The event of link `index` (valid until the chain ends; retain it to keep it). */
cl_event flashcl__chain_event(const flashcl__chain *c, int index);
/* The same after several launches. */
int flashcl__chain_launch_after(flashcl__chain *c, cl_kernel kernel, const char *name, cl_uint dims,
                                const size_t *global, const size_t *local, int ndeps, const int *deps);
/* Ends the chain on the launches `last` (one: its event; more: a marker over them). On success the
   call's event goes to *event (or is released when event is NULL); either way the chain's other
   events are released. Returns the chain's status. */
flashcl_status flashcl__chain_end(flashcl__chain *c, int nlast, const int *last, cl_event *event);
/* Ends a chain that failed before its last launch (or whose caller failed): releases its events. */
flashcl_status flashcl__chain_abort(flashcl__chain *c, flashcl_status status);

#endif
