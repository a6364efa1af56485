/* Status names and messages, generated from the one list in flashcl.h. */
#include "internal.h"

/* OpenCL 1.2-3.0 error codes, so a passed-through error prints its name. */
#define FLASHCL__CL_ERROR_MAP(XX)                                                                                      \
    XX(CL_DEVICE_NOT_FOUND, -1, "no OpenCL device of the requested type")                                              \
    XX(CL_DEVICE_NOT_AVAILABLE, -2, "the OpenCL device is not available")                                              \
    XX(CL_COMPILER_NOT_AVAILABLE, -3, "no OpenCL compiler is available")                                               \
    XX(CL_MEM_OBJECT_ALLOCATION_FAILURE, -4, "device memory allocation failed")                                        \
    XX(CL_OUT_OF_RESOURCES, -5, "the device ran out of resources")                                                     \
    XX(CL_OUT_OF_HOST_MEMORY, -6, "the OpenCL runtime ran out of host memory")                                         \
    XX(CL_PROFILING_INFO_NOT_AVAILABLE, -7, "profiling information is not available")                                  \
    XX(CL_MEM_COPY_OVERLAP, -8, "overlapping copy regions")                                                            \
    XX(CL_IMAGE_FORMAT_MISMATCH, -9, "image format mismatch")                                                          \
    XX(CL_IMAGE_FORMAT_NOT_SUPPORTED, -10, "image format not supported")                                               \
    XX(CL_BUILD_PROGRAM_FAILURE, -11, "program build failed")                                                          \
    XX(CL_MAP_FAILURE, -12, "map failure")                                                                             \
    XX(CL_MISALIGNED_SUB_BUFFER_OFFSET, -13, "misaligned sub-buffer offset")                                           \
    XX(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST, -14, "an event in the wait list failed")                          \
    XX(CL_COMPILE_PROGRAM_FAILURE, -15, "program compilation failed")                                                  \
    XX(CL_LINKER_NOT_AVAILABLE, -16, "no OpenCL linker is available")                                                  \
    XX(CL_LINK_PROGRAM_FAILURE, -17, "program link failed")                                                            \
    XX(CL_DEVICE_PARTITION_FAILED, -18, "device partition failed")                                                     \
    XX(CL_KERNEL_ARG_INFO_NOT_AVAILABLE, -19, "kernel argument info not available")                                    \
    XX(CL_INVALID_VALUE, -30, "invalid value")                                                                         \
    XX(CL_INVALID_DEVICE_TYPE, -31, "invalid device type")                                                             \
    XX(CL_INVALID_PLATFORM, -32, "invalid platform")                                                                   \
    XX(CL_INVALID_DEVICE, -33, "invalid device")                                                                       \
    XX(CL_INVALID_CONTEXT, -34, "invalid OpenCL context")                                                              \
    XX(CL_INVALID_QUEUE_PROPERTIES, -35, "invalid queue properties")                                                   \
    XX(CL_INVALID_COMMAND_QUEUE, -36, "invalid command queue")                                                         \
    XX(CL_INVALID_HOST_PTR, -37, "invalid host pointer")                                                               \
    XX(CL_INVALID_MEM_OBJECT, -38, "invalid memory object")                                                            \
    XX(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR, -39, "invalid image format descriptor")                                     \
    XX(CL_INVALID_IMAGE_SIZE, -40, "invalid image size")                                                               \
    XX(CL_INVALID_SAMPLER, -41, "invalid sampler")                                                                     \
    XX(CL_INVALID_BINARY, -42, "invalid program binary")                                                               \
    XX(CL_INVALID_BUILD_OPTIONS, -43, "invalid build options")                                                         \
    XX(CL_INVALID_PROGRAM, -44, "invalid program")                                                                     \
    XX(CL_INVALID_PROGRAM_EXECUTABLE, -45, "invalid program executable")                                               \
    XX(CL_INVALID_KERNEL_NAME, -46, "invalid kernel name")                                                             \
    XX(CL_INVALID_KERNEL_DEFINITION, -47, "invalid kernel definition")                                                 \
    XX(CL_INVALID_KERNEL, -48, "invalid kernel")                                                                       \
    XX(CL_INVALID_ARG_INDEX, -49, "invalid kernel argument index")                                                     \
    XX(CL_INVALID_ARG_VALUE, -50, "invalid kernel argument value")                                                     \
    XX(CL_INVALID_ARG_SIZE, -51, "invalid kernel argument size")                                                       \
    XX(CL_INVALID_KERNEL_ARGS, -52, "kernel arguments not set")                                                        \
    XX(CL_INVALID_WORK_DIMENSION, -53, "invalid work dimension")                                                       \
    XX(CL_INVALID_WORK_GROUP_SIZE, -54, "invalid work-group size")                                                     \
    XX(CL_INVALID_WORK_ITEM_SIZE, -55, "invalid work-item size")                                                       \
    XX(CL_INVALID_GLOBAL_OFFSET, -56, "invalid global offset")                                                         \
    XX(CL_INVALID_EVENT_WAIT_LIST, -57, "invalid event wait list")                                                     \
    XX(CL_INVALID_EVENT, -58, "invalid event")                                                                         \
    XX(CL_INVALID_OPERATION, -59, "invalid operation")                                                                 \
    XX(CL_INVALID_GL_OBJECT, -60, "invalid GL object")                                                                 \
    XX(CL_INVALID_BUFFER_SIZE, -61, "invalid buffer size")                                                             \
    XX(CL_INVALID_MIP_LEVEL, -62, "invalid mip level")                                                                 \
    XX(CL_INVALID_GLOBAL_WORK_SIZE, -63, "invalid global work size")                                                   \
    XX(CL_INVALID_PROPERTY, -64, "invalid property")                                                                   \
    XX(CL_INVALID_IMAGE_DESCRIPTOR, -65, "invalid image descriptor")                                                   \
    XX(CL_INVALID_COMPILER_OPTIONS, -66, "invalid compiler options")                                                   \
    XX(CL_INVALID_LINKER_OPTIONS, -67, "invalid linker options")                                                       \
    XX(CL_INVALID_DEVICE_PARTITION_COUNT, -68, "invalid device partition count")                                       \
    XX(CL_INVALID_PIPE_SIZE, -69, "invalid pipe size")                                                                 \
    XX(CL_INVALID_DEVICE_QUEUE, -70, "invalid device queue")                                                           \
    XX(CL_INVALID_SPEC_ID, -71, "invalid specialization constant id")                                                  \
    XX(CL_MAX_SIZE_RESTRICTION_EXCEEDED, -72, "size restriction exceeded")                                             \
    XX(CL_PLATFORM_NOT_FOUND_KHR, -1001, "no OpenCL platform found (ICD loader)")

const char *flashcl_status_name(int status) {
    switch (status) {
#define FLASHCL__NAME_CASE(name, value, text)                                                                          \
    case value:                                                                                                        \
        return "FLASHCL_" #name;
        FLASHCL_STATUS_MAP(FLASHCL__NAME_CASE)
#undef FLASHCL__NAME_CASE
    default:
        break;
    }
    /* OpenCL's codes (FlashCL's own start at -10000, so the two never overlap). */
    switch (status) {
#define FLASHCL__CL_NAME_CASE(name, value, text)                                                                       \
    case value:                                                                                                        \
        return #name;
        FLASHCL__CL_ERROR_MAP(FLASHCL__CL_NAME_CASE)
#undef FLASHCL__CL_NAME_CASE
    default:
        return "UNKNOWN";
    }
}

const char *flashcl_status_string(int status) {
    switch (status) {
#define FLASHCL__TEXT_CASE(name, value, text)                                                                          \
    case value:                                                                                                        \
        return text;
        FLASHCL_STATUS_MAP(FLASHCL__TEXT_CASE)
#undef FLASHCL__TEXT_CASE
    default:
        break;
    }
    switch (status) {
#define FLASHCL__CL_TEXT_CASE(name, value, text)                                                                       \
    case value:                                                                                                        \
        return "OpenCL error: " text;
        FLASHCL__CL_ERROR_MAP(FLASHCL__CL_TEXT_CASE)
#undef FLASHCL__CL_TEXT_CASE
    default:
        return status < 0 && status > -10000 ? "OpenCL error" : "unknown status";
    }
}

const char *flashcl__cl_error_name(cl_int err) {
    switch (err) {
#define FLASHCL__CL_NAME_CASE2(name, value, text)                                                                      \
    case value:                                                                                                        \
        return #name;
        FLASHCL__CL_ERROR_MAP(FLASHCL__CL_NAME_CASE2)
#undef FLASHCL__CL_NAME_CASE2
    default:
        return "CL_UNKNOWN_ERROR";
    }
}

int flashcl_version_number(void) { return FLASHCL_VERSION_NUMBER; }
const char *flashcl_version_string(void) { return FLASHCL_VERSION_STRING; }
