/* Helpers shared by `bench`'s forward and backward modes. */
#ifndef FLASHCL_TOOLS_BENCH_COMMON_H
#define FLASHCL_TOOLS_BENCH_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <flashcl.h>

/* a*b*c*d*sizeof(float), or 0 when that overflows size_t. */
size_t bench_tensor_bytes(size_t a, size_t b, size_t c, size_t d);

/* Statuses that mean "the buffers do not fit", which skip the standard path. */
bool bench_is_allocation_failure(int status);

/* "STATUS_NAME: detail" for a failed call on ctx. */
void bench_describe_failure(flashcl_context *ctx, int status, char *buf, size_t size);

/*
 * Refuses (one line, TOOL_EXIT_FAILED) a buffer larger than the device's
 * largest allocation, before time goes into filling it. Returns 0 otherwise.
 */
int bench_check_fits(flashcl_context *ctx, size_t largest_bytes);

/*
 * A device buffer of `bytes`. With state != NULL it is filled with the next
 * uniform [-1, 1) values of *state, through staging (at least bytes long);
 * otherwise it is left uninitialised for outputs.
 */
cl_int bench_create_buffer(cl_context cl, size_t bytes, float *staging, uint64_t *state,
                           cl_mem *out);

/* The fixed seed every run starts from, so all runs see the same inputs. */
#define BENCH_RANDOM_SEED 0x853c49e6748fea9bu

#endif
