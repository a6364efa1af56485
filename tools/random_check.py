#!/usr/bin/env python3
"""Random calls of the Python API against the float64 definition, on any OpenCL device.

What a new user does to a library: shapes, head dims, options and their
combinations that no test names. Each case draws a call of flash_attn_func
(forward and backward), flash_attn_varlen_func (forward and backward) or
flash_attn_with_kvcache (contiguous or paged cache, append, rotary), or with
--kinds paged_varlen flash_attn_varlen_func over a paged cache, or with
--kinds extras flashcl.attention and its backward (autograd, or
flashcl.attention_backward on numpy arrays) with FlashCL's own features:
additive bias and boolean masks (full, broadcast, 2-D or expanded), block
masks, sinks (and their gradient), dropout (the reference built from
flashcl.dropout_mask's kept mask), d_v != d, among flash_attn's options; runs it
and compares it with python/tests/reference.py under the test suite's
tolerances (float32: 2e-5 relative to the largest reference value; float16 and
bfloat16: at most twice the error of a plain implementation in that storage
type, plus 1e-5; extras' gradients there allow too for the backward's
D = rowsum(dO * O) taken from the O it returned: see run_extras). One line per
case; the exit status is 1 if any case failed.

  .venv/bin/python tools/random_check.py --cases 200 --seed 1 [--device 0:0] [--cuda]

--cuda passes CUDA tensors, as a PyTorch user on an NVIDIA GPU would (FlashCL
copies them through the host). A failing line carries the seed of its case:
`--seed S --cases 1 --kinds K` draws that case alone (the line says so:
the kinds alternate by index). Needs numpy, torch and ml_dtypes.
"""
import argparse
import math
import os
import sys
import time
import traceback

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "tests"))
from reference import f64, kvcache_attention, max_err, numpy_attention, tolerance, torch_attention  # noqa: E402

import flashcl  # noqa: E402

DTYPES = ("float32", "float16", "bfloat16")
# Head dims as models use them and some they do not (odd, tiny, over 128).
HEAD_DIMS = (8, 16, 32, 40, 48, 64, 72, 80, 96, 100, 112, 128, 160, 192, 256, 1, 3, 24, 36)


class Case:
    """One drawn call: its description and the comparisons that it passed or failed."""

    def __init__(self, seed):
        self.seed, self.rng, self.desc, self.worst = seed, np.random.default_rng(seed), {}, []

    def draw(self, name, options):
        value = options[self.rng.integers(len(options))]
        self.desc[name] = value
        return value

    def check(self, what, actual, ref, dtype, baseline=None, slack=0.0):
        err, tol = max_err(actual, ref), tolerance(ref, dtype, baseline) + slack
        self.worst.append((err / tol if tol > 0 else (0.0 if err == 0 else math.inf), what, err, tol))


def tensors(torch, rng, shapes, dtype, device, grad=False):
    out = []
    for s in shapes:
        t = torch.from_numpy(rng.standard_normal(s).astype(np.float32)).to(getattr(torch, dtype)).to(device)
        out.append(t.requires_grad_() if grad else t)
    return out


def common_options(c, torch, device, hq, d):
    """flash_attn's keyword options, drawn; and the reference's keywords for them."""
    kw, ref = {}, {}
    if c.draw("scale", (None, None, 0.7 / math.sqrt(d))) is not None:
        kw["softmax_scale"] = ref["scale"] = c.desc["scale"]
    kw["causal"] = ref["causal"] = bool(c.draw("causal", (False, True)))
    window = c.draw("window", ((-1, -1), (-1, -1), (17, 0), (40, 9), (0, 0), (5, -1)))
    if window != (-1, -1):
        kw["window_size"] = ref["window"] = window
    if c.draw("softcap", (0.0, 0.0, 7.5, 30.0)):
        kw["softcap"] = ref["softcap"] = c.desc["softcap"]
    if c.draw("alibi", (False, False, True)):
        slopes = (0.5 ** (1 + np.arange(hq) % 6)).astype(np.float32)
        kw["alibi_slopes"], ref["alibi"] = torch.from_numpy(slopes).to(device), slopes.astype(np.float64)
    return kw, ref


def clip_window(ref_kw, seqlen_k):
    """The reference's window as flash_attn (and FlashCL) take it: a side >= seqlen_k (k's length, the
    max_seqlen_k passed for varlen) is dropped before anything else. Only a right side can hide a key
    past that bound (with seqlen_q > seqlen_k): unclipped, the reference hid keys the call does not."""
    if "window" in ref_kw:
        ref_kw["window"] = tuple(-1 if w >= seqlen_k else w for w in ref_kw["window"])


def run_func(c, torch, device):
    """flash_attn_func or flash_attn_varlen_func: forward, then the backward through autograd."""
    dtype = c.draw("dtype", DTYPES)
    varlen = bool(c.draw("varlen", (False, False, True)))
    hkv = c.draw("hkv", (1, 2, 3, 4))
    hq = hkv * c.draw("group", (1, 1, 2, 4, 8))
    d = c.draw("d", HEAD_DIMS)
    b = c.draw("b", (1, 2, 3))
    budget = 1 << 17  # sq * sk per sequence: keeps the float64 reference quick
    sq = int(c.rng.integers(1, 400))
    sk = int(c.rng.choice([sq, c.rng.integers(1, 600)]))
    while sq * sk * hq > budget * 8 and sq > 1:
        sq, sk = max(1, sq // 2), max(1, sk // 2)
    c.desc.update(sq=sq, sk=sk)
    kw, ref_kw = common_options(c, torch, device, hq, d)
    if varlen:
        lens_q = [int(c.rng.integers(0, sq + 1)) for _ in range(b)]
        lens_k = [int(c.rng.integers(1, sk + 1)) for _ in range(b)]
        c.desc.update(lens_q=lens_q, lens_k=lens_k)
        q, k, v = tensors(torch, c.rng, ((sum(lens_q), hq, d), (sum(lens_k), hkv, d), (sum(lens_k), hkv, d)), dtype,
                          device, grad=True)
        cu_q = torch.tensor(np.concatenate([[0], np.cumsum(lens_q)]), dtype=torch.int32)
        cu_k = torch.tensor(np.concatenate([[0], np.cumsum(lens_k)]), dtype=torch.int32)
        out = flashcl.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), **kw)
        clip_window(ref_kw, max(lens_k))
        seqs = [(slice(int(cu_q[i]), int(cu_q[i + 1])), slice(int(cu_k[i]), int(cu_k[i + 1]))) for i in range(b)]
    else:
        q, k, v = tensors(torch, c.rng, ((b, sq, hq, d), (b, sk, hkv, d), (b, sk, hkv, d)), dtype, device, grad=True)
        out = flashcl.flash_attn_func(q, k, v, **kw)
        seqs = [(slice(None), slice(None))]
        clip_window(ref_kw, sk)
    assert tuple(out.shape) == tuple(q.shape) and out.dtype == q.dtype and out.device == q.device, "out's form"
    dout = tensors(torch, c.rng, (tuple(out.shape),), dtype, device)[0]
    out.backward(dout)
    for rq, rk in seqs:
        pick = (lambda x, r: x[r][None]) if varlen else (lambda x, r: x)
        leaves = [pick(x.detach().cpu().double(), r).requires_grad_() for x, r in ((q, rq), (k, rk), (v, rk))]
        ref = torch_attention(*leaves, **ref_kw)
        ref.backward(pick(dout.cpu().double(), rq))
        base, low = None, (None,) * 3
        if dtype != "float32":
            low = [pick(x.detach().cpu(), r).requires_grad_() for x, r in ((q, rq), (k, rk), (v, rk))]
            base = torch_attention(*low, **ref_kw)
            base.backward(pick(dout.cpu(), rq))
        c.check("out", pick(out, rq), ref, dtype, base)
        for name, x, r, leaf, bl in zip("qkv", (q, k, v), (rq, rk, rk), leaves, low):
            c.check("d" + name, pick(x.grad, r), leaf.grad, dtype, None if bl is None else bl.grad)


def run_kvcache(c, torch, device):
    """flash_attn_with_kvcache: a contiguous or paged cache, optionally appended to and rotated."""
    dtype = c.draw("dtype", DTYPES)
    hkv = c.draw("hkv", (1, 2, 4, 8))
    hq = hkv * c.draw("group", (1, 4, 8))
    d = c.draw("d", tuple(x for x in HEAD_DIMS if x % 2 == 0))
    b = c.draw("b", (1, 2, 3, 5))
    sq = c.draw("sq", (1, 1, 2, 5, 16))
    s_new = c.draw("s_new", (0, 0, 1, 3))
    cap = int(c.rng.integers(max(1, s_new), 2000))
    page = c.draw("page", (0, 0, 1, 3, 16, 256))
    lens = [int(c.rng.integers(0, cap - s_new + 1)) for _ in range(b)]
    c.desc.update(cap=cap, lens=lens)
    kw, ref_kw = common_options(c, torch, device, hq, d)
    if c.draw("splits", (0, 0, 1, 7)):
        kw["num_splits"] = c.desc["splits"]
    ref_kw = dict(ref_kw)
    a = {}
    (a["q"],) = tensors(torch, c.rng, ((b, sq, hq, d),), dtype, device)
    if page:
        max_pages = -(-cap // page)
        pool = (b * max_pages + 1, page, hkv, d)
        table = c.rng.permutation(pool[0])[:b * max_pages].reshape(b, max_pages).astype(np.int32)
        a["block_table"] = torch.from_numpy(table).to(device)
    else:
        pool = (b, cap, hkv, d)
    a["k_cache"], a["v_cache"] = tensors(torch, c.rng, (pool, pool), dtype, device)
    a["cache_seqlens"] = torch.tensor(lens, dtype=torch.int32, device=device)
    if s_new:
        a["k"], a["v"] = tensors(torch, c.rng, ((b, s_new, hkv, d), (b, s_new, hkv, d)), dtype, device)
    if c.draw("rotary", (False, True)):
        rd = 2 * int(c.rng.integers(1, d // 2 + 1))
        interleaved = bool(c.draw("interleaved", (False, True)))
        c.desc["rotary_dim"] = rd
        theta = np.arange(cap + sq)[:, None] * 10000.0 ** (-np.arange(rd // 2)[None] * 2 / rd)
        a["rotary_cos"], a["rotary_sin"] = (torch.from_numpy(f(theta).astype(np.float32)).to(device)
                                            for f in (np.cos, np.sin))
        a["rotary_interleaved"] = interleaved
    ref_args = {n: (x if isinstance(x, bool) else f64(x)) for n, x in a.items()}
    for n in ("cache_seqlens", "block_table"):
        if n in ref_args:
            ref_args[n] = ref_args[n].astype(np.int64)
    rnd = None
    if dtype != "float32":
        import ml_dtypes

        store = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(np.float16)

        def rnd(x):
            return np.asarray(x).astype(store).astype(np.float64)
    out, lse = flashcl.flash_attn_with_kvcache(**a, **kw, return_softmax_lse=True)
    ref_out, ref_lse, ref_k, _ = kvcache_attention(round_k=rnd, round_v=rnd, round_q=rnd, **ref_args, **ref_kw)
    base = None
    if dtype != "float32":
        base = kvcache_attention(round_k=rnd, round_v=rnd, round_q=rnd, storage=store, **ref_args, **ref_kw)[0]
    c.check("out", out, ref_out, dtype, base)
    # A rotated q is rounded to the storage type, from float32 here and float64 there: an element
    # within float32's error of a rounding midpoint goes the other way (in float16 about one in
    # 2500). The LSE may then differ by up to what rounding every element of q moves it.
    slack = 0.0
    if dtype != "float32" and "rotary_cos" in a:
        slack = max_err(kvcache_attention(round_k=rnd, round_v=rnd, **ref_args, **ref_kw)[1], ref_lse)
    c.check("lse", lse, ref_lse, "float32", slack=slack)
    # The appended (rotated) rows: the cache's own rounding of the device's float rotation.
    err = np.abs(f64(a["k_cache"]) - ref_k)
    lim = (1e-6 if dtype == "float32" else 2.0 ** -7) * np.abs(ref_k) + 1e-6
    c.worst.append((float((err / lim).max()), "k_cache", float(err.max()), float(lim.max())))


def run_paged_varlen(c, torch, device):
    """flash_attn_varlen_func with block_table: packed queries of unequal lengths (some empty) against
    their sequences' keys in a shuffled page pool, forward only (as flash_attn)."""
    dtype = c.draw("dtype", DTYPES)
    hkv = c.draw("hkv", (1, 2, 4))
    hq = hkv * c.draw("group", (1, 4))
    d = c.draw("d", HEAD_DIMS)
    b = c.draw("b", (1, 2, 3, 5))
    page = c.draw("page", (1, 3, 16, 256))
    lens_q = [int(c.rng.integers(0, 40)) for _ in range(b)]
    lens_k = [int(c.rng.integers(0, 700)) for _ in range(b)]
    c.desc.update(lens_q=lens_q, lens_k=lens_k)
    kw, ref_kw = common_options(c, torch, device, hq, d)
    max_pages = max(1, -(-max(lens_k) // page))
    pool = (b * max_pages + 1, page, hkv, d)
    table = c.rng.permutation(pool[0])[:b * max_pages].reshape(b, max_pages).astype(np.int32)
    cu_q, cu_k = (np.concatenate([[0], np.cumsum(x)]).astype(np.int32) for x in (lens_q, lens_k))
    q, k_pool, v_pool = tensors(torch, c.rng, ((int(cu_q[-1]) + 1, hq, d), pool, pool), dtype, device)
    to = lambda x: torch.from_numpy(x).to(device)  # noqa: E731
    with torch.no_grad():
        out, lse, _ = flashcl.flash_attn_varlen_func(q, k_pool, v_pool, to(cu_q), to(cu_k), max(lens_q), max(lens_k),
                                                     block_table=to(table), return_attn_probs=True, **kw)
    clip_window(ref_kw, max(lens_k))
    store = None
    if dtype != "float32":
        import ml_dtypes

        store = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(np.float16)
    qn, kn, vn = f64(q), f64(k_pool), f64(v_pool)
    refs, bases, lses, rows = [], [], [], []
    for i in range(b):
        if not lens_q[i]:
            continue
        sel = slice(int(cu_q[i]), int(cu_q[i + 1]))
        keys, values = (np.concatenate([x[p] for p in table[i]])[None, :lens_k[i]] for x in (kn, vn))
        ref_out, ref_lse = numpy_attention(qn[None, sel], keys, values, **ref_kw)
        refs.append(ref_out[0]), lses.append(ref_lse[0]), rows.append(sel)
        if store is not None:
            bases.append(numpy_attention(qn[None, sel], keys, values, storage=store, **ref_kw)[0][0])
    if refs:
        got = np.concatenate([f64(out)[r] for r in rows])
        c.check("out", got, np.concatenate(refs), dtype, np.concatenate(bases) if bases else None)
        c.check("lse", np.concatenate([f64(lse)[:, r] for r in rows], axis=1), np.concatenate(lses, axis=1),
                "float32")
    c.check("padding row", f64(out)[int(cu_q[-1]):], np.zeros((1, hq, d)), "float32")


# A bias's or mask's forms (None: not given, 4 times in 11).
FORMS = (None, None, None, None, "full", "b1", "1h", "11", "2d", "rows", "cols")


def score_matrix(c, name, forms, torch, api, device, b, hq, rows, cols, values):
    """A bias or mask in a drawn form: full, broadcast over the batch and/or the heads, 2-D, or one
    row / one column expanded (stride 0, as expand and broadcast_to give it); values(shape) draws its
    entries. Returns (the argument, its (b, hq, rows, cols) view for the reference), or (None, None)."""
    form = c.draw(name, forms)
    if form is None:
        return None, None
    shape = {"full": (b, hq, rows, cols), "b1": (b, 1, rows, cols), "1h": (1, hq, rows, cols),
             "11": (1, 1, rows, cols), "2d": (rows, cols), "rows": (b, 1, 1, cols), "cols": (1, hq, rows, 1)}[form]
    x = values(shape)
    arg = x
    if api != "numpy":
        arg = torch.from_numpy(x).to(device)
    if form in ("rows", "cols"):
        wide = (shape[0], shape[1], rows, cols)
        arg = np.broadcast_to(x, wide) if api == "numpy" else arg.expand(*wide)
    return arg, np.broadcast_to(x, (b, hq, rows, cols))


def run_extras(c, torch, device):
    """flashcl.attention with FlashCL's own features (additive bias, boolean and block masks, sinks, dropout
    with the mask dropout_mask reports, d_v != d) among flash_attn's (window, softcap, ALiBi, GQA, varlen),
    forward with its LSE, then the backward: through autograd on tensors (sinks requiring grad) or
    flashcl.attention_backward on numpy arrays."""
    dtype = c.draw("dtype", DTYPES)
    api = c.draw("api", ("autograd", "numpy"))
    varlen = bool(c.draw("varlen", (False, False, False, True)))
    hkv = c.draw("hkv", (1, 2, 3))
    hq = hkv * c.draw("group", (1, 1, 2, 4))
    d = c.draw("d", HEAD_DIMS)
    dv = c.draw("dv", HEAD_DIMS) if c.draw("dv_ne_d", (False, False, True)) else d
    b = c.draw("b", (1, 2, 3))
    sq, sk = int(c.rng.integers(1, 120)), int(c.rng.integers(1, 160))
    while b * hq * sq * sk > 1 << 15 and sq > 1:
        sq, sk = max(1, sq // 2), max(1, sk // 2)
    c.desc.update(sq=sq, sk=sk)
    kw, ref_kw = common_options(c, torch, device, hq, d)
    if "alibi_slopes" in kw and c.draw("alibi_per_batch", (False, True)):
        slopes = (ref_kw["alibi"][None] * (1 + np.arange(b))[:, None] / b).astype(np.float32)  # (b, hq)
        ref_kw["alibi"], kw["alibi_slopes"] = slopes.astype(np.float64), torch.from_numpy(slopes).to(device)
    if api == "numpy" and "alibi_slopes" in kw:
        kw["alibi_slopes"] = kw["alibi_slopes"].cpu().numpy()
    if dtype == "float32":
        store = None
    else:
        import ml_dtypes

        store = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(np.float16)

    def make(shape):  # inputs rounded to the storage type, as numpy arrays or tensors
        x = c.rng.standard_normal(shape).astype(np.float32)
        if api == "numpy":
            return x if store is None else x.astype(store)
        return torch.from_numpy(x).to(getattr(torch, dtype)).to(device)

    if varlen:
        lens_q = [int(c.rng.integers(0, sq + 1)) for _ in range(b)]
        lens_k = [int(c.rng.integers(1, sk + 1)) for _ in range(b)]
        c.desc.update(lens_q=lens_q, lens_k=lens_k)
        cu_q, cu_k = (np.concatenate([[0], np.cumsum(x)]).astype(np.int32) for x in (lens_q, lens_k))
        rows, cols = max(lens_q), max(lens_k)
        q, k, v, dout = (make(s) for s in ((int(cu_q[-1]), hq, d), (int(cu_k[-1]), hkv, d), (int(cu_k[-1]), hkv, dv),
                                           (int(cu_q[-1]), hq, dv)))
        as_arg = (lambda x: x) if api == "numpy" else (lambda x: torch.from_numpy(x).to(device))
        kw.update(cu_seqlens_q=as_arg(cu_q), cu_seqlens_k=as_arg(cu_k), max_seqlen_q=rows, max_seqlen_k=cols)
        seqs = [(i, slice(int(cu_q[i]), int(cu_q[i + 1])), slice(int(cu_k[i]), int(cu_k[i + 1])))
                for i in range(b) if lens_q[i]]
    else:
        rows, cols = sq, sk
        q, k, v, dout = (make(s) for s in ((b, sq, hq, d), (b, sk, hkv, d), (b, sk, hkv, dv), (b, sq, hq, dv)))
        seqs = [(None, slice(None), slice(None))]
    clip_window(ref_kw, cols)

    def floats(shape):  # a bias: normal, or 4 times that, with some entries -inf
        x = c.rng.standard_normal(shape).astype(np.float32) * np.float32(c.draw("bias_scale", (1.0, 4.0)))
        if c.draw("bias_neginf", (False, False, True)):
            x[c.rng.random(shape) < 0.2] = -np.inf
        return x

    def bools(name, keep):  # a mask in bool or uint8
        def values(shape):
            drawn = c.rng.random(shape) < c.draw(name + "_keep", keep)
            return drawn.astype(c.draw(name + "_dtype", ("bool", "uint8")))
        return values

    kw["bias"], bias_ref = score_matrix(c, "bias", FORMS, torch, api, device, b, hq, rows, cols, floats)
    kw["mask"], mask_ref = score_matrix(c, "mask", FORMS, torch, api, device, b, hq, rows, cols,
                                        bools("mask", (0.5, 0.8, 0.95)))
    block = c.draw("block_size", (None, None, None, None, (1, 1), (3, 5), (16, 16), (32, 64), (64, 16)))
    if block is not None:
        nq, nk = -(-rows // block[0]), -(-cols // block[1])
        kw["block_mask"], blocks = score_matrix(c, "block_mask", ("full", "b1", "1h", "11", "2d"), torch, api, device,
                                                b, hq, nq, nk, bools("block", (0.5, 0.8)))
        kw["block_size"] = block
        dense = np.repeat(np.repeat(blocks, block[0], axis=2), block[1], axis=3)[:, :, :rows, :cols]
        mask_ref = dense.astype(bool) if mask_ref is None else mask_ref.astype(bool) & dense.astype(bool)
    sinks = None
    sinks_dtype = c.draw("sinks", (None, None, "float32", dtype))
    if sinks_dtype is not None:
        s32 = (c.rng.standard_normal(hq) * 2).astype(np.float32)
        if api == "numpy":
            sinks = s32 if sinks_dtype == "float32" else s32.astype(store)
        else:
            sinks = torch.from_numpy(s32).to(getattr(torch, sinks_dtype)).to(device).requires_grad_()
        kw["sinks"] = sinks
    dropout_p = c.draw("dropout_p", (0.0, 0.0, 0.0, 0.1, 0.3))
    keep = None
    if dropout_p:
        kw.update(dropout_p=dropout_p, dropout_seed=int(c.rng.integers(0, 1 << 62)),
                  dropout_offset=int(c.draw("dropout_offset", (0, 0, 12345))))
        lens = {n: kw[n] for n in ("cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k") if n in kw}
        keep = f64(flashcl.dropout_mask(q, k, dropout_p, kw["dropout_seed"], kw["dropout_offset"], **lens)) > 0
        assert keep.shape == (b, hq, rows, cols), f"dropout_mask's shape {keep.shape}"
    kw = {n: x for n, x in kw.items() if x is not None}

    # The call and its backward.
    if api == "numpy":
        out, lse = flashcl.attention(q, k, v, return_lse=True, **kw)
        grads = flashcl.attention_backward(dout, q, k, v, out, lse, **kw)
        assert type(out) is np.ndarray and out.dtype == q.dtype, "out's kind"
    else:
        q, k, v = (x.requires_grad_() for x in (q, k, v))
        out, lse = flashcl.attention(q, k, v, return_lse=True, **kw)
        assert out.dtype == q.dtype and out.device == q.device, "out's form"
        out.backward(dout)
        grads = (q.grad, k.grad, v.grad) + ((sinks.grad,) if sinks is not None else ())
        if sinks is not None:
            assert sinks.grad.dtype == sinks.dtype, "dsinks' dtype"
    assert tuple(out.shape) == tuple(q.shape[:-1]) + (dv,), f"out's shape {tuple(out.shape)}"
    assert len(grads) == 3 + (sinks is not None), f"{len(grads)} gradients"

    # The float64 reference (and the storage type's baseline), per sequence with varlen; the gradients of the
    # full leaves accumulate over the sequences (dsinks sums over all of them).
    def leaves(kind):
        xs = [torch.from_numpy(f64(x)) for x in (q, k, v)]
        if sinks is not None:
            xs.append(torch.from_numpy(f64(sinks)))
        xs = [x.to(kind).requires_grad_() for x in xs]
        return xs

    def seq_kw(i, nq, nk):
        one = slice(None) if i is None else slice(i, i + 1)
        r = dict(ref_kw)
        if "alibi" in r and np.ndim(r["alibi"]) == 2:
            r["alibi"] = r["alibi"][one]
        for name, x in (("bias", bias_ref), ("mask", mask_ref), ("keep", keep)):
            if x is not None:
                r[name] = np.array(x[one, :, :nq, :nk])  # (a writable copy, for torch)
        if keep is not None:
            r["dropout_p"] = dropout_p
        return r

    dout64 = torch.from_numpy(f64(dout))
    x64 = leaves(torch.float64)
    low = leaves(getattr(torch, dtype)) if store is not None else None
    # The backward's D = rowsum(dO * O) takes the O it returned, rounded to the storage type; the float64 and
    # the storage-type references' autograd never forms it. O off by e moves D by dO.e, and the gradients by
    # that times the LSE's (dS = P (dP - D)): nothing where P is 1 and O is V exactly, but with dropout O is
    # V / (1 - p), which float16 rounds, and the gradient of a row that sees one key is 0 in both references.
    # The slack: twice those gradients (as the criterion doubles the baseline's error), from the O that came back.
    shift = leaves(torch.float64) if store is not None else None
    refs, bases, lses = [], [], []
    for i, rq, rk in seqs:
        nq, nk = (rows, cols) if i is None else (rq.stop - rq.start, rk.stop - rk.start)
        pick = (lambda x, r: x) if i is None else (lambda x, r: x[r][None])
        r = seq_kw(i, nq, nk)
        # (the LSE comes before dropout: the same with or without keep)
        ref, lse64 = torch_attention(*(pick(x, rr) for x, rr in zip(x64, (rq, rk, rk))),
                                     sinks=x64[3] if sinks is not None else None, return_lse=True, **r)
        ref.backward(pick(dout64, rq))
        refs.append(ref.detach()[0] if i is not None else ref.detach())
        lses.append(lse64.detach().numpy())
        if low is not None:
            base = torch_attention(*(pick(x, rr) for x, rr in zip(low, (rq, rk, rk))),
                                   sinks=low[3] if sinks is not None else None, **r)
            base.backward(pick(dout64, rq).to(low[0].dtype))
            bases.append(base.detach()[0] if i is not None else base.detach())
            ref_out, ref_lse = torch_attention(*(pick(x, rr) for x, rr in zip(shift, (rq, rk, rk))),
                                               sinks=shift[3] if sinks is not None else None, return_lse=True, **r)
            moved = ((pick(torch.from_numpy(f64(out)), rq) - ref_out.detach()) * pick(dout64, rq)).sum(-1)
            (moved.transpose(1, 2) * torch.where(torch.isfinite(ref_lse), ref_lse, 0.0)).sum().backward()
    if not seqs:  # (varlen with every sequence empty: no row to compare, every gradient 0)
        for name, g in zip(("dq", "dk", "dv", "dsinks"), grads):
            c.check(name, g, np.zeros(tuple(g.shape)), "float32")
        return
    rows_q = np.concatenate([np.arange(rq.start, rq.stop) for _, rq, _ in seqs]) if varlen else slice(None)
    cat = (lambda xs: torch.cat(xs)) if varlen else (lambda xs: xs[0])
    c.check("out", f64(out)[rows_q], cat(refs), dtype, None if low is None else cat(bases))
    ref_lse = np.concatenate([x[0] for x in lses], axis=1) if varlen else lses[0]
    c.check("lse", f64(lse)[..., rows_q], ref_lse, "float32")
    for name, g, x, bl, sh in zip(("dq", "dk", "dv", "dsinks"), grads, x64, low or (None,) * 4, shift or (None,) * 4):
        slack = 0.0 if sh is None or sh.grad is None else 2 * float(sh.grad.abs().max())
        c.check(name, g, x.grad, dtype, None if bl is None else bl.grad, slack=slack)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1, help="the first case's seed; case i uses seed + i")
    ap.add_argument("--device", default=None, help="as flashcl.Context: 'P:D' or a name (default FLASHCL_DEVICE)")
    ap.add_argument("--kinds", default="func,kvcache",
                    help="func (fixed and varlen batches), kvcache, paged_varlen (varlen over a paged cache), extras "
                         "(flashcl.attention and attention_backward: bias, masks, sinks, dropout ...)")
    ap.add_argument("--cuda", action="store_true", help="pass CUDA tensors (copied through the host by FlashCL)")
    args = ap.parse_args()
    kinds = args.kinds.split(",")
    runners = {"func": run_func, "kvcache": run_kvcache, "paged_varlen": run_paged_varlen, "extras": run_extras}
    unknown = [k for k in kinds if k not in runners]
    if unknown:  # a usage error before any case runs, not a failed case that reads like a wrong result
        ap.error(f"--kinds: unknown kind {unknown[0]!r}; choose from {', '.join(runners)}")
    import torch

    if args.device is not None:
        flashcl.use_device(args.device)
    device = "cuda" if args.cuda else "cpu"
    print(f"device: {flashcl.current_context().device_name}; tensors on {device}", flush=True)
    failed = 0
    for i in range(args.cases):
        c = Case(args.seed + i)
        kind = kinds[i % len(kinds)]
        t0 = time.perf_counter()
        try:
            runners[kind](c, torch, device)
            worst = max(c.worst) if c.worst else (0.0, "-", 0.0, 0.0)
            ok = worst[0] <= 1.0
            verdict = f"{worst[1]} err {worst[2]:.3g} tol {worst[3]:.3g}"
        except Exception as e:  # a valid call that raises is a failure too
            ok, verdict = False, f"raised {type(e).__name__}: {e}"
            if os.environ.get("RANDOM_CHECK_TRACE"):
                traceback.print_exc()
        failed += not ok
        again = "" if ok else f" [again: --seed {c.seed} --cases 1 --kinds {kind}]"
        print(f"{'ok  ' if ok else 'FAIL'} seed {c.seed} {kind} {c.desc} {verdict} ({time.perf_counter() - t0:.1f} s)"
              f"{again}", flush=True)
    print(f"{args.cases - failed}/{args.cases} cases agree")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
