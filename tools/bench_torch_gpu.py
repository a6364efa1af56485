#!/usr/bin/env python3
"""FlashCL next to PyTorch SDPA on the same GPU, in one process run.

Times torch.nn.functional.scaled_dot_product_attention with the FLASH
(FlashAttention-2), CUDNN and EFFICIENT backends, forward and forward+backward,
on the issue's shapes, then runs `flashcl bench --json --dtype bf16
--backward` (the library's own path: the tensor-core kernels where the plan
picks them) on the same shapes and prints FlashCL TF/s / torch FLASH TF/s,
and plain float32 `flashcl bench` next to torch EFFICIENT fp32.

    python3 tools/bench_torch_gpu.py --flashcl build/tools/flashcl [--mma-fwd 4:32:2:1 ...]

FLOPs as FlashAttention counts them (flashcl bench counts the same way):
forward 4*b*h*sq*sk*d (half when causal), forward+backward 3.5x the forward
(backward = 2.5x). Timing: torch, CUDA events, median of --iters runs after
warm-up; flashcl bench, wall clock over --iters calls enqueued back to back
(mean per call), fwd+bwd timed as pairs like torch's f().backward(g).
--mma-fwd runs the bf16 shapes again with FLASHCL_MMA_FWD set (forward
kernel shapes to compare; the library's table is the default run).
"""
import argparse
import json
import os
import subprocess
import sys

SHAPES = [  # (label, b, h, n, d, causal)
    ("b4 h16 N4096 d128", 4, 16, 4096, 128, False),
    ("b4 h16 N4096 d128 causal", 4, 16, 4096, 128, True),
    ("b1 h16 N16384 d128 causal", 1, 16, 16384, 128, True),
    ("b16 h16 N1024 d64", 16, 16, 1024, 64, False),
]


def fwd_flops(b, h, n, d, causal):
    return 4.0 * b * h * n * n * d * (0.5 if causal else 1.0)


def torch_times(iters):
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F

    def median_ms(fn):
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        ts = []
        for _ in range(iters):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            fn()
            e1.record()
            torch.cuda.synchronize()
            ts.append(e0.elapsed_time(e1))
        ts.sort()
        return ts[len(ts) // 2]

    out = {}
    backends = {"FLASH": SDPBackend.FLASH_ATTENTION, "CUDNN": SDPBackend.CUDNN_ATTENTION,
                "EFFICIENT": SDPBackend.EFFICIENT_ATTENTION}
    for label, b, h, n, d, causal in SHAPES:
        for dtype_name, dtype, names in (("bf16", torch.bfloat16, ("FLASH", "CUDNN")), ("fp32", torch.float32, ("EFFICIENT",))):
            if dtype_name == "fp32" and label != SHAPES[0][0]:
                continue
            q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3))
            g = torch.randn(b, h, n, d, device="cuda", dtype=dtype)
            for name in names:
                try:
                    with sdpa_kernel(backends[name]):
                        f = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                        ms_f = median_ms(f)
                        ms_fb = median_ms(lambda: f().backward(g))
                except RuntimeError as e:
                    print(f"torch {name} {dtype_name} {label}: not available ({str(e).splitlines()[0]})")
                    continue
                fl = fwd_flops(b, h, n, d, causal)
                out[(name, dtype_name, label)] = (fl / ms_f / 1e9, 3.5 * fl / ms_fb / 1e9)
                print(f"torch {name:9s} {dtype_name} {label:28s} fwd {fl / ms_f / 1e9:7.1f} TF/s   "
                      f"fwd+bwd {3.5 * fl / ms_fb / 1e9:7.1f} TF/s")
            del q, k, v, g
            torch.cuda.empty_cache()
    return out


def flashcl_cli(path, dtype, b, h, n, d, causal, backward, iters, env=None):
    cmd = [path, "bench", "--batch", str(b), "--heads", str(h), "--seqlen", str(n), "--head-dim", str(d),
           "--json", "--path", "flash", "--iters", str(iters)]
    if dtype != "fp32":
        cmd += ["--dtype", dtype, "--no-plain"]
    if causal:
        cmd.append("--causal")
    if backward:
        cmd.append("--backward")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        return None, r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"
    want = "flash" if dtype == "fp32" else "flash+variants"  # variants mode names the 16-bit run so
    res = {}
    for line in r.stdout.splitlines():
        try:
            o = json.loads(line)
        except ValueError:
            continue
        if o.get("path") == want and "tflops" in o:
            res[o.get("pass", "fwd")] = (o["tflops"], o.get("kernel", "?"))
    return res, None


def report_bf16(a, torch_res, tag, env):
    for label, b, h, n, d, causal in SHAPES:
        ref = torch_res.get(("FLASH", "bf16", label))
        got, err = flashcl_cli(a.flashcl, "bf16", b, h, n, d, causal, not a.no_backward, a.iters, env)
        if not got or "fwd" not in got:
            print(f"bf16 {label:28s} {tag} flashcl: {err}")
            continue
        fwd, kern = got["fwd"]
        line = f"bf16 {label:28s} {tag} fwd {fwd:6.1f} TF/s [{kern}]"
        if ref:
            line += f" ratio {fwd / ref[0]:.2f}"
        if "bwd" in got:
            line += f" | bwd {got['bwd'][0]:6.1f} [{got['bwd'][1]}]"
        fb = got.get("fwd+bwd")
        if fb:
            line += f" | fwd+bwd {fb[0]:6.1f} TF/s"
            if ref:
                line += f" ratio {fb[0] / ref[1]:.2f}"
        print(line, flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flashcl", required=True, help="path of the flashcl CLI")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--no-backward", action="store_true")
    ap.add_argument("--no-torch", action="store_true", help="FlashCL figures only (no ratios)")
    ap.add_argument("--mma-fwd", nargs="*", default=[], help="FLASHCL_MMA_FWD shapes W:BC:MT:QL to compare")
    a = ap.parse_args()
    torch_res = {} if a.no_torch else torch_times(a.iters)
    print("\nratio = FlashCL TF/s / torch FLASH (FlashAttention-2) TF/s, same GPU, same run", flush=True)
    report_bf16(a, torch_res, "table", None)
    for shape in a.mma_fwd:
        report_bf16(a, torch_res, shape, dict(os.environ, FLASHCL_MMA_FWD=shape))
    ref32 = torch_res.get(("EFFICIENT", "fp32", SHAPES[0][0]))
    _, b, h, n, d, causal = SHAPES[0]
    got, err = flashcl_cli(a.flashcl, "fp32", b, h, n, d, causal, False, a.iters)
    if got and "fwd" in got:
        line = f"fp32 {SHAPES[0][0]:28s} flashcl fwd {got['fwd'][0]:7.1f} TF/s [{got['fwd'][1]}]"
        if ref32:
            line += f"  ratio vs torch EFFICIENT fp32 {got['fwd'][0] / ref32[0]:.2f}"
        print(line)
    else:
        print(f"fp32: {err}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
