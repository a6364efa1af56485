/*
 * FlashCL MPI component: ring attention (context parallelism) across the
 * processes of an MPI communicator. Optional: built as flashcl_mpi
 * (CMake target FlashCL::mpi) when CMake finds MPI. The core's one public
 * header stays flashcl.h; this header is the component's.
 *
 * The sequence (self-attention, seqlen_q = seqlen_k = N) is split over the
 * P ranks of the communicator. Every rank holds its rows of Q, K and V and of
 * the outputs; K and V travel around the ring (rank r sends to r + 1 and
 * receives from r - 1, non-blocking, while it computes with the chunk it
 * holds), so after P steps every query row has seen every key. Each step's
 * partial (O, LSE) is merged into the running one with flashcl_merge_states.
 * The backward sends dK/dV accumulators around the ring with their K/V chunk
 * and they arrive home after the last step.
 *
 * Layouts (flashcl_ring_layout), for a global sequence of N rows:
 *   CONTIGUOUS: rank r holds rows [r*N/P, (r+1)*N/P) (N % P == 0).
 *   ZIGZAG: the sequence is cut into 2P chunks of c = N/(2P) rows
 *     (N % 2P == 0); rank r holds chunk r, then chunk 2P-1-r, in that order
 *     in its local rows. With a causal mask every rank then does the same
 *     work at every step (2c x c visible scores), where CONTIGUOUS leaves
 *     rank 0 idle for most steps. flashcl_ring_rows says which rows a rank holds.
 *
 * Every rank passes the descriptor of its own chunk: seqlen_q = seqlen_k = the
 * local row count (N/P), the same batch, heads, head dims, scale, causal and
 * softcap on every rank. causal is the global bottom-right (= top-left, as
 * seqlen_q = seqlen_k) mask, evaluated on global positions: per step a
 * (query chunk, key chunk) pair is fully visible (one plain call), on the
 * diagonal (a causal call) or invisible (skipped). A window (desc->window,
 * window_left, window_right, the same on every rank; -1 = unbounded; causal
 * makes window_right 0) is on global positions too: key j is visible to
 * query i iff i - window_left <= j <= i + window_right. Per (query chunk,
 * key chunk) pair the call takes the query rows that see some key of the
 * chunk and the keys they see, with the core's bottom-right window on those
 * sub-views reproducing the band; a pair with an empty band is skipped, and
 * the rows a call leaves out get nothing from it (forward and backward).
 * Supported: float32, f16 and bf16 storage (desc->dtype, the same on every
 * rank), GQA/MQA, d_qk != d_v, causal, windows, softcap, any tensor strides. With 16-bit storage K/V travel in the
 * storage type; each step's partial O (and, backward, each call's dQ/dK/dV)
 * leaves the core rounded to storage and is merged or summed in float32; the
 * running O, the dQ sum and the dK/dV accumulators that travel around the
 * ring are float32 and are rounded to storage once, into the outputs. The LSE
 * is float32 always. Not supported (FLASHCL_ERR_UNSUPPORTED_VARIANT):
 * ALiBi, sinks, dropout, bias and masks, varlen (their positions or
 * denominators do not split over chunks with the descriptor's fields).
 *
 * Errors: each rank checks its arguments, then all ranks agree on the status
 * (MPI_Allreduce) before any K/V is sent, so a bad argument on one rank makes
 * every rank return an error instead of hanging. A failure later (an OpenCL
 * error on one rank) does not stop the ring's exchanges, whose pattern never
 * depends on data; all ranks agree again at the end. Every rank returns the
 * lowest (most negative) status any rank had. Communication uses a duplicate
 * of comm with MPI_ERRORS_RETURN, so MPI errors come back as
 * FLASHCL_ERR_MPI instead of aborting. The calls are blocking (they return
 * when the outputs are written) and collective over comm. The message of a
 * failure goes to flashcl_ring_desc.err_buf when the caller gives one (every
 * rank gets the failing rank's, which names the field, the MPI call and its
 * error string, or carries the core's flashcl_last_error text); a core call's
 * message also stays in flashcl_last_error(ctx) on the rank where it failed,
 * until the component's next core call. The component never prints.
 */
#ifndef FLASHCL_MPI_H
#define FLASHCL_MPI_H

#include <flashcl.h>
#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

/* An MPI call failed on some rank: FLASHCL_ERR_MPI (-10350, in the core's status map). */

typedef enum flashcl_ring_layout {
    FLASHCL_RING_CONTIGUOUS = 0, /* rank r holds rows [r*N/P, (r+1)*N/P) */
    FLASHCL_RING_ZIGZAG = 1      /* rank r holds chunks r and 2P-1-r of N/(2P) rows (balanced causal work) */
} flashcl_ring_layout;

/* Ring options. Start from FLASHCL_RING_DESC_INIT. */
typedef struct flashcl_ring_desc {
    size_t struct_size; /* sizeof(flashcl_ring_desc) where the caller was compiled */
    flashcl_ring_layout layout;
    /* Optional per-step timings in seconds, arrays of comm-size doubles (NULL = not recorded):
       compute: the step's attention calls, enqueue to completion (backward: with the host
         sums of the step's gradients; f16/bf16 forward: with the host widening of each
         partial O);
       wait: time blocked on the ring's transfers after the step's compute, the part of the
         communication the compute did not hide;
       stage: the part of writing the next step's K/V to the device (host staging) that the
         compute did not hide (the write starts, on a queue of its own, once the message is in). */
    double *step_compute_s, *step_wait_s, *step_stage_s;
    /* Optional (NULL = none): on failure, a message of at most err_buf_size - 1 characters, the
       same on every rank: "rank R of P: " and what failed first on rank R (the field and its
       value, the MPI call and its MPI_Error_string, the OpenCL call, or the core call with its
       flashcl_last_error text), or, without a rank, the field the ranks disagree on (with the
       smallest and largest value); "" on success. With comm = MPI_COMM_NULL each rank writes
       its own. Written only by the call it is passed to: no state is kept between calls. */
    char *err_buf;
    size_t err_buf_size;
} flashcl_ring_desc;

/* As flashcl.h's *_INIT macros: in C++ the macro calls the init function (a designated initializer
   naming one member is C++20 only, and g++ -Wextra warns there about every member it leaves out). */
#ifdef __cplusplus
#define FLASHCL_RING_DESC_INIT flashcl_ring_desc_init()
#else
#define FLASHCL_RING_DESC_INIT                                                                                         \
    { .struct_size = sizeof(flashcl_ring_desc) }
#endif
static inline flashcl_ring_desc flashcl_ring_desc_init(void) {
#ifdef __cplusplus
    flashcl_ring_desc d = {};
#else
    flashcl_ring_desc d = {0};
#endif
    d.struct_size = sizeof d;
    return d;
}

/*
 * The global rows rank `rank` of `size` holds under `layout` for a sequence
 * of seqlen_global rows: num_segments (1 or 2) runs, run i starting at global
 * row first_row[i] with rows[i] rows, stored in this order in the local rows.
 * FLASHCL_ERR_INVALID_SHAPE when seqlen_global is not a multiple of size
 * (CONTIGUOUS) or 2*size (ZIGZAG); FLASHCL_ERR_INVALID_ARGUMENT for a NULL
 * pointer or a rank outside 0..size-1.
 */
FLASHCL_API flashcl_status flashcl_ring_rows(flashcl_ring_layout layout, size_t seqlen_global, int size, int rank,
                                             size_t first_row[2], size_t rows[2], int *num_segments);

/*
 * Ring forward, collective over comm. desc describes this rank's chunk
 * (seqlen_q = seqlen_k = local rows); q, k, v, o are views of the local rows
 * as for flashcl_forward; lse (NULL or float32 [batch, heads_q, local rows]
 * from lse_offset) receives the global log-sum-exp of each local row, which
 * flashcl_ring_backward needs. ring may be NULL (CONTIGUOUS, no timings).
 */
FLASHCL_API flashcl_status flashcl_ring_forward(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                                const flashcl_ring_desc *ring, const flashcl_tensor *q,
                                                const flashcl_tensor *k, const flashcl_tensor *v,
                                                const flashcl_tensor *o, cl_mem lse, size_t lse_offset, MPI_Comm comm);

/*
 * Ring backward, collective over comm: the gradients of this rank's rows
 * (dq of its queries, dk/dv of its keys and values, summed over every rank's
 * queries and, with GQA, over each group's query heads). o and lse are what
 * flashcl_ring_forward returned for the local rows (the global O and LSE),
 * dout the local rows of dO; views as for flashcl_backward.
 */
FLASHCL_API flashcl_status flashcl_ring_backward(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                                 const flashcl_ring_desc *ring, const flashcl_tensor *q,
                                                 const flashcl_tensor *k, const flashcl_tensor *v,
                                                 const flashcl_tensor *o, const flashcl_tensor *dout, cl_mem lse,
                                                 size_t lse_offset, const flashcl_tensor *dq, const flashcl_tensor *dk,
                                                 const flashcl_tensor *dv, MPI_Comm comm);

#ifdef __cplusplus
}
#endif

#endif /* FLASHCL_MPI_H */
