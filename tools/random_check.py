#!/usr/bin/env python3
"""Random calls of the Python API against the float64 definition, on any OpenCL device.

What a new user does to a library: shapes, head dims, options and their
combinations that no test names. Each case draws a call of flash_attn_func
(forward and backward), flash_attn_varlen_func (forward and backward) or
flash_attn_with_kvcache (contiguous or paged cache, append, rotary), or with
--kinds paged_varlen flash_attn_varlen_func over a paged cache, runs it
and compares it with python/tests/reference.py under the test suite's
tolerances (float32: 2e-5 relative to the largest reference value; float16 and
bfloat16: at most twice the error of a plain implementation in that storage
type, plus 1e-5). One line per case; the exit status is 1 if any case failed.

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


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1, help="the first case's seed; case i uses seed + i")
    ap.add_argument("--device", default=None, help="as flashcl.Context: 'P:D' or a name (default FLASHCL_DEVICE)")
    ap.add_argument("--kinds", default="func,kvcache",
                    help="func (fixed and varlen batches), kvcache, paged_varlen (varlen over a paged cache)")
    ap.add_argument("--cuda", action="store_true", help="pass CUDA tensors (copied through the host by FlashCL)")
    args = ap.parse_args()
    import torch

    if args.device is not None:
        flashcl.use_device(args.device)
    device = "cuda" if args.cuda else "cpu"
    kinds = args.kinds.split(",")
    runners = {"func": run_func, "kvcache": run_kvcache, "paged_varlen": run_paged_varlen}
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
