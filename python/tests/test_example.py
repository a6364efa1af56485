"""The README's example runs and prints what it says."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_example_runs():
    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "python_attention.py")], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "numpy: (2, 100, 8, 64) float32 lse (2, 8, 100)" in r.stdout and "varlen: (100, 8, 64)" in r.stdout
    assert "decode: (2, 1, 8, 64) cache rows [102, 102]" in r.stdout
