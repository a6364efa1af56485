/*
 * The dropout keep mask flash calls apply, written out for tests and
 * debugging: one work-item per (i, j) of a [batch, heads_q, rows, cols] byte
 * array (rows/cols = max sequence lengths; 0 outside a varlen sequence).
 * It calls flashcl_dropout_keep, the definition (cl/variants.cl) that the
 * portable kernels call per element and the tensor-core and CPU kernels
 * compute in their own layouts; the tests hold them all to it bit for bit.
 * Grid: (cols rounded up, rows, batch * heads_q).
 */
__kernel void flash_dropout_mask(__global uchar *out, ulong out_off, int rows, int cols, int heads_q, int seqlen_q,
                                 int seqlen_k, VARIANT_ARGS) {
    const long j = (long)get_global_id(0);
    const long i = (long)get_global_id(1);
    const int bh = (int)get_global_id(2);
    const int b = bh / heads_q, h = bh - b * heads_q;
    if (j >= cols) return;
    const flashcl_head hd = flashcl_head_setup(b, h, heads_q, seqlen_q, seqlen_k, VARIANT_PASS);
    uchar keep = 0;
    if (i < hd.sq && j < hd.sk)
        keep = (uchar)flashcl_dropout_keep(hd, i, j, drop_threshold, seed_lo, seed_hi, drop_off_lo, drop_off_hi);
    out[out_off + (((ulong)b * heads_q + h) * rows + i) * cols + j] = keep;
}
