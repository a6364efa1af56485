/*
 * Invalid KV-cache and merge calls: each must return its specific status,
 * name the offending field in flashcl_last_error, return no event and write
 * nothing: every buffer (q, the caches, the new rows, o, lse, the merge's
 * states and outputs) is read back and compared with what was uploaded. The
 * page tables and lengths are host arrays the library checks before it
 * enqueues anything, so no rejected call can reach outside a buffer.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define CAP 8192
enum { BUF_Q, BUF_KC, BUF_VC, BUF_KN, BUF_VN, BUF_O, BUF_LSE, BUF_COS, BUF_SIN, BUF_SCALE, BUF_COUNT };

static struct {
    flashcl_context *ctx;
    cl_command_queue queue;
    cl_mem buf[BUF_COUNT];
    float *host[BUF_COUNT];
    cl_mem small; /* 1 float */
} F;

/* b=2, hq=4, hkv=2, sq=1, d=16; a contiguous cache of 2 x 32 rows, or 8 pages of 8 rows. */
static int32_t g_seqlens[2] = {10, 20}, g_table[2][4] = {{0, 1, 2, 3}, {4, 5, 6, 7}};

static flashcl_attention_desc base_desc(void) {
    flashcl_attention_desc d = FLASHCL_ATTENTION_DESC_INIT;
    d.batch = 2;
    d.heads_q = 4;
    d.heads_kv = 2;
    d.seqlen_q = 1;
    d.head_dim = 16;
    return d;
}

static flashcl_kv_cache contiguous(void) {
    flashcl_kv_cache c = FLASHCL_KV_CACHE_INIT;
    c.k = flashcl_tensor_bshd(F.buf[BUF_KC], 32, 2, 16);
    c.v = flashcl_tensor_bshd(F.buf[BUF_VC], 32, 2, 16);
    c.capacity = 32;
    c.cache_seqlens = g_seqlens;
    return c;
}

static flashcl_kv_cache paged(void) {
    flashcl_kv_cache c = FLASHCL_KV_CACHE_INIT;
    c.k = flashcl_tensor_bshd(F.buf[BUF_KC], 8, 2, 16);
    c.v = flashcl_tensor_bshd(F.buf[BUF_VC], 8, 2, 16);
    c.num_pages = 8;
    c.page_size = 8;
    c.block_table = &g_table[0][0];
    c.max_pages = 4;
    c.cache_seqlens = g_seqlens;
    return c;
}

static void with_append(flashcl_kv_cache *c) {
    c->k_new = flashcl_tensor_bshd(F.buf[BUF_KN], 1, 2, 16);
    c->v_new = flashcl_tensor_bshd(F.buf[BUF_VN], 1, 2, 16);
    c->seqlen_new = 1;
}

static void check_nothing_written(const char *label) {
    static float got[CAP];
    static const char *names[BUF_COUNT] = {"q", "k cache", "v cache", "k_new", "v_new",
                                           "o", "lse",     "cos",     "sin",   "scale"};
    REQUIRE_CL(clFinish(F.queue));
    for (int i = 0; i < BUF_COUNT; i++) {
        char what[300];
        tu_buffer_read(F.queue, F.buf[i], CAP, got, NULL);
        snprintf(what, sizeof what, "%s: buffer %s", label, names[i]);
        tu_check_untouched(what, got, F.host[i], NULL, CAP);
    }
}

/* The call must fail with `status`, name `field`, return no event and write nothing. */
static void expect(const char *what, const flashcl_attention_desc *d, const flashcl_kv_cache *c, int status,
                   const char *field) {
    flashcl_tensor q = flashcl_tensor_bshd(F.buf[BUF_Q], 1, 4, 16), o = flashcl_tensor_bshd(F.buf[BUF_O], 1, 4, 16);
    cl_event ev = NULL;
    if (!CHECK_STATUS(flashcl_forward_kvcache(F.ctx, d, &q, c, &o, F.buf[BUF_LSE], 0, 0, NULL, &ev), status))
        fprintf(stderr, "  in: %s (%s)\n", what, flashcl_last_error(F.ctx));
    if (ev) {
        fprintf(stderr, "FAIL %s: a rejected call returned an event\n", what);
        tu_fail_count();
        clReleaseEvent(ev);
    }
    if (field && !strstr(flashcl_last_error(F.ctx), field)) {
        fprintf(stderr, "FAIL %s: message \"%s\" does not name %s\n", what, flashcl_last_error(F.ctx), field);
        tu_fail_count();
    }
    check_nothing_written(what);
}

static void cache_fields(void) {
    flashcl_attention_desc d = base_desc();
    expect("cache NULL", &d, NULL, FLASHCL_ERR_INVALID_ARGUMENT, "cache");
    flashcl_kv_cache c = contiguous();
    c.struct_size = 0;
    expect("cache struct_size 0", &d, &c, FLASHCL_ERR_INVALID_STRUCT_SIZE, "struct_size");

    c = contiguous();
    c.capacity = 0;
    expect("capacity 0", &d, &c, FLASHCL_ERR_INVALID_SHAPE, "capacity");
    int32_t too_long[2] = {10, 33};
    c = contiguous();
    c.cache_seqlens = too_long;
    expect("cache_seqlens past capacity", &d, &c, FLASHCL_ERR_OUT_OF_BOUNDS, "cache_seqlens[1]");
    int32_t full[2] = {10, 32};
    c = contiguous();
    c.cache_seqlens = full;
    with_append(&c);
    expect("cache_seqlens + new rows past capacity", &d, &c, FLASHCL_ERR_OUT_OF_BOUNDS, "seqlen_new");
    int32_t negative[2] = {-1, 5};
    c = contiguous();
    c.cache_seqlens = negative;
    expect("cache_seqlens negative", &d, &c, FLASHCL_ERR_INVALID_SHAPE, "cache_seqlens[0]");
    int32_t pad[2] = {0, 21};
    c = contiguous();
    c.cache_leftpad = pad;
    expect("cache_leftpad past the sequence", &d, &c, FLASHCL_ERR_INVALID_SHAPE, "cache_leftpad[1]");
    int32_t idx[2] = {1, 2};
    c = contiguous();
    c.cache_batch_idx = idx;
    expect("cache_batch_idx out of range", &d, &c, FLASHCL_ERR_OUT_OF_BOUNDS, "cache_batch_idx[1]");
    c = contiguous();
    c.seqlen_new = 1;
    c.cache_seqlens = NULL;
    expect("append without cache_seqlens", &d, &c, FLASHCL_ERR_INVALID_ARGUMENT, "cache_seqlens");
    c = contiguous();
    with_append(&c);
    c.seqlen_new = SIZE_MAX; /* was cast to a negative long and summed (fuzz_validate) */
    expect("seqlen_new SIZE_MAX", &d, &c, FLASHCL_ERR_INVALID_SHAPE, "seqlen_new");
    c = contiguous();
    c.cache_seqlens = NULL;
    flashcl_attention_desc huge = base_desc();
    huge.heads_q = huge.heads_kv = 1;
    huge.batch = 0x7fffffff; /* the host tables were allocated for it (40 GB) before q and o were checked */
    expect("batch INT_MAX, q and o of 2 sequences", &huge, &c, FLASHCL_ERR_OUT_OF_BOUNDS, "q");
    c = contiguous();
    with_append(&c);
    c.v_new.buffer = NULL;
    expect("append without v_new", &d, &c, FLASHCL_ERR_INVALID_BUFFER, "v_new");
    c = contiguous();
    c.capacity = 300; /* row 299 of sequence 1 lies past the 8192 floats of the buffer */
    expect("cache view past its buffer", &d, &c, FLASHCL_ERR_OUT_OF_BOUNDS, "cache->k");
    c = contiguous();
    c.dtype = (flashcl_cache_dtype)9;
    expect("cache dtype 9", &d, &c, FLASHCL_ERR_INVALID_DTYPE, "cache->dtype");
    c = contiguous();
    c.dtype = FLASHCL_CACHE_DTYPE_FP8_E4M3;
    c.k_scale = F.small;
    c.scale_per_head = 1; /* 2 heads of scales in a 1-float buffer */
    expect("k_scale too small", &d, &c, FLASHCL_ERR_OUT_OF_BOUNDS, "k_scale");
    c = contiguous();
    c.k = flashcl_tensor_bshd(F.buf[BUF_O], 32, 2, 16); /* the cache is written... */
    with_append(&c);
    expect("o overlaps the cache", &d, &c, FLASHCL_ERR_ALIASED_OUTPUT, "overlaps");
    /* A cache appended to is written and then read: a write-only buffer will not do. */
    cl_int err;
    cl_mem write_only =
        clCreateBuffer(flashcl_context_cl_context(F.ctx), CL_MEM_WRITE_ONLY, CAP * sizeof(float), NULL, &err);
    REQUIRE_CL(err);
    c = contiguous();
    c.k = flashcl_tensor_bshd(write_only, 32, 2, 16);
    with_append(&c);
    expect("an appended cache in a write-only buffer", &d, &c, FLASHCL_ERR_INVALID_BUFFER, "CL_MEM_WRITE_ONLY");
    clReleaseMemObject(write_only);
}

static void page_tables(void) {
    flashcl_attention_desc d = base_desc();
    int32_t bad[2][4] = {{0, 1, 2, 3}, {4, 8, 6, 7}};
    flashcl_kv_cache c = paged();
    c.block_table = &bad[0][0];
    expect("page index = num_pages", &d, &c, FLASHCL_ERR_OUT_OF_BOUNDS, "block_table[1][1]");
    bad[1][1] = -3;
    expect("negative page index", &d, &c, FLASHCL_ERR_OUT_OF_BOUNDS, "block_table[1][1]");
    /* A page the sequence does not reach may hold anything: rows 0..19 use pages 0..2 of sequence 1. */
    bad[1][1] = 5, bad[1][3] = 999;
    CHECK_STATUS(flashcl_forward_kvcache(F.ctx, &d, &(flashcl_tensor){F.buf[BUF_Q], 0, 0, 0, 0}, &c,
                                         &(flashcl_tensor){F.buf[BUF_O], 0, 0, 0, 0}, NULL, 0, 0, NULL, NULL),
                 FLASHCL_SUCCESS);
    REQUIRE_CL(clFinish(F.queue));
    /* That call wrote o: put its sentinels back. */
    tu_buffer_write(F.queue, F.buf[BUF_O], CAP, F.host[BUF_O]);
    c = paged();
    c.max_pages = 2; /* 16 rows: sequence 1 has 20 */
    expect("block table too short", &d, &c, FLASHCL_ERR_OUT_OF_BOUNDS, "max_pages");
    c = paged();
    c.page_size = 0;
    expect("page_size 0", &d, &c, FLASHCL_ERR_INVALID_SHAPE, "page_size");
    int32_t idx[2] = {0, 1};
    c = paged();
    c.cache_batch_idx = idx;
    expect("cache_batch_idx with pages", &d, &c, FLASHCL_ERR_INVALID_ARGUMENT, "cache_batch_idx");

    /* Two sequences appending into one row would race: refused. With three new rows, sequence 0
       writes rows 10..12 (page 1, offsets 2..4) and sequence 1 rows 20..22 (its third page, offsets
       4..6), which this table makes page 1 as well: offset 4 twice. */
    int32_t shared[2][4] = {{0, 1, 2, 3}, {4, 5, 1, 7}};
    const int32_t lens[2] = {10, 20};
    c = paged();
    c.block_table = &shared[0][0];
    c.cache_seqlens = lens;
    with_append(&c);
    c.k_new = flashcl_tensor_bshd(F.buf[BUF_KN], 3, 2, 16);
    c.v_new = flashcl_tensor_bshd(F.buf[BUF_VN], 3, 2, 16);
    c.seqlen_new = 3;
    expect("two sequences append into one page row", &d, &c, FLASHCL_ERR_INVALID_ARGUMENT, "block_table");
    c = contiguous();
    int32_t same[2] = {1, 1};
    const int32_t equal_lens[2] = {10, 10};
    c.cache_batch_idx = same;
    c.cache_seqlens = equal_lens;
    with_append(&c);
    expect("two sequences append into one cache sequence's row", &d, &c, FLASHCL_ERR_INVALID_ARGUMENT,
           "cache_batch_idx");
    /* One sequence whose table names a page twice, appending across both places. */
    int32_t twice[2][4] = {{0, 1, 2, 3}, {4, 5, 6, 6}};
    const int32_t at_end[2] = {10, 22}; /* sequence 1 writes rows 22..30: page 6 at offsets 6, 7, then 0..6 */
    c = paged();
    c.block_table = &twice[0][0];
    c.cache_seqlens = at_end;
    with_append(&c);
    c.k_new = flashcl_tensor_bshd(F.buf[BUF_KN], 9, 2, 16);
    c.v_new = flashcl_tensor_bshd(F.buf[BUF_VN], 9, 2, 16);
    c.seqlen_new = 9;
    expect("a table naming one page twice", &d, &c, FLASHCL_ERR_INVALID_ARGUMENT, "appends twice");
    /* One cache sequence for both, appending at rows 10 and 20: no row twice, so allowed. */
    c = contiguous();
    c.cache_batch_idx = same;
    with_append(&c);
    CHECK_STATUS(flashcl_forward_kvcache(F.ctx, &d, &(flashcl_tensor){F.buf[BUF_Q], 0, 0, 0, 0}, &c,
                                         &(flashcl_tensor){F.buf[BUF_O], 0, 0, 0, 0}, NULL, 0, 0, NULL, NULL),
                 FLASHCL_SUCCESS);
    REQUIRE_CL(clFinish(F.queue));
    /* That call wrote o and the cache: put their contents back. */
    for (int i = BUF_KC; i <= BUF_VC; i++) tu_buffer_write(F.queue, F.buf[i], CAP, F.host[i]);
    tu_buffer_write(F.queue, F.buf[BUF_O], CAP, F.host[BUF_O]);
}

static void rotary(void) {
    flashcl_attention_desc d = base_desc();
    flashcl_kv_cache c = contiguous();
    with_append(&c);
    c.rotary_cos = F.buf[BUF_COS];
    c.rotary_sin = F.buf[BUF_SIN];
    c.seqlen_ro = 64;
    c.rotary_dim = 7;
    expect("rotary_dim odd", &d, &c, FLASHCL_ERR_INVALID_VARIANT, "rotary_dim");
    c.rotary_dim = 18;
    expect("rotary_dim > head_dim", &d, &c, FLASHCL_ERR_INVALID_VARIANT, "rotary_dim");
    c.rotary_dim = 16;
    c.rotary_sin = NULL;
    expect("rotary_sin missing", &d, &c, FLASHCL_ERR_INVALID_BUFFER, "rotary_sin");
    c.rotary_sin = F.buf[BUF_SIN];
    c.seqlen_ro = 20; /* sequence 1 appends at position 20 */
    expect("seqlen_ro too short", &d, &c, FLASHCL_ERR_OUT_OF_BOUNDS, "seqlen_ro");
    c.seqlen_ro = 64;
    c.rotary_sin = F.small;
    expect("rotary_sin too small", &d, &c, FLASHCL_ERR_OUT_OF_BOUNDS, "rotary_sin");
    /* A table inside what the call writes: the cache (appended to) or o. */
    c.rotary_sin = F.buf[BUF_SIN];
    c.rotary_cos = F.buf[BUF_KC];
    expect("rotary_cos inside the cache", &d, &c, FLASHCL_ERR_ALIASED_OUTPUT, "rotary_cos");
    c.rotary_cos = F.buf[BUF_O];
    expect("rotary_cos inside o", &d, &c, FLASHCL_ERR_ALIASED_OUTPUT, "rotary_cos");
    c.rotary_cos = F.buf[BUF_COS];
    /* seqlen_ro x rotary_dim / 2 wrapped to 0 elements, and any table passed (fuzz_validate). */
    c.rotary_cos = c.rotary_sin = F.small;
    c.rotary_dim = 4;
    c.seqlen_ro = SIZE_MAX / 2 + 1;
    expect("seqlen_ro x rotary_dim / 2 wraps", &d, &c, FLASHCL_ERR_OUT_OF_BOUNDS, "seqlen_ro");
}

static void descriptor(void) {
    flashcl_kv_cache c = contiguous();
    flashcl_attention_desc d = base_desc();
    d.dropout_p = 0.1f;
    expect("dropout", &d, &c, FLASHCL_ERR_UNSUPPORTED_VARIANT, "dropout_p");
    d = base_desc();
    d.bias.buffer = F.buf[BUF_SCALE];
    expect("bias", &d, &c, FLASHCL_ERR_UNSUPPORTED_VARIANT, "bias");
    d = base_desc();
    d.cu_seqlens_q = d.cu_seqlens_k = F.buf[BUF_SCALE];
    expect("varlen", &d, &c, FLASHCL_ERR_UNSUPPORTED_VARIANT, "cu_seqlens");
    d = base_desc();
    d.path = FLASHCL_PATH_STANDARD;
    expect("standard path", &d, &c, FLASHCL_ERR_UNSUPPORTED_VARIANT, "path");
}

static void merge(void) {
    flashcl_merge_desc m = FLASHCL_MERGE_DESC_INIT;
    m.num_states = 2, m.batch = 1, m.heads = 2, m.seqlen = 4, m.head_dim = 16;
    flashcl_tensor st = flashcl_tensor_bshd(F.buf[BUF_KC], 4, 2, 16), o = flashcl_tensor_bshd(F.buf[BUF_O], 4, 2, 16);
    const struct {
        const char *what, *field;
        int status;
        flashcl_merge_desc m;
        cl_mem lse_states;
    } cases[] = {
        {"merge num_states 0",
         "num_states",
         FLASHCL_ERR_INVALID_SHAPE,
         {m.struct_size, 0, 1, 2, 4, 16, 0, 0, 0},
         F.buf[BUF_VC]},
        {"merge struct_size 0",
         "struct_size",
         FLASHCL_ERR_INVALID_STRUCT_SIZE,
         {0, 2, 1, 2, 4, 16, 0, 0, 0},
         F.buf[BUF_VC]},
        {"merge head_dim 0",
         "head_dim",
         FLASHCL_ERR_INVALID_HEAD_DIM,
         {m.struct_size, 2, 1, 2, 4, 0, 0, 0, 0},
         F.buf[BUF_VC]},
        {"merge lse_states too small", "lse_states", FLASHCL_ERR_OUT_OF_BOUNDS, m, F.small},
        {"merge lse_state_stride short",
         "lse_state_stride",
         FLASHCL_ERR_INVALID_STRIDE,
         {m.struct_size, 2, 1, 2, 4, 16, 0, 0, 3},
         F.buf[BUF_VC]},
        /* Strides whose products wrapped: only state 0 and the last one were checked, the last
           landed on state 0 again and state 1 lay 2^63 elements away (fuzz_validate). */
        {"merge o_state_stride wraps",
         "o_state_stride",
         FLASHCL_ERR_OUT_OF_BOUNDS,
         {m.struct_size, 3, 1, 2, 4, 16, 0, SIZE_MAX / 2 + 1, 0},
         F.buf[BUF_VC]},
        {"merge lse_state_stride wraps",
         "lse_state_stride",
         FLASHCL_ERR_OUT_OF_BOUNDS,
         {m.struct_size, 3, 1, 2, 4, 16, 0, 0, SIZE_MAX / 2 + 1},
         F.buf[BUF_VC]},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        cl_event ev = NULL;
        if (!CHECK_STATUS(flashcl_merge_states(F.ctx, &cases[i].m, &st, cases[i].lse_states, 0, &o, F.buf[BUF_LSE], 0,
                                               0, NULL, &ev),
                          cases[i].status))
            fprintf(stderr, "  in: %s (%s)\n", cases[i].what, flashcl_last_error(F.ctx));
        CHECK(ev == NULL);
        if (!strstr(flashcl_last_error(F.ctx), cases[i].field)) {
            fprintf(stderr, "FAIL %s: message \"%s\" does not name %s\n", cases[i].what, flashcl_last_error(F.ctx),
                    cases[i].field);
            tu_fail_count();
        }
        check_nothing_written(cases[i].what);
    }
    /* o overlapping the states. */
    flashcl_tensor bad = flashcl_tensor_bshd(F.buf[BUF_KC], 4, 2, 16);
    CHECK_STATUS(flashcl_merge_states(F.ctx, &m, &st, F.buf[BUF_VC], 0, &bad, NULL, 0, 0, NULL, NULL),
                 FLASHCL_ERR_ALIASED_OUTPUT);
    check_nothing_written("merge into its own states");
    /* The merged LSE over the states' LSE. */
    CHECK_STATUS(flashcl_merge_states(F.ctx, &m, &st, F.buf[BUF_LSE], 0, &o, F.buf[BUF_LSE], 0, 0, NULL, NULL),
                 FLASHCL_ERR_ALIASED_OUTPUT);
    CHECK(strstr(flashcl_last_error(F.ctx), "lse_states") != NULL);
    check_nothing_written("merge LSE over the states' LSE");
    /* Three states: o, or the merged LSE, over state 1 (neither the first nor the last) was taken,
       and the merge wrote over its own input. */
    flashcl_merge_desc m3 = m;
    m3.num_states = 3;
    const size_t state = 1 * 4 * 2 * 16;
    bad.offset = state;
    CHECK_STATUS(flashcl_merge_states(F.ctx, &m3, &st, F.buf[BUF_VC], 0, &bad, NULL, 0, 0, NULL, NULL),
                 FLASHCL_ERR_ALIASED_OUTPUT);
    CHECK(strstr(flashcl_last_error(F.ctx), "o overlaps o_states (state 1 of 3)") != NULL);
    check_nothing_written("merge into its middle state");
    CHECK_STATUS(flashcl_merge_states(F.ctx, &m3, &st, F.buf[BUF_VC], 0, &o, F.buf[BUF_KC], state + 5, 0, NULL, NULL),
                 FLASHCL_ERR_ALIASED_OUTPUT);
    CHECK(strstr(flashcl_last_error(F.ctx), "lse overlaps o_states (state 1 of 3)") != NULL);
    check_nothing_written("merge LSE over the middle state");
    /* States two apart with o in the gap between states 0 and 1: no element shared, so it runs. */
    m3.o_state_stride = 2 * state;
    CHECK_STATUS(flashcl_merge_states(F.ctx, &m3, &st, F.buf[BUF_VC], 0, &bad, NULL, 0, 0, NULL, NULL),
                 FLASHCL_SUCCESS);
    REQUIRE_CL(clFinish(F.queue));
    tu_buffer_write(F.queue, F.buf[BUF_KC], CAP, F.host[BUF_KC]);
}

int main(void) {
    F.ctx = tu_context_create();
    cl_context cl = flashcl_context_cl_context(F.ctx);
    F.queue = flashcl_context_queue(F.ctx);
    tu_buffers_create(cl, BUF_COUNT, CAP, 1u << BUF_O | 1u << BUF_LSE, 11, F.buf, F.host);
    F.small = tu_buffer_create(cl, 1, NULL);
    cache_fields();
    page_tables();
    rotary();
    descriptor();
    merge();
    clReleaseMemObject(F.small);
    tu_buffers_release(BUF_COUNT, F.buf, F.host);
    flashcl_context_destroy(F.ctx);
    return tu_finish("test_invalid_kvcache");
}
