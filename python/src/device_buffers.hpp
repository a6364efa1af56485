// The cl_mem objects of one call, made over the callers' arrays.
//
// Zero-copy: on a device that shares host memory (CL_DEVICE_HOST_UNIFIED_MEMORY,
// e.g. POCL) each buffer is CL_MEM_USE_HOST_PTR over the array's own memory, so
// the kernels read and write numpy/PyTorch storage in place. Its start is
// aligned down to CL_DEVICE_MEM_BASE_ADDR_ALIGN (still inside the array's
// page) and the views begin at an element offset, so the kernels see the
// alignment an ordinary allocation has. Arrays whose memory overlaps (q, k, v
// slices of one packed qkv tensor; dq, dk, dv slices of one gradient) share
// one buffer, which is also what lets FlashCL check interleaved outputs.
//
// Copying: elsewhere (a discrete GPU), or when asked, buffers are device
// allocations filled from the arrays, and outputs are read back.
#pragma once

#include <cstddef>
#include <vector>

#include "host_array.hpp"

namespace flashcl_py {

struct MemoryPolicy {
    bool zero_copy = false; // the device works on host memory in place
    size_t base_align = 1;  // bytes (CL_DEVICE_MEM_BASE_ADDR_ALIGN / 8)
};

struct TransferStats {
    unsigned long long zero_copy_buffers = 0;
    unsigned long long copied_buffers = 0;
    unsigned long long bytes_copied = 0; // host to device and back
};

class DeviceBuffers {
  public:
    DeviceBuffers(cl_context context, cl_command_queue queue, MemoryPolicy policy, TransferStats *stats)
        : context_(context), queue_(queue), policy_(policy), stats_(stats) {}
    DeviceBuffers(const DeviceBuffers &) = delete;
    DeviceBuffers &operator=(const DeviceBuffers &) = delete;
    ~DeviceBuffers();

    // Registers an array (before create()); returns its handle. An input
    // with own_buffer gets a buffer of its own that starts at its first
    // element (the descriptor's cu_seqlens have no offset field); it is
    // small, so it is copied.
    int add(const HostArray &a, bool own_buffer = false);
    // Registers an array that already lives in a device buffer (flashcl.DeviceArray): `a`
    // describes its shape and strides (its data pointer is unused); nothing is made, mapped or
    // read back for it. The buffer is retained while the call runs.
    int add_resident(const HostArray &a, cl_mem mem);
    // Creates the buffers. Runs without the GIL. Returns an OpenCL status.
    cl_int create(std::string *what);
    const HostArray &array(int handle) const { return arrays_[handle].a; }
    cl_mem buffer(int handle) const { return groups_[arrays_[handle].group].mem; }
    // The array's first element, in its own elements from the buffer's start.
    size_t offset(int handle) const;
    // After the call was enqueued: waits for it and makes outputs visible in
    // host memory (map/unmap, or a read back). Returns an OpenCL status.
    cl_int finish(std::string *what);

  private:
    struct Entry {
        HostArray a;
        bool own_buffer = false;
        cl_mem resident = nullptr; // add_resident's buffer (retained); its group is made by create()
        int group = -1;
    };
    struct Group {
        char *begin = nullptr; // the buffer's first byte in host memory
        char *end = nullptr;
        bool has_output = false;
        bool has_input = false;
        bool copy = false;     // copied even where the device could use host memory
        bool resident = false; // a DeviceArray's own buffer: nothing to make or bring back
        cl_mem mem = nullptr;
    };
    cl_context context_;
    cl_command_queue queue_;
    MemoryPolicy policy_;
    TransferStats *stats_;
    std::vector<Entry> arrays_;
    std::vector<Group> groups_;
};

} // namespace flashcl_py
