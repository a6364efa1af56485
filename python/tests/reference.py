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
        p = p * np.asarray(keep, bool) / (1 - dropout_p)
    if storage is not None:
        p = p.astype(storage).astype(np.float64)
    out = np.einsum("bhij,bjhd->bihd", p, v)
    if storage is not None:
        out = out.astype(storage).astype(np.float64)
    return out, lse


def torch_attention(q, k, v, scale=None, causal=False, window=(-1, -1), softcap=0.0, alibi=None, bias=None,
                    mask=None, sinks=None, keep=None, dropout_p=0.0):
    """numpy_attention in torch float64 (inputs converted), differentiable in q, k, v and sinks."""
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
        p = p * torch.as_tensor(np.asarray(keep, bool)).to(s.dtype) / (1 - dropout_p)
    return torch.einsum("bhij,bjhd->bihd", p, vv)


def per_sequence(cu_q, cu_k):
    """[(rows of q, rows of k)] slices of a varlen batch."""
    cu_q, cu_k = np.asarray(cu_q), np.asarray(cu_k)
    return [(slice(cu_q[i], cu_q[i + 1]), slice(cu_k[i], cu_k[i + 1])) for i in range(len(cu_q) - 1)]
