/* Monotonic wall-clock time for timing runs. */
#ifndef FLASHCL_TOOLS_WALL_CLOCK_H
#define FLASHCL_TOOLS_WALL_CLOCK_H

/* Seconds since an arbitrary fixed point; only differences mean anything. */
double wall_seconds(void);

#endif
