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


@pytest.mark.filterwarnings("ignore:`torch.jit.trace:FutureWarning")  # deprecated in torch, still used
def test_jit_trace_records_the_operator():
    """torch.jit.trace sees only what goes through the dispatcher: traced calls use the custom operator
    (eager ones skip it; a trace of those recorded nothing but the output's allocation)."""
    torch.manual_seed(0)

    class Attention(torch.nn.Module):
        def forward(self, x):
            return flashcl.flash_attn_func(x, x, x, causal=True)

    traced = torch.jit.trace(Attention(), (torch.randn(1, 8, 2, 16),), check_trace=False)
    x = torch.randn(1, 8, 2, 16)
    assert torch.equal(traced(x), flashcl.flash_attn_func(x, x, x, causal=True))


def test_shapes_without_data():
    """Meta and fake tensors (model sizing, FakeTensorMode tracing) get outputs of the right shapes from
    the operators' fake kernels, as SDPA gives them."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q, kv = torch.empty(2, 8, 4, 16), torch.empty(2, 11, 2, 16)
        out = flashcl.flash_attn_func(q, kv, kv, causal=True)
    assert out.shape == (2, 8, 4, 16)
    q = torch.empty(2, 8, 4, 16, device="meta", requires_grad=True)
    out = flashcl.flash_attn_func(q, q[:, :, :2], q[:, :, :2])
    assert out.device.type == "meta" and out.shape == (2, 8, 4, 16)


def test_s_dmask_of_shapes_without_data():
    """return_attn_probs with meta or fake tensors: S_dmask, as out and softmax_lse, is a tensor of the right
    shape on the inputs' device. It was a CPU tensor beside meta outputs (the empty one without dropout; the
    CPU also for inputs on any other device), and with dropout the call failed reading the fake kernel's
    rng_state ("Cannot copy out of meta tensor", DataDependentOutputException under FakeTensorMode)."""
    from torch._subclasses.fake_tensor import FakeTensorMode, is_fake

    def calls(device):
        """(S_dmask's shape with dropout, the call) for flash_attn_func and flash_attn_varlen_func."""
        x, cu = torch.empty(10, 4, 16, device=device), torch.tensor([0, 4, 10], dtype=torch.int32, device=device)
        q, k = x.view(2, 5, 4, 16), x[:6].view(2, 3, 4, 16)
        yield (2, 4, 5, 3), lambda **kw: flashcl.flash_attn_func(q, k, k, return_attn_probs=True, **kw)
        yield (2, 4, 7, 9), lambda **kw: flashcl.flash_attn_varlen_func(x, x, x, cu, cu, 7, 9, return_attn_probs=True,
                                                                        **kw)

    for shape, call in calls("meta"):
        for dropout_p, want in ((0.0, (0,)), (0.25, shape)):
            out, lse, s_dmask = call(dropout_p=dropout_p, causal=True)
            assert s_dmask.device.type == "meta" and tuple(s_dmask.shape) == want and s_dmask.dtype == torch.float32
    with FakeTensorMode():
        for shape, call in calls("cpu"):
            out, lse, s_dmask = call(dropout_p=0.25)
            assert is_fake(s_dmask) and tuple(s_dmask.shape) == shape

def test_unsupported_transforms_are_refused():
    """vmap and double backward are refused with a message rather than a raw extension error or a
    second-order gradient silently missing the attention term."""
    x = torch.randn(3, 1, 8, 2, 16)
    with pytest.raises(NotImplementedError, match="torch.func"):
        torch.vmap(lambda t: flashcl.flash_attn_func(t, t, t))(x)
    a = torch.randn(1, 8, 2, 16, requires_grad=True)
    (g,) = torch.autograd.grad(flashcl.flash_attn_func(a, a, a, causal=True).sum(), a, create_graph=True)
    with pytest.raises(RuntimeError, match="not differentiable"):
        g.sum().backward()
    # create_graph=True without differentiating the gradient again is fine, in place too.
    (plain,) = torch.autograd.grad(flashcl.flash_attn_func(a, a, a, causal=True).sum(), a)
    (g,) = torch.autograd.grad(flashcl.flash_attn_func(a, a, a, causal=True).sum(), a, create_graph=True)
    assert torch.equal(g.mul_(2).detach(), plain * 2)


def test_compile_numpy_scalars():
    """Numpy scalars as the scalar arguments (softmax_scale=1 / np.sqrt(d), np.float32 softcap, numpy window
    sizes and varlen bounds, np.bool_ causal): dynamo traces them as tensors of the graph, which reached the
    operators' float arguments and failed fullgraph compilation ("Expected a value of type 'Optional[float]'
    ... found type 'FakeTensor'", data-dependent branching on float()). They now travel as one tensor beside
    the plain arguments: the same values and gradients as eager, and the scalar's value read at each run."""
    import numpy as np

    torch.manual_seed(0)
    d = 16
    cu = torch.tensor([0, 5, 12], dtype=torch.int32)
    x = torch.randn(12, 2, d, requires_grad=True)
    q4 = torch.randn(2, 6, 2, d, requires_grad=True)
    calls = {
        "scale": lambda s: flashcl.flash_attn_func(q4, q4, q4, softmax_scale=s * (1 / np.sqrt(d)), causal=True),
        "float32": lambda s: flashcl.flash_attn_func(q4, q4, q4, softmax_scale=np.float32(s), softcap=np.float32(2.5),
                                                     dropout_p=np.float64(0.0), causal=np.bool_(True)),
        "window": lambda s: flashcl.flash_attn_func(q4, q4, q4, softmax_scale=s,
                                                    window_size=(np.int64(2), np.int32(0))),
        "varlen": lambda s: flashcl.flash_attn_varlen_func(x, x, x, cu, cu, np.int64(7), np.int32(7), softmax_scale=s,
                                                           causal=True),
        "tensor": lambda s: flashcl.flash_attn_func(q4, q4, q4, softmax_scale=torch.as_tensor(s), causal=True),
    }
    for name, call in calls.items():
        torch._dynamo.reset()
        compiled = torch.compile(call, fullgraph=True, backend="aot_eager")
        for s in (np.float32(0.5), np.float64(0.25)):  # a second value: read from the graph's input, not baked in
            got = compiled(s)
            got.sum().backward()
            got_grads = [t.grad.clone() for t in (x, q4) if t.grad is not None]
            x.grad = q4.grad = None
            want = call(float(s))
            want.sum().backward()
            want_grads = [t.grad for t in (x, q4) if t.grad is not None]
            assert torch.equal(got, want), name
            assert len(got_grads) == len(want_grads) == 1
            assert torch.allclose(got_grads[0], want_grads[0], rtol=1e-6, atol=1e-6), name
            x.grad = q4.grad = None


@pytest.mark.filterwarnings("ignore:Dynamo does not know how to trace")  # (the graph break of fullgraph=False)
def test_compile_scalar_errors_name_the_argument():
    """Under torch.compile a non-number is refused while tracing (a TypeError naming it: with fullgraph=True dynamo
    reports it as its own Unsupported, quoting it; without, the call runs eagerly and raises it), and a traced
    numpy value the call refuses (a zero scale, a dropout_p of 1) when the graph runs, naming it as eager does."""
    import numpy as np

    q = torch.randn(1, 8, 2, 16)
    for kwargs, error, match in ((dict(softmax_scale="0.5"), TypeError, "softmax_scale must be a number"),
                                 (dict(window_size=(np.float32(2.0), 0)), TypeError, "window_size entries must be "
                                  "integers"),
                                 (dict(softmax_scale=np.float32(0.0)), ValueError, "softmax_scale must be a finite "
                                  "nonzero number"),
                                 (dict(dropout_p=np.float64(1.0)), ValueError, r"dropout_p must be in \[0, 1\)")):
        torch._dynamo.reset()
        fullgraph = error is ValueError
        compiled = torch.compile(lambda t: flashcl.flash_attn_func(t, t, t, **kwargs), fullgraph=fullgraph,
                                 backend="aot_eager")
        with pytest.raises(error, match=match):
            compiled(q)
        with pytest.raises(error, match=match):
            flashcl.flash_attn_func(q, q, q, **kwargs)


def test_operator_takes_traced_scalars():
    """The operator's schema path (what torch.compile records): traced scalars in the int64 tensor, floats as
    their float64 bits, replace the plain arguments the mask names."""
    q = torch.randn(1, 8, 2, 16)
    plain = (q, q, q, None, None, None, None, None, None, None, 0, 0, None, True, -1, -1, 0.0, 0.0, -1, 0, 0, 0,
             "flash")
    want = torch.ops.flashcl.forward(*plain[:12], 0.3, *plain[13:16], 2.0, *plain[17:])
    traced = torch.zeros(12, dtype=torch.int64)
    traced[2] = torch.tensor(0.3, dtype=torch.float64).view(torch.int64)
    traced[6] = torch.tensor(2.0, dtype=torch.float64).view(torch.int64)
    got = torch.ops.flashcl.forward(*plain, traced, (1 << 2) | (1 << 6))
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    torch.library.opcheck(torch.ops.flashcl.forward.default, plain + (traced, (1 << 2) | (1 << 6)))


def test_compile_dynamic_varlen_bounds_from_shapes():
    """dynamic=True keeps sizes symbolic: max_seqlen_q=q.shape[0] reached the argument checks as a symbolic int,
    on which dynamo cannot trace hasattr (the graph failed). It passes through unchanged, and a second total
    length runs the same graph (no recompile) with the same results as the eager call."""
    from torch._dynamo.utils import counters

    def call(q, k, v, cu):
        return flashcl.flash_attn_varlen_func(q, k, v, cu, cu, q.shape[0], k.shape[0], causal=True)

    compiled = torch.compile(call, dynamic=True, fullgraph=True, backend="aot_eager")
    graphs = None
    for n in (48, 72):
        g = torch.Generator().manual_seed(n)
        q, k, v = (torch.randn(2 * n, h, 16, generator=g) for h in (4, 2, 2))
        cu = torch.tensor([0, n // 3, 2 * n], dtype=torch.int32)
        assert torch.equal(compiled(q, k, v, cu), call(q, k, v, cu))
        if graphs is None:
            graphs = counters["stats"]["unique_graphs"]
    assert counters["stats"]["unique_graphs"] == graphs, "a second total length compiled a new graph"


def test_compile_kvcache_step_without_warnings():
    """The package's own checks must not make dynamo warn on the way to flash_attn_with_kvcache's operator
    (a per-call os.getpid() for the fork check did: "Dynamo does not know how to trace the builtin
    posix.getpid"), and the append must land."""
    import warnings

    torch.manual_seed(0)
    kc, vc = torch.zeros(1, 16, 2, 16), torch.zeros(1, 16, 2, 16)
    q, k, v = (torch.randn(1, 1, 2, 16) for _ in range(3))
    step = torch.compile(lambda q, k, v: flashcl.flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=3),
                         backend="aot_eager")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = step(q, k, v)
    assert not [w for w in caught if "getpid" in str(w.message)]
    assert torch.equal(kc[0, 3], k[0, 0]) and torch.equal(vc[0, 3], v[0, 0])
    want = flashcl.flash_attn_with_kvcache(q, kc.clone(), vc.clone(), cache_seqlens=4)
    assert torch.allclose(out, want)


def test_compile_fullgraph_kvcache_is_one_operator():
    """flash_attn_with_kvcache under torch.compile(fullgraph=True) runs as the flashcl::forward_kvcache
    operator (traced, its checks read cache_seqlens' values: dynamo failed on them with fullgraph=True):
    contiguous and paged caches, rotary, an int or tensor cache_seqlens, the LSE, window and softcap. The
    append lands in the caller's caches, and results and caches equal the eager call's."""
    torch.manual_seed(0)
    b, hq, hkv, d = 2, 4, 2, 32
    lens = torch.tensor([10, 20], dtype=torch.int32)
    q, k = torch.randn(b, 1, hq, d), torch.randn(b, 1, hkv, d)
    v = torch.randn_like(k)
    cos, sin = torch.randn(64, 8), torch.randn(64, 8)
    table = torch.arange(16, dtype=torch.int32).flip(0).reshape(2, 8)
    calls = {
        "contiguous, int cache_seqlens": (dict(cache_seqlens=5, causal=True), (b, 64, hkv, d)),
        "rotary, lse": (dict(cache_seqlens=lens, rotary_cos=cos, rotary_sin=sin, causal=True,
                             return_softmax_lse=True), (b, 64, hkv, d)),
        "paged, window, softcap": (dict(cache_seqlens=lens, block_table=table, window_size=(8, 0), softcap=20.0),
                                   (16, 8, hkv, d)),
        # flags as plain ints, which the eager checks take as their truth value
        "int flags": (dict(cache_seqlens=lens, rotary_cos=cos, rotary_sin=sin, causal=1, rotary_interleaved=0),
                      (b, 64, hkv, d)),
    }
    for name, (kw, shape) in calls.items():
        kc0, vc0 = torch.randn(shape), torch.randn(shape)

        def step(q, kc, vc, k, v):
            return flashcl.flash_attn_with_kvcache(q, kc, vc, k, v, **kw)

        kc, vc = kc0.clone(), vc0.clone()
        got = torch.compile(step, fullgraph=True, backend="aot_eager")(q, kc, vc, k, v)
        kc_eager, vc_eager = kc0.clone(), vc0.clone()
        want = step(q, kc_eager, vc_eager, k, v)
        assert not torch.equal(kc, kc0), name
        assert torch.equal(kc, kc_eager) and torch.equal(vc, vc_eager), name
        got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
        assert len(got) == len(want) and all(torch.equal(a, w) for a, w in zip(got, want)), name


def _kvcache_ops_traced(fn, *args):
    """The flashcl operators in the graph dynamo captures for fn (fullgraph), run through eagerly."""
    seen = []

    def backend(gm, example_inputs):
        seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function" and "flashcl" in str(n.target))
        return gm.forward

    torch.compile(fn, fullgraph=True, backend=backend)(*args)
    return seen


def test_compile_kvcache_operator_choice_and_eager_semantics():
    """An append is the operator that writes the caches; a call without one the operator that does not (a
    declared write makes aot_eager copy both caches per call). Inputs that require grad (q from a Linear in
    a compiled model) give results without a gradient, as eager; values the eager checks refuse are still
    refused under compile (the operator's schema would have coerced them), with the eager message."""
    torch.manual_seed(0)
    kc, vc = torch.randn(2, 16, 2, 32), torch.randn(2, 16, 2, 32)
    q, k = torch.randn(2, 1, 4, 32), torch.randn(2, 1, 2, 32)
    v = torch.randn_like(k)
    append = _kvcache_ops_traced(lambda q: flashcl.flash_attn_with_kvcache(q, kc.clone(), vc.clone(), k, v,
                                                                           cache_seqlens=3), q)
    read = _kvcache_ops_traced(lambda q: flashcl.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=3), q)
    assert append == ["flashcl.forward_kvcache.default"] and read == ["flashcl.forward_kvcache_read.default"]

    lin = torch.nn.Linear(32, 4 * 32)
    x = torch.randn(2, 1, 32)

    def model(x):
        return flashcl.flash_attn_with_kvcache(lin(x).view(2, 1, 4, 32), kc, vc, cache_seqlens=5) * 2

    got = torch.compile(model, fullgraph=True, backend="aot_eager")(x)
    want = model(x)
    assert torch.equal(got, want) and not got.requires_grad and not want.requires_grad

    bad = [(dict(cache_seqlens=-1), "cache_seqlens must be from 0"), (dict(cache_seqlens=3, causal=0.5), "causal"),
           (dict(cache_seqlens=3, window_size=(3.7, 0)), "window_size"), (dict(cache_seqlens=3, num_splits=2.5),
                                                                         "num_splits")]
    for kw, message in bad:
        with pytest.raises(Exception, match=message):
            flashcl.flash_attn_with_kvcache(q, kc, vc, **kw)
        with pytest.raises(Exception, match=message):
            torch.compile(lambda q: flashcl.flash_attn_with_kvcache(q, kc, vc, **kw), backend="aot_eager")(q)


def test_kvcache_operators_pass_opcheck():
    q, kc, vc = torch.randn(1, 1, 2, 16), torch.randn(1, 8, 1, 16), torch.randn(1, 8, 1, 16)
    k, v = torch.randn(1, 1, 1, 16), torch.randn(1, 1, 1, 16)
    seqlens = torch.tensor([3], dtype=torch.int32)
    torch.library.opcheck(torch.ops.flashcl.forward_kvcache.default,
                          (q, kc, vc, k, v, None, None, seqlens, -1, None, None, None, None, None, None, None, True,
                           -1, -1, 0.0, True, 0, True))
    torch.library.opcheck(torch.ops.flashcl.forward_kvcache_read.default,
                          (q, kc, vc, None, None, None, None, None, 5, None, None, None, None, None, None, 0.25, False,
                           -1, -1, 0.0, True, 0, False))
