/*
 * Minimal .npy reading and writing for the CLI test: little-endian float32
 * (raw writes take any descr), C order (one writer makes Fortran order),
 * format version 1.0. Written here rather than borrowed from the
 * tool, so the test does not trust the code it checks.
 */
#ifndef FLASHCL_TEST_NPYIO_H
#define FLASHCL_TEST_NPYIO_H

#include <stddef.h>

#define NPY_MAX_RANK 8

/* Writes `count` elements of `elem_size` bytes with dtype string `descr` ("<f4"). */
int npy_write_raw(const char *path, const char *descr, const size_t *shape, int rank, const void *data,
                  size_t elem_size);
/* A float32 array; returns 1 on success. */
int npy_write_f32(const char *path, const size_t *shape, int rank, const float *data);
/* The same array (data in C order) written as numpy saves a transposed one: fortran_order True. */
int npy_write_f32_fortran(const char *path, const size_t *shape, int rank, const float *data);
/* Reads a float32 C-order array; NULL (with a message on stderr) on any problem. */
float *npy_read_f32(const char *path, size_t *shape, int *rank);

#endif
