/* Write-to-temporary-then-rename output files; see atomic_file.h. */
#define _XOPEN_SOURCE 700 /* POSIX 2008 with XSI: open, fdopen, getpid, access, stat, realpath */

#include "atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

static char *copy_string(const char *s) {
    size_t n = strlen(s) + 1;
    char *copy = malloc(n);
    if (copy != NULL) memcpy(copy, s, n);
    return copy;
}

bool atomic_file_same(const char *a, const char *b) {
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* Cuts `copy` (a copy of a path) to its directory part and returns that directory's name: "." for
   a bare file name, "/" for a name in the root directory. */
static const char *directory_of(char *copy) {
    char *slash = strrchr(copy, '/');
    if (slash == NULL) return ".";
    if (slash == copy) return "/";
    *slash = '\0';
    return copy;
}

/* The resolved directory of path (realpath of its directory part) and where its last component
   starts; false when the directory cannot be resolved. */
static bool resolve_parent(const char *path, char *dir_out, const char **base) {
    char *dir = copy_string(path);
    if (dir == NULL) return false;
    const char *resolved = realpath(directory_of(dir), dir_out);
    free(dir);
    const char *last = strrchr(path, '/');
    *base = last ? last + 1 : path;
    return resolved != NULL;
}

bool atomic_file_same_destination(const char *a, const char *b) {
    if (strcmp(a, b) == 0 || atomic_file_same(a, b)) return true;
    char da[PATH_MAX], db[PATH_MAX];
    const char *ba, *bb;
    return resolve_parent(a, da, &ba) && resolve_parent(b, db, &bb) && strcmp(da, db) == 0 && strcmp(ba, bb) == 0;
}

/* Where writing `path` puts the file: the path itself, or the file a symbolic link names (the
   rename then replaces that file, not the link). NULL, with the reason in err, for what cannot be
   replaced by a rename: a directory, a device, a FIFO or socket (renaming over /dev/null as root
   would replace the device node), a link to nothing. */
static char *destination(const char *path, char *err, size_t err_size) {
    struct stat st;
    if (lstat(path, &st) != 0) { /* a new file */
        char *copy = copy_string(path);
        if (copy == NULL) snprintf(err, err_size, "out of memory");
        return copy;
    }
    char *target = S_ISLNK(st.st_mode) ? realpath(path, NULL) : copy_string(path);
    if (target == NULL || stat(target, &st) != 0) {
        if (errno == ENOENT)
            snprintf(err, err_size, "'%s' is a symbolic link to a missing file", path);
        else
            snprintf(err, err_size, "cannot resolve '%s': %s", path, strerror(errno));
        free(target);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, err_size,
                 S_ISDIR(st.st_mode) ? "'%s' is a directory"
                                     : "'%s' is not a regular file (outputs are written to a temporary file "
                                       "renamed over the destination)",
                 path);
        free(target);
        return NULL;
    }
    return target;
}

int atomic_file_check(const char *path, char *err, size_t err_size) {
    if (path[0] == '\0') {
        snprintf(err, err_size, "empty file name");
        return -1;
    }
    char *dir = destination(path, err, err_size);
    if (dir == NULL) return -1;
    const char *dir_name = directory_of(dir); /* where the temporary file goes */
    int rc = 0;
    if (access(dir_name, W_OK | X_OK) != 0) {
        snprintf(err, err_size, "cannot write to directory '%s': %s", dir_name, strerror(errno));
        rc = -1;
    }
    free(dir);
    return rc;
}

int atomic_file_open(atomic_file *af, const char *path, char *err, size_t err_size) {
    memset(af, 0, sizeof *af);
    af->final_path = destination(path, err, err_size);
    if (af->final_path == NULL) return -1;
    path = af->final_path; /* a link's target: the temporary file goes next to it */
    size_t cap = strlen(path) + 48;
    af->temp_path = malloc(cap);
    if (af->temp_path == NULL) {
        snprintf(err, err_size, "out of memory");
        atomic_file_abort(af);
        return -1;
    }
    /* O_EXCL: never reuse (or follow a link planted at) an existing name.
     * Mode 0666 lets the umask decide, as for any file the user creates. */
    int fd = -1;
    for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
        snprintf(af->temp_path, cap, "%s.tmp-%ld-%d", path, (long)getpid(), attempt);
        fd = open(af->temp_path, O_WRONLY | O_CREAT | O_EXCL, 0666);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0) {
        snprintf(err, err_size, "cannot create '%s': %s", af->temp_path, strerror(errno));
        free(af->temp_path);
        af->temp_path = NULL; /* nothing of ours to remove */
        atomic_file_abort(af);
        return -1;
    }
    af->stream = fdopen(fd, "wb");
    if (af->stream == NULL) {
        snprintf(err, err_size, "cannot open '%s': %s", af->temp_path, strerror(errno));
        close(fd);
        atomic_file_abort(af);
        return -1;
    }
    return 0;
}

int atomic_file_finish(atomic_file *af, char *err, size_t err_size) {
    FILE *stream = af->stream;
    af->stream = NULL;
    int failed = ferror(stream) != 0;
    if (fclose(stream) != 0) failed = 1;
    if (failed) {
        snprintf(err, err_size, "cannot write '%s': %s", af->final_path, strerror(errno));
        return -1;
    }
    return 0;
}

int atomic_file_publish(atomic_file *af, char *err, size_t err_size) {
    if (rename(af->temp_path, af->final_path) != 0) {
        snprintf(err, err_size, "cannot rename '%s' to '%s': %s", af->temp_path, af->final_path, strerror(errno));
        return -1;
    }
    free(af->temp_path);
    af->temp_path = NULL;
    free(af->final_path);
    af->final_path = NULL;
    return 0;
}

void atomic_file_abort(atomic_file *af) {
    if (af->stream != NULL) {
        fclose(af->stream);
        af->stream = NULL;
    }
    if (af->temp_path != NULL) {
        remove(af->temp_path);
        free(af->temp_path);
        af->temp_path = NULL;
    }
    free(af->final_path);
    af->final_path = NULL;
}
