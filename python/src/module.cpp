// The extension module flashcl._flashcl: thin bindings of the C API. The
// Python package (flashcl/*.py) turns FlashAttention-2's arguments into
// descriptors and allocates the outputs; this module checks the arrays,
// makes the buffers and runs the calls.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <flashcl.h>

#include "context.hpp"
#include "devices.hpp"
#include "status.hpp"

namespace nb = nanobind;
using namespace nb::literals;
using flashcl_py::Context;
using flashcl_py::Features;
using flashcl_py::InArray;
using flashcl_py::KvCacheArgs;
using flashcl_py::OutArray;
using flashcl_py::ResidentArray;

namespace {

using Opt = std::optional<InArray>;

Features features(Opt alibi, Opt sinks, Opt bias, Opt mask, Opt block_mask, Opt cu_q, Opt cu_k,
                  std::optional<OutArray> dsinks = std::nullopt) {
    Features f;
    f.alibi_slopes = std::move(alibi);
    f.sinks = std::move(sinks);
    f.bias = std::move(bias);
    f.mask = std::move(mask);
    f.block_mask = std::move(block_mask);
    f.cu_seqlens_q = std::move(cu_q);
    f.cu_seqlens_k = std::move(cu_k);
    f.dsinks = std::move(dsinks);
    return f;
}

// The keyword arguments every call takes for the descriptor's array fields.
#define FEATURE_ARGS                                                                                                   \
    "alibi_slopes"_a = nb::none(), "sinks"_a = nb::none(), "bias"_a = nb::none(), "mask"_a = nb::none(),               \
    "block_mask"_a = nb::none(), "cu_seqlens_q"_a = nb::none(), "cu_seqlens_k"_a = nb::none()

} // namespace

NB_MODULE(_flashcl, m) {
    m.doc() = "FlashCL's C API (internal: use the flashcl package)";
    // Contexts held by thread-local storage may outlive the interpreter's
    // own teardown; nanobind would print about them, and this library never prints.
    nb::set_leak_warnings(false);
    flashcl_py::register_status_translator();

    m.def("version", [] { return std::string(flashcl_version_string()); });
    m.def("status_name", [](int s) { return std::string(flashcl_status_name(s)); });
    m.def("status_string", [](int s) { return std::string(flashcl_status_string(s)); });
    m.def("devices", &flashcl_py::list_devices);
    m.attr("MAX_HEAD_DIM") = FLASHCL_MAX_HEAD_DIM;
    m.attr("MAX_SCALE") = FLASHCL_MAX_SCALE;
    m.attr("DTYPE_F32") = (int)FLASHCL_DTYPE_F32;
    m.attr("DTYPE_F16") = (int)FLASHCL_DTYPE_F16;
    m.attr("DTYPE_BF16") = (int)FLASHCL_DTYPE_BF16;
    m.attr("PATH_FLASH") = (int)FLASHCL_PATH_FLASH;
    m.attr("PATH_STANDARD") = (int)FLASHCL_PATH_STANDARD;
    m.attr("CACHE_DTYPE_SAME") = (int)FLASHCL_CACHE_DTYPE_SAME;
    m.attr("CACHE_DTYPE_FP8_E4M3") = (int)FLASHCL_CACHE_DTYPE_FP8_E4M3;
    m.attr("CACHE_DTYPE_FP8_E5M2") = (int)FLASHCL_CACHE_DTYPE_FP8_E5M2;

    // The descriptor's scalar fields; the array fields are call arguments.
    nb::class_<flashcl_attention_desc>(m, "Desc")
        .def("__init__",
             [](flashcl_attention_desc *d) { new (d) flashcl_attention_desc(flashcl_attention_desc_init()); })
        .def_prop_rw(
            "dtype", [](const flashcl_attention_desc &d) { return (int)d.dtype; },
            [](flashcl_attention_desc &d, int v) { d.dtype = (flashcl_dtype)v; })
        .def_rw("batch", &flashcl_attention_desc::batch)
        .def_rw("heads_q", &flashcl_attention_desc::heads_q)
        .def_rw("heads_kv", &flashcl_attention_desc::heads_kv)
        .def_rw("seqlen_q", &flashcl_attention_desc::seqlen_q)
        .def_rw("seqlen_k", &flashcl_attention_desc::seqlen_k)
        .def_rw("head_dim", &flashcl_attention_desc::head_dim)
        .def_rw("head_dim_v", &flashcl_attention_desc::head_dim_v)
        .def_rw("scale", &flashcl_attention_desc::scale)
        .def_rw("causal", &flashcl_attention_desc::causal)
        .def_rw("window", &flashcl_attention_desc::window)
        .def_rw("window_left", &flashcl_attention_desc::window_left)
        .def_rw("window_right", &flashcl_attention_desc::window_right)
        .def_rw("softcap", &flashcl_attention_desc::softcap)
        .def_rw("dropout_p", &flashcl_attention_desc::dropout_p)
        .def_rw("dropout_seed", &flashcl_attention_desc::dropout_seed)
        .def_rw("dropout_offset", &flashcl_attention_desc::dropout_offset)
        .def_rw("block_q", &flashcl_attention_desc::block_q)
        .def_rw("block_k", &flashcl_attention_desc::block_k)
        .def_rw("max_seqlen_q", &flashcl_attention_desc::max_seqlen_q)
        .def_rw("max_seqlen_k", &flashcl_attention_desc::max_seqlen_k)
        .def_rw("num_splits", &flashcl_attention_desc::num_splits)
        .def_rw("allow_tf32", &flashcl_attention_desc::allow_tf32)
        .def_prop_rw(
            "path", [](const flashcl_attention_desc &d) { return (int)d.path; },
            [](flashcl_attention_desc &d, int v) { d.path = (flashcl_path)v; });

    // The merge's sizes; the states are call arguments.
    nb::class_<flashcl_merge_desc>(m, "MergeDesc")
        .def("__init__", [](flashcl_merge_desc *d) { new (d) flashcl_merge_desc(flashcl_merge_desc_init()); })
        .def_rw("num_states", &flashcl_merge_desc::num_states)
        .def_rw("batch", &flashcl_merge_desc::batch)
        .def_rw("heads", &flashcl_merge_desc::heads)
        .def_rw("seqlen", &flashcl_merge_desc::seqlen)
        .def_rw("head_dim", &flashcl_merge_desc::head_dim);

    m.def("merge_states", &flashcl_py::merge_states_host, "desc"_a, "states"_a, "lse_states"_a, "out"_a,
          "lse"_a = nb::none());

    nb::class_<ResidentArray>(m, "Resident")
        .def_prop_ro("shape",
                     [](const ResidentArray &r) {
                         nb::list l;
                         for (size_t n : r.shape()) l.append(n);
                         return nb::tuple(l);
                     })
        .def_prop_ro("nbytes", &ResidentArray::bytes);

    nb::class_<Context>(m, "Context")
        .def(nb::init<std::optional<std::string>, bool, bool>(), "device"_a = nb::none(), "zero_copy"_a = true,
             "profiling"_a = false)
        .def(
            "forward",
            [](Context &c, const flashcl_attention_desc &d, const InArray &q, const InArray &k, const InArray &v,
               const OutArray &o, std::optional<OutArray> lse, Opt alibi, Opt sinks, Opt bias, Opt mask, Opt bm,
               Opt cu_q,
               Opt cu_k) { c.forward(d, q, k, v, o, lse, features(alibi, sinks, bias, mask, bm, cu_q, cu_k)); },
            "desc"_a, "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a = nb::none(), FEATURE_ARGS)
        .def(
            "backward",
            [](Context &c, const flashcl_attention_desc &d, const InArray &q, const InArray &k, const InArray &v,
               const InArray &o, const InArray &dout, const InArray &lse, const OutArray &dq, const OutArray &dk,
               const OutArray &dv, std::optional<OutArray> dsinks, Opt alibi, Opt sinks, Opt bias, Opt mask, Opt bm,
               Opt cu_q, Opt cu_k) {
                c.backward(d, q, k, v, o, dout, lse, dq, dk, dv,
                           features(alibi, sinks, bias, mask, bm, cu_q, cu_k, std::move(dsinks)));
            },
            "desc"_a, "q"_a, "k"_a, "v"_a, "out"_a, "dout"_a, "lse"_a, "dq"_a, "dk"_a, "dv"_a, "dsinks"_a = nb::none(),
            FEATURE_ARGS)
        .def(
            "forward_kvcache",
            [](Context &c, const flashcl_attention_desc &d, const InArray &q, nb::handle k_cache, nb::handle v_cache,
               const OutArray &o, std::optional<OutArray> lse, Opt k, Opt v, Opt rotary_cos, Opt rotary_sin,
               bool rotary_interleaved, Opt cache_seqlens, Opt cache_batch_idx, Opt cache_leftpad, Opt block_table,
               int cache_dtype, Opt k_scale, Opt v_scale, Opt alibi) {
                KvCacheArgs kv;
                kv.k_cache = k_cache, kv.v_cache = v_cache;
                kv.k_new = std::move(k), kv.v_new = std::move(v);
                kv.rotary_cos = std::move(rotary_cos), kv.rotary_sin = std::move(rotary_sin);
                kv.rotary_interleaved = rotary_interleaved;
                kv.cache_seqlens = std::move(cache_seqlens), kv.cache_batch_idx = std::move(cache_batch_idx);
                kv.cache_leftpad = std::move(cache_leftpad), kv.block_table = std::move(block_table);
                kv.cache_dtype = cache_dtype;
                kv.k_scale = std::move(k_scale), kv.v_scale = std::move(v_scale);
                c.forward_kvcache(d, q, o, lse, kv, features(alibi, {}, {}, {}, {}, {}, {}));
            },
            "desc"_a, "q"_a, "k_cache"_a, "v_cache"_a, "out"_a, "lse"_a = nb::none(), "k"_a = nb::none(),
            "v"_a = nb::none(), "rotary_cos"_a = nb::none(), "rotary_sin"_a = nb::none(), "rotary_interleaved"_a = true,
            "cache_seqlens"_a = nb::none(), "cache_batch_idx"_a = nb::none(), "cache_leftpad"_a = nb::none(),
            "block_table"_a = nb::none(), "cache_dtype"_a = 0, "k_scale"_a = nb::none(), "v_scale"_a = nb::none(),
            "alibi_slopes"_a = nb::none())
        .def(
            "dropout_mask",
            [](Context &c, const flashcl_attention_desc &d, const OutArray &out, Opt cu_q, Opt cu_k) {
                c.dropout_mask(d, out, features({}, {}, {}, {}, {}, cu_q, cu_k));
            },
            "desc"_a, "out"_a, "cu_seqlens_q"_a = nb::none(), "cu_seqlens_k"_a = nb::none())
        .def(
            "plan",
            [](Context &c, const flashcl_attention_desc &d, bool backward, Opt alibi, Opt sinks, Opt bias, Opt mask,
               Opt bm, Opt cu_q,
               Opt cu_k) { return c.plan(d, backward, features(alibi, sinks, bias, mask, bm, cu_q, cu_k)); },
            "desc"_a, "backward"_a = false, FEATURE_ARGS)
        // The array keeps its context (and so the cl_context its buffer belongs to) alive.
        .def("to_device", &Context::to_device, "array"_a, nb::rv_policy::take_ownership, nb::keep_alive<0, 1>())
        .def("from_device", &Context::from_device, "resident"_a, "out"_a)
        .def_prop_ro("device_name", &Context::device_name)
        .def_prop_ro("platform_name", &Context::platform_name)
        .def_prop_ro("device_type", &Context::device_type)
        .def_prop_ro("host_unified_memory", &Context::host_unified_memory)
        .def_prop_ro("zero_copy", &Context::zero_copy)
        .def_prop_ro("cache_dir", &Context::cache_dir)
        .def_prop_ro("scratch_bytes", &Context::scratch_bytes)
        .def("release_scratch", &Context::release_scratch)
        .def("transfer_stats", &Context::transfer_stats)
        .def_prop_ro("profiling", &Context::profiling)
        .def("trace_kernels", &Context::trace_kernels, "on"_a)
        .def("trace_read", &Context::trace_read);
}
