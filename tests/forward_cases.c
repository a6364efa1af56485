#include "forward_cases.h"

#include <stdlib.h>

static const size_t k_seqlens[] = {1, 2, 7, 63, 64, 65, 127, 129, 255, 257, 1000};
static const size_t k_head_dims[] = {16, 32, 40, 64, 80, 96, 128, 160, 192, 256};
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static tu_shape *add(case_list *list, tu_shape shape) {
    if (list->count == list->capacity) {
        size_t cap = list->capacity ? 2 * list->capacity : 64;
        tu_shape *grown = realloc(list->items, cap * sizeof *grown);
        REQUIRE(grown != NULL);
        list->items = grown;
        list->capacity = cap;
    }
    /* Distinct data per case, and a few LSE offsets so LSE indexing is exercised. */
    shape.seed = list->count + 1;
    if (shape.lse_offset == 0) shape.lse_offset = (list->count % 3) * 5;
    list->items[list->count] = shape;
    return &list->items[list->count++];
}

static tu_shape mixed(tu_shape s, tu_layout q, tu_layout k, tu_layout v, tu_layout o) {
    s.layout_q = q;
    s.layout_k = k;
    s.layout_v = v;
    s.layout_o = o;
    return s;
}

static tu_shape scaled(tu_shape s, float scale) {
    s.desc.scale = scale;
    return s;
}

void forward_cases_full(case_list *list) {
    /* Every seqlen pair at d=64, both masks: tile edges (63/64/65, 127/129,
     * 255/257), single rows, and sq > sk where causal rows are fully masked.
     * Head count stays at 2 so the 1000x1000 cases stay cheap. */
    size_t n = 0;
    for (size_t i = 0; i < COUNT(k_seqlens); i++)
        for (size_t j = 0; j < COUNT(k_seqlens); j++)
            for (int causal = 0; causal <= 1; causal++, n++)
                add(list, tu_shape_make(1, 2, n % 2 ? 1 : 2, k_seqlens[i], k_seqlens[j], 64, causal,
                                        n % 2 ? TU_BHSD : TU_BSHD));

    /* Every head dim with a few seqlen pairs around tile edges, both masks and
     * all three explicit layouts. One kernel build per head dim, so this is
     * where the build time goes: keep it to these ten. */
    static const size_t pairs[][2] = {{1, 1}, {7, 129}, {65, 63}, {129, 257}, {257, 64}};
    static const tu_layout rot[] = {TU_BSHD, TU_BHSD, TU_PADDED};
    n = 0;
    for (size_t d = 0; d < COUNT(k_head_dims); d++)
        for (size_t p = 0; p < COUNT(pairs); p++)
            for (int causal = 0; causal <= 1; causal++, n++)
                add(list, tu_shape_make(2, 2, 1, pairs[p][0], pairs[p][1], k_head_dims[d], causal, rot[n % 3]));

    /* Head dims that are not a multiple of 4: vectorised loads must stop at
     * head_dim, not read the next row's first elements (padding is NaN). */
    static const size_t odd_dims[] = {1, 3, 17};
    for (size_t d = 0; d < COUNT(odd_dims); d++)
        for (int causal = 0; causal <= 1; causal++, n++) {
            add(list, tu_shape_make(2, 2, 1, 7, 129, odd_dims[d], causal, rot[n % 3]));
            add(list, tu_shape_make(1, 2, 2, 65, 63, odd_dims[d], causal, TU_PADDED));
        }

    /* GQA 4:1 and MQA: the kv head index must come from h / (hq / hkv). */
    add(list, tu_shape_make(1, 8, 2, 127, 255, 64, 1, TU_BSHD));
    add(list, tu_shape_make(1, 8, 2, 255, 127, 64, 1, TU_BHSD));
    add(list, tu_shape_make(2, 8, 2, 65, 65, 64, 0, TU_PADDED));
    add(list, tu_shape_make(1, 8, 2, 129, 63, 128, 1, TU_BSHD));
    add(list, tu_shape_make(1, 4, 1, 65, 1000, 32, 1, TU_BSHD));
    add(list, tu_shape_make(1, 4, 1, 1000, 65, 96, 1, TU_BHSD));
    add(list, tu_shape_make(2, 4, 1, 129, 129, 64, 0, TU_BSHD));

    /* Batch > 1 with batch strides that are not multiples of the head stride. */
    add(list, tu_shape_make(3, 2, 2, 63, 129, 40, 1, TU_BHSD));
    add(list, tu_shape_make(4, 1, 1, 257, 255, 16, 0, TU_PADDED));

    /* Non-default scales: mild, sharp (large logits stress the running max)
     * and nearly flat. */
    add(list, scaled(tu_shape_make(1, 2, 2, 129, 129, 80, 1, TU_BSHD), 0.3f));
    add(list, scaled(tu_shape_make(1, 2, 1, 64, 257, 64, 0, TU_BHSD), 2.0f));
    add(list, scaled(tu_shape_make(2, 1, 1, 63, 63, 16, 1, TU_PADDED), 1e-3f));

    /* Each tensor in its own layout, and the all-zero-strides default. */
    add(list, mixed(tu_shape_make(2, 4, 2, 129, 65, 64, 1, TU_BSHD), TU_BHSD, TU_BSHD, TU_PADDED, TU_PADDED));
    add(list, mixed(tu_shape_make(1, 2, 2, 63, 257, 128, 0, TU_BSHD), TU_PADDED, TU_ZERO, TU_BHSD, TU_BSHD));
    add(list, tu_shape_make(2, 2, 2, 65, 127, 32, 1, TU_ZERO));

    /* Long sequences at the big head dims, one head to keep them cheap. */
    add(list, tu_shape_make(1, 1, 1, 1000, 1000, 128, 1, TU_BSHD));
    add(list, tu_shape_make(1, 1, 1, 257, 1000, 256, 0, TU_BHSD));
}

void forward_cases_quick(case_list *list) {
    add(list, tu_shape_make(1, 2, 1, 7, 63, 16, 1, TU_BSHD));
    add(list, tu_shape_make(2, 1, 1, 65, 65, 40, 0, TU_BHSD));
    /* sq > sk with causal: the first rows have no visible key. */
    add(list, tu_shape_make(1, 2, 2, 70, 33, 64, 1, TU_PADDED));
    add(list, mixed(scaled(tu_shape_make(1, 4, 1, 1, 64, 64, 0, TU_BSHD), 0.5f), TU_BHSD, TU_ZERO, TU_PADDED, TU_BSHD));
    add(list, tu_shape_make(1, 1, 1, 64, 64, 16, 1, TU_ZERO));
    /* A head dim that is not a multiple of 4, sized so an over-read of the
     * last row runs off the end of the buffer, where Oclgrind sees it. */
    add(list, tu_shape_make(1, 2, 1, 9, 20, 17, 0, TU_BSHD));
}

void case_list_free(case_list *list) {
    free(list->items);
    list->items = NULL;
    list->count = list->capacity = 0;
}
