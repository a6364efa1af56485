/* The problem shapes test_backward sweeps: the full sweep and a quick subset. */
#ifndef FLASHCL_TEST_BACKWARD_CASES_H
#define FLASHCL_TEST_BACKWARD_CASES_H

#include "backward_problem.h"

typedef struct bw_case_list {
    bw_shape *items;
    size_t count;
    size_t capacity;
} bw_case_list;

/* Tile-edge seqlens on both sides, every head dim class, GQA/MQA, masks, layouts, batch. */
void backward_cases_full(bw_case_list *list);
/* A few tiny shapes (head dims 16 and 17) that Oclgrind gets through in about a minute. */
void backward_cases_quick(bw_case_list *list);
void bw_case_list_free(bw_case_list *list);

#endif
