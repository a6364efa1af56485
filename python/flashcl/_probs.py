"""The attention probabilities of a call, for return_attn_probs (testing only).

FlashCL never materialises P. To return it, this runs the same call with
V = columns of the identity: then O = P V is a block of P's columns, every
variant (softcap, ALiBi, bias, masks, window, sinks) applied by the kernels
themselves. Storage is float32 (scores are float32 in every storage type, so
P is the same), without dropout. Costs seqlen_k / 512 extra calls.
"""
import numpy as np

from . import _arrays, _core

_CHUNK = 512  # columns per call: V's head dim, at most FLASHCL_MAX_HEAD_DIM


def _as_f32(x):
    if isinstance(x, np.ndarray):
        return x.astype(np.float32)
    return _arrays.host(x.detach()).float()


def _host_spec(spec):
    """A copy of spec whose arrays (ALiBi slopes, sinks, bias, masks, cu_seqlens) are in host memory, beside
    the host copies of q and k this module computes on (the caller's spec keeps CUDA tensors as given)."""
    copy = _core.Spec(**{name: getattr(spec, name) for name in _core.Spec.__slots__})
    for name, array in spec.arrays():
        setattr(copy, name, _arrays.host(array))
    return copy


def probabilities(q, k, spec):
    """P (before dropout), float32 (batch, heads_q, max_seqlen_q, max_seqlen_k); 0 outside varlen sequences."""
    q32, k32 = _as_f32(q), _as_f32(k)
    plain = _host_spec(spec)
    p = _core.Problem(q32, k32, k32, plain)
    plain.dropout_p = 0.0
    probs = np.zeros(p.score_shape(), np.float32)  # the caller's max_seqlen: zeros past the totals
    cu_q = cu_k = None
    if p.varlen:
        cu_q, cu_k = (np.asarray(_arrays.to_numpy(c), np.int64) for c in (spec.cu_seqlens_q, spec.cu_seqlens_k))
        key_seq = np.searchsorted(cu_k, np.arange(p.seqlen_k), side="right") - 1
        key_pos = np.arange(p.seqlen_k) - cu_k[key_seq]  # each key's index within its sequence
    else:
        key_pos = np.arange(p.seqlen_k)
    for j0 in range(0, p.max_seqlen_k, _CHUNK):
        width = min(_CHUNK, p.max_seqlen_k - j0)
        eye = (key_pos[:, None] == j0 + np.arange(width)[None, :]).astype(np.float32)  # (rows of k, width)
        shape = (p.seqlen_k, p.heads_kv, width) if p.varlen else (p.batch, p.seqlen_k, p.heads_kv, width)
        v = np.broadcast_to(eye[:, None, :] if p.varlen else eye[None, :, None, :], shape).copy()
        if not isinstance(q32, np.ndarray):
            v = _arrays.torch_module().from_numpy(v)
        out, _ = _core.forward(q32, k32, v, plain)
        out = _arrays.to_numpy(out)
        if p.varlen:
            for b in range(p.batch):
                rows = out[cu_q[b]:cu_q[b + 1]]  # (sq_b, h, width)
                probs[b, :, :rows.shape[0], j0:j0 + width] = rows.transpose(1, 0, 2)
        else:
            probs[:, :, :, j0:j0 + width] = out.transpose(0, 2, 1, 3)
    return probs


def _score_shape(q, k, spec):
    """(batch, heads_q, rows, cols) of S_dmask from the shapes alone (the caller's max_seqlen with varlen)."""
    if spec.varlen:
        return (int(spec.cu_seqlens_q.shape[0]) - 1, int(q.shape[-2]), int(spec.max_seqlen_q), int(spec.max_seqlen_k))
    return int(q.shape[0]), int(q.shape[2]), int(q.shape[1]), int(k.shape[1])


def s_dmask(q, k, spec):
    """FlashAttention-2's S_dmask: P with the entries dropout removes negated; empty without dropout.
    On q's device, as out and softmax_lse (a meta or fake q: shapes only, as the operators' fake kernels)."""
    torch_kind = _arrays.is_torch(q)
    if _arrays.holds_no_data(q):
        shape = _score_shape(q, k, spec) if spec.dropout_p else (0,)
        return q.new_empty(shape, dtype=_arrays.torch_module().float32)
    if not spec.dropout_p:
        empty = np.empty((0,), np.float32)
        return _arrays.to_device_of(q, _arrays.torch_module().from_numpy(empty))[0] if torch_kind else empty
    probs = probabilities(q, k, spec)
    q32, k32 = _as_f32(q), _as_f32(k)
    keep = _arrays.to_numpy(_core.dropout_mask(q32, k32, k32, _host_spec(spec)))
    out = np.where(keep, probs, -probs)
    return _arrays.to_device_of(q, _arrays.torch_module().from_numpy(out))[0] if torch_kind else out
