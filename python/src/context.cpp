#include "context.hpp"

#include <string>
#include <vector>

#include "resident_array.hpp"
#include "status.hpp"

namespace flashcl_py {

namespace {

std::string device_string(cl_device_id dev, cl_device_info what) {
    size_t n = 0;
    if (clGetDeviceInfo(dev, what, 0, nullptr, &n) != CL_SUCCESS || n == 0) return "";
    std::string s(n, '\0');
    clGetDeviceInfo(dev, what, n, &s[0], nullptr);
    s.resize(s.find('\0') == std::string::npos ? n : s.find('\0'));
    return s;
}

// Where each array-valued field went in the call's buffers (-1: absent).
struct FeatureSlots {
    int alibi = -1, sinks = -1, dsinks = -1, bias = -1, mask = -1, block_mask = -1, cu_q = -1, cu_k = -1;
};

void require_packed(const HostArray &a) {
    size_t packed = 1;
    for (int i = a.ndim - 1; i >= 0; --i) {
        if (a.shape[i] > 1 && a.stride[i] != packed)
            throw nb::value_error((std::string(a.name) + " must be C-contiguous").c_str());
        packed *= a.shape[i];
    }
}

FeatureSlots add_features(DeviceBuffers &b, const Features &f, flashcl_dtype dt) {
    FeatureSlots s;
    auto packed = [&](const char *name, const InArray &a, Elem e, bool own_buffer = false) {
        HostArray h = host_array(name, a, e, dt, 1, 1);
        require_packed(h);
        return b.add(h, own_buffer);
    };
    if (f.alibi_slopes) s.alibi = b.add(host_array("alibi_slopes", *f.alibi_slopes, Elem::F32, dt, 1, 2));
    if (f.sinks) s.sinks = packed("sinks", *f.sinks, Elem::F32);
    if (f.dsinks) {
        HostArray h = host_array("dsinks", *f.dsinks, Elem::F32, dt, 1, 1);
        require_packed(h);
        s.dsinks = b.add(h);
    }
    if (f.bias) s.bias = b.add(host_array("bias", *f.bias, Elem::F32, dt, 4, 4));
    if (f.mask) s.mask = b.add(host_array("mask", *f.mask, Elem::U8, dt, 4, 4));
    if (f.block_mask) s.block_mask = b.add(host_array("block_mask", *f.block_mask, Elem::U8, dt, 4, 4));
    if (f.cu_seqlens_q) s.cu_q = packed("cu_seqlens_q", *f.cu_seqlens_q, Elem::I32, true);
    if (f.cu_seqlens_k) s.cu_k = packed("cu_seqlens_k", *f.cu_seqlens_k, Elem::I32, true);
    return s;
}

// [b|1, h|1, rows, cols]: a dimension of size 1 broadcasts (stride 0).
flashcl_matrix matrix(const DeviceBuffers &b, int slot) {
    flashcl_matrix m = {};
    if (slot < 0) return m;
    const HostArray &a = b.array(slot);
    m.buffer = b.buffer(slot);
    m.offset = b.offset(slot);
    m.stride_batch = a.shape[0] == 1 ? 0 : a.stride[0];
    m.stride_head = a.shape[1] == 1 ? 0 : a.stride[1];
    m.stride_row = a.stride[2];
    return m;
}

void apply_features(const DeviceBuffers &b, const FeatureSlots &s, flashcl_attention_desc &d) {
    if (s.alibi >= 0) {
        const HostArray &a = b.array(s.alibi);
        d.alibi_slopes = b.buffer(s.alibi);
        d.alibi_offset = b.offset(s.alibi);
        d.alibi_stride_batch = a.ndim == 2 ? a.stride[0] : 0;
    }
    if (s.sinks >= 0) d.sinks = b.buffer(s.sinks), d.sinks_offset = b.offset(s.sinks);
    if (s.dsinks >= 0) d.dsinks = b.buffer(s.dsinks), d.dsinks_offset = b.offset(s.dsinks);
    d.bias = matrix(b, s.bias);
    d.mask = matrix(b, s.mask);
    d.block_mask = matrix(b, s.block_mask);
    if (s.cu_q >= 0) d.cu_seqlens_q = b.buffer(s.cu_q);
    if (s.cu_k >= 0) d.cu_seqlens_k = b.buffer(s.cu_k);
}

bool is_varlen(const Features &f) { return f.cu_seqlens_q.has_value() || f.cu_seqlens_k.has_value(); }

template <class Array> int add_view(DeviceBuffers &b, const char *name, const Array &a, flashcl_dtype dt, bool varlen) {
    const int nd = varlen ? 3 : 4; // [total, h, d] or [b, s, h, d]
    return b.add(host_array(name, a, Elem::STORAGE, dt, nd, nd));
}

flashcl_tensor view(const DeviceBuffers &b, int slot, bool varlen) {
    const HostArray &a = b.array(slot);
    flashcl_tensor t = {};
    t.buffer = b.buffer(slot);
    t.offset = b.offset(slot);
    t.stride_batch = varlen ? 0 : a.stride[0];
    t.stride_row = a.stride[varlen ? 0 : 1];
    t.stride_head = a.stride[varlen ? 1 : 2];
    // All three zero is the library's "packed" shorthand: here only a zero row stride over several rows
    // with the batch and heads broadcast too (a size-1 dimension gets a nonzero stride), which the library
    // would read as packed and refuse as out of bounds, with strides the caller never gave.
    if (t.stride_batch == 0 && t.stride_head == 0 && t.stride_row == 0)
        throw nb::value_error((std::string(a.name) + ".stride_row (0): rows must be at least a row apart (a zero " +
                               "row stride, broadcast over the sequence, is refused; pass a copy)")
                                  .c_str());
    return t;
}

int add_lse(DeviceBuffers &b, const HostArray &h) {
    require_packed(h);
    return b.add(h);
}

size_t storage_bytes(Elem elem, flashcl_dtype dt) {
    if (elem == Elem::U8) return 1;
    return dt == FLASHCL_DTYPE_F16 || dt == FLASHCL_DTYPE_BF16 ? 2 : 4;
}

// A cache pool, [batch_cache | num_blocks, rows, heads_kv, d], registered with the call's buffers.
// A host array is written in place when rows are appended: then it must be writable (a read-only
// numpy array is refused rather than copied, since a copy would lose the append). A DeviceArray's
// buffer is used as it is (the append lands there).
int add_cache(DeviceBuffers &b, const char *name, nb::handle h, bool written, Elem elem, flashcl_dtype dt,
              cl_context context) {
    ResidentArray *r = nullptr;
    if (nb::try_cast(h, r, false) && r) {
        if (r->context() != context)
            throw nb::value_error((std::string(name) + " is a DeviceArray of another flashcl.Context").c_str());
        if (r->shape().size() != 4 || r->elem_bytes() != storage_bytes(elem, dt))
            throw nb::value_error((std::string(name) + ": a DeviceArray of 4 dimensions and the cache's "
                                                       "element size is needed")
                                      .c_str());
        HostArray a;
        a.name = name;
        a.ndim = 4;
        a.elem_bytes = r->elem_bytes();
        size_t packed = 1;
        for (int i = 3; i >= 0; --i) a.shape[i] = r->shape()[i], a.stride[i] = packed, packed *= a.shape[i];
        a.span_bytes = r->bytes();
        a.output = written;
        a.read_too = written;
        return b.add_resident(a, r->mem());
    }
    InArray in;
    if (!nb::try_cast(h, in, false))
        throw nb::value_error(
            (std::string(name) + " must be a numpy array, a CPU tensor or a flashcl.DeviceArray").c_str());
    if (!written) return b.add(host_array(name, in, elem, dt, 4, 4));
    OutArray out;
    if (!nb::try_cast(h, out, false))
        throw nb::value_error((std::string(name) + " is read-only, but k and v are appended into it").c_str());
    HostArray a = host_array(name, out, elem, dt, 4, 4);
    a.read_too = true; // the rows before cache_seqlens are attended to: a copying buffer must start from them
    return b.add(a);
}

// An int32 table the library reads on the host (block_table, cache_seqlens, ...): packed, so that
// its data pointer is the C array flashcl_kv_cache expects. Null when absent.
const int32_t *host_table(const char *name, const std::optional<InArray> &a, int ndim, flashcl_dtype dt,
                          size_t *columns = nullptr) {
    if (!a) return nullptr;
    HostArray h = host_array(name, *a, Elem::I32, dt, ndim, ndim);
    require_packed(h);
    if (columns) *columns = h.shape[ndim - 1];
    return (const int32_t *)h.data;
}

} // namespace

static bool queue_has_profiling(cl_command_queue queue) {
    cl_command_queue_properties props = 0;
    clGetCommandQueueInfo(queue, CL_QUEUE_PROPERTIES, sizeof props, &props, nullptr);
    return (props & CL_QUEUE_PROFILING_ENABLE) != 0;
}

Context::Context(std::optional<std::string> device_spec, bool zero_copy, bool profiling) {
    char err[1024] = "";
    flashcl_status st;
    {
        nb::gil_scoped_release nogil;
        st = flashcl_context_create(&ctx_, device_spec ? device_spec->c_str() : nullptr, err, sizeof err);
    }
    check(st, err);
    // A queue of the same device and cl_context, with profiling, in place of FlashCL's own, unless
    // FLASHCL_PROFILING=1 gave that one profiling already.
    if (profiling && !queue_has_profiling(flashcl_context_queue(ctx_))) {
        cl_int qerr = CL_SUCCESS;
        cl_command_queue q = clCreateCommandQueue(flashcl_context_cl_context(ctx_), flashcl_context_device(ctx_),
                                                  CL_QUEUE_PROFILING_ENABLE, &qerr);
        if (qerr != CL_SUCCESS) {
            flashcl_context_destroy(ctx_);
            ctx_ = nullptr;
            check(qerr, std::string("clCreateCommandQueue(CL_QUEUE_PROFILING_ENABLE): ") + flashcl_status_name(qerr));
        }
        st = flashcl_context_set_queue(ctx_, q); // retains q
        clReleaseCommandQueue(q);
        if (st != FLASHCL_SUCCESS) {
            std::string message = flashcl_last_error(ctx_);
            flashcl_context_destroy(ctx_);
            ctx_ = nullptr;
            check(st, message);
        }
    }
    cl_device_id dev = flashcl_context_device(ctx_);
    cl_bool unified = CL_FALSE;
    cl_uint align_bits = 8;
    cl_device_type type = 0;
    cl_platform_id platform = nullptr;
    clGetDeviceInfo(dev, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof unified, &unified, nullptr);
    clGetDeviceInfo(dev, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof align_bits, &align_bits, nullptr);
    clGetDeviceInfo(dev, CL_DEVICE_TYPE, sizeof type, &type, nullptr);
    clGetDeviceInfo(dev, CL_DEVICE_PLATFORM, sizeof platform, &platform, nullptr);
    unified_ = unified == CL_TRUE;
    policy_.zero_copy = zero_copy && unified_;
    policy_.base_align = align_bits / 8 ? align_bits / 8 : 1;
    device_name_ = device_string(dev, CL_DEVICE_NAME);
    device_type_ = (type & CL_DEVICE_TYPE_GPU)           ? "gpu"
                   : (type & CL_DEVICE_TYPE_CPU)         ? "cpu"
                   : (type & CL_DEVICE_TYPE_ACCELERATOR) ? "accelerator"
                                                         : "other";
    size_t n = 0;
    if (platform && clGetPlatformInfo(platform, CL_PLATFORM_NAME, 0, nullptr, &n) == CL_SUCCESS && n > 0) {
        platform_name_.assign(n, '\0');
        clGetPlatformInfo(platform, CL_PLATFORM_NAME, n, &platform_name_[0], nullptr);
        platform_name_.resize(n - 1);
    }
}

Context::~Context() { flashcl_context_destroy(ctx_); }

template <class Body> void Context::run(DeviceBuffers &bufs, Body body) {
    cl_int st;
    std::string what;
    {
        nb::gil_scoped_release nogil;
        std::lock_guard<std::mutex> lock(mutex_);
        st = bufs.create(&what);
        if (st == CL_SUCCESS) {
            st = body();
            if (st != FLASHCL_SUCCESS) {
                what = flashcl_last_error(ctx_);
                clFinish(flashcl_context_queue(ctx_)); // whatever was enqueued must end before the arrays go back
            } else {
                st = bufs.finish(&what);
            }
        }
    }
    check(st, what);
}

void Context::forward(const flashcl_attention_desc &desc, const InArray &q, const InArray &k, const InArray &v,
                      const OutArray &o, const std::optional<OutArray> &lse, const Features &f) {
    const flashcl_dtype dt = desc.dtype;
    const bool varlen = is_varlen(f);
    DeviceBuffers b(flashcl_context_cl_context(ctx_), flashcl_context_queue(ctx_), policy_, &stats_);
    const int sq = add_view(b, "q", q, dt, varlen), sk = add_view(b, "k", k, dt, varlen),
              sv = add_view(b, "v", v, dt, varlen), so = add_view(b, "out", o, dt, varlen);
    const int sl = lse ? add_lse(b, host_array("softmax_lse", *lse, Elem::F32, dt, 1, 3)) : -1;
    const FeatureSlots fs = add_features(b, f, dt);
    run(b, [&] {
        flashcl_attention_desc d = desc;
        apply_features(b, fs, d);
        const flashcl_tensor tq = view(b, sq, varlen), tk = view(b, sk, varlen), tv = view(b, sv, varlen),
                             to = view(b, so, varlen);
        return flashcl_forward(ctx_, &d, &tq, &tk, &tv, &to, sl >= 0 ? b.buffer(sl) : nullptr,
                               sl >= 0 ? b.offset(sl) : 0, 0, nullptr, nullptr);
    });
}

void Context::backward(const flashcl_attention_desc &desc, const InArray &q, const InArray &k, const InArray &v,
                       const InArray &o, const InArray &dout, const InArray &lse, const OutArray &dq,
                       const OutArray &dk, const OutArray &dv, const Features &f) {
    const flashcl_dtype dt = desc.dtype;
    const bool varlen = is_varlen(f);
    DeviceBuffers b(flashcl_context_cl_context(ctx_), flashcl_context_queue(ctx_), policy_, &stats_);
    const int sq = add_view(b, "q", q, dt, varlen), sk = add_view(b, "k", k, dt, varlen),
              sv = add_view(b, "v", v, dt, varlen), so = add_view(b, "out", o, dt, varlen),
              sdo = add_view(b, "dout", dout, dt, varlen), sdq = add_view(b, "dq", dq, dt, varlen),
              sdk = add_view(b, "dk", dk, dt, varlen), sdv = add_view(b, "dv", dv, dt, varlen);
    const int sl = add_lse(b, host_array("softmax_lse", lse, Elem::F32, dt, 1, 3));
    const FeatureSlots fs = add_features(b, f, dt);
    run(b, [&] {
        flashcl_attention_desc d = desc;
        apply_features(b, fs, d);
        const flashcl_tensor tq = view(b, sq, varlen), tk = view(b, sk, varlen), tv = view(b, sv, varlen),
                             to = view(b, so, varlen), tdo = view(b, sdo, varlen), tdq = view(b, sdq, varlen),
                             tdk = view(b, sdk, varlen), tdv = view(b, sdv, varlen);
        return flashcl_backward(ctx_, &d, &tq, &tk, &tv, &to, &tdo, b.buffer(sl), b.offset(sl), &tdq, &tdk, &tdv, 0,
                                nullptr, nullptr);
    });
}

void Context::forward_kvcache(const flashcl_attention_desc &desc, const InArray &q, const OutArray &o,
                              const std::optional<OutArray> &lse, const KvCacheArgs &kv, const Features &f) {
    const flashcl_dtype dt = desc.dtype;
    const bool append = kv.k_new.has_value() && kv.v_new.has_value();
    const Elem cache_elem = kv.cache_dtype == FLASHCL_CACHE_DTYPE_SAME ? Elem::STORAGE : Elem::U8; // fp8: bytes
    DeviceBuffers b(flashcl_context_cl_context(ctx_), flashcl_context_queue(ctx_), policy_, &stats_);
    const cl_context context = flashcl_context_cl_context(ctx_);
    const int sq = add_view(b, "q", q, dt, false), so = add_view(b, "out", o, dt, false),
              sk = add_cache(b, "k_cache", kv.k_cache, append, cache_elem, dt, context),
              sv = add_cache(b, "v_cache", kv.v_cache, append, cache_elem, dt, context);
    const HostArray hk = b.array(sk); // (a copy: later adds may move the entries)
    const int skn = append ? add_view(b, "k", *kv.k_new, dt, false) : -1,
              svn = append ? add_view(b, "v", *kv.v_new, dt, false) : -1;
    // Small float32 inputs the cache descriptor has no offset for: buffers of their own.
    auto small = [&](const char *name, const std::optional<InArray> &a, int ndim) {
        if (!a) return -1;
        HostArray h = host_array(name, *a, Elem::F32, dt, ndim, ndim);
        require_packed(h);
        return b.add(h, true);
    };
    const int scos = small("rotary_cos", kv.rotary_cos, 2), ssin = small("rotary_sin", kv.rotary_sin, 2),
              sks = small("k_scale", kv.k_scale, 1), svs = small("v_scale", kv.v_scale, 1);
    const int sl = lse ? add_lse(b, host_array("softmax_lse", *lse, Elem::F32, dt, 1, 3)) : -1;
    const FeatureSlots fs = add_features(b, f, dt);

    flashcl_kv_cache c = flashcl_kv_cache_init();
    size_t max_pages = 0;
    c.block_table = host_table("block_table", kv.block_table, 2, dt, &max_pages);
    c.cache_seqlens = host_table("cache_seqlens", kv.cache_seqlens, 1, dt);
    c.cache_batch_idx = host_table("cache_batch_idx", kv.cache_batch_idx, 1, dt);
    c.cache_leftpad = host_table("cache_leftpad", kv.cache_leftpad, 1, dt);
    if (c.block_table) {
        c.num_pages = hk.shape[0], c.page_size = hk.shape[1], c.max_pages = max_pages;
    } else {
        c.batch_cache = hk.shape[0], c.capacity = hk.shape[1];
    }
    if (append) c.seqlen_new = b.array(skn).shape[1];
    if (scos >= 0) {
        c.seqlen_ro = b.array(scos).shape[0];
        c.rotary_dim = 2 * b.array(scos).shape[1];
        c.rotary_interleaved = kv.rotary_interleaved ? 1 : 0;
    }
    c.dtype = (flashcl_cache_dtype)kv.cache_dtype;
    c.scale_per_head = (sks >= 0 && b.array(sks).shape[0] > 1) || (svs >= 0 && b.array(svs).shape[0] > 1);
    run(b, [&] {
        flashcl_attention_desc d = desc;
        apply_features(b, fs, d);
        flashcl_kv_cache cc = c;
        cc.k = view(b, sk, false), cc.v = view(b, sv, false);
        if (append) cc.k_new = view(b, skn, false), cc.v_new = view(b, svn, false);
        if (scos >= 0) cc.rotary_cos = b.buffer(scos), cc.rotary_sin = b.buffer(ssin);
        if (sks >= 0) cc.k_scale = b.buffer(sks);
        if (svs >= 0) cc.v_scale = b.buffer(svs);
        const flashcl_tensor tq = view(b, sq, false), to = view(b, so, false);
        return flashcl_forward_kvcache(ctx_, &d, &tq, &cc, &to, sl >= 0 ? b.buffer(sl) : nullptr,
                                       sl >= 0 ? b.offset(sl) : 0, 0, nullptr, nullptr);
    });
}

void merge_states_host(const flashcl_merge_desc &m, const InArray &o_states, const InArray &lse_states,
                       const OutArray &o, const std::optional<OutArray> &lse) {
    // The host merge reads packed float32 arrays of fixed sizes; the package passes them flattened
    // (a HostArray has at most 4 dimensions), so the sizes are what is checked here.
    const size_t rows = m.batch * m.heads * m.seqlen, n = m.num_states;
    auto packed = [&](const char *name, const auto &a, size_t count) {
        HostArray h = host_array(name, a, Elem::F32, FLASHCL_DTYPE_F32, 1, 4);
        require_packed(h);
        if (h.span_bytes != count * sizeof(float))
            throw nb::value_error((std::string(name) + " has " + std::to_string(h.span_bytes / sizeof(float)) +
                                   " elements, expected " + std::to_string(count))
                                      .c_str());
        return (float *)h.data;
    };
    const float *os = packed("states", o_states, n * rows * m.head_dim);
    const float *ls = packed("lse_states", lse_states, n * rows);
    float *out = packed("out", o, rows * m.head_dim);
    float *lse_out = lse ? packed("lse", *lse, rows) : nullptr;
    flashcl_status st;
    {
        // No device and no context: only the GIL is let go.
        nb::gil_scoped_release nogil;
        st = flashcl_merge_states_host(&m, os, ls, out, lse_out);
    }
    check(st, "");
}

void Context::dropout_mask(const flashcl_attention_desc &desc, const OutArray &out, const Features &f) {
    DeviceBuffers b(flashcl_context_cl_context(ctx_), flashcl_context_queue(ctx_), policy_, &stats_);
    HostArray h = host_array("mask", out, Elem::U8, desc.dtype, 4, 4);
    require_packed(h);
    const int so = b.add(h);
    const FeatureSlots fs = add_features(b, f, desc.dtype);
    run(b, [&] {
        flashcl_attention_desc d = desc;
        apply_features(b, fs, d);
        return flashcl_dropout_mask(ctx_, &d, b.buffer(so), b.offset(so), 0, nullptr, nullptr);
    });
}

nb::dict Context::plan(const flashcl_attention_desc &desc, bool backward, const Features &f) {
    DeviceBuffers b(flashcl_context_cl_context(ctx_), flashcl_context_queue(ctx_), policy_, &stats_);
    const FeatureSlots fs = add_features(b, f, desc.dtype);
    flashcl_plan p = {};
    run(b, [&] {
        flashcl_attention_desc d = desc;
        apply_features(b, fs, d);
        return backward ? flashcl_backward_plan_query(ctx_, &d, &p) : flashcl_plan_query(ctx_, &d, &p);
    });
    nb::dict r;
    r["kernel"] = std::string(p.kernel);
    r["block_rows"] = p.block_rows;
    r["block_cols"] = p.block_cols;
    r["threads_per_row"] = p.threads_per_row;
    r["staging"] = p.staging == FLASHCL_STAGING_DIRECT ? "direct" : "local";
    r["work_group_size"] = p.work_group_size;
    r["local_mem_bytes"] = p.local_mem_bytes;
    r["private_mem_bytes"] = p.private_mem_bytes;
    r["scratch_bytes"] = p.scratch_bytes;
    r["origin"] = std::string(p.origin);
    r["build_options"] = std::string(p.build_options);
    r["reason"] = std::string(p.reason);
    return r;
}

ResidentArray *Context::to_device(const InArray &a) {
    HostArray h = host_array("array", a, Elem::ANY, FLASHCL_DTYPE_F32, 1, 4);
    require_packed(h);
    std::vector<size_t> shape(h.shape, h.shape + h.ndim);
    const cl_context context = flashcl_context_cl_context(ctx_);
    cl_int err = CL_SUCCESS;
    cl_mem mem;
    {
        nb::gil_scoped_release nogil;
        std::lock_guard<std::mutex> lock(mutex_);
        // A buffer of its own, filled once: never over the caller's memory, which may go away.
        mem = clCreateBuffer(context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, h.span_bytes, h.data, &err);
        if (err == CL_SUCCESS) stats_.bytes_copied += h.span_bytes;
    }
    check(err, std::string("clCreateBuffer (") + std::to_string(h.span_bytes) + " bytes): " + flashcl_status_name(err));
    return new ResidentArray(context, mem, std::move(shape), h.elem_bytes);
}

void Context::from_device(const ResidentArray &r, const OutArray &out) {
    HostArray h = host_array("out", out, Elem::ANY, FLASHCL_DTYPE_F32, 1, 4);
    require_packed(h);
    if (r.context() != flashcl_context_cl_context(ctx_))
        throw nb::value_error("the DeviceArray belongs to another flashcl.Context");
    if (h.span_bytes != r.bytes())
        throw nb::value_error(
            ("out holds " + std::to_string(h.span_bytes) + " bytes, the DeviceArray " + std::to_string(r.bytes()))
                .c_str());
    cl_int err;
    {
        nb::gil_scoped_release nogil;
        std::lock_guard<std::mutex> lock(mutex_);
        err = clEnqueueReadBuffer(flashcl_context_queue(ctx_), r.mem(), CL_TRUE, 0, r.bytes(), h.data, 0, nullptr,
                                  nullptr);
        if (err == CL_SUCCESS) stats_.bytes_copied += r.bytes();
    }
    check(err, std::string("clEnqueueReadBuffer (DeviceArray): ") + flashcl_status_name(err));
}

size_t Context::scratch_bytes() {
    std::lock_guard<std::mutex> lock(mutex_);
    return flashcl_context_scratch_bytes(ctx_);
}

void Context::release_scratch() {
    std::lock_guard<std::mutex> lock(mutex_);
    flashcl_context_release_scratch(ctx_);
}

std::string Context::cache_dir() const { return flashcl_context_cache_dir(ctx_); }

bool Context::profiling() {
    nb::gil_scoped_release nogil; // another thread's call may hold the lock for long
    std::lock_guard<std::mutex> lock(mutex_);
    return queue_has_profiling(flashcl_context_queue(ctx_));
}

void Context::trace_kernels(bool on) {
    flashcl_status st;
    std::string message;
    {
        nb::gil_scoped_release nogil;
        std::lock_guard<std::mutex> lock(mutex_);
        st = flashcl_trace_kernels(ctx_, on ? 1 : 0);
        if (st != FLASHCL_SUCCESS) message = flashcl_last_error(ctx_);
    }
    check(st, message);
}

nb::tuple Context::trace_read() {
    std::vector<flashcl_kernel_time> times(FLASHCL_TRACE_MAX);
    size_t written = 0, launched = 0;
    flashcl_status st;
    std::string message;
    {
        nb::gil_scoped_release nogil; // waits for the recorded kernels
        std::lock_guard<std::mutex> lock(mutex_);
        st = flashcl_trace_read(ctx_, times.data(), times.size(), &written, &launched);
        if (st != FLASHCL_SUCCESS) message = flashcl_last_error(ctx_);
    }
    check(st, message);
    nb::list kernels;
    for (size_t i = 0; i < written; ++i) kernels.append(nb::make_tuple(std::string(times[i].name), times[i].ms));
    return nb::make_tuple(kernels, launched);
}

nb::dict Context::transfer_stats() const {
    nb::dict r;
    r["zero_copy_buffers"] = stats_.zero_copy_buffers;
    r["copied_buffers"] = stats_.copied_buffers;
    r["bytes_copied"] = stats_.bytes_copied;
    return r;
}

} // namespace flashcl_py
