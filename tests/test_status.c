/*
 * Status names and messages, and the version. Needs no device: every check
 * here is about static tables, so it runs in the "unit" label.
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "testutil.h"

typedef struct status_entry {
    const char *name;
    int value;
    const char *text;
} status_entry;

static const status_entry k_statuses[] = {
#define ENTRY_(name, value, text) {"FLASHCL_" #name, value, text},
    FLASHCL_STATUS_MAP(ENTRY_)
#undef ENTRY_
};
#define STATUS_COUNT (sizeof k_statuses / sizeof k_statuses[0])

static void check_own_codes(void) {
    for (size_t i = 0; i < STATUS_COUNT; i++) {
        const status_entry *e = &k_statuses[i];
        const char *name = flashcl_status_name(e->value);
        const char *text = flashcl_status_string(e->value);
        CHECK(name != NULL && text != NULL);
        if (!name || !text) continue;
        if (strcmp(name, e->name) != 0) {
            fprintf(stderr, "status %d: name \"%s\", expected \"%s\"\n", e->value, name, e->name);
            tu_fail_count();
        }
        if (strcmp(text, e->text) != 0) {
            fprintf(stderr, "status %d: message \"%s\", expected \"%s\"\n", e->value, text, e->text);
            tu_fail_count();
        }
        /* Values, names and messages must all be distinct, or a caller
         * switching on them (or reading a log) could confuse two errors. */
        for (size_t j = 0; j < i; j++) {
            CHECK(k_statuses[j].value != e->value);
            CHECK(strcmp(flashcl_status_name(k_statuses[j].value), name) != 0);
            CHECK(strcmp(flashcl_status_string(k_statuses[j].value), text) != 0);
        }
    }
    /* The pinned numbers callers may have compiled in. */
    CHECK(FLASHCL_SUCCESS == 0);
    CHECK(FLASHCL_ERR_INVALID_ARGUMENT == -10000);
    CHECK(FLASHCL_ERR_ALIASED_OUTPUT == -10014);
    CHECK(FLASHCL_ERR_NO_DEVICE == -10101);
    CHECK(FLASHCL_ERR_OUT_OF_DEVICE_MEMORY == -10401);
    /* -1 .. -9999 belong to OpenCL (core and extension codes, e.g. CL_PLATFORM_NOT_FOUND_KHR = -1001). */
    for (size_t i = 0; i < STATUS_COUNT; i++) {
        if (k_statuses[i].value < 0 && k_statuses[i].value > -10000) {
            fprintf(stderr, "%s = %d lies in OpenCL's range\n", k_statuses[i].name, k_statuses[i].value);
            tu_fail_count();
        }
    }
}

static void check_opencl_codes(void) {
    static const struct {
        int value;
        const char *name;
    } cl_codes[] = {
        {CL_DEVICE_NOT_FOUND, "CL_DEVICE_NOT_FOUND"},
        {CL_MEM_OBJECT_ALLOCATION_FAILURE, "CL_MEM_OBJECT_ALLOCATION_FAILURE"},
        {CL_OUT_OF_RESOURCES, "CL_OUT_OF_RESOURCES"},
        {CL_OUT_OF_HOST_MEMORY, "CL_OUT_OF_HOST_MEMORY"},
        {CL_BUILD_PROGRAM_FAILURE, "CL_BUILD_PROGRAM_FAILURE"},
        {CL_INVALID_VALUE, "CL_INVALID_VALUE"},
        {CL_INVALID_MEM_OBJECT, "CL_INVALID_MEM_OBJECT"},
        {CL_INVALID_KERNEL_ARGS, "CL_INVALID_KERNEL_ARGS"},
        {CL_INVALID_WORK_GROUP_SIZE, "CL_INVALID_WORK_GROUP_SIZE"},
        {CL_INVALID_BUFFER_SIZE, "CL_INVALID_BUFFER_SIZE"},
    };
    CHECK(CL_OUT_OF_RESOURCES == -5);
    /* The ICD loader's "no platform" is OpenCL's, not a FlashCL code (they collided before 0.2). */
    CHECK(strcmp(flashcl_status_name(-1001), "CL_PLATFORM_NOT_FOUND_KHR") == 0);
    for (size_t i = 0; i < sizeof cl_codes / sizeof cl_codes[0]; i++) {
        const char *name = flashcl_status_name(cl_codes[i].value);
        const char *text = flashcl_status_string(cl_codes[i].value);
        CHECK(name != NULL && text != NULL && text[0] != '\0');
        if (name && strcmp(name, cl_codes[i].name) != 0) {
            fprintf(stderr, "OpenCL code %d: name \"%s\", expected \"%s\"\n", cl_codes[i].value, name,
                    cl_codes[i].name);
            tu_fail_count();
        }
    }
}

static void check_unknown_codes(void) {
    /* Unassigned values in every range, and the extremes: must not crash. */
    static const int unknown[] = {1, 7, -999, -1000, -1401, -10099, -10199, -10299, -10500, 123456, INT_MIN, INT_MAX};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        const char *name = flashcl_status_name(unknown[i]);
        const char *text = flashcl_status_string(unknown[i]);
        CHECK(name != NULL && text != NULL);
        if (name && strcmp(name, "UNKNOWN") != 0) {
            fprintf(stderr, "code %d: name \"%s\", expected \"UNKNOWN\"\n", unknown[i], name);
            tu_fail_count();
        }
    }
}

static void check_version(void) {
    CHECK(flashcl_version_number() == FLASHCL_VERSION_NUMBER);
    CHECK(strcmp(flashcl_version_string(), FLASHCL_VERSION_STRING) == 0);
    char expect[32];
    snprintf(expect, sizeof expect, "%d.%d.%d", FLASHCL_VERSION_MAJOR, FLASHCL_VERSION_MINOR, FLASHCL_VERSION_PATCH);
    CHECK(strcmp(flashcl_version_string(), expect) == 0);
    /* The CMake project version and the header must be bumped together. */
    CHECK(strcmp(FLASHCL_TEST_PROJECT_VERSION, FLASHCL_VERSION_STRING) == 0);
}

int main(void) {
    check_own_codes();
    check_opencl_codes();
    check_unknown_codes();
    check_version();
    return tu_finish("test_status");
}
