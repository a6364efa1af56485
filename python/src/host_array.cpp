#include "host_array.hpp"

#include <string>

namespace flashcl_py {

namespace {

const char *dtype_name(nb::dlpack::dtype t) {
    using code = nb::dlpack::dtype_code;
    switch ((code)t.code) {
    case code::Float:
        return t.bits == 32 ? "float32" : t.bits == 16 ? "float16" : t.bits == 64 ? "float64" : "float";
    case code::Bfloat:
        return "bfloat16";
    case code::Int:
        return t.bits == 32 ? "int32" : t.bits == 64 ? "int64" : t.bits == 16 ? "int16" : "int";
    case code::UInt:
        return t.bits == 8 ? "uint8" : t.bits == 16 ? "uint16" : "uint";
    case code::Bool:
        return "bool";
    default:
        return "an unsupported type";
    }
}

bool elem_matches(nb::dlpack::dtype t, Elem elem, flashcl_dtype storage) {
    using code = nb::dlpack::dtype_code;
    const auto c = (code)t.code;
    if (t.lanes != 1) return false;
    switch (elem) {
    case Elem::ANY:
        return true;
    case Elem::F32:
        return c == code::Float && t.bits == 32;
    case Elem::U8:
        return (c == code::UInt || c == code::Int || c == code::Bool) && t.bits == 8;
    case Elem::I32:
        return c == code::Int && t.bits == 32;
    case Elem::STORAGE:
        switch (storage) {
        case FLASHCL_DTYPE_DEFAULT:
        case FLASHCL_DTYPE_F32:
            return c == code::Float && t.bits == 32;
        case FLASHCL_DTYPE_F16:
            return c == code::Float && t.bits == 16;
        case FLASHCL_DTYPE_BF16:
            return t.bits == 16 && (c == code::Bfloat || c == code::UInt || c == code::Int);
        }
    }
    return false;
}

const char *wanted_name(Elem elem, flashcl_dtype storage) {
    switch (elem) {
    case Elem::F32:
        return "float32";
    case Elem::U8:
        return "bool or uint8";
    case Elem::I32:
        return "int32";
    case Elem::ANY:
        return "any";
    case Elem::STORAGE:
        break;
    }
    return storage == FLASHCL_DTYPE_F16 ? "float16" : storage == FLASHCL_DTYPE_BF16 ? "bfloat16" : "float32";
}

template <class Array>
HostArray describe(const char *name, const Array &a, Elem elem, flashcl_dtype storage, int min_ndim, int max_ndim,
                   bool output) {
    using std::to_string;
    if (a.device_type() != nb::device::cpu::value)
        throw nb::value_error((std::string(name) + " is not in host memory (device type " + to_string(a.device_type()) +
                               "): FlashCL reads numpy arrays and CPU tensors")
                                  .c_str());
    if (!elem_matches(a.dtype(), elem, storage))
        throw nb::value_error(
            (std::string(name) + " has dtype " + dtype_name(a.dtype()) + ", expected " + wanted_name(elem, storage))
                .c_str());
    const int ndim = (int)a.ndim();
    if (ndim < min_ndim || ndim > max_ndim)
        throw nb::value_error(
            (std::string(name) + " has " + to_string(ndim) + " dimensions, expected " +
             (min_ndim == max_ndim ? to_string(min_ndim) : to_string(min_ndim) + " to " + to_string(max_ndim)))
                .c_str());
    HostArray h;
    h.name = name;
    h.ndim = ndim;
    h.elem_bytes = a.itemsize();
    h.output = output;
    h.data = (char *)a.data_handle() + a.byte_offset();
    size_t last = 0, packed = 1; // the farthest element's index; the packed stride of the next dim out
    for (int i = ndim - 1; i >= 0; --i) {
        const size_t n = a.shape(i);
        const int64_t s = a.stride(i);
        if (n == 0)
            throw nb::value_error((std::string(name) + " is empty (dimension " + to_string(i) + " is 0)").c_str());
        if (s < 0)
            throw nb::value_error((std::string(name) + " has a negative stride in dimension " + to_string(i) +
                                   ": pass a copy (numpy.ascontiguousarray, Tensor.contiguous)")
                                      .c_str());
        h.shape[i] = n;
        // A dimension of size 1 is never stepped over; give it the packed
        // stride so that FlashCL never sees the all-zero "packed" shorthand.
        h.stride[i] = n == 1 ? packed : (size_t)s;
        last += (n - 1) * (size_t)s;
        packed = n * h.stride[i] > packed ? n * h.stride[i] : packed;
    }
    if (h.shape[ndim - 1] > 1 && h.stride[ndim - 1] != 1)
        throw nb::value_error((std::string(name) + " must be contiguous in its last dimension (stride " +
                               to_string(h.stride[ndim - 1]) + ")")
                                  .c_str());
    if ((uintptr_t)h.data % h.elem_bytes != 0)
        throw nb::value_error((std::string(name) + " is not aligned to its element size").c_str());
    h.span_bytes = (last + 1) * h.elem_bytes;
    return h;
}

} // namespace

HostArray host_array(const char *name, const InArray &a, Elem elem, flashcl_dtype storage, int min_ndim, int max_ndim) {
    return describe(name, a, elem, storage, min_ndim, max_ndim, false);
}

HostArray host_array(const char *name, const OutArray &a, Elem elem, flashcl_dtype storage, int min_ndim,
                     int max_ndim) {
    return describe(name, a, elem, storage, min_ndim, max_ndim, true);
}

} // namespace flashcl_py
