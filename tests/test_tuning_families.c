/*
 * The tuning file's decode and tensor-core entries as the plan chain sees
 * them (test_tuning.c covers the sealing and the forward's entries):
 *  - a decode entry gives origin "tuned" and exactly its knobs to a decode
 *    call of its key (head dim, storage, cache storage, packed rows), and to
 *    no other call; the plan runs and agrees with the reference, the GPU
 *    kernel's new knobs (lanes, work-group) included;
 *  - one whose values its kernel does not take is set aside, the reason says
 *    so, and the formula plans; a key and a kernel of different families, a
 *    packed-rows count that is not a power of two up to 16, an unknown cache
 *    storage: the file does not parse and is ignored, all of it;
 *  - a kernel=mma entry parses, and where the tensor cores do not plan (POCL)
 *    changes nothing; where they do (NVIDIA), sets their shape (origin tuned) or
 *    is set aside with a note when the family does not take it;
 *  - FLASHCL_TILE: a knob given to another kernel, and kernel=mma off the
 *    tensor cores, are errors that name them.
 * The decode family runs on any device; the mma part takes the branch of the
 * device it runs on.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <flashcl.h>

#include "reference.h"
#include "testutil.h"
#include "tmpdir.h"
#include "tuning_text.h"

static char g_path[1200]; /* test-only scratch; the library has no such state */

/* GQA group 2, one query row: packed rows 2 (rows=2 in the key). */
static flashcl_attention_desc decode_desc(size_t heads_q, flashcl_dtype dtype) {
    flashcl_attention_desc d = flashcl_attention_desc_init();
    d.dtype = dtype;
    d.batch = 2;
    d.heads_q = heads_q;
    d.heads_kv = 2;
    d.seqlen_q = 1;
    d.seqlen_k = 301;
    d.head_dim = 32;
    return d;
}

typedef struct outcome {
    flashcl_tuning_info info;
    flashcl_plan plan;
    int status;
    char error[512];
} outcome;

/* A fresh context (it reads the file at creation), its tuning info and desc's plan. */
static outcome plan_now(const flashcl_attention_desc *desc) {
    outcome r;
    memset(&r, 0, sizeof r);
    flashcl_context *ctx = tu_context_create();
    REQUIRE(ctx != NULL);
    r.info.struct_size = sizeof r.info;
    CHECK_STATUS(flashcl_tuning_query(ctx, &r.info), FLASHCL_SUCCESS);
    r.status = flashcl_plan_query(ctx, desc, &r.plan);
    snprintf(r.error, sizeof r.error, "%s", r.status ? flashcl_last_error(ctx) : "");
    flashcl_context_destroy(ctx);
    return r;
}

static void expect_ignored(const char *identity, const char *body, const char *what) {
    tt_write_sealed(g_path, identity, body);
    const flashcl_attention_desc d = decode_desc(4, FLASHCL_DTYPE_F32);
    outcome r = plan_now(&d);
    if (!strstr(r.info.note, "does not parse") || r.info.entries != 0 || strcmp(r.plan.origin, "tuned") == 0) {
        fprintf(stderr, "%s: note \"%s\", %zu entries, origin %s\n", what, r.info.note, r.info.entries, r.plan.origin);
        tu_fail_count();
    }
}

/* Runs desc through the host API under the context's plan and compares O with the double reference. */
static void run_and_compare(const char *label, const flashcl_attention_desc *desc) {
    flashcl_context *ctx = tu_context_create();
    REQUIRE(ctx != NULL);
    const size_t d = desc->head_dim, qn = desc->batch * desc->seqlen_q * desc->heads_q * d;
    const size_t kn = desc->batch * desc->seqlen_k * desc->heads_kv * d;
    float *q = malloc(qn * sizeof *q), *k = malloc(kn * sizeof *k), *v = malloc(kn * sizeof *v);
    float *o = malloc(qn * sizeof *o);
    double *ref = malloc(qn * sizeof *ref), *lse = malloc(qn / d * sizeof *lse);
    REQUIRE(q && k && v && o && ref && lse);
    tu_rng rng = tu_rng_seed(17);
    for (size_t i = 0; i < qn; ++i) q[i] = tu_rng_float(&rng, -1.0f, 1.0f);
    for (size_t i = 0; i < kn; ++i) k[i] = tu_rng_float(&rng, -1.0f, 1.0f), v[i] = tu_rng_float(&rng, -1.0f, 1.0f);
    CHECK_STATUS(flashcl_forward_host(ctx, desc, q, k, v, o, NULL), FLASHCL_SUCCESS);
    const ref_problem p = ref_problem_from_desc(desc);
    const flashcl_tensor packed = {0}; /* strides all zero: packed [b, s, h, d] */
    ref_attention(&p, q, &packed, k, &packed, v, &packed, ref, lse);
    tu_compare_o(label, &p, o, &packed, ref);
    free(q), free(k), free(v), free(o), free(ref), free(lse);
    flashcl_context_destroy(ctx);
}

static void decode_entries(const char *identity) {
    const flashcl_attention_desc d2 = decode_desc(4, FLASHCL_DTYPE_F32);
    /* Untuned: the formula's plan, origin "table". */
    outcome r = plan_now(&d2);
    CHECK_STATUS(r.status, FLASHCL_SUCCESS);
    REQUIRE(strncmp(r.plan.kernel, "flash_decode", 12) == 0);
    CHECK(strcmp(r.plan.origin, "table") == 0);

    /* The CPU kernel's knobs, for key rows=2 only. */
    tt_write_sealed(g_path, identity,
                    "tuned decode d=32 dtype=f32 cache=same rows=2 tile=kernel=decode_cpu,br=1,bc=8,heads=1\n");
    r = plan_now(&d2);
    CHECK(r.info.entries == 1 && r.info.note[0] == '\0');
    CHECK(strcmp(r.plan.origin, "tuned") == 0 && strcmp(r.plan.kernel, "flash_decode_cpu") == 0);
    CHECK(r.plan.block_rows == 1 && r.plan.block_cols == 8 && strstr(r.plan.build_options, "-D HEADS=1 "));
    CHECK(strstr(r.plan.reason, "tuned: decode d=32 dtype=f32 cache=same rows=2") != NULL);
    run_and_compare("decode_cpu br=1 bc=8 heads=1 (tuned)", &d2);
    /* Another key: GQA group 4 (rows=4), f16 storage, a forward-length query: untouched. */
    const flashcl_attention_desc d4 = decode_desc(8, FLASHCL_DTYPE_F32), h2 = decode_desc(4, FLASHCL_DTYPE_F16);
    r = plan_now(&d4);
    CHECK(strcmp(r.plan.origin, "tuned") != 0);
    r = plan_now(&h2);
    CHECK(strcmp(r.plan.origin, "tuned") != 0);
    flashcl_attention_desc fwd = d2;
    fwd.seqlen_q = fwd.seqlen_k = 128;
    r = plan_now(&fwd);
    CHECK(strncmp(r.plan.kernel, "flash_decode", 12) != 0 && strcmp(r.plan.origin, "tuned") != 0);
    /* FLASHCL_TILE still wins over the file. */
    setenv("FLASHCL_TILE", "kernel=decode_cpu,br=2,bc=16", 1);
    r = plan_now(&d2);
    CHECK(strcmp(r.plan.origin, "env") == 0 && r.plan.block_rows == 2 && r.plan.block_cols == 16);
    unsetenv("FLASHCL_TILE");

    /* The GPU kernel (it runs on any device) with 4 lanes a key and 64 work-items: 16 groups x 1 key. */
    tt_write_sealed(g_path, identity,
                    "tuned decode d=32 dtype=f32 cache=same rows=2 tile=kernel=decode,br=2,bc=1,lanes=4,wg=64\n");
    r = plan_now(&d2);
    CHECK(strcmp(r.plan.origin, "tuned") == 0 && strcmp(r.plan.kernel, "flash_decode") == 0);
    CHECK(r.plan.work_group_size == 64 && r.plan.block_cols == 16 && strstr(r.plan.build_options, "-D LANES=4 "));
    run_and_compare("decode lanes=4 wg=64 (tuned)", &d2);

    /* Values the kernel does not take: set aside with a note, the formula's plan. */
    tt_write_sealed(g_path, identity, "tuned decode d=32 dtype=f32 cache=same rows=2 tile=kernel=decode_cpu,heads=9\n");
    r = plan_now(&d2);
    CHECK(r.info.entries == 1 && strcmp(r.plan.origin, "table") == 0);
    if (!strstr(r.plan.reason, "rejected (heads=9")) {
        fprintf(stderr, "the reason does not say the entry was set aside: %s\n", r.plan.reason);
        tu_fail_count();
    }

    /* Lines that do not parse: the whole file is ignored. */
    expect_ignored(identity, "tuned decode d=32 dtype=f32 cache=same rows=2 tile=kernel=cpu,br=16,bc=48\n",
                   "decode key, forward kernel");
    expect_ignored(identity, "tuned d=32 dtype=f32 causal=0 tile=kernel=decode_cpu,br=2\n",
                   "forward key, decode kernel");
    expect_ignored(identity, "tuned decode d=32 dtype=f32 cache=same rows=3 tile=kernel=decode_cpu\n", "rows=3");
    expect_ignored(identity, "tuned decode d=32 dtype=f32 cache=same rows=32 tile=kernel=decode_cpu\n", "rows=32");
    expect_ignored(identity, "tuned decode d=32 dtype=f32 cache=fp4 rows=2 tile=kernel=decode_cpu\n", "cache=fp4");
    expect_ignored(identity, "tuned decode d=32 dtype=f32 rows=2 tile=kernel=decode_cpu\n", "no cache field");
    expect_ignored(identity, "tuned decode d=32 dtype=f32 cache=same rows=2 tile=kernel=decode_cpu,lanes=4\n",
                   "a GPU knob on the CPU kernel");
}

/* Where f16 plans the tensor cores: a kernel=mma entry sets the shape (origin tuned), one the family does not
   take is set aside with a note, and FLASHCL_TILE=kernel=mma refuses ql=1 where Q cannot stay in __local.
   On Hopper the wgmma form comes before tuned entries (they are mma.sync shapes, which it outruns): there
   the entry must leave the wgmma plan in place, and the checks run with FLASHCL_WGMMA=0. */
static void mma_entries_on_tensor_cores(const char *identity, const flashcl_attention_desc *f16, int wgmma) {
    tt_write_sealed(g_path, identity, "tuned d=64 dtype=f16 causal=0 tile=kernel=mma,warps=8,bc=32,mt=1,ql=0\n");
    outcome r;
    char saved[64] = "";
    const int had = getenv("FLASHCL_WGMMA") != NULL;
    if (wgmma) {
        r = plan_now(f16);
        CHECK_STATUS(r.status, FLASHCL_SUCCESS);
        CHECK(strcmp(r.plan.origin, "vendor") == 0 && strstr(r.plan.reason, "wgmma (sm_90a PTX)") != NULL);
        if (had) snprintf(saved, sizeof saved, "%s", getenv("FLASHCL_WGMMA"));
        setenv("FLASHCL_WGMMA", "0", 1);
    }
    r = plan_now(f16);
    CHECK_STATUS(r.status, FLASHCL_SUCCESS);
    CHECK(strcmp(r.plan.kernel, "flash_fwd_mma") == 0 && strcmp(r.plan.origin, "tuned") == 0);
    CHECK(r.plan.block_rows == 128 && r.plan.block_cols == 32 && r.plan.work_group_size == 256);
    CHECK(strstr(r.plan.build_options, "-DMMA_WARPS=8 -DMMA_MT=1 -DMMA_BC=32 -DMMA_QLOCAL=0") != NULL);
    tt_write_sealed(g_path, identity, "tuned d=64 dtype=f16 causal=0 tile=kernel=mma,bc=128\n");
    r = plan_now(f16);
    CHECK(strcmp(r.plan.kernel, "flash_fwd_mma") == 0 && strcmp(r.plan.origin, "vendor") == 0);
    CHECK(strstr(r.plan.reason, "rejected") != NULL);
    flashcl_attention_desc d96 = *f16;
    d96.head_dim = 96;
    setenv("FLASHCL_TILE", "kernel=mma,ql=1", 1);
    r = plan_now(&d96);
    unsetenv("FLASHCL_TILE");
    CHECK_STATUS(r.status, FLASHCL_ERR_INVALID_TILE);
    CHECK(strstr(r.error, "ql=1") != NULL);
    if (wgmma && had)
        setenv("FLASHCL_WGMMA", saved, 1);
    else if (wgmma)
        unsetenv("FLASHCL_WGMMA");
    printf("test_tuning_families: f16 plans the tensor cores%s: their entries checked\n",
           wgmma ? " (wgmma first; entries checked on mma.sync)" : "");
}

static void mma_entries(const char *identity) {
    flashcl_attention_desc f16 = flashcl_attention_desc_init();
    f16.dtype = FLASHCL_DTYPE_F16;
    f16.batch = 1;
    f16.heads_q = 2;
    f16.seqlen_q = 256;
    f16.head_dim = 64;
    unlink(g_path);
    outcome before = plan_now(&f16);
    CHECK_STATUS(before.status, FLASHCL_SUCCESS);
    if (strcmp(before.plan.kernel, "flash_fwd_mma") == 0) {
        mma_entries_on_tensor_cores(identity, &f16, strstr(before.plan.reason, "wgmma (sm_90a PTX)") != NULL);
        return;
    }
    tt_write_sealed(g_path, identity,
                    "tuned d=64 dtype=f16 causal=0 tile=kernel=mma,warps=4,bc=64,mt=2,ql=1\n"
                    "measured d=64 dtype=f16 causal=0 tile=kernel=mma,warps=4,bc=64,mt=2,ql=1 size=b4_h16_n4096 "
                    "ms=1.25 verified=1\n");
    outcome r = plan_now(&f16);
    CHECK(r.info.entries == 1 && r.info.note[0] == '\0');
    CHECK_STATUS(r.status, FLASHCL_SUCCESS);
    CHECK(strcmp(r.plan.kernel, before.plan.kernel) == 0 && strcmp(r.plan.origin, before.plan.origin) == 0);
    CHECK(r.plan.block_rows == before.plan.block_rows && r.plan.block_cols == before.plan.block_cols);
    /* Forced off the tensor cores: an error that says why. */
    setenv("FLASHCL_TILE", "kernel=mma,warps=4", 1);
    r = plan_now(&f16);
    unsetenv("FLASHCL_TILE");
    CHECK_STATUS(r.status, FLASHCL_ERR_INVALID_TILE);
    CHECK(strstr(r.error, "kernel=mma") != NULL);
}

/* With `var`=`value`, the forward (or backward) plan of d is FLASHCL_ERR_INVALID_TILE with `needle` in
   its message. */
static void expect_tile_refusal(const char *var, const char *value, const flashcl_attention_desc *d, int backward,
                                const char *needle) {
    setenv(var, value, 1);
    flashcl_context *ctx = tu_context_create();
    flashcl_plan plan;
    const flashcl_status st = backward ? flashcl_backward_plan_query(ctx, d, &plan) : flashcl_plan_query(ctx, d, &plan);
    if (st != FLASHCL_ERR_INVALID_TILE || !strstr(flashcl_last_error(ctx), needle)) {
        fprintf(stderr, "%s=%s: status %s, \"%s\"\n", var, value, flashcl_status_name(st), flashcl_last_error(ctx));
        tu_fail_count();
    }
    flashcl_context_destroy(ctx);
    unsetenv(var);
}

static void misplaced_knobs(void) {
    static const char *const cases[][2] = {
        {"kernel=cpu,heads=2", "heads="}, {"kernel=decode_cpu,lanes=8", "lanes="},
        {"kernel=tiles,wg=64", "wg="},    {"kernel=decode,warps=4", "warps="},
        {"kernel=rows,mt=2", "mt="},      {"kernel=mma,ql=2", "ql=2"},
    };
    const flashcl_attention_desc d = decode_desc(4, FLASHCL_DTYPE_F32);
    flashcl_attention_desc fwd = d;
    fwd.seqlen_q = fwd.seqlen_k = 64;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        setenv("FLASHCL_TILE", cases[i][0], 1);
        outcome r = plan_now(i % 2 ? &d : &fwd);
        if (r.status != FLASHCL_ERR_INVALID_TILE || !strstr(r.error, cases[i][1])) {
            fprintf(stderr, "FLASHCL_TILE=%s: status %s, \"%s\"\n", cases[i][0], flashcl_status_name(r.status),
                    r.error);
            tu_fail_count();
        }
    }
    unsetenv("FLASHCL_TILE");
    /* A size the CPU family refuses names the variable it came from, forward and backward. */
    expect_tile_refusal("FLASHCL_TILE", "kernel=cpu,br=7", &fwd, 0, "FLASHCL_TILE: the cpu kernels need br in");
    expect_tile_refusal("FLASHCL_BWD_KERNEL", "cpu,br=7", &fwd, 1, "FLASHCL_BWD_KERNEL: the cpu kernels need br in");
    /* The split kernel refuses what is not plain attention, and the error names what the call uses
       (it used to say "float32, no variants" to a plain float32 call with d_v != d). */
    fwd.head_dim_v = 2 * fwd.head_dim;
    expect_tile_refusal("FLASHCL_TILE", "kernel=split", &fwd, 0, "this call: d_v=64");
}

int main(void) {
    char *dir = tu_tmpdir_make("flashcl-tuning-families");
    REQUIRE(dir != NULL);
    snprintf(g_path, sizeof g_path, "%s/tuning.txt", dir);
    setenv("FLASHCL_TUNING", g_path, 1);
    unsetenv("FLASHCL_TILE");
    const flashcl_attention_desc d = decode_desc(4, FLASHCL_DTYPE_F32);
    outcome first = plan_now(&d);
    char identity[sizeof first.info.identity];
    snprintf(identity, sizeof identity, "%s", first.info.identity);

    decode_entries(identity);
    mma_entries(identity);
    misplaced_knobs();

    tu_tmpdir_remove(dir);
    free(dir);
    return tu_finish("test_tuning_families");
}
