/*
 * `flashcl tune`'s device-free parts (tools/tune_candidates.c, tools/tune_file.c), so that the families
 * this machine cannot run (the NVIDIA tensor cores, the GPU decode kernel's NVIDIA shapes) are checked
 * here too:
 *  - a plan encodes as the FLASHCL_TILE text that reproduces it, read from its build options for the
 *    decode and tensor-core kernels;
 *  - each family's list starts with the untuned plan, holds no duplicates, only values its kernel takes
 *    (ql=1 only where Q can stay in __local, work-groups within the device's limit, GPU decode lanes that
 *    divide the work-group, rows no more than the call's packed rows), and goes nearest first (no
 *    candidate differs from the base in more knobs than a later one);
 *  - the tuning file round trip: measured lines of every key kind come back as written, one tuned line
 *    per key (the confirmation rounds' winner where there are any), sealed with the checksum the
 *    library verifies.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <flashcl.h>

#include "testutil.h"
#include "tmpdir.h"
#include "tune_candidates.h"
#include "tune_file.h"

/* The value of key in a tile text, -1 when absent. */
static int knob(const char *tile, const char *key) {
    const size_t n = strlen(key);
    for (const char *p = tile; p && *p; p = strchr(p, ','), p = p ? p + 1 : NULL)
        if (strncmp(p, key, n) == 0 && p[n] == '=') return atoi(p + n + 1);
    return -1;
}

static const char *kernel_of(const char *tile, char *out, size_t cap) {
    snprintf(out, cap, "%.*s", (int)strcspn(tile, ","), tile);
    return out;
}

/* How many of keys differ between a and b. */
static int distance(const char *a, const char *b, const char *const *keys, int n) {
    int d = 0;
    for (int i = 0; i < n; ++i) d += knob(a, keys[i]) != knob(b, keys[i]);
    return d;
}

/* Base first, no duplicates, nearest first over keys, every candidate of `kernel` giving every key. */
static void check_list(const char *what, const tune_candidates *c, const char *base, const char *kernel,
                       const char *const *keys, int n) {
    if (c->count == 0 || strcmp(c->tile[0], base) != 0) {
        fprintf(stderr, "%s: the list does not start with the untuned plan %s\n", what, base);
        tu_fail_count();
        return;
    }
    int last = 0;
    for (size_t i = 0; i < c->count; ++i) {
        for (size_t j = 0; j < i; ++j)
            if (strcmp(c->tile[i], c->tile[j]) == 0) {
                fprintf(stderr, "%s: %s listed twice\n", what, c->tile[i]);
                tu_fail_count();
            }
        char k[32];
        if (strcmp(kernel_of(c->tile[i], k, sizeof k), kernel) != 0) continue;
        for (int f = 0; f < n; ++f)
            if (knob(c->tile[i], keys[f]) < 0) {
                fprintf(stderr, "%s: %s lacks %s\n", what, c->tile[i], keys[f]);
                tu_fail_count();
            }
        const int d = distance(c->tile[i], base, keys, n);
        if (d < last) {
            fprintf(stderr, "%s: %s (%d knobs from the base) after one %d knobs away\n", what, c->tile[i], d, last);
            tu_fail_count();
        }
        last = d;
    }
}

static void encoding(void) {
    flashcl_plan p;
    char t[TUNE_TILE_CAP];
    memset(&p, 0, sizeof p);
    snprintf(p.kernel, sizeof p.kernel, "flash_fwd_mma");
    snprintf(p.build_options, sizeof p.build_options,
             "-cl-mad-enable -DHEAD_DIM=128 -DMMA_DK_REAL=128 -DMMA_DV=128 -DMMA_WARPS=4 -DMMA_MT=2 -DMMA_BC=32 "
             "-DMMA_QLOCAL=1 -DMMA_F16=0 -DMMA_SM75=0 -DMMA_TF32=0 -D HEAD_DIM_V=128");
    CHECK(tune_encode_plan(&p, t, sizeof t) && strcmp(t, "kernel=mma,warps=4,bc=32,mt=2,ql=1") == 0);
    /* The same kernel in Hopper's wgmma form (as the library plans d = 64 on an H100: 128 keys per
       tile, which kernel=mma cannot name) is not encoded: kernel=mma would time mma.sync instead. */
    snprintf(p.build_options, sizeof p.build_options,
             "-cl-mad-enable -DHEAD_DIM=64 -DMMA_DK_REAL=64 -DMMA_DV=64 -DMMA_WARPS=4 -DMMA_MT=1 -DMMA_BC=128 "
             "-DMMA_QLOCAL=1 -DMMA_F16=0 -DMMA_SM75=0 -DMMA_TF32=0 -DMMA_WG=1 -DMMA_TANH_SFU=0 -D HEAD_DIM_V=64");
    CHECK(!tune_encode_plan(&p, t, sizeof t));
    snprintf(p.build_options, sizeof p.build_options,
             "-cl-mad-enable -DHEAD_DIM=128 -DMMA_DK_REAL=128 -DMMA_DV=128 -DMMA_WARPS=8 -DMMA_MT=1 -DMMA_BC=32 "
             "-DMMA_QLOCAL=1 -DMMA_F16=0 -DMMA_SM75=0 -DMMA_TF32=0 -DMMA_WG=0 -DMMA_TANH_SFU=0 -D HEAD_DIM_V=128");
    CHECK(tune_encode_plan(&p, t, sizeof t) && strcmp(t, "kernel=mma,warps=8,bc=32,mt=1,ql=1") == 0);

    memset(&p, 0, sizeof p);
    snprintf(p.kernel, sizeof p.kernel, "flash_decode");
    p.block_rows = 4;
    p.block_cols = 16;
    p.work_group_size = 128;
    snprintf(p.build_options, sizeof p.build_options,
             "-D HEAD_DIM=128 -D ROWS=4 -D LANES=16 -D VEC=8 -D UNROLL=2 -D WG_SIZE=128 -D ALIGNED=1 -D LANE_SHFL=1 "
             "-D FP8_DENORM_MUL=0 -D PAGED=0 -D CACHE_DTYPE=0 -D HEAD_DIM_V=128 -D FLASHCL_DTYPE=2");
    CHECK(tune_encode_plan(&p, t, sizeof t) && strcmp(t, "kernel=decode,br=4,bc=2,lanes=16,wg=128") == 0);

    memset(&p, 0, sizeof p);
    snprintf(p.kernel, sizeof p.kernel, "flash_decode_cpu");
    p.block_rows = 4;
    p.block_cols = 16;
    p.work_group_size = 1;
    snprintf(p.build_options, sizeof p.build_options,
             "-w -D HEAD_DIM=128 -D ROWS=4 -D HEADS=8 -D CHUNK=16 -D PAGED=0 -D CACHE_DTYPE=0 -D HEAD_DIM_V=128");
    CHECK(tune_encode_plan(&p, t, sizeof t) && strcmp(t, "kernel=decode_cpu,br=4,bc=16,heads=8") == 0);

    /* Build options without the knobs (another kernel's, or damaged): not encodable, never guessed. */
    snprintf(p.build_options, sizeof p.build_options, "-w -D HEAD_DIM=128");
    CHECK(!tune_encode_plan(&p, t, sizeof t));
}

static void tensor_core_lists(void) {
    static const char *const keys[] = {"warps", "bc", "mt", "ql"};
    tune_candidates c;
    const char *base = "kernel=mma,warps=4,bc=32,mt=2,ql=1";
    tune_candidates_for(base, 128, FLASHCL_DTYPE_BF16, 1024, &c);
    check_list("mma d=128 bf16", &c, base, "kernel=mma", keys, 4);
    CHECK(c.count == 4 * 3 * 2 * 2); /* warps 1/2/4/8 x bc 16/32/64 x mt 1/2 x ql 0/1 */
    CHECK(tune_candidates_contain(&c, "kernel=mma,warps=8,bc=64,mt=1,ql=0"));
    /* Each single change comes before any double one: the four knobs' neighbours first. */
    CHECK(strcmp(c.tile[1], "kernel=mma,warps=4,bc=32,mt=2,ql=0") == 0);

    /* d = 96 (padded 96): Q cannot stay in __local; and 128 work-items at most: no 8 warps. */
    base = "kernel=mma,warps=4,bc=32,mt=2,ql=0";
    tune_candidates_for(base, 96, FLASHCL_DTYPE_F16, 128, &c);
    check_list("mma d=96 f16 wg<=128", &c, base, "kernel=mma", keys, 4);
    CHECK(c.count == 3 * 3 * 2);
    for (size_t i = 0; i < c.count; ++i) CHECK(knob(c.tile[i], "ql") == 0 && knob(c.tile[i], "warps") <= 4);

    /* d = 64 at the table's shape (Q in registers): ql=1 is a candidate there. */
    base = "kernel=mma,warps=4,bc=64,mt=2,ql=0";
    tune_candidates_for(base, 64, FLASHCL_DTYPE_BF16, 1024, &c);
    CHECK(tune_candidates_contain(&c, "kernel=mma,warps=4,bc=64,mt=2,ql=1"));

    /* The portable and CPU lists keep their families. */
    tune_candidates_for("kernel=tiles,br=64,bc=64", 128, FLASHCL_DTYPE_F32, 1024, &c);
    CHECK(c.count > 1 && strncmp(c.tile[c.count - 1], "kernel=mma", 10) != 0);
    CHECK(tune_candidates_contain(&c, "kernel=tiles,br=128,bc=64") &&
          tune_candidates_contain(&c, "kernel=tiles,br=96,bc=48"));
    tune_candidates_for("kernel=cpu,br=16,bc=48", 64, FLASHCL_DTYPE_F32, 4096, &c);
    CHECK(c.count > 1 && tune_candidates_contain(&c, "kernel=cpu,br=64,bc=192"));
}

static void decode_lists(void) {
    static const char *const gpu_keys[] = {"br", "bc", "lanes", "wg"};
    static const char *const cpu_keys[] = {"br", "bc", "heads"};
    tune_candidates c;
    const char *base = "kernel=decode,br=4,bc=2,lanes=16,wg=128";
    tune_decode_candidates(base, 4, 1024, &c);
    check_list("decode GPU, packed 4", &c, base, "kernel=decode", gpu_keys, 4);
    CHECK(c.count > 20 && c.count <= TUNE_MAX_CANDIDATES);
    for (size_t i = 0; i < c.count; ++i) {
        const int lanes = knob(c.tile[i], "lanes"), wg = knob(c.tile[i], "wg"), br = knob(c.tile[i], "br");
        CHECK(lanes >= 1 && lanes <= 32 && wg >= 32 && wg <= 1024 && wg % lanes == 0 && br >= 1 && br <= 4);
    }
    CHECK(tune_candidates_contain(&c, "kernel=decode,br=4,bc=2,lanes=8,wg=128"));
    CHECK(tune_candidates_contain(&c, "kernel=decode,br=4,bc=2,lanes=16,wg=256"));
    CHECK(tune_candidates_contain(&c, "kernel=decode,br=2,bc=2,lanes=16,wg=128"));
    /* A device with 64 work-items per group at most. */
    tune_decode_candidates("kernel=decode,br=1,bc=2,lanes=16,wg=64", 1, 64, &c);
    for (size_t i = 0; i < c.count; ++i) CHECK(knob(c.tile[i], "wg") <= 64 && knob(c.tile[i], "br") == 1);

    base = "kernel=decode_cpu,br=4,bc=16,heads=8";
    tune_decode_candidates(base, 4, 4096, &c);
    check_list("decode CPU, packed 4", &c, base, "kernel=decode_cpu", cpu_keys, 3);
    for (size_t i = 0; i < c.count; ++i) {
        if (strncmp(c.tile[i], "kernel=decode_cpu,", 18) != 0) continue;
        CHECK(knob(c.tile[i], "br") <= 4 && knob(c.tile[i], "heads") <= 8 && knob(c.tile[i], "bc") <= 64);
    }
    /* The GPU kernel runs on a CPU too, far slower: last. */
    CHECK(c.count >= 2 && strcmp(c.tile[c.count - 2], "kernel=decode") == 0);
    CHECK(tune_candidates_contain(&c, "kernel=decode_cpu,br=4,bc=16,heads=4"));
    CHECK(tune_candidates_contain(&c, "kernel=decode_cpu,br=4,bc=32,heads=8"));

    /* A base without its knobs: only itself (nothing to vary around). */
    tune_decode_candidates("kernel=decode", 4, 1024, &c);
    CHECK(c.count == 1);
}

static tune_record record(const char *key, const char *tile, const char *size, double ms, bool verified) {
    tune_record r;
    memset(&r, 0, sizeof r);
    snprintf(r.key, sizeof r.key, "%s", key);
    snprintf(r.tile, sizeof r.tile, "%s", tile);
    snprintf(r.size, sizeof r.size, "%s", size);
    r.ms = ms;
    r.verified = verified;
    return r;
}

static void file_round_trip(void) {
    char *dir = tu_tmpdir_make("flashcl-tune-file");
    REQUIRE(dir != NULL);
    char path[1200], err[256];
    snprintf(path, sizeof path, "%s/tuning.txt", dir);
    const char *identity = "FLASHCL-TUNING 1\ndevice=d\nvendor=v\ndevice_version=1\ndriver=2\nplatform=p\n"
                           "platform_version=3\nlibrary=0.0.0\n";
    const char *fwd = "d=128 dtype=bf16 causal=1", *dec = "decode d=128 dtype=bf16 cache=same rows=4";
    const char *mma_base = "kernel=mma,warps=4,bc=32,mt=2,ql=1", *mma_other = "kernel=mma,warps=8,bc=64,mt=1,ql=0";
    const char *dec_base = "kernel=decode,br=4,bc=2,lanes=16,wg=128",
               *dec_other = "kernel=decode,br=4,bc=1,lanes=16,wg=256";
    tune_log log = {0};
    const tune_record rs[] = {
        record(fwd, mma_base, "b4_h16_n4096", 2.0, true),
        record(fwd, mma_other, "b4_h16_n4096", 1.5, true),                             /* wins the search ... */
        record(fwd, "kernel=mma,warps=1,bc=16,mt=1,ql=0", "b4_h16_n4096", 0.5, false), /* fast but wrong */
        record(fwd, "kernel=mma,warps=2,bc=16,mt=1,ql=0", "b4_h16_n4096", NAN, false), /* did not plan */
        record(fwd, mma_base, "b4_h16_n4096" TUNE_CONFIRM_SUFFIX, 1.9, true),
        record(fwd, mma_other, "b4_h16_n4096" TUNE_CONFIRM_SUFFIX, 2.1, true), /* ... and loses in turns */
        record(dec, dec_base, "b1_hq32_hkv8_sq1_sk32768", 0.070, true),
        record(dec, dec_other, "b1_hq32_hkv8_sq1_sk32768", 0.061, true),
    };
    for (size_t i = 0; i < sizeof rs / sizeof rs[0]; ++i) REQUIRE(tune_log_add(&log, &rs[i]) == 0);
    CHECK(tune_log_write(&log, path, identity, err, sizeof err) == 0);

    tune_log back = {0};
    CHECK(tune_log_load(&back, path) == 0);
    CHECK(back.count == log.count);
    for (size_t i = 0; i < back.count && i < log.count; ++i) {
        const tune_record *a = &log.records[i], *b = &back.records[i];
        CHECK(strcmp(a->key, b->key) == 0 && strcmp(a->tile, b->tile) == 0 && strcmp(a->size, b->size) == 0);
        CHECK(a->verified == b->verified && (isnan(a->ms) ? isnan(b->ms) : fabs(a->ms - b->ms) < 1e-9));
    }
    const tune_record *w = tune_log_winner(&back, fwd, "b4_h16_n4096");
    CHECK(w && strcmp(w->tile, mma_base) == 0);
    w = tune_log_winner(&back, dec, "b1_hq32_hkv8_sq1_sk32768");
    CHECK(w && strcmp(w->tile, dec_other) == 0);

    /* The text: one tuned line per key, the checksum of everything before it. */
    FILE *f = fopen(path, "rb");
    REQUIRE(f != NULL);
    static char text[16384];
    const size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    char want[256];
    snprintf(want, sizeof want, "\ntuned %s tile=%s\n", fwd, mma_base);
    CHECK(strstr(text, want) != NULL);
    snprintf(want, sizeof want, "\ntuned %s tile=%s\n", dec, dec_other);
    CHECK(strstr(text, want) != NULL);
    int tuned = 0;
    for (const char *p = strstr(text, "\ntuned "); p; p = strstr(p + 1, "\ntuned ")) ++tuned;
    CHECK(tuned == 2);
    const char *last = strstr(text, "checksum=");
    REQUIRE(last != NULL);
    CHECK(strtoull(last + 9, NULL, 16) == flashcl_tuning_checksum(text, (size_t)(last - text)));

    tune_log_free(&log);
    tune_log_free(&back);
    tu_tmpdir_remove(dir);
    free(dir);
}

int main(void) {
    encoding();
    tensor_core_lists();
    decode_lists();
    file_round_trip();
    return tu_finish("test_tune_candidates");
}
