"""FlashAttention-2's Python API (flash_attn 2.x) on FlashCL.

Same names, arguments, defaults, shapes and return values as
flash_attn.flash_attn_interface, so that switching is an import:

    from flashcl import flash_attn_func      # was: from flash_attn import flash_attn_func

Inputs are numpy arrays (float32, float16, ml_dtypes.bfloat16) or PyTorch
tensors (float32, float16, bfloat16), and the outputs are of the same kind.
Tensors are differentiable (torch.autograd); tensors on another device than
the CPU are copied to host memory for the call and back (FlashCL runs on an
OpenCL device, not through PyTorch's device).

Differences from flash_attn, all documented in the README:
  - float32 storage is accepted too, and V may have its own head dim (d_v != d);
  - `deterministic` is accepted and ignored: FlashCL's backward is always
    deterministic (no atomics);
  - softcap combines with dropout (flash_attn refuses the combination);
  - S_dmask (return_attn_probs=True with dropout_p > 0) is the probability
    matrix P, float32, (batch, heads, seqlen_q, seqlen_k) without
    flash_attn's rounding of the lengths up to 128, with the entries dropout
    removed negated, as flash_attn encodes them; an empty array without dropout;
  - the dropout RNG is FlashCL's (Philox4x32-10 on absolute positions, seeded
    from torch's, or numpy's, global generator), so masks differ from CUDA's;
  - flash_attn_with_kvcache takes any page_block_size (flash_attn: a multiple
    of 256) and any even rotary_dim (flash_attn: a multiple of 16); its
    in-place append into k_cache/v_cache goes through host memory, so a cache
    on another torch device is copied whole to the host and back when k, v are
    appended; fp8 caches (k_scale, v_scale) are FlashCL's extra keywords;
  - block_table in flash_attn_varlen_func (paged varlen prefill) takes any
    page_block_size too; its queries go through the KV-cache call, padded to the
    longest sequence (a padded copy of q).
"""
from . import _arrays, _core, _kvcache, _paged_varlen, _probs


def _split(packing, inputs):
    """q, k, v views of packed numpy inputs (dimension -3 holds the 3 or 2 parts)."""
    def part(x, i):
        return x[(Ellipsis, i, slice(None), slice(None))]

    if packing == "qkv":
        return part(inputs[0], 0), part(inputs[0], 1), part(inputs[0], 2)
    if packing == "kv":
        return inputs[0], part(inputs[1], 0), part(inputs[1], 1)
    return inputs


def _check_packed(packing, inputs, varlen):
    """A packed input has its parts (3 for qkv, 2 for kv) in dimension -3."""
    if packing == "none":
        return
    name, x, parts = ("qkv", inputs[0], 3) if packing == "qkv" else ("kv", inputs[1], 2)
    shape = tuple(int(n) for n in x.shape)
    rows = "total" if varlen else "batch, seqlen"
    _core._need(len(shape) == (4 if varlen else 5) and shape[-3] == parts,
                lambda: f"{name} must be ({rows}, {parts}, heads, head_dim), got shape {shape}")


def run(inputs, spec, packing="none", return_attn_probs=False, return_lse=False, varlen=False):
    """out, or (out, softmax_lse[, S_dmask]); autograd for tensors. varlen: a flash_attn_varlen_* call, whose
    cu_seqlens are required (None made it a call of the fixed-length layout, refused for its shapes)."""
    names = {"none": ("q", "k", "v"), "qkv": ("qkv",), "kv": ("q", "kv")}[packing]
    required = names + (("cu_seqlens_q", "cu_seqlens_k") if varlen else ())
    is_torch = _arrays.kind_check(list(zip(names, inputs)) + spec.arrays(), required=required)
    inputs = tuple(_arrays.rows_contiguous(x) for x in inputs)  # (strided rows: a copy, as flash_attn makes)
    _check_packed(packing, inputs, spec.varlen)
    if is_torch:  # (meta and fake tensors: outputs of the right shapes, through the operators' fake kernels)
        from . import _torch

        out, lse, rng_state = _torch.attention(inputs, spec, packing)
        if return_attn_probs and spec.dropout_p and not _arrays.holds_no_data(rng_state):
            spec.dropout_seed, spec.dropout_offset = (int(x) for x in rng_state.tolist())
        q, k, _ = _torch._Packing.split(packing, inputs)
    else:
        q, k, v = _split(packing, inputs)
        out, lse = _core.forward(q, k, v, spec)
    if return_attn_probs:
        s_dmask = _probs.s_dmask(q, k, spec)
        if is_torch:  # an output autograd tracks, as flash_attn's (its gradient ignored)
            s_dmask = _torch.ignored_gradient(s_dmask, inputs)
        return out, lse, s_dmask
    return (out, lse) if return_lse else out


def _spec(dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, **varlen):
    return _core.Spec(softmax_scale=softmax_scale, causal=causal, window_size=window_size, softcap=softcap,
                      alibi_slopes=alibi_slopes, dropout_p=dropout_p, **varlen)


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """q (batch, seqlen_q, nheads, d), k (batch, seqlen_k, nheads_k, d), v (batch, seqlen_k, nheads_k, d_v).

    nheads % nheads_k == 0 (GQA/MQA). causal is aligned to the bottom right
    (key j visible to query i iff j <= i + seqlen_k - seqlen_q); a query row
    that sees no key gets out = 0. window_size (left, right), -1 (or any negative, or a side >= seqlen_k, as
    flash_attn clips it; max_seqlen_k for varlen, the cache's rows for the KV cache) = unbounded.
    softcap > 0: scores become softcap * tanh(scores / softcap). alibi_slopes
    (nheads,) or (batch, nheads) float32: bias -slope * |i + seqlen_k - seqlen_q - j|.
    softmax_scale defaults to 1 / sqrt(d).

    Returns out (batch, seqlen_q, nheads, d_v); with return_attn_probs also
    softmax_lse (batch, nheads, seqlen_q) float32 (natural log) and S_dmask.
    """
    spec = _spec(dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes)
    return run((q, k, v), spec, "none", return_attn_probs)


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                              softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """qkv (batch, seqlen, 3, nheads, d); the gradient comes back packed the same way."""
    spec = _spec(dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes)
    return run((qkv,), spec, "qkv", return_attn_probs)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                             softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """q (batch, seqlen_q, nheads, d), kv (batch, seqlen_k, 2, nheads_k, d)."""
    spec = _spec(dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes)
    return run((q, kv), spec, "kv", return_attn_probs)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None):
    """Packed sequences: q (total_q, nheads, d), k, v (total_k, nheads_k, d[_v]).

    cu_seqlens_q/k: int32 (batch + 1,) cumulative lengths; sequence b owns rows
    cu[b] .. cu[b+1]-1. max_seqlen_q/k bound the lengths. causal, window and
    ALiBi align per sequence. softmax_lse is (nheads, total_q).

    With block_table (batch, max_num_blocks_per_seq) int32, k and v are a paged KV cache
    (num_blocks, page_block_size, nheads_k, d[_v]) whose block block_table[b][j] holds key rows
    j * page_block_size .. of sequence b, and cu_seqlens_k gives the key lengths (chunked
    prefill); forward only, as in flash_attn (a backward raises), and dropout_p must be 0
    (flash_attn ignores it there).
    """
    if block_table is not None:
        spec = _spec(dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes)
        return _paged_varlen.forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, spec, block_table,
                                     return_attn_probs)
    spec = _spec(dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, cu_seqlens_q=cu_seqlens_q,
                 cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k)
    return run((q, k, v), spec, "none", return_attn_probs, varlen=True)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0, softmax_scale=None, causal=False,
                                     window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                                     return_attn_probs=False):
    """qkv (total, 3, nheads, d) with one cu_seqlens for queries and keys."""
    spec = _spec(dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, cu_seqlens_q=cu_seqlens,
                 cu_seqlens_k=cu_seqlens, max_seqlen_q=max_seqlen, max_seqlen_k=max_seqlen)
    return run((qkv,), spec, "qkv", return_attn_probs, varlen=True)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                                    softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """q (total_q, nheads, d), kv (total_k, 2, nheads_k, d)."""
    spec = _spec(dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, cu_seqlens_q=cu_seqlens_q,
                 cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k)
    return run((q, kv), spec, "kv", return_attn_probs, varlen=True)


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, block_table=None,
                            softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None, num_splits=0, return_softmax_lse=False,
                            *, k_scale=None, v_scale=None):
    """Attention of q against a KV cache, after appending k, v into it in place (the decode step).

    q (batch, seqlen_q, nheads, d). k_cache, v_cache (batch_cache, seqlen_cache, nheads_k, d[_v]), or
    with block_table (batch, max_num_blocks_per_seq) int32 a paged pool (num_blocks, page_block_size,
    nheads_k, d[_v]) whose block block_table[b][j] holds rows j * page_block_size .. of sequence b.
    cache_seqlens: int, or int32 (batch,): the rows of each sequence in the cache before the call.
    k, v (batch, seqlen_new, nheads_k, d[_v]): written into the cache at rows cache_seqlens[b] ..
    (the caller advances cache_seqlens); the keys attended are the cache's first cache_seqlens[b] +
    seqlen_new rows. rotary_cos, rotary_sin (seqlen_ro, rotary_dim / 2): rotary embedding of the new
    keys (at positions cache_seqlens[b] + i) and of q (at cache_seqlens[b] + i when causal or
    windowed, else all at cache_seqlens[b]), rotary_interleaved: pairs (0, 1), (2, 3) .. (GPT-J),
    else the halves (GPT-NeoX); q itself is not modified. cache_batch_idx int32 (batch,): the cache
    sequence of each batch entry (contiguous caches). cache_leftpad int32 (batch,): the keys of
    sequence b start at row cache_leftpad[b] (the causal diagonal and ALiBi distances count from
    there; rotary positions stay the absolute cache rows, as in flash_attn). causal is bottom-right
    against each sequence's keys; window_size, softcap, alibi_slopes, softmax_scale as in
    flash_attn_func. num_splits: split-KV partitions (0, or any value below 1 as in flash_attn: chosen by the
    library).

    FlashCL's extras (keyword only): a float8_e4m3fn or float8_e5m2 cache (ml_dtypes or torch) holds
    x / scale; k_scale, v_scale: a number, (1,) or (nheads_k,) floats (default 1); k, v are quantised
    into it when appended.

    Returns out (batch, seqlen_q, nheads, d_v), or (out, softmax_lse) with softmax_lse
    (batch, nheads, seqlen_q) float32 (natural log) when return_softmax_lse.
    """
    if _arrays.is_torch(q):  # traced by torch.compile: one operator (_torch.kvcache), not the checks' Python
        from . import _torch

        traced = _torch.kvcache(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx,
                                cache_leftpad, block_table, softmax_scale, causal, window_size, softcap,
                                rotary_interleaved, alibi_slopes, num_splits, return_softmax_lse, k_scale, v_scale)
        if traced is not None:
            return traced if return_softmax_lse else traced[0]
    spec = _core.Spec(softmax_scale=softmax_scale, causal=causal, window_size=window_size, softcap=softcap,
                      alibi_slopes=alibi_slopes)
    out, lse = _kvcache.forward_kvcache(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens,
                                        cache_batch_idx, cache_leftpad, block_table, spec, rotary_interleaved,
                                        num_splits, return_softmax_lse, k_scale, v_scale)
    return (out, lse) if return_softmax_lse else out
