"""The Python binding's overhead: flash_attn_func against `flashcl bench` at the same (small) shape.

    .venv/bin/python tools/bench_python.py [--batch 1] [--heads 8] [--seqlen 128] [--head-dim 64] [--causal]

Prints the mean time per call of the C tool (calls enqueued back to back,
one clFinish per chunk), of the extension called directly (one set of
zero-copy buffers, a map/unmap of the outputs and a clFinish per call), and
of flash_attn_func on numpy arrays and on torch tensors (no grad, and the
forward of an autograd call): the differences are the binding's overhead.
Float32 storage, as the C bench. Interleaved rounds, best of each.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

import flashcl
from flashcl import _core


def per_call(fn, seconds=0.5):
    fn()
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        fn()
        n += 1
    return (time.perf_counter() - start) / n


def c_bench(args, tool):
    cmd = [tool, "bench", "--path", "flash", "--json", "--batch", str(args.batch), "--heads", str(args.heads),
           "--seqlen", str(args.seqlen), "--head-dim", str(args.head_dim)] + (["--causal"] if args.causal else [])
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return None, (r.stderr or r.stdout).strip()
    for line in r.stdout.splitlines():
        row = json.loads(line)
        if row.get("path") == "flash" and "ms" in row:
            return row["ms"] / 1e3, ""
    return None, "no flash row in its output"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--seqlen", type=int, default=128)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tool", default=os.path.join(os.path.dirname(__file__), "..", "build", "tools", "flashcl"))
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    shape = (args.batch, args.seqlen, args.heads, args.head_dim)
    q, k, v = (rng.uniform(-1, 1, shape).astype(np.float32) for _ in range(3))
    spec = _core.Spec(causal=args.causal)
    _, desc = _core.prepare(q, k, v, spec)
    out, lse = np.empty_like(q), np.empty((args.batch, args.heads, args.seqlen), np.float32)
    ext = flashcl.current_context()._c
    runs = {
        "extension call (_flashcl)": lambda: ext.forward(desc, q, k, v, out, lse),
        "flash_attn_func, numpy": lambda: flashcl.flash_attn_func(q, k, v, causal=args.causal),
    }
    try:
        import torch

        tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
        gq, gk, gv = (x.clone().requires_grad_() for x in (tq, tk, tv))

        def no_grad():
            with torch.no_grad():
                flashcl.flash_attn_func(tq, tk, tv, causal=args.causal)

        runs["flash_attn_func, torch (no grad)"] = no_grad
        runs["flash_attn_func, torch (autograd forward)"] = lambda: flashcl.flash_attn_func(gq, gk, gv,
                                                                                             causal=args.causal)
    except ImportError:
        pass
    best = {name: float("inf") for name in runs}
    c_best, c_note = float("inf"), ""
    for _ in range(args.rounds):
        c, c_note = c_bench(args, args.tool)
        if c is not None:
            c_best = min(c_best, c)
        for name, fn in runs.items():
            best[name] = min(best[name], per_call(fn))
    print(f"shape b{args.batch} h{args.heads} s{args.seqlen} d{args.head_dim}{' causal' if args.causal else ''}, "
          f"float32, {flashcl.current_context().device_name}")
    base = c_best if c_best != float("inf") else None
    if base is None:
        print(f"  flashcl bench (C):  n/a ({c_note})")
    else:
        print(f"  {'flashcl bench (C, back to back)':45s} {base * 1e6:9.1f} us")
    for name, t in best.items():
        extra = f"  (+{(t - base) * 1e6:.1f} us)" if base else ""
        print(f"  {name:45s} {t * 1e6:9.1f} us{extra}")


if __name__ == "__main__":
    sys.exit(main())
