"""FlashCL's own features, under their own names (flash_attn has no such arguments).

attention() takes everything flash_attn_func does plus attention sinks, an
additive bias, a boolean mask, a block-sparse mask, varlen, explicit dropout
seeds and the standard (non-flash) path; attention_backward() is the
backward pass without autograd (for numpy); dropout_mask() and plan() say
what a call does. All accept numpy arrays or PyTorch tensors.
"""
import contextlib

import numpy as np

from . import _arrays, _context, _core, _flashcl, flash_attn_interface


def _spec(softmax_scale, causal, window_size, softcap, alibi_slopes, dropout_p, dropout_seed, dropout_offset, sinks,
          bias, mask, block_mask, block_size, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, path,
          allow_tf32=False):
    return _core.Spec(softmax_scale=softmax_scale, causal=causal, window_size=window_size, softcap=softcap,
                      alibi_slopes=alibi_slopes, dropout_p=dropout_p, dropout_seed=dropout_seed,
                      dropout_offset=dropout_offset, sinks=_float32_sinks(sinks), bias=_matrix(bias), mask=_matrix(mask),
                      block_mask=_matrix(block_mask), block_size=block_size, cu_seqlens_q=cu_seqlens_q,
                      cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, path=path,
                      allow_tf32=allow_tf32)


def _float32_sinks(sinks):
    """Sinks in float16 or bfloat16 (a model's own dtype: gpt-oss's s_aux in a bf16 model) as the
    float32 the kernels take; for a tensor through .float(), so its gradient flows back."""
    if not _is_array(sinks) or _arrays.dtype_name(sinks) not in ("float16", "bfloat16"):
        return sinks  # (None, or anything else: refused by name with the other arrays)
    return sinks.float() if _arrays.is_torch(sinks) else sinks.astype(np.float32)


def _matrix(x):
    """A bias or mask as (b|1, h|1, rows, cols): a (rows, cols) matrix gets two leading
    dimensions of 1; one broadcast over its rows or its columns (stride 0, e.g. from expand: a key
    padding mask over the queries, a query mask over the keys) is materialised, since the library
    takes neither (a zero row stride, a last dimension not contiguous).
    Masks are bytes, nonzero = attend: bool and uint8 arrays pass as they are."""
    if not _is_array(x):
        return x  # (None, or anything else: refused by name with the other arrays)
    if x.ndim == 2:
        x = x[None, None]
    if x.ndim == 4:
        torch_kind = _arrays.is_torch(x)
        strides = x.stride() if torch_kind else x.strides
        if any(x.shape[i] > 1 and strides[i] == 0 for i in (2, 3)):
            x = x.contiguous() if torch_kind else x.copy()
    return x


def _is_array(x):
    return isinstance(x, np.ndarray) or _arrays.is_torch(x)


@contextlib.contextmanager
def _using(context):
    if context is None:
        yield
        return
    if not isinstance(context, _context.Context):  # (a device spec string failed as "not a context manager")
        raise ValueError(f"context must be a flashcl.Context (flashcl.Context(spec) opens one), not "
                         f"{type(context).__name__}")
    with context:
        yield


def attention(q, k, v, *, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
              dropout_p=0.0, dropout_seed=None, dropout_offset=0, sinks=None, bias=None, mask=None, block_mask=None,
              block_size=None, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None,
              return_lse=False, path="flash", allow_tf32=False, context=None):
    """flash_attn_func / flash_attn_varlen_func with every FlashCL feature.

    sinks: (nheads,) logits added to each row's softmax denominator (gpt-oss);
      float32, or float16/bfloat16 taken as float32; differentiable when it requires grad.
    bias: float32 (batch|1, nheads|1, seqlen_q, seqlen_k) added to the scores
      (after scale and softcap); mask: bool/uint8 of that shape, True = attend.
      With varlen the last two dimensions are max_seqlen_q, max_seqlen_k (or those capped at the
      packed totals, the bounds the library takes).
    block_mask: bool/uint8 (batch|1, nheads|1, ceil(sq/bq), ceil(sk/bk)) with
      block_size=(bq, bk): a False block is neither loaded nor computed.
    dropout_seed/offset: the Philox key and counter offset, integers in [0, 2**63) (a seed is
      drawn from torch's or numpy's generator when None).
    path: "flash" (default) or "standard", the S = QK^T baseline (plain float32 only).
    allow_tf32: float32 inputs may run the forward and its backward on TF32 tensor cores where
      the device has them (NVIDIA sm_80+, d <= 128, and d_v = d for the backward: products of
      10-bit mantissas, float32 accumulation), as torch.backends.cuda.matmul.allow_tf32;
      elsewhere it changes nothing.
    context: a flashcl.Context (default: this thread's).
    Returns out, or (out, softmax_lse) with return_lse.
    """
    spec = _spec(softmax_scale, causal, window_size, softcap, alibi_slopes, dropout_p, dropout_seed, dropout_offset,
                 sinks, bias, mask, block_mask, block_size, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                 path, allow_tf32)
    with _using(context):
        return flash_attn_interface.run((q, k, v), spec, "none", return_lse=return_lse)


def attention_backward(dout, q, k, v, out, softmax_lse, *, softmax_scale=None, causal=False, window_size=(-1, -1),
                       softcap=0.0, alibi_slopes=None, dropout_p=0.0, dropout_seed=None, dropout_offset=0,
                       sinks=None, bias=None, mask=None, block_mask=None, block_size=None, cu_seqlens_q=None,
                       cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None, path="flash", allow_tf32=False,
                       context=None):
    """(dq, dk, dv), or (dq, dk, dv, dsinks) with sinks: the backward of attention() without autograd.

    Takes the forward's out and softmax_lse and the same keyword arguments;
    with dropout, the forward's dropout_seed (and offset) regenerate its mask.
    """
    if dropout_p and dropout_seed is None:
        raise ValueError("attention_backward with dropout needs the forward's dropout_seed")
    spec = _spec(softmax_scale, causal, window_size, softcap, alibi_slopes, dropout_p, dropout_seed, dropout_offset,
                 sinks, bias, mask, block_mask, block_size, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                 path, allow_tf32)
    named = list(zip(("dout", "q", "k", "v", "out", "softmax_lse"), (dout, q, k, v, out, softmax_lse))) + spec.arrays()
    # (the forward's checks see q, k, v: dout, out and softmax_lse too, by name)
    _arrays.kind_check(named, required=("dout", "q", "k", "v", "out", "softmax_lse"))
    _arrays.refuse_no_data(named)
    args = [_arrays.rows_contiguous(_arrays.host(x)) for x in (dout, q, k, v, out, softmax_lse)]
    with _using(context):
        dq, dk, dv, dsinks = _core.backward(*args, spec, want_dsinks=sinks is not None)
    dq, dk, dv = _arrays.to_device_of(q, dq, dk, dv)
    if sinks is None:
        return dq, dk, dv
    # In the sinks' own dtype, as autograd gives it (the kernels accumulate it in float32).
    if _arrays.is_torch(sinks):
        dsinks = dsinks.to(sinks.dtype)
    elif isinstance(sinks, np.ndarray) and np.issubdtype(sinks.dtype, np.floating):
        dsinks = dsinks.astype(sinks.dtype.newbyteorder("="))
    return (dq, dk, dv, *_arrays.to_device_of(sinks, dsinks))


def dropout_mask(q, k, dropout_p, dropout_seed, dropout_offset=0, *, cu_seqlens_q=None, cu_seqlens_k=None,
                 max_seqlen_q=None, max_seqlen_k=None, context=None):
    """The keep mask (bool, True = kept) that a call with these q, k and dropout arguments applies:
    (batch, nheads, seqlen_q, seqlen_k), or (batch, nheads, max_seqlen_q, max_seqlen_k) with varlen
    (False outside each sequence). It depends only on the seed, offset and positions."""
    spec = _core.Spec(dropout_p=dropout_p, dropout_seed=dropout_seed, dropout_offset=dropout_offset,
                      cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q,
                      max_seqlen_k=max_seqlen_k)
    _arrays.refuse_no_data([("q", q), ("k", k)] + spec.arrays())
    with _using(context):
        keep = _core.dropout_mask(_arrays.host(q), _arrays.host(k), _arrays.host(k), spec)
    return _arrays.to_device_of(q, keep)[0]


def plan(q, k, v, *, backward=False, context=None, **features):
    """What attention(q, k, v, **features) (or its backward) runs on the device, and why: a dict
    with the kernel, its tiles, work-group size, local/private/scratch bytes, origin and reason."""
    features.pop("return_lse", None)
    args = {name: None for name in ("softmax_scale", "alibi_slopes", "dropout_seed", "sinks", "bias", "mask",
                                    "block_mask", "block_size", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q",
                                    "max_seqlen_k")}
    args.update(causal=False, window_size=(-1, -1), softcap=0.0, dropout_p=0.0, dropout_offset=0, path="flash",
                allow_tf32=False)
    unknown = set(features) - set(args)
    if unknown:
        raise TypeError(f"plan() got unexpected keyword arguments {sorted(unknown)}")
    args.update(features)
    if args["dropout_p"] and args["dropout_seed"] is None:
        args["dropout_seed"] = 0  # the plan does not depend on it
    spec = _spec(**args)
    _arrays.refuse_no_data([("q", q), ("k", k), ("v", v)] + spec.arrays())
    with _using(context):
        return _core.plan(_arrays.host(q), _arrays.host(k), _arrays.host(v), spec, backward=backward)


def merge_states(states, lse_states):
    """Partial attention results over the same queries merged by their LSE (FlashInfer's
    merge_states, in flash_attn's layouts): split-KV, cascade attention (a shared prefix
    attended once, each sequence's own suffix apart), context parallelism.

    states: (num_states, batch, seqlen_q, nheads, d), or a list of (batch, seqlen_q, nheads, d)
      outputs; lse_states: (num_states, batch, nheads, seqlen_q), or a list of (batch, nheads,
      seqlen_q): natural-log LSEs, as flash_attn_with_kvcache(..., return_softmax_lse=True) and
      flash_attn_func(..., return_attn_probs=True) return them (FlashInfer's are base 2:
      multiply those by ln 2). Any float dtype; computed in float64 on the host.
    Returns (out (batch, seqlen_q, nheads, d), lse (batch, nheads, seqlen_q)), float32:
      lse = log sum_i exp(lse_i), out = sum_i exp(lse_i - lse) out_i; a row whose every
      lse_i is -inf gets out = 0 and lse = -inf; an lse_i of +inf or NaN gives NaN in that row
      (as an overflowed or invalid partial should show, not be hidden).
    """
    first = states[0] if isinstance(states, (list, tuple)) and states else states
    torch_kind = _arrays.is_torch(first)
    torch = _arrays.torch_module() if torch_kind else None

    def stacked(name, x, rank):
        if isinstance(x, (list, tuple)):
            if not x:
                raise ValueError(f"{name} is empty: merge_states needs at least one state")
            parts = [(f"{name}[{i}]", part) for i, part in enumerate(x)]
            _arrays.kind_check(parts)
            if _arrays.is_torch(x[0]) != torch_kind:  # (np.stack would take torch tensors silently)
                raise ValueError("states and lse_states must both be numpy arrays or both torch tensors")
            _arrays.refuse_no_data(parts)
            for i, part in enumerate(x):
                if tuple(part.shape) != tuple(x[0].shape):
                    raise ValueError(f"{name}[{i}] has shape {tuple(part.shape)}, {name}[0] {tuple(x[0].shape)}: the "
                                     "states must have one shape")
            x = torch.stack([_arrays.host(p).detach() for p in x]) if torch_kind else np.stack(x)
        _arrays.kind_check([(name, x)], required=(name,))
        _arrays.refuse_no_data([(name, x)])
        if _arrays.is_torch(x) != torch_kind:
            raise ValueError("states and lse_states must both be numpy arrays or both torch tensors")
        if len(x.shape) != rank:
            layout = "(num_states, batch, seqlen_q, nheads, d)" if rank == 5 else "(num_states, batch, nheads, seqlen_q)"
            raise ValueError(f"{name} must be {layout} or a list of its states, got shape {tuple(x.shape)}")
        if torch_kind:
            if not x.is_floating_point():  # (numpy's integers are refused below; .float() took these)
                raise ValueError(f"{name} must be floating-point, got dtype {x.dtype}")
            return _arrays.host(x).detach().float().contiguous()
        if not (x.dtype.kind == "f" or x.dtype.name == "bfloat16"):
            raise ValueError(f"{name} must be floating-point, got dtype {x.dtype}")
        return np.ascontiguousarray(x, dtype=np.float32)

    o = stacked("states", states, 5)
    lse = stacked("lse_states", lse_states, 4)
    n, b, s, h, d = (int(x) for x in o.shape)
    if tuple(lse.shape) != (n, b, h, s):
        raise ValueError(f"lse_states has shape {tuple(lse.shape)}, expected {(n, b, h, s)} for states of shape "
                         f"{(n, b, s, h, d)}")
    if n == 0:
        raise ValueError("states is empty: merge_states needs at least one state (num_states is 0)")
    out = _arrays.empty(o, (b, s, h, d))
    out_lse = _arrays.empty(o, (b, h, s))
    if b * s * h == 0:  # no rows (a batch or seqlen_q of 0, as flash_attn_func answers them): nothing to merge
        return _arrays.to_device_of(first, out, out_lse)
    if d == 0:  # the LSEs still merge: through one zero column, dropped (the library takes head_dim >= 1)
        o = _arrays.zeros(o, (n, b, s, h, 1))
    m = _flashcl.MergeDesc()
    m.num_states, m.batch, m.heads, m.seqlen, m.head_dim = n, b, h, s, max(d, 1)
    merged = out if d else _arrays.empty(o, (b, s, h, 1))
    # Flattened: the extension's arrays have at most 4 dimensions; all four are packed.
    _flashcl.merge_states(m, o.reshape(n, b * s, h, max(d, 1)), lse.reshape(n, b * h, s), merged, out_lse)
    return _arrays.to_device_of(first, out, out_lse)
