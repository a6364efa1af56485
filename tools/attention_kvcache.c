/* The KV-cache call of `flashcl attention`; see attention_kvcache.h. */
#include "attention_kvcache.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <flashcl.h>

#include "device_info.h"
#include "kvcache_inputs.h"
#include "npy_outputs.h"
#include "storage_codec.h"
#include "timing.h"
#include "tool_errors.h"
#include "variant_inputs.h"

/* The device side of one call: every buffer, released together. */
typedef struct kvcache_device {
    flashcl_context *ctx;
    cl_mem q, o, lse, pool[2], k_new, v_new, cos, sin, scale[2];
    variant_buffers variants;
} kvcache_device;

static void device_release(kvcache_device *dev) {
    cl_mem all[] = {dev->q,     dev->o,   dev->lse, dev->pool[0],  dev->pool[1], dev->k_new,
                    dev->v_new, dev->cos, dev->sin, dev->scale[0], dev->scale[1]};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i)
        if (all[i]) clReleaseMemObject(all[i]);
    variant_buffers_release(&dev->variants);
    flashcl_context_destroy(dev->ctx);
    memset(dev, 0, sizeof *dev);
}

static bool is_fp8(const kv_options *kv) { return kv->cache_dtype != FLASHCL_CACHE_DTYPE_SAME; }

/* A buffer of `bytes` filled from data (NULL: uninitialised, for outputs). */
static int make_buffer(flashcl_context *ctx, const char *what, const void *data, size_t bytes, cl_mem *out) {
    cl_int err = CL_SUCCESS;
    cl_mem_flags flags = CL_MEM_READ_WRITE | (data ? CL_MEM_COPY_HOST_PTR : 0);
    *out = clCreateBuffer(flashcl_context_cl_context(ctx), flags, bytes ? bytes : 4, (void *)(uintptr_t)data, &err);
    if (err != CL_SUCCESS) {
        *out = NULL;
        return tool_failure("attention: cannot allocate %s (%zu bytes) on the device: %s", what, bytes,
                            flashcl_status_name(err));
    }
    return 0;
}

/* Floats in the storage type, on the device. */
static int upload_storage(flashcl_context *ctx, const char *what, flashcl_dtype dtype, const float *data, size_t n,
                          cl_mem *out) {
    const size_t es = flashcl_dtype_size(dtype);
    void *packed = malloc(n * es + 1);
    if (packed == NULL) return tool_failure("attention: out of host memory for %s", what);
    flashcl__to_storage(dtype, data, packed, n);
    int rc = make_buffer(ctx, what, packed, n * es, out);
    free(packed);
    return rc;
}

/* The kv head of element e of a [.., .., hkv, dim] pool: the index of its scale. */
static size_t scale_index(const kvcache_inputs *in, size_t e, size_t dim) {
    return in->scale_count > 1 ? (e / dim) % in->heads_kv : 0;
}

/* A pool in the cache's storage: the storage type, or fp8 of x / scale (rounded as the library's append rounds). */
static int upload_pool(flashcl_context *ctx, const kvcache_inputs *in, const kv_options *kv, flashcl_dtype dtype,
                       int which, cl_mem *out) {
    const npy_array *pool = which ? &in->v_cache : &in->k_cache;
    const char *what = which ? "--v-cache" : "--k-cache";
    if (!is_fp8(kv)) return upload_storage(ctx, what, dtype, pool->data, pool->count, out);
    const size_t dim = which ? in->head_dim_v : in->head_dim;
    const float *scales = which ? in->v_scale : in->k_scale;
    const int e4m3 = kv->cache_dtype == FLASHCL_CACHE_DTYPE_FP8_E4M3;
    unsigned char *bytes = malloc(pool->count + 1);
    if (bytes == NULL) return tool_failure("attention: out of host memory for %s", what);
    for (size_t e = 0; e < pool->count; ++e)
        bytes[e] = codec_float_to_fp8(pool->data[e] * (1.0f / scales[scale_index(in, e, dim)]), e4m3);
    int rc = make_buffer(ctx, what, bytes, pool->count, out);
    free(bytes);
    return rc;
}

/* A pool read back as float32 values (fp8 times its scale). */
static int read_pool(const kvcache_device *dev, const kvcache_inputs *in, const kv_options *kv, flashcl_dtype dtype,
                     int which, float *out) {
    const npy_array *pool = which ? &in->v_cache : &in->k_cache;
    const size_t elem = is_fp8(kv) ? 1 : flashcl_dtype_size(dtype), bytes = pool->count * elem;
    void *raw = malloc(bytes + 1);
    if (raw == NULL) return tool_failure("attention: out of host memory for the cache outputs");
    cl_int err =
        clEnqueueReadBuffer(flashcl_context_queue(dev->ctx), dev->pool[which], CL_TRUE, 0, bytes, raw, 0, NULL, NULL);
    if (err == CL_SUCCESS && !is_fp8(kv)) flashcl__from_storage(dtype, raw, out, pool->count);
    if (err == CL_SUCCESS && is_fp8(kv)) {
        const size_t dim = which ? in->head_dim_v : in->head_dim;
        const float *scales = which ? in->v_scale : in->k_scale;
        const int e4m3 = kv->cache_dtype == FLASHCL_CACHE_DTYPE_FP8_E4M3;
        const unsigned char *codes = raw;
        for (size_t e = 0; e < pool->count; ++e)
            out[e] = codec_fp8_to_float(codes[e], e4m3) * scales[scale_index(in, e, dim)];
    }
    free(raw);
    if (err != CL_SUCCESS)
        return tool_failure("attention: reading %s back failed: %s", which ? "--v-cache" : "--k-cache",
                            flashcl_status_name(err));
    return 0;
}

/* Every input on the device, and the cache description pointing at it. */
static int upload(const kvcache_request *req, const kvcache_inputs *in, const flashcl_attention_desc *d,
                  kvcache_device *dev, flashcl_kv_cache *cache) {
    const kv_options *kv = req->kv;
    const flashcl_dtype dtype = d->dtype ? d->dtype : FLASHCL_DTYPE_F32;
    const size_t es = flashcl_dtype_size(dtype), rows_o = in->batch * in->seqlen_q * in->heads_q;
    int rc = upload_storage(dev->ctx, "--q", dtype, in->q.data, in->q.count, &dev->q);
    if (rc == 0) rc = make_buffer(dev->ctx, "O", NULL, rows_o * in->head_dim_v * es, &dev->o);
    if (rc == 0) rc = make_buffer(dev->ctx, "LSE", NULL, rows_o * sizeof(float), &dev->lse);
    for (int which = 0; which < 2 && rc == 0; ++which)
        rc = upload_pool(dev->ctx, in, kv, dtype, which, &dev->pool[which]);
    if (rc == 0 && in->seqlen_new) {
        rc = upload_storage(dev->ctx, "--k-new", dtype, in->k_new.data, in->k_new.count, &dev->k_new);
        if (rc == 0) rc = upload_storage(dev->ctx, "--v-new", dtype, in->v_new.data, in->v_new.count, &dev->v_new);
    }
    if (rc == 0 && in->rotary_dim) {
        rc = make_buffer(dev->ctx, "--rotary-cos", in->cos.data, in->cos.count * sizeof(float), &dev->cos);
        if (rc == 0) rc = make_buffer(dev->ctx, "--rotary-sin", in->sin.data, in->sin.count * sizeof(float), &dev->sin);
    }
    if (rc == 0 && is_fp8(kv)) {
        rc = make_buffer(dev->ctx, "--k-scale", in->k_scale, in->scale_count * sizeof(float), &dev->scale[0]);
        if (rc == 0)
            rc = make_buffer(dev->ctx, "--v-scale", in->v_scale, in->scale_count * sizeof(float), &dev->scale[1]);
    }
    if (rc != 0) return rc;

    *cache = (flashcl_kv_cache)FLASHCL_KV_CACHE_INIT;
    cache->k = flashcl_tensor_bshd(dev->pool[0], in->rows, in->heads_kv, in->head_dim);
    cache->v = flashcl_tensor_bshd(dev->pool[1], in->rows, in->heads_kv, in->head_dim_v);
    if (in->paged) {
        cache->num_pages = in->slots;
        cache->page_size = in->rows;
        cache->block_table = in->block_table.bytes;
        cache->max_pages = in->max_pages;
    } else {
        cache->capacity = in->rows;
        cache->batch_cache = in->slots;
        cache->cache_batch_idx = in->batch_idx.bytes;
    }
    cache->cache_seqlens = in->seqlens.bytes;
    cache->cache_leftpad = in->leftpad.bytes;
    if (in->seqlen_new) {
        cache->k_new = flashcl_tensor_bshd(dev->k_new, in->seqlen_new, in->heads_kv, in->head_dim);
        cache->v_new = flashcl_tensor_bshd(dev->v_new, in->seqlen_new, in->heads_kv, in->head_dim_v);
        cache->seqlen_new = in->seqlen_new;
    }
    if (in->rotary_dim) {
        cache->rotary_cos = dev->cos;
        cache->rotary_sin = dev->sin;
        cache->seqlen_ro = in->seqlen_ro;
        cache->rotary_dim = in->rotary_dim;
        cache->rotary_interleaved = kv->rotary_interleaved;
    }
    cache->dtype = kv->cache_dtype;
    if (is_fp8(kv)) {
        cache->k_scale = dev->scale[0];
        cache->v_scale = dev->scale[1];
        cache->scale_per_head = in->scale_count > 1;
    }
    return 0;
}

/* The host results: O, LSE and the caches after the call. */
typedef struct kvcache_results {
    float *o, *lse, *k_cache, *v_cache;
} kvcache_results;

static int read_results(const kvcache_request *req, const kvcache_inputs *in, const flashcl_attention_desc *d,
                        const kvcache_device *dev, kvcache_results *r) {
    const flashcl_dtype dtype = d->dtype ? d->dtype : FLASHCL_DTYPE_F32;
    const size_t rows_o = in->batch * in->seqlen_q * in->heads_q, n_o = rows_o * in->head_dim_v;
    const size_t o_bytes = n_o * flashcl_dtype_size(dtype);
    void *raw = malloc(o_bytes);
    r->o = malloc(n_o * sizeof(float));
    r->lse = malloc(rows_o * sizeof(float));
    r->k_cache = req->kv->k_cache_out ? malloc(in->k_cache.count * sizeof(float)) : NULL;
    r->v_cache = req->kv->v_cache_out ? malloc(in->v_cache.count * sizeof(float)) : NULL;
    if (!raw || !r->o || !r->lse || (req->kv->k_cache_out && !r->k_cache) || (req->kv->v_cache_out && !r->v_cache)) {
        free(raw);
        return tool_failure("attention: out of host memory for the outputs");
    }
    cl_command_queue queue = flashcl_context_queue(dev->ctx);
    cl_int err = clEnqueueReadBuffer(queue, dev->o, CL_TRUE, 0, o_bytes, raw, 0, NULL, NULL);
    if (err == CL_SUCCESS)
        err = clEnqueueReadBuffer(queue, dev->lse, CL_TRUE, 0, rows_o * sizeof(float), r->lse, 0, NULL, NULL);
    if (err == CL_SUCCESS) flashcl__from_storage(dtype, raw, r->o, n_o);
    free(raw);
    if (err != CL_SUCCESS) return tool_failure("attention: reading the outputs failed: %s", flashcl_status_name(err));
    int rc = 0;
    if (r->k_cache) rc = read_pool(dev, in, req->kv, dtype, 0, r->k_cache);
    if (rc == 0 && r->v_cache) rc = read_pool(dev, in, req->kv, dtype, 1, r->v_cache);
    return rc;
}

static int write_results(const kvcache_request *req, const kvcache_inputs *in, const kvcache_results *r) {
    const size_t o_shape[4] = {in->batch, in->seqlen_q, in->heads_q, in->head_dim_v};
    const size_t lse_shape[3] = {in->batch, in->heads_q, in->seqlen_q};
    const npy_output outputs[] = {
        {"--out", req->out_path, o_shape, 4, r->o},
        {"--lse", req->lse_path, lse_shape, 3, r->lse},
        {"--k-cache-out", req->kv->k_cache_out, in->k_cache.shape, 4, r->k_cache},
        {"--v-cache-out", req->kv->v_cache_out, in->v_cache.shape, 4, r->v_cache},
    };
    return npy_outputs_write(outputs, sizeof outputs / sizeof outputs[0]);
}

static void print_verbose(const kvcache_request *req, const kvcache_inputs *in, const flashcl_attention_desc *d,
                          flashcl_context *ctx, double seconds) {
    char device[256];
    device_string_into(flashcl_context_device(ctx), CL_DEVICE_NAME, device, sizeof device);
    static const char *const dtypes[] = {"f32", "f32", "f16", "bf16"};
    printf("flashcl: attention (KV cache): b=%zu sq=%zu hq=%zu hkv=%zu d=%zu d_v=%zu %s, %s cache %zu x %zu rows, "
           "cache %s%s%s, %s, %.3f ms",
           in->batch, in->seqlen_q, in->heads_q, in->heads_kv, in->head_dim, in->head_dim_v, dtypes[d->dtype],
           in->paged ? "paged" : "contiguous", in->slots, in->rows, kv_cache_dtype_name(req->kv->cache_dtype),
           in->seqlen_new ? ", append" : "", in->rotary_dim ? ", rotary" : "", device, seconds * 1e3);
    printf("; wrote %s", req->out_path);
    const char *more[] = {req->lse_path, req->kv->k_cache_out, req->kv->v_cache_out};
    for (size_t i = 0; i < sizeof more / sizeof more[0]; ++i)
        if (more[i]) printf(", %s", more[i]);
    putchar('\n');
}

/* The descriptor from the inputs' sizes and the options; the variant arrays it points at. */
static int describe(const kvcache_request *req, const kvcache_inputs *in, flashcl_attention_desc *d,
                    variant_arrays *arrays) {
    *d = (flashcl_attention_desc)FLASHCL_ATTENTION_DESC_INIT;
    d->batch = in->batch;
    d->heads_q = in->heads_q;
    d->heads_kv = in->heads_kv;
    d->seqlen_q = in->seqlen_q;
    /* Ignored by the cache call (the lengths come from the cache); sizes the variant arrays' checks. */
    d->seqlen_k = in->paged ? in->max_pages * in->rows : in->rows;
    d->head_dim = in->head_dim;
    d->head_dim_v = in->head_dim_v;
    d->scale = req->scale;
    d->causal = req->causal;
    d->num_splits = req->kv->num_splits;
    if (variant_is_varlen(req->var))
        return tool_usage_error("%s: the KV-cache call takes no varlen batch (each sequence's length is in "
                                "--cache-seqlens)",
                                req->var->cu_q ? "--cu-seqlens-q" : "--varlen");
    uint64_t state = VARIANT_RANDOM_SEED;
    return variant_arrays_prepare(req->var, d, &state, arrays);
}

int attention_kvcache(const kvcache_request *req) {
    kvcache_inputs in;
    int rc = kvcache_inputs_load(req->q_path, req->kv, &in);
    if (rc != 0) return rc;
    flashcl_attention_desc desc;
    variant_arrays arrays;
    memset(&arrays, 0, sizeof arrays);
    rc = describe(req, &in, &desc, &arrays);
    kvcache_device dev;
    memset(&dev, 0, sizeof dev);
    if (rc == 0) {
        char err[1024] = "";
        flashcl_status status = flashcl_context_create(&dev.ctx, req->device, err, sizeof err);
        if (status != FLASHCL_SUCCESS) rc = tool_status_error(NULL, status, err);
    }
    if (rc == 0) rc = variant_buffers_attach(dev.ctx, &arrays, false, &desc, &dev.variants);
    flashcl_kv_cache cache;
    if (rc == 0) rc = upload(req, &in, &desc, &dev, &cache);
    kvcache_results results;
    memset(&results, 0, sizeof results);
    double seconds = 0.0;
    if (rc == 0) {
        const flashcl_tensor q = flashcl_tensor_bshd(dev.q, in.seqlen_q, in.heads_q, in.head_dim);
        const flashcl_tensor o = flashcl_tensor_bshd(dev.o, in.seqlen_q, in.heads_q, in.head_dim_v);
        double start = wall_seconds();
        flashcl_status status = flashcl_forward_kvcache(dev.ctx, &desc, &q, &cache, &o, dev.lse, 0, 0, NULL, NULL);
        if (status == FLASHCL_SUCCESS) status = (flashcl_status)clFinish(flashcl_context_queue(dev.ctx));
        seconds = wall_seconds() - start;
        /* The library names the field it refused (cache->block_table[1][0], cache->cache_seqlens[0], ...). */
        if (status != FLASHCL_SUCCESS) rc = tool_status_error(NULL, status, flashcl_last_error(dev.ctx));
    }
    if (rc == 0) rc = read_results(req, &in, &desc, &dev, &results);
    if (rc == 0) rc = write_results(req, &in, &results);
    if (rc == 0 && req->verbose) print_verbose(req, &in, &desc, dev.ctx, seconds);
    free(results.o);
    free(results.lse);
    free(results.k_cache);
    free(results.v_cache);
    device_release(&dev);
    variant_arrays_free(&arrays);
    kvcache_inputs_free(&in);
    return rc;
}
