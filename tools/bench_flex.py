#!/usr/bin/env python3
"""FlashCL next to FlexAttention and PyTorch SDPA on the shapes models run (issue 14), one process.

For each case: torch.compile'd flex_attention with the same score_mod (softcap)
and block mask (causal, sliding window) as the FlashCL call, SDPA's FLASH
(FlashAttention-2) and CUDNN backends where the case is plain or causal, then
`flashcl bench --json --dtype bf16 --no-plain` with the same options. Times are
medians of CUDA events (torch) and the mean wall clock of back-to-back calls
(flashcl bench); the ratio printed is peer ms / FlashCL ms (> 1: FlashCL is
faster). TF/s counts 4*b*hq*sq*sk*d (half when causal) for every side, as
`flashcl bench` does, so a window's skipped work is not credited to anyone.

    python3 tools/bench_flex.py --flashcl build-gpu/tools/flashcl [--backward] [--cases 0,2]
"""
import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_torch_gpu import bench_json_passes, median_ms_cuda  # noqa: E402

# (label, b, hq, hkv, n, d, causal, softcap, window_left)  window_left -1: none
CASES = [
    ("b4 h16 N4096 d256", 4, 16, 16, 4096, 256, False, 0.0, -1),
    ("Gemma-2: b2 hq16 hkv8 N8192 d256 causal softcap50 window4095", 2, 16, 8, 8192, 256, True, 50.0, 4095),
    ("b2 hq16 hkv8 N8192 d128 causal window4095", 2, 16, 8, 8192, 128, True, 0.0, 4095),
    ("b2 hq16 hkv8 N8192 d128 causal softcap30", 2, 16, 8, 8192, 128, True, 30.0, -1),
    ("b2 hq32 hkv8 N8192 d128 causal", 2, 32, 8, 8192, 128, True, 0.0, -1),
    ("b4 h16 N4096 d128", 4, 16, 16, 4096, 128, False, 0.0, -1),
]


def flops(b, hq, n, d, causal):
    f = 4.0 * b * hq * n * n * d
    return f / 2 if causal else f


def torch_case(case, iters, backward):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    label, b, hq, hkv, n, d, causal, cap, wl = case
    q = torch.randn(b, hq, n, d, device="cuda", dtype=torch.bfloat16, requires_grad=backward)
    k, v = (torch.randn(b, hkv, n, d, device="cuda", dtype=torch.bfloat16, requires_grad=backward) for _ in range(2))
    g = torch.randn(b, hq, n, d, device="cuda", dtype=torch.bfloat16)
    out = {}

    def mask_mod(bb, hh, qi, kj):
        ok = qi >= kj if causal else qi >= 0
        if wl >= 0:
            ok = ok & (qi - kj <= wl)
        return ok

    def softcap(score, bb, hh, qi, kj):
        return cap * torch.tanh(score / cap)

    flex = torch.compile(flex_attention, dynamic=False)
    bm = create_block_mask(mask_mod, None, None, n, n) if (causal or wl >= 0) else None
    f = lambda: flex(q, k, v, score_mod=softcap if cap > 0 else None, block_mask=bm, enable_gqa=hq != hkv)
    out["flex"] = (median_ms_cuda(f, iters), median_ms_cuda(lambda: f().backward(g), iters) if backward else None)
    if cap == 0 and wl < 0:
        ke, ve = (x.repeat_interleave(hq // hkv, dim=1).detach().requires_grad_(backward) for x in (k, v))
        for name, be in (("FA2", SDPBackend.FLASH_ATTENTION), ("cuDNN", SDPBackend.CUDNN_ATTENTION)):
            try:
                with sdpa_kernel(be):
                    fs = lambda: F.scaled_dot_product_attention(q, ke, ve, is_causal=causal)
                    out[name] = (median_ms_cuda(fs, iters),
                                 median_ms_cuda(lambda: fs().backward(g), iters) if backward else None)
            except RuntimeError as e:
                print(f"  torch {name} {label}: not available ({str(e).splitlines()[0]})")
    del q, k, v, g
    torch.cuda.empty_cache()
    return out


def flashcl_case(path, case, iters, backward):
    label, b, hq, hkv, n, d, causal, cap, wl = case
    cmd = [path, "bench", "--json", "--path", "flash", "--dtype", "bf16", "--no-plain", "--iters", str(iters),
           "--batch", str(b), "--heads", str(hq), "--kv-heads", str(hkv), "--seqlen", str(n), "--head-dim", str(d)]
    if causal:
        cmd.append("--causal")
    if cap > 0:
        cmd += ["--softcap", str(cap)]
    if wl >= 0:
        cmd += ["--window", f"{wl},0" if causal else f"{wl},-1"]
    if backward:
        cmd.append("--backward")
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print(f"  flashcl {label}: failed: {r.stderr.strip()[-400:]}")
        return None
    return bench_json_passes(r.stdout, "flash+variants", "ms")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flashcl", required=True, help="path to the flashcl tool")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--backward", action="store_true", help="also forward+backward")
    ap.add_argument("--cases", default="", help="comma-separated case indices (default: all)")
    ap.add_argument("--no-torch", action="store_true", help="FlashCL only")
    a = ap.parse_args()
    picked = [CASES[int(i)] for i in a.cases.split(",")] if a.cases else CASES
    for case in picked:
        label, b, hq, hkv, n, d, causal = case[:7]
        fl = flops(b, hq, n, d, causal)
        peers = {} if a.no_torch else torch_case(case, a.iters, a.backward)
        mine = flashcl_case(a.flashcl, case, a.iters, a.backward) or {}
        print(f"{label}")
        for name, (ms_f, ms_fb) in peers.items():
            line = f"  {name:8s} fwd {ms_f:8.3f} ms {fl / ms_f / 1e9:6.1f} TF/s"
            if ms_fb:
                line += f" | fwd+bwd {ms_fb:8.3f} ms {3.5 * fl / ms_fb / 1e9:6.1f} TF/s"
            print(line)
        if "fwd" in mine:
            ms, kern = mine["fwd"]
            line = f"  FlashCL  fwd {ms:8.3f} ms {fl / ms / 1e9:6.1f} TF/s [{kern}]"
            line += "".join(f"  {ms_f / ms:.2f}x {name}" for name, (ms_f, _) in peers.items())
            print(line)
        if "fwd+bwd" in mine:
            ms, kern = mine["fwd+bwd"]
            line = f"  FlashCL  fwd+bwd {ms:8.3f} ms {3.5 * fl / ms / 1e9:6.1f} TF/s [{kern}]"
            line += "".join(f"  {ms_fb / ms:.2f}x {name}" for name, (_, ms_fb) in peers.items() if ms_fb)
            print(line)
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
