/* The variant half of fuzz_attention (see fuzz_variants.c). */
#ifndef FLASHCL_FUZZ_VARIANTS_H
#define FLASHCL_FUZZ_VARIANTS_H

#include "fuzz_input.h"

/* Sets d's variant fields from the rest of the input, runs the forward (and
   flashcl_dropout_mask) on views[4] (their buffers in bufs), and aborts on any
   write outside the outputs or a refusal without a message. */
void fuzz_variant_forward(flashcl_context *ctx, flashcl_attention_desc *d, const flashcl_tensor views[4],
                          const fuzz_buffer bufs[4], fuzz_reader *r);

#endif
