/* flashcl_forward_kvcache's check that no two sequences append into the same cache row. */
#ifndef FLASHCL_KVCACHE_APPENDS_H
#define FLASHCL_KVCACHE_APPENDS_H

#include "internal.h"

#include <stdint.h>

/* Sequence s writes rows [len_s, len_s + seqlen_new) of its logical cache, len_s = seqinfo[4 s + 2];
   row r lands in page table[s * max_pages + r / page_size] at r % page_size (a contiguous cache:
   max_pages 1, page_size its capacity, table[s] the cache sequence). Two sequences writing one
   row (or one sequence whose table names a page twice) would race in the append kernel: refused,
   naming them (FLASHCL_ERR_INVALID_ARGUMENT). O(rows' pages x log) on the host: a decode step's
   batch entries, a prefill's pages. */
flashcl_status flashcl__kv_appends_disjoint(flashcl_context *ctx, int paged, const int32_t *table, int max_pages,
                                            long page_size, const int32_t *seqinfo, size_t batch, size_t seqlen_new);

#endif
