"""Shared helpers: random inputs of each kind and dtype, and the tolerances.

Tolerances (see the README): float32 storage must match the float64
reference within 2e-5 * max(1, |ref|max) (FlashCL accumulates in float32;
the C suite's criterion is 1e-5 relative, gradients sum over more terms).
float16 and bfloat16 use FlashAttention's own criterion: the error against
the float64 reference at most twice that of a plain implementation in the
same storage type, plus 1e-5 (the rounding of P and of the output is what
both pay).
"""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

DTYPES = ["float32", "float16", "bfloat16"]


def np_dtype(name):
    if name == "bfloat16":
        ml_dtypes = pytest.importorskip("ml_dtypes")
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def rand(rng, shape, dtype="float32", kind="numpy", scale=1.0):
    """Random values rounded to `dtype`, as a numpy array or a torch tensor."""
    x = (rng.standard_normal(shape) * scale).astype(np.float32)
    if kind == "torch":
        import torch

        return torch.from_numpy(x).to(getattr(torch, dtype))
    return x.astype(np_dtype(dtype))


def f64(x):
    """Any array or tensor as a float64 numpy array."""
    if hasattr(x, "detach"):
        return x.detach().cpu().double().numpy()
    return np.asarray(x).astype(np.float64)


def max_err(a, b):
    a, b = f64(a), f64(b)
    both_inf = np.isinf(a) & np.isinf(b) & (np.sign(a) == np.sign(b))
    with np.errstate(invalid="ignore"):
        d = np.where(both_inf, 0.0, np.abs(a - b))
    if np.isnan(d).any():
        return float("inf")
    return float(d.max()) if d.size else 0.0


def assert_close(actual, ref, dtype="float32", baseline=None, what="out"):
    """actual vs the float64 ref; baseline: the same in the storage type (needed for float16/bfloat16)."""
    err = max_err(actual, ref)
    if dtype == "float32":
        tol = 2e-5 * max(1.0, float(np.nanmax(np.abs(np.where(np.isinf(f64(ref)), 0, f64(ref))))))
    else:
        assert baseline is not None, "float16/bfloat16 need the storage-type baseline"
        tol = 2 * max_err(baseline, ref) + 1e-5
    assert err <= tol, f"{what}: max error {err:.3g} > tolerance {tol:.3g} ({dtype})"


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
