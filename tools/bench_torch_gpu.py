#!/usr/bin/env python3
"""FlashCL next to PyTorch SDPA on the same GPU, in one process run.

Times torch.nn.functional.scaled_dot_product_attention with the FLASH
(FlashAttention-2), CUDNN and EFFICIENT backends, forward and forward+backward,
on the issue's shapes, then runs `flashcl bench --json` (or, while the CLI
has no 16-bit storage, the kernel harness tools/mma_harness.c) on the same
shapes and prints FlashCL TF/s / torch FLASH TF/s.

    python3 tools/bench_torch_gpu.py --flashcl build/tools/flashcl [--harness /tmp/mh --cl cl]

FLOPs as FlashAttention counts them: forward 4*b*h*sq*sk*d (half when causal),
forward+backward 3.5x the forward (backward = 2.5x). Timing: CUDA events,
median of --iters runs after warm-up.
"""
import argparse
import json
import re
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


def flashcl_cli(path, dtype, b, h, n, d, causal, backward):
    cmd = [path, "bench", "--batch", str(b), "--heads", str(h), "--seqlen", str(n), "--head-dim", str(d),
           "--json", "--path", "flash"]
    if dtype != "fp32":
        cmd += ["--dtype", dtype]
    if causal:
        cmd.append("--causal")
    if backward:
        cmd.append("--backward")
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return None, r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"
    res = {}
    for line in r.stdout.splitlines():
        try:
            o = json.loads(line)
        except ValueError:
            continue
        if o.get("path") == "flash" and "tflops" in o:
            res[o.get("pass", "fwd")] = (o["tflops"], o.get("kernel", "?"))
    return res, None


def harness_fwd(harness, cl_dir):
    """Forward TF/s per shape from the kernel harness (bf16, the plan's variant 4:64:2)."""
    r = subprocess.run([harness, cl_dir, "4:64:2"], capture_output=True, text=True)
    print(r.stdout.strip().splitlines()[-1] if r.stdout.strip() else r.stderr)
    res = {}
    for line in r.stdout.splitlines():
        m = re.match(r"BENCH \S+ \S+ \S+ \S+ b(\d+) h(\d+) N(\d+) d(\d+) causal(\d): .* ([\d.]+) TF/s", line)
        if m:
            b, h, n, d, c, tf = m.groups()
            res[(int(b), int(h), int(n), int(d), c == "1")] = float(tf)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flashcl", help="path of the flashcl CLI")
    ap.add_argument("--harness", help="path of the built tools/mma_harness.c (fallback for bf16)")
    ap.add_argument("--cl", default="cl", help="kernel directory for the harness")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--no-backward", action="store_true")
    a = ap.parse_args()
    torch_res = torch_times(a.iters)
    hres = harness_fwd(a.harness, a.cl) if a.harness else {}
    print("\nratio = FlashCL TF/s / torch FLASH (FlashAttention-2) TF/s, same GPU, same run")
    for label, b, h, n, d, causal in SHAPES:
        ref = torch_res.get(("FLASH", "bf16", label))
        got, err = (flashcl_cli(a.flashcl, "bf16", b, h, n, d, causal, not a.no_backward) if a.flashcl else (None, "no --flashcl"))
        if got and "fwd" in got:
            fwd, kern = got["fwd"]
            line = f"bf16 {label:28s} flashcl fwd {fwd:7.1f} TF/s [{kern}]"
            if ref:
                line += f"  ratio {fwd / ref[0]:.2f}"
            fb = got.get("fwd+bwd") or got.get("total")
            if fb and ref:
                line += f"  fwd+bwd {fb[0]:7.1f} TF/s ratio {fb[0] / ref[1]:.2f}"
            print(line)
        else:
            key = (b, h, n, d, causal)
            if key in hres:
                line = f"bf16 {label:28s} harness fwd {hres[key]:7.1f} TF/s [flash_fwd_mma]"
                if ref:
                    line += f"  ratio {hres[key] / ref[0]:.2f}"
                print(line + f"  (flashcl CLI: {err})")
            else:
                print(f"bf16 {label:28s} flashcl: {err}")
    ref32 = torch_res.get(("EFFICIENT", "fp32", SHAPES[0][0]))
    if a.flashcl:
        _, b, h, n, d, causal = SHAPES[0]
        got, err = flashcl_cli(a.flashcl, "fp32", b, h, n, d, causal, False)
        if got and "fwd" in got and ref32:
            print(f"fp32 {SHAPES[0][0]:28s} flashcl fwd {got['fwd'][0]:7.1f} TF/s [{got['fwd'][1]}]  "
                  f"ratio vs torch EFFICIENT fp32 {got['fwd'][0] / ref32[0]:.2f}")
        else:
            print(f"fp32: {err}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
