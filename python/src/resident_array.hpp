// flashcl.DeviceArray's storage: an array that stays in a device buffer between calls.
//
// What it is for: a KV cache on a device that does not share host memory (a
// discrete GPU). A numpy cache is copied to the device and back on every
// decode step that appends to it (DeviceBuffers copies what it cannot map);
// a resident one is copied once, appended to in place by the kernels, and read
// back only when asked. C-contiguous, with the shape and the element size the
// package gave it; the dtype's name is the package's business.
#pragma once

#include <cstddef>
#include <vector>

#include <flashcl.h>

namespace flashcl_py {

class ResidentArray {
  public:
    ResidentArray(cl_context context, cl_mem mem, std::vector<size_t> shape, size_t elem_bytes)
        : context_(context), mem_(mem), shape_(std::move(shape)), elem_bytes_(elem_bytes) {}
    ~ResidentArray() { clReleaseMemObject(mem_); }
    ResidentArray(const ResidentArray &) = delete;
    ResidentArray &operator=(const ResidentArray &) = delete;

    cl_context context() const { return context_; }
    cl_mem mem() const { return mem_; }
    const std::vector<size_t> &shape() const { return shape_; }
    size_t elem_bytes() const { return elem_bytes_; }
    size_t bytes() const {
        size_t n = elem_bytes_;
        for (size_t s : shape_) n *= s;
        return n;
    }

  private:
    cl_context context_; // the flashcl.Context's (kept alive by the Python object that owns this)
    cl_mem mem_;
    std::vector<size_t> shape_;
    size_t elem_bytes_;
};

} // namespace flashcl_py
