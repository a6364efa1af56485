#include "tuning_text.h"

#include <stdio.h>

#include <flashcl.h>

#include "testutil.h"

void tt_write_text(const char *path, const char *text, size_t n) {
    FILE *f = fopen(path, "wb");
    REQUIRE(f != NULL);
    REQUIRE(fwrite(text, 1, n, f) == n);
    fclose(f);
}

void tt_write_sealed(const char *path, const char *identity, const char *body) {
    char text[8192];
    int n = snprintf(text, sizeof text, "%s%s", identity, body);
    REQUIRE(n > 0 && (size_t)n < sizeof text - 32);
    n += snprintf(text + n, sizeof text - (size_t)n, "checksum=%016llx\n",
                  (unsigned long long)flashcl_tuning_checksum(text, (size_t)n));
    tt_write_text(path, text, (size_t)n);
}
