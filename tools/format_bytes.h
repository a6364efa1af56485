/* Byte counts for people: "512 KiB", "15.6 GiB". */
#ifndef FLASHCL_TOOLS_FORMAT_BYTES_H
#define FLASHCL_TOOLS_FORMAT_BYTES_H

#include <stddef.h>
#include <stdint.h>

/* Exact below 1 KiB ("640 B"), else one decimal in the largest binary unit that fits. */
void format_bytes(uint64_t bytes, char *buf, size_t buf_size);

#endif
