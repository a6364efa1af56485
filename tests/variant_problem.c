/* One attention-variant problem on the device; see variant_problem.h. */
#include "variant_problem.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grad_check.h"
#include "storage_types.h"
#include "variant_compare.h"

static void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size);
    REQUIRE(p != NULL);
    return p;
}

static cl_mem make_buffer(cl_context cl_ctx, size_t bytes, const void *init) {
    cl_int err = CL_SUCCESS;
    cl_mem_flags flags = CL_MEM_READ_WRITE | (init ? CL_MEM_COPY_HOST_PTR : 0);
    cl_mem buf = clCreateBuffer(cl_ctx, flags, bytes ? bytes : 1, (void *)(uintptr_t)init, &err);
    REQUIRE_CL(err);
    return buf;
}

/* A buffer of n elements of the storage type, from floats (NULL: NaN-filled output). */
static cl_mem storage_buffer(cl_context cl_ctx, flashcl_dtype dtype, size_t n, const float *init) {
    size_t es = flashcl_dtype_size(dtype);
    REQUIRE(es != 0);
    float *src = (float *)(uintptr_t)init;
    if (!init) {
        src = xcalloc(n, sizeof(float));
        for (size_t i = 0; i < n; i++) src[i] = NAN;
    }
    void *packed = xcalloc(n, es);
    flashcl__to_storage(dtype, src, packed, n);
    cl_mem buf = make_buffer(cl_ctx, n * es, packed);
    free(packed);
    if (!init) free(src);
    return buf;
}

static float *random_floats(size_t n, tu_rng *rng, float lo, float hi, flashcl_dtype dtype) {
    float *x = xcalloc(n, sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = st_round(dtype, tu_rng_float(rng, lo, hi));
    return x;
}

/* A [b, h, rows, cols] view in `how`'s broadcast; returns the elements to allocate. */
static size_t matrix_layout(vc_broadcast how, size_t b, size_t h, size_t rows, size_t cols, int zero_strides_for_full,
                            rv_matrix *m, flashcl_matrix *fm) {
    size_t plane = rows * cols;
    size_t sb = 0, sh = 0, count = plane;
    switch (how) {
    case VC_FULL:
        sb = h * plane, sh = plane, count = b * h * plane;
        break;
    case VC_PER_HEAD:
        sh = plane, count = h * plane;
        break;
    case VC_PER_BATCH:
        sb = plane, count = b * plane;
        break;
    default:
        break;
    }
    m->offset = 0, m->stride_batch = sb, m->stride_head = sh, m->stride_row = cols;
    fm->offset = 0, fm->stride_batch = sb, fm->stride_head = sh, fm->stride_row = cols;
    if (how == VC_FULL && zero_strides_for_full)
        fm->stride_batch = fm->stride_head = fm->stride_row = 0; /* "packed" rule */
    return count;
}

static void tensor_views(vp_problem *p) {
    const flashcl_attention_desc *d = &p->desc;
    size_t hq = d->heads_q, hkv = d->heads_kv, dq = d->head_dim, dv = d->head_dim_v;
    if (p->c.nseq) {
        /* Packed [total, h, dim]: stride_batch must be 0 under varlen. */
        flashcl_tensor t = {NULL, 0, 0, 0, 0};
        t.stride_head = dq, t.stride_row = hq * dq;
        p->qv = p->dqv = t;
        t.stride_head = dv, t.stride_row = hq * dv;
        p->ov = p->doutv = t;
        t.stride_head = dq, t.stride_row = hkv * dq;
        p->kv = p->dkv = t;
        t.stride_head = dv, t.stride_row = hkv * dv;
        p->vv = p->dvv = t;
    } else {
        p->qv = p->dqv = flashcl_tensor_bshd(NULL, d->seqlen_q, hq, dq);
        p->ov = p->doutv = flashcl_tensor_bshd(NULL, d->seqlen_q, hq, dv);
        p->kv = p->dkv = flashcl_tensor_bshd(NULL, d->seqlen_k, hkv, dq);
        p->vv = p->dvv = flashcl_tensor_bshd(NULL, d->seqlen_k, hkv, dv);
    }
    p->qv.buffer = p->q_buf, p->kv.buffer = p->k_buf, p->vv.buffer = p->v_buf;
    p->ov.buffer = p->o_buf, p->doutv.buffer = p->dout_buf;
    p->dqv.buffer = p->dq_buf, p->dkv.buffer = p->dk_buf, p->dvv.buffer = p->dv_buf;
}

/* The reference's view of the case (buffers are attached later). */
static void reference_problem(vp_problem *p) {
    const flashcl_attention_desc *d = &p->desc;
    rv_problem *r = &p->ref;
    memset(r, 0, sizeof *r);
    r->batch = d->batch, r->heads_q = d->heads_q, r->heads_kv = d->heads_kv;
    r->seqlen_q = d->seqlen_q, r->seqlen_k = d->seqlen_k;
    r->head_dim = d->head_dim, r->head_dim_v = d->head_dim_v;
    r->scale = d->scale != 0.0f ? (double)d->scale : 1.0 / sqrt((double)d->head_dim);
    r->causal = d->causal;
    r->window = d->window, r->window_left = d->window_left, r->window_right = d->window_right;
    r->softcap = d->softcap;
    r->dropout_p = d->dropout_p;
    r->block_q = d->block_q, r->block_k = d->block_k;
    if (p->c.nseq) {
        r->cu_q = p->cu_q, r->cu_k = p->cu_k;
        r->max_seqlen_q = d->max_seqlen_q, r->max_seqlen_k = d->max_seqlen_k;
    } else {
        r->max_seqlen_q = d->seqlen_q, r->max_seqlen_k = d->seqlen_k;
    }
}

static void make_masks(vp_problem *p, cl_context cl_ctx, tu_rng *rng) {
    const vc_case *c = &p->c;
    flashcl_attention_desc *d = &p->desc;
    rv_problem *r = &p->ref;
    size_t rows = rv_mask_rows(r), cols = rv_mask_cols(r), b = d->batch, h = d->heads_q;
    int packed_full = c->nseq == 0; /* under varlen the packed shape is ambiguous: be explicit */
    if (c->bias) {
        size_t n = matrix_layout(c->bias, b, h, rows, cols, packed_full, &r->bias, &d->bias);
        p->bias = random_floats(n, rng, -2.0f, 2.0f, FLASHCL_DTYPE_F32);
        r->bias.data = p->bias;
        p->bias_buf = d->bias.buffer = make_buffer(cl_ctx, n * sizeof(float), p->bias);
    }
    if (c->mask) {
        size_t n = matrix_layout(c->mask, b, h, rows, cols, packed_full, &r->mask, &d->mask);
        p->mask = xcalloc(n, 1);
        for (size_t e = 0; e < n; e++) p->mask[e] = tu_rng_float(rng, 0.0f, 1.0f) < c->mask_density ? 1 : 0;
        /* Row 2 of the first plane sees nothing: O = 0 and LSE = -inf there. */
        if (rows > 2) memset(p->mask + 2 * cols, 0, cols);
        /* Nonzero values other than 1 also mean "attend". */
        for (size_t e = 0; e < n; e += 7) p->mask[e] = (unsigned char)(p->mask[e] ? 0xa5 : 0);
        r->mask.data = p->mask;
        p->mask_buf = d->mask.buffer = make_buffer(cl_ctx, n, p->mask);
    }
    if (c->block_mask) {
        size_t br = (rows + d->block_q - 1) / d->block_q, bc = (cols + d->block_k - 1) / d->block_k;
        size_t n = matrix_layout(c->block_mask, b, h, br, bc, packed_full, &r->block_mask, &d->block_mask);
        p->block = xcalloc(n, 1);
        for (size_t e = 0; e < n; e++) p->block[e] = tu_rng_float(rng, 0.0f, 1.0f) < c->mask_density ? 1 : 0;
        if (br > 1) /* the second block row of the first plane is skipped whole */
            memset(p->block + bc, 0, bc);
        r->block_mask.data = p->block;
        p->block_buf = d->block_mask.buffer = make_buffer(cl_ctx, n, p->block);
    }
}

/* float32 storage with allow_tf32 (test_variants --tf32): inputs TF32-exact, the forward may round P. */
static int is_tf32(const vp_problem *p) {
    return p->desc.allow_tf32 && (p->desc.dtype == FLASHCL_DTYPE_F32 || p->desc.dtype == FLASHCL_DTYPE_DEFAULT);
}

void vp_init(vp_problem *p, cl_context cl_ctx, const vc_case *c, uint64_t seed) {
    memset(p, 0, sizeof *p);
    p->c = *c;
    flashcl_attention_desc *d = &p->desc;
    *d = c->desc;
    if (!d->heads_kv) d->heads_kv = d->heads_q;
    if (!d->head_dim_v) d->head_dim_v = d->head_dim;
    flashcl_dtype dtype = d->dtype ? d->dtype : FLASHCL_DTYPE_F32;
    tu_rng rng = tu_rng_seed(seed);

    if (c->nseq) {
        p->cu_q[0] = p->cu_k[0] = 0;
        for (size_t i = 0; i < c->nseq; i++) {
            p->cu_q[i + 1] = p->cu_q[i] + (int32_t)c->len_q[i];
            p->cu_k[i + 1] = p->cu_k[i] + (int32_t)c->len_k[i];
            if (c->len_q[i] > d->max_seqlen_q) d->max_seqlen_q = c->len_q[i];
            if (c->len_k[i] > d->max_seqlen_k) d->max_seqlen_k = c->len_k[i];
        }
        p->cuq_buf = d->cu_seqlens_q = make_buffer(cl_ctx, sizeof p->cu_q, p->cu_q);
        p->cuk_buf = d->cu_seqlens_k = make_buffer(cl_ctx, sizeof p->cu_k, p->cu_k);
    }
    reference_problem(p);
    rv_problem *r = &p->ref;

    p->nq = rv_rows_q(r) * d->heads_q * d->head_dim;
    p->no = rv_rows_q(r) * d->heads_q * d->head_dim_v;
    p->nk = rv_rows_k(r) * d->heads_kv * d->head_dim;
    p->nv = rv_rows_k(r) * d->heads_kv * d->head_dim_v;
    p->q = random_floats(p->nq, &rng, -2.0f, 2.0f, dtype);
    p->k = random_floats(p->nk, &rng, -1.0f, 1.0f, dtype);
    p->v = random_floats(p->nv, &rng, -1.0f, 1.0f, dtype);
    p->dout = random_floats(p->no, &rng, -1.0f, 1.0f, dtype);
    if (d->allow_tf32 && dtype == FLASHCL_DTYPE_F32) {
        /* TF32 inputs, so that the kernel's rounding of them is exact and only P's (and the
           backward's dS) rounding remains. */
        float *in[] = {p->q, p->k, p->v, p->dout};
        const size_t counts[] = {p->nq, p->nk, p->nv, p->no};
        for (int t = 0; t < 4; t++)
            for (size_t e = 0; e < counts[t]; e++) in[t][e] = st_round_tf32(in[t][e]);
    }
    p->q_buf = storage_buffer(cl_ctx, dtype, p->nq, p->q);
    p->k_buf = storage_buffer(cl_ctx, dtype, p->nk, p->k);
    p->v_buf = storage_buffer(cl_ctx, dtype, p->nv, p->v);
    p->dout_buf = storage_buffer(cl_ctx, dtype, p->no, p->dout);
    p->o_buf = storage_buffer(cl_ctx, dtype, p->no, NULL);
    p->dq_buf = storage_buffer(cl_ctx, dtype, p->nq, NULL);
    p->dk_buf = storage_buffer(cl_ctx, dtype, p->nk, NULL);
    p->dv_buf = storage_buffer(cl_ctx, dtype, p->nv, NULL);
    p->lse_buf = storage_buffer(cl_ctx, FLASHCL_DTYPE_F32, rv_lse_count(r), NULL);
    tensor_views(p);

    if (c->alibi) {
        size_t n = (c->alibi == 2 ? d->batch : 1) * d->heads_q;
        p->slopes = xcalloc(n, sizeof(float));
        if (c->alibi == 2)
            for (size_t e = 0; e < n; e++) p->slopes[e] = tu_rng_float(&rng, 0.05f, 1.0f);
        else
            rv_alibi_standard_slopes(d->heads_q, p->slopes);
        d->alibi_stride_batch = c->alibi == 2 ? d->heads_q : 0;
        r->alibi_slopes = p->slopes, r->alibi_stride_batch = d->alibi_stride_batch;
        p->slopes_buf = d->alibi_slopes = make_buffer(cl_ctx, n * sizeof(float), p->slopes);
    }
    if (c->sinks) {
        p->sinks = random_floats(d->heads_q, &rng, -1.0f, 2.0f, FLASHCL_DTYPE_F32);
        r->sinks = p->sinks;
        p->sinks_buf = d->sinks = make_buffer(cl_ctx, d->heads_q * sizeof(float), p->sinks);
        p->dsinks_buf = d->dsinks = storage_buffer(cl_ctx, FLASHCL_DTYPE_F32, d->heads_q, NULL);
    }
    make_masks(p, cl_ctx, &rng);
    if (d->dropout_p > 0.0f) {
        p->keep_bytes = d->batch * d->heads_q * rv_mask_rows(r) * rv_mask_cols(r);
        p->keep = xcalloc(p->keep_bytes, 1);
        memset(p->keep, 0xee, p->keep_bytes); /* neither 0 nor 1 until the library writes it */
        p->keep_buf = make_buffer(cl_ctx, p->keep_bytes, p->keep);
        r->keep = p->keep;
    }
    p->base = *r;
    p->base.round = dtype == FLASHCL_DTYPE_F16 ? st_round_f16 : dtype == FLASHCL_DTYPE_BF16 ? st_round_bf16 : NULL;
    /* TF32: the plain implementation rounds P (and in the backward dS) to TF32 and keeps O and
       the gradients float32, as the tensor-core kernels do; its inputs are TF32 values already
       (above). */
    if (is_tf32(p)) p->base.round = st_round_tf32_d, p->base.exact_output = 1;
}

void vp_free(vp_problem *p) {
    cl_mem all[] = {p->q_buf,    p->k_buf,    p->v_buf,     p->o_buf,      p->lse_buf,   p->dout_buf,
                    p->dq_buf,   p->dk_buf,   p->dv_buf,    p->slopes_buf, p->sinks_buf, p->dsinks_buf,
                    p->bias_buf, p->mask_buf, p->block_buf, p->cuq_buf,    p->cuk_buf,   p->keep_buf};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i]) clReleaseMemObject(all[i]);
    void *host[] = {p->q, p->k, p->v, p->dout, p->slopes, p->sinks, p->bias, p->mask, p->block, p->keep};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
    memset(p, 0, sizeof *p);
}

/* ---------------------------------------------------------------- calls */

flashcl_status vp_dropout_mask(flashcl_context *ctx, vp_problem *p) {
    cl_event done = NULL;
    flashcl_status st = flashcl_dropout_mask(ctx, &p->desc, p->keep_buf, 0, 0, NULL, &done);
    if (st != FLASHCL_SUCCESS) return st;
    REQUIRE_CL(clEnqueueReadBuffer(flashcl_context_queue(ctx), p->keep_buf, CL_TRUE, 0, p->keep_bytes, p->keep, 1,
                                   &done, NULL));
    clReleaseEvent(done);
    return st;
}

int vp_check_dropout_mask(const vp_problem *p, const char *label) {
    const rv_problem *r = &p->ref;
    unsigned char *host = xcalloc(p->keep_bytes, 1);
    rv_dropout_mask(r, p->desc.dropout_seed, p->desc.dropout_offset, host);
    size_t diff = 0, first = 0, kept = 0, n = 0;
    for (size_t e = 0; e < p->keep_bytes; e++) {
        if (p->keep[e] != host[e] && diff++ == 0) first = e;
    }
    for (size_t b = 0; b < r->batch; b++) n += r->heads_q * rv_seq_len_q(r, b) * rv_seq_len_k(r, b);
    for (size_t e = 0; e < p->keep_bytes; e++) kept += host[e];
    free(host);
    int ok = 1;
    if (diff) {
        fprintf(stderr,
                "FAIL %s: dropout mask differs from the host Philox in %zu of %zu bytes; "
                "first at %zu: %u\n",
                label, diff, p->keep_bytes, first, (unsigned)p->keep[first]);
        tu_fail_count();
        ok = 0;
    }
    double q = 1.0 - (double)p->desc.dropout_p;
    double sigma = sqrt((double)n * q * (1.0 - q));
    if (fabs((double)kept - q * (double)n) > 5.0 * sigma) {
        fprintf(stderr, "FAIL %s: kept %zu of %zu, expected %.1f +- 5 * %.1f\n", label, kept, n, q * (double)n, sigma);
        tu_fail_count();
        ok = 0;
    }
    return ok;
}

flashcl_status vp_forward(flashcl_context *ctx, vp_problem *p, cl_event *event) {
    return flashcl_forward(ctx, &p->desc, &p->qv, &p->kv, &p->vv, &p->ov, p->lse_buf, 0, 0, NULL, event);
}

flashcl_status vp_backward(flashcl_context *ctx, vp_problem *p, cl_uint num_wait, const cl_event *wait,
                           cl_event *event) {
    return flashcl_backward(ctx, &p->desc, &p->qv, &p->kv, &p->vv, &p->ov, &p->doutv, p->lse_buf, 0, &p->dqv, &p->dkv,
                            &p->dvv, num_wait, wait, event);
}

void vp_read_storage(const vp_problem *p, cl_command_queue queue, cl_mem buf, size_t n, cl_event after, float *out) {
    flashcl_dtype dtype = p->desc.dtype ? p->desc.dtype : FLASHCL_DTYPE_F32;
    size_t es = flashcl_dtype_size(dtype);
    void *raw = xcalloc(n, es);
    REQUIRE_CL(clEnqueueReadBuffer(queue, buf, CL_TRUE, 0, n * es, raw, after ? 1 : 0, after ? &after : NULL, NULL));
    flashcl__from_storage(dtype, raw, out, n);
    free(raw);
}

/* Compared as FlashAttention compares 16-bit storage: against a plain implementation's error. */
static int is_lowp(const vp_problem *p) {
    return p->desc.dtype == FLASHCL_DTYPE_F16 || p->desc.dtype == FLASHCL_DTYPE_BF16 || is_tf32(p);
}

/* The storage type whose unit roundoff the allowances use: TF32 has f16's (2^-11). */
static flashcl_dtype tolerance_dtype(const vp_problem *p) { return is_tf32(p) ? FLASHCL_DTYPE_F16 : p->desc.dtype; }

int vp_check_forward(vp_problem *p, cl_command_queue queue, cl_event after, const char *label) {
    size_t nl = rv_lse_count(&p->ref);
    float *o = xcalloc(p->no, sizeof(float)), *lse = xcalloc(nl, sizeof(float));
    vp_read_storage(p, queue, p->o_buf, p->no, after, o);
    REQUIRE_CL(clEnqueueReadBuffer(queue, p->lse_buf, CL_TRUE, 0, nl * sizeof(float), lse, 0, NULL, NULL));
    double *ref_o = xcalloc(p->no, sizeof(double)), *ref_lse = xcalloc(nl, sizeof(double));
    rv_forward(&p->ref, p->q, p->k, p->v, ref_o, ref_lse);
    int ok;
    if (is_lowp(p)) {
        double *base_o = xcalloc(p->no, sizeof(double)), *base_lse = xcalloc(nl, sizeof(double));
        rv_forward(&p->base, p->q, p->k, p->v, base_o, base_lse);
        ok = vcmp_lowp(label, "O", o, ref_o, base_o, p->no);
        free(base_o);
        free(base_lse);
    } else {
        ok = vcmp_elementwise(label, "O", o, ref_o, p->no, 2e-5, 1e-4);
    }
    /* LSE is float32 in every storage type, computed from the stored inputs. A 16-bit softcap may
       take the tensor cores' tanh (cl/ptx.cl's ptx_tanh, as FlashAttention-2: PTX documents a
       relative error of about 2^-11), which moves the LSE by up to that error times the P-weighted
       size of the capped logits; 2^-10 leaves room for the float32 steps around it. */
    double *slack = NULL;
    if (is_lowp(p) && p->desc.softcap > 0.0f) {
        slack = xcalloc(nl, sizeof(double));
        rv_softcap_lse_weight(&p->ref, p->q, p->k, slack);
        for (size_t e = 0; e < nl; e++) slack[e] *= 0x1p-10;
    }
    ok &= vcmp_elementwise_slack(label, "LSE", lse, ref_lse, nl, 1e-5, 1e-5, slack);
    free(slack);
    free(o);
    free(lse);
    free(ref_o);
    free(ref_lse);
    return ok;
}

/*
 * dsinks_h = -sum_i exp(sink_h - lse_i) D_i, and the backward takes D_i = rowsum(dO_i * O_i)
 * from the stored O, as FlashAttention does, where the plain implementation sums P * dP.
 * Storing O rounds each element by at most the unit roundoff u, so D_i may differ by
 * u * sum_c |dO_ic O_ic|: the largest over heads of that, weighted as dsinks weighs D_i.
 */
static double dsinks_allowance(const vp_problem *p, flashcl_dtype dtype) {
    const rv_problem *r = &p->ref;
    size_t hq = r->heads_q, dv = r->head_dim_v, nl = rv_lse_count(r);
    double *o = xcalloc(p->no, sizeof(double)), *lse = xcalloc(nl, sizeof(double)), worst = 0.0;
    rv_forward(r, p->q, p->k, p->v, o, lse);
    for (size_t h = 0; h < hq; h++) {
        double sum = 0.0;
        for (size_t b = 0; b < r->batch; b++)
            for (size_t i = 0; i < rv_seq_len_q(r, b); i++) {
                size_t at = ((rv_seq_row_q(r, b) + i) * hq + h) * dv;
                double row = 0.0;
                for (size_t c = 0; c < dv; c++) row += fabs((double)p->dout[at + c] * o[at + c]);
                sum += exp((double)p->sinks[h] - lse[rv_lse_index(r, b, h, i)]) * row;
            }
        worst = fmax(worst, sum);
    }
    free(o);
    free(lse);
    return worst * 1.01 * st_epsilon(dtype); /* 1%: the stored O is within u of this O */
}

static double max_abs_f(const float *x, size_t n) {
    double m = 0.0;
    for (size_t e = 0; e < n; e++) m = fmax(m, fabs((double)x[e]));
    return m;
}

/*
 * The same rounding of the stored O in dQ and dK: dS_ij = P_ij (dP_ij - D_i), so an error
 * e_i in D_i moves dQ_i by scale e_i sum_j P_ij k_j and dK_j by scale sum_i P_ij e_i q_i
 * (tanh' <= 1 under softcap). With e_i <= u sum_c |dO_ic O_ic| =: u A_i, sum_j P_ij <= 1/(1-p)
 * (dropout's scaling) and sum_i P_ij (over a KV head's query heads) read off dV for dO = 1,
 * the bounds below hold for every element. They matter where dP - D cancels: rows that see
 * a few keys, one of them dominant (found by test_soak over random shapes).
 */
static void d_allowances(const vp_problem *p, flashcl_dtype dtype, double *dq_extra, double *dk_extra) {
    const rv_problem *r = &p->ref;
    size_t hq = r->heads_q, dv = r->head_dim_v, nl = rv_lse_count(r);
    double *o = xcalloc(p->no, sizeof(double)), *lse = xcalloc(nl, sizeof(double)), max_a = 0.0;
    rv_forward(r, p->q, p->k, p->v, o, lse);
    for (size_t row = 0; row < rv_rows_q(r) * hq; row++) {
        double a = 0.0;
        for (size_t c = 0; c < dv; c++) a += fabs((double)p->dout[row * dv + c] * o[row * dv + c]);
        max_a = fmax(max_a, a);
    }
    float *ones = xcalloc(p->no, sizeof(float));
    for (size_t e = 0; e < p->no; e++) ones[e] = 1.0f;
    double *g[3] = {xcalloc(p->nq, sizeof(double)), xcalloc(p->nk, sizeof(double)), xcalloc(p->nv, sizeof(double))};
    rv_backward(r, p->q, p->k, p->v, ones, g[0], g[1], g[2], NULL); /* g[2] = dV = column sums of P */
    double colsum = 0.0;
    for (size_t e = 0; e < p->nv; e++) colsum = fmax(colsum, g[2][e]);
    double e_d = 1.01 * st_epsilon(dtype) * max_a; /* 1%: the stored O is within u of this O */
    *dq_extra = r->scale * e_d * max_abs_f(p->k, p->nk) / (1.0 - r->dropout_p);
    *dk_extra = r->scale * e_d * max_abs_f(p->q, p->nq) * colsum;
    for (int t = 0; t < 3; t++) free(g[t]);
    free(ones);
    free(o);
    free(lse);
}

int vp_check_backward(vp_problem *p, cl_command_queue queue, cl_event after, const char *label) {
    size_t hq = p->desc.heads_q;
    float *got[3] = {xcalloc(p->nq, sizeof(float)), xcalloc(p->nk, sizeof(float)), xcalloc(p->nv, sizeof(float))};
    cl_mem bufs[3] = {p->dq_buf, p->dk_buf, p->dv_buf};
    size_t counts[3] = {p->nq, p->nk, p->nv};
    static const char *names[3] = {"dQ", "dK", "dV"};
    for (int t = 0; t < 3; t++) vp_read_storage(p, queue, bufs[t], counts[t], t == 0 ? after : NULL, got[t]);
    double *ref[3], *base[3];
    for (int t = 0; t < 3; t++) {
        ref[t] = xcalloc(counts[t], sizeof(double));
        base[t] = xcalloc(counts[t], sizeof(double));
    }
    double *ref_ds = xcalloc(hq, sizeof(double)), *base_ds = xcalloc(hq, sizeof(double));
    rv_backward(&p->ref, p->q, p->k, p->v, p->dout, ref[0], ref[1], ref[2], ref_ds);
    int lowp = is_lowp(p), ok = 1;
    if (lowp) rv_backward(&p->base, p->q, p->k, p->v, p->dout, base[0], base[1], base[2], base_ds);
    double extra[3] = {0.0, 0.0, 0.0}; /* dV does not depend on D */
    if (lowp) d_allowances(p, tolerance_dtype(p), &extra[0], &extra[1]);
    for (int t = 0; t < 3; t++) {
        if (lowp)
            ok &= vcmp_lowp_allowing(label, names[t], got[t], ref[t], base[t], counts[t], extra[t]);
        else
            ok &= vcmp_max_relative(label, names[t], got[t], ref[t], counts[t], GRAD_ABS_TOL, GRAD_REL_TOL);
    }
    if (p->c.sinks) {
        float *ds = xcalloc(hq, sizeof(float));
        REQUIRE_CL(clEnqueueReadBuffer(queue, p->dsinks_buf, CL_TRUE, 0, hq * sizeof(float), ds, 0, NULL, NULL));
        /* dsinks is float32, but it sums D = rowsum(dO * O) over the stored O. */
        if (lowp)
            ok &= vcmp_lowp_allowing(label, "dsinks", ds, ref_ds, base_ds, hq, dsinks_allowance(p, tolerance_dtype(p)));
        else
            ok &= vcmp_max_relative(label, "dsinks", ds, ref_ds, hq, GRAD_ABS_TOL, GRAD_REL_TOL);
        free(ds);
    }
    for (int t = 0; t < 3; t++) {
        free(got[t]);
        free(ref[t]);
        free(base[t]);
    }
    free(ref_ds);
    free(base_ds);
    return ok;
}
