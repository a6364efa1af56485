#include "device_buffers.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

namespace flashcl_py {

namespace {

// Aligning a buffer's start down must not leave the page the array starts
// in: that page is mapped, the one before may not be.
constexpr size_t kPage = 4096;

char *align_down(char *p, size_t align) { return (char *)((uintptr_t)p / align * align); }

const char *cl_name(cl_int err) { return flashcl_status_name(err); }

} // namespace

DeviceBuffers::~DeviceBuffers() {
    for (Group &g : groups_)
        if (g.mem && !g.resident) clReleaseMemObject(g.mem);
    for (Entry &e : arrays_)
        if (e.resident) clReleaseMemObject(e.resident);
}

int DeviceBuffers::add(const HostArray &a, bool own_buffer) {
    arrays_.push_back({a, own_buffer, nullptr, -1});
    return (int)arrays_.size() - 1;
}

int DeviceBuffers::add_resident(const HostArray &a, cl_mem mem) {
    clRetainMemObject(mem); // released with the groups, whether or not create() ran
    arrays_.push_back({a, false, mem, -1});
    return (int)arrays_.size() - 1;
}

size_t DeviceBuffers::offset(int handle) const {
    const Entry &e = arrays_[handle];
    if (e.resident) return 0; // the array is the whole buffer
    return (size_t)(e.a.data - groups_[e.group].begin) / e.a.elem_bytes;
}

cl_int DeviceBuffers::create(std::string *what) {
    // Element offsets need a buffer start aligned to every element size (at
    // most 4 bytes here); zero-copy buffers also get the device's base
    // alignment. Arrays whose (aligned) byte ranges overlap share a buffer:
    // sort by start, sweep.
    const bool zero_copy = policy_.zero_copy && policy_.base_align <= kPage;
    const size_t align = zero_copy ? std::max<size_t>(policy_.base_align, 16) : 16;
    std::vector<int> order(arrays_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = (int)i;
    std::sort(order.begin(), order.end(), [&](int x, int y) { return arrays_[x].a.data < arrays_[y].a.data; });
    for (int i : order) {
        HostArray &a = arrays_[i].a;
        if (arrays_[i].own_buffer || arrays_[i].resident) continue;
        char *begin = align_down(a.data, align), *end = a.data + a.span_bytes;
        if (groups_.empty() || begin >= groups_.back().end) groups_.push_back({begin, end});
        Group &g = groups_.back();
        g.end = std::max(g.end, end);
        if (a.output) g.has_output = true;
        if (!a.output || a.read_too) g.has_input = true;
        arrays_[i].group = (int)groups_.size() - 1;
    }
    for (size_t i = 0; i < arrays_.size(); ++i) { // resident arrays: their own buffers, as they are
        if (!arrays_[i].resident) continue;
        Group g;
        g.resident = true;
        g.mem = arrays_[i].resident;
        groups_.push_back(g);
        arrays_[i].group = (int)groups_.size() - 1;
    }
    for (size_t i = 0; i < arrays_.size(); ++i) {
        if (!arrays_[i].own_buffer) continue;
        const HostArray &a = arrays_[i].a;
        Group g;
        g.begin = a.data;
        g.end = a.data + a.span_bytes;
        g.has_input = g.copy = true;
        groups_.push_back(g);
        arrays_[i].group = (int)groups_.size() - 1;
    }
    for (Group &g : groups_) {
        if (g.resident) continue;
        const size_t bytes = (size_t)(g.end - g.begin);
        cl_int err = CL_SUCCESS;
        if (zero_copy && !g.copy) {
            g.mem = clCreateBuffer(context_, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, bytes, g.begin, &err);
            if (stats_ && err == CL_SUCCESS) stats_->zero_copy_buffers++;
        } else {
            cl_mem_flags flags = CL_MEM_READ_WRITE | (g.has_input ? CL_MEM_COPY_HOST_PTR : 0);
            g.mem = clCreateBuffer(context_, flags, bytes, g.has_input ? g.begin : nullptr, &err);
            if (stats_ && err == CL_SUCCESS) {
                stats_->copied_buffers++;
                if (g.has_input) stats_->bytes_copied += bytes;
            }
        }
        if (err != CL_SUCCESS) {
            g.mem = nullptr;
            *what = std::string("clCreateBuffer (") + std::to_string(bytes) + " bytes): " + cl_name(err);
            return err;
        }
    }
    return CL_SUCCESS;
}

cl_int DeviceBuffers::finish(std::string *what) {
    // Every output's map/unmap (or read) is enqueued without blocking and one clFinish waits for them all:
    // each blocking call is a round trip to the device's queue (~25 us on POCL), paid per output before.
    // The in-order queue runs each unmap after its map, and the arrays are current once the queue is done.
    const bool zero_copy = policy_.zero_copy && policy_.base_align <= kPage;
    cl_int failed = CL_SUCCESS;
    for (const Entry &e : arrays_) {
        if (!e.a.output || e.resident) continue; // a resident output stays where the kernels wrote it
        const Group &g = groups_[e.group];
        const size_t at = (size_t)(e.a.data - g.begin);
        cl_int err = CL_SUCCESS;
        if (zero_copy) {
            // The spec makes host memory under CL_MEM_USE_HOST_PTR current only
            // through a map; on a device that uses it in place this copies nothing.
            void *p =
                clEnqueueMapBuffer(queue_, g.mem, CL_FALSE, CL_MAP_READ, at, e.a.span_bytes, 0, nullptr, nullptr, &err);
            if (err == CL_SUCCESS) err = clEnqueueUnmapMemObject(queue_, g.mem, p, 0, nullptr, nullptr);
            if (err != CL_SUCCESS) *what = std::string("clEnqueueMapBuffer (") + e.a.name + "): " + cl_name(err);
        } else {
            err = clEnqueueReadBuffer(queue_, g.mem, CL_FALSE, at, e.a.span_bytes, e.a.data, 0, nullptr, nullptr);
            if (stats_ && err == CL_SUCCESS) stats_->bytes_copied += e.a.span_bytes;
            if (err != CL_SUCCESS) *what = std::string("clEnqueueReadBuffer (") + e.a.name + "): " + cl_name(err);
        }
        if (err != CL_SUCCESS) {
            failed = err;
            break;
        }
    }
    // Nothing may still use the arrays once Python has them back, on failure too.
    const cl_int err = clFinish(queue_);
    if (failed != CL_SUCCESS) return failed;
    if (err != CL_SUCCESS) *what = std::string("clFinish: ") + cl_name(err);
    return err;
}

} // namespace flashcl_py
