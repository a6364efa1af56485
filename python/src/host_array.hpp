// A numpy array or PyTorch tensor seen as host memory: where its elements lie
// and how the FlashCL views over it are laid out. Everything here is checked
// with the GIL held, before any device work, and raises ValueError naming the
// argument; the result is plain data that the device code can use without it.
#pragma once

#include <cstddef>
#include <cstdint>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <flashcl.h>

namespace flashcl_py {

namespace nb = nanobind;

using InArray = nb::ndarray<nb::ro>; // inputs: read-only arrays are fine
using OutArray = nb::ndarray<>;      // outputs: must be writable

// What an array must hold. STORAGE is the call's q/k/v dtype (float32,
// float16, bfloat16; bfloat16 may also come as 16-bit integers, which is how
// numpy without a bfloat16 type carries ml_dtypes' bfloat16).
// ANY: whatever the array holds (a DeviceArray's bytes; the package names its dtype).
enum class Elem { STORAGE, F32, U8, I32, ANY };

struct HostArray {
    const char *name = nullptr;
    char *data = nullptr;  // first element
    size_t span_bytes = 0; // from data to one past the last element
    size_t elem_bytes = 0;
    int ndim = 0;
    size_t shape[4] = {0, 0, 0, 0};
    size_t stride[4] = {0, 0, 0, 0}; // elements; size-1 dimensions get the packed stride
    bool output = false;
    bool read_too = false; // an output whose contents are also read (a cache appended to): copied in and out
};

// Checks device (host memory), element type, rank, non-negative strides,
// a contiguous last dimension and element alignment.
HostArray host_array(const char *name, const InArray &a, Elem elem, flashcl_dtype storage, int min_ndim, int max_ndim);
HostArray host_array(const char *name, const OutArray &a, Elem elem, flashcl_dtype storage, int min_ndim, int max_ndim);

} // namespace flashcl_py
