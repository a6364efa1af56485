/*
 * The attention-variant cases test_variants runs: each feature alone, with
 * causal, in the combinations users run (window + ALiBi + softcap + GQA,
 * bias + mask + dropout, varlen + causal + sinks, block-sparse + causal,
 * bf16 + window, f16 + d_v != d_qk, everything at once), head dims 1 to 512,
 * odd lengths and sq != sk. Every distinct combination is a kernel build, so
 * the list is kept to what each feature needs.
 */
#ifndef FLASHCL_TEST_VARIANT_CASES_H
#define FLASHCL_TEST_VARIANT_CASES_H

#include <stddef.h>

#include "flashcl.h"

/* How a [b|1, h|1, rows, cols] variant matrix is broadcast. */
typedef enum vc_broadcast {
    VC_OFF = 0,
    VC_FULL,      /* [b, h, ...] */
    VC_PER_HEAD,  /* [1, h, ...]: stride_batch 0 */
    VC_PER_BATCH, /* [b, 1, ...]: stride_head 0 */
    VC_SHARED     /* [1, 1, ...]: both 0 */
} vc_broadcast;

#define VC_MAX_SEQS 4

typedef struct vc_case {
    char name[64];
    /* Sizes, dtype and the scalar features (window, softcap, dropout, block
       sizes); the buffer fields are left NULL: the harness makes them. */
    flashcl_attention_desc desc;
    int alibi; /* 0 off, 1 slopes [h], 2 slopes [b, h] */
    int sinks;
    vc_broadcast bias, mask, block_mask;
    double mask_density; /* fraction of mask / block-mask entries that attend */
    /* Varlen when nseq > 0: per-sequence lengths; desc.batch becomes nseq and
       desc.seqlen_q/k the totals. */
    size_t nseq;
    size_t len_q[VC_MAX_SEQS], len_k[VC_MAX_SEQS];
    int backward; /* also run and check the backward */
} vc_case;

typedef struct vc_list {
    vc_case *items;
    size_t count, cap;
} vc_list;

void variant_cases_all(vc_list *list);
/* A few tiny cases with every feature on (what the Oclgrind runs use). */
void variant_cases_quick(vc_list *list);
void vc_list_free(vc_list *list);
/* A new zeroed case at the end of the list (which grows as needed; earlier item pointers may move). */
vc_case *vc_list_add(vc_list *list);

/* One line naming the case's sizes and features. */
void vc_describe(const vc_case *c, char *buf, size_t size);

#endif
