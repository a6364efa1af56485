/* The problem shapes test_forward sweeps: the full sweep and a quick subset. */
#ifndef FLASHCL_TEST_FORWARD_CASES_H
#define FLASHCL_TEST_FORWARD_CASES_H

#include "problem.h"

typedef struct case_list {
    tu_shape *items;
    size_t count;
    size_t capacity;
} case_list;

/* Every seqlen, head dim, GQA ratio, layout and mask the library supports. */
void forward_cases_full(case_list *list);
/* A handful of small shapes (seqlens <= 70, head dims 16/40/64) for Oclgrind. */
void forward_cases_quick(case_list *list);
void case_list_free(case_list *list);

#endif
