"""Parity with flash_attn 2.8's argument handling (csrc/flash_attn/flash_api.cpp and
flash_attn_interface.py): window sides clipped to seqlen_k, the LSE as an autograd output, max_seqlen 0,
negative num_splits, dropout_p < 0 and softmax_scale <= 0.

Head dim 8 and tiny shapes: each distinct call is a kernel build on POCL."""
import numpy as np
import pytest

import flashcl
from conftest import assert_close, f64, rand
from reference import numpy_attention


def _torch():
    return pytest.importorskip("torch")


# --- window sides >= seqlen_k are unbounded, as flash_api.cpp clips them ------------------------------------------

def test_window_side_as_wide_as_the_keys_is_unbounded(rng):
    """seqlen_q 6 > seqlen_k 3, not causal: (-1, 3) is no window at all in flash_attn (3 >= seqlen_k), though
    the right side read literally hides keys from the first rows; (-1, 2) stays a window."""
    q, k, v = rand(rng, (1, 6, 2, 8)), rand(rng, (1, 3, 2, 8)), rand(rng, (1, 3, 2, 8))
    plain, _ = numpy_attention(f64(q), f64(k), f64(v))
    assert_close(flashcl.flash_attn_func(q, k, v, window_size=(-1, 3)), plain)
    assert_close(flashcl.flash_attn_func(q, k, v, window_size=(7, 5)), plain)
    narrow, _ = numpy_attention(f64(q), f64(k), f64(v), window=(-1, 2))
    assert_close(flashcl.flash_attn_func(q, k, v, window_size=(-1, 2)), narrow)
    assert np.abs(narrow - plain).max() > 0.1  # (the case tells the two apart)


def test_window_clipped_in_the_backward_too(rng):
    torch = _torch()
    q, k, v = (rand(rng, s, kind="torch").requires_grad_() for s in ((1, 6, 2, 8), (1, 3, 2, 8), (1, 3, 2, 8)))
    out = flashcl.flash_attn_func(q, k, v, window_size=(-1, 3))
    out.backward(torch.ones_like(out))
    qq, kk, vv = (x.detach().double().requires_grad_() for x in (q, k, v))
    from reference import torch_attention

    ref = torch_attention(qq, kk, vv)
    ref.backward(torch.ones_like(ref))
    for mine, theirs in ((out, ref), (q.grad, qq.grad), (k.grad, kk.grad), (v.grad, vv.grad)):
        assert_close(mine.detach().numpy(), theirs.detach().numpy())


def test_varlen_window_clipped_against_max_seqlen_k(rng):
    """flash_attn clips against max_seqlen_k as given, not each sequence's length: with max_seqlen_k 3 a right side
    of 3 is dropped; with max_seqlen_k 5 (the caller's bound) the same side is kept."""
    q, k, v = rand(rng, (6, 2, 8)), rand(rng, (3, 2, 8)), rand(rng, (3, 2, 8))
    cu_q, cu_k = np.array([0, 6], np.int32), np.array([0, 3], np.int32)
    plain, _ = numpy_attention(f64(q)[None], f64(k)[None], f64(v)[None])
    kept, _ = numpy_attention(f64(q)[None], f64(k)[None], f64(v)[None], window=(-1, 3))
    assert_close(flashcl.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 6, 3, window_size=(-1, 3)), plain[0])
    assert_close(flashcl.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 6, 5, window_size=(-1, 3)), kept[0])


def test_kvcache_window_clipped_against_the_capacity(rng):
    """flash_attn_with_kvcache clips against the cache's rows (seqlen_k there): 6 queries, 3 keys in a 4-row cache;
    (-1, 4) is no window, (-1, 3) is one."""
    q = rand(rng, (1, 6, 2, 8))
    k_cache, v_cache = rand(rng, (1, 4, 2, 8)), rand(rng, (1, 4, 2, 8))
    keys = (f64(k_cache)[:, :3], f64(v_cache)[:, :3])
    plain, _ = numpy_attention(f64(q), *keys)
    kept, _ = numpy_attention(f64(q), *keys, window=(-1, 3))
    assert_close(flashcl.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=3, window_size=(-1, 4)), plain)
    assert_close(flashcl.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=3, window_size=(-1, 3)), kept)


def test_paged_varlen_window_clipped_against_max_seqlen_k(rng):
    """The paged varlen call clips as the varlen one (max_seqlen_k), whatever the table's width."""
    q = rand(rng, (6, 2, 8))
    pool = rand(rng, (3, 4, 2, 8))
    cu_q, cu_k = np.array([0, 6], np.int32), np.array([0, 3], np.int32)
    keys = (f64(pool)[0][None, :3],) * 2
    plain, _ = numpy_attention(f64(q)[None], *keys)
    kept, _ = numpy_attention(f64(q)[None], *keys, window=(-1, 3))
    for width in (1, 3):
        table = np.arange(width, dtype=np.int32)[None]
        assert_close(flashcl.flash_attn_varlen_func(q, pool, pool, cu_q, cu_k, 6, 3, window_size=(-1, 3),
                                                    block_table=table), plain[0])
        assert_close(flashcl.flash_attn_varlen_func(q, pool, pool, cu_q, cu_k, 6, 8, window_size=(-1, 3),
                                                    block_table=table), kept[0])


# --- softmax_lse and S_dmask are outputs autograd tracks, their gradient ignored (flash_attn's FlashAttnFunc) -------

def test_lse_is_an_output_of_the_autograd_function(rng):
    """A loss through softmax_lse runs (flash_attn: no error, zero gradients from it); with out's it adds nothing."""
    torch = _torch()
    q, k, v = (rand(rng, s, kind="torch").requires_grad_() for s in ((1, 4, 2, 8), (1, 5, 2, 8), (1, 5, 2, 8)))
    out, lse, _ = flashcl.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    assert lse.requires_grad and out.grad_fn is not None
    lse.sum().backward(retain_graph=True)
    for x in (q, k, v):
        assert torch.count_nonzero(x.grad) == 0
        x.grad = None
    out.sum().backward(retain_graph=True)
    alone = [x.grad.clone() for x in (q, k, v)]
    for x in (q, k, v):
        x.grad = None
    (out.sum() + lse.sum()).backward()
    for x, g in zip((q, k, v), alone):
        torch.testing.assert_close(x.grad, g, rtol=0, atol=0)
    with torch.no_grad():
        assert not flashcl.flash_attn_func(q, k, v, return_attn_probs=True)[1].requires_grad


def test_varlen_lse_and_s_dmask_take_part_in_autograd(rng):
    torch = _torch()
    q, k, v = (rand(rng, (5, 2, 8), kind="torch").requires_grad_() for _ in range(3))
    cu = torch.tensor([0, 2, 5], dtype=torch.int32)
    out, lse, s_dmask = flashcl.flash_attn_varlen_func(q, k, v, cu, cu, 3, 3, dropout_p=0.3, return_attn_probs=True)
    assert lse.requires_grad and s_dmask.requires_grad and s_dmask.shape == (2, 2, 3, 3)
    (lse.sum() + s_dmask.sum()).backward()
    for x in (q, k, v):
        assert torch.count_nonzero(x.grad) == 0


def test_paged_varlen_lse_refuses_the_backward_as_out_does(rng):
    torch = _torch()
    q = rand(rng, (3, 2, 8), kind="torch").requires_grad_()
    pool = rand(rng, (2, 4, 2, 8), kind="torch")
    cu_q, cu_k = torch.tensor([0, 3], dtype=torch.int32), torch.tensor([0, 4], dtype=torch.int32)
    _, lse, _ = flashcl.flash_attn_varlen_func(q, pool, pool, cu_q, cu_k, 3, 4, return_attn_probs=True,
                                               block_table=torch.tensor([[1]], dtype=torch.int32))
    assert lse.requires_grad
    with pytest.raises(NotImplementedError, match="no backward"):
        lse.sum().backward()


# --- max_seqlen 0: every sequence empty there, accepted as flash_attn answers it (no kernel) ----------------------

def test_varlen_max_seqlen_zero_is_an_empty_call(rng):
    """flash_attn's varlen forward answers max_seqlen_k == 0 without its kernel (and its backward max_seqlen_q == 0);
    the unpadded call accepts 0 where every sequence is empty there, as the paged one does: out 0, LSE -inf."""
    q, k = rand(rng, (3, 2, 8)), rand(rng, (4, 2, 8))
    table = np.zeros((2, 1), np.int32)
    pool = k.reshape(1, 4, 2, 8)
    for cu_q, cu_k, max_q, max_k in (([0, 1, 3], [0, 0, 0], 2, 0), ([0, 0, 0], [0, 2, 4], 0, 2)):
        cu_q, cu_k = np.array(cu_q, np.int32), np.array(cu_k, np.int32)
        out, lse, _ = flashcl.flash_attn_varlen_func(q, k, k, cu_q, cu_k, max_q, max_k, return_attn_probs=True)
        np.testing.assert_array_equal(out, 0.0)
        np.testing.assert_array_equal(lse, -np.inf)
        paged = flashcl.flash_attn_varlen_func(q, pool, pool, cu_q, np.minimum(cu_k, 0), max_q, 0, block_table=table)
        np.testing.assert_array_equal(paged, out)
    with pytest.raises(ValueError, match=r"sequence 0 has 2 rows, more than max_seqlen_k \(0\)"):
        flashcl.flash_attn_varlen_func(q, k, k, cu_q, cu_k, 2, 0)


def test_varlen_max_seqlen_zero_through_autograd(rng):
    torch = _torch()
    q, k, v = (rand(rng, (3, 2, 8), kind="torch").requires_grad_() for _ in range(3))
    cu_q, cu_k = torch.tensor([0, 3], dtype=torch.int32), torch.tensor([0, 0], dtype=torch.int32)
    out = flashcl.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 3, 0)
    out.sum().backward()
    assert torch.count_nonzero(out) == 0 and all(torch.count_nonzero(x.grad) == 0 for x in (q, k, v))


# --- num_splits < 1 is automatic (flash_attn's set_params_splitkv); dropout_p < 0 stays refused -------------------

def test_negative_num_splits_is_automatic(rng):
    q, k_cache = rand(rng, (1, 1, 2, 8)), rand(rng, (1, 20, 2, 8))
    auto = flashcl.flash_attn_with_kvcache(q, k_cache, k_cache, cache_seqlens=17)
    np.testing.assert_array_equal(flashcl.flash_attn_with_kvcache(q, k_cache, k_cache, cache_seqlens=17,
                                                                  num_splits=-3), auto)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_negative_dropout_is_refused(rng, kind):
    """flash_attn takes dropout_p < 0 without a word: its forward drops nothing (keep probability 1 - p > 1), but its
    backward scales dq, dk by 1 / (1 - p) and D by 1 - p, so the gradients are wrong. FlashCL refuses it."""
    cu = np.array([0, 4], np.int32)
    if kind == "torch":
        cu = _torch().from_numpy(cu)
    q = rand(rng, (1, 4, 2, 8), kind=kind)
    with pytest.raises(ValueError, match=r"dropout_p must be in \[0, 1\), got -0.1"):
        flashcl.flash_attn_func(q, q, q, dropout_p=-0.1)
    with pytest.raises(ValueError, match=r"dropout_p must be in \[0, 1\), got -0.1"):
        flashcl.flash_attn_varlen_func(q[0], q[0], q[0], cu, cu, 4, 4, dropout_p=-0.1)


# --- a negative softmax_scale is legal math, as flash_attn takes it ----------------------------------------------

def test_negative_softmax_scale(rng):
    """flash_attn passes any float scale to its kernel; a negative one attends to the least similar keys."""
    torch = _torch()
    from reference import torch_attention

    q, k, v = (rand(rng, s, kind="torch").requires_grad_() for s in ((1, 5, 2, 8), (1, 7, 1, 8), (1, 7, 1, 8)))
    out = flashcl.flash_attn_func(q, k, v, softmax_scale=-0.6, causal=True)
    out.backward(torch.ones_like(out))
    qq, kk, vv = (x.detach().double().requires_grad_() for x in (q, k, v))
    ref = torch_attention(qq, kk, vv, scale=-0.6, causal=True)
    ref.backward(torch.ones_like(ref))
    for mine, theirs in ((out, ref), (q.grad, qq.grad), (k.grad, kk.grad), (v.grad, vv.grad)):
        assert_close(mine.detach().numpy(), theirs.detach().numpy())


def test_negative_softmax_scale_kvcache(rng):
    q, k_cache, v_cache = rand(rng, (1, 1, 2, 8)), rand(rng, (1, 12, 2, 8)), rand(rng, (1, 12, 2, 8))
    ref, ref_lse = numpy_attention(f64(q), f64(k_cache)[:, :9], f64(v_cache)[:, :9], scale=-2.0)
    out, lse = flashcl.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=9, softmax_scale=-2.0,
                                               return_softmax_lse=True)
    assert_close(out, ref)
    assert_close(lse, ref_lse, what="lse")
