"""Float64 references for the tests, written from the definitions.

numpy_attention: the forward (out, lse) of every feature, in numpy.
torch_attention: the same in torch float64, differentiable, for the backward;
the tests check it against scaled_dot_product_attention (math backend) where
SDPA can express the call, and against numpy_attention everywhere.
Layouts as flash_attn: q (b, sq, hq, d), k/v (b, sk, hkv, d[_v]); varlen
calls are split into their sequences by the callers (per_sequence()).
"""
import math

import numpy as np


def dropout_scale(p):
    """The factor of a kept element: 1 / the keep probability of FlashCL's 16-bit threshold."""
    threshold = math.floor(float(np.float32(p)) * 65536 + 0.5)
    return 65536 / (65536 - threshold) if threshold < 65536 else 0.0


def f64(x):
    """Any array or tensor as a float64 numpy array."""
    if hasattr(x, "detach"):
        return x.detach().cpu().double().numpy()
    return np.asarray(x).astype(np.float64)


def max_err(a, b):
    """The largest |a - b|, infinities of the same sign equal, inf where either holds a NaN."""
    a, b = f64(a), f64(b)
    both_inf = np.isinf(a) & np.isinf(b) & (np.sign(a) == np.sign(b))
    with np.errstate(invalid="ignore"):
        d = np.where(both_inf, 0.0, np.abs(a - b))
    if np.isnan(d).any():
        return float("inf")
    return float(d.max()) if d.size else 0.0


def tolerance(ref, dtype="float32", baseline=None):
    """The largest error allowed against the float64 ref (the criteria in conftest's docstring);
    baseline: the same computation in the storage type, needed for float16/bfloat16."""
    if dtype == "float32":
        r = f64(ref)
        return 2e-5 * max(1.0, float(np.nanmax(np.abs(np.where(np.isinf(r), 0, r)))) if r.size else 1.0)
    assert baseline is not None, "float16/bfloat16 need the storage-type baseline"
    return 2 * max_err(baseline, ref) + 1e-5


def visible(sq, sk, causal=False, window=(-1, -1)):
    """Bool (sq, sk): key j visible to query i, FlashAttention-2's bottom-right rule."""
    i = np.arange(sq)[:, None] + (sk - sq)
    j = np.arange(sk)[None, :]
    left, right = window
    if causal:
        right = 0
    ok = np.ones((sq, sk), bool)
    if left >= 0:
        ok &= j >= i - left
    if right >= 0:
        ok &= j <= i + right
    return ok


def alibi_bias(slopes, sq, sk):
    """(b|1, h, sq, sk): -slope * |i + sk - sq - j|."""
    slopes = np.asarray(slopes, np.float64)
    if slopes.ndim == 1:
        slopes = slopes[None]
    dist = np.abs(np.arange(sq)[:, None] + (sk - sq) - np.arange(sk)[None, :])
    return -slopes[:, :, None, None] * dist[None, None]


def numpy_attention(q, k, v, scale=None, causal=False, window=(-1, -1), softcap=0.0, alibi=None, bias=None,
                    mask=None, sinks=None, keep=None, dropout_p=0.0, storage=None):
    """(out (b, sq, hq, dv), lse (b, hq, sq)) in float64. keep: the dropout keep mask (b, hq, sq, sk).

    storage (a numpy dtype): the baseline of the float16/bfloat16 tolerance, a
    plain implementation in that storage type: P and the output rounded to it.
    """
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    g = hq // hkv
    k = np.repeat(k, g, axis=2)
    v = np.repeat(v, g, axis=2)
    scale = 1 / math.sqrt(d) if scale is None else scale
    s = np.einsum("bihd,bjhd->bhij", q, k) * scale
    if softcap:
        s = softcap * np.tanh(s / softcap)
    if alibi is not None:
        s = s + alibi_bias(alibi, sq, sk)
    if bias is not None:
        s = s + np.asarray(bias, np.float64)
    ok = np.broadcast_to(visible(sq, sk, causal, window), s.shape)
    if mask is not None:
        ok = ok & np.broadcast_to(np.asarray(mask, bool), s.shape)
    s = np.where(ok, s, -np.inf)
    m = s.max(-1, keepdims=True)
    if sinks is not None:
        m = np.maximum(m, np.asarray(sinks, np.float64)[None, :, None, None])
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(s - m)
    denom = e.sum(-1, keepdims=True)
    if sinks is not None:
        denom = denom + np.exp(np.asarray(sinks, np.float64)[None, :, None, None] - m)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(denom > 0, e / denom, 0.0)
        lse = np.where(denom[..., 0] > 0, np.log(denom[..., 0]) + m[..., 0], -np.inf)
    if keep is not None:
        p = p * np.asarray(keep, bool) * dropout_scale(dropout_p)
    if storage is not None:
        p = p.astype(storage).astype(np.float64)
    out = np.einsum("bhij,bjhd->bihd", p, v)
    if storage is not None:
        out = out.astype(storage).astype(np.float64)
    return out, lse


def torch_attention(q, k, v, scale=None, causal=False, window=(-1, -1), softcap=0.0, alibi=None, bias=None,
                    mask=None, sinks=None, keep=None, dropout_p=0.0, return_lse=False):
    """numpy_attention in torch float64 (inputs converted), differentiable in q, k, v and sinks;
    return_lse: (out, lse), the LSE (b, hq, sq) differentiable too (-inf in a row with no key)."""
    import torch

    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    g = hq // hkv
    kk = k.repeat_interleave(g, dim=2)
    vv = v.repeat_interleave(g, dim=2)
    scale = 1 / math.sqrt(d) if scale is None else scale
    s = torch.einsum("bihd,bjhd->bhij", q, kk) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    if alibi is not None:
        s = s + torch.from_numpy(alibi_bias(np.asarray(alibi), sq, sk)).to(s.dtype)
    if bias is not None:
        s = s + torch.as_tensor(np.asarray(bias)).to(s.dtype)
    ok = torch.from_numpy(np.broadcast_to(visible(sq, sk, causal, window), s.shape).copy())
    if mask is not None:
        ok = ok & torch.from_numpy(np.broadcast_to(np.asarray(mask, bool), s.shape).copy())
    s = s.masked_fill(~ok, -math.inf)
    if sinks is not None:
        col = sinks.to(s.dtype)[None, :, None, None].expand(b, hq, sq, 1)
        s = torch.cat([s, col], dim=-1)
    m = s.amax(-1, keepdim=True).detach()
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(s - m)
    denom = e.sum(-1, keepdim=True)
    p = torch.where(denom > 0, e / denom.clamp_min(1e-30), torch.zeros_like(e))
    if sinks is not None:
        p = p[..., :-1]
    if keep is not None:
        p = p * torch.as_tensor(np.asarray(keep, bool)).to(s.dtype) * dropout_scale(dropout_p)
    out = torch.einsum("bhij,bjhd->bihd", p, vv)
    if not return_lse:
        return out
    return out, torch.where(denom > 0, torch.log(denom.clamp_min(1e-300)) + m, -math.inf)[..., 0]


def per_sequence(cu_q, cu_k):
    """[(rows of q, rows of k)] slices of a varlen batch."""
    cu_q, cu_k = np.asarray(cu_q), np.asarray(cu_k)
    return [(slice(cu_q[i], cu_q[i + 1]), slice(cu_k[i], cu_k[i + 1])) for i in range(len(cu_q) - 1)]


def rotary(x, cos, sin, positions, interleaved):
    """Rows x (n, h, d) turned to positions (n,): the first rotary_dim = 2 * cos.shape[1] dims,
    pairs (0, 1), (2, 3) .. when interleaved (GPT-J), else (i, i + rotary_dim / 2) (GPT-NeoX)."""
    x = np.array(x, np.float64)
    half = cos.shape[1]
    c = np.asarray(cos, np.float64)[positions][:, None, :]
    s = np.asarray(sin, np.float64)[positions][:, None, :]
    if interleaved:
        a, b = x[..., 0:2 * half:2].copy(), x[..., 1:2 * half:2].copy()
        x[..., 0:2 * half:2], x[..., 1:2 * half:2] = a * c - b * s, a * s + b * c
    else:
        a, b = x[..., :half].copy(), x[..., half:2 * half].copy()
        x[..., :half], x[..., half:2 * half] = a * c - b * s, a * s + b * c
    return x


def kvcache_attention(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None, cache_seqlens=None,
                      cache_batch_idx=None, cache_leftpad=None, block_table=None, rotary_interleaved=True,
                      round_k=None, round_v=None, round_q=None, **attention):
    """flash_attn_with_kvcache from its definition, in float64: (out, lse, k_cache, v_cache after the append).

    Sequence b's row j lives in k_cache[cache_batch_idx[b], j], or paged in
    k_cache[block_table[b, j // page], j % page]. k, v rows go to rows cache_seqlens[b] + t,
    k rotated to position cache_seqlens[b] + t; the keys are rows
    cache_leftpad[b] .. cache_seqlens[b] + seqlen_new; q is rotated to position
    cache_seqlens[b] (+ i when causal or windowed; a window side >= the capacity is dropped). round_k / round_q: what
    storing a row does (the cache's rounding: k after its rotation; the library keeps the rotated q in q's dtype).
    attention: numpy_attention's keywords (scale, causal, window, softcap, alibi, storage);
    alibi may be (b, h).
    """
    q = np.asarray(q, np.float64)
    kc, vc = np.array(k_cache, np.float64), np.array(v_cache, np.float64)
    b, sq = q.shape[:2]
    rows = kc.shape[1]
    paged = block_table is not None
    capacity = np.asarray(block_table).shape[1] * rows if paged else rows
    lens = np.full(b, capacity) if cache_seqlens is None else np.asarray(cache_seqlens, np.int64).reshape(-1)
    lens = np.broadcast_to(lens, (b,))
    pad = np.zeros(b, np.int64) if cache_leftpad is None else np.asarray(cache_leftpad, np.int64)
    seq = np.arange(b) if cache_batch_idx is None else np.asarray(cache_batch_idx)
    s_new = 0 if k is None else k.shape[1]
    keep = lambda x: x  # noqa: E731
    round_k, round_v, round_q = round_k or keep, round_v or keep, round_q or keep

    def at(i, j):
        return (int(block_table[i][j // rows]), j % rows) if paged else (int(seq[i]), j)

    # flash_attn drops a window side as wide as the cache (its seqlen_k) before anything else
    window = attention["window"] = tuple(-1 if w >= capacity else w for w in attention.get("window", (-1, -1)))
    per_row = attention.get("causal", False) or tuple(window) != (-1, -1)
    alibi = attention.pop("alibi", None)
    outs, lses = [], []
    for i in range(b):
        start = int(lens[i])  # rotary positions are cache rows, as flash_attn rotates (leftpad does not shift them)
        for t in range(s_new):
            row = np.asarray(k[i, t:t + 1], np.float64)
            if rotary_cos is not None:
                row = rotary(row, rotary_cos, rotary_sin, [start + t], rotary_interleaved)
            kc[at(i, int(lens[i]) + t)] = round_k(row[0])
            vc[at(i, int(lens[i]) + t)] = round_v(np.asarray(v[i, t], np.float64))
        keys = range(int(pad[i]), int(lens[i]) + s_new)
        if len(keys) == 0:  # an empty cache and nothing appended: O = 0, LSE = -inf (no key to attend)
            outs.append(np.zeros(q.shape[1:3] + vc.shape[-1:]))
            lses.append(np.full((q.shape[2], q.shape[1]), -np.inf))
            continue
        kk = np.stack([kc[at(i, j)] for j in keys])[None]
        vv = np.stack([vc[at(i, j)] for j in keys])[None]
        qi = q[i]
        if rotary_cos is not None:
            positions = start + (np.arange(sq) if per_row else np.zeros(sq, np.int64))
            qi = round_q(rotary(qi, rotary_cos, rotary_sin, positions, rotary_interleaved))
        slopes = None if alibi is None else (alibi[i] if np.ndim(alibi) == 2 else alibi)
        o, lse = numpy_attention(qi[None], kk, vv, alibi=slopes, **attention)
        outs.append(o[0])
        lses.append(lse[0])
    return np.stack(outs), np.stack(lses), kc, vc


def merge_reference(states, lses):
    """(out, lse) of partial results (n, b, s, h, d) and their LSEs (n, b, h, s), in float64."""
    states, lses = np.asarray(states, np.float64), np.asarray(lses, np.float64)
    m = lses.max(0)
    m = np.where(np.isfinite(m), m, 0.0)
    w = np.exp(lses - m)  # (n, b, h, s)
    total = w.sum(0)
    with np.errstate(divide="ignore", invalid="ignore"):
        lse = np.where(total > 0, np.log(total) + m, -np.inf)
        out = np.einsum("nbhs,nbshd->bshd", w, states) / np.where(total > 0, total, 1).transpose(0, 2, 1)[..., None]
    return out, lse
