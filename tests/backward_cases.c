#include "backward_cases.h"

#include <stdlib.h>

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static void add(bw_case_list *list, bw_shape shape) {
    if (list->count == list->capacity) {
        size_t cap = list->capacity ? 2 * list->capacity : 64;
        bw_shape *grown = realloc(list->items, cap * sizeof *grown);
        REQUIRE(grown != NULL);
        list->items = grown;
        list->capacity = cap;
    }
    /* Distinct data per case, and a few LSE offsets so LSE indexing is exercised. */
    shape.fwd.seed = list->count + 1;
    if (shape.fwd.lse_offset == 0) shape.fwd.lse_offset = (list->count % 3) * 5;
    list->items[list->count++] = shape;
}

static bw_shape scaled(bw_shape s, float scale) {
    s.fwd.desc.scale = scale;
    return s;
}

/* Layouts of q, k, v, o, then dout, dq, dk, dv. */
static bw_shape mixed(bw_shape s, const tu_layout l[8]) {
    s.fwd.layout_q = l[0];
    s.fwd.layout_k = l[1];
    s.fwd.layout_v = l[2];
    s.fwd.layout_o = l[3];
    s.layout_dout = l[4];
    s.layout_dq = l[5];
    s.layout_dk = l[6];
    s.layout_dv = l[7];
    return s;
}

void backward_cases_full(bw_case_list *list) {
    /* Seqlen pairs at d=64, both masks. The plans stage 64 rows per tile on
     * POCL, so 63/64/65 and 127/129 sit on block edges; every seqlen appears
     * on both sides, sq > sk leaves causal rows with no visible key, and the
     * 1000-long sides are paired with short ones to keep the cost down. */
    static const size_t pairs[][2] = {{1, 2},     {2, 1},   {7, 63},     {63, 7},     {64, 65},  {65, 64}, {127, 129},
                                      {129, 127}, {64, 64}, {257, 1000}, {1000, 257}, {1, 1000}, {1000, 1}};
    size_t n = 0;
    for (size_t i = 0; i < COUNT(pairs); i++)
        for (int causal = 0; causal <= 1; causal++, n++)
            add(list,
                bw_shape_make(1, 2, n % 2 ? 1 : 2, pairs[i][0], pairs[i][1], 64, causal, n % 2 ? TU_BHSD : TU_BSHD));

    /* Every head dim once per mask: each is a kernel build (forward and
     * backward), so this is where the build time goes. 1 and 17 are not
     * multiples of 4 (the vector loads' tails); the rest are the sizes models use. */
    static const size_t dims[] = {1, 16, 17, 40, 64, 80, 96, 128, 160, 192, 256};
    static const tu_layout rot[] = {TU_BSHD, TU_BHSD, TU_PADDED};
    for (size_t d = 0; d < COUNT(dims); d++) {
        int causal = d % 2 == 0;
        add(list, bw_shape_make(2, 2, 1, 65, 63, dims[d], causal, rot[d % 3]));
        add(list, bw_shape_make(2, 2, 1, 7, 129, dims[d], !causal, rot[(d + 1) % 3]));
    }

    /* GQA 4:1 and MQA: dK/dV must be summed over exactly the query heads h / (hq / hkv). */
    add(list, bw_shape_make(1, 8, 2, 65, 129, 64, 1, TU_BSHD));
    add(list, bw_shape_make(2, 8, 2, 129, 65, 64, 1, TU_PADDED));
    add(list, bw_shape_make(1, 4, 1, 63, 257, 40, 0, TU_BHSD));
    add(list, bw_shape_make(1, 4, 1, 257, 63, 16, 1, TU_BSHD));

    /* Batch > 1 with batch strides that are not multiples of the head stride. */
    add(list, bw_shape_make(3, 2, 2, 63, 129, 40, 1, TU_BHSD));
    add(list, bw_shape_make(4, 1, 1, 65, 64, 16, 0, TU_PADDED));

    /* Non-default scales: mild and sharp (large logits, peaked P). */
    add(list, scaled(bw_shape_make(1, 2, 2, 129, 129, 80, 1, TU_BSHD), 0.3f));
    add(list, scaled(bw_shape_make(1, 2, 1, 64, 127, 64, 0, TU_BHSD), 2.0f));

    /* Each tensor in its own layout, and the all-zero-strides default. */
    static const tu_layout mix1[8] = {TU_BHSD, TU_BSHD, TU_PADDED, TU_PADDED, TU_BHSD, TU_PADDED, TU_ZERO, TU_BSHD};
    static const tu_layout mix2[8] = {TU_PADDED, TU_ZERO, TU_BHSD, TU_BSHD, TU_PADDED, TU_BHSD, TU_PADDED, TU_PADDED};
    add(list, mixed(bw_shape_make(2, 4, 2, 129, 65, 64, 1, TU_BSHD), mix1));
    add(list, mixed(bw_shape_make(1, 2, 2, 63, 257, 128, 0, TU_BSHD), mix2));
    add(list, bw_shape_make(2, 2, 2, 65, 127, 17, 1, TU_ZERO));
}

void backward_cases_quick(bw_case_list *list) {
    /* Oclgrind's cost is per padded tile and per unit of GEMM depth, not per
     * element: seqlens stay <= 64 so the standard path's 64x64 tiles run once
     * per head, and one or two heads per case. Under Oclgrind's 16 KiB the
     * flash plan stages 32 rows at d=32, so those cases still cross a tile
     * boundary (with a partial tile) on the side longer than 32. */
    /* GQA 2:1 (one kv head: also MQA), causal, sq < sk: two key tiles. */
    add(list, bw_shape_make(1, 2, 1, 7, 40, 32, 1, TU_BSHD));
    /* sq > sk with causal: the first 17 rows see no key; two query tiles. */
    add(list, bw_shape_make(1, 1, 1, 40, 23, 32, 1, TU_PADDED));
    /* A head dim that is not a multiple of 4 (61-row tiles under 16 KiB),
     * sized so an over-read of the last row runs off the end of the buffer,
     * where Oclgrind sees it. */
    add(list, bw_shape_make(1, 1, 1, 9, 20, 17, 0, TU_BSHD));
    /* Batch 2, every tensor in another layout, a custom scale. */
    static const tu_layout mix[8] = {TU_BHSD, TU_ZERO, TU_PADDED, TU_BSHD, TU_PADDED, TU_BHSD, TU_PADDED, TU_ZERO};
    add(list, mixed(scaled(bw_shape_make(2, 1, 1, 5, 9, 16, 0, TU_BSHD), 0.5f), mix));
}

void bw_case_list_free(bw_case_list *list) {
    free(list->items);
    list->items = NULL;
    list->count = list->capacity = 0;
}
