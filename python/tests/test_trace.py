"""Context(profiling=True).trace_kernels(): the kernels a block of calls launched, with device times."""
import math

import numpy as np
import pytest

import flashcl
from conftest import rand


def test_trace_names_the_planned_kernels_with_times():
    rng = np.random.default_rng(3)
    q, k, v = rand(rng, (1, 33, 4, 32)), rand(rng, (1, 70, 2, 32)), rand(rng, (1, 70, 2, 32))
    ctx = flashcl.Context(profiling=True)
    assert ctx.profiling
    with ctx.trace_kernels() as trace:  # the block's calls run on ctx
        out = flashcl.flash_attn_func(q, k, v, causal=True)
        plan = flashcl.plan(q, k, v, causal=True)
        with pytest.raises(RuntimeError, match="already open"):
            ctx.trace_kernels().__enter__()
    with ctx:
        np.testing.assert_array_equal(out, flashcl.flash_attn_func(q, k, v, causal=True))  # traced = untraced
    names = [name for name, _ in trace.kernels]
    assert trace.launches == len(trace.kernels) >= 1
    assert plan["kernel"] in names, (plan["kernel"], names)
    assert all(math.isfinite(ms) and ms >= 0.0 for _, ms in trace.kernels)
    assert sum(ms for _, ms in trace.kernels) > 0.0  # times, not zeros
    totals = trace.by_kernel()
    assert list(totals) == list(dict.fromkeys(names)) and plan["kernel"] in repr(trace)
    assert math.isclose(sum(ms for ms, _ in totals.values()), sum(ms for _, ms in trace.kernels))
    assert sum(n for _, n in totals.values()) == trace.launches
    with ctx.trace_kernels() as again:  # a new block starts empty
        pass
    assert again.kernels == [] and again.launches == 0
    with pytest.raises(KeyError):  # an error in the block passes through; the trace stops
        with ctx.trace_kernels() as failed:
            flashcl.flash_attn_func(q, k, v)
            raise KeyError("the user's own")
    assert failed.kernels == [] and not ctx._tracing
    with ctx.trace_kernels() as after:
        flashcl.flash_attn_func(q, k, v)
    assert after.launches >= 1


def test_trace_needs_a_profiling_context():
    with pytest.raises(TypeError, match="profiling must be a bool"):
        flashcl.Context(profiling="yes")
    ctx = flashcl.Context()
    if ctx.profiling:
        pytest.skip("FLASHCL_PROFILING=1 gives every context a profiling queue")
    with pytest.raises(ValueError, match=r"Context\(profiling=True\)"):
        ctx.trace_kernels()
