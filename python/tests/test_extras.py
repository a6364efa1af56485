"""FlashCL's own features through flashcl.attention: sinks, bias, boolean mask, block mask, d_v != d,
the standard path; forward against the float64 numpy reference, backward against the torch one."""
import numpy as np
import pytest

import flashcl
from conftest import assert_close, f64, max_err, rand
from reference import numpy_attention


def _torch_cuda():
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()

B, SQ, SK, HQ, HKV, D = 2, 37, 53, 4, 2, 32


def _qkv(rng, kind="numpy", dv=D):
    return rand(rng, (B, SQ, HQ, D), kind=kind), rand(rng, (B, SK, HKV, D), kind=kind), \
        rand(rng, (B, SK, HKV, dv), kind=kind)


def _as(kind, x):
    if kind == "torch":
        import torch

        return torch.from_numpy(np.ascontiguousarray(x))
    return x


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_bias_mask_sinks(rng, kind):
    if kind == "torch":
        pytest.importorskip("torch")
    q, k, v = _qkv(rng, kind)
    bias = rng.standard_normal((1, HQ, SQ, SK)).astype(np.float32)  # broadcast over the batch
    mask = rng.random((B, 1, SQ, SK)) > 0.3  # broadcast over heads
    mask[:, :, 3] = False  # a row that sees nothing: out 0, LSE = its sink
    sinks = np.array([0.5, -1.0, 2.0, 0.0], np.float32)
    out, lse = flashcl.attention(q, k, v, bias=_as(kind, bias), mask=_as(kind, mask), sinks=_as(kind, sinks),
                                 causal=True, return_lse=True)
    ref, ref_lse = numpy_attention(f64(q), f64(k), f64(v), causal=True, bias=bias, mask=mask, sinks=sinks)
    assert_close(out, ref)
    assert_close(lse, ref_lse, what="softmax_lse")
    assert np.all(f64(out)[:, 3] == 0)


def test_mask_as_uint8_and_2d(rng):
    q, k, v = _qkv(rng)
    mask = np.tril(np.ones((SQ, SK), bool), k=SK - SQ)
    a = flashcl.attention(q, k, v, mask=mask)
    b = flashcl.attention(q, k, v, mask=mask.astype(np.uint8))
    c = flashcl.attention(q, k, v, causal=True)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(a, c, atol=1e-6)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_masks_broadcast_over_keys(rng, kind):
    """A mask or bias broadcast over the keys (stride 0 in the last dimension: a per-query mask expanded, as
    SDPA takes it) is materialised as one broadcast over the queries is (it was refused: "mask must be
    contiguous in its last dimension (stride 0)")."""
    if kind == "torch":
        pytest.importorskip("torch")
    q, k, v = _qkv(rng, kind)
    rows = rng.random((B, 1, SQ, 1)) > 0.3
    shift = rng.standard_normal((1, HQ, SQ, 1)).astype(np.float32)
    if kind == "torch":
        mask, bias = (_as(kind, x).expand(x.shape[0], x.shape[1], SQ, SK) for x in (rows, shift))
    else:
        mask, bias = (np.broadcast_to(x, (x.shape[0], x.shape[1], SQ, SK)) for x in (rows, shift))
    out = flashcl.attention(q, k, v, mask=mask, bias=bias, causal=True)
    full_mask, full_bias = np.broadcast_to(rows, (B, 1, SQ, SK)), np.broadcast_to(shift, (1, HQ, SQ, SK))
    ref, _ = numpy_attention(f64(q), f64(k), f64(v), causal=True, bias=full_bias, mask=full_mask)
    assert_close(out, ref)
    assert np.all(f64(out)[~rows[:, 0, :, 0]] == 0)  # the rows the mask hides see nothing


def test_block_mask(rng):
    q, k, v = _qkv(rng)
    bq, bk = 16, 16
    blocks = rng.random((1, HQ, -(-SQ // bq), -(-SK // bk))) > 0.4
    blocks[..., 0] = True
    out = flashcl.attention(q, k, v, block_mask=blocks, block_size=(bq, bk))
    dense = np.repeat(np.repeat(blocks, bq, axis=2), bk, axis=3)[:, :, :SQ, :SK]
    ref, _ = numpy_attention(q, k, v, mask=dense)
    assert_close(out, ref)


def test_dv_ne_d_and_standard_path(rng):
    q, k, v = _qkv(rng, dv=48)
    out = flashcl.attention(q, k, v, causal=True)
    assert out.shape == (B, SQ, HQ, 48)
    ref, _ = numpy_attention(q, k, v, causal=True)
    assert_close(out, ref)
    q, k, v = _qkv(rng)
    assert_close(flashcl.attention(q, k, v, path="standard"), numpy_attention(q, k, v)[0])


def test_backward_with_bias_and_mask(rng):
    torch = pytest.importorskip("torch")
    from reference import torch_attention

    q, k, v = (x.requires_grad_() for x in _qkv(rng, "torch"))
    bias = torch.from_numpy(rng.standard_normal((B, 1, SQ, SK)).astype(np.float32))
    mask = torch.from_numpy(rng.random((1, HQ, SQ, SK)) > 0.2)
    out = flashcl.attention(q, k, v, bias=bias, mask=mask, softcap=3.0)
    dout = torch.randn_like(out)
    out.backward(dout)
    x64 = [x.detach().double().requires_grad_() for x in (q, k, v)]
    ref = torch_attention(*x64, bias=bias.numpy(), mask=mask.numpy(), softcap=3.0)
    ref.backward(dout.double())
    assert_close(out, ref)
    for x, r in zip((q, k, v), x64):
        assert_close(x.grad, r.grad, what="grad")


def test_varlen_with_mask(rng):
    lens = [9, 20]
    cu = np.cumsum([0] + lens).astype(np.int32)
    q, k, v = (rand(rng, (cu[-1], 2, 16)) for _ in range(3))
    mask = rng.random((2, 1, 20, 20)) > 0.3
    mask[:, :, :, 0] = True
    out = flashcl.attention(q, k, v, mask=mask, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=20, max_seqlen_k=20)
    for i in range(2):
        rows = slice(cu[i], cu[i + 1])
        n = lens[i]
        ref, _ = numpy_attention(q[rows][None], k[rows][None], v[rows][None], mask=mask[i:i + 1, :, :n, :n])
        assert_close(out[rows][None], ref)


def test_allow_tf32(rng):
    """allow_tf32 reaches the descriptor: where the plan is not the TF32 tensor-core kernel the
    result is bitwise the exact one; either way it stays within TF32's error of the float64 reference."""
    q, k, v = _qkv(rng)
    out, lse = flashcl.attention(q, k, v, causal=True, allow_tf32=True, return_lse=True)
    exact = flashcl.attention(q, k, v, causal=True)
    ref, ref_lse = numpy_attention(f64(q), f64(k), f64(v), causal=True)
    kernel = flashcl.plan(q, k, v, causal=True, allow_tf32=True)["kernel"]
    if kernel != "flash_fwd_mma":
        np.testing.assert_array_equal(out, exact)
    # Inputs and P rounded to a 10-bit mantissa (2^-11 relative each), float32 accumulation.
    assert max_err(out, ref) <= 4e-3, (kernel, max_err(out, ref))
    assert max_err(lse, ref_lse) <= 4e-3, (kernel, max_err(lse, ref_lse))


def test_allow_tf32_backward(rng):
    """The backward with allow_tf32: bitwise the exact backward where it plans no TF32 kernel, and
    within TF32's error of the float64 reference gradients everywhere."""
    torch = pytest.importorskip("torch")
    from reference import torch_attention

    q, k, v = _qkv(rng)
    out, lse = flashcl.attention(q, k, v, causal=True, allow_tf32=True, return_lse=True)
    dout = rand(rng, out.shape)
    grads = flashcl.attention_backward(dout, q, k, v, out, lse, causal=True, allow_tf32=True)
    kernel = flashcl.plan(q, k, v, backward=True, causal=True, allow_tf32=True)["kernel"]
    if kernel != "flash_bwd_mma":
        exact = flashcl.attention_backward(dout, q, k, v, out, lse, causal=True)
        for g, e in zip(grads, exact):
            np.testing.assert_array_equal(g, e)
    x64 = [torch.from_numpy(f64(x)).requires_grad_() for x in (q, k, v)]
    torch_attention(*x64, causal=True).backward(torch.from_numpy(f64(dout)))
    for g, r in zip(grads, x64):
        # Inputs, P and dS rounded to a 10-bit mantissa (2^-11 relative each), float32 accumulation.
        scale = float(np.abs(r.grad.numpy()).max())
        assert max_err(g, r.grad) <= 1e-2 * scale, (kernel, max_err(g, r.grad), scale)


@pytest.mark.parametrize("allow", [False, True])
def test_allow_tf32_reaches_the_library_through_autograd(rng, monkeypatch, allow):
    """With torch tensors the forward and the autograd backward run through flashcl's operators: the
    opt-in must reach both library calls (what decides the TF32 kernels on a GPU)."""
    torch = pytest.importorskip("torch")
    from flashcl import _core

    seen = []
    forward, backward = _core.forward, _core.backward

    def spy_forward(q, k, v, spec, *args, **kwargs):
        seen.append(("forward", spec.allow_tf32))
        return forward(q, k, v, spec, *args, **kwargs)

    def spy_backward(dout, q, k, v, out, lse, spec, *args, **kwargs):
        seen.append(("backward", spec.allow_tf32))
        return backward(dout, q, k, v, out, lse, spec, *args, **kwargs)

    monkeypatch.setattr(_core, "forward", spy_forward)
    monkeypatch.setattr(_core, "backward", spy_backward)
    q, k, v = (x.requires_grad_() for x in _qkv(rng, "torch"))
    flashcl.attention(q, k, v, causal=True, allow_tf32=allow).sum().backward()
    assert seen == [("forward", allow), ("backward", allow)]


def test_results_go_back_to_the_inputs_device():
    """merge_states, attention_backward and dropout_mask compute in host memory; like the attention calls, they
    return tensors on the device of their inputs (checked with the meta device, which any tensor can move to)."""
    torch = pytest.importorskip("torch")
    from flashcl import _arrays
    like = torch.empty(1, device="meta")
    moved = _arrays.to_device_of(like, torch.ones(2), None)
    assert moved[0].device.type == "meta" and moved[1] is None
    kept = torch.ones(2)
    assert _arrays.to_device_of(torch.ones(1), kept)[0] is kept
    assert _arrays.to_device_of(np.ones(1), kept)[0] is kept


@pytest.mark.skipif(not _torch_cuda(), reason="needs torch with a CUDA device")
def test_extras_on_cuda_tensors_return_cuda_tensors():
    import torch
    q, k, v = (torch.randn(1, 8, 2, 16, device="cuda") for _ in range(3))
    out, lse, _ = flashcl.flash_attn_func(q, k, v, return_attn_probs=True)
    dq, dk, dv = flashcl.attention_backward(torch.ones_like(out), q, k, v, out, lse)
    keep = flashcl.dropout_mask(q, k, 0.5, 1)
    merged, merged_lse = flashcl.merge_states([out, out], [lse, lse])
    for x in (out, dq, dk, dv, keep, merged, merged_lse):
        assert x.device.type == "cuda"


@pytest.mark.skipif(not _torch_cuda(), reason="needs torch with a CUDA device")
def test_attn_probs_with_dropout_and_cuda_alibi_slopes():
    # S_dmask is computed from host copies of q and k; the ALiBi slopes must come along (they stayed on the GPU).
    import torch
    q, k, v = (torch.randn(1, 6, 2, 16, device="cuda") for _ in range(3))
    slopes = torch.tensor([0.5, 0.25], device="cuda")
    out, lse, s_dmask = flashcl.flash_attn_func(q, k, v, dropout_p=0.25, alibi_slopes=slopes, return_attn_probs=True)
    assert s_dmask.device.type == "cuda" and s_dmask.shape == (1, 2, 6, 6)
    qd, kd = q.double().cpu(), k.double().cpu()
    s = torch.einsum("bihd,bjhd->bhij", qd, kd) / 4.0
    dist = (torch.arange(6)[:, None] - torch.arange(6)[None, :]).abs().double()
    s = s - slopes.double().cpu()[None, :, None, None] * dist
    torch.testing.assert_close(s_dmask.abs().cpu().double(), torch.softmax(s, -1), atol=1e-5, rtol=1e-4)
