"""Bad arguments raise before anything runs: ValueError from the package's own checks, flashcl's
InvalidArgumentError (a ValueError carrying the status name) with the library's message naming the field."""
import numpy as np
import pytest

import flashcl
from flashcl import _core, _flashcl
from conftest import rand


def qkv(rng, b=1, sq=8, sk=8, hq=2, hkv=2, d=16, dtype="float32"):
    return rand(rng, (b, sq, hq, d), dtype), rand(rng, (b, sk, hkv, d), dtype), rand(rng, (b, sk, hkv, d), dtype)


@pytest.mark.parametrize("bad, match", [
    (lambda q, k, v: (q.astype(np.float64), k, v), "q has dtype float64; FlashCL stores float32, float16 or bfloat16"),
    (lambda q, k, v: (q, k.astype(np.float16), v), "q, k and v must have one dtype: q is float32, k is float16"),
    (lambda q, k, v: (q[0], k, v), r"q must be \(batch, seqlen, heads, head_dim\), got shape \(8, 2, 16\)"),
    (lambda q, k, v: (q, np.concatenate([k, k]), v), "k has batch 2, q has 1"),
    (lambda q, k, v: (q, k[..., :8], v), "k's head_dim is 8, q's is 16"),
    (lambda q, k, v: (q, k, v[:, :5]), r"v has shape \(1, 5, 2, 16\), k \(1, 8, 2, 16\)"),
    (lambda q, k, v: (q, k, list(v)), "v must be a numpy array or a torch tensor, not list"),
    (lambda q, k, v: (q[..., :0], k[..., :0], v[..., :0]), "head_dim must be >= 1: q's is 0, v's 0"),
])
def test_package_checks(rng, bad, match):
    with pytest.raises(ValueError, match=match):
        flashcl.flash_attn_func(*bad(*qkv(rng)))


def test_layout_checks(rng):
    """Inputs with a strided last dimension or a negative stride are copied, as flash_attn's maybe_contiguous
    copies them (they were refused), and give the packed copies' result; a cache the call writes in place is
    still refused by name, since a copy would take the appended rows."""
    q, k, v = qkv(rng, d=32)
    packed = [np.ascontiguousarray(x[..., ::2]) for x in (q, k, v)]
    np.testing.assert_array_equal(flashcl.flash_attn_func(q[..., ::2], k[..., ::2], v[..., ::2]),
                                  flashcl.flash_attn_func(*packed))
    np.testing.assert_array_equal(flashcl.flash_attn_func(q, k[:, ::-1], v),
                                  flashcl.flash_attn_func(q, np.ascontiguousarray(k[:, ::-1]), v))
    dq, dk, dv = flashcl.attention_backward(q[..., ::2], *packed, packed[0], np.zeros((1, 2, 8), np.float32))
    want = flashcl.attention_backward(packed[0], *packed, packed[0], np.zeros((1, 2, 8), np.float32))
    for got, ref in zip((dq, dk, dv), want):
        np.testing.assert_array_equal(got, ref)
    cache = np.zeros((1, 16, 2, 64), np.float32)
    for name, kc, vc in (("k_cache", cache[..., ::2], cache[..., :32].copy()),
                         ("v_cache", cache[..., :32].copy(), cache[..., ::2])):
        with pytest.raises(ValueError, match=f"{name} must be contiguous in its last dimension"):
            flashcl.flash_attn_with_kvcache(q[:, :1], kc, vc, k=k[:, :1], v=v[:, :1], cache_seqlens=3)
    # any other strides are fine: a transposed (b, h, s, d) array seen as (b, s, h, d)
    qt = np.ascontiguousarray(q.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
    np.testing.assert_array_equal(flashcl.flash_attn_func(qt, k, v), flashcl.flash_attn_func(q, k, v))


def test_rows_broadcast_along_the_sequence_are_copied(rng):
    """Inputs whose rows overlap (a zero row stride: numpy's broadcast_to, torch's expand, with or without the
    batch and heads broadcast too) are read-only, so they are copied packed first, as flash_attn reads them in
    place: the result is bit for bit the packed array's. The library itself refuses such views by name."""
    q, k, v = qkv(rng, b=2)
    for one_key in (np.broadcast_to(k[:1, :1, :1], k.shape), np.broadcast_to(k[:1, :1], k.shape)):
        packed = np.ascontiguousarray(one_key)
        assert np.array_equal(flashcl.flash_attn_func(q, one_key, v), flashcl.flash_attn_func(q, packed, v))
    cu = np.array([0, 8], np.int32)
    one_value = np.broadcast_to(v[0, :1], v[0].shape)
    assert np.array_equal(flashcl.flash_attn_varlen_func(q[0], k[0], one_value, cu, cu, 8, 8),
                          flashcl.flash_attn_varlen_func(q[0], k[0], np.ascontiguousarray(one_value), cu, cu, 8, 8))
    parts = np.stack([q, q, q], axis=2)  # (b, s, 3, h, d): the sequence is not third from the end here
    one_row = np.broadcast_to(parts[:, :1], parts.shape)
    assert np.array_equal(flashcl.flash_attn_qkvpacked_func(one_row),
                          flashcl.flash_attn_qkvpacked_func(np.ascontiguousarray(one_row)))
    one_query = np.broadcast_to(q[:1, :1, :1], q.shape)
    assert np.array_equal(flashcl.flash_attn_with_kvcache(one_query, k, v),
                          flashcl.flash_attn_with_kvcache(np.ascontiguousarray(one_query), k, v))
    torch = pytest.importorskip("torch")
    base = torch.from_numpy(k[:1, :1].copy()).requires_grad_()
    out = flashcl.flash_attn_func(torch.from_numpy(q), base.expand(k.shape), torch.from_numpy(v))
    assert torch.equal(out, torch.from_numpy(flashcl.flash_attn_func(q, np.broadcast_to(k[:1, :1], k.shape), v)))
    out.sum().backward()  # the gradient reaches the expanded tensor's base, summed over its copies
    assert base.grad is not None and base.grad.shape == base.shape and bool(torch.isfinite(base.grad).all())


def test_library_checks_name_the_field(rng):
    q, k, v = qkv(rng, hq=6, hkv=4)
    with pytest.raises(flashcl.InvalidArgumentError) as e:
        flashcl.flash_attn_func(q, k, v)
    assert e.value.name == "FLASHCL_ERR_INVALID_HEADS" and e.value.status == -10004
    assert "heads_kv (4) must divide heads_q (6)" in str(e.value)
    assert isinstance(e.value, ValueError) and isinstance(e.value, flashcl.Error)
    q, k, v = qkv(rng, d=600)
    with pytest.raises(flashcl.Error, match="head_dim") as e:
        flashcl.flash_attn_func(q, k, v)
    assert e.value.name == "FLASHCL_ERR_INVALID_HEAD_DIM"


@pytest.mark.parametrize("kwargs, match", [
    (dict(softmax_scale=0.0), "softmax_scale must be a finite nonzero number, got 0.0"),
    (dict(softmax_scale=float("nan")), "softmax_scale must be a finite nonzero number, got nan"),
    (dict(dropout_p=1.0), r"dropout_p must be in \[0, 1\)"),
    (dict(window_size=(2**31, 0)), r"window_size entries must be 32-bit integers"),
    (dict(window_size=(1.5, 2)), r"window_size entries must be integers, got \(1.5, 2\)"),
    (dict(window_size=(True, 0)), "window_size entries must be integers"),
    (dict(window_size=None), r"window_size must be a pair \(left, right\), got None"),
    (dict(window_size=(1, 2, 3)), "window_size must be a pair"),
    (dict(softcap=1e38), r"softcap \(1e\+38\) must be a number up to 1e37 \(0 or less turns it off"),
    (dict(softcap=1e300), r"softcap \(1e\+300\) must be a number up to 1e37"),
    (dict(softcap=float("nan")), r"softcap \(nan\) must be a number up to 1e37"),
    (dict(dropout_p=0.99999999), r"dropout_p \(0.99999999\) rounds to 1 in float32 .* the largest float32 below 1 is "
                                 r"0.99999994"),
    (dict(softcap=1e-300), r"softcap \(1e-300\) rounds to 0 in float32, which would turn the softcap off"),
    (dict(softmax_scale=1e300), r"softmax_scale \(1e\+300\) is beyond 2.35e\+38: the kernels scale by it times "
                                r"log2\(e\)"),
    (dict(softmax_scale=-3e38), r"softmax_scale \(-3e\+38\) is beyond 2.35e\+38"),
    (dict(alibi_slopes=np.zeros(3, np.float32)), r"alibi_slopes must be \(2,\) or \(1, 2\)"),
    (dict(alibi_slopes=np.zeros(2, np.float64)), "alibi_slopes has dtype float64, expected float32"),
])
def test_bad_variant_arguments(rng, kwargs, match):
    with pytest.raises(ValueError, match=match):
        flashcl.flash_attn_func(*qkv(rng), **kwargs)


def test_sinks_that_would_make_rows_nan(rng):
    """+inf or NaN sinks are refused where their values are at hand (the library reads them on the device
    only); -inf is a head without a sink and stays valid."""
    q, k, v = qkv(rng)
    for sinks, match in ((np.array([0.0, np.inf], np.float32), "got inf at head 1"),
                         (np.array([np.nan, 0.0], np.float32), "got nan at head 0")):
        with pytest.raises(ValueError, match=r"sinks must be finite or -inf \(no sink\), " + match):
            flashcl.attention(q, k, v, sinks=sinks)
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match="got inf at head 0"):
        flashcl.attention(*(torch.from_numpy(x) for x in (q, k, v)), sinks=torch.tensor([np.inf, 0.0]))
    out = flashcl.attention(q, k, v, sinks=np.array([-np.inf, -np.inf], np.float32))
    np.testing.assert_allclose(out, flashcl.attention(q, k, v), rtol=0, atol=1e-6)


def test_scale_below_float32_attends_uniformly(rng):
    """A softmax_scale that rounds to 0 in float32 attends uniformly, as flash_attn's float32 zero does; it
    must not become the descriptor's 0, which means the default 1/sqrt(head_dim)."""
    q, k, v = qkv(rng)
    for scale in (1e-300, -1e-300, 1e-46):
        out = flashcl.flash_attn_func(q, k, v, softmax_scale=scale)
        np.testing.assert_allclose(out, np.broadcast_to(v.mean(axis=1, keepdims=True), out.shape), atol=1e-6)


def test_negative_window_and_softcap_mean_off(rng):
    """As flash_attn reads them: any negative window side is unbounded, a softcap <= 0 is off."""
    q, k, v = qkv(rng)
    base = flashcl.flash_attn_func(q, k, v, window_size=(-1, 0))
    np.testing.assert_array_equal(flashcl.flash_attn_func(q, k, v, window_size=(-7, 0)), base)
    np.testing.assert_array_equal(flashcl.flash_attn_func(q, k, v, softcap=-3.0), flashcl.flash_attn_func(q, k, v))


def test_bad_extras(rng):
    q, k, v = qkv(rng)
    with pytest.raises(ValueError, match=r"mask must be \(1, 2 or 1, 8, 8\)"):
        flashcl.attention(q, k, v, mask=np.ones((1, 1, 8, 9), bool))
    with pytest.raises(ValueError, match="bias has dtype float16, expected float32"):
        flashcl.attention(q, k, v, bias=np.zeros((8, 8), np.float16))
    with pytest.raises(ValueError, match="block_mask needs block_size"):
        flashcl.attention(q, k, v, block_mask=np.ones((1, 1, 1, 1), bool))
    with pytest.raises(ValueError, match="block_size only applies with block_mask, got 'abc'"):
        flashcl.attention(q, k, v, block_size="abc")  # the CLI's --block-size without a mask exits 2 too
    with pytest.raises(ValueError, match="sinks must be"):
        flashcl.attention(q, k, v, sinks=np.zeros(3, np.float32))


def test_varlen_checks(rng):
    q, k, v = (rand(rng, (10, 2, 16)) for _ in range(3))
    cu = np.array([0, 4, 10], np.int32)
    with pytest.raises(ValueError, match="cu_seqlens_q has dtype int64, expected int32"):
        flashcl.flash_attn_varlen_func(q, k, v, cu.astype(np.int64), cu, 6, 6)
    with pytest.raises(ValueError, match=r"q must be \(total, heads, head_dim\)"):
        flashcl.flash_attn_varlen_func(q[None], k, v, cu, cu, 6, 6)
    with pytest.raises(ValueError, match="cu_seqlens_k has shape"):
        flashcl.flash_attn_varlen_func(q, k, v, cu, cu[:2], 6, 6)
    with pytest.raises(ValueError, match=r"k must be \(num_blocks, page_block_size, nheads_k, headdim\) with"):
        flashcl.flash_attn_varlen_func(q, k, v, cu, cu, 6, 6, block_table=cu[None])  # (block_table: not pages)
    # Offsets: from 0 to the packed rows, never decreasing, no sequence above max_seqlen (else rows
    # would come back unwritten, or a bias/mask be read past its rows).
    with pytest.raises(ValueError, match="cu_seqlens_q must run from 0 to at most the 10 packed rows, got 2 ... 10"):
        flashcl.flash_attn_varlen_func(q, k, v, np.array([2, 4, 10], np.int32), cu, 6, 6)
    with pytest.raises(ValueError, match="cu_seqlens_k must run from 0 to at most the 10 packed rows, got 0 ... 11"):
        flashcl.flash_attn_varlen_func(q, k, v, cu, np.array([0, 5, 11], np.int32), 6, 6)
    # Padding rows past the last offset are allowed, as flash_attn does (and come back zero).
    out = flashcl.flash_attn_varlen_func(q, k, v, np.array([0, 4, 9], np.int32), cu, 6, 6)
    ref = flashcl.flash_attn_varlen_func(q[:9], k, v, np.array([0, 4, 9], np.int32), cu, 6, 6)
    np.testing.assert_array_equal(out[:9], ref)
    assert np.all(out[9:] == 0)
    # max_seqlen above the packed totals is taken as the totals (flash_attn only sizes its grid
    # with it; callers pass a model's maximum to small batches).
    np.testing.assert_array_equal(flashcl.flash_attn_varlen_func(q, k, v, cu, cu, 4096, 11),
                                  flashcl.flash_attn_varlen_func(q, k, v, cu, cu, 10, 10))
    # Score-shaped arrays keep the caller's bounds: a bias for max_seqlen 16 is taken (as its view
    # of the totals' size), and the dropout mask comes back at 16 x 16, zeros past the totals.
    bias = rng.standard_normal((1, 1, 16, 16)).astype(np.float32)
    kw = dict(cu_seqlens_q=cu, cu_seqlens_k=cu)
    np.testing.assert_array_equal(flashcl.attention(q, k, v, max_seqlen_q=16, max_seqlen_k=16, bias=bias, **kw),
                                  flashcl.attention(q, k, v, max_seqlen_q=10, max_seqlen_k=10,
                                                    bias=bias[:, :, :10, :10].copy(), **kw))
    keep = flashcl.dropout_mask(q, k, 0.3, 5, max_seqlen_q=16, max_seqlen_k=16, **kw)
    assert keep.shape == (2, 2, 16, 16) and not keep[:, :, 10:].any() and not keep[..., 10:].any()
    np.testing.assert_array_equal(keep[:, :, :10, :10],
                                  flashcl.dropout_mask(q, k, 0.3, 5, max_seqlen_q=10, max_seqlen_k=10, **kw))
    with pytest.raises(ValueError, match=r"bias must be \(2 or 1, 2 or 1, 16, 16\) \(or \(10, 10\): max_seqlen capped"):
        flashcl.attention(q, k, v, max_seqlen_q=16, max_seqlen_k=16, bias=bias[:, :, :12, :12], **kw)
    with pytest.raises(ValueError, match="cu_seqlens_q must not decrease"):
        flashcl.flash_attn_varlen_func(q, k, v, np.array([0, 8, 4, 10], np.int32), np.array([0, 4, 8, 10], np.int32),
                                       8, 8)
    with pytest.raises(ValueError, match=r"cu_seqlens_q: sequence 1 has 6 rows, more than max_seqlen_q \(5\)"):
        flashcl.attention(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=5, max_seqlen_k=6,
                          mask=np.ones((1, 1, 5, 6), bool))


def test_nothing_written_on_error(rng):
    """A call the library rejects leaves its outputs as they were."""
    q, k, v = qkv(rng, hq=2, hkv=2)
    spec = _core.Spec(causal=True)
    p, desc = _core.prepare(q, k, v, spec)
    out = np.full(p.out_shape(), 7.0, np.float32)
    lse = np.full(p.lse_shape(), 7.0, np.float32)
    desc.heads_kv = 3  # what the arrays do not say: the library must refuse it
    with pytest.raises(flashcl.InvalidArgumentError, match="heads_kv"):
        flashcl.current_context()._c.forward(desc, q, k, v, out, lse)
    assert np.all(out == 7.0) and np.all(lse == 7.0)
    o, l = flashcl.attention(q, k, v, causal=True, return_lse=True)
    dq, dk, dv = (np.full_like(x, 7.0) for x in (q, k, v))
    spec = _core.Spec(causal=True, softmax_scale=0.0)
    with pytest.raises(ValueError, match="softmax_scale"):
        _core.backward(o, q, k, v, o, l, spec, dq, dk, dv)
    desc.heads_kv = 2
    desc.head_dim = 17
    with pytest.raises(flashcl.Error):
        flashcl.current_context()._c.backward(desc, q, k, v, o, o, l, dq, dk, dv)
    assert all(np.all(x == 7.0) for x in (dq, dk, dv))


def test_torch_checks(rng):
    torch = pytest.importorskip("torch")
    q = torch.zeros(1, 8, 2, 16)
    with pytest.raises(ValueError, match="mixed array kinds: q are torch tensors, k, v are not"):
        flashcl.flash_attn_func(q, np.zeros((1, 8, 2, 16), np.float32), np.zeros((1, 8, 2, 16), np.float32))
    with pytest.raises(ValueError, match="q has dtype float64"):
        flashcl.flash_attn_func(q.double(), q, q)
    # A strided last dimension is copied (flash_attn's maybe_contiguous), and the gradient reaches the view's base.
    base = torch.randn(1, 8, 2, 32, requires_grad=True)
    out = flashcl.flash_attn_func(base[..., ::2], base[..., 1::2], base[..., ::2])
    packed = (base.detach()[..., i::2].contiguous() for i in (0, 1, 0))
    torch.testing.assert_close(out, flashcl.flash_attn_func(*packed), rtol=0, atol=0)
    out.sum().backward()
    assert base.grad.shape == base.shape and torch.isfinite(base.grad).all() and base.grad.abs().sum() > 0
    meta = torch.empty(1, 8, 2, 16, device="meta")  # no data: shapes only, as SDPA gives them
    out = flashcl.flash_attn_func(meta, meta, meta)
    assert out.device.type == "meta" and out.shape == (1, 8, 2, 16)
    with pytest.raises(ValueError, match=r"q is a torch.sparse_coo tensor; FlashCL takes dense \(torch.strided\)"):
        flashcl.flash_attn_func(q.to_sparse(), q, q)
    assert _flashcl.status_name(-10004) == "FLASHCL_ERR_INVALID_HEADS"


def test_torch_checks_match_numpy():
    """The torch operators take the scalars as flat ints: the same checks run before they are flattened."""
    torch = pytest.importorskip("torch")
    q = torch.zeros(1, 8, 2, 16)
    for window, match in (((1.5, 2), "window_size entries must be integers"),
                          ((True, False), "window_size entries must be integers"),
                          ((3,), r"window_size must be a pair \(left, right\)")):
        with pytest.raises(ValueError, match=match):
            flashcl.flash_attn_func(q, q, q, window_size=window)
    cu = torch.tensor([0, 8], dtype=torch.int32)
    q3 = torch.zeros(8, 2, 16)
    with pytest.raises(ValueError, match=r"max_seqlen_q must be an integer >= 0 \(the longest sequence\)"):
        flashcl.flash_attn_varlen_func(q3, q3, q3, cu, cu, -1, 8)
    flashcl.flash_attn_varlen_func(q3, q3, q3, cu, cu, torch.tensor(8), 8)  # a 0-d integer tensor is an integer


def test_packed_shapes_are_named(rng):
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match=r"qkv must be \(batch, seqlen, 3, heads, head_dim\), got shape \(1, 8, 4, 2, 16\)"):
        flashcl.flash_attn_qkvpacked_func(torch.zeros(1, 8, 4, 2, 16))
    with pytest.raises(ValueError, match=r"qkv must be \(batch, seqlen, 3, heads, head_dim\), got shape \(1, 8, 2, 2, 16\)"):
        flashcl.flash_attn_qkvpacked_func(np.zeros((1, 8, 2, 2, 16), np.float32))
    with pytest.raises(ValueError, match=r"kv must be \(batch, seqlen, 2, heads, head_dim\)"):
        flashcl.flash_attn_kvpacked_func(torch.zeros(1, 8, 2, 16), torch.zeros(1, 8, 3, 2, 16))
    cu = torch.tensor([0, 8], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"qkv must be \(total, 3, heads, head_dim\), got shape \(8, 2, 2, 16\)"):
        flashcl.flash_attn_varlen_qkvpacked_func(torch.zeros(8, 2, 2, 16), cu, 8)


@pytest.mark.parametrize("seed, offset", [(2**64, 0), (1.5, 0), (-1, 0), (True, 0), (1, -3), (1, 2**63)])
def test_dropout_seed_and_offset_are_checked(rng, seed, offset):
    q, k, _ = qkv(rng)
    name = "dropout_seed" if offset == 0 else "dropout_offset"
    with pytest.raises(ValueError, match=rf"{name} must be an integer in \[0, 2\*\*63\)"):
        flashcl.dropout_mask(q, k, 0.5, seed, offset)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_scalar_arguments_are_named(rng, kind):
    """softmax_scale, softcap, dropout_p and block_size that are not numbers raise a ValueError naming them on
    both paths (the torch path took dropout_p="0.1" as 0.1 and block_size (2.5, 2) as (2, 2) through float()
    and int(), where numpy raised a TypeError naming nothing)."""
    q, k, v = qkv(rng)
    block_mask = np.ones((1, 1, 2, 2), bool)
    if kind == "torch":
        torch = pytest.importorskip("torch")
        q, k, v, block_mask = (torch.from_numpy(x) for x in (q, k, v, block_mask))
    for kwargs, match in ((dict(softmax_scale="0.5"), "softmax_scale must be a number, got '0.5'"),
                          (dict(softmax_scale=[0.5]), r"softmax_scale must be a number, got \[0.5\]"),
                          (dict(softcap="x"), "softcap must be a number, got 'x'"),
                          (dict(dropout_p="0.1"), "dropout_p must be a number, got '0.1'"),
                          (dict(dropout_p=[0.1]), "dropout_p must be a number"),
                          (dict(dropout_p=float("nan")), r"dropout_p must be in \[0, 1\), got nan")):
        with pytest.raises(ValueError, match=match):
            flashcl.flash_attn_func(q, k, v, **kwargs)
    with pytest.raises(ValueError, match="softcap must be a number"):
        flashcl.flash_attn_with_kvcache(q, k, v, cache_seqlens=4, softcap="x")
    with pytest.raises(ValueError, match="block_mask needs block_size"):
        flashcl.attention(q, k, v, block_mask=block_mask)
    for size in ((2.5, 2), 4, (4, 4, 4)):
        with pytest.raises(ValueError, match="block_size must be a pair of integers"):
            flashcl.attention(q, k, v, block_mask=block_mask, block_size=size)
    # numbers of any kind still pass: numpy scalars, 0-d tensors, None meaning the default
    out = flashcl.flash_attn_func(q, k, v, softmax_scale=np.float32(0.25), softcap=np.float64(0), dropout_p=None)
    assert out.shape == q.shape


def test_feature_arrays_of_other_dtypes_and_byte_orders(rng):
    """A numpy feature array in non-native byte order (from a big-endian file) is read by its values, and
    one of a dtype that is no plain number is refused naming it: both failed in the extension's argument
    conversion with a TypeError naming neither the argument nor the problem. q in another byte order is
    refused saying so (its dtype printed as >f4 read like float32)."""
    from reference import numpy_attention

    q, k, v = qkv(rng, b=2, sq=6, sk=9)
    swapped = np.dtype(np.float32).newbyteorder("S")
    slopes = np.array([0.5, 0.25], np.float32)
    out = flashcl.flash_attn_func(q, k, v, alibi_slopes=slopes.astype(swapped), causal=True)
    np.testing.assert_array_equal(out, flashcl.flash_attn_func(q, k, v, alibi_slopes=slopes, causal=True))
    sinks, bias = np.array([0.3, -1.0], np.float32), rng.standard_normal((1, 2, 6, 9)).astype(np.float32)
    out = flashcl.attention(q, k, v, sinks=sinks.astype(swapped), bias=bias.astype(swapped))
    ref, _ = numpy_attention(q, k, v, sinks=sinks, bias=bias)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=2e-5)
    cu = np.array([0, 4, 10], np.int32)
    qv, kv, vv = (x.reshape(-1, 2, 16)[:10] for x in (q, k, v))
    args = (cu.astype(cu.dtype.newbyteorder("S")),) * 2 + (6, 6)
    np.testing.assert_array_equal(flashcl.flash_attn_varlen_func(qv, kv, vv, *args, causal=True),
                                  flashcl.flash_attn_varlen_func(qv, kv, vv, cu, cu, 6, 6, causal=True))
    np.testing.assert_array_equal(flashcl.dropout_mask(qv, kv, 0.5, 7, cu_seqlens_q=args[0], cu_seqlens_k=args[1],
                                                       max_seqlen_q=6, max_seqlen_k=6),
                                  flashcl.dropout_mask(qv, kv, 0.5, 7, cu_seqlens_q=cu, cu_seqlens_k=cu,
                                                       max_seqlen_q=6, max_seqlen_k=6))
    kc, vc = rand(rng, (2, 12, 2, 16), "float32"), rand(rng, (2, 12, 2, 16), "float32")
    out = flashcl.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=5, alibi_slopes=slopes.astype(swapped))
    np.testing.assert_array_equal(out, flashcl.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=5,
                                                                       alibi_slopes=slopes))
    for dtype in (object, "U3", "datetime64[s]", np.complex64, [("a", "f4")]):
        with pytest.raises(ValueError, match=r"alibi_slopes has dtype .*, expected float32"):
            flashcl.flash_attn_func(q, k, v, alibi_slopes=np.zeros(2, dtype))
    with pytest.raises(ValueError, match=r"mask has dtype <U1, expected bool or uint8"):
        flashcl.attention(q, k, v, mask=np.full((1, 1, 6, 9), "a"))
    with pytest.raises(ValueError, match=r"cu_seqlens_q has dtype object, expected int32"):
        flashcl.flash_attn_varlen_func(qv, kv, vv, cu.astype(object), cu, 6, 6)
    with pytest.raises(ValueError, match=r"q has dtype >f4; .* \(in non-native byte order: pass q.astype"):
        flashcl.flash_attn_func(q.astype(swapped), k, v)


def test_calls_without_fake_kernels_refuse_meta_and_fake_tensors_by_name():
    """The KV cache (its fp8 scales too), paged varlen, merge_states, attention_backward, dropout_mask and plan
    have no fake kernel: meta and fake (FakeTensorMode) tensors are refused naming the argument. Before, a fake
    tensor reached the extension (torch's warning about a fake data pointer printed, then CL_INVALID_HOST_PTR
    or a NULL-pointer status), and a meta one failed in a host copy ("Cannot copy out of meta tensor") naming
    nothing (a meta k_scale still does without the fix)."""
    import warnings

    torch = pytest.importorskip("torch")
    from torch._subclasses.fake_tensor import FakeTensorMode

    def calls(make):
        x, lse, cu = make(2, 3, 2, 16), make(2, 2, 3), torch.tensor([0, 2, 3], dtype=torch.int32)
        yield "q", lambda: flashcl.flash_attn_with_kvcache(x, make(2, 8, 2, 16), make(2, 8, 2, 16), cache_seqlens=3)
        yield "k_scale", lambda: flashcl.flash_attn_with_kvcache(real, fp8, fp8, cache_seqlens=3, k_scale=make(2))
        yield "q", lambda: flashcl.flash_attn_varlen_func(make(3, 2, 16), make(4, 2, 2, 16), make(4, 2, 2, 16), cu,
                                                          cu, 2, 2, block_table=torch.zeros(2, 2, dtype=torch.int32))
        yield r"states\[0\]", lambda: flashcl.merge_states([x, x], [lse, lse])
        yield "states", lambda: flashcl.merge_states(make(2, 2, 3, 2, 16), make(2, 2, 2, 3))
        yield "dout", lambda: flashcl.attention_backward(x, x, x, x, x, lse)
        yield "q", lambda: flashcl.dropout_mask(x, x, 0.5, 1)
        yield "q", lambda: flashcl.plan(x, x, x)

    def meta(*shape):
        return torch.zeros(shape, device="meta")

    real, fp8 = torch.zeros(2, 3, 2, 16), torch.zeros(2, 8, 2, 16).to(torch.float8_e4m3fn)  # (the scale has no data)

    for name, call in calls(meta):
        with pytest.raises(ValueError, match=f"^{name} is on device meta, which holds no data$"):
            call()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch's "Accessing the data pointer of FakeTensor" warning
        with FakeTensorMode():
            for name, call in calls(torch.zeros):
                with pytest.raises(ValueError, match=f"^{name} is a fake tensor \\(FakeTensorMode\\), which holds no"):
                    call()


def test_attention_backward_checks_the_kinds_of_all_its_arrays(rng):
    """attention_backward's dout, out and softmax_lse are held to the kinds rule as q, k, v are: a torch dout
    among numpy arrays ran silently (numpy gradients back), and a list failed with an AttributeError about
    .shape instead of a ValueError naming it."""
    torch = pytest.importorskip("torch")
    q, k, v = qkv(rng)
    out, lse = flashcl.attention(q, k, v, return_lse=True)
    for i, name in enumerate(("dout", "q", "k", "v", "out", "softmax_lse")):
        args = [q, q, k, v, out, lse]
        args[i] = torch.from_numpy(args[i])
        with pytest.raises(ValueError, match=f"mixed array kinds: {name} are torch tensors"):
            flashcl.attention_backward(*args)
        args[i] = args[i].tolist()
        with pytest.raises(ValueError, match=f"{name} must be a numpy array or a torch tensor, not list"):
            flashcl.attention_backward(*args)


def test_a_list_beside_tensors_is_named_as_no_array(rng):
    """A list (or any non-array) among torch tensors is refused as what it is, as among numpy arrays: it was
    reported as "mixed array kinds: q, k, v are torch tensors, alibi_slopes are not", which reads as a numpy
    array that should be a tensor."""
    torch = pytest.importorskip("torch")
    q = torch.zeros(1, 8, 2, 16)
    with pytest.raises(ValueError, match="^alibi_slopes must be a numpy array or a torch tensor, not list$"):
        flashcl.flash_attn_func(q, q, q, alibi_slopes=[0.5, 0.25])
    with pytest.raises(ValueError, match="^cache_seqlens must be a numpy array or a torch tensor, not list$"):
        flashcl.flash_attn_with_kvcache(q, q, q, cache_seqlens=[3])
    with pytest.raises(ValueError, match="^v must be a numpy array or a torch tensor, not tuple$"):
        flashcl.flash_attn_func(q, q, (1.0,))


def test_meta_or_fake_tensors_beside_real_ones_are_named():
    """A meta or fake k, v or feature beside a q that holds data: flash_attn_func returned q-device outputs of
    uninitialised memory (the fake kernel's path) for a meta k, failed in a host copy naming nothing for a meta
    alibi_slopes, and in FakeTensorMode's assertion about real inputs for a fake k. Shape-only calls (a meta
    q, with CPU cu_seqlens say) still give shapes."""
    torch = pytest.importorskip("torch")
    from torch._subclasses.fake_tensor import FakeTensorMode

    q, meta = torch.zeros(1, 8, 2, 16), torch.zeros(1, 8, 2, 16, device="meta")
    with FakeTensorMode():
        fake = torch.zeros(1, 8, 2, 16)
    fake_what = r"a fake tensor \(FakeTensorMode\)"
    for kw, name, what in ((dict(k=meta), "k", "on device meta"), (dict(v=fake), "v", fake_what),
                           (dict(alibi_slopes=torch.ones(2, device="meta")), "alibi_slopes", "on device meta")):
        args = dict(dict(q=q, k=q, v=q), **kw)
        with pytest.raises(ValueError, match=f"^{name} is {what}, which holds no data, but q holds data"):
            flashcl.flash_attn_func(**args)
    with pytest.raises(ValueError, match="^kv is on device meta, which holds no data, but q holds data"):
        flashcl.flash_attn_kvpacked_func(q, torch.zeros(1, 8, 2, 2, 16, device="meta"))
    cu = torch.tensor([0, 8], dtype=torch.int32)
    out = flashcl.flash_attn_varlen_func(meta[0], meta[0], meta[0], cu, cu, 8, 8)
    assert out.device.type == "meta" and out.shape == (8, 2, 16)
    # The other way round (a new-user trial: a meta q with real k and v returned a meta output silently).
    for kw, name in ((dict(k=q), "k"), (dict(v=q), "v")):
        args = dict(dict(q=meta, k=meta, v=meta), **kw)
        with pytest.raises(ValueError, match=f"^{name} holds data, but q is on device meta"):
            flashcl.flash_attn_func(**args)
    with pytest.raises(ValueError, match="^kv holds data, but q is on device meta"):
        flashcl.flash_attn_kvpacked_func(meta, torch.zeros(1, 8, 2, 2, 16))
    with FakeTensorMode(allow_non_fake_inputs=True):
        fake_q = torch.zeros(1, 8, 2, 16)
        with pytest.raises(ValueError, match=fr"^k holds data, but q is {fake_what}"):
            flashcl.flash_attn_func(fake_q, q, fake_q)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_numpy_scalars_on_every_entry_point(rng, kind):
    """Numpy scalars (1 / np.sqrt(d), np.float32, np.int64 window sizes and bounds) give the results of the same
    Python numbers on every entry point, and a non-number is a TypeError naming the argument (it was a ValueError;
    ArgumentTypeError is both, so callers catching either keep working)."""
    q, k, v = qkv(rng, b=2, sq=5, sk=9)
    cu = np.array([0, 4, 10], np.int32)
    x = rand(rng, (10, 2, 16))
    pool = rand(rng, (6, 4, 2, 16))
    table = np.array([[0, 2, 4], [1, 3, 5]], np.int32)
    if kind == "torch":
        torch = pytest.importorskip("torch")
        q, k, v, cu, x, pool, table = (torch.from_numpy(a) for a in (q, k, v, cu, x, pool, table))
    f32, f64, i64, i32 = np.float32, np.float64, np.int64, np.int32
    scale = 1 / np.sqrt(16)
    calls = [
        (lambda s, c, w: flashcl.flash_attn_func(q, k, v, softmax_scale=s, softcap=c, window_size=w, causal=True),
         "flash_attn_func"),
        (lambda s, c, w: flashcl.attention(q, k, v, softmax_scale=s, softcap=c, window_size=w, dropout_p=f32(0.25),
                                           dropout_seed=i64(7), dropout_offset=i32(3)), "attention"),
        (lambda s, c, w: flashcl.flash_attn_varlen_func(x, x, x, cu, cu, i64(6), i32(6), softmax_scale=s, softcap=c,
                                                        window_size=w), "varlen"),
        (lambda s, c, w: flashcl.flash_attn_with_kvcache(q, k, v, cache_seqlens=i32(9), softmax_scale=s, softcap=c,
                                                         window_size=w, num_splits=i64(0)), "kvcache"),
        (lambda s, c, w: flashcl.flash_attn_with_kvcache(q, pool, pool, cache_seqlens=i64(7), block_table=table,
                                                         softmax_scale=s, softcap=c, window_size=w), "paged kvcache"),
        (lambda s, c, w: flashcl.flash_attn_varlen_func(x, pool, pool, cu, cu, i64(6), i32(6), softmax_scale=s,
                                                        softcap=c, window_size=w, block_table=table), "paged varlen"),
    ]
    for call, what in calls:
        got = call(f32(scale), f64(2.5), (i64(3), i32(1)))
        want = call(float(f32(scale)), 2.5, (3, 1))
        assert (got == want).all(), what
        for kwargs, match in ((dict(s="0.25"), "softmax_scale must be a number, got '0.25'"),
                              (dict(c=b"x"), "softcap must be a number"),
                              (dict(s=np.complex64(1)), "softmax_scale must be a number"),
                              (dict(w=(f32(2), 0)), "window_size entries must be integers"),
                              (dict(w=(2, "0")), "window_size entries must be integers")):
            args = dict(s=scale, c=0.0, w=(-1, -1)) | kwargs
            with pytest.raises(TypeError, match=match):
                call(args["s"], args["c"], args["w"])
    keep = flashcl.dropout_mask(q, k, f32(0.25), i64(11), i32(2))
    assert (keep == flashcl.dropout_mask(q, k, 0.25, 11, 2)).all()
    with pytest.raises(TypeError, match="dropout_seed must be an integer"):
        flashcl.dropout_mask(q, k, 0.25, f64(11))
    with pytest.raises(TypeError, match="dropout_p must be a number"):
        flashcl.dropout_mask(q, k, "0.25", 11)
    with pytest.raises(TypeError, match="max_seqlen_q must be an integer"):
        flashcl.flash_attn_varlen_func(x, x, x, cu, cu, f64(6), 6)
    with pytest.raises(TypeError, match="max_seqlen_k must be an integer"):
        flashcl.flash_attn_varlen_func(x, pool, pool, cu, cu, 6, "6", block_table=table)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_wrong_types_are_named(rng, kind):
    """Wrong-typed arguments raise a TypeError naming them on every entry point. They failed naming nothing
    (None for q or for merge_states' states, a list as sinks or bias: AttributeError "'NoneType' object has no
    attribute 'dtype'"), or were taken silently (causal="no" and rotary_interleaved="no" as True,
    cache_seqlens=True as 1 row); flash_attn_varlen_func with cu_seqlens None was refused for q's shape."""
    q, k, v = qkv(rng, b=2, sq=4, sk=8)
    x = rand(rng, (10, 2, 16))
    cu = np.array([0, 4, 10], np.int32)
    lse = np.zeros((2, 2, 4), np.float32)
    if kind == "torch":
        torch = pytest.importorskip("torch")
        q, k, v, x, cu, lse = (torch.from_numpy(a) for a in (q, k, v, x, cu, lse))
    calls = [
        (lambda: flashcl.flash_attn_func(None, k, v), "q must be a numpy array or a torch tensor, not None"),
        (lambda: flashcl.flash_attn_func(q, k, None), "v must be a numpy array or a torch tensor, not None"),
        (lambda: flashcl.flash_attn_qkvpacked_func(None), "qkv must be a numpy array or a torch tensor, not None"),
        (lambda: flashcl.flash_attn_func(q, k, v, causal="no"), "causal must be a bool, got 'no'"),
        (lambda: flashcl.flash_attn_func(q, k, v, causal=None), "causal must be a bool, got None"),
        (lambda: flashcl.flash_attn_varlen_func(x, x, x, None, cu, 6, 6),
         "cu_seqlens_q must be a numpy array or a torch tensor, not None"),
        (lambda: flashcl.flash_attn_varlen_qkvpacked_func(x[:, None].expand(10, 3, 2, 16) if kind == "torch" else
                                                          np.stack([x] * 3, 1), None, 6),
         "cu_seqlens_q must be a numpy array or a torch tensor, not None"),
        (lambda: flashcl.attention(q, k, v, sinks=[0.1, 0.2]), "sinks must be a numpy array or a torch tensor, "
                                                                "not list"),
        (lambda: flashcl.attention(q, k, v, bias=[[0.0]]), "bias must be a numpy array or a torch tensor, not list"),
        (lambda: flashcl.attention(q, k, v, mask=[[True]]), "mask must be a numpy array or a torch tensor, not list"),
        (lambda: flashcl.attention_backward(q, q, k, v, q, None), "softmax_lse must be a numpy array or a torch "
                                                                  "tensor, not None"),
        (lambda: flashcl.dropout_mask(None, k, 0.5, 1), "q must be a numpy array or a torch tensor, not None"),
        (lambda: flashcl.plan(q, None, v), "k must be a numpy array or a torch tensor, not None"),
        (lambda: flashcl.merge_states(None, None), "states must be a numpy array or a torch tensor, not None"),
        (lambda: flashcl.merge_states([q, q], None), "lse_states must be a numpy array or a torch tensor, not None"),
        (lambda: flashcl.to_device(None), "x must be a numpy array or a torch tensor, not None"),
        (lambda: flashcl.flash_attn_with_kvcache(q, None, v, cache_seqlens=4),
         "k_cache must be a numpy array or a torch tensor, not None"),
        (lambda: flashcl.flash_attn_with_kvcache(q, k, v, cache_seqlens=True),
         "cache_seqlens must be an int, or an int32 \\(batch,\\) numpy array or torch tensor, got True"),
        (lambda: flashcl.flash_attn_with_kvcache(q, k, v, cache_seqlens=5.0),
         "cache_seqlens must be an int, or an int32 \\(batch,\\) numpy array or torch tensor, got 5.0"),
        (lambda: flashcl.flash_attn_with_kvcache(q, k, v, cache_seqlens=4, causal="yes"), "causal must be a bool"),
        (lambda: flashcl.flash_attn_with_kvcache(q, k, v, cache_seqlens=4, rotary_interleaved="no"),
         "rotary_interleaved must be a bool, got 'no'"),
    ]
    for call, match in calls:
        with pytest.raises(TypeError, match=match):
            call()
    # flags of any integer or bool kind still pass, as they did
    want = flashcl.flash_attn_func(q, k, v, causal=True)
    for flag in (1, np.bool_(True), np.int64(1), np.array(True)):
        assert (flashcl.flash_attn_func(q, k, v, causal=flag) == want).all()
