/* An application that picks its own OpenCL API level before including flashcl.h: linking
   FlashCL::flashcl must not define CL_TARGET_OPENCL_VERSION for it (a redefinition, and the
   2.0 call below undeclared, used to fail this build). */
#define CL_TARGET_OPENCL_VERSION 200
#include <flashcl.h>

int main(void) {
    cl_command_queue (*create)(cl_context, cl_device_id, const cl_queue_properties *, cl_int *) =
        clCreateCommandQueueWithProperties;
    return create == NULL;
}
