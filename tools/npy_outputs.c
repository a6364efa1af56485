/* Writing several .npy outputs as one all-or-nothing step; see npy_outputs.h. */
#include "npy_outputs.h"

#include <stdlib.h>

#include "atomic_file.h"
#include "npy.h"
#include "tool_errors.h"

int npy_outputs_write(const npy_output *outputs, size_t count) {
    atomic_file *files = calloc(count > 0 ? count : 1, sizeof *files);
    if (files == NULL) return tool_failure("out of host memory for the output files");
    char err[600];
    size_t opened = 0;
    int rc = 0;
    for (size_t i = 0; i < count && rc == 0; ++i) {
        const npy_output *o = &outputs[i];
        if (o->path == NULL) continue;
        if (atomic_file_open(&files[i], o->path, err, sizeof err) != 0) {
            rc = tool_failure("%s: %s", o->option, err);
            break;
        }
        opened = i + 1;
        if (npy_write(files[i].stream, o->shape, o->ndim, o->data, err, sizeof err) != 0 ||
            atomic_file_finish(&files[i], err, sizeof err) != 0)
            rc = tool_failure("%s: %s: %s", o->option, o->path, err);
    }
    /* Publish only when every file is complete, so they appear together. */
    for (size_t i = 0; i < opened && rc == 0; ++i) {
        if (outputs[i].path != NULL && atomic_file_publish(&files[i], err, sizeof err) != 0)
            rc = tool_failure("%s: %s", outputs[i].option, err);
    }
    /* A no-op for published files; removes the temporaries of the others.
     * Slots never opened are still zeroed by calloc, so aborting them is safe. */
    for (size_t i = 0; i < count; ++i) atomic_file_abort(&files[i]);
    free(files);
    return rc;
}
