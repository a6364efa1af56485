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
from reference import f64, max_err, tolerance  # noqa: E402,F401  (re-exported for the tests)

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


def assert_close(actual, ref, dtype="float32", baseline=None, what="out"):
    """actual vs the float64 ref; baseline: the same in the storage type (needed for float16/bfloat16)."""
    err, tol = max_err(actual, ref), tolerance(ref, dtype, baseline)
    assert err <= tol, f"{what}: max error {err:.3g} > tolerance {tol:.3g} ({dtype})"


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
