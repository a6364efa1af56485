"""Dropout: the mask flashcl.dropout_mask reports is the one the forward applies and the backward
regenerates; S_dmask carries it as flash_attn does; seeds follow torch's and numpy's generators."""
import numpy as np
import pytest

import flashcl
from conftest import assert_close, f64, rand
from reference import numpy_attention, per_sequence

P = 0.25


def test_mask_is_deterministic_and_about_p(rng):
    q, k = rand(rng, (2, 64, 4, 16)), rand(rng, (2, 96, 2, 16))
    m1 = flashcl.dropout_mask(q, k, P, dropout_seed=7)
    assert m1.dtype == np.bool_ and m1.shape == (2, 4, 64, 96)
    assert np.array_equal(m1, flashcl.dropout_mask(q, k, P, dropout_seed=7))
    assert not np.array_equal(m1, flashcl.dropout_mask(q, k, P, dropout_seed=8))
    assert not np.array_equal(m1, flashcl.dropout_mask(q, k, P, dropout_seed=7, dropout_offset=1))
    assert abs(m1.mean() - (1 - P)) < 0.01


def test_forward_applies_the_mask(rng):
    q, k, v = rand(rng, (2, 37, 4, 32)), rand(rng, (2, 53, 2, 32)), rand(rng, (2, 53, 2, 32))
    out = flashcl.attention(q, k, v, dropout_p=P, dropout_seed=11, causal=True)
    keep = flashcl.dropout_mask(q, k, P, dropout_seed=11)
    ref, _ = numpy_attention(q, k, v, causal=True, keep=keep, dropout_p=P)
    assert_close(out, ref)


def test_backward_regenerates_the_mask(rng):
    torch = pytest.importorskip("torch")
    from reference import torch_attention

    torch.manual_seed(5)
    q, k, v = (rand(rng, s, kind="torch").requires_grad_() for s in ((2, 37, 4, 32), (2, 53, 2, 32), (2, 53, 2, 32)))
    out, lse, s_dmask = flashcl.flash_attn_func(q, k, v, dropout_p=P, softcap=4.0, return_attn_probs=True)
    dout = torch.randn_like(out)
    out.backward(dout)
    keep = (s_dmask >= 0).numpy()
    x64 = [x.detach().double().requires_grad_() for x in (q, k, v)]
    ref = torch_attention(*x64, softcap=4.0, keep=keep, dropout_p=P)
    ref.backward(dout.double())
    assert_close(out, ref)
    for x, r in zip((q, k, v), x64):
        assert_close(x.grad, r.grad, what="grad with dropout")


def test_s_dmask_is_flash_attn_encoding(rng):
    """|S_dmask| is P (before dropout), negative where dropped: keep = S_dmask >= 0 as in flash_attn's tests."""
    q, k, v = rand(rng, (1, 20, 2, 16)), rand(rng, (1, 600, 2, 16)), rand(rng, (1, 600, 2, 16))
    np.random.seed(3)
    out, lse, s_dmask = flashcl.flash_attn_func(q, k, v, dropout_p=P, causal=True, return_attn_probs=True)
    _, _, probs = flashcl.flash_attn_func(q, k, v, dropout_p=0.0, causal=True, return_attn_probs=True)
    assert probs.shape == (0,)
    ref_p = np.exp(_scores(q, k) - f64(lse)[..., None]) * _causal(20, 600)
    assert s_dmask.shape == (1, 2, 20, 600) and s_dmask.dtype == np.float32
    np.testing.assert_allclose(np.abs(s_dmask), ref_p, atol=1e-6)
    np.random.seed(3)  # the same numpy seed draws the same dropout seed
    out2 = flashcl.flash_attn_func(q, k, v, dropout_p=P, causal=True)
    assert np.array_equal(out, out2)
    ref, _ = numpy_attention(q, k, v, causal=True, keep=s_dmask >= 0, dropout_p=P)
    assert_close(out, ref)


def _scores(q, k):
    return np.einsum("bihd,bjhd->bhij", f64(q), f64(k)) / np.sqrt(q.shape[-1])


def _causal(sq, sk):
    return np.arange(sk)[None, :] <= np.arange(sq)[:, None] + sk - sq


def test_torch_seed_reproduces(rng):
    torch = pytest.importorskip("torch")
    q = rand(rng, (1, 16, 2, 16), kind="torch")
    torch.manual_seed(1)
    a = flashcl.flash_attn_func(q, q, q, dropout_p=0.5)
    torch.manual_seed(1)
    b = flashcl.flash_attn_func(q, q, q, dropout_p=0.5)
    c = flashcl.flash_attn_func(q, q, q, dropout_p=0.5)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_varlen_dropout(rng):
    lens = [7, 20, 13]
    cu = np.cumsum([0] + lens).astype(np.int32)
    q, k, v = (rand(rng, (cu[-1], 2, 16)) for _ in range(3))
    out = flashcl.attention(q, k, v, dropout_p=P, dropout_seed=9, cu_seqlens_q=cu, cu_seqlens_k=cu,
                            max_seqlen_q=20, max_seqlen_k=20)
    keep = flashcl.dropout_mask(q, k, P, 9, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=20, max_seqlen_k=20)
    assert keep.shape == (3, 2, 20, 20)
    for i, (rows, _) in enumerate(per_sequence(cu, cu)):
        n = lens[i]
        assert not keep[i, :, n:].any() and not keep[i, :, :, n:].any()
        ref, _ = numpy_attention(q[rows][None], k[rows][None], v[rows][None], keep=keep[i:i + 1, :, :n, :n],
                                 dropout_p=P)
        assert_close(out[rows][None], ref)
