/* Writing tuning files in tests: as the tuner seals them (identity, body, checksum line), or raw bytes. */
#ifndef FLASHCL_TEST_TUNING_TEXT_H
#define FLASHCL_TEST_TUNING_TEXT_H

#include <stddef.h>

/* Writes n bytes of text to path (REQUIRE on failure). */
void tt_write_text(const char *path, const char *text, size_t n);
/* identity + body + "checksum=<FNV-1a of both>\n": a file the library accepts when identity is its own. */
void tt_write_sealed(const char *path, const char *identity, const char *body);

#endif
