/* Human-readable byte counts. */
#include "format_bytes.h"

#include <stdio.h>

void format_bytes(uint64_t bytes, char *buf, size_t buf_size)
{
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
