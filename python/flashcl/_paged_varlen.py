"""flash_attn_varlen_func with block_table: packed queries against a paged KV cache (chunked
prefill, as vLLM calls it), forward only.

The library's KV-cache call takes a batch of equal-length queries, so the packed queries are
laid out as (batch, longest, heads, d) with each sequence's rows at the END of its slot. That
keeps every mask exact: causal, the window and ALiBi align query row i of a sequence of
seqlen_q rows with key i + seqlen_k - seqlen_q (bottom right), and a row placed at slot index
longest - seqlen_q + i gets that same offset against the slot's length. The slot's first rows
are zeros whose results are dropped. One call for the whole batch; the cache is handled as by
flash_attn_with_kvcache (in place where the device shares host memory or it is a DeviceArray). The
work is batch x longest rows: a batch mixing one long chunk with many one-row sequences pays for
padding (flash_attn's grid pays for max_seqlen_q the same way).
"""
import numpy as np

from . import _arrays, _core, _device, _kvcache


def _offsets(name, cu, total, max_name, max_len, batch=None):
    """An int32 (batch + 1,) cu_seqlens as int64 numpy, checked as the varlen path checks it."""
    cu = _arrays.native(cu)  # (byte-swapped: read by its values, as the varlen path reads it)
    _core._need(_arrays.dtype_name(cu) == "int32",
                lambda: f"{name} must have dtype int32, got {_arrays.dtype_name(cu)}")
    values = _arrays.to_numpy(cu).astype(np.int64)
    _core._need(values.ndim == 1 and values.shape[0] >= 2 and (batch is None or values.shape[0] == batch + 1),
                lambda: f"{name} must be (batch + 1,)" + (f" = ({batch + 1},)" if batch is not None else "") +
                f", got shape {tuple(values.shape)}")
    _core.check_max_seqlen(max_name, max_len)
    _core._check_cu_seqlens(name, values, total, int(max_len), max_name)
    return values


def forward(q, k_cache, v_cache, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, spec, block_table,
            return_attn_probs):
    """out (total_q, nheads, d_v), or (out, softmax_lse (nheads, total_q), empty S_dmask)."""
    _core._need(not spec.dropout_p, "dropout_p must be 0 with block_table (a paged KV cache is for inference)")
    resident = isinstance(k_cache, _device.DeviceArray)  # device-resident pools: checked by forward_kvcache
    pools = [] if resident else [("k", k_cache), ("v", v_cache)]
    named = [("q", q)] + pools + [("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k),
                                  ("block_table", block_table), ("alibi_slopes", spec.alibi_slopes)]
    if _arrays.kind_check(named, required=("q", "k", "v", "cu_seqlens_q", "cu_seqlens_k")):
        _arrays.refuse_no_data(named)
    qs = _core._shape(q)
    _core._need(len(qs) == 3, lambda: f"q must be (total_q, nheads, headdim), got shape {qs}")
    total_q, heads, dim = qs
    starts_q = _offsets("cu_seqlens_q", cu_seqlens_q, total_q, "max_seqlen_q", max_seqlen_q)
    batch = starts_q.shape[0] - 1
    # (k and v are pages, not packed rows: no total to end within)
    starts_k = _offsets("cu_seqlens_k", cu_seqlens_k, 2**31 - 1, "max_seqlen_k", max_seqlen_k, batch)
    lens_q, lens_k = np.diff(starts_q), np.diff(starts_k)
    for name, x in (("k", k_cache), ("v", v_cache)):
        s = _core._shape(x)
        _core._need(len(s) == 4, lambda: f"{name} must be (num_blocks, page_block_size, nheads_k, headdim) with "
                                         f"block_table, got shape {s}")
    bts = _core._shape(block_table)
    _core._need(len(bts) == 2, lambda: f"block_table must be (batch, max_num_blocks_per_seq), got shape {bts}")
    capacity = bts[1] * _core._shape(k_cache)[1]
    over = np.nonzero(lens_k > capacity)[0]
    _core._need(over.size == 0, lambda: f"sequence {over[0]} has {lens_k[over[0]]} keys (cu_seqlens_k) but "
                                        f"block_table holds {capacity} rows (max_num_blocks_per_seq x page_block_size)")

    out_device = q.device if _arrays.is_torch(q) and q.device.type != "cpu" else None
    q_host = _arrays.host(q.detach() if _arrays.is_torch(q) else q)
    dim_v = _core._shape(v_cache)[3]
    out = _arrays.zeros(q_host, (total_q, heads, dim_v))
    lse = _arrays.empty(q_host, (heads, total_q), "float32")
    lse[...] = -np.inf  # rows past cu_seqlens_q[-1] belong to no sequence: out 0, LSE -inf (as the varlen path)
    longest = int(lens_q.max())  # (batch >= 1: cu_seqlens has at least two entries)
    if longest:
        padded = _arrays.zeros(q_host, (batch, longest, heads, dim))
        for b in range(batch):
            padded[b, longest - int(lens_q[b]):] = q_host[int(starts_q[b]):int(starts_q[b + 1])]
        cache_seqlens = lens_k.astype(np.int32)
        if _arrays.is_torch(q):
            cache_seqlens = _arrays.torch_module().from_numpy(cache_seqlens)
        out_p, lse_p = _kvcache.forward_kvcache(padded, k_cache, v_cache, cache_seqlens=cache_seqlens,
                                                block_table=block_table, spec=spec, return_lse=True,
                                                window_bound=int(max_seqlen_k))
        for b in range(batch):
            rows, first = slice(int(starts_q[b]), int(starts_q[b + 1])), longest - int(lens_q[b])
            out[rows] = out_p[b, first:]
            lse[:, rows] = lse_p[b, :, first:]
    if out_device is not None:
        out, lse = out.to(out_device), lse.to(out_device)
    if _arrays.is_torch(out):  # flash_attn's paged varlen call has no backward either, and fails only there
        from . import _torch

        message = ("flash_attn_varlen_func with block_table has no backward (a paged KV cache is for inference; "
                   "flash_attn has none either)")
        tensors = (q, spec.alibi_slopes) + (() if resident else (k_cache, v_cache))
        out = _torch.refuse_backward(out, message, tensors)
        lse = _torch.refuse_backward(lse, message, tensors)  # an output as out (flash_attn's), refused alike
    if not return_attn_probs:
        return out
    empty = np.empty((0,), np.float32)
    return out, lse, (_arrays.torch_module().from_numpy(empty).to(out.device) if _arrays.is_torch(out) else empty)

