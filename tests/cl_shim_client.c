/* Finds the preloaded shim's control functions (see cl_shim.h). */
#define _GNU_SOURCE
#include "cl_shim.h"

#include <dlfcn.h>
#include <string.h>

/* dlsym returns void *; converting it to a function pointer is what POSIX requires to work. */
#define FIND(field, sym)                                                                                               \
    do {                                                                                                               \
        void *p_ = dlsym(RTLD_DEFAULT, sym);                                                                           \
        if (!p_) return 0;                                                                                             \
        memcpy(&out->field, &p_, sizeof p_);                                                                           \
    } while (0)

int cl_shim_load(cl_shim_api *out) {
    FIND(set_fault, "cl_shim_set_fault");
    FIND(fault_fired, "cl_shim_fault_fired");
    FIND(pause_faults, "cl_shim_pause_faults");
    FIND(calls, "cl_shim_calls");
    FIND(live, "cl_shim_live");
    FIND(created, "cl_shim_created");
    return 1;
}

const char *cl_shim_type_name(int type) {
    static const char *const names[CL_SHIM_TYPES] = {"cl_context", "cl_command_queue", "cl_mem",
                                                     "cl_program", "cl_kernel",        "cl_event"};
    return type >= 0 && type < CL_SHIM_TYPES ? names[type] : "?";
}
