/* `flashcl info`: every OpenCL device and the plans FlashCL picks on it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <flashcl.h>

#include "commands.h"
#include "device_info.h"
#include "options.h"
#include "plan_print.h"
#include "tool_errors.h"

/* The ICD loader's "no platform" code (cl_khr_icd); not in every cl.h. */
#define INFO_PLATFORM_NOT_FOUND_KHR (-1001)

/* Extensions that matter to FlashCL's kernels or device tuning. */
static const char *const relevant_extensions[] = {"cl_khr_fp16",
                                                  "cl_khr_fp64",
                                                  "cl_khr_subgroups",
                                                  "cl_intel_subgroups",
                                                  "cl_nv_device_attribute_query",
                                                  "cl_amd_device_attribute_query"};

/* The problem the reported plans are for: a typical single-batch layer. */
enum { INFO_BATCH = 1, INFO_HEADS = 8, INFO_SEQLEN = 1024 };
static const size_t info_head_dims[] = {64, 128};

void cmd_info_help(FILE *out) {
    fputs("usage: flashcl info\n"
          "\n"
          "Lists every OpenCL platform and device with the index pair P:D that\n"
          "--device and FLASHCL_DEVICE accept, the device properties FlashCL's\n"
          "tiling depends on, and the plan (kernel, tile sizes, work-group size,\n"
          "memory use and why) FlashCL picks on each device for both the flash\n"
          "and the standard path, at head dims 64 and 128 (batch 1, 8 heads,\n"
          "seqlen 1024, float32, non-causal).\n"
          "\n"
          "Exit status: 0 when every device could be queried, 1 otherwise.\n",
          out);
}

/* Exact below 1 KiB ("640 B"), else one decimal in the largest binary unit that fits ("15.6 GiB"). */
static void format_bytes(uint64_t bytes, char *buf, size_t buf_size) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (bytes < 1024) {
        snprintf(buf, buf_size, "%llu B", (unsigned long long)bytes);
        return;
    }
    double value = (double)bytes;
    size_t unit = 0;
    while (value >= 1024.0 && unit + 1 < sizeof units / sizeof units[0]) {
        value /= 1024.0;
        unit++;
    }
    /* Whole numbers (512 KiB, 16 GiB) print without a pointless ".0". */
    if (value == (double)(uint64_t)value)
        snprintf(buf, buf_size, "%.0f %s", value, units[unit]);
    else
        snprintf(buf, buf_size, "%.1f %s", value, units[unit]);
}

static void print_size_property(cl_device_id device, cl_device_info param, const char *label) {
    size_t value = 0;
    if (clGetDeviceInfo(device, param, sizeof value, &value, NULL) == CL_SUCCESS)
        printf("    %-22s %zu\n", label, value);
    else
        printf("    %-22s ?\n", label);
}

static void print_bytes_property(cl_device_id device, cl_device_info param, const char *label) {
    cl_ulong value = 0;
    if (clGetDeviceInfo(device, param, sizeof value, &value, NULL) == CL_SUCCESS) {
        char text[32];
        format_bytes(value, text, sizeof text);
        printf("    %-22s %s (%llu bytes)\n", label, text, (unsigned long long)value);
    } else {
        printf("    %-22s ?\n", label);
    }
}

static void print_string_property(cl_device_id device, cl_device_info param, const char *label) {
    char *s = device_string(device, param);
    printf("    %-22s %s\n", label, s != NULL ? s : "?");
    free(s);
}

static void print_device_properties(cl_device_id device) {
    print_string_property(device, CL_DEVICE_VENDOR, "vendor");
    print_string_property(device, CL_DEVICE_VERSION, "version");
    print_string_property(device, CL_DRIVER_VERSION, "driver");

    cl_device_type type = 0;
    char type_text[64] = "?";
    if (clGetDeviceInfo(device, CL_DEVICE_TYPE, sizeof type, &type, NULL) == CL_SUCCESS)
        device_type_text(type, type_text, sizeof type_text);
    printf("    %-22s %s\n", "type", type_text);

    cl_uint units = 0;
    if (clGetDeviceInfo(device, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof units, &units, NULL) == CL_SUCCESS)
        printf("    %-22s %u\n", "compute units", (unsigned)units);
    print_bytes_property(device, CL_DEVICE_LOCAL_MEM_SIZE, "local memory");
    print_size_property(device, CL_DEVICE_MAX_WORK_GROUP_SIZE, "max work-group size");
    print_bytes_property(device, CL_DEVICE_GLOBAL_MEM_SIZE, "global memory");
    print_bytes_property(device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, "max allocation");

    char *extensions = device_string(device, CL_DEVICE_EXTENSIONS);
    printf("    %-22s", "extensions");
    size_t present = 0;
    for (size_t i = 0; i < sizeof relevant_extensions / sizeof relevant_extensions[0]; ++i) {
        if (extensions != NULL && extension_listed(extensions, relevant_extensions[i])) {
            printf(" %s", relevant_extensions[i]);
            present++;
        }
    }
    printf("%s\n", present == 0 ? " (none of the relevant ones)" : "");
    printf("    %-22s", "lacks");
    for (size_t i = 0; i < sizeof relevant_extensions / sizeof relevant_extensions[0]; ++i) {
        if (extensions == NULL || !extension_listed(extensions, relevant_extensions[i]))
            printf(" %s", relevant_extensions[i]);
    }
    printf("%s\n", present == sizeof relevant_extensions / sizeof relevant_extensions[0] ? " (none)" : "");
    free(extensions);
}

/* Prints the plans for one device; returns how many queries failed. */
static int print_device_plans(const char *spec) {
    flashcl_context *ctx = NULL;
    char err[1024] = "";
    flashcl_status status = flashcl_context_create(&ctx, spec, err, sizeof err);
    if (status != FLASHCL_SUCCESS) {
        printf("    context failed: %s: ", flashcl_status_name(status));
        tool_print_one_line(stdout, err[0] ? err : flashcl_status_string(status));
        printf("\n");
        return 1;
    }
    const char *cache = flashcl_context_cache_dir(ctx);
    printf("    %-22s %s\n", "cache directory", cache != NULL && cache[0] ? cache : "(disabled)");
    /* The tuning file and, when it was ignored, why: the library keeps the note, the tool shows it. */
    flashcl_tuning_info tuning = {.struct_size = sizeof tuning};
    if (flashcl_tuning_query(ctx, &tuning) == FLASHCL_SUCCESS) {
        if (!tuning.path[0])
            printf("    %-22s (none)\n", "tuning file");
        else if (tuning.note[0])
            printf("    %-22s %s\n", "tuning", tuning.note); /* the note names the file */
        else
            printf("    %-22s %s (%zu tuned plan%s read)\n", "tuning file", tuning.path, tuning.entries,
                   tuning.entries == 1 ? "" : "s");
    }
    printf("    plans for batch %d, heads %d, seqlen %d, float32, non-causal:\n", INFO_BATCH, INFO_HEADS, INFO_SEQLEN);

    int failures = 0;
    for (size_t i = 0; i < sizeof info_head_dims / sizeof info_head_dims[0]; ++i) {
        for (int path = FLASHCL_PATH_FLASH; path <= FLASHCL_PATH_STANDARD; ++path) {
            flashcl_attention_desc desc;
            desc = (flashcl_attention_desc)FLASHCL_ATTENTION_DESC_INIT;
            desc.batch = INFO_BATCH;
            desc.heads_q = INFO_HEADS;
            desc.seqlen_q = INFO_SEQLEN;
            desc.head_dim = info_head_dims[i];
            desc.path = (flashcl_path)path;
            flashcl_plan plan;
            memset(&plan, 0, sizeof plan);
            printf("      d=%zu %s:\n", info_head_dims[i], path == FLASHCL_PATH_FLASH ? "flash" : "standard");
            status = flashcl_plan_query(ctx, &desc, &plan);
            if (status != FLASHCL_SUCCESS) {
                printf("        failed: %s: ", flashcl_status_name(status));
                tool_print_one_line(stdout, flashcl_last_error(ctx)[0] ? flashcl_last_error(ctx)
                                                                       : flashcl_status_string(status));
                printf("\n");
                failures++;
                continue;
            }
            plan_print_full(stdout, &plan, "        ");
        }
    }
    flashcl_context_destroy(ctx);
    return failures;
}

/* Lists one platform's devices; returns how many things failed. */
static int print_platform(cl_platform_id platform, cl_uint p) {
    char *name = platform_string(platform, CL_PLATFORM_NAME);
    char *vendor = platform_string(platform, CL_PLATFORM_VENDOR);
    char *version = platform_string(platform, CL_PLATFORM_VERSION);
    printf("\nplatform %u: %s\n  vendor  %s\n  version %s\n", (unsigned)p, name ? name : "?", vendor ? vendor : "?",
           version ? version : "?");
    free(name);
    free(vendor);
    free(version);

    cl_uint count = 0;
    cl_int err = clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 0, NULL, &count);
    if (err == CL_DEVICE_NOT_FOUND || (err == CL_SUCCESS && count == 0)) {
        printf("  (no devices)\n");
        return 0;
    }
    if (err != CL_SUCCESS) {
        printf("  clGetDeviceIDs failed: %s\n", flashcl_status_name(err));
        return 1;
    }
    cl_device_id *devices = malloc(count * sizeof *devices);
    if (devices == NULL || clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, count, devices, NULL) != CL_SUCCESS) {
        printf("  cannot list devices\n");
        free(devices);
        return 1;
    }
    int failures = 0;
    for (cl_uint d = 0; d < count; ++d) {
        char *device_name = device_string(devices[d], CL_DEVICE_NAME);
        printf("\n  device %u:%u  %s\n", (unsigned)p, (unsigned)d, device_name ? device_name : "?");
        free(device_name);
        print_device_properties(devices[d]);
        char spec[32];
        snprintf(spec, sizeof spec, "%u:%u", (unsigned)p, (unsigned)d);
        /* The plans make a context and build kernels: flush what is printed
         * so far in case the driver misbehaves. */
        fflush(stdout);
        failures += print_device_plans(spec);
    }
    free(devices);
    return failures;
}

int cmd_info(int argc, char **argv) {
    option_cursor opts;
    options_begin(&opts, "info", argc, argv);
    int more;
    while ((more = options_next(&opts)) > 0) {
        return options_is_help(&opts) ? TOOL_SHOW_HELP : options_unknown(&opts);
    }
    if (more < 0) return TOOL_EXIT_USAGE;

    printf("flashcl %s (library %s)\n", FLASHCL_VERSION_STRING, flashcl_version_string());
    cl_uint count = 0;
    cl_int err = clGetPlatformIDs(0, NULL, &count);
    if (err == INFO_PLATFORM_NOT_FOUND_KHR || (err == CL_SUCCESS && count == 0))
        return tool_failure("info: no OpenCL platform found (is an ICD installed?)");
    if (err != CL_SUCCESS) return tool_failure("info: clGetPlatformIDs failed: %s", flashcl_status_name(err));
    cl_platform_id *platforms = malloc(count * sizeof *platforms);
    if (platforms == NULL || clGetPlatformIDs(count, platforms, NULL) != CL_SUCCESS) {
        free(platforms);
        return tool_failure("info: cannot list OpenCL platforms");
    }
    int failures = 0;
    for (cl_uint p = 0; p < count; ++p) failures += print_platform(platforms[p], p);
    free(platforms);
    fflush(stdout);
    if (failures > 0) {
        fprintf(stderr, "flashcl: info: %d quer%s failed (see above)\n", failures, failures == 1 ? "y" : "ies");
        return TOOL_EXIT_FAILED;
    }
    return TOOL_EXIT_OK;
}
