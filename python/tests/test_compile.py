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


def test_ops_are_registered():
    assert hasattr(torch.ops.flashcl, "forward") and hasattr(torch.ops.flashcl, "backward")
    q = torch.randn(1, 8, 2, 16)
    torch.library.opcheck(torch.ops.flashcl.forward.default,
                          (q, q, q, None, None, None, None, None, None, None, 0, 0, None, True, -1, -1, 0.0, 0.0, -1,
                           0, 0, 0, "flash"))
