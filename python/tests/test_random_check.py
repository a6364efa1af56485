"""tools/random_check.py, the randomized check users run on their own device, on a few of its cases:
the tool keeps working, and the cases it draws (shapes, head dims and options no other test names)
agree with the float64 reference."""
import os
import subprocess
import sys

import pytest

TOOL = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "random_check.py")


def test_random_cases_agree():
    pytest.importorskip("torch")
    pytest.importorskip("ml_dtypes")
    run = subprocess.run([sys.executable, TOOL, "--cases", "6", "--seed", "41"], capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "6/6 cases agree" in run.stdout


def test_window_wider_than_the_keys_is_dropped_in_the_reference():
    """A case whose window's right side (9) is at least max_seqlen_k (4) with more queries (20) than keys: the
    call drops it as flash_attn does, and the tool's reference did not (it hid every key from the first rows,
    a false "lse err inf" failure)."""
    pytest.importorskip("torch")
    pytest.importorskip("ml_dtypes")
    run = subprocess.run([sys.executable, TOOL, "--cases", "1", "--seed", "31345", "--kinds", "paged_varlen"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "'lens_q': [20], 'lens_k': [4]" in run.stdout and "'window': (40, 9)" in run.stdout, run.stdout
    assert "1/1 cases agree" in run.stdout


def test_random_extras_cases_agree():
    """The extras kind: flashcl.attention and its backward (autograd and attention_backward) with bias, masks,
    block masks, sinks, dropout, d_v != d, varlen among flash_attn's options, in all three dtypes."""
    pytest.importorskip("torch")
    pytest.importorskip("ml_dtypes")
    run = subprocess.run([sys.executable, TOOL, "--cases", "6", "--seed", "7", "--kinds", "extras"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "6/6 cases agree" in run.stdout
