/* Constructors for the two common tensor layouts. */
#include "internal.h"

flashcl_tensor flashcl_tensor_bshd(cl_mem buffer, size_t seqlen, size_t heads, size_t head_dim) {
    flashcl_tensor t = {buffer, 0, seqlen * heads * head_dim, head_dim, heads * head_dim};
    return t;
}

flashcl_tensor flashcl_tensor_bhsd(cl_mem buffer, size_t seqlen, size_t heads, size_t head_dim) {
    flashcl_tensor t = {buffer, 0, heads * seqlen * head_dim, seqlen * head_dim, head_dim};
    return t;
}
