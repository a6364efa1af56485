/*
 * The driver's PTX of a wgmma build (cl/flash_fwd_mma.cl or cl/probe_wgmma_mma.cl with MMA_WG=1)
 * -> PTX that ptxas compiles for sm_90a: every line whose text starts with the marker "//WG "
 * (cl/ptx.cl's WG) loses the marker, `.target sm_90` becomes `.target sm_90a`, and a `.version`
 * below 8.0 (the ISA that brought wgmma) becomes 8.0. Nothing else changes, so the registers the
 * marked lines name stay the ones the compiler bound. Plain text in, text out: no OpenCL here
 * (tests/test_wgmma_patch.c runs it on any machine).
 */
#include "nvidia.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WG_MARK "//WG "

static int starts_with(const char *s, const char *end, const char *prefix) {
    const size_t n = strlen(prefix);
    return (size_t)(end - s) >= n && memcmp(s, prefix, n) == 0;
}

/* The PTX ISA version at [s, end) ("8.5" -> 8), or 0 when it does not start with a digit. */
static int version_major(const char *s, const char *end) {
    int v = 0;
    while (s < end && *s == ' ') ++s;
    for (; s < end && *s >= '0' && *s <= '9' && v < 1000; ++s) v = v * 10 + (*s - '0');
    return v;
}

int flashcl__wgmma_patch(const unsigned char *in, size_t n, unsigned char **out, size_t *out_n, char *why, size_t cap) {
    const char *text = (const char *)in, *end = text + n;
    while (end > text && end[-1] == '\0') --end; /* the driver's binary may carry its terminator */
    /* A line grows by at most 13 bytes (".version 8.0\n" for ".version 7"): room for every line. */
    size_t lines = 1;
    for (const char *p = text; p < end; ++p) lines += *p == '\n';
    char *buf = malloc((size_t)(end - text) + 14 * lines + 1);
    if (!buf) {
        snprintf(why, cap, "out of host memory patching PTX");
        return 0;
    }
    size_t at = 0;
    int marked = 0, target = 0;
    for (const char *line = text; line < end;) {
        const char *eol = memchr(line, '\n', (size_t)(end - line));
        const char *next = eol ? eol + 1 : end, *lend = eol ? eol : end;
        const char *body = line;
        while (body < lend && (*body == ' ' || *body == '\t')) ++body;
        if (starts_with(body, lend, WG_MARK)) {
            memcpy(buf + at, line, (size_t)(body - line)); /* indentation */
            at += (size_t)(body - line);
            body += sizeof WG_MARK - 1;
            memcpy(buf + at, body, (size_t)(next - body));
            at += (size_t)(next - body);
            ++marked;
        } else if (starts_with(line, lend, ".target sm_")) {
            const char *arch = line + 8, *stop = arch;
            while (stop < lend && *stop != ',' && *stop != ' ' && *stop != '\t' && *stop != '\r') ++stop;
            if (!(stop - arch == 5 && memcmp(arch, "sm_90", 5) == 0) &&
                !(stop - arch == 6 && memcmp(arch, "sm_90a", 6) == 0)) {
                snprintf(why, cap, "the driver's PTX targets %.*s; wgmma needs sm_90", (int)(stop - arch), arch);
                free(buf);
                return 0;
            }
            at += (size_t)sprintf(buf + at, ".target sm_90a");
            memcpy(buf + at, stop, (size_t)(next - stop));
            at += (size_t)(next - stop);
            target = 1;
        } else if (starts_with(line, lend, ".version ") && version_major(line + 9, lend) < 8) {
            at += (size_t)sprintf(buf + at, ".version 8.0\n"); /* wgmma came with PTX ISA 8.0 */
        } else {
            memcpy(buf + at, line, (size_t)(next - line));
            at += (size_t)(next - line);
        }
        line = next;
    }
    if (!target || marked == 0) {
        snprintf(why, cap, "%s", !target ? "no .target line in the driver's PTX" : "no marked wgmma lines in the PTX");
        free(buf);
        return 0;
    }
    buf[at] = '\0';
    *out = (unsigned char *)buf;
    *out_n = at + 1; /* clCreateProgramWithBinary takes PTX text with its terminator */
    return 1;
}
