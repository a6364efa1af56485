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
