// flashcl.Context: one flashcl_context (device, queue, program cache, plans)
// and the calls on it. Each call checks its arrays with the GIL held, then
// releases the GIL for everything that touches the device: making the
// buffers, enqueuing, waiting, unmapping. A context is not thread-safe in C;
// here a mutex serialises the calls of threads that share one (the package's
// default is one context per thread, so it is normally uncontended).
#pragma once

#include <mutex>
#include <optional>
#include <string>

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include "device_buffers.hpp"
#include "host_array.hpp"
#include "resident_array.hpp"

namespace flashcl_py {

// The array-valued fields of a descriptor (flashcl_attention_desc holds them
// as cl_mem; here they are the caller's arrays). Any may be absent.
struct Features {
    std::optional<InArray> alibi_slopes, sinks, bias, mask, block_mask, cu_seqlens_q, cu_seqlens_k;
    std::optional<OutArray> dsinks;
};

// The KV-cache call's arrays beyond q and out (flashcl_kv_cache holds them as
// cl_mem and host pointers; here they are the caller's arrays). The caches
// come as Python objects: a flashcl.DeviceArray is used in place; a host array
// is cast to a writable array only when k_new and v_new are appended into it,
// so that a read-only cache is fine otherwise.
struct KvCacheArgs {
    nb::handle k_cache, v_cache;
    std::optional<InArray> k_new, v_new, rotary_cos, rotary_sin, k_scale, v_scale;
    std::optional<InArray> block_table, cache_seqlens, cache_batch_idx, cache_leftpad; // host int32 tables
    bool rotary_interleaved = true;
    int cache_dtype = FLASHCL_CACHE_DTYPE_SAME;
};

class Context {
  public:
    // device_spec: as flashcl_context_create (None/"" = FLASHCL_DEVICE, else the first GPU, else any).
    // zero_copy=false makes every call copy through device buffers, as on a device without host memory.
    // profiling=true: the context's queue records times (flashcl_trace_kernels needs it).
    Context(std::optional<std::string> device_spec, bool zero_copy, bool profiling);
    ~Context();
    Context(const Context &) = delete;
    Context &operator=(const Context &) = delete;

    void forward(const flashcl_attention_desc &desc, const InArray &q, const InArray &k, const InArray &v,
                 const OutArray &o, const std::optional<OutArray> &lse, const Features &f);
    void backward(const flashcl_attention_desc &desc, const InArray &q, const InArray &k, const InArray &v,
                  const InArray &o, const InArray &dout, const InArray &lse, const OutArray &dq, const OutArray &dk,
                  const OutArray &dv, const Features &f);
    // Appends k_new/v_new into the caches (in place) and attends q against them.
    void forward_kvcache(const flashcl_attention_desc &desc, const InArray &q, const OutArray &o,
                         const std::optional<OutArray> &lse, const KvCacheArgs &kv, const Features &f);
    void dropout_mask(const flashcl_attention_desc &desc, const OutArray &out, const Features &f);
    nb::dict plan(const flashcl_attention_desc &desc, bool backward, const Features &f);
    // flashcl.DeviceArray: a C-contiguous array copied into a device buffer of its own, and back.
    ResidentArray *to_device(const InArray &a);
    void from_device(const ResidentArray &r, const OutArray &out);

    std::string device_name() const { return device_name_; }
    std::string platform_name() const { return platform_name_; }
    std::string device_type() const { return device_type_; }
    bool host_unified_memory() const { return unified_; }
    bool zero_copy() const { return policy_.zero_copy; }
    size_t scratch_bytes();
    void release_scratch();
    std::string cache_dir() const;
    nb::dict transfer_stats() const;
    bool profiling();
    void trace_kernels(bool on);
    // ([(kernel name, device ms), ...] in launch order, launches since the last read).
    nb::tuple trace_read();

  private:
    template <class Body> void run(DeviceBuffers &bufs, Body body);

    flashcl_context *ctx_ = nullptr;
    std::mutex mutex_;
    MemoryPolicy policy_;
    TransferStats stats_;
    bool unified_ = false;
    std::string device_name_, platform_name_, device_type_;
};

// flashcl_merge_states_host over packed float32 arrays: a loop on the host, no device, no context.
void merge_states_host(const flashcl_merge_desc &m, const InArray &o_states, const InArray &lse_states,
                       const OutArray &o, const std::optional<OutArray> &lse);

} // namespace flashcl_py
