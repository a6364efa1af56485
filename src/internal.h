/* Internals shared by the library's source files. Not installed. */
#ifndef FLASHCL_INTERNAL_H
#define FLASHCL_INTERNAL_H

#include "flashcl.h"

#include <stdarg.h>

/* What the planner and the cache need to know about the device, read once. */
typedef struct flashcl__device_info {
    char name[256];
    char vendor[256];
    char version[256];
    char driver[256];
    char platform_name[256];
    char platform_version[256];
    cl_device_type type;
    cl_ulong local_mem_bytes;
    cl_ulong global_mem_bytes;
    cl_ulong max_alloc_bytes;
    size_t max_work_group_size;
    cl_uint compute_units;
    int is_cpu;
    int fp32_denorms; /* CL_FP_DENORM in CL_DEVICE_SINGLE_FP_CONFIG: float arithmetic keeps subnormals */
} flashcl__device_info;

/* Scratch slots a call may hold at once. */
enum {
    FLASHCL__SCRATCH_SCORES,
    FLASHCL__SCRATCH_SCORES2,
    FLASHCL__SCRATCH_GRADS,
    FLASHCL__SCRATCH_GRADS2,
    FLASHCL__SCRATCH_ROWS,
    FLASHCL__SCRATCH_KV_TABLE,
    FLASHCL__SCRATCH_KV_SEQINFO,
    FLASHCL__SCRATCH_DECODE_COUNTS, /* zeroed when made; the fused decode merge puts its counts back to 0 */
    FLASHCL__SCRATCH_SLOTS
};

/* Slots for the kernel families' plans and state (src/backend.h numbers them). */
#define FLASHCL__FAMILY_SLOTS 8

/* A built program, cached per context by (source name, options). */
typedef struct flashcl__program {
    char *source_name;
    char *options;
    cl_program program;
    struct flashcl__program *next;
} flashcl__program;

struct flashcl_context {
    cl_platform_id platform;
    cl_device_id device;
    cl_context cl_ctx;
    cl_command_queue queue;
    int owns_cl_objects; /* created by FlashCL (else retained from the application) */
    flashcl__device_info info;
    flashcl__program *programs;
    char cache_dir[1024]; /* "" = disk cache disabled */
    /* The cache directory named (FLASHCL_CACHE_DIR or the default), writable or not: where the tuning file is
       read from, which a read-only directory must not hide. "" when off or none can be named. */
    char cache_dir_named[1024];
    /* Device scratch (standard path's S/P and dS, backward's D): grows on
       demand, freed on destroy. Calls that use it wait for its last user. */
    cl_mem scratch[FLASHCL__SCRATCH_SLOTS];
    size_t scratch_bytes[FLASHCL__SCRATCH_SLOTS];
    /* Bumped whenever a slot's buffer is made or freed: what a slot's user remembers of its
       content (the KV tables, kvcache_state.c) holds only while the generation does. */
    unsigned long scratch_generation[FLASHCL__SCRATCH_SLOTS];
    cl_event scratch_last_use;
    /* Each kernel family's plans (and the NVIDIA probe's verdict), owned and released by
       the family (src/backends/<family>/); NULL until the family first plans. */
    void *family[FLASHCL__FAMILY_SLOTS];
    /* Tuned plans read from the device's tuning file at creation (tuning.c). */
    struct flashcl__tuned_entry *tuned;
    size_t tuned_count;
    char tuning_path[1100];       /* "" = none */
    int tuning_off;               /* FLASHCL_TUNING turned tuning files off (at creation) */
    char tuning_note[640];        /* why the file was ignored; "" when read or absent */
    struct flashcl__trace *trace; /* flashcl_trace_kernels: the launches recorded; NULL when off (trace.c) */
    char *error;                  /* last detailed error message */
    size_t error_cap;
};

/* ---- kernel trace (trace.c) */
/* Records a launch when tracing is on (its event retained); a no-op otherwise. */
void flashcl__trace_launch(flashcl_context *ctx, const char *name, cl_event done);
void flashcl__trace_release(flashcl_context *ctx);

/* ---- errors (error.c) */
/* Records a printf-style message on ctx and returns status unchanged. */
flashcl_status flashcl__fail(flashcl_context *ctx, flashcl_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Same, for an OpenCL call that returned err: "clEnqueueNDRangeKernel(flash_fwd): CL_OUT_OF_RESOURCES (-5)". */
flashcl_status flashcl__fail_cl(flashcl_context *ctx, cl_int err, const char *what);
void flashcl__clear_error(flashcl_context *ctx);
/* Appends to the current message (used for build logs). */
void flashcl__append_error(flashcl_context *ctx, const char *text);

/* ---- device information (device_info.c) */
cl_int flashcl__read_device_info(cl_platform_id platform, cl_device_id device, flashcl__device_info *out);

/* ---- embedded kernel sources (kernel_sources.c + generated table) */
typedef struct flashcl__kernel_source {
    const char *name;
    const char *data;
    size_t size;
} flashcl__kernel_source;
extern const flashcl__kernel_source flashcl__kernel_sources[];
extern const size_t flashcl__kernel_source_count;
/* The text of cl/<name> + cl/common.cl prepended, malloc'd; FLASHCL_KERNEL_DIR overrides the embedded copy. */
flashcl_status flashcl__load_kernel_source(flashcl_context *ctx, const char *name, char **out);

/* ---- hashing (hash.c) */
uint64_t flashcl__fnv1a(uint64_t h, const void *data, size_t n);
#define FLASHCL__FNV_SEED 0xcbf29ce484222325ull

/* ---- programs (program.c): in-memory cache, disk cache, build log on failure */
flashcl_status flashcl__get_program(flashcl_context *ctx, const char *source_name, const char *options,
                                    cl_program *out);
void flashcl__release_programs(flashcl_context *ctx);
/* Creates kernel `name` from the program; the caller releases it. */
flashcl_status flashcl__create_kernel(flashcl_context *ctx, cl_program program, const char *name, cl_kernel *out);

/* ---- disk cache (disk_cache.c) */
void flashcl__cache_dir_init(flashcl_context *ctx);
/* A program built from source (flashcl__get_program), its device binary passed through `patch`,
   and the result built with clCreateProgramWithBinary; kept per context under (source#tag, options).
   patch returns 1 with a malloc'd *out, or 0 with why (NVIDIA's sm_90a wgmma PTX: the driver's PTX
   with its marked lines uncommented, src/backends/nvidia/wgmma_patch.c). */
typedef int (*flashcl__binary_patch)(const unsigned char *in, size_t n, unsigned char **out, size_t *out_n, char *why,
                                     size_t cap);
flashcl_status flashcl__get_patched_program(flashcl_context *ctx, const char *source_name, const char *options,
                                            const char *tag, flashcl__binary_patch patch, cl_program *out);
/* Returns a program built from a cached binary, or NULL (any problem means: rebuild). */
cl_program flashcl__cache_load(flashcl_context *ctx, const char *source, const char *options);
void flashcl__cache_store(flashcl_context *ctx, const char *source, const char *options, cl_program program);

/* ---- argument checks (validate.c) */
/* Fills defaults (heads_kv, seqlen_k, scale) into *out and validates the descriptor. */
flashcl_status flashcl__resolve_desc(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                     flashcl_attention_desc *out);
/* One tensor argument of a call, as the checks see it. */
typedef struct flashcl__view_spec {
    const char *name; /* "q", "dk", ... used in messages */
    const flashcl_tensor *t;
    size_t heads, rows, dim; /* dim: head_dim or head_dim_v */
    int is_output;           /* 1: written; FLASHCL__READ_WRITE: written, then read (a cache appended to) */
    size_t batch;            /* 0: the descriptor's batch (1 with varlen); a KV cache's pages or sequences */
    size_t elem;             /* bytes per element; 0: the descriptor's dtype (an fp8 cache has 1) */
} flashcl__view_spec;
typedef struct flashcl__lse_spec {
    cl_mem buffer;
    size_t offset;
    int required, is_output;
} flashcl__lse_spec;
#define FLASHCL__MAX_VIEWS 8
/* Checks buffers, strides, bounds and aliasing; fills resolved[i] (packed defaults applied). */
flashcl_status flashcl__validate_views(flashcl_context *ctx, const flashcl_attention_desc *d,
                                       const flashcl__view_spec *views, int count, const flashcl__lse_spec *lse,
                                       cl_uint num_wait, const cl_event *wait_list, flashcl_tensor *resolved);
flashcl_status flashcl__validate_call(flashcl_context *ctx, const flashcl_attention_desc *d, const flashcl_tensor *q,
                                      const flashcl_tensor *k, const flashcl_tensor *v, const flashcl_tensor *o,
                                      cl_mem lse, size_t lse_offset, cl_uint num_wait, const cl_event *wait_list,
                                      flashcl_tensor resolved[4]);

/* After flashcl__validate_views passed with state 0 (first, resolved) and the last state of a
   stack of states (the merge's o_states, state i at first->offset + i * state_stride): the output
   view o and an output LSE share no element with states from .. to - 1 (to + 1 states in all). */
flashcl_status flashcl__validate_states_apart(flashcl_context *ctx, const flashcl_attention_desc *d,
                                              const flashcl__view_spec *states, const flashcl_tensor *first,
                                              size_t state_stride, size_t from, size_t to,
                                              const flashcl__view_spec *out, const flashcl_tensor *o,
                                              const flashcl__lse_spec *lse);

/* num_wait and wait_list agree, and every event is one of this context's OpenCL context. */
flashcl_status flashcl__validate_wait_list(flashcl_context *ctx, cl_uint num_wait, const cl_event *wait_list);

/* A small buffer argument: a cl_mem of this context holding `count` elements of `elem` bytes from `offset`. */
flashcl_status flashcl__validate_small(flashcl_context *ctx, const char *name, cl_mem buf, size_t elem, size_t offset,
                                       size_t count);

/* Bounds of the variant buffers (slopes, sinks, dsinks when backward, bias, masks, cu_seqlens). Varlen
   with a bias, mask or block mask: also every sequence within max_seqlen_q/k, the matrices' rows and
   columns (else a longer sequence would index past them), by reading cu_seqlens back (blocking,
   after the wait list): only for that combination. */
flashcl_status flashcl__validate_variant_buffers(flashcl_context *ctx, const flashcl_attention_desc *d, int backward,
                                                 cl_uint num_wait, const cl_event *wait_list);

/* Every buffer range of a call (validate_aliasing.c): views, LSE, the variants' arrays, a KV
   cache's tables; sub-buffers are taken at their place in the parent buffer. */
#define FLASHCL__READ_WRITE 2 /* an is_output value: written and read by the call */
typedef struct flashcl__range {
    const char *name;
    cl_mem buffer, root; /* root: the parent of a sub-buffer, else the buffer */
    size_t begin, end;   /* bytes in root */
    int is_output;       /* 0 read, 1 written, FLASHCL__READ_WRITE both */
} flashcl__range;
#define FLASHCL__MAX_RANGES 24
typedef struct flashcl__ranges {
    int count;
    flashcl__range items[FLASHCL__MAX_RANGES];
} flashcl__ranges;
/* The buffer a cl_mem lives in (its parent for a sub-buffer) and its byte offset there. */
void flashcl__memory_root(cl_mem buf, cl_mem *root, size_t *shift_bytes);
/* Appends [offset_bytes, offset_bytes + bytes) of buf (nothing for a NULL buf). */
void flashcl__range_add(flashcl__ranges *r, const char *name, cl_mem buf, size_t offset_bytes, size_t bytes,
                        int is_output);
/* The views' and LSE's ranges (after flashcl__validate_views passed), the variant buffers' (after
   flashcl__validate_variant_buffers passed; dsinks an output when backward). */
void flashcl__view_ranges(const flashcl_attention_desc *d, const flashcl__view_spec *views, int count,
                          const flashcl_tensor *resolved, const flashcl__lse_spec *lse, flashcl__ranges *r);
void flashcl__variant_ranges(const flashcl_attention_desc *d, int backward, flashcl__ranges *r);
/* Just the cu_seqlens arrays (with varlen): what the dropout-mask kernel reads of the variants. */
void flashcl__varlen_ranges(const flashcl_attention_desc *d, flashcl__ranges *r);
/* Each buffer's access flags allow what the call does with it (CL_MEM_READ_ONLY buffers it writes,
   CL_MEM_WRITE_ONLY ones it reads are refused); no output overlaps another range, except that pairs both
   before first_new (the views, compared element by element already) are not compared again. */
flashcl_status flashcl__check_ranges(flashcl_context *ctx, const flashcl__ranges *r, int first_new);
/* The two above for a call: its views and LSE, its variant buffers and `extra` (a KV cache's
   rotary tables and scales; NULL for none). */
flashcl_status flashcl__validate_apart(flashcl_context *ctx, const flashcl_attention_desc *d, int backward,
                                       const flashcl__view_spec *views, int count, const flashcl_tensor *resolved,
                                       const flashcl__lse_spec *lse, const flashcl__ranges *extra);

/* ---- variants (variants.c) */
/* Defaults and scalar checks of the variant fields (called by flashcl__resolve_desc):
   head_dim_v, window_left/right always resolved (causal folded in: right = 0), max_seqlen_q/k. */
flashcl_status flashcl__resolve_variants(flashcl_context *ctx, flashcl_attention_desc *d);
/* No variant beyond causal, float32: what every kernel family (and the standard path) supports. */
int flashcl__desc_is_plain(const flashcl_attention_desc *d);
/* FLASHCL_ERR_UNSUPPORTED_DTYPE / _VARIANT naming the features, unless the call is plain. */
flashcl_status flashcl__require_plain(flashcl_context *ctx, const flashcl_attention_desc *d, const char *path);
int flashcl__is_varlen(const flashcl_attention_desc *d);
int flashcl__dtype_code(flashcl_dtype dtype);
const char *flashcl__dtype_name(flashcl_dtype dtype);
/* "bf16, window (128, 0), ALiBi": the features in use, for plan reasons and messages. */
void flashcl__describe_variants(const flashcl_attention_desc *d, char *out, size_t cap);
/* As flashcl__describe_variants, without the storage type unless it is not float32 ("f16 storage"):
   what a call uses beyond the plain float32 baseline ("softcap, ALiBi"). */
void flashcl__describe_features(const flashcl_attention_desc *d, char *out, size_t cap);
/* Appends "; variants: ..." to a plan's reason unless the call is plain. */
void flashcl__append_variants(const flashcl_attention_desc *d, char *reason, size_t cap);
/* The -D switches of cl/variants.cl this descriptor needs (plus HEAD_DIM_V). */
void flashcl__variant_options(const flashcl_attention_desc *d, char *out, size_t cap);
/* offset, batch, head, row strides of a bias/mask matrix with the packed default applied. */
void flashcl__matrix_strides(const flashcl_attention_desc *d, const flashcl_matrix *m, size_t rows, size_t cols,
                             cl_ulong out[4]);
size_t flashcl__block_rows(const flashcl_attention_desc *d);
size_t flashcl__block_cols(const flashcl_attention_desc *d);

/* ---- scratch (scratch.c) */
/* Makes scratch slot `slot` hold at least `bytes`; `what` names the use in messages. */
flashcl_status flashcl__scratch(flashcl_context *ctx, int slot, size_t bytes, const char *what, cl_mem *out);
/* Whether one scratch buffer of `bytes` can exist on this device (the check flashcl__scratch makes
   before allocating), for plan queries that must refuse what the call would. */
flashcl_status flashcl__scratch_fits(flashcl_context *ctx, size_t bytes, const char *what);
/* The same for a slot whose users need it zero when first used (and leave it zero): a buffer it
   makes starts as zeros (CL_MEM_COPY_HOST_PTR of a zeroed host block, no command to order). */
flashcl_status flashcl__scratch_zeroed(flashcl_context *ctx, int slot, size_t bytes, const char *what, cl_mem *out);
/* The caller's wait list plus the last scratch user: what a call's first command waits for. */
typedef struct flashcl__waits {
    cl_event events[65];
    cl_uint count;
} flashcl__waits;
flashcl_status flashcl__scratch_waits(flashcl_context *ctx, cl_uint num_wait, const cl_event *wait_list,
                                      flashcl__waits *out);
/* Records `last` (retained) as the scratch's newest user. */
void flashcl__scratch_used_by(flashcl_context *ctx, cl_event last);
void flashcl__release_scratch(flashcl_context *ctx);

/* ---- the public calls' checks (forward.c, backward.c): resolve the descriptor, check the views */
flashcl_status flashcl__prepare_forward(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                        const flashcl_tensor *q, const flashcl_tensor *k, const flashcl_tensor *v,
                                        const flashcl_tensor *o, cl_mem lse, size_t lse_offset, cl_uint num_wait,
                                        const cl_event *wait_list, flashcl_attention_desc *d, flashcl_tensor views[4]);
/* in[]: q, k, v, o, dout, dq, dk, dv; the LSE is required. */
flashcl_status flashcl__prepare_backward(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                         const flashcl_tensor *const in[8], cl_mem lse, size_t lse_offset,
                                         cl_uint num_wait, const cl_event *wait_list, flashcl_attention_desc *d,
                                         flashcl_tensor views[8]);

/* ---- checks only (kvcache.c, merge.c): everything flashcl_forward_kvcache / flashcl_merge_states
   check before they enqueue, and nothing after; the message as the call would set it. For the
   validation fuzzer (fuzz/fuzz_validate.c), which needs the checks at host speed. On success:
   the cache as the call read it and views q, o, cache k, v, k_new, v_new (packed defaults
   applied; the last two only when appending) / the merged o's view (when not NULL). */
flashcl_status flashcl__check_forward_kvcache(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                              const flashcl_tensor *q, const flashcl_kv_cache *cache,
                                              const flashcl_tensor *o, cl_mem lse, size_t lse_offset, cl_uint num_wait,
                                              const cl_event *wait_list, flashcl_kv_cache *resolved,
                                              flashcl_tensor views[6]);
flashcl_status flashcl__check_merge_states(flashcl_context *ctx, const flashcl_merge_desc *desc,
                                           const flashcl_tensor *o_states, cl_mem lse_states, size_t lse_states_offset,
                                           const flashcl_tensor *o, cl_mem lse, size_t lse_offset, cl_uint num_wait,
                                           const cl_event *wait_list, flashcl_tensor *o_resolved);

/* log2(e): the kernels work in the exp2 domain, the host folds it into the scale. */
#define FLASHCL__LOG2E 1.4426950408889634

/* printf-style append to a fixed buffer, truncating safely. */
/* Puts prefix, then separator, before dst's text (a plan's reason: what comes first survives truncation);
   dst holds at most 512 bytes. Nothing happens when prefix is empty. */
void flashcl__prepend(char *dst, size_t cap, const char *prefix, const char *separator);

void flashcl__appendf(char *dst, size_t cap, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Name of an OpenCL error code ("CL_OUT_OF_RESOURCES"). */
const char *flashcl__cl_error_name(cl_int err);

/* snprintf into a fixed buffer that never overflows and always terminates. */
void flashcl__copy_str(char *dst, size_t cap, const char *src);

/* Cuts s (longer than keep) to at most keep characters plus "...": at the end of a whole clause
   (before a "; ") where one ends in the second half of what is kept, else after a whole word, so the
   text never stops mid-word. */
void flashcl__cut_text(char *s, size_t keep);

/* For text cut short on purpose (a plan's reason): ends the full buffer dst[cap] with "..." (through
   flashcl__cut_text) so that a reader sees it was truncated. Callers test snprintf's result:
   if (snprintf(...) >= (int)cap) ... */
void flashcl__mark_truncated(char *dst, size_t cap);

/* Whether an environment value turns a file off: "off" or "0" (FLASHCL_CACHE_DIR, FLASHCL_TUNING). */
int flashcl__env_off(const char *value);

#endif
