/* No two sequences of a KV-cache call append into the same cache row (kvcache_appends.h). */
#include "kvcache_appends.h"

#include <stdlib.h>

/* The rows one sequence writes in one page (or cache sequence). */
typedef struct segment {
    int32_t page;
    long lo, hi; /* [lo, hi) inside the page */
    size_t seq;
} segment;

static int by_page_then_row(const void *a, const void *b) {
    const segment *x = a, *y = b;
    if (x->page != y->page) return x->page < y->page ? -1 : 1;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

flashcl_status flashcl__kv_appends_disjoint(flashcl_context *ctx, int paged, const int32_t *table, int max_pages,
                                            long page_size, const int32_t *seqinfo, size_t batch, size_t seqlen_new) {
    if (seqlen_new == 0) return FLASHCL_SUCCESS;
    /* Pages a sequence's new rows span: at most seqlen_new / page_size + 2. */
    const size_t per_seq = seqlen_new / (size_t)page_size + 2;
    segment *seg = malloc(batch * per_seq * sizeof *seg);
    if (!seg) return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_HOST_MEMORY, "out of host memory (append rows check)");
    size_t n = 0;
    for (size_t s = 0; s < batch; ++s) {
        const long first = seqinfo[4 * s + 2], end = first + (long)seqlen_new; /* checked: within capacity */
        for (long j = first / page_size; j * page_size < end; ++j) {
            const long lo = j * page_size > first ? j * page_size : first;
            const long hi = (j + 1) * page_size < end ? (j + 1) * page_size : end;
            seg[n++] = (segment){table[s * (size_t)max_pages + (size_t)j], lo - j * page_size, hi - j * page_size, s};
        }
    }
    qsort(seg, n, sizeof *seg, by_page_then_row);
    flashcl_status st = FLASHCL_SUCCESS;
    for (size_t i = 1; i < n && st == FLASHCL_SUCCESS; ++i) {
        /* Sorted by start: a row written twice shows as a segment starting before its predecessor
           (in the page) ends. Both may be one sequence's, when its block table names a page twice. */
        const segment *a = &seg[i - 1], *b = &seg[i];
        if (a->page != b->page || b->lo >= a->hi) continue;
        if (a->seq == b->seq)
            st = flashcl__fail(ctx, FLASHCL_ERR_INVALID_ARGUMENT,
                               "cache->block_table: sequence %zu appends twice into row %ld of page %d (its table "
                               "names the page twice)",
                               a->seq, b->lo, (int)b->page);
        else
            st = flashcl__fail(ctx, FLASHCL_ERR_INVALID_ARGUMENT,
                               paged ? "cache->block_table: sequences %zu and %zu both append into row %ld of page %d"
                                     : "cache->cache_batch_idx: sequences %zu and %zu both append into row %ld of "
                                       "cache sequence %d",
                               a->seq < b->seq ? a->seq : b->seq, a->seq < b->seq ? b->seq : a->seq, b->lo,
                               (int)b->page);
    }
    free(seg);
    return st;
}
