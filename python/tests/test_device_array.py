"""flashcl.DeviceArray: KV caches that stay on the device between calls.

Checked on a context that copies (zero_copy=False), which is what a discrete GPU does: the same
decode loop with DeviceArray caches gives bit for bit the outputs and the caches of the loop with
numpy caches, while only q, the new rows and the output cross to the device.
"""
import sys

import numpy as np
import pytest

import flashcl
from conftest import rand

B, HKV, HQ, D, PAGE, PAGES = 2, 2, 4, 32, 8, 8  # a paged pool of B * PAGES + 1 pages


def _decode_loop(ctx, make_cache, dtype="float32", steps=(7, 1, 1, 2), **extra):
    """A prefill then decode steps appending into a paged cache; (outputs, bytes copied per step, caches)."""
    rng = np.random.default_rng(1)
    pool = (B * PAGES + 1, PAGE, HKV, D)
    table = np.random.default_rng(5).permutation(pool[0])[:B * PAGES].reshape(B, PAGES).astype(np.int32)
    cache_dtype = extra.pop("cache_dtype", np.float32)
    k_cache, v_cache = (make_cache(np.zeros(pool, cache_dtype)) for _ in range(2))
    lens = np.zeros(B, np.int32)
    outs, copied = [], []
    for s in steps:
        q, k, v = (rand(rng, (B, s, h, D), dtype) for h in (HQ, HKV, HKV))
        before = ctx.transfer_stats()["bytes_copied"]
        outs.append(flashcl.flash_attn_with_kvcache(q, k_cache, v_cache, k=k, v=v, cache_seqlens=lens,
                                                    block_table=table, causal=True, **extra))
        copied.append(ctx.transfer_stats()["bytes_copied"] - before)
        lens += s
    return outs, copied, (k_cache, v_cache)


def test_decode_loop_on_device_caches():
    host_ctx = flashcl.Context(zero_copy=False)
    with host_ctx:
        want, copied_host, host_caches = _decode_loop(host_ctx, lambda x: x)
    ctx = flashcl.Context(zero_copy=False)
    got, copied, caches = _decode_loop(ctx, lambda x: flashcl.to_device(x, ctx))  # runs on the caches' context
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    for dev, host in zip(caches, host_caches):
        assert isinstance(dev, flashcl.DeviceArray) and dev.shape == host.shape and dev.dtype == host.dtype
        np.testing.assert_array_equal(dev.numpy(), host)
    # A one-token step moves q, the new rows and the output (3 KB) instead of the caches (140 KB).
    cache_bytes = sum(c.nbytes for c in caches)
    assert max(copied[1:]) < cache_bytes / 10 < min(copied_host[1:])


def test_fp8_device_cache():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    fp8 = np.dtype(ml_dtypes.float8_e4m3fn)
    kw = dict(cache_dtype=fp8, k_scale=0.5, v_scale=0.75)
    with flashcl.Context(zero_copy=False) as host_ctx:
        want, _, host_caches = _decode_loop(host_ctx, lambda x: x, **kw)
    ctx = flashcl.Context(zero_copy=False)
    got, _, caches = _decode_loop(ctx, lambda x: flashcl.to_device(x, ctx), **kw)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    assert caches[0].dtype == fp8
    np.testing.assert_array_equal(caches[0].numpy().view(np.uint8), host_caches[0].view(np.uint8))


def test_torch_round_trip():
    torch = pytest.importorskip("torch")
    x = torch.randn(3, 5, 2, 4).to(torch.bfloat16)
    dev = flashcl.to_device(x.transpose(1, 2))  # made contiguous
    back = dev.to_host()
    assert isinstance(back, torch.Tensor) and back.dtype == torch.bfloat16 and dev.shape == (3, 2, 5, 4)
    assert torch.equal(back, x.transpose(1, 2).contiguous())
    assert dev.numpy().dtype.name == "bfloat16"


def test_bfloat16_numpy_without_ml_dtypes_names_it(monkeypatch):
    torch = pytest.importorskip("torch")
    dev = flashcl.to_device(torch.zeros(2, 3, dtype=torch.bfloat16))
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)  # import ml_dtypes now raises ImportError
    with pytest.raises(ImportError, match="bfloat16 array needs the ml_dtypes package"):
        dev.numpy()
    assert dev.to_host().dtype == torch.bfloat16  # the tensor needs nothing extra


def test_errors():
    ctx, other = flashcl.Context(), flashcl.Context()
    k = flashcl.to_device(np.zeros((2, 8, HKV, D), np.float32), ctx)
    v_host = np.zeros((2, 8, HKV, D), np.float32)
    q = np.zeros((2, 1, HQ, D), np.float32)
    with pytest.raises(ValueError, match="both be flashcl.DeviceArray, or neither"):
        flashcl.flash_attn_with_kvcache(q, k, v_host, cache_seqlens=3)
    v = flashcl.to_device(v_host, other)
    with pytest.raises(ValueError, match="another flashcl.Context"):
        flashcl.flash_attn_with_kvcache(q, k, v, cache_seqlens=3)
    with pytest.raises(ValueError, match=r"k_cache must be .* got shape \(16, 8\)"):
        flat = flashcl.to_device(np.zeros((16, 8), np.float32), ctx)
        flashcl.flash_attn_with_kvcache(q, flat, flat, cache_seqlens=3)
    with pytest.raises(ValueError, match="none of them 0"):
        flashcl.to_device(np.zeros((2, 0), np.float32))
    with pytest.raises(ValueError, match="k_cache has dtype float16, q has float32"):
        half = flashcl.to_device(np.zeros((2, 8, HKV, D), np.float16), ctx)
        flashcl.flash_attn_with_kvcache(q, half, half, cache_seqlens=3)


def test_to_device_refuses_what_it_cannot_hold_by_name():
    """to_device's argument errors name the argument: a device spec string as context (was an AttributeError
    about '_c'), a numpy array in non-native byte order or of a non-number dtype (a TypeError from the
    extension's argument conversion naming nothing), a meta tensor (torch's "Cannot copy out of meta
    tensor") and a fake one (torch's data-pointer warning printed, then CL_INVALID_HOST_PTR)."""
    import warnings

    with pytest.raises(ValueError, match="context must be a flashcl.Context .*, not str"):
        flashcl.to_device(np.zeros((2, 8), np.float32), "0:0")
    for dtype in (np.dtype(np.float32).newbyteorder("S"), object, "U2", [("a", "f4")]):
        with pytest.raises(ValueError, match="x has dtype .*: to_device takes numbers in native byte order"):
            flashcl.to_device(np.zeros((2, 8), dtype))
    torch = pytest.importorskip("torch")
    from torch._subclasses.fake_tensor import FakeTensorMode

    with pytest.raises(ValueError, match="x is on device meta, which holds no data"):
        flashcl.to_device(torch.zeros(2, 8, device="meta"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with FakeTensorMode(), pytest.raises(ValueError, match=r"x is a fake tensor \(FakeTensorMode\)"):
            flashcl.to_device(torch.zeros(2, 8))
    ml_dtypes = pytest.importorskip("ml_dtypes")
    for dtype in (ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, np.bool_, np.float64):  # still held
        x = np.arange(6).reshape(2, 3).astype(dtype)
        assert flashcl.to_device(x).numpy().tobytes() == x.tobytes()

def test_paged_varlen_on_device_pools():
    """flash_attn_varlen_func with block_table reads DeviceArray pools as flash_attn_with_kvcache does."""
    rng = np.random.default_rng(12)
    q, pool = rand(rng, (9, HQ, D)), rand(rng, (B * PAGES + 1, PAGE, HKV, D))
    cu_q, cu_k = np.array([0, 4, 9], np.int32), np.array([0, 30, 41], np.int32)
    table = np.arange(B * PAGES, dtype=np.int32).reshape(B, PAGES)
    want = flashcl.flash_attn_varlen_func(q, pool, pool, cu_q, cu_k, 5, 30, causal=True, block_table=table)
    dev = flashcl.to_device(pool)
    got = flashcl.flash_attn_varlen_func(q, dev, dev, cu_q, cu_k, 5, 30, causal=True, block_table=table)
    np.testing.assert_array_equal(got, want)
