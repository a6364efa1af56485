/* Enqueueing the passes of `bench --backward`; see bench_passes.h. */
#include "bench_passes.h"

#include "bench_backward_report.h"

static flashcl_status enqueue_forward(void *user)
{
    const bench_train_problem *p = user;
    flashcl_attention_desc d = *p->desc;
    d.path = p->path;
    return flashcl_forward(p->ctx, &d, &p->q, &p->k, &p->v, &p->o, p->lse, 0, 0, NULL, NULL);
}

static flashcl_status enqueue_backward(void *user)
{
    const bench_train_problem *p = user;
    flashcl_attention_desc d = *p->desc;
    d.path = p->path;
    return flashcl_backward(p->ctx, &d, &p->q, &p->k, &p->v, &p->o, &p->dout, p->lse, 0, &p->dq, &p->dk, &p->dv, 0,
                            NULL, NULL);
}

/*
 * No events between the two: the queue is in order (the tool created it), so
 * the backward starts after the forward has written O and LSE, and the next
 * pair's forward after this backward has read them.
 */
static flashcl_status enqueue_forward_backward(void *user)
{
    flashcl_status status = enqueue_forward(user);
    return status != FLASHCL_SUCCESS ? status : enqueue_backward(user);
}

bench_work bench_pass_work(bench_train_problem *problem, int pass, const char *label)
{
    bench_work work = {problem->ctx, label, enqueue_forward, problem};
    if (pass == BENCH_PASS_BWD)
        work.enqueue = enqueue_backward;
    else if (pass == BENCH_PASS_FWD_BWD)
        work.enqueue = enqueue_forward_backward;
    return work;
}
