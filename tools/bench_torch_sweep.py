#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention over the sweep of `flashcl bench
--sweep` (same batch, heads, head dim, causal; powers of two of N), as JSON
lines in the bench's own fields ("path": "torch sdpa", "pass": "fwd",
"seqlen", "ms", "tflops", "flops"), for tools/plot.py to draw next to FlashCL.

    python3 tools/bench_torch_sweep.py --device cpu --out docs/bench/pocl-torch.json
    python3 tools/bench_torch_sweep.py --device cuda --dtype bf16 --out h200-torch.json

FLOPs as flashcl counts them: 4*b*h*N*N*d, halved when causal. A point is
not started when the last one, times 4, would pass --max-seconds. PyTorch is
a benchmark dependency only.
"""
import argparse
import json
import time

import torch
import torch.nn.functional as F


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--dtype", default="f32", choices=["f32", "f16", "bf16"])
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--min", type=int, default=256)
    p.add_argument("--max", type=int, default=65536)
    p.add_argument("--max-seconds", type=float, default=120.0, help="per point (default 120)")
    p.add_argument("--iters", type=int, default=3, help="timed calls per point, best counts (default 3)")
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads on the CPU (0: torch's default)")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    dt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[a.dtype]
    dev = torch.device(a.device)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    rows = []
    n = a.min
    while n <= a.max:
        t0 = time.perf_counter()
        try:
            q, k, v = (torch.rand(a.batch, a.heads, n, a.head_dim, device=dev, dtype=dt) * 2 - 1 for _ in range(3))
            best = float("inf")
            for i in range(a.iters + 1):  # the first call warms up
                if dev.type == "cuda":
                    torch.cuda.synchronize()
                s = time.perf_counter()
                F.scaled_dot_product_attention(q, k, v, is_causal=a.causal)
                if dev.type == "cuda":
                    torch.cuda.synchronize()
                if i:
                    best = min(best, time.perf_counter() - s)
            del q, k, v
        except (RuntimeError, MemoryError) as e:  # out of memory: the sweep ends here
            print(f"n={n}: {e.__class__.__name__}: stopping")
            break
        flops = 4.0 * a.batch * a.heads * n * n * a.head_dim * (0.5 if a.causal else 1.0)
        row = {"path": "torch sdpa", "pass": "fwd", "device": name, "torch": torch.__version__, "batch": a.batch,
               "heads": a.heads, "seqlen": n, "seqlen_k": n, "head_dim": a.head_dim, "causal": a.causal,
               "dtype": a.dtype, "ms": best * 1e3, "flops": flops, "tflops": flops / best * 1e-12}
        rows.append(row)
        print(json.dumps(row))
        took = time.perf_counter() - t0
        if took * 4 > a.max_seconds:
            print(f"n={n} took {took:.1f} s: the next would pass --max-seconds {a.max_seconds}")
            break
        n *= 2
    with open(a.out, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
