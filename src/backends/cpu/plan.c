/*
 * Plans for the CPU kernel family (cl/flash_cpu.cl): one build per head dim
 * and set of variant switches (cl/variants.cl: HEAD_DIM_V, storage type,
 * softcap, ALiBi, bias, masks, block mask, sinks, dropout, varlen), like the
 * portable kernels.
 *
 * The shape is fixed by the kernels: groups of 16 rows (a float16) per
 * work-item, work-groups of one, the streamed side packed into dense scratch
 * first (flash_cpu_pack). What is left to choose: the groups per work-item
 * (1: measured 10-20% faster than 2 or 4, whose private arrays, 11 KiB a
 * group at d = 64, overflow L1; the packed chunks stream from L2/L3 with the
 * prefetchers' help either way), the chunk (keys scored before their
 * exponentials and P V, query rows per dK/dV pass; 48 keeps a chunk's K or V
 * rows, 12 KiB at d = 64, in L1), and the micro-tile width STEP (6: 12 ymm
 * accumulators on AVX2, the most that leave registers for the operands).
 */
#include "cpu.h"
#include "../../tuning.h"

#include <stdlib.h>

#include <stdio.h>
#include <string.h>

#define CPU_LANES 16 /* rows in one float16 */
#define CPU_GROUPS 1 /* float16 row groups per work-item (see above) */
#define CPU_STEP 6
#define CPU_CHUNK 48
#define CPU_MAX_CHUNK 480

/* What the family runs: float32, float16 or bfloat16 storage, every variant of
   cl/variants.cl (varlen included: the kernels find each sequence's rows through
   cu_seqlens), GQA, any lengths and strides, d and d_v each up to 256 (HEAD_DIM for
   Q and K, HEAD_DIM_V for V and O; the private arrays of a 16-row group grow with
   both). The rest goes to the portable row kernels. */
static int cpu_family_covers(const flashcl_attention_desc *desc) {
    return desc->head_dim <= 256 && desc->head_dim_v <= 256;
}

/* Why the family does not take a call it does not cover. */
static void uncovered_why(const flashcl_attention_desc *d, char *out, size_t cap) {
    snprintf(out, cap, "%s", d->head_dim > 256 ? "d > 256" : "d_v > 256");
}

/* Forced with FLASHCL_TILE=kernel=cpu (FLASHCL_BWD_KERNEL=cpu), the family takes the call even
   where it does not apply, so that its plan can say why it refuses. An override that does not
   parse leaves the call to the portable family, whose planner reports the error. */
int flashcl__cpu_wanted(flashcl_context *ctx, flashcl__pass pass, const flashcl_attention_desc *d, char *why,
                        size_t cap) {
    const char *var = pass == FLASHCL__FORWARD ? "FLASHCL_TILE" : "FLASHCL_BWD_KERNEL";
    int present = 0, forced = 0;
    if (pass == FLASHCL__FORWARD) {
        flashcl__tile_override ov;
        if (flashcl__read_tile_override(NULL, &ov) != FLASHCL_SUCCESS) {
            snprintf(why, cap, "%s does not parse", var);
            return 0;
        }
        present = ov.present, forced = ov.kernel == FLASHCL__TILE_KERNEL_CPU;
    } else {
        flashcl__bwd_override ov;
        if (flashcl__read_bwd_override(NULL, &ov) != FLASHCL_SUCCESS) {
            snprintf(why, cap, "%s does not parse", var);
            return 0;
        }
        present = ov.present, forced = ov.tiles == FLASHCL__BWD_KERNEL_CPU;
    }
    if (present) {
        if (!forced) snprintf(why, cap, "%s forces another family", var);
        return forced;
    }
    flashcl__tile_override tuned;
    const char *origin = NULL;
    char tuned_why[256];
    /* A portable kernel (rows, split, tiles: below CPU in the grammar's numbering) measured faster steps this
       family aside; a kernel=mma entry is the tensor cores', which come before this family where they apply. */
    if (pass == FLASHCL__FORWARD && flashcl__tuned_plan(ctx, d, &tuned, &origin, tuned_why, sizeof tuned_why) &&
        tuned.kernel >= 0 && tuned.kernel < FLASHCL__TILE_KERNEL_CPU) {
        snprintf(why, cap, "%s", tuned_why); /* measured faster in another family */
        return 0;
    }
    if (!ctx->info.is_cpu) {
        snprintf(why, cap, "not a CPU device");
        return 0;
    }
    if (!cpu_family_covers(d)) {
        char features[160], reason[64];
        flashcl__describe_variants(d, features, sizeof features);
        uncovered_why(d, reason, sizeof reason);
        snprintf(why, cap, "%s (the family runs d and d_v up to 256; this call: d=%zu, %s)", reason, d->head_dim,
                 features);
        return 0;
    }
    return 1;
}

static flashcl_status refuse_forced(flashcl_context *ctx, const flashcl_attention_desc *desc, const char *var) {
    char features[160], reason[64];
    flashcl__describe_variants(desc, features, sizeof features);
    uncovered_why(desc, reason, sizeof reason);
    return flashcl__fail(ctx, FLASHCL_ERR_INVALID_TILE,
                         "%s=...cpu: the CPU family runs d and d_v up to 256; this call has %s (d=%zu, %s)", var,
                         reason, desc->head_dim, features);
}

/* No -w here: src/program.c passes it to every source build (POCL's clang would print its
   float16 ABI warnings to the application's stderr otherwise). */
static void options_for(int d, int groups, int chunk, const char *variants, char *out, size_t cap) {
    snprintf(out, cap, "-D HEAD_DIM=%d -D GROUPS=%d -D CHUNK=%d -D STEP=%d %s", d, groups, chunk, CPU_STEP, variants);
}

/* Creates `name` from the program and checks a work-group of one fits. */
static flashcl_status make_kernel(flashcl_context *ctx, cl_program program, const char *name, cl_kernel *out,
                                  cl_ulong *private_bytes) {
    flashcl_status st = flashcl__create_kernel(ctx, program, name, out);
    if (st != FLASHCL_SUCCESS) return st;
    size_t wg = 0;
    cl_ulong priv = 0;
    cl_int err = clGetKernelWorkGroupInfo(*out, ctx->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof wg, &wg, NULL);
    if (err == CL_SUCCESS)
        err = clGetKernelWorkGroupInfo(*out, ctx->device, CL_KERNEL_PRIVATE_MEM_SIZE, sizeof priv, &priv, NULL);
    if (err != CL_SUCCESS) {
        clReleaseKernel(*out);
        *out = NULL;
        return flashcl__fail_cl(ctx, err, "clGetKernelWorkGroupInfo(CPU family)");
    }
    if (private_bytes && priv > *private_bytes) *private_bytes = priv;
    return FLASHCL_SUCCESS;
}

static void fill_public(flashcl_plan *p, const char *kernel, int rows, int chunk, cl_ulong priv, const char *options,
                        const char *origin) {
    flashcl__copy_str(p->kernel, sizeof p->kernel, kernel);
    p->block_rows = rows;
    p->block_cols = chunk;
    p->threads_per_row = 1;
    p->staging = FLASHCL_STAGING_DIRECT;
    p->work_group_size = 1;
    p->local_mem_bytes = 0;
    p->private_mem_bytes = (size_t)priv;
    p->scratch_bytes = 0;
    flashcl__copy_str(p->build_options, sizeof p->build_options, options);
    flashcl__copy_str(p->origin, sizeof p->origin, origin);
}

/* The overrides may give br (16, 32, 64 or 128 rows per work-item) and bc
   (the chunk: a multiple of 6, at most 480). `source` ("FLASHCL_TILE: ", or "" for a tuned plan, whose
   refusal the reason quotes with the entry) opens the error. */
static flashcl_status sizes_from(flashcl_context *ctx, const char *source, int rows, int cols, int *groups,
                                 int *chunk) {
    *chunk = CPU_CHUNK;
    *groups = CPU_GROUPS;
    if (rows > 0) {
        if (rows != 16 && rows != 32 && rows != 64 && rows != 128)
            return flashcl__fail(ctx, FLASHCL_ERR_INVALID_TILE,
                                 "%sthe cpu kernels need br in {16, 32, 64, 128} (got %d)", source, rows);
        *groups = rows / CPU_LANES;
    }
    if (cols > 0) {
        if (cols % CPU_STEP != 0 || cols > CPU_MAX_CHUNK)
            return flashcl__fail(ctx, FLASHCL_ERR_INVALID_TILE,
                                 "%sthe cpu kernels need bc a multiple of %d, at most %d (got %d)", source, CPU_STEP,
                                 CPU_MAX_CHUNK, cols);
        *chunk = cols;
    }
    return FLASHCL_SUCCESS;
}

/* Short: the plan's reason (512 bytes) also carries the variants and every skipped family's why. */
static const char *const family_reason = "16-row float16-lane groups, 16x6 GEMM micro-kernels, K/V (Q/dO for dK/dV) "
                                         "packed once per call and streamed in chunks, work-groups of one";

/* Builds the pass's kernels (and the pack kernel) and fills the public plan. */
static flashcl_status build_plan(flashcl_context *ctx, flashcl__pass pass, const flashcl_attention_desc *desc,
                                 flashcl__cpu_plan *out) {
    const int forward = pass == FLASHCL__FORWARD;
    const char *var = forward ? "FLASHCL_TILE" : "FLASHCL_BWD_KERNEL";
    int present = 0, rows = -1, cols = -1;
    flashcl_status st = FLASHCL_SUCCESS;
    if (forward) {
        flashcl__tile_override ov;
        st = flashcl__read_tile_override(ctx, &ov);
        present = ov.present, rows = ov.block_rows, cols = ov.block_cols;
    } else {
        flashcl__bwd_override ov;
        st = flashcl__read_bwd_override(ctx, &ov);
        present = ov.present, rows = ov.block_rows, cols = ov.block_cols;
    }
    if (st != FLASHCL_SUCCESS) return st;
    if (!cpu_family_covers(desc)) return refuse_forced(ctx, desc, var);
    const int d = (int)desc->head_dim;
    int chunk = CPU_CHUNK, groups = CPU_GROUPS;
    char source[32];
    snprintf(source, sizeof source, "%s: ", var);
    st = present ? sizes_from(ctx, source, rows, cols, &groups, &chunk) : FLASHCL_SUCCESS;
    if (st != FLASHCL_SUCCESS) return st;
    /* Not forced: a tuned plan of this family (tuning.h), if its sizes are legal, else the table's. */
    const char *tuned_origin = NULL;
    char tuned_why[sizeof out->pub.reason] = "", untuned[sizeof out->pub.reason] = "table: CPU device";
    flashcl__tile_override tuned;
    if (!present && forward && flashcl__tuned_plan(ctx, desc, &tuned, &tuned_origin, tuned_why, sizeof tuned_why)) {
        /* An entry this family cannot run is not used; the reason says so, and why (the portable kernels'
           entries never get here: flashcl__cpu_wanted leaves those calls to their family). */
        int tg = groups, tc = chunk;
        if (tuned.kernel != FLASHCL__TILE_KERNEL_CPU) {
            if (snprintf(untuned, sizeof untuned, "table: CPU device (the tuned plan was not used: %s; %s)",
                         tuned.kernel < 0                           ? "it names no kernel"
                         : tuned.kernel == FLASHCL__TILE_KERNEL_MMA ? "kernel=mma is the tensor cores'"
                                                                    : "its kernel is another family's",
                         tuned_why) >= (int)sizeof untuned)
                flashcl__mark_truncated(untuned, sizeof untuned);
            tuned_origin = NULL;
        } else if (sizes_from(ctx, "", tuned.block_rows, tuned.block_cols, &tg, &tc) == FLASHCL_SUCCESS) {
            groups = tg, chunk = tc;
        } else {
            if (snprintf(untuned, sizeof untuned, "table: CPU device (the tuned plan was not used: %s; %s)",
                         flashcl_last_error(ctx), tuned_why) >= (int)sizeof untuned)
                flashcl__mark_truncated(untuned, sizeof untuned);
            flashcl__clear_error(ctx);
            tuned_origin = NULL;
        }
    } else {
        tuned_origin = NULL;
    }
    char variants[256], options[512];
    flashcl__variant_options(desc, variants, sizeof variants);
    options_for(d, groups, chunk, variants, options, sizeof options);
    cl_program program = NULL;
    st = flashcl__get_program(ctx, "flash_cpu.cl", options, &program);
    if (st != FLASHCL_SUCCESS) return st;
    static const char *const names[2][5] = {{FLASHCL__CPU_FWD_KERNEL, NULL, NULL, NULL, NULL},
                                            {"flash_bwd_cpu_dot", FLASHCL__CPU_DKDV_KERNEL, "flash_bwd_cpu_dq",
                                             "flash_bwd_cpu_dsinks", FLASHCL__CPU_FUSED_KERNEL}};
    cl_ulong priv = 0;
    for (int i = 0; i < 5 && st == FLASHCL_SUCCESS; ++i)
        if (names[pass][i] && (i != 3 || desc->sinks)) /* the dsinks kernel exists in sinks builds only */
            st = make_kernel(ctx, program, names[pass][i], &out->main[i], i == 0 && !forward ? NULL : &priv);
    if (st == FLASHCL_SUCCESS) st = make_kernel(ctx, program, "flash_cpu_pack", &out->pack, NULL);
    if (st != FLASHCL_SUCCESS) return st; /* the caller releases what was made */
    const int lanes = groups * CPU_LANES;
    fill_public(&out->pub, forward ? FLASHCL__CPU_FWD_KERNEL : FLASHCL__CPU_DKDV_KERNEL, lanes, chunk, priv, options,
                present        ? "env"
                : tuned_origin ? tuned_origin
                               : "table");
    const char *origin = present        ? (forward ? "FLASHCL_TILE=kernel=cpu" : "FLASHCL_BWD_KERNEL=cpu")
                         : tuned_origin ? tuned_why
                                        : untuned;
    int full; /* the reason's whole length: a long origin (a tuned entry's rejection) may not leave room */
    if (forward)
        full = snprintf(out->pub.reason, sizeof out->pub.reason,
                        "%s: CPU kernel family (%s), %d rows per work-item, %d keys per pass%s", origin, family_reason,
                        lanes, chunk, present ? "" : "; FLASHCL_TILE=kernel=rows forces the portable row kernel");
    else
        full =
            snprintf(out->pub.reason, sizeof out->pub.reason,
                     "%s: CPU kernel family (%s); flash_bwd_cpu_dkdv owns %d keys and passes over %d query rows at a "
                     "time, flash_bwd_cpu_dq %d rows and %d keys%s",
                     origin, family_reason, lanes, chunk, lanes, chunk,
                     present ? "" : "; FLASHCL_BWD_KERNEL=rows forces the portable row kernels");
    if (full >= (int)sizeof out->pub.reason) flashcl__mark_truncated(out->pub.reason, sizeof out->pub.reason);
    flashcl__append_variants(desc, out->pub.reason, sizeof out->pub.reason);
    out->head_dim = d;
    flashcl__copy_str(out->variants, sizeof out->variants, variants);
    return FLASHCL_SUCCESS;
}

static void release_plan(flashcl__cpu_plan *p) {
    for (int i = 0; i < 5; ++i)
        if (p->main[i]) clReleaseKernel(p->main[i]);
    if (p->pack) clReleaseKernel(p->pack);
    free(p);
}

flashcl_status flashcl__cpu_plan_for(flashcl_context *ctx, flashcl__pass pass, const flashcl_attention_desc *d,
                                     const flashcl__cpu_plan **out) {
    flashcl__cpu_state *state = ctx->family[FLASHCL__FAMILY_CPU];
    if (!state) {
        state = calloc(1, sizeof *state);
        if (!state) return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_HOST_MEMORY, "out of host memory for the CPU family");
        ctx->family[FLASHCL__FAMILY_CPU] = state;
    }
    char variants[256];
    flashcl__variant_options(d, variants, sizeof variants);
    for (flashcl__cpu_plan *p = state->plans[pass]; p; p = p->next)
        if (p->head_dim == (int)d->head_dim && p->causal == (d->causal ? 1 : 0) && strcmp(p->variants, variants) == 0) {
            *out = p;
            return FLASHCL_SUCCESS;
        }
    flashcl__cpu_plan *p = calloc(1, sizeof *p);
    if (!p) return flashcl__fail(ctx, FLASHCL_ERR_OUT_OF_HOST_MEMORY, "out of host memory for a plan");
    flashcl_status st = build_plan(ctx, pass, d, p);
    if (st != FLASHCL_SUCCESS) {
        release_plan(p);
        return st;
    }
    p->causal = d->causal ? 1 : 0;
    p->next = state->plans[pass];
    state->plans[pass] = p;
    *out = p;
    return FLASHCL_SUCCESS;
}

void flashcl__cpu_release_plans(flashcl__cpu_state *state) {
    for (int pass = 0; pass < 2; ++pass)
        while (state->plans[pass]) {
            flashcl__cpu_plan *p = state->plans[pass];
            state->plans[pass] = p->next;
            release_plan(p);
        }
}
