#!/usr/bin/env python3
"""FlashCL against PyTorch's CPU attention, same shapes, same thread count, one run.

Times torch.nn.functional.scaled_dot_product_attention on the CPU (forward,
and forward+backward), then runs `flashcl bench --json --path flash` (with
--backward for the pair) through subprocess, and prints both with the ratio
torch ms / FlashCL ms (above 1: FlashCL is faster). The two sides run in
turns, --rounds times, and each side's best round counts.

PyTorch is a benchmark dependency only; FlashCL never needs it to build or
test. Install it into a virtual environment outside the repository, e.g.

    python3 -m venv /work/venv-torch && /work/venv-torch/bin/pip install torch
    /work/venv-torch/bin/python tools/bench_torch_cpu.py --seqlen 4096 [--causal]

FLOPs are counted as `flashcl bench` counts them: 4*b*h*sq*sk*d forward
(halved when causal), 3.5 times that for forward+backward.
"""
import argparse
import json
import os
import subprocess
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--seqlen", type=int, default=4096)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--threads", type=int, default=os.cpu_count(),
                   help="torch.set_num_threads; POCL uses every core (default: all cores)")
    p.add_argument("--iters", type=int, default=2, help="timed calls per side and round (default 2)")
    p.add_argument("--rounds", type=int, default=3,
                   help="rounds of torch then FlashCL; the best round of each counts (default 3): "
                        "on a shared machine the best of interleaved rounds is the fairest figure")
    p.add_argument("--flashcl", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build",
                                                     "tools", "flashcl"),
                   help="the flashcl binary (default: build/tools/flashcl)")
    p.add_argument("--no-backward", action="store_true", help="forward only")
    return p.parse_args()


def time_torch(fn, iters):
    """Mean ms of `iters` calls after one warm-up call."""
    fn()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) * 1e3 / iters


def torch_setup(a):
    import torch

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    shape = (a.batch, a.heads, a.seqlen, a.head_dim)  # torch's own layout, its best case
    return [torch.empty(shape).uniform_(-1, 1) for _ in range(4)]


def torch_times(a, tensors):
    import torch
    import torch.nn.functional as F

    q, k, v, dout = tensors
    out = {"version": torch.__version__, "threads": torch.get_num_threads()}
    with torch.no_grad():
        out["fwd"] = time_torch(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=a.causal), a.iters)
    if not a.no_backward:
        qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))

        def pair():
            o = F.scaled_dot_product_attention(qg, kg, vg, is_causal=a.causal)
            o.backward(dout)
            qg.grad = kg.grad = vg.grad = None

        out["fwd+bwd"] = time_torch(pair, a.iters)
    return out


def flashcl_times(a):
    """ms per pass from `flashcl bench --json`, and the roof it reports."""
    cmd = [a.flashcl, "bench", "--json", "--path", "flash", "--batch", str(a.batch), "--heads", str(a.heads),
           "--seqlen", str(a.seqlen), "--head-dim", str(a.head_dim), "--iters", str(a.iters)]
    if a.causal:
        cmd.append("--causal")
    if not a.no_backward:
        cmd.append("--backward")
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit("flashcl bench failed (%d): %s" % (run.returncode, run.stderr.strip()))
    out = {"roof": None}
    for line in run.stdout.splitlines():
        obj = json.loads(line)
        if obj.get("path") == "summary":
            out["roof"] = obj.get("roof_gflops")
        elif obj.get("path") == "flash" and "ms" in obj:
            out[obj.get("pass", "fwd")] = obj["ms"]
            out.setdefault("kernel", obj.get("kernel"))
    return out


def main():
    a = parse_args()
    if not os.path.exists(a.flashcl):
        sys.exit("no flashcl binary at %s (build first, or pass --flashcl)" % a.flashcl)
    flops = 4.0 * a.batch * a.heads * a.seqlen * a.seqlen * a.head_dim * (0.5 if a.causal else 1.0)
    tensors = torch_setup(a)
    t, f = {}, {}
    for _ in range(max(1, a.rounds)):
        for side, got in ((t, torch_times(a, tensors)), (f, flashcl_times(a))):
            for key, value in got.items():
                if key in ("fwd", "fwd+bwd", "bwd"):
                    side[key] = min(side.get(key, value), value)
                elif key == "roof" and value is not None:
                    side[key] = max(side.get(key) or value, value)
                else:
                    side[key] = value
    print("problem  b%d h%d N%d d%d fp32 %s; torch %s on %d threads; flashcl kernel %s"
          % (a.batch, a.heads, a.seqlen, a.head_dim, "causal" if a.causal else "non-causal", t["version"],
             t["threads"], f.get("kernel")))
    roof = f.get("roof")
    print("roof     %s" % ("%.1f GFLOP/s (flashcl bench's SGEMM roof, best round)" % roof if roof else "n/a"))
    print("%-8s %12s %12s %12s %12s %9s %s" % ("pass", "torch ms", "torch GF/s", "flashcl ms", "flashcl GF/s",
                                             "ratio", "flashcl %roof"))
    for name, mult in (("fwd", 1.0), ("fwd+bwd", 3.5)):
        if name not in t or name not in f:
            continue
        tg = flops * mult / (t[name] * 1e-3) * 1e-9
        fg = flops * mult / (f[name] * 1e-3) * 1e-9
        pct = "%.1f%%" % (100.0 * fg / roof) if roof else "n/a"
        print("%-8s %12.1f %12.1f %12.1f %12.1f %8.2fx %s" % (name, t[name], tg, f[name], fg, t[name] / f[name], pct))
    print("ratio = torch ms / flashcl ms (above 1: FlashCL is faster)")


if __name__ == "__main__":
    main()
