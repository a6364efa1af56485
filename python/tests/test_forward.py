"""Forward: flash_attn_func and friends against the float64 references (numpy, and SDPA where it applies)."""
import math

import numpy as np
import pytest

import flashcl
from conftest import DTYPES, assert_close, f64, np_dtype, rand
from reference import numpy_attention, per_sequence

# name: (b, sq, sk, hq, hkv, d, dv, flash_attn keyword arguments)
CASES = {
    "plain": (2, 40, 40, 4, 4, 32, 32, {}),
    "sq_ne_sk_gqa": (2, 37, 53, 4, 2, 32, 32, {}),
    "mqa": (1, 29, 61, 4, 1, 32, 32, {}),
    "causal": (2, 37, 53, 4, 2, 32, 32, dict(causal=True)),
    "causal_sq_gt_sk": (1, 50, 20, 2, 2, 32, 32, dict(causal=True)),  # rows that see no key
    "window": (2, 45, 45, 4, 2, 32, 32, dict(window_size=(8, 4))),
    "causal_window": (1, 33, 70, 2, 1, 32, 32, dict(causal=True, window_size=(16, -1))),
    "softcap": (2, 37, 53, 4, 2, 32, 32, dict(softcap=5.0, softmax_scale=0.5)),
    "alibi": (2, 37, 53, 4, 2, 32, 32, dict(alibi_slopes="h", causal=True)),
    "alibi_batch": (2, 37, 53, 4, 2, 32, 32, dict(alibi_slopes="bh")),
    "dv_ne_d": (2, 37, 53, 4, 2, 48, 32, {}),
}


def _reference_kwargs(kw, alibi):
    return dict(scale=kw.get("softmax_scale"), causal=kw.get("causal", False),
                window=kw.get("window_size", (-1, -1)), softcap=kw.get("softcap", 0.0), alibi=alibi)


def _inputs(rng, case, dtype, kind):
    b, sq, sk, hq, hkv, d, dv, kw = CASES[case]
    q, k, v = rand(rng, (b, sq, hq, d), dtype, kind), rand(rng, (b, sk, hkv, d), dtype, kind), \
        rand(rng, (b, sk, hkv, dv), dtype, kind)
    kw = dict(kw)
    alibi = None
    if "alibi_slopes" in kw:
        shape = (hq,) if kw["alibi_slopes"] == "h" else (b, hq)
        alibi = (0.5 ** (1 + np.arange(np.prod(shape)))).reshape(shape).astype(np.float32)
        kw["alibi_slopes"] = alibi if kind == "numpy" else __import__("torch").from_numpy(alibi)
    return q, k, v, kw, alibi


@pytest.mark.parametrize("kind", ["numpy", "torch"])
@pytest.mark.parametrize("case", list(CASES))
def test_float32_against_numpy(rng, case, kind):
    if kind == "torch":
        pytest.importorskip("torch")
    q, k, v, kw, alibi = _inputs(rng, case, "float32", kind)
    out, lse, s_dmask = flashcl.flash_attn_func(q, k, v, return_attn_probs=True, **kw)
    assert type(out) is type(q) and tuple(out.shape) == tuple(q.shape[:3]) + (v.shape[3],)
    assert s_dmask.shape == (0,)  # no dropout: empty, as flash_attn
    ref, ref_lse = numpy_attention(f64(q), f64(k), f64(v), **_reference_kwargs(kw, alibi))
    assert_close(out, ref)
    assert_close(lse, ref_lse, what="softmax_lse")
    if case == "causal_sq_gt_sk":
        assert np.all(f64(out)[:, :30] == 0) and np.all(np.isneginf(f64(lse)[:, :, :30]))


@pytest.mark.parametrize("case", ["plain", "causal", "window", "softcap", "alibi"])
def test_float32_against_sdpa(rng, case):
    """SDPA (math backend, float64) for what it can express: the masks and ALiBi as an additive float mask."""
    torch = pytest.importorskip("torch")
    from reference import alibi_bias, visible

    q, k, v, kw, alibi = _inputs(rng, case, "float32", "torch")
    b, sq, hq, d = q.shape
    sk = k.shape[1]
    scale = kw.get("softmax_scale", 1 / math.sqrt(d))
    if kw.get("softcap"):
        pytest.skip("SDPA has no softcap (covered by the numpy and torch references)")
    add = np.where(visible(sq, sk, kw.get("causal", False), kw.get("window_size", (-1, -1))), 0.0, -np.inf)
    if alibi is not None:
        add = add + alibi_bias(alibi, sq, sk)
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        ref = torch.nn.functional.scaled_dot_product_attention(
            q.double().transpose(1, 2), k.double().transpose(1, 2), v.double().transpose(1, 2),
            attn_mask=torch.from_numpy(np.broadcast_to(add, (b, hq, sq, sk)).copy()), scale=scale,
            enable_gqa=True).transpose(1, 2)
    assert_close(flashcl.flash_attn_func(q, k, v, **kw), ref)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("case", ["sq_ne_sk_gqa", "causal", "softcap", "alibi"])
def test_storage_types(rng, case, dtype, kind):
    if kind == "torch":
        pytest.importorskip("torch")
    q, k, v, kw, alibi = _inputs(rng, case, dtype, kind)
    out = flashcl.flash_attn_func(q, k, v, **kw)
    assert out.dtype == q.dtype and type(out) is type(q)
    ref_kw = _reference_kwargs(kw, alibi)
    ref, _ = numpy_attention(f64(q), f64(k), f64(v), **ref_kw)
    base, _ = numpy_attention(f64(q), f64(k), f64(v), storage=np_dtype(dtype), **ref_kw)
    assert_close(out, ref, dtype, baseline=base)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_varlen(rng, dtype, kind):
    if kind == "torch":
        pytest.importorskip("torch")
    lens_q, lens_k = [5, 17, 1, 30], [9, 17, 12, 24]
    cu_q = np.cumsum([0] + lens_q).astype(np.int32)
    cu_k = np.cumsum([0] + lens_k).astype(np.int32)
    hq, hkv, d = 4, 2, 32
    q = rand(rng, (cu_q[-1], hq, d), dtype, kind)
    k, v = rand(rng, (cu_k[-1], hkv, d), dtype, kind), rand(rng, (cu_k[-1], hkv, d), dtype, kind)
    cq, ck = cu_q, cu_k
    if kind == "torch":
        import torch

        cq, ck = torch.from_numpy(cu_q), torch.from_numpy(cu_k)
    out, lse, _ = flashcl.flash_attn_varlen_func(q, k, v, cq, ck, max(lens_q), max(lens_k), causal=True,
                                                 return_attn_probs=True)
    assert tuple(lse.shape) == (hq, cu_q[-1])
    for rows_q, rows_k in per_sequence(cu_q, cu_k):
        sel = (f64(x)[None] for x in (q[rows_q], k[rows_k], v[rows_k]))
        qq, kk, vv = sel
        ref, ref_lse = numpy_attention(qq, kk, vv, causal=True)
        if dtype == "float32":
            assert_close(f64(out)[rows_q][None], ref)
            assert_close(f64(lse)[:, rows_q][None], ref_lse, what="softmax_lse")
        else:
            base, _ = numpy_attention(qq, kk, vv, causal=True, storage=np_dtype(dtype))
            assert_close(f64(out)[rows_q][None], ref, dtype, baseline=base)


def test_empty_inputs(rng):
    """No keys, no query rows, a batch of 0, varlen totals of 0: answered without a kernel, as
    flash_attn answers them: out 0 (rows that see no key), LSE -inf or the row's sink, gradients 0."""
    torch = pytest.importorskip("torch")
    q = torch.from_numpy(rand(rng, (2, 5, 4, 16))).requires_grad_()
    k, v = (torch.zeros(2, 0, 2, 16, requires_grad=True) for _ in range(2))
    sinks = torch.tensor([0.5, -1.0, 2.0, 0.0], requires_grad=True)
    out, lse = flashcl.attention(q, k, v, sinks=sinks, causal=True, return_lse=True)
    assert out.shape == (2, 5, 4, 16) and torch.all(out == 0)
    assert torch.equal(lse, sinks.detach()[None, :, None].expand(2, 4, 5))
    out.sum().backward()
    assert torch.all(q.grad == 0) and k.grad.shape == (2, 0, 2, 16) and torch.all(sinks.grad == 0)
    _, lse = flashcl.flash_attn_func(q.detach(), k.detach(), v.detach(), return_attn_probs=True)[:2]
    assert torch.all(lse == -math.inf)
    kv = rand(rng, (2, 3, 2, 16))
    assert flashcl.flash_attn_func(np.zeros((2, 0, 4, 16), np.float32), kv, kv).shape == (2, 0, 4, 16)
    assert flashcl.flash_attn_func(*(np.zeros((0, 3, h, 16), np.float32) for h in (4, 2, 2))).shape == (0, 3, 4, 16)
    cu = np.zeros(3, np.int32)
    out = flashcl.flash_attn_varlen_func(*(np.zeros((0, h, 16), np.float32) for h in (4, 2, 2)), cu, cu, 8, 8)
    assert out.shape == (0, 4, 16)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_packed_forms(rng, kind):
    """qkvpacked and kvpacked (plain and varlen) give what the unpacked calls give, from views of one array."""
    if kind == "torch":
        pytest.importorskip("torch")
    b, s, h, d = 2, 24, 2, 32
    qkv = rand(rng, (b, s, 3, h, d), kind=kind)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    want = f64(flashcl.flash_attn_func(q, k, v, causal=True))
    assert np.array_equal(f64(flashcl.flash_attn_qkvpacked_func(qkv, causal=True)), want)
    kv = qkv[:, :, 1:]
    assert np.array_equal(f64(flashcl.flash_attn_kvpacked_func(q, kv, causal=True)), want)
    cu = np.arange(0, (b + 1) * s, s, dtype=np.int32)
    if kind == "torch":
        import torch

        cu = torch.from_numpy(cu)
    flat = qkv.reshape(b * s, 3, h, d)
    # varlen runs other kernels (the row kernels): equal up to float32 rounding
    got = flashcl.flash_attn_varlen_qkvpacked_func(flat, cu, s, causal=True)
    np.testing.assert_allclose(f64(got).reshape(b, s, h, d), want, rtol=0, atol=1e-6)
    got = flashcl.flash_attn_varlen_kvpacked_func(flat[:, 0], flat[:, 1:], cu, cu, s, s, causal=True)
    np.testing.assert_allclose(f64(got).reshape(b, s, h, d), want, rtol=0, atol=1e-6)


@pytest.mark.parametrize("softcap", [1e4, 1e30])
def test_large_softcap_keeps_float32_accuracy(rng, softcap):
    """softcap C computes C tanh(s / C): for a large C, tanh of a tiny argument must keep its relative
    accuracy (an absolute 1e-7 there was 1e-3 off at C = 1e4 and turned every score to 0 at 1e30)."""
    q, k, v = (rand(rng, (1, 40, 2, 32)) for _ in range(3))
    out, lse, _ = flashcl.flash_attn_func(q, k, v, softcap=softcap, return_attn_probs=True)
    ref, ref_lse = numpy_attention(f64(q), f64(k), f64(v), softcap=softcap)
    assert_close(out, ref)
    assert_close(lse, ref_lse, what="lse")
