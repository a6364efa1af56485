"""Backward through torch.autograd against float64 autograd references (SDPA math backend, and a torch
reference that covers softcap, sinks and varlen), plus the packed forms' packed gradients."""
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import flashcl  # noqa: E402
from conftest import assert_close, rand  # noqa: E402
from reference import per_sequence, torch_attention  # noqa: E402

CASES = {
    "sq_ne_sk_gqa": (2, 37, 53, 4, 2, 32, 32, {}),
    "causal": (2, 37, 53, 4, 2, 32, 32, dict(causal=True)),
    "window": (1, 45, 45, 4, 2, 32, 32, dict(window_size=(8, 4))),
    "softcap": (2, 37, 53, 4, 2, 32, 32, dict(softcap=5.0, softmax_scale=0.5)),
    "alibi": (2, 37, 53, 4, 2, 32, 32, dict(alibi_slopes=True, causal=True)),
    "dv_ne_d": (1, 37, 53, 4, 2, 48, 32, {}),
}


def _run(case, dtype, rng):
    b, sq, sk, hq, hkv, d, dv, kw = CASES[case]
    q, k, v = rand(rng, (b, sq, hq, d), dtype, "torch"), rand(rng, (b, sk, hkv, d), dtype, "torch"), \
        rand(rng, (b, sk, hkv, dv), dtype, "torch")
    kw = dict(kw)
    alibi = None
    if kw.pop("alibi_slopes", False):
        alibi = torch.tensor(0.5 ** (1 + np.arange(hq)), dtype=torch.float32)
        kw["alibi_slopes"] = alibi
    dout = rand(rng, (b, sq, hq, dv), dtype, "torch")
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    out = flashcl.flash_attn_func(*leaves, **kw)
    out.backward(dout)
    ref_kw = dict(scale=kw.get("softmax_scale"), causal=kw.get("causal", False),
                  window=kw.get("window_size", (-1, -1)), softcap=kw.get("softcap", 0.0),
                  alibi=None if alibi is None else alibi.numpy())
    return leaves, out, dout, ref_kw


def _reference_grads(leaves, dout, ref_kw, dtype):
    x64 = [x.detach().double().requires_grad_() for x in leaves]
    ref = torch_attention(*x64, **ref_kw)
    ref.backward(dout.double())
    return ref, [x.grad for x in x64]


@pytest.mark.parametrize("case", list(CASES))
def test_float32(rng, case):
    leaves, out, dout, ref_kw = _run(case, "float32", rng)
    ref, grads = _reference_grads(leaves, dout, ref_kw, "float32")
    assert_close(out, ref)
    for name, x, g in zip("qkv", leaves, grads):
        assert_close(x.grad, g, what="d" + name)


@pytest.mark.parametrize("case", ["sq_ne_sk_gqa", "causal", "softcap", "alibi"])
def test_reference_matches_sdpa(rng, case):
    """The torch float64 reference is itself SDPA's math where SDPA can say it."""
    from reference import alibi_bias, visible

    b, sq, sk, hq, hkv, d, dv, kw = CASES[case]
    if kw.get("softcap"):
        pytest.skip("SDPA has no softcap")
    q, k, v = (torch.from_numpy(rng.standard_normal(s)).requires_grad_()
               for s in ((b, sq, hq, d), (b, sk, hkv, d), (b, sk, hkv, dv)))
    alibi = 0.5 ** (1 + np.arange(hq)) if kw.get("alibi_slopes") else None
    add = np.where(visible(sq, sk, kw.get("causal", False)), 0.0, -np.inf)
    if alibi is not None:
        add = add + alibi_bias(alibi, sq, sk)
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        sdpa = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), enable_gqa=True,
            attn_mask=torch.from_numpy(np.broadcast_to(add, (b, hq, sq, sk)).copy())).transpose(1, 2)
    mine = torch_attention(q, k, v, causal=kw.get("causal", False), alibi=alibi)
    g = torch.from_numpy(rng.standard_normal(sdpa.shape))
    a = torch.autograd.grad(sdpa, (q, k, v), g)
    b_ = torch.autograd.grad(mine, (q, k, v), g)
    assert (sdpa - mine).abs().max() < 1e-12
    assert all((x - y).abs().max() < 1e-11 for x, y in zip(a, b_))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("case", ["sq_ne_sk_gqa", "softcap"])  # each (dtype, variant) is a kernel build: ~10 s cold
def test_storage_types(rng, case, dtype):
    """FlashAttention's criterion: at most twice the error of the same math done in the storage type."""
    leaves, out, dout, ref_kw = _run(case, dtype, rng)
    assert leaves[0].grad.dtype == getattr(torch, dtype)
    ref, grads = _reference_grads(leaves, dout, ref_kw, dtype)
    low = [x.detach().clone().requires_grad_() for x in leaves]
    base = torch_attention(*low, **ref_kw)
    base.backward(dout)
    assert_close(out, ref, dtype, baseline=base)
    for name, x, g, bl in zip("qkv", leaves, grads, low):
        assert_close(x.grad, g, dtype, baseline=bl.grad, what="d" + name)


def test_varlen(rng):
    lens_q, lens_k = [5, 17, 30], [9, 17, 24]
    cu_q = torch.tensor(np.cumsum([0] + lens_q), dtype=torch.int32)
    cu_k = torch.tensor(np.cumsum([0] + lens_k), dtype=torch.int32)
    q = rand(rng, (int(cu_q[-1]), 4, 32), kind="torch").requires_grad_()
    k = rand(rng, (int(cu_k[-1]), 2, 32), kind="torch").requires_grad_()
    v = rand(rng, (int(cu_k[-1]), 2, 32), kind="torch").requires_grad_()
    out = flashcl.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=True,
                                         window_size=(6, -1))
    dout = torch.randn_like(out)
    out.backward(dout)
    for rows_q, rows_k in per_sequence(cu_q.numpy(), cu_k.numpy()):
        x64 = [x.detach()[r].double()[None].requires_grad_() for x, r in ((q, rows_q), (k, rows_k), (v, rows_k))]
        ref = torch_attention(*x64, causal=True, window=(6, -1))
        ref.backward(dout[rows_q].double()[None])
        assert_close(out[rows_q][None], ref)
        for x, r, x_ref in zip((q, k, v), (rows_q, rows_k, rows_k), x64):
            assert_close(x.grad[r][None], x_ref.grad, what="varlen grad")


def test_packed_gradients(rng):
    """qkvpacked returns dqkv packed like qkv, equal to the unpacked call's dq, dk, dv."""
    qkv = rand(rng, (2, 24, 3, 2, 32), kind="torch").requires_grad_()
    out = flashcl.flash_attn_qkvpacked_func(qkv, causal=True)
    dout = torch.randn_like(out)
    out.backward(dout)
    leaves = [qkv.detach()[:, :, i].clone().requires_grad_() for i in range(3)]
    flashcl.flash_attn_func(*leaves, causal=True).backward(dout)
    assert qkv.grad.shape == qkv.shape
    for i in range(3):
        assert torch.equal(qkv.grad[:, :, i], leaves[i].grad)
    q = leaves[0].detach().clone().requires_grad_()
    kv = qkv.detach()[:, :, 1:].clone().requires_grad_()
    flashcl.flash_attn_kvpacked_func(q, kv, causal=True).backward(dout)
    assert torch.equal(q.grad, leaves[0].grad)
    assert torch.equal(kv.grad[:, :, 0], leaves[1].grad) and torch.equal(kv.grad[:, :, 1], leaves[2].grad)


def test_sinks_gradient(rng):
    """flashcl.attention's sinks are differentiable (d(loss)/d(sinks) from the C backward)."""
    q, k, v = (rand(rng, s, kind="torch").requires_grad_() for s in ((1, 20, 4, 32), (1, 30, 2, 32), (1, 30, 2, 32)))
    sinks = torch.tensor([0.5, -1.0, 2.0, 0.0], requires_grad=True)
    out = flashcl.attention(q, k, v, sinks=sinks, causal=True)
    dout = torch.randn_like(out)
    out.backward(dout)
    x64 = [x.detach().double().requires_grad_() for x in (q, k, v, sinks)]
    ref = torch_attention(*x64[:3], causal=True, sinks=x64[3])
    ref.backward(dout.double())
    assert_close(out, ref)
    for x, x_ref in zip((q, k, v, sinks), x64):
        assert_close(x.grad, x_ref.grad, what="grad")


def test_sinks_in_the_model_dtype(rng):
    """bf16 sinks (gpt-oss's s_aux in a bf16 model, as the transformers hook passes them) run as float32
    and get a bf16 gradient: the same numbers as float32 sinks."""
    q, k, v = (rand(rng, s, "bfloat16", kind="torch") for s in ((1, 12, 4, 16), (1, 12, 2, 16), (1, 12, 2, 16)))
    sinks = torch.tensor([0.5, -1.0, 2.0, 0.0], dtype=torch.bfloat16, requires_grad=True)
    sinks32 = sinks.detach().float().requires_grad_()
    out = flashcl.attention(q, k, v, sinks=sinks, causal=True)
    out32 = flashcl.attention(q, k, v, sinks=sinks32, causal=True)
    assert torch.equal(out, out32)
    out.float().sum().backward()
    out32.float().sum().backward()
    assert sinks.grad.dtype == torch.bfloat16
    assert torch.equal(sinks.grad, sinks32.grad.to(torch.bfloat16))
    # flashcl.attention_backward (no autograd) gives the same gradient in the same dtype, torch and numpy alike.
    out, lse = flashcl.attention(q, k, v, sinks=sinks.detach(), causal=True, return_lse=True)
    dout = torch.ones_like(out)
    *_, dsinks = flashcl.attention_backward(dout, q, k, v, out, lse, sinks=sinks.detach(), causal=True)
    assert dsinks.dtype == torch.bfloat16 and torch.equal(dsinks, sinks.grad)
    qn, kn, vn = (x.float().numpy() for x in (q, k, v))
    sinks16 = sinks.detach().float().numpy().astype(np.float16)
    outn, lsen = flashcl.attention(qn, kn, vn, sinks=sinks16, causal=True, return_lse=True)
    *_, dsinks_np = flashcl.attention_backward(np.ones_like(outn), qn, kn, vn, outn, lsen, sinks=sinks16, causal=True)
    assert dsinks_np.dtype == np.float16


def test_varlen_padding_rows_get_zero_gradients(rng):
    """Rows past the last offset (padding) come back zero in out and in every gradient (flash_attn
    leaves them unwritten), LSE -inf; the sequences' rows as without the padding."""
    cu = torch.tensor([0, 7, 15], dtype=torch.int32)
    q, k, v = (rand(rng, (19, 2, 16), kind="torch").requires_grad_() for _ in range(3))
    out, lse, _ = flashcl.flash_attn_varlen_func(q, k, v, cu, cu, 8, 8, causal=True, return_attn_probs=True)
    out.sum().backward()
    assert torch.all(out[15:] == 0) and torch.all(lse[:, 15:] == -math.inf)
    for x in (q, k, v):
        assert torch.all(x.grad[15:] == 0)
    trimmed = [x.detach()[:15].clone().requires_grad_() for x in (q, k, v)]
    out15 = flashcl.flash_attn_varlen_func(*trimmed, cu, cu, 8, 8, causal=True)
    out15.sum().backward()
    assert torch.equal(out[:15], out15)
    for x, t in zip((q, k, v), trimmed):
        assert torch.equal(x.grad[:15], t.grad)


def test_no_gradient_for_bias():
    q = torch.zeros(1, 4, 1, 8, requires_grad=True)
    bias = torch.zeros(1, 1, 4, 4, requires_grad=True)
    with pytest.raises(ValueError, match="bias requires grad"):
        flashcl.attention(q, q, q, bias=bias)


def test_numpy_backward_matches_autograd(rng):
    """attention_backward (no autograd, numpy) gives what autograd gives."""
    q, k, v = (rand(rng, s) for s in ((2, 19, 4, 32), (2, 27, 2, 32), (2, 27, 2, 32)))
    dout = rand(rng, (2, 19, 4, 32))
    out, lse = flashcl.attention(q, k, v, causal=True, return_lse=True)
    dq, dk, dv = flashcl.attention_backward(dout, q, k, v, out, lse, causal=True)
    leaves = [torch.from_numpy(x).requires_grad_() for x in (q, k, v)]
    flashcl.flash_attn_func(*leaves, causal=True).backward(torch.from_numpy(dout))
    for mine, x in zip((dq, dk, dv), leaves):
        assert type(mine) is np.ndarray and np.array_equal(mine, x.grad.numpy())
    assert math.isfinite(float(np.abs(dq).sum()))
