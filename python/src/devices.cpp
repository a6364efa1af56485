#include "devices.hpp"

#include <string>
#include <vector>

#include <nanobind/stl/string.h>

#include <flashcl.h>

#include "status.hpp"

namespace nb = nanobind;

namespace flashcl_py {

namespace {

template <class Get> std::string info_string(Get get) {
    size_t n = 0;
    if (get(0, nullptr, &n) != CL_SUCCESS || n == 0) return "";
    std::string s(n, '\0');
    get(n, &s[0], nullptr);
    return s.substr(0, s.find('\0'));
}

} // namespace

nb::list list_devices() {
    nb::list out;
    cl_uint np = 0;
    cl_int err = clGetPlatformIDs(0, nullptr, &np);
    // No platform (the ICD loader says CL_PLATFORM_NOT_FOUND_KHR, -1001): an empty list, not an error.
    if (err == -1001 || np == 0) return out;
    check(err, std::string("clGetPlatformIDs: ") + flashcl_status_name(err));
    std::vector<cl_platform_id> platforms(np);
    check(clGetPlatformIDs(np, platforms.data(), nullptr), "clGetPlatformIDs");
    for (cl_uint p = 0; p < np; ++p) {
        std::string pname = info_string(
            [&](size_t n, void *v, size_t *r) { return clGetPlatformInfo(platforms[p], CL_PLATFORM_NAME, n, v, r); });
        cl_uint nd = 0;
        if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, 0, nullptr, &nd) != CL_SUCCESS) continue;
        std::vector<cl_device_id> devs(nd);
        clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, nd, devs.data(), nullptr);
        for (cl_uint d = 0; d < nd; ++d) {
            auto get = [&](cl_device_info what) {
                return info_string(
                    [&](size_t n, void *v, size_t *r) { return clGetDeviceInfo(devs[d], what, n, v, r); });
            };
            cl_device_type type = 0;
            cl_bool unified = CL_FALSE;
            clGetDeviceInfo(devs[d], CL_DEVICE_TYPE, sizeof type, &type, nullptr);
            clGetDeviceInfo(devs[d], CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof unified, &unified, nullptr);
            nb::dict e;
            e["spec"] = std::to_string(p) + ":" + std::to_string(d);
            e["name"] = get(CL_DEVICE_NAME);
            e["vendor"] = get(CL_DEVICE_VENDOR);
            e["platform"] = pname;
            e["type"] = (type & CL_DEVICE_TYPE_GPU) ? "gpu" : (type & CL_DEVICE_TYPE_CPU) ? "cpu" : "other";
            e["host_unified_memory"] = unified == CL_TRUE;
            out.append(e);
        }
    }
    return out;
}

} // namespace flashcl_py
