"""flash_attn_with_kvcache's call: the cache, its tables and the new rows
checked against q, turned into a FlashCL descriptor, the extension called.

Every shape, dtype and the lengths against the cache's rows are checked here
with FlashAttention-2's argument names, before the extension sees anything;
the library checks again (page indices, cache_batch_idx, leftpad, rotary
positions) and names its own fields. Either way nothing has been written
when the error is raised: the append happens in the same call, after the checks.
"""
import numbers

import numpy as np

from . import _arrays, _context, _core, _device, _flashcl

# 8-bit caches by dtype name (ml_dtypes and torch spell them alike).
_FP8 = {"float8_e4m3fn": _flashcl.CACHE_DTYPE_FP8_E4M3, "float8_e5m2": _flashcl.CACHE_DTYPE_FP8_E5M2}

_need = _core._need
_shape = _core._shape


class _Sizes:
    """What _core.make_desc reads of a problem."""

    __slots__ = ("dtype", "batch", "heads_q", "heads_kv", "seqlen_q", "seqlen_k", "head_dim", "head_dim_v", "varlen",
                 "window_bound")


def _contiguous(x):
    """Tables the library reads as C arrays (small: a copy is cheap)."""
    if isinstance(x, np.ndarray):
        return np.ascontiguousarray(x)
    return x.contiguous()


def _int32(name, x, shape, layout):
    """An int32 table of the given shape (flash_attn wants int32 and so does the library); a numpy one in
    non-native byte order is read by its values, as the feature arrays are."""
    if x is None:
        return None
    x = _arrays.native(x)
    _need(_arrays.dtype_name(x) == "int32", lambda: f"{name} must have dtype int32, got {_arrays.dtype_name(x)}")
    _need(_shape(x) == shape, lambda: f"{name} must be {layout} = {shape}, got shape {_shape(x)}")
    return _contiguous(x)


def _values(x):
    """An int32 table's values as numpy (host memory by now)."""
    return x if isinstance(x, np.ndarray) else x.numpy()


def _float32(name, x, shape=None):
    """A small float input (cos/sin tables, fp8 scales) as float32, any float dtype accepted (flash_attn
    passes cos/sin in q's dtype); the library reads float32."""
    if isinstance(x, np.ndarray):
        _need(x.dtype.kind == "f" or x.dtype.name == "bfloat16",
              lambda: f"{name} must be a floating-point array, got dtype {x.dtype}")
        return np.ascontiguousarray(x, dtype=np.float32)
    _need(x.is_floating_point(), lambda: f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    return x.detach().float().contiguous()


def _raw_cache(x):
    """What the extension reads of a cache: a DeviceArray's buffer, or the array (fp8 ones as their
    bytes: a view, the append writes through it)."""
    if isinstance(x, _device.DeviceArray):
        return x._resident
    return _arrays.raw_bits(x)


def _scale(name, x, heads_kv):
    """k_scale / v_scale: a number, or (1,) or (nheads_k,) floats, > 0 and finite; float32 for the library."""
    if isinstance(x, numbers.Real):
        x = np.array([x], np.float32)
    elif _arrays.is_torch(x):
        x = _float32(name, x).cpu().numpy()
    else:
        x = _float32(name, np.asarray(x))
    x = x.reshape(-1) if x.ndim == 0 else x
    _need(x.ndim == 1 and x.shape[0] in (1, heads_kv),
          lambda: f"{name} must be a number, (1,) or (nheads_k,) = ({heads_kv},), got shape {x.shape}")
    _need(bool(np.all(np.isfinite(x) & (x > 0))), lambda: f"{name} must be finite and > 0, got {x.tolist()}")
    return x


def _written_in_place(cache):
    """The append wrote a torch cache's memory behind autograd's back: bump its version counter, as any
    in-place op does, so a backward that saved the cache before the append refuses to run on the new
    contents instead of using them silently."""
    if _arrays.is_torch(cache) and not cache.is_inference():
        import torch
        torch.autograd.graph.increment_version(cache)


def forward_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None, cache_seqlens=None,
                    cache_batch_idx=None, cache_leftpad=None, block_table=None, spec=None, rotary_interleaved=True,
                    num_splits=0, return_lse=False, k_scale=None, v_scale=None, context=None, window_bound=None):
    """(out, softmax_lse or None). k, v are appended into k_cache, v_cache in place. window_bound: the
    seqlen_k a window side is clipped against (default: the cache's capacity, as flash_attn's)."""
    spec = spec or _core.Spec()
    _core.check_spec(spec)
    resident = [isinstance(x, _device.DeviceArray) for x in (k_cache, v_cache)]
    _need(resident[0] == resident[1], "k_cache and v_cache must both be flashcl.DeviceArray, or neither")
    if resident[0]:  # the call runs where the caches live
        context = context or k_cache.context
        _need(k_cache.context is context and v_cache.context is context,
              "k_cache and v_cache are DeviceArrays of another flashcl.Context than the call's")
    caches = [] if resident[0] else [("k_cache", k_cache), ("v_cache", v_cache)]
    named = [("q", q)] + caches + [("k", k), ("v", v), ("rotary_cos", rotary_cos), ("rotary_sin", rotary_sin),
                                   ("cache_batch_idx", cache_batch_idx), ("cache_leftpad", cache_leftpad),
                                   ("block_table", block_table), ("alibi_slopes", spec.alibi_slopes)]
    # A bool is an Integral, which was taken as 0 or 1 rows; a float is a number but not a row count.
    if isinstance(cache_seqlens, (bool, np.bool_)) or (isinstance(cache_seqlens, numbers.Number) and
                                                        not isinstance(cache_seqlens, numbers.Integral)):
        raise _core.ArgumentTypeError(f"cache_seqlens must be an int, or an int32 (batch,) numpy array or torch "
                                      f"tensor, got {cache_seqlens!r}")
    if not isinstance(cache_seqlens, numbers.Integral):
        named.append(("cache_seqlens", cache_seqlens))
    torch_kind = _arrays.kind_check(named, required=("q", "k_cache", "v_cache"))
    _arrays.refuse_no_data(named + [("k_scale", k_scale), ("v_scale", v_scale)])  # (tensors only)
    # Tensors on another device than the CPU: host copies for the call, the caches copied back after it.
    caller_caches = (k_cache, v_cache)
    out_device = q.device if torch_kind and q.device.type != "cpu" else None
    if spec.alibi_slopes is not None:
        spec.alibi_slopes = _arrays.host(spec.alibi_slopes)
    q, k_cache, v_cache, k, v = (_arrays.host(x) for x in (q, k_cache, v_cache, k, v))
    q, k, v = (_arrays.rows_contiguous(x) for x in (q, k, v))  # read only; the caches are written in place
    rotary_cos, rotary_sin, cache_batch_idx, cache_leftpad, block_table = (
        _arrays.host(x) for x in (rotary_cos, rotary_sin, cache_batch_idx, cache_leftpad, block_table))
    if not isinstance(cache_seqlens, numbers.Integral):
        cache_seqlens = _arrays.host(cache_seqlens)

    p = _Sizes()
    p.varlen = False
    p.dtype = _arrays.storage_code("q", q)
    qs = _shape(q)
    _need(len(qs) == 4, lambda: f"q must be (batch, seqlen_q, nheads, headdim), got shape {qs}")
    p.batch, p.seqlen_q, p.heads_q, p.head_dim = qs
    b = p.batch
    paged = block_table is not None
    layout = "(num_blocks, page_block_size, nheads_k, headdim)" if paged else \
        "(batch_size_cache, seqlen_cache, nheads_k, headdim)"
    ks, vs = _shape(k_cache), _shape(v_cache)
    for name, s in (("k_cache", ks), ("v_cache", vs)):
        _need(len(s) == 4, lambda: f"{name} must be {layout}, got shape {s}")
    cache_name = _arrays.dtype_name(k_cache)
    cache_dtype = _FP8.get(cache_name, _flashcl.CACHE_DTYPE_SAME)
    _need(cache_name == _arrays.dtype_name(q) or cache_dtype != _flashcl.CACHE_DTYPE_SAME,
          lambda: f"k_cache has dtype {cache_name}, q has {_arrays.dtype_name(q)}: they must agree "
                  "(or the cache is float8_e4m3fn / float8_e5m2)")
    _need(_arrays.dtype_name(v_cache) == cache_name,
          lambda: f"v_cache has dtype {_arrays.dtype_name(v_cache)}, k_cache has {cache_name}")
    slots, rows, p.heads_kv, d_k = ks
    p.head_dim_v = vs[3]
    _need(d_k == p.head_dim, lambda: f"k_cache's headdim is {d_k}, q's is {p.head_dim}")
    _need(vs[:3] == ks[:3], lambda: f"v_cache has shape {vs}, k_cache {ks}: they must agree but for the last dimension")
    _need(p.heads_q % p.heads_kv == 0,
          lambda: f"q's nheads ({p.heads_q}) must be a multiple of k_cache's nheads_k ({p.heads_kv})")

    if paged:
        block_table = _arrays.native(block_table)
        _need(_arrays.dtype_name(block_table) == "int32",
              lambda: f"block_table must have dtype int32, got {_arrays.dtype_name(block_table)}")
        bts = _shape(block_table)
        _need(len(bts) == 2 and bts[0] == b and bts[1] >= 1,
              lambda: f"block_table must be (batch, max_num_blocks_per_seq) with batch {b}, got shape {bts}")
        block_table = _contiguous(block_table)
        _need(cache_batch_idx is None, "cache_batch_idx does not combine with block_table (a paged cache picks its "
                                       "blocks through block_table)")
        capacity = bts[1] * rows
    else:
        capacity = rows
        _need(cache_batch_idx is not None or slots >= b,
              lambda: f"k_cache has {slots} sequences for a batch of {b} (cache_batch_idx picks them)")
    p.seqlen_k = capacity

    if isinstance(cache_seqlens, numbers.Integral):
        _need(0 <= cache_seqlens < 2**31, lambda: f"cache_seqlens must be from 0 to 2**31 - 1, got {cache_seqlens}")
        cache_seqlens = np.full((b,), int(cache_seqlens), np.int32)
    cache_seqlens = _int32("cache_seqlens", cache_seqlens, (b,), "(batch,)")
    cache_batch_idx = _int32("cache_batch_idx", cache_batch_idx, (b,), "(batch,)")
    cache_leftpad = _int32("cache_leftpad", cache_leftpad, (b,), "(batch,)")

    _need((k is None) == (v is None), "k and v go together: give both new keys and values, or neither")
    seqlen_new = 0
    if k is not None:
        kn, vn = _shape(k), _shape(v)
        for name, x in (("k", k), ("v", v)):
            _need(_arrays.dtype_name(x) == _arrays.dtype_name(q),
                  lambda: f"{name} has dtype {_arrays.dtype_name(x)}, q has {_arrays.dtype_name(q)}")
        _need(len(kn) == 4 and kn[0] == b and kn[2:] == (p.heads_kv, p.head_dim),
              lambda: f"k must be (batch, seqlen_new, nheads_k, headdim) = ({b}, s, {p.heads_kv}, {p.head_dim}), "
                      f"got shape {kn}")
        _need(len(vn) == 4 and vn == kn[:3] + (p.head_dim_v,),
              lambda: f"v must be {kn[:3] + (p.head_dim_v,)} (k's shape with v_cache's headdim), got shape {vn}")
        _need(cache_seqlens is not None, "appending k and v needs cache_seqlens (where the new rows go)")
        seqlen_new = kn[1]
    if cache_seqlens is not None:
        lens = _values(cache_seqlens).astype(np.int64)
        _need(bool(np.all(lens >= 0)), lambda: f"cache_seqlens must be >= 0, got {lens.tolist()}")
        end = lens + seqlen_new
        over = np.nonzero(end > capacity)[0]
        _need(over.size == 0,
              lambda: f"cache_seqlens[{over[0]}] + seqlen_new = {lens[over[0]]} + {seqlen_new} exceeds the cache's "
                      f"{capacity} rows" + (" (max_num_blocks_per_seq x page_block_size)" if paged else ""))

    _need((rotary_cos is None) == (rotary_sin is None), "rotary_cos and rotary_sin go together")
    rotary_interleaved = _core.as_bool("rotary_interleaved", rotary_interleaved)
    if rotary_cos is not None:
        cs, ss = _shape(rotary_cos), _shape(rotary_sin)
        _need(len(cs) == 2 and cs[1] >= 1, lambda: f"rotary_cos must be (seqlen_ro, rotary_dim / 2), got shape {cs}")
        _need(ss == cs, lambda: f"rotary_sin has shape {ss}, rotary_cos {cs}")
        _need(2 * cs[1] <= p.head_dim, lambda: f"rotary_dim (2 x {cs[1]}) must be at most headdim ({p.head_dim})")
        rotary_cos, rotary_sin = _float32("rotary_cos", rotary_cos), _float32("rotary_sin", rotary_sin)

    if spec.alibi_slopes is not None:
        s = _shape(spec.alibi_slopes)
        _need(s in ((p.heads_q,), (b, p.heads_q)),
              lambda: f"alibi_slopes must be ({p.heads_q},) or ({b}, {p.heads_q}), got {s}")
    if cache_dtype == _flashcl.CACHE_DTYPE_SAME:
        _need(k_scale is None and v_scale is None, "k_scale and v_scale are for float8 caches")
    else:
        k_scale = _scale("k_scale", 1.0 if k_scale is None else k_scale, p.heads_kv)
        v_scale = _scale("v_scale", 1.0 if v_scale is None else v_scale, p.heads_kv)
        # One layout for both (the library's scale_per_head covers both): a per-tensor one is repeated.
        if k_scale.shape != v_scale.shape:
            k_scale, v_scale = (np.full((p.heads_kv,), x[0], np.float32) if x.shape[0] == 1 else x
                                for x in (k_scale, v_scale))
    # flash_attn's set_params_splitkv picks the split itself for any num_splits < 1 (documented: 0)
    _need(_core._is_int(num_splits),
          lambda: f"num_splits must be an integer (0 or less: automatic), got {num_splits!r}")
    num_splits = max(int(num_splits), 0)

    # flash_attn drops a window side as wide as the cache (make_desc: which also decides how q is rotated,
    # every row at cache_seqlens without a window); the paged varlen call clips against its max_seqlen_k.
    p.window_bound = capacity if window_bound is None else window_bound
    out = _arrays.empty(q, (b, p.seqlen_q, p.heads_q, p.head_dim_v))
    lse = _arrays.empty(q, (b, p.heads_q, p.seqlen_q), "float32") if return_lse else None
    # Empty inputs are answered without a kernel, as flash_attn_func's (the library refuses zero sizes): out 0,
    # LSE -inf. No query rows still append k and v (a step that only fills the cache): through one query row of
    # zeros, whose results are dropped.
    empty = b == 0 or capacity == 0 or p.seqlen_q == 0
    if empty:
        out[...] = 0
        if lse is not None:
            lse[...] = -np.inf
    if not empty or (b and seqlen_new):
        run_q, run_out, run_lse = q, out, lse
        if empty:
            p.seqlen_q = 1
            run_q, run_out = _arrays.zeros(q, (b, 1, p.heads_q, p.head_dim)), _arrays.empty(q, (b, 1, p.heads_q,
                                                                                                p.head_dim_v))
            run_lse = None
        desc = _core.make_desc(p, spec)
        desc.num_splits = int(num_splits)
        ctx = _context.resolve(context)
        raw = _arrays.raw
        if not seqlen_new:  # k and v of 0 rows (a step with no new tokens) append nothing: none to pass
            k = v = None
        ctx._c.forward_kvcache(desc, raw(run_q), _raw_cache(k_cache), _raw_cache(v_cache), raw(run_out), raw(run_lse),
                               k=raw(k), v=raw(v), rotary_cos=rotary_cos, rotary_sin=rotary_sin,
                               rotary_interleaved=rotary_interleaved, cache_seqlens=raw(cache_seqlens),
                               cache_batch_idx=raw(cache_batch_idx), cache_leftpad=raw(cache_leftpad),
                               block_table=raw(block_table), cache_dtype=cache_dtype, k_scale=k_scale, v_scale=v_scale,
                               alibi_slopes=_arrays.raw_feature("alibi_slopes", spec.alibi_slopes))
    if seqlen_new:
        for caller, host in zip(caller_caches, (k_cache, v_cache)):
            if host is not caller:
                caller.copy_(host)  # (an in-place op: autograd sees it)
            else:
                _written_in_place(caller)
    if out_device is not None:
        out = out.to(out_device)
        lse = lse.to(out_device) if lse is not None else None
    return out, lse
