/*
 * FlashCL: exact, IO-aware attention (FlashAttention) for any OpenCL device.
 *
 * One header. Every call returns a flashcl_status; the library never prints,
 * exits or aborts. OpenCL errors are passed through unchanged (negative values
 * above -10000); FlashCL's own codes are pinned below.
 *
 * Thread safety: a flashcl_context is used by one thread at a time. Separate
 * contexts are independent and may be used from separate threads at once
 * (they may even share the application's cl_context). The version and status
 * functions are always safe.
 *
 * Conventions shared by every call:
 *   - O = softmax(scale * Q K^T [+ causal mask]) V, accumulated in float32.
 *   - LSE is the natural-log log-sum-exp of each row of scale * Q K^T
 *     (after masking), float32, shape [batch, heads_q, seqlen_q] contiguous.
 *     (FlashInfer uses base 2; FlashCL, FlashAttention and PyTorch use base e.)
 *   - Causal masking is aligned bottom-right, as FlashAttention 2.1+: key j is
 *     visible to query i iff j <= i + seqlen_k - seqlen_q. A query row with no
 *     visible key gets O = 0 and LSE = -inf; one that a NaN or infinite input
 *     reaches gets O and LSE NaN.
 *   - GQA/MQA: heads_q % heads_kv == 0; query head h reads kv head
 *     h / (heads_q / heads_kv) (contiguous groups, like repeat_interleave).
 *   - Device calls are asynchronous: they take a wait list and can return an
 *     event for their last command. They never call clFinish on the queue.
 */
#ifndef FLASHCL_H
#define FLASHCL_H

#include <stddef.h>
#include <stdint.h>

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#if defined(__APPLE__)
#include <OpenCL/opencl.h>
#else
#include <CL/cl.h>
#endif

#if defined(_WIN32) && defined(FLASHCL_SHARED)
#if defined(FLASHCL_BUILD)
#define FLASHCL_API __declspec(dllexport)
#else
#define FLASHCL_API __declspec(dllimport)
#endif
#elif defined(__GNUC__) && defined(FLASHCL_BUILD)
#define FLASHCL_API __attribute__((visibility("default")))
#else
#define FLASHCL_API
#endif

#define FLASHCL_VERSION_MAJOR 0
#define FLASHCL_VERSION_MINOR 2
#define FLASHCL_VERSION_PATCH 0
#define FLASHCL_VERSION_NUMBER (FLASHCL_VERSION_MAJOR * 10000 + FLASHCL_VERSION_MINOR * 100 + FLASHCL_VERSION_PATCH)
#define FLASHCL_STRINGIFY_(x) #x
#define FLASHCL_STRINGIFY(x) FLASHCL_STRINGIFY_(x)
#define FLASHCL_VERSION_STRING                                                                                         \
    FLASHCL_STRINGIFY(FLASHCL_VERSION_MAJOR)                                                                           \
    "." FLASHCL_STRINGIFY(FLASHCL_VERSION_MINOR) "." FLASHCL_STRINGIFY(FLASHCL_VERSION_PATCH)

/* Largest head dimension (of q/k and of v) the kernels are built for: 576
   covers DeepSeek MLA's d_qk = 576, d_v = 512. */
#define FLASHCL_MAX_HEAD_DIM 576
/* The largest |desc.scale|: the kernels scale by scale * log2(e) in float32 (FLT_MAX / log2(e) is 2.3588e38). */
#define FLASHCL_MAX_SCALE 2.35e38

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- status */

/*
 * FlashCL's own status codes. The numbers are pinned: they never change.
 * Groups: -10000s invalid argument (named after the field), -10100s
 * unsupported, -10200s build / plan, -10300s cache and I/O, -10400s memory.
 * Values from -1 to -9999 are OpenCL's, passed through unchanged: the core
 * codes (-1 to -72) and the extensions' (-1000 and below, e.g. cl_khr_icd's
 * CL_PLATFORM_NOT_FOUND_KHR = -1001), which FlashCL's own codes never reuse.
 * (Before 0.2 FlashCL used -1000 to -1401, which collided with them.)
 */
#define FLASHCL_STATUS_MAP(XX)                                                                                         \
    XX(SUCCESS, 0, "success")                                                                                          \
    XX(ERR_INVALID_ARGUMENT, -10000, "a required pointer argument is NULL")                                            \
    XX(ERR_INVALID_CONTEXT, -10001, "the FlashCL context is NULL or unusable")                                         \
    XX(ERR_INVALID_DTYPE, -10002, "unknown data type")                                                                 \
    XX(ERR_INVALID_SHAPE, -10003, "batch, heads or sequence length is zero or too large")                              \
    XX(ERR_INVALID_HEADS, -10004, "heads_q is not a multiple of heads_kv")                                             \
    XX(ERR_INVALID_HEAD_DIM, -10005, "head_dim is zero or larger than FLASHCL_MAX_HEAD_DIM")                           \
    XX(ERR_INVALID_SCALE, -10006, "scale is NaN or beyond 2.35e38")                                                    \
    XX(ERR_INVALID_BUFFER, -10007, "a tensor buffer is NULL or belongs to another OpenCL context")                     \
    XX(ERR_INVALID_STRIDE, -10008, "a tensor stride lets rows or heads overlap")                                       \
    XX(ERR_OUT_OF_BOUNDS, -10009, "a tensor view reaches past the end of its buffer")                                  \
    XX(ERR_INVALID_QUEUE, -10010, "the command queue belongs to another context or device, or lacks profiling")        \
    XX(ERR_INVALID_DEVICE_SPEC, -10011, "the device specification matches no OpenCL device")                           \
    XX(ERR_INVALID_TILE, -10012, "the FLASHCL_TILE override cannot be parsed or does not fit")                         \
    XX(ERR_INVALID_PATH, -10013, "unknown attention path")                                                             \
    XX(ERR_ALIASED_OUTPUT, -10014, "an output tensor overlaps an input or another output")                             \
    XX(ERR_INVALID_VARIANT, -10015, "a variant field (window, softcap, dropout, bias, mask, varlen) is invalid")       \
    XX(ERR_INVALID_STRUCT_SIZE, -10016, "the descriptor's struct_size is 0 or smaller than any FlashCL descriptor")    \
    XX(ERR_TRACE_OFF, -10017, "the kernel trace is not recording (flashcl_trace_kernels(ctx, 1) starts it)")           \
    XX(ERR_UNSUPPORTED_DTYPE, -10100, "the data type is not supported by this path yet")                               \
    XX(ERR_NO_DEVICE, -10101, "no OpenCL platform or device is available")                                             \
    XX(ERR_UNSUPPORTED_DEVICE, -10102, "the device lacks a capability FlashCL needs")                                  \
    XX(ERR_UNSUPPORTED_VARIANT, -10103, "this path does not support a requested attention variant")                    \
    XX(ERR_UNSUPPORTED_FIELD, -10104, "the descriptor sets a field this version of FlashCL does not know")             \
    XX(ERR_BUILD_FAILED, -10200, "an OpenCL program failed to build (see the build log)")                              \
    XX(ERR_NO_PLAN, -10201, "no tile plan fits this device")                                                           \
    XX(ERR_KERNEL_SOURCE, -10202, "a kernel source file could not be read")                                            \
    XX(ERR_CACHE_IO, -10300, "the program binary cache could not be read or written")                                  \
    XX(ERR_MPI, -10350, "an MPI call failed in the ring-attention component (FlashCL::mpi)")                           \
    XX(ERR_OUT_OF_HOST_MEMORY, -10400, "host memory allocation failed")                                                \
    XX(ERR_OUT_OF_DEVICE_MEMORY, -10401, "the device cannot hold the buffers this call needs")

typedef enum flashcl_status {
#define FLASHCL_STATUS_ENUM_(name, value, text) FLASHCL_##name = value,
    FLASHCL_STATUS_MAP(FLASHCL_STATUS_ENUM_)
#undef FLASHCL_STATUS_ENUM_
        FLASHCL_STATUS_FORCE_INT_ = -0x7fffffff
} flashcl_status;

/* "FLASHCL_ERR_INVALID_HEADS", "CL_OUT_OF_RESOURCES", or "UNKNOWN". Static storage. */
FLASHCL_API const char *flashcl_status_name(int status);
/* One-line description. Static storage. */
FLASHCL_API const char *flashcl_status_string(int status);

FLASHCL_API int flashcl_version_number(void);
FLASHCL_API const char *flashcl_version_string(void);

/* --------------------------------------------------------------- context */

/*
 * Threads: a context is not thread-safe. Use one context per thread, or
 * serialise the calls on a shared context. Separate contexts share nothing
 * inside FlashCL (they may share the application's cl_context). There is no
 * internal lock on purpose: a call's last error, scratch buffers and plans
 * live in the context, so a lock would serialise every call on it anyway and
 * still leave flashcl_last_error racy; a context per thread costs one program
 * build, which the on-disk cache makes cheap. (tests/test_threads.c)
 */
typedef struct flashcl_context flashcl_context;

/*
 * Creates a context on a device FlashCL picks:
 *   device_spec (or, when NULL or "", the FLASHCL_DEVICE environment variable):
 *     "P:D"  platform index P, device index D (as `flashcl info` lists them)
 *     text   the first device whose name or vendor, or whose platform's name or
 *            vendor, contains it (case-insensitive; "pocl" finds POCL, whose
 *            platform vendor is "The pocl project")
 *   with neither: the first GPU, else the first device of any type.
 * FlashCL creates and owns the cl_context and an in-order queue.
 * On failure *out is NULL and there is no context to ask flashcl_last_error,
 * so the detailed message is written to err_buf (when not NULL, err_buf_size
 * bytes at most) beside the returned status.
 */
FLASHCL_API flashcl_status flashcl_context_create(flashcl_context **out, const char *device_spec, char *err_buf,
                                                  size_t err_buf_size);

/*
 * Creates a context around the application's own queue: FlashCL uses that
 * queue, its cl_context and its device, retains them while alive and releases
 * only its own references on destroy. Out-of-order queues are supported:
 * FlashCL chains its own commands with events.
 */
FLASHCL_API flashcl_status flashcl_context_create_from_queue(flashcl_context **out, cl_command_queue queue);

/* Switches the queue later calls use; it must belong to the same cl_context and device. */
FLASHCL_API flashcl_status flashcl_context_set_queue(flashcl_context *ctx, cl_command_queue queue);

/* Releases everything FlashCL created. NULL is a no-op. It does not wait: calls already enqueued
   still run (OpenCL keeps the objects they use alive until they finish), so wait for their events
   (or clFinish the queue) before releasing the buffers they read or write, or before the process
   exits. */
FLASHCL_API void flashcl_context_destroy(flashcl_context *ctx);

/*
 * The detailed message of the last failed call on this context: names the
 * bad field, the OpenCL call and error, or carries the build log. "" when the
 * last call succeeded. Valid until the next call on the context.
 */
FLASHCL_API const char *flashcl_last_error(const flashcl_context *ctx);

FLASHCL_API cl_command_queue flashcl_context_queue(const flashcl_context *ctx);
FLASHCL_API cl_context flashcl_context_cl_context(const flashcl_context *ctx);
FLASHCL_API cl_device_id flashcl_context_device(const flashcl_context *ctx);

/* Bytes of device scratch memory the context currently holds (the standard
   path's N x N buffers, the backward's per-row D). It grows on demand. */
FLASHCL_API size_t flashcl_context_scratch_bytes(const flashcl_context *ctx);
/* Frees that scratch now (OpenCL frees each buffer once the commands using it
   have finished); later calls allocate again. NULL is a no-op. */
FLASHCL_API void flashcl_context_release_scratch(flashcl_context *ctx);

/*
 * Where a call's time goes: the device time of each kernel the context's calls launch
 * (kernels only, not buffer copies), as CUDA events or a profiler would show it.
 * flashcl_trace_kernels(ctx, 1) starts recording every launch (its kernel's name and its
 * event), 0 stops and forgets what was not read. It needs a queue with profiling
 * (FLASHCL_PROFILING=1 when FlashCL makes the queue, CL_QUEUE_PROFILING_ENABLE in the
 * application's own): else FLASHCL_ERR_INVALID_QUEUE, naming the property. At most
 * FLASHCL_TRACE_MAX launches are kept until read; later ones are counted, not kept.
 * Launches a call made before one of its launches failed stay in the trace (they run).
 */
#define FLASHCL_TRACE_MAX 4096
typedef struct flashcl_kernel_time {
    /* The kernel's function name, e.g. "flash_bwd_dot". */
    char name[64];
    /* end - start in ms; NaN when the device gave no time (a launch that failed on the
       device, or a queue without profiling switched in since). */
    double ms;
    /* CL_PROFILING_COMMAND_START / _END on the device's clock (gaps and overlaps between
       kernels); 0 where ms is NaN. */
    unsigned long long start_ns, end_ns;
} flashcl_kernel_time;
FLASHCL_API flashcl_status flashcl_trace_kernels(flashcl_context *ctx, int on);
/* Waits for the recorded launches (so it blocks while a traced call waits on an event the
   application has not set), writes the first min(cap, kept) of them to out in launch order,
   sets *written to that number and *launched (when not NULL) to every launch since the last
   read, kept or not; then forgets them all (pass cap = FLASHCL_TRACE_MAX to get every kept
   one). Recording goes on. out may be NULL when cap is 0. Not recording: FLASHCL_ERR_TRACE_OFF. */
FLASHCL_API flashcl_status flashcl_trace_read(flashcl_context *ctx, flashcl_kernel_time *out, size_t cap,
                                              size_t *written, size_t *launched);

/* The on-disk program cache directory in use ("" when disabled). */
FLASHCL_API const char *flashcl_context_cache_dir(const flashcl_context *ctx);

/*
 * Tuned plans (`flashcl tune`): a per-device file next to the program cache,
 * read once when the context is created; the plan chain consults it after
 * FLASHCL_TILE and before the built-in table (plan origin "tuned").
 * FLASHCL_TUNING=PATH reads (and `flashcl tune` writes) another file,
 * FLASHCL_TUNING=off (or 0) none. A file is used only if it starts with `identity`
 * (device, driver, platform and library version) and ends with the line
 * "checksum=<16 hex digits of flashcl_tuning_checksum(every byte before it)>";
 * otherwise it is ignored and `note` (also appended to every plan's reason)
 * says why.
 */
typedef struct flashcl_tuning_info {
    size_t struct_size;  /* sizeof(flashcl_tuning_info), set by the caller */
    char path[1100];     /* the file this context reads ("" with no cache directory or FLASHCL_TUNING=off) */
    char identity[4096]; /* the header lines a file must start with, newline-terminated */
    size_t entries;      /* tuned plans read from it */
    char note[640];      /* why the file was ignored; "" when read or absent */
    int off;             /* 1 when FLASHCL_TUNING turns tuning files off ("off" in any case, or "0"; path is then "") */
} flashcl_tuning_info;

/* out NULL: FLASHCL_ERR_INVALID_ARGUMENT; out->struct_size not sizeof(flashcl_tuning_info):
   FLASHCL_ERR_INVALID_STRUCT_SIZE; either is named in flashcl_last_error(ctx). */
FLASHCL_API flashcl_status flashcl_tuning_query(const flashcl_context *ctx, flashcl_tuning_info *out);
/* FNV-1a (64-bit) of text, the tuning file's checksum. */
FLASHCL_API uint64_t flashcl_tuning_checksum(const char *text, size_t length);

/* --------------------------------------------------------------- tensors */

/*
 * A view of a 4-D tensor [batch, heads, rows, head_dim] inside a cl_mem.
 * offset and strides are in elements; the last dimension is contiguous.
 * [b, s, h, d] (FlashAttention):  stride_batch = s*h*d, stride_head = d,   stride_row = h*d
 * [b, h, s, d] (PyTorch SDPA):    stride_batch = h*s*d, stride_head = s*d, stride_row = d
 * All three strides zero means the packed [b, s, h, d] layout.
 */
typedef struct flashcl_tensor {
    cl_mem buffer;
    size_t offset;
    size_t stride_batch;
    size_t stride_head;
    size_t stride_row;
} flashcl_tensor;

/* Packed [b, s, h, d] view (what FlashAttention's flash_attn_func takes). */
FLASHCL_API flashcl_tensor flashcl_tensor_bshd(cl_mem buffer, size_t seqlen, size_t heads, size_t head_dim);
/* Packed [b, h, s, d] view (what PyTorch's scaled_dot_product_attention takes). */
FLASHCL_API flashcl_tensor flashcl_tensor_bhsd(cl_mem buffer, size_t seqlen, size_t heads, size_t head_dim);

/* ------------------------------------------------------------ descriptor */

typedef enum flashcl_dtype {
    FLASHCL_DTYPE_DEFAULT = 0, /* float32 */
    FLASHCL_DTYPE_F32 = 1,
    FLASHCL_DTYPE_F16 = 2, /* IEEE half storage (vload_half/vstore_half), float32 accumulation */
    FLASHCL_DTYPE_BF16 = 3 /* bfloat16 storage (round-to-nearest-even on store), float32 accumulation */
} flashcl_dtype;

/* Bytes per element of a storage type (0 for an unknown value). */
FLASHCL_API size_t flashcl_dtype_size(flashcl_dtype dtype);

/*
 * A [batch|1, heads|1, seqlen_q, seqlen_k] matrix (additive bias, boolean
 * mask) or [batch|1, heads|1, ceil(seqlen_q/block_q), ceil(seqlen_k/block_k)]
 * block mask in a cl_mem. With varlen, seqlen_q/seqlen_k here mean
 * max_seqlen_q/max_seqlen_k, rows and columns count within each sequence and
 * batch is the sequence index. Offsets and strides are in elements; the last
 * dimension is contiguous. A zero stride_batch or stride_head broadcasts over
 * that dimension; all three strides zero means packed and not broadcast.
 */
typedef struct flashcl_matrix {
    cl_mem buffer; /* NULL = feature off */
    size_t offset;
    size_t stride_batch;
    size_t stride_head;
    size_t stride_row;
} flashcl_matrix;

/* Which implementation a call or plan query runs (the descriptor's `path`). */
typedef enum flashcl_path {
    FLASHCL_PATH_FLASH = 0,   /* the fastest kernel family that covers the call; O(N) extra memory */
    FLASHCL_PATH_STANDARD = 1 /* S = QK^T, softmax, O = PV through global memory: the baseline */
} flashcl_path;

/*
 * One attention problem. Start from FLASHCL_ATTENTION_DESC_INIT, then set the
 * sizes: zero fields mean defaults, and a zeroed variant field means the
 * feature is off. Order of the score terms (all in float32): s = scale * q.k;
 * softcap; + ALiBi + bias; masks (causal/window, mask, block mask) give -inf;
 * softmax with the sinks in the denominator; dropout on the probabilities;
 * O = P V.
 *
 * The descriptor grows at its end from one version to the next. struct_size
 * (set by FLASHCL_ATTENTION_DESC_INIT) tells the library which fields the
 * caller's header had: fields past it read as zero (off), so a program built
 * against an older header keeps working; fields a newer header added that
 * this library does not know must be zero (else FLASHCL_ERR_UNSUPPORTED_FIELD).
 * struct_size 0 (a descriptor only zeroed) is FLASHCL_ERR_INVALID_STRUCT_SIZE.
 */
typedef struct flashcl_attention_desc {
    size_t struct_size; /* sizeof(flashcl_attention_desc) where the caller was compiled */
    flashcl_dtype
        dtype;    /* storage of q, k, v, o (and dout, dq, dk, dv); 0 = float32. LSE, bias, slopes, sinks are float32. */
    size_t batch; /* >= 1 (with varlen: the number of sequences) */
    size_t heads_q;  /* >= 1 */
    size_t heads_kv; /* 0 = heads_q; heads_q % heads_kv == 0 */
    size_t seqlen_q; /* >= 1 (with varlen: total query rows of the packed views) */
    size_t seqlen_k; /* 0 = seqlen_q (with varlen: total key rows) */
    size_t head_dim; /* of q and k: 1..FLASHCL_MAX_HEAD_DIM */
    float scale;     /* 0 = 1/sqrt(head_dim); any other value of magnitude <= FLASHCL_MAX_SCALE, negative too */
    int causal;      /* nonzero: bottom-right aligned causal mask (= window (-1, 0), or (left, 0) with a window:
                        window_right, still checked, is then taken as 0, as flash_attn does under causal) */

    size_t head_dim_v; /* of v, o (and dv, dout): 0 = head_dim; 1..FLASHCL_MAX_HEAD_DIM */

    /* Sliding window, FlashAttention-2 semantics, aligned like causal: key j is
       visible to query i iff i + sk - sq - window_left <= j <= i + sk - sq + window_right.
       -1 = unbounded on that side. Only read when `window` is nonzero. */
    int window;
    int window_left, window_right;

    float softcap; /* > 0 (at most 1e37): s = softcap * tanh(scale * q.k / softcap); 0 = off */

    /* ALiBi: float32 slopes, [heads_q] (alibi_stride_batch 0) or [batch, heads_q]
       (alibi_stride_batch = heads_q); bias -slope * |i + sk - sq - j| after scale and softcap. */
    cl_mem alibi_slopes;
    size_t alibi_offset, alibi_stride_batch;

    /* Attention sinks: float32 [heads_q] logits added to each row's softmax
       denominator only (gpt-oss); a row with no visible key then gets O = 0 and
       LSE = its sink. Each sink is finite or -inf (no sink); the library reads
       them on the device only, so +inf or NaN is not refused and makes its
       head's rows NaN (Python refuses them). The backward writes
       d(loss)/d(sinks) to dsinks ([heads_q] floats from dsinks_offset) when
       dsinks is not NULL. */
    cl_mem sinks;
    size_t sinks_offset;
    cl_mem dsinks;
    size_t dsinks_offset;

    /* Dropout on the attention probabilities: element (b, h, i, j) is kept iff
       the 16 Philox4x32-10 bits for that absolute position, keyed by seed and
       offset, are >= t = dropout_p * 2^16 rounded (flashcl_dropout_mask has the
       layout); kept values are scaled by 2^16 / (2^16 - t), the inverse of the
       keep probability, which is 1/(1 - p) up to p's rounding to 2^-16.
       The mask depends only on (seed, offset, b, h, i, j): not on tiles or device. */
    float dropout_p; /* 0 = off; 0 <= p < 1 */
    uint64_t dropout_seed;
    uint64_t dropout_offset;

    flashcl_matrix bias;       /* float32 additive bias [b|1, h|1, sq, sk] (after scale and softcap); values
                                  below -FLT_MAX / log2(e), about -2.36e38, count as -inf (README: Variants) */
    flashcl_matrix mask;       /* uchar boolean mask [b|1, h|1, sq, sk]: nonzero = attend */
    flashcl_matrix block_mask; /* uchar [b|1, h|1, ceil(sq/block_q), ceil(sk/block_k)]: 0 = block skipped */
    size_t block_q, block_k;   /* block-mask block sizes (required with block_mask) */

    /* Variable-length batches (flash_attn_varlen_func): int32 cumulative offsets
       [batch + 1] into the packed rows; sequence b has rows cu[b] .. cu[b+1]-1.
       Views are [total, heads, dim] (stride_batch must be 0), LSE is [heads_q, total_q].
       Invalid offsets cannot cause out-of-bounds access: kernels clamp them to the totals.
       max_seqlen_q/k bound the per-sequence lengths (0 = the totals): rows of a longer sequence
       are not computed. With a bias, mask or block mask (whose rows and columns max_seqlen_q/k
       are) the call reads both arrays back (a blocking read after wait_list: do not pass a
       user event completed only after the call returns) and refuses a longer sequence with
       FLASHCL_ERR_INVALID_VARIANT naming cu_seqlens_q/k. */
    cl_mem cu_seqlens_q, cu_seqlens_k;
    size_t max_seqlen_q, max_seqlen_k;

    /* The implementation (flashcl_path): the flash kernels (default) or the
       standard baseline, which runs plain float32 attention only (causal at
       most; else FLASHCL_ERR_UNSUPPORTED_DTYPE / _VARIANT). */
    flashcl_path path;

    /* Split-KV (the decode family, src/backends/decode): how many work-groups share one
       (sequence, KV head)'s keys, their partial results merged by LSE. 0 = automatic (enough
       work-groups to fill the device); N = exactly N, so that a row's result does not depend on
       the batch size or the other sequences (bitwise). */
    size_t num_splits;

    /* float32 storage only: nonzero lets the forward and the backward run on TF32 tensor cores
       where a device has them (NVIDIA sm_80+, d <= 128: inputs, P and dS rounded to a 10-bit
       mantissa, float32 accumulation, torch.backends.cuda.matmul.allow_tf32); 0 = exact float32
       arithmetic everywhere. */
    int allow_tf32;
} flashcl_attention_desc;

/* A descriptor with every field zero (defaults, features off) and struct_size set:
     flashcl_attention_desc d = FLASHCL_ATTENTION_DESC_INIT;     (C99, any C++)
     flashcl_attention_desc d = flashcl_attention_desc_init();   (any C or C++)
   In C++ the macros call the init functions: a designated initializer naming one member is
   C++20 only, and g++ -Wextra warns there about every member it leaves out. */
#ifdef __cplusplus
#define FLASHCL_ATTENTION_DESC_INIT flashcl_attention_desc_init()
#else
#define FLASHCL_ATTENTION_DESC_INIT                                                                                    \
    { .struct_size = sizeof(flashcl_attention_desc) }
#endif
static inline flashcl_attention_desc flashcl_attention_desc_init(void) {
#ifdef __cplusplus
    flashcl_attention_desc d = {};
#else
    flashcl_attention_desc d = {0};
#endif
    d.struct_size = sizeof d;
    return d;
}

/* ----------------------------------------------------------------- plans */

typedef enum flashcl_staging {
    FLASHCL_STAGING_LOCAL = 0, /* K/V tiles go through __local memory */
    FLASHCL_STAGING_DIRECT = 1 /* each work-item reads K/V from global memory (CPU plans) */
} flashcl_staging;

/* What a call with this descriptor runs on this context's device. */
typedef struct flashcl_plan {
    char kernel[48];          /* kernel variant, e.g. "flash_fwd" or "standard" */
    int block_rows;           /* Br: query rows per work-group */
    int block_cols;           /* Bc: keys per tile */
    int threads_per_row;      /* work-items sharing one query row */
    int staging;              /* flashcl_staging */
    size_t work_group_size;   /* work-items per work-group */
    size_t local_mem_bytes;   /* __local bytes the kernel uses (as the driver reports) */
    size_t private_mem_bytes; /* CL_KERNEL_PRIVATE_MEM_SIZE (non-zero can mean spills) */
    size_t scratch_bytes;     /* device memory the call allocates beyond its outputs */
    char origin[16]; /* "env" (FLASHCL_TILE), "tuned" (tuning file), "table" (built-in), "formula", "fallback" */
    char build_options[512]; /* the options the kernel was built with */
    char reason[512];        /* why this plan was chosen, in words */
} flashcl_plan;

/* Plans (and builds, so the fit is checked) what flashcl_forward would run for `desc` (desc->path included). */
FLASHCL_API flashcl_status flashcl_plan_query(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                              flashcl_plan *out);

/* ------------------------------------------------------------------ calls */

/*
 * Forward attention on the path desc->path names (default: the flash kernels).
 *   q:   [batch, heads_q,  seqlen_q, head_dim] view
 *   k,v: [batch, heads_kv, seqlen_k, head_dim] views
 *   o:   [batch, heads_q,  seqlen_q, head_dim] view (written)
 *   lse: NULL, or a float32 buffer of at least batch*heads_q*seqlen_q elements
 *        starting at lse_offset elements, written as [batch, heads_q, seqlen_q].
 * Arguments are checked before anything is enqueued; on error nothing is written.
 * FLASHCL_PATH_STANDARD (Algorithm 0) keeps S = scale*QK^T and P = softmax(S)
 * in batch*heads_q*seqlen_q*seqlen_k floats of context scratch, then O = PV.
 */
FLASHCL_API flashcl_status flashcl_forward(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                           const flashcl_tensor *q, const flashcl_tensor *k, const flashcl_tensor *v,
                                           const flashcl_tensor *o, cl_mem lse, size_t lse_offset, cl_uint num_wait,
                                           const cl_event *wait_list, cl_event *event);

/*
 * Host-array convenience: float32 arrays in the packed [b, s, h, d] layout
 * (q: [batch, seqlen_q, heads_q, head_dim]; k: [batch, seqlen_k, heads_kv,
 * head_dim]; v: [batch, seqlen_k, heads_kv, head_dim_v]; o: [batch, seqlen_q,
 * heads_q, head_dim_v]); lse may be NULL, else [batch, heads_q, seqlen_q].
 * With varlen the arrays are [total, heads, dim] and lse [heads_q, total_q].
 * They are converted to desc->dtype on the way in and back to float32 on the
 * way out. Variant buffers (bias, masks, slopes, sinks, dsinks, cu_seqlens)
 * are the descriptor's cl_mem fields, as for flashcl_forward.
 * Copies in, runs desc->path, copies out, and returns when the results are on the host.
 * An output may overlap an input (the inputs are copied in first); outputs that overlap
 * each other (o and lse; dq, dk and dv) are FLASHCL_ERR_ALIASED_OUTPUT.
 */
FLASHCL_API flashcl_status flashcl_forward_host(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                                const float *q, const float *k, const float *v, float *o, float *lse);

/*
 * The dropout keep mask a flash call with this descriptor applies (for tests
 * and debugging): uchar [batch, heads_q, seqlen_q, seqlen_k], 1 = kept,
 * written to `out` from out_offset bytes. With varlen the shape is
 * [batch, heads_q, max_seqlen_q, max_seqlen_k], 0 outside each sequence.
 * The mask is a function of (dropout_seed, dropout_offset, b, h, i, j) alone:
 * kept iff 16 bits of Philox4x32-10 with counter
 * (4 (j / 16) + (j / 2) mod 4, 8 (i / 16) + i mod 8, b * heads_q + h,
 * low 32 bits of dropout_offset) and key (low 32 bits of dropout_seed, high 32
 * bits of dropout_seed XOR high 32 bits of dropout_offset) -- word
 * 2 ((i / 8) mod 2) + (j / 8) mod 2, its low half for an even j, its high half
 * for an odd one -- are >= floor(dropout_p * 2^16 + 1/2); i and j count within
 * the sequence. One call covers rows i, i + 8 and keys 2u, 2u + 1, 2u + 8,
 * 2u + 9 of a 16 x 16 block (what one tensor-core lane holds).
 */
FLASHCL_API flashcl_status flashcl_dropout_mask(flashcl_context *ctx, const flashcl_attention_desc *desc, cl_mem out,
                                                size_t out_offset, cl_uint num_wait, const cl_event *wait_list,
                                                cl_event *event);

/* -------------------------------------------------------------- KV cache */

/* Storage of a KV cache: the descriptor's dtype, or 8-bit floats dequantised where they are loaded. */
typedef enum flashcl_cache_dtype {
    FLASHCL_CACHE_DTYPE_SAME = 0,     /* the descriptor's dtype (f32, f16 or bf16) */
    FLASHCL_CACHE_DTYPE_FP8_E4M3 = 1, /* OCP fp8 e4m3fn: 4 exponent bits (bias 7), no inf, max 448 */
    FLASHCL_CACHE_DTYPE_FP8_E5M2 = 2  /* OCP fp8 e5m2: 5 exponent bits (bias 15), inf and NaN like IEEE */
} flashcl_cache_dtype;

/*
 * A KV cache, for flashcl_forward_kvcache (FlashAttention-2's flash_attn_with_kvcache).
 *   Contiguous (block_table NULL): k and v are [batch_cache, capacity, heads_kv, d] views
 *     (flashcl_tensor: stride_batch between cache sequences, stride_row between rows);
 *     cache_batch_idx picks a cache sequence for each batch entry (default: entry b uses b).
 *   Paged (block_table set): k and v are page pools [num_pages, page_size, heads_kv, d]
 *     (stride_batch = the page stride), any page size from 1; block_table[b * max_pages + j]
 *     is the page holding rows j*page_size .. of sequence b. FlashInfer's CSR form converts
 *     as: block_table[b][j] = indices[indptr[b] + j] for j < indptr[b+1] - indptr[b], and
 *     cache_seqlens[b] = (indptr[b+1] - indptr[b] - 1) * page_size + last_page_len[b].
 * The int32 tables are host arrays: FlashCL checks every page index and length against
 * the pools before anything is enqueued, and copies them to the device with the call when
 * they differ from what the context last copied (calls of one token over a model's layers,
 * which share them, write them once; the arrays are free again when the call returns).
 * cache_seqlens[b] rows are in the cache before the call (NULL: every sequence is full:
 * capacity, or max_pages * page_size); the keys of sequence b are rows
 * [cache_leftpad[b], cache_seqlens[b] + seqlen_new) (the masks and ALiBi align to them).
 * k_new / v_new ([batch, seqlen_new, heads_kv, d], buffer NULL = none) are written into the
 * cache at rows cache_seqlens[b] .. in the same call (in place, as FlashAttention does; the
 * caller advances its cache_seqlens), rotated first when rotary is set, new row t at position
 * cache_seqlens[b] + t (its cache row: cache_leftpad does not shift rotary positions); q is
 * rotated too (into scratch, never in place): at positions cache_seqlens[b] + i when causal or
 * windowed, else all at cache_seqlens[b] (FlashAttention's rules).
 */
typedef struct flashcl_kv_cache {
    size_t struct_size; /* FLASHCL_KV_CACHE_INIT */
    flashcl_tensor k, v;
    size_t capacity;             /* contiguous: rows per cache sequence */
    size_t batch_cache;          /* contiguous: sequences in the cache (0 = desc->batch) */
    size_t num_pages, page_size; /* paged: the pools' pages, rows per page */
    const int32_t *block_table;  /* host [batch, max_pages]; NULL = contiguous */
    size_t max_pages;
    const int32_t *cache_seqlens;   /* host [batch]; NULL = full */
    const int32_t *cache_batch_idx; /* host [batch]; NULL = identity (contiguous only) */
    const int32_t *cache_leftpad;   /* host [batch]; NULL = 0 */
    flashcl_tensor k_new, v_new;    /* rows to append; buffer NULL = none */
    size_t seqlen_new;
    /* Rotary embedding of k_new and q: float32 cos and sin [seqlen_ro, rotary_dim / 2]
       (from rotary_offset elements), on the first rotary_dim dims (even, <= head_dim);
       rotary_interleaved 1: GPT-J pairs (x0, x1), (x2, x3) ...; 0: GPT-NeoX halves. */
    cl_mem rotary_cos, rotary_sin;
    size_t rotary_offset, seqlen_ro, rotary_dim;
    int rotary_interleaved;
    /* 8-bit caches: the cache holds x / scale; k_scale and v_scale are float32 [1] (per
       tensor) or [heads_kv] (scale_per_head); NULL = 1. k_new / v_new stay in desc->dtype
       and are quantised (round to nearest even, saturating for e4m3) when appended. */
    flashcl_cache_dtype dtype;
    cl_mem k_scale, v_scale;
    int scale_per_head;
} flashcl_kv_cache;

#ifdef __cplusplus
#define FLASHCL_KV_CACHE_INIT flashcl_kv_cache_init()
#else
#define FLASHCL_KV_CACHE_INIT                                                                                          \
    { .struct_size = sizeof(flashcl_kv_cache) }
#endif
static inline flashcl_kv_cache flashcl_kv_cache_init(void) {
#ifdef __cplusplus
    flashcl_kv_cache c = {};
#else
    flashcl_kv_cache c = {0};
#endif
    c.struct_size = sizeof c;
    return c;
}

/*
 * Attention of q against a KV cache (after appending k_new / v_new), the decode call of
 * every inference loop. q and o are [batch, heads_q, seqlen_q, head_dim(_v)] views as for
 * flashcl_forward; desc->seqlen_k is ignored (the lengths come from the cache); causal is
 * bottom-right against each sequence's length. Supported: GQA/MQA, causal, window, softcap,
 * ALiBi, sinks, f32/f16/bf16 (and fp8 caches), head dims up to FLASHCL_MAX_HEAD_DIM, any seqlen_q (short
 * queries are what it is fast for), desc->num_splits. Not with a KV cache: varlen, bias,
 * masks, block masks, dropout (FLASHCL_ERR_UNSUPPORTED_VARIANT).
 * lse: NULL or float32 [batch, heads_q, seqlen_q].
 */
FLASHCL_API flashcl_status flashcl_forward_kvcache(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                                   const flashcl_tensor *q, const flashcl_kv_cache *cache,
                                                   const flashcl_tensor *o, cl_mem lse, size_t lse_offset,
                                                   cl_uint num_wait, const cl_event *wait_list, cl_event *event);

/* ------------------------------------------------------------ merge states */

/*
 * num_states partial attention results over the same query rows (split-KV, cascade
 * attention, context parallelism), each a float32 O_i and its natural-log LSE_i, merged:
 *   lse = log sum_i exp(lse_i),  O = sum_i exp(lse_i - lse) O_i.
 * A row whose every lse_i is -inf gets O = 0 and lse = -inf (never NaN); a NaN or +inf
 * lse_i (an invalid or overflowed partial) makes the row's O and lse NaN.
 */
typedef struct flashcl_merge_desc {
    size_t struct_size; /* FLASHCL_MERGE_DESC_INIT */
    size_t num_states;  /* >= 1 */
    size_t batch, heads, seqlen, head_dim;
    flashcl_dtype dtype;     /* of the merged o (0 = float32); the states are float32 */
    size_t o_state_stride;   /* elements from state i to i+1 in o_states (0 = batch*seqlen*heads*head_dim) */
    size_t lse_state_stride; /* elements from state i to i+1 in lse_states (0 = batch*heads*seqlen) */
} flashcl_merge_desc;

#ifdef __cplusplus
#define FLASHCL_MERGE_DESC_INIT flashcl_merge_desc_init()
#else
#define FLASHCL_MERGE_DESC_INIT                                                                                        \
    { .struct_size = sizeof(flashcl_merge_desc) }
#endif
static inline flashcl_merge_desc flashcl_merge_desc_init(void) {
#ifdef __cplusplus
    flashcl_merge_desc m = {};
#else
    flashcl_merge_desc m = {0};
#endif
    m.struct_size = sizeof m;
    return m;
}

/* o_states: a float32 view of state 0 ([batch, heads, seqlen, head_dim] like a tensor view);
   lse_states: float32 [num_states][batch, heads, seqlen] from lse_states_offset; o: the merged
   view (m->dtype); lse: NULL or float32 [batch, heads, seqlen]. */
FLASHCL_API flashcl_status flashcl_merge_states(flashcl_context *ctx, const flashcl_merge_desc *m,
                                                const flashcl_tensor *o_states, cl_mem lse_states,
                                                size_t lse_states_offset, const flashcl_tensor *o, cl_mem lse,
                                                size_t lse_offset, cl_uint num_wait, const cl_event *wait_list,
                                                cl_event *event);

/* The same on host arrays (no device): o_states packed [num_states][batch, seqlen, heads, head_dim],
   lse_states [num_states][batch, heads, seqlen], o [batch, seqlen, heads, head_dim] float32, lse may be NULL. */
FLASHCL_API flashcl_status flashcl_merge_states_host(const flashcl_merge_desc *m, const float *o_states,
                                                     const float *lse_states, float *o, float *lse);

/* --------------------------------------------------------------- backward */

/*
 * Backward pass of flashcl_forward: given Q, K, V, the forward's O and LSE,
 * and dO (the gradient of the loss with respect to O), writes dQ, dK, dV.
 *   q, dq:          [batch, heads_q,  seqlen_q, head_dim] views
 *   o, dout:        [batch, heads_q,  seqlen_q, head_dim_v] views
 *   k, dk:          [batch, heads_kv, seqlen_k, head_dim] views
 *   v, dv:          [batch, heads_kv, seqlen_k, head_dim_v] views
 *   lse:            the forward's LSE buffer ([batch, heads_q, seqlen_q] floats from
 *                   lse_offset; [heads_q, total_q] with varlen)
 * Every variant of the descriptor applies as in the forward (the same dropout
 * mask is regenerated); with sinks and desc->dsinks set, d(loss)/d(sinks) is
 * written too.
 * P is recomputed from Q, K and LSE tile by tile; it is never stored. With
 * GQA/MQA, dK and dV are already summed over the query heads of each group.
 * No atomics: results are bitwise identical from run to run. Scratch memory
 * (D = rowsum(dO * O)) belongs to the context and grows as needed.
 * FLASHCL_PATH_STANDARD (the baseline) materialises P = exp(S - lse) and dS
 * in context scratch instead, from the same arguments.
 */
FLASHCL_API flashcl_status flashcl_backward(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                            const flashcl_tensor *q, const flashcl_tensor *k, const flashcl_tensor *v,
                                            const flashcl_tensor *o, const flashcl_tensor *dout, cl_mem lse,
                                            size_t lse_offset, const flashcl_tensor *dq, const flashcl_tensor *dk,
                                            const flashcl_tensor *dv, cl_uint num_wait, const cl_event *wait_list,
                                            cl_event *event);

/*
 * Host-array backward, packed [b, s, h, d] like flashcl_forward_host (same
 * dtype conversion, varlen layout and variant buffers): q, dq [batch, seqlen_q,
 * heads_q, head_dim]; o, dout [.., head_dim_v]; k, dk [batch, seqlen_k, heads_kv,
 * head_dim]; v, dv [.., head_dim_v]; lse [batch, heads_q, seqlen_q] (as
 * flashcl_forward_host returned it). dsinks, when set, is written on the device.
 */
FLASHCL_API flashcl_status flashcl_backward_host(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                                 const float *q, const float *k, const float *v, const float *o,
                                                 const float *dout, const float *lse, float *dq, float *dk, float *dv);

/* What flashcl_backward runs for `desc` (kernel of the dK/dV pass, its tiles, scratch bytes). */
FLASHCL_API flashcl_status flashcl_backward_plan_query(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                                       flashcl_plan *out);

#ifdef __cplusplus
}
#endif

#endif /* FLASHCL_H */
