"""torch.compile keeps flashcl::forward / flashcl::backward as single custom-op nodes (no graph break)."""
import pytest

torch = pytest.importorskip("torch")

import flashcl  # noqa: E402


def _block(q, k, v):
    return flashcl.flash_attn_func(q, k, v, causal=True, softcap=3.0).sum()


def test_compile_fullgraph_forward_backward():
    torch.manual_seed(0)
    leaves = [torch.randn(2, 24, 2, 32, requires_grad=True) for _ in range(3)]
    compiled = torch.compile(_block, fullgraph=True, backend="aot_eager")
    loss = compiled(*leaves)
    loss.backward()
    got = [x.grad.clone() for x in leaves]
    for x in leaves:
        x.grad = None
    want = _block(*leaves)
    want.backward()
    assert torch.allclose(loss, want)
    assert all(torch.equal(a, x.grad) for a, x in zip(got, leaves))


def test_compile_one_tensor_in_two_inputs():
    """The usual calls pass one tensor twice (cu_seqlens for q and k, x as q, k and v, the qkvpacked
    varlen form's cu_seqlens); traced, an autograd.Function refuses that, so the package copies the
    repeats: same values and gradients as eager."""
    torch.manual_seed(0)
    cu = torch.tensor([0, 8, 20], dtype=torch.int32)
    x = torch.randn(20, 2, 16, requires_grad=True)
    qkv = torch.randn(20, 3, 2, 16, requires_grad=True)
    calls = [lambda: flashcl.flash_attn_varlen_func(x, x, x, cu, cu, 12, 12, causal=True),
             lambda: flashcl.flash_attn_varlen_qkvpacked_func(qkv, cu, 12)]
    for call in calls:
        compiled = torch.compile(call, fullgraph=True, backend="aot_eager")
        got = compiled()
        got.sum().backward()
        got_grads = [t.grad.clone() for t in (x, qkv) if t.grad is not None]
        x.grad = qkv.grad = None
        want = call()
        want.sum().backward()
        assert torch.equal(got, want)
        want_grads = [t.grad for t in (x, qkv) if t.grad is not None]
        assert len(got_grads) == len(want_grads) == 1
        assert torch.allclose(got_grads[0], want_grads[0], rtol=1e-6, atol=1e-6)
        x.grad = qkv.grad = None


def test_ops_are_registered():
    assert hasattr(torch.ops.flashcl, "forward") and hasattr(torch.ops.flashcl, "backward")
    q = torch.randn(1, 8, 2, 16)
    torch.library.opcheck(torch.ops.flashcl.forward.default,
                          (q, q, q, None, None, None, None, None, None, None, 0, 0, None, True, -1, -1, 0.0, 0.0, -1,
                           0, 0, 0, "flash"))
