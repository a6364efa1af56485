/* Small wrappers over clGetPlatformInfo / clGetDeviceInfo for reporting. */
#ifndef FLASHCL_TOOLS_DEVICE_INFO_H
#define FLASHCL_TOOLS_DEVICE_INFO_H

#include <stdbool.h>
#include <stddef.h>

#include <flashcl.h>

/* A string property in a malloc'd buffer (free it), or NULL when the query fails. */
char *platform_string(cl_platform_id platform, cl_platform_info param);
char *device_string(cl_device_id device, cl_device_info param);

/* A string property copied into buf (truncated to fit); "?" when the query fails. */
void device_string_into(cl_device_id device, cl_device_info param, char *buf, size_t buf_size);

/* Whether the space-separated extension list holds exactly `name`. */
bool extension_listed(const char *extensions, const char *name);

/* "GPU", "CPU", "ACCELERATOR", "CUSTOM", "DEFAULT", joined with '|' when several. */
void device_type_text(cl_device_type type, char *buf, size_t buf_size);

#endif
