/* OpenCL property queries used by `info` and `bench`. */
#include "device_info.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* clGetPlatformInfo and clGetDeviceInfo behind one signature, so that one function reads either's strings. */
typedef cl_int (*info_query)(void *object, cl_uint param, size_t size, void *value, size_t *size_ret);

static cl_int platform_query(void *object, cl_uint param, size_t size, void *value, size_t *size_ret) {
    return clGetPlatformInfo((cl_platform_id)object, param, size, value, size_ret);
}

static cl_int device_query(void *object, cl_uint param, size_t size, void *value, size_t *size_ret) {
    return clGetDeviceInfo((cl_device_id)object, param, size, value, size_ret);
}

/* Asks for the size first: extension lists can be kilobytes long. */
static char *query_string(info_query query, void *object, cl_uint param) {
    size_t size = 0;
    if (query(object, param, 0, NULL, &size) != CL_SUCCESS) return NULL;
    char *s = malloc(size + 1);
    if (s == NULL) return NULL;
    if (query(object, param, size, s, NULL) != CL_SUCCESS) {
        free(s);
        return NULL;
    }
    s[size] = '\0'; /* in case the driver's string is not terminated */
    return s;
}

char *platform_string(cl_platform_id platform, cl_platform_info param) {
    return query_string(platform_query, platform, param);
}

char *device_string(cl_device_id device, cl_device_info param) { return query_string(device_query, device, param); }

void device_string_into(cl_device_id device, cl_device_info param, char *buf, size_t buf_size) {
    char *s = device_string(device, param);
    snprintf(buf, buf_size, "%s", s != NULL ? s : "?");
    free(s);
}

bool extension_listed(const char *extensions, const char *name) {
    size_t len = strlen(name);
    for (const char *p = extensions; *p;) {
        while (*p == ' ') p++;
        const char *word = p;
        while (*p && *p != ' ') p++;
        if ((size_t)(p - word) == len && memcmp(word, name, len) == 0) return true;
    }
    return false;
}

void device_type_text(cl_device_type type, char *buf, size_t buf_size) {
    static const struct {
        cl_device_type bit;
        const char *name;
    } names[] = {{CL_DEVICE_TYPE_GPU, "GPU"},
                 {CL_DEVICE_TYPE_CPU, "CPU"},
                 {CL_DEVICE_TYPE_ACCELERATOR, "ACCELERATOR"},
                 {CL_DEVICE_TYPE_CUSTOM, "CUSTOM"},
                 {CL_DEVICE_TYPE_DEFAULT, "DEFAULT"}};
    size_t used = 0;
    if (buf_size == 0) return;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i) {
        if ((type & names[i].bit) == 0 || used >= buf_size) continue;
        int n = snprintf(buf + used, buf_size - used, "%s%s", used ? "|" : "", names[i].name);
        used = n < 0 ? buf_size : used + (size_t)n;
    }
    if (buf[0] == '\0') snprintf(buf, buf_size, "unknown (0x%llx)", (unsigned long long)type);
}
