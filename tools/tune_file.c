#include "tune_file.h"

#include <errno.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <flashcl.h>

#include "atomic_file.h"

int tune_log_add(tune_log *log, const tune_record *r) {
    if (log->count == log->cap) {
        size_t cap = log->cap ? 2 * log->cap : 64;
        tune_record *grown = realloc(log->records, cap * sizeof *grown);
        if (!grown) return -1;
        log->records = grown;
        log->cap = cap;
    }
    log->records[log->count++] = *r;
    return 0;
}

/* "measured KEY tile=T size=b1_h8_n2048 ms=1.5 verified=1", KEY as the library's tuned lines have it
   ("d=64 dtype=f32 causal=0", "decode d=128 dtype=f32 cache=same rows=4"). */
static int parse_measured(const char *line, tune_record *r) {
    int verified = 0;
    char tile[TUNE_TILE_CAP], size[96], ms[32];
    const char *key = line + 9, *tail = strstr(key, " tile=");
    if (!tail || tail == key || (size_t)(tail - key) >= sizeof r->key ||
        sscanf(tail, " tile=%95s size=%95s ms=%31s verified=%d", tile, size, ms, &verified) != 4)
        return -1;
    memset(r, 0, sizeof *r);
    snprintf(r->key, sizeof r->key, "%.*s", (int)(tail - key), key);
    snprintf(r->tile, sizeof r->tile, "%s", tile);
    snprintf(r->size, sizeof r->size, "%s", size);
    r->ms = strcmp(ms, "-") == 0 ? NAN : strtod(ms, NULL);
    r->verified = verified == 1;
    return 0;
}

int tune_log_load(tune_log *log, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return errno == ENOENT ? 0 : -1;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        tune_record r;
        if (strncmp(line, "measured ", 9) == 0 && parse_measured(line, &r) == 0 && tune_log_add(log, &r) != 0) {
            fclose(f);
            return -1;
        }
    }
    fclose(f);
    return 0;
}

const tune_record *tune_log_find(const tune_log *log, const char *key, const char *tile, const char *size) {
    for (size_t i = 0; i < log->count; ++i) {
        const tune_record *r = &log->records[i];
        if (strcmp(r->key, key) == 0 && strcmp(r->tile, tile) == 0 && strcmp(r->size, size) == 0) return r;
    }
    return NULL;
}

const tune_record *tune_log_best(const tune_log *log, const char *key, const char *size) {
    const tune_record *best = NULL;
    for (size_t i = 0; i < log->count; ++i) {
        const tune_record *r = &log->records[i];
        if (strcmp(r->key, key) != 0 || strcmp(r->size, size) != 0 || !r->verified || !isfinite(r->ms)) continue;
        if (!best || r->ms < best->ms) best = r;
    }
    return best;
}

const tune_record *tune_log_winner(const tune_log *log, const char *key, const char *size) {
    char confirm[128];
    snprintf(confirm, sizeof confirm, "%s%s", size, TUNE_CONFIRM_SUFFIX);
    const tune_record *c = tune_log_best(log, key, confirm);
    return c ? c : tune_log_best(log, key, size);
}

/* Appends printf text to a growing buffer; returns -1 out of memory. */

static int append(char **buf, size_t *len, size_t *cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return -1;
    if (*len + (size_t)n + 1 > *cap) {
        size_t c = (*cap + (size_t)n + 1) * 2;
        char *g = realloc(*buf, c);
        if (!g) return -1;
        *buf = g;
        *cap = c;
    }
    va_start(ap, fmt);
    vsnprintf(*buf + *len, *cap - *len, fmt, ap);
    va_end(ap);
    *len += (size_t)n;
    return 0;
}

int tune_log_write(const tune_log *log, const char *path, const char *identity, char *err, size_t cap) {
    char *buf = NULL;
    size_t len = 0, bcap = 0;
    int rc = append(&buf, &len, &bcap, "%s", identity);
    /* One tuned line per key: its best at the size it was measured at last. */
    for (size_t i = 0; i < log->count && rc == 0; ++i) {
        const tune_record *r = &log->records[i];
        bool later_key = false;
        for (size_t j = i + 1; j < log->count; ++j)
            if (strcmp(log->records[j].key, r->key) == 0) later_key = true;
        if (later_key) continue;
        char size[96];
        snprintf(size, sizeof size, "%s", r->size);
        char *suffix = strstr(size, TUNE_CONFIRM_SUFFIX);
        if (suffix) *suffix = '\0';
        const tune_record *best = tune_log_winner(log, r->key, size);
        if (best) rc = append(&buf, &len, &bcap, "tuned %s tile=%s\n", best->key, best->tile);
    }
    for (size_t i = 0; i < log->count && rc == 0; ++i) {
        const tune_record *r = &log->records[i];
        char ms[32] = "-";
        if (isfinite(r->ms)) snprintf(ms, sizeof ms, "%.6g", r->ms);
        rc = append(&buf, &len, &bcap, "measured %s tile=%s size=%s ms=%s verified=%d\n", r->key, r->tile, r->size, ms,
                    r->verified ? 1 : 0);
    }
    if (rc == 0)
        rc = append(&buf, &len, &bcap, "checksum=%016llx\n", (unsigned long long)flashcl_tuning_checksum(buf, len));
    if (rc != 0) {
        free(buf);
        snprintf(err, cap, "out of host memory");
        return -1;
    }
    atomic_file af;
    memset(&af, 0, sizeof af);
    rc = atomic_file_open(&af, path, err, cap);
    if (rc == 0 && fwrite(buf, 1, len, af.stream) != len) {
        snprintf(err, cap, "%s: write failed", path);
        rc = -1;
    }
    if (rc == 0) rc = atomic_file_finish(&af, err, cap);
    if (rc == 0) rc = atomic_file_publish(&af, err, cap);
    if (rc != 0) atomic_file_abort(&af);
    free(buf);
    return rc;
}

void tune_log_free(tune_log *log) {
    free(log->records);
    log->records = NULL;
    log->count = log->cap = 0;
}
