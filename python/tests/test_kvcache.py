"""flash_attn_with_kvcache against the float64 definition (reference.kvcache_attention): contiguous and
paged caches, the in-place append (the caller's cache afterwards equals the reference's), rotary in both
pairings, cache_batch_idx, cache_leftpad, GQA, causal, window, softcap, ALiBi, num_splits, the LSE,
float32/bfloat16 storage, fp8 caches, numpy and torch; the argument errors (nothing written); merge_states.

Head dim 32 everywhere and few feature combinations: each is a kernel build on POCL."""
import math

import numpy as np
import pytest

import flashcl
from conftest import assert_close, f64, np_dtype, rand
from reference import kvcache_attention, merge_reference, numpy_attention

D = 32

# name: dict(b, sq, hq, hkv, cap (rows per sequence), page (0: contiguous), lens, s_new, rotary
#   (None, or (rotary_dim, interleaved)), batch_idx, leftpad, kw (flash_attn keywords))
CASES = {
    "decode": dict(b=2, sq=1, hq=4, hkv=4, cap=40, lens=[17, 33]),
    "decode_gqa_lens_int": dict(b=2, sq=1, hq=4, hkv=2, cap=24, lens=24),
    "paged_append_causal": dict(b=2, sq=3, hq=4, hkv=2, cap=40, page=8, lens=[13, 30], s_new=3,
                                kw=dict(causal=True)),
    "paged_page1": dict(b=2, sq=1, hq=4, hkv=1, cap=12, page=1, lens=[5, 11], s_new=1),
    "append_rotary_gptj_causal": dict(b=2, sq=2, hq=4, hkv=2, cap=40, lens=[20, 7], s_new=2, rotary=(D, True),
                                      kw=dict(causal=True)),
    "append_rotary_neox_not_causal": dict(b=2, sq=2, hq=4, hkv=2, cap=40, lens=[20, 7], s_new=2,
                                          rotary=(16, False)),
    "rotary_no_append": dict(b=1, sq=2, hq=4, hkv=4, cap=30, lens=[21], rotary=(16, True)),
    "batch_idx_leftpad": dict(b=3, sq=1, hq=4, hkv=2, cap=30, lens=[25, 9, 20], s_new=1, batch_idx=True,
                              leftpad=[4, 0, 18]),
    "window_softcap_alibi": dict(b=2, sq=3, hq=4, hkv=2, cap=64, lens=[50, 21], s_new=3,
                                 kw=dict(window_size=(10, 0), softcap=8.0, alibi_slopes="bh", softmax_scale=0.3)),
    "splits": dict(b=2, sq=1, hq=4, hkv=1, cap=300, lens=[280, 111], s_new=1, kw=dict(num_splits=3)),
}


def _torch():
    return pytest.importorskip("torch")


def _like(x, kind):
    """A numpy array as the call's kind."""
    return _torch().from_numpy(np.ascontiguousarray(x)) if kind == "torch" else x


def _inputs(case, dtype="float32", kind="numpy", seed=0):
    c = dict(dict(page=0, s_new=0, rotary=None, batch_idx=False, leftpad=None, kw={}), **CASES[case])
    rng = np.random.default_rng(seed)
    b, sq, hq, hkv, cap, page = c["b"], c["sq"], c["hq"], c["hkv"], c["cap"], c["page"]
    a = dict(q=rand(rng, (b, sq, hq, D), dtype, kind))
    if page:
        max_blocks = -(-cap // page)
        num_blocks = b * max_blocks + 2  # spare blocks nobody owns
        a["block_table"] = _like(rng.permutation(num_blocks)[:b * max_blocks].reshape(b, max_blocks)
                                 .astype(np.int32), kind)
        pool = (num_blocks, page, hkv, D)
    else:
        slots = b + 1 if c["batch_idx"] else b
        if c["batch_idx"]:
            a["cache_batch_idx"] = _like(rng.permutation(slots)[:b].astype(np.int32), kind)
        pool = (slots, cap, hkv, D)
    a["k_cache"], a["v_cache"] = rand(rng, pool, dtype, kind), rand(rng, pool, dtype, kind)
    lens = c["lens"]
    a["cache_seqlens"] = lens if isinstance(lens, int) else _like(np.array(lens, np.int32), kind)
    if c["leftpad"] is not None:
        a["cache_leftpad"] = _like(np.array(c["leftpad"], np.int32), kind)
    if c["s_new"]:
        a["k"] = rand(rng, (b, c["s_new"], hkv, D), dtype, kind)
        a["v"] = rand(rng, (b, c["s_new"], hkv, D), dtype, kind)
    if c["rotary"]:
        rd, a["rotary_interleaved"] = c["rotary"]
        pos = np.arange(cap + sq)[:, None]
        theta = pos * 10000.0 ** (-np.arange(rd // 2)[None] * 2 / rd)
        a["rotary_cos"], a["rotary_sin"] = (_like(f(theta).astype(np.float32), kind) for f in (np.cos, np.sin))
    kw = dict(c["kw"])
    if kw.get("alibi_slopes") == "bh":
        kw["alibi_slopes"] = _like((0.5 ** (1 + np.arange(b * hq) % 5)).reshape(b, hq).astype(np.float32), kind)
    return a, kw


def _reference(a, kw, dtype, storage=None):
    """(out, lse, k_cache, v_cache) in float64 for the call's inputs."""
    rnd = None
    if dtype != "float32":
        def rnd(x):
            return x.astype(np_dtype(dtype)).astype(np.float64)
    ref_args = {name: (x if isinstance(x, (int, bool)) else f64(x)) for name, x in a.items()}
    for name in ("cache_seqlens", "cache_batch_idx", "cache_leftpad", "block_table"):
        if name in a and not isinstance(a[name], int):
            ref_args[name] = np.asarray(f64(a[name]), np.int64)
    alibi = kw.get("alibi_slopes")
    return kvcache_attention(round_k=rnd, round_q=rnd, scale=kw.get("softmax_scale"), causal=kw.get("causal", False),
                             window=kw.get("window_size", (-1, -1)), softcap=kw.get("softcap", 0.0),
                             alibi=None if alibi is None else f64(alibi), storage=storage, **ref_args)


def _check(case, dtype="float32", kind="numpy"):
    a, kw = _inputs(case, dtype, kind)
    ref_out, ref_lse, ref_k, ref_v = _reference(a, kw, dtype)
    k_cache, v_cache = a["k_cache"], a["v_cache"]
    out, lse = flashcl.flash_attn_with_kvcache(**a, **kw, return_softmax_lse=True)
    assert type(out) is type(a["q"]) and out.dtype == a["q"].dtype and tuple(out.shape) == tuple(a["q"].shape)
    b, sq, hq, _ = a["q"].shape
    assert tuple(lse.shape) == (b, hq, sq) and "float32" in str(lse.dtype)
    # The append went into the caller's arrays: equal to the reference's cache (untouched rows exactly,
    # the appended ones within the storage's rounding of the device's float rotation).
    assert a["k_cache"] is k_cache
    rtol = 1e-6 if dtype == "float32" else 2.0 ** -7
    np.testing.assert_allclose(f64(k_cache), ref_k, rtol=rtol, atol=1e-6)
    np.testing.assert_array_equal(f64(v_cache), ref_v)
    baseline = None if dtype == "float32" else _reference(_inputs(case, dtype, kind)[0], kw, dtype,
                                                          storage=np_dtype(dtype))[0]
    assert_close(out, ref_out, dtype, baseline)
    assert_close(lse, ref_lse, what="softmax_lse")


@pytest.mark.parametrize("case", list(CASES))
def test_float32_numpy(case):
    _check(case)


@pytest.mark.parametrize("case", ["paged_append_causal", "append_rotary_gptj_causal", "batch_idx_leftpad"])
def test_float32_torch(case):
    _torch()
    _check(case, kind="torch")


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_bfloat16(kind):
    if kind == "torch":
        _torch()
    _check("append_rotary_gptj_causal", "bfloat16", kind)


def test_append_through_copied_buffers():
    """Where the device does not use host memory in place (zero_copy=False: copied buffers, as on a
    discrete GPU) the appended caches are read back into the caller's arrays."""
    a, kw = _inputs("paged_append_causal")
    ref_out, _, ref_k, ref_v = _reference(a, kw, "float32")
    with flashcl.Context(zero_copy=False) as ctx:
        out = flashcl.flash_attn_with_kvcache(**a, **kw)
        assert ctx.transfer_stats()["zero_copy_buffers"] == 0
    np.testing.assert_allclose(a["k_cache"], ref_k, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(a["v_cache"], ref_v)
    assert_close(out, ref_out)


def test_append_bumps_torch_version():
    """An append writes a torch cache in place: autograd must see it, so a backward that saved the cache
    before the append refuses to run on the new contents (as after any in-place op)."""
    torch = pytest.importorskip("torch")
    w = torch.ones(1, requires_grad=True)
    kc, vc = torch.randn(1, 8, 1, 16), torch.randn(1, 8, 1, 16)
    y = (kc * w).sum()
    new = dict(k=torch.randn(1, 1, 1, 16), v=torch.randn(1, 1, 1, 16))
    flashcl.flash_attn_with_kvcache(torch.randn(1, 1, 1, 16), kc, vc, cache_seqlens=2, **new)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()
    with torch.inference_mode():  # (inference tensors have no version counter)
        kc, vc = torch.randn(1, 8, 1, 16), torch.randn(1, 8, 1, 16)
        flashcl.flash_attn_with_kvcache(torch.randn(1, 1, 1, 16), kc, vc, cache_seqlens=2, **new)
        assert torch.equal(kc[0, 2], new["k"][0, 0])


def test_return_value_and_readonly_cache_without_append():
    """Without return_softmax_lse only out comes back (as flash_attn); a cache that is not appended
    to may be read-only."""
    a, kw = _inputs("decode")
    for x in (a["k_cache"], a["v_cache"]):
        x.flags.writeable = False
    out = flashcl.flash_attn_with_kvcache(**a)
    assert isinstance(out, np.ndarray)
    assert_close(out, _reference(a, kw, "float32")[0])


def test_decode_loop_matches_flash_attn_func():
    """A prefill into an empty cache, then decode steps that append one token each (cache_seqlens
    advanced by the caller): every step equals flash_attn_func over the keys so far."""
    rng = np.random.default_rng(5)
    b, hq, hkv, cap, steps = 1, 4, 2, 16, 3
    ks = rand(rng, (b, 5 + steps, hkv, D))
    vs = rand(rng, (b, 5 + steps, hkv, D))
    qs = rand(rng, (b, 5 + steps, hq, D))
    k_cache, v_cache = np.zeros((b, cap, hkv, D), np.float32), np.zeros((b, cap, hkv, D), np.float32)
    seqlens = np.zeros(b, np.int32)
    for start, n in [(0, 5)] + [(5 + i, 1) for i in range(steps)]:
        out = flashcl.flash_attn_with_kvcache(qs[:, start:start + n], k_cache, v_cache, ks[:, start:start + n],
                                              vs[:, start:start + n], cache_seqlens=seqlens, causal=True)
        seqlens += n
        ref = flashcl.flash_attn_func(qs[:, start:start + n], ks[:, :start + n], vs[:, :start + n], causal=True)
        np.testing.assert_allclose(out, ref, atol=2e-6)
    np.testing.assert_array_equal(k_cache[:, :5 + steps], ks)


def test_append_of_no_rows_is_no_append():
    """k and v of 0 rows (a step with no new tokens) append nothing: the same as no k and v."""
    rng = np.random.default_rng(6)
    k_cache, v_cache = rand(rng, (2, 12, 2, D)), rand(rng, (2, 12, 2, D))
    before = k_cache.copy()
    q, seqlens = rand(rng, (2, 3, 4, D)), np.array([5, 9], np.int32)
    empty = np.zeros((2, 0, 2, D), np.float32)
    out = flashcl.flash_attn_with_kvcache(q, k_cache, v_cache, empty, empty, cache_seqlens=seqlens, causal=True)
    np.testing.assert_array_equal(out, flashcl.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=seqlens,
                                                                       causal=True))
    np.testing.assert_array_equal(k_cache, before)



@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_empty_queries_and_batch(kind):
    """No query rows, a batch of 0 and a cache of 0 rows are answered without a kernel (README: empty inputs),
    out 0 and LSE -inf, as flash_attn_func answers them; no query rows still append k and v (the same rows
    as a call with queries). They were refused as "q is empty (dimension 1 is 0)"."""
    rng = np.random.default_rng(16)
    k_cache, v_cache = rand(rng, (2, 12, 2, D)), rand(rng, (2, 12, 2, D))
    k_new, v_new = rand(rng, (2, 3, 2, D)), rand(rng, (2, 3, 2, D))
    half = D // 2
    cos, sin = rand(rng, (12, half // 2)), rand(rng, (12, half // 2))
    seqlens = np.array([5, 9], np.int32)
    arrays = dict(q0=rand(rng, (2, 0, 4, D)), qb0=rand(rng, (0, 1, 4, D)), q1=rand(rng, (2, 1, 4, D)),
                  kb0=rand(rng, (0, 1, 2, D)), cap0=rand(rng, (2, 0, 2, D)), lens0=np.zeros((0,), np.int32))
    if kind == "torch":
        torch = _torch()
        k_cache, v_cache, k_new, v_new, cos, sin, seqlens = (torch.from_numpy(x) for x in (k_cache, v_cache, k_new,
                                                                                             v_new, cos, sin, seqlens))
        arrays = {name: torch.from_numpy(x) for name, x in arrays.items()}
    kc_ref, vc_ref = k_cache.clone() if kind == "torch" else k_cache.copy(), v_cache.clone() if kind == "torch" \
        else v_cache.copy()
    rot = dict(rotary_cos=cos, rotary_sin=sin)
    flashcl.flash_attn_with_kvcache(arrays["q1"], kc_ref, vc_ref, k_new, v_new, cache_seqlens=seqlens, **rot)
    out, lse = flashcl.flash_attn_with_kvcache(arrays["q0"], k_cache, v_cache, k_new, v_new, cache_seqlens=seqlens,
                                               causal=True, return_softmax_lse=True, **rot)
    assert tuple(out.shape) == (2, 0, 4, D) and tuple(lse.shape) == (2, 4, 0)
    np.testing.assert_array_equal(np.asarray(k_cache), np.asarray(kc_ref))
    np.testing.assert_array_equal(np.asarray(v_cache), np.asarray(vc_ref))
    out, lse = flashcl.flash_attn_with_kvcache(arrays["qb0"], k_cache, v_cache, arrays["kb0"], arrays["kb0"],
                                               cache_seqlens=arrays["lens0"], return_softmax_lse=True)
    assert tuple(out.shape) == (0, 1, 4, D) and tuple(lse.shape) == (0, 4, 1)
    out, lse = flashcl.flash_attn_with_kvcache(arrays["q1"], arrays["cap0"], arrays["cap0"], cache_seqlens=0,
                                               return_softmax_lse=True)
    assert not np.asarray(out).any() and np.isneginf(np.asarray(lse)).all()

def test_fp8_cache():
    """FlashCL's extra: an e4m3 cache (ml_dtypes) with per-head k scales and a per-tensor v scale holds
    x / scale; the appended rows are quantised (round to nearest even) into it."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    fp8 = ml_dtypes.float8_e4m3fn
    a, kw = _inputs("paged_append_causal")
    ks = (0.5 + 0.25 * np.arange(a["k_cache"].shape[2]))[:, None]  # (nheads_k, 1): broadcasts over rows
    vs = 0.75
    a["k_cache"], a["v_cache"] = (a["k_cache"] / ks).astype(fp8), (a["v_cache"] / vs).astype(fp8)

    def quantise(scale):
        return lambda x: (x / scale).astype(fp8).astype(np.float64) * scale

    decoded = dict(a, k_cache=a["k_cache"].astype(np.float64) * ks, v_cache=a["v_cache"].astype(np.float64) * vs)
    _, _, ref_k, ref_v = kvcache_attention(**{n: f64(x) if n != "block_table" else x for n, x in decoded.items()},
                                           round_k=quantise(ks), round_v=quantise(vs), causal=True)
    out, lse = flashcl.flash_attn_with_kvcache(**a, **kw, k_scale=ks[:, 0].astype(np.float32), v_scale=vs,
                                               return_softmax_lse=True)
    assert a["k_cache"].dtype == fp8
    # Within one unit of e4m3 (x * (1 / scale) in float may round a tie the other way).
    np.testing.assert_allclose(a["k_cache"].astype(np.float64) * ks, ref_k, rtol=2.0 ** -3)
    np.testing.assert_allclose(a["v_cache"].astype(np.float64) * vs, ref_v, rtol=2.0 ** -3)
    # The attention over exactly what the device's cache holds now (the rows appended included).
    after = dict(q=a["q"], k_cache=a["k_cache"].astype(np.float64) * ks, v_cache=a["v_cache"].astype(np.float64) * vs,
                 block_table=a["block_table"], cache_seqlens=a["cache_seqlens"] + a["k"].shape[1])
    ref_out, ref_lse, _, _ = kvcache_attention(**after, causal=True)
    assert_close(out, ref_out)
    assert_close(lse, ref_lse, what="softmax_lse")


def test_fp8_cache_next_to_q_in_one_buffer():
    """Arrays that share memory pages share one zero-copy buffer: an fp8 cache (bytes) written by the
    append, followed in memory by q (float32), is no alias of it (views of different element sizes;
    compared as elements, q's offset in float32 units would land inside the cache's bytes)."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    fp8 = ml_dtypes.float8_e4m3fn
    a, kw = _inputs("paged_append_causal")
    cache = a["k_cache"].astype(fp8)
    memory = np.zeros(a["q"].nbytes + cache.nbytes, np.uint8)
    k_cache = memory[:cache.nbytes].view(fp8).reshape(cache.shape)
    q = memory[cache.nbytes:].view(np.float32).reshape(a["q"].shape)
    q[...], k_cache[...] = a["q"], cache
    v_cache = a["v_cache"].astype(fp8)
    args = dict(a, v_cache=v_cache.copy())
    out = flashcl.flash_attn_with_kvcache(**dict(args, q=q, k_cache=k_cache), **kw)
    apart = dict(args, k_cache=cache, v_cache=v_cache)
    np.testing.assert_array_equal(out, flashcl.flash_attn_with_kvcache(**apart, **kw))
    np.testing.assert_array_equal(k_cache.view(np.uint8), cache.view(np.uint8))


def test_merge_states_of_two_cache_halves():
    """Attention over a cache split in two (the second half through cache_leftpad) merged by the LSE
    equals attention over all of it: FlashInfer's merge_states, in flash_attn's layouts."""
    a, kw = _inputs("decode")
    full_out, full_lse = flashcl.flash_attn_with_kvcache(**a, return_softmax_lse=True)
    lens = a["cache_seqlens"]
    half = (lens // 2).astype(np.int32)
    first = flashcl.flash_attn_with_kvcache(**dict(a, cache_seqlens=half), return_softmax_lse=True)
    second = flashcl.flash_attn_with_kvcache(**a, cache_leftpad=half, return_softmax_lse=True)
    out, lse = flashcl.merge_states([first[0], second[0]], [first[1], second[1]])
    assert out.dtype == np.float32 and out.shape == full_out.shape and lse.shape == full_lse.shape
    np.testing.assert_allclose(out, full_out, atol=2e-6)
    np.testing.assert_allclose(lse, full_lse, atol=2e-6)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_merge_states_reference(kind):
    """Stacked states against the float64 merge, rows whose every LSE is -inf included (out 0, lse -inf)."""
    rng = np.random.default_rng(3)
    n, b, s, h, d = 3, 2, 5, 4, 8
    states = rng.standard_normal((n, b, s, h, d)).astype(np.float32)
    lses = (rng.standard_normal((n, b, h, s)) * 3).astype(np.float32)
    lses[:, 1, 2, 4] = -np.inf
    lses[0, 0, 1, :] = -np.inf  # one state sees nothing for these rows
    ref_out, ref_lse = merge_reference(states, lses)
    out, lse = flashcl.merge_states(_like(states, kind), _like(lses, kind))
    assert type(out) is type(_like(states, kind))
    np.testing.assert_allclose(f64(out), ref_out, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(f64(lse), ref_lse, rtol=1e-6, atol=1e-6)
    assert np.all(f64(out)[1, 4, 2] == 0) and np.isneginf(f64(lse)[1, 2, 4])


def test_merge_states_nan_lse_stays_nan():
    """A NaN LSE (a fault upstream) gives a NaN row, not an empty one (O 0, LSE -inf), as FlashInfer's."""
    rng = np.random.default_rng(5)
    states = rng.standard_normal((2, 1, 3, 2, 8)).astype(np.float32)
    lses = rng.standard_normal((2, 1, 2, 3)).astype(np.float32)
    lses[0, 0, 0, 0] = np.nan
    out, lse = flashcl.merge_states(states, lses)
    assert np.isnan(lse[0, 0, 0]) and np.all(np.isnan(out[0, 0, 0]))
    ref_out, ref_lse = merge_reference(states[:, :, 1:], lses[:, :, :, 1:])  # the other rows are untouched
    np.testing.assert_allclose(f64(out[:, 1:]), ref_out, rtol=1e-6, atol=1e-6)
    lses[0, 0, 0, 0] = np.inf  # an overflowed partial: NaN too (documented), never a silent pick
    out, lse = flashcl.merge_states(states, lses)
    assert np.isnan(lse[0, 0, 0]) and np.all(np.isnan(out[0, 0, 0]))


def test_merge_states_errors():
    states = np.zeros((2, 1, 3, 2, 8), np.float32)
    with pytest.raises(ValueError, match=r"lse_states has shape \(2, 1, 3, 2\), expected \(2, 1, 2, 3\)"):
        flashcl.merge_states(states, np.zeros((2, 1, 3, 2), np.float32))
    with pytest.raises(ValueError, match=r"states must be \(num_states, batch, seqlen_q, nheads, d\)"):
        flashcl.merge_states(states[0], np.zeros((1, 2, 3), np.float32))
    with pytest.raises(ValueError, match="states is empty"):
        flashcl.merge_states([], [])

def test_merge_states_refuses_mixed_kinds():
    """numpy states with torch LSEs (or the reverse) are refused as lists and as stacked arrays alike (np.stack
    took a list of torch tensors silently)."""
    torch = pytest.importorskip("torch")
    states, lses = np.zeros((2, 1, 3, 2, 8), np.float32), np.zeros((2, 1, 2, 3), np.float32)
    for s_, l_ in ((list(states), [torch.from_numpy(x) for x in lses]), (states, torch.from_numpy(lses)),
                   ([torch.from_numpy(x) for x in states], list(lses))):
        with pytest.raises(ValueError, match="states and lse_states must both be numpy arrays or both torch tensors"):
            flashcl.merge_states(s_, l_)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_merge_states_errors_name_the_argument(kind):
    """Integer states are refused in both kinds (torch's went through .float()), and a list of states of two
    shapes names the state (numpy's and torch's stacking errors named neither the argument nor the state)."""
    states, lses = np.zeros((2, 1, 3, 2, 8), np.int32), np.zeros((2, 1, 2, 3), np.float32)
    with pytest.raises(ValueError, match="states must be floating-point, got dtype"):
        flashcl.merge_states(_like(states, kind), _like(lses, kind))
    with pytest.raises(ValueError, match="lse_states must be floating-point, got dtype"):
        flashcl.merge_states(_like(states.astype(np.float32), kind), _like(lses.astype(np.int32), kind))
    parts = [_like(np.zeros((1, 3, 2, 8), np.float32), kind), _like(np.zeros((1, 3, 2, 4), np.float32), kind)]
    lse_parts = [_like(x, kind) for x in lses]
    with pytest.raises(ValueError, match=r"states\[1\] has shape \(1, 3, 2, 4\), states\[0\] \(1, 3, 2, 8\)"):
        flashcl.merge_states(parts, lse_parts)
    with pytest.raises(ValueError, match=r"lse_states\[1\] has shape \(1, 2, 2\)"):
        flashcl.merge_states(parts[:1] * 2, [lse_parts[0], lse_parts[1][:, :, :2]])


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_merge_states_of_empty_states(kind):
    """States without rows (flash_attn_func's answer to a batch or seqlen_q of 0) merge into empty results, and
    a head dim of 0 still merges the LSEs; they failed with "states is empty (dimension 1 is 0)", naming a
    dimension of an internal reshape. No states at all is refused by name."""
    rng = np.random.default_rng(5)
    for n, b, s, h, d in ((2, 0, 3, 2, 8), (2, 1, 0, 2, 8), (3, 2, 3, 0, 8)):
        out, lse = flashcl.merge_states(_like(np.zeros((n, b, s, h, d), np.float32), kind),
                                        _like(np.zeros((n, b, h, s), np.float32), kind))
        assert tuple(out.shape) == (b, s, h, d) and tuple(lse.shape) == (b, h, s)
        assert type(out) is type(_like(np.zeros(1), kind)) and "float32" in str(out.dtype)
    lses = rng.standard_normal((3, 2, 2, 4)).astype(np.float32)
    lses[:, 0, 0, 0] = -np.inf
    out, lse = flashcl.merge_states(_like(np.zeros((3, 2, 4, 2, 0), np.float32), kind), _like(lses, kind))
    assert tuple(out.shape) == (2, 4, 2, 0)
    np.testing.assert_allclose(f64(lse), merge_reference(np.zeros((3, 2, 4, 2, 1)), lses)[1], rtol=1e-6)
    with pytest.raises(ValueError, match=r"states is empty: merge_states needs at least one state \(num_states is 0\)"):
        flashcl.merge_states(_like(np.zeros((0, 1, 3, 2, 8), np.float32), kind),
                             _like(np.zeros((0, 1, 2, 3), np.float32), kind))


# ------------------------------------------------------------------------------------------------ errors

def _bad(a, **changes):
    return dict(a, **changes)


ERRORS = [
    (lambda a: _bad(a, block_table=a["block_table"].astype(np.int64)), "block_table must have dtype int32, got int64"),
    (lambda a: _bad(a, cache_seqlens=a["cache_seqlens"].astype(np.int64)),
     "cache_seqlens must have dtype int32, got int64"),
    (lambda a: _bad(a, cache_seqlens=a["cache_seqlens"][:1]), r"cache_seqlens must be \(batch,\) = \(2,\)"),
    (lambda a: _bad(a, block_table=a["block_table"][:1]), "block_table must be \\(batch, max_num_blocks_per_seq\\)"),
    (lambda a: _bad(a, k=a["k"][:, :, :1]), "k must be \\(batch, seqlen_new, nheads_k, headdim\\)"),
    (lambda a: _bad(a, v=a["v"][:, :2]), "v must be \\(2, 3, 2, 32\\)"),
    (lambda a: _bad(a, v_cache=a["v_cache"][:, :4]), "v_cache has shape .* k_cache .* they must agree"),
    (lambda a: _bad(a, k_cache=a["k_cache"].astype(np.float16), v_cache=a["v_cache"].astype(np.float16)),
     "k_cache has dtype float16, q has float32"),
    (lambda a: _bad(a, cache_seqlens=np.array([13, 38], np.int32)),
     r"cache_seqlens\[1\] \+ seqlen_new = 38 \+ 3 exceeds the cache's 40 rows"),
    (lambda a: _bad(a, v=None), "k and v go together"),
    (lambda a: _bad(a, cache_seqlens=None), "appending k and v needs cache_seqlens"),
    (lambda a: _bad(a, cache_batch_idx=np.zeros(2, np.int32)), "cache_batch_idx does not combine with block_table"),
    (lambda a: _bad(a, rotary_cos=np.ones((50, 8), np.float32)), "rotary_cos and rotary_sin go together"),
    (lambda a: _bad(a, rotary_cos=np.ones((50, 20), np.float32), rotary_sin=np.ones((50, 20), np.float32)),
     r"rotary_dim \(2 x 20\) must be at most headdim \(32\)"),
    (lambda a: _bad(a, num_splits=1.5), r"num_splits must be an integer \(0 or less: automatic\), got 1.5"),
    (lambda a: _bad(a, cache_seqlens=2**31), r"cache_seqlens must be from 0 to 2\*\*31 - 1, got 2147483648"),
    (lambda a: _bad(a, k_scale=2.0), "k_scale and v_scale are for float8 caches"),
]


@pytest.mark.parametrize("bad, match", ERRORS, ids=[m[:40] for _, m in ERRORS])
def test_argument_errors_write_nothing(bad, match):
    a, kw = _inputs("paged_append_causal")
    before = {name: a[name].copy() for name in ("k_cache", "v_cache")}
    args = bad(a)
    with pytest.raises(ValueError, match=match):
        flashcl.flash_attn_with_kvcache(**args, **kw)
    for name, x in before.items():
        np.testing.assert_array_equal(a[name], x)


def test_library_errors_name_the_field_and_write_nothing():
    """Values the library checks (page indices, leftpad) raise its InvalidArgumentError naming the field."""
    a, kw = _inputs("paged_append_causal")
    before = a["k_cache"].copy(), a["v_cache"].copy()
    bt = a["block_table"].copy()
    bt[1, 0] = 999
    with pytest.raises(flashcl.InvalidArgumentError, match=r"cache->block_table\[1\]\[0\] = 999"):
        flashcl.flash_attn_with_kvcache(**dict(a, block_table=bt), **kw)
    with pytest.raises(flashcl.InvalidArgumentError, match=r"cache->cache_leftpad\[0\] = 20"):
        flashcl.flash_attn_with_kvcache(**dict(a, cache_leftpad=np.array([20, 0], np.int32)), **kw)
    np.testing.assert_array_equal(a["k_cache"], before[0])
    np.testing.assert_array_equal(a["v_cache"], before[1])


def test_readonly_cache_with_append():
    a, kw = _inputs("paged_append_causal")
    a["k_cache"].flags.writeable = False
    with pytest.raises(ValueError, match="k_cache is read-only, but k and v are appended into it"):
        flashcl.flash_attn_with_kvcache(**a, **kw)


def test_torch_kinds_and_dtypes():
    torch = _torch()
    a, kw = _inputs("paged_append_causal", kind="torch")
    with pytest.raises(ValueError, match="mixed array kinds"):
        flashcl.flash_attn_with_kvcache(**dict(a, k_cache=a["k_cache"].numpy()), **kw)
    with pytest.raises(ValueError, match="cache_seqlens must have dtype int32, got int64"):
        flashcl.flash_attn_with_kvcache(**dict(a, cache_seqlens=a["cache_seqlens"].long()), **kw)
    before = a["k_cache"].clone()
    with pytest.raises(ValueError, match="block_table must have dtype int32"):
        flashcl.flash_attn_with_kvcache(**dict(a, block_table=a["block_table"].to(torch.int64)), **kw)
    assert torch.equal(a["k_cache"], before)


def test_softmax_scale_default_and_signature():
    import inspect

    sig = str(inspect.signature(flashcl.flash_attn_with_kvcache))
    assert sig.startswith("(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None, cache_seqlens=None, "
                          "cache_batch_idx=None, cache_leftpad=None, block_table=None, softmax_scale=None, "
                          "causal=False, window_size=(-1, -1), softcap=0.0, rotary_interleaved=True, "
                          "alibi_slopes=None, num_splits=0, return_softmax_lse=False")
    a, _ = _inputs("decode")
    np.testing.assert_array_equal(flashcl.flash_attn_with_kvcache(**a),
                                  flashcl.flash_attn_with_kvcache(**a, softmax_scale=1 / math.sqrt(D)))


def test_numpy_attention_reference_agrees():
    """The reference's decode path is numpy_attention over each sequence's keys (a self-check of the
    layout arithmetic in kvcache_attention against a direct slice)."""
    a, _ = _inputs("decode")
    out, lse, _, _ = kvcache_attention(**{k: f64(v) if k != "cache_seqlens" else v for k, v in a.items()})
    for i, n in enumerate(a["cache_seqlens"]):
        o, l = numpy_attention(f64(a["q"])[i:i + 1], f64(a["k_cache"])[i:i + 1, :n], f64(a["v_cache"])[i:i + 1, :n])
        np.testing.assert_allclose(out[i], o[0])
        np.testing.assert_allclose(lse[i], l[0])


def _paged_varlen_inputs(kind, seed=3):
    """Three sequences (one with no query rows) over a shuffled pool of 4-row pages, plus two q rows
    past cu_seqlens_q[-1] that belong to no sequence."""
    rng = np.random.default_rng(seed)
    lens_q, lens_k, page, hq, hkv = [3, 0, 5], [7, 4, 20], 4, 4, 2
    max_blocks = -(-max(lens_k) // page)
    num_blocks = 3 * max_blocks + 1
    table = rng.permutation(num_blocks)[:3 * max_blocks].reshape(3, max_blocks).astype(np.int32)
    cu_q = np.concatenate([[0], np.cumsum(lens_q)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(lens_k)]).astype(np.int32)
    q = rand(rng, (int(cu_q[-1]) + 2, hq, D), "float32", kind)
    k_pool, v_pool = (rand(rng, (num_blocks, page, hkv, D), "float32", kind) for _ in range(2))
    return q, k_pool, v_pool, cu_q, cu_k, table, lens_q, lens_k


@pytest.mark.parametrize("kind", ["numpy", "torch"])
@pytest.mark.parametrize("kw", [dict(causal=True), dict(window_size=(3, 1), softcap=5.0, alibi_slopes="h")],
                         ids=["causal", "window_softcap_alibi"])
def test_varlen_with_block_table(kind, kw):
    """flash_attn_varlen_func over a paged cache (chunked prefill): each sequence's queries against its
    first cu_seqlens_k-length rows of its pages, masks aligned bottom right per sequence."""
    q, k_pool, v_pool, cu_q, cu_k, table, lens_q, lens_k = _paged_varlen_inputs(kind)
    kw = dict(kw)
    if kw.get("alibi_slopes") == "h":
        kw["alibi_slopes"] = _like((0.5 ** (1 + np.arange(q.shape[1]))).astype(np.float32), kind)
    out, lse, s_dmask = flashcl.flash_attn_varlen_func(
        q, k_pool, v_pool, _like(cu_q, kind), _like(cu_k, kind), max(lens_q), max(lens_k),
        block_table=_like(table, kind), return_attn_probs=True, **kw)
    assert type(out) is type(q) and tuple(out.shape) == tuple(q.shape) and tuple(lse.shape) == (q.shape[1], q.shape[0])
    assert tuple(s_dmask.shape) == (0,)
    qn, kn, vn = f64(q), f64(k_pool), f64(v_pool)
    alibi = kw.get("alibi_slopes")
    for b in range(3):
        if not lens_q[b]:
            continue
        rows = slice(cu_q[b], cu_q[b + 1])
        keys = np.concatenate([kn[p] for p in table[b]])[:lens_k[b]]
        values = np.concatenate([vn[p] for p in table[b]])[:lens_k[b]]
        ref_out, ref_lse = numpy_attention(qn[None, rows], keys[None], values[None], causal=kw.get("causal", False),
                                           window=kw.get("window_size", (-1, -1)), softcap=kw.get("softcap", 0.0),
                                           alibi=None if alibi is None else f64(alibi))
        assert_close(out[rows], ref_out[0])
        assert_close(lse[:, rows], ref_lse[0], what="softmax_lse")
    np.testing.assert_array_equal(f64(out[cu_q[-1]:]), 0.0)  # rows of no sequence
    assert np.all(np.isneginf(f64(lse[:, cu_q[-1]:])))


def test_varlen_with_block_table_refusals():
    torch = _torch()
    q, k_pool, v_pool, cu_q, cu_k, table, lens_q, lens_k = _paged_varlen_inputs("torch")
    args = (q, k_pool, v_pool, torch.from_numpy(cu_q), torch.from_numpy(cu_k), 5, 20)
    with pytest.raises(ValueError, match="dropout_p"):
        flashcl.flash_attn_varlen_func(*args, dropout_p=0.1, block_table=torch.from_numpy(table))
    out = flashcl.flash_attn_varlen_func(q.clone().requires_grad_(), *args[1:], block_table=torch.from_numpy(table))
    with pytest.raises(NotImplementedError, match="no backward"):  # the forward runs; the backward is refused
        out.sum().backward()
    short = torch.from_numpy(np.ascontiguousarray(table[:, :2]))
    with pytest.raises(ValueError, match="sequence 2 has 20 keys"):
        flashcl.flash_attn_varlen_func(*args, block_table=short)
    with torch.no_grad():  # what inference runs: no error
        flashcl.flash_attn_varlen_func(*args, block_table=torch.from_numpy(table))
    with pytest.raises(ValueError, match="max_seqlen_q"):  # a sequence longer than max_seqlen_q, as the varlen path
        flashcl.flash_attn_varlen_func(q, k_pool, v_pool, *args[3:5], 4, 20, block_table=torch.from_numpy(table))


def test_varlen_with_block_table_more_queries_than_rows():
    """More query rows than the table's rows (8 against 2 keys in one 4-row page): a right window narrower than
    max_seqlen_k (5; flash_attn drops a side >= it) hides every key from the first rows, whatever the table's width."""
    rng = np.random.default_rng(11)
    q = rand(rng, (8, 2, 8))
    pool = rand(rng, (5, 4, 2, 8))
    cu_q, cu_k = np.array([0, 8], np.int32), np.array([0, 2], np.int32)
    ref, _ = numpy_attention(f64(q)[None], f64(pool)[0][None, :2], f64(pool)[0][None, :2], window=(-1, 4))
    for width in (1, 4):
        out = flashcl.flash_attn_varlen_func(q, pool, pool, cu_q, cu_k, 8, 5, window_size=(-1, 4),
                                             block_table=np.arange(width, dtype=np.int32)[None])
        assert_close(out, ref[0])
        np.testing.assert_array_equal(out[:2], 0.0)


def test_big_endian_tables(rng):
    """Integer tables in non-native byte order (int32 read from a big-endian file: dtype '>i4') are read by their
    values, as the float feature arrays (alibi_slopes, sinks, bias) already were: cache_seqlens, cache_batch_idx,
    cache_leftpad and block_table were refused ("must have dtype int32, got >i4"), and so were the paged varlen
    call's cu_seqlens. The result, the append and the caller's tables are those of native tables; a wider table
    is still refused by its dtype, naming it."""
    swapped = np.dtype(np.int32).newbyteorder("S")
    b, hq, hkv, s_new = 2, 4, 2, 2
    q, k, v = rand(rng, (b, 3, hq, D)), rand(rng, (b, s_new, hkv, D)), rand(rng, (b, s_new, hkv, D))
    contiguous = rand(rng, (3, 16, hkv, D))
    pool = rand(rng, (8, 4, hkv, D))
    tables = {
        "contiguous": (contiguous, dict(cache_seqlens=np.array([5, 9], np.int32),
                                        cache_batch_idx=np.array([2, 0], np.int32),
                                        cache_leftpad=np.array([1, 3], np.int32))),
        "paged": (pool, dict(cache_seqlens=np.array([6, 3], np.int32), block_table=np.array([[7, 0, 3], [5, 1, 2]],
                                                                                            np.int32))),
    }
    for name, (cache, native) in tables.items():
        want_k, want_v = cache.copy(), cache.copy()
        want = flashcl.flash_attn_with_kvcache(q, want_k, want_v, k, v, causal=True, return_softmax_lse=True,
                                               **native)
        be = {key: x.astype(swapped) for key, x in native.items()}
        got_k, got_v = cache.copy(), cache.copy()
        got = flashcl.flash_attn_with_kvcache(q, got_k, got_v, k, v, causal=True, return_softmax_lse=True, **be)
        for a, w in zip(got + (got_k, got_v), want + (want_k, want_v)):
            np.testing.assert_array_equal(a, w, err_msg=name)
        for key, x in be.items():  # the caller's tables as they were
            assert x.dtype == swapped and (x == native[key]).all()
        for key in native:
            wide = dict(native, **{key: native[key].astype(">i8")})
            with pytest.raises(ValueError, match=f"{key} must have dtype int32, got int64"):
                flashcl.flash_attn_with_kvcache(q, cache.copy(), cache.copy(), **wide)
    # paged varlen (chunked prefill): cu_seqlens and block_table
    x = rand(rng, (7, hq, D))
    cu_q, cu_k = np.array([0, 3, 7], np.int32), np.array([0, 9, 14], np.int32)
    table = np.array([[7, 0, 3], [5, 1, 2]], np.int32)
    want = flashcl.flash_attn_varlen_func(x, pool, pool, cu_q, cu_k, 4, 9, causal=True, block_table=table)
    got = flashcl.flash_attn_varlen_func(x, pool, pool, cu_q.astype(swapped), cu_k.astype(swapped), 4, 9, causal=True,
                                         block_table=table.astype(swapped))
    np.testing.assert_array_equal(got, want)
