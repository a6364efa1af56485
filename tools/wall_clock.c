/* CLOCK_MONOTONIC, so a clock adjustment during a benchmark cannot skew it. */
#define _POSIX_C_SOURCE 199309L

#include "wall_clock.h"

#include <time.h>

double wall_seconds(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
        return 0.0;
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
