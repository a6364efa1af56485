/* The generated table of embedded OpenCL C files (see cmake/embed_cl.cmake). */
#ifndef FLASHCL_KERNEL_SOURCES_H
#define FLASHCL_KERNEL_SOURCES_H
#include "internal.h"
#endif
