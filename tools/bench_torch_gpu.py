#!/usr/bin/env python3
"""FlashCL next to PyTorch SDPA on the same GPU, in one process run.

Times torch.nn.functional.scaled_dot_product_attention with the FLASH
(FlashAttention-2), CUDNN and EFFICIENT backends, forward and forward+backward,
on the issue's shapes, then runs `flashcl bench --json --dtype bf16
--backward` (the library's own path: the tensor-core kernels where the plan
picks them) on the same shapes and prints FlashCL TF/s / torch FLASH TF/s,
and float32 `flashcl bench --allow-tf32 --backward` (exact float32 and TF32
in one process) next to torch EFFICIENT fp32 on the shapes with d <= 128
(--fp32-only: just these).

    python3 tools/bench_torch_gpu.py --flashcl build/tools/flashcl [--mma-fwd 4:32:2:1 ...]

FLOPs as FlashAttention counts them (flashcl bench counts the same way):
forward 4*b*h*sq*sk*d (half when causal), forward+backward 3.5x the forward
(backward = 2.5x). Timing: torch, CUDA events, median of --iters runs after
warm-up; flashcl bench, wall clock over --iters calls enqueued back to back
(mean per call), fwd+bwd timed as pairs like torch's f().backward(g).
--mma-fwd runs the bf16 shapes again with FLASHCL_MMA_FWD set (forward
kernel shapes to compare; the library's table is the default run).

Decode (one query row against a long KV cache, bf16, GQA hq=32 hkv=8 d=128,
--decode-only to run just these): torch SDPA FLASH / CUDNN / EFFICIENT on
q [b, 32, 1, 128] against k, v [b, 8, sk, 128] (enable_gqa; where a backend
refuses it, K and V expanded to 32 heads beforehand, outside the timing), and
flash_attn_with_kvcache when the flash_attn package is installed; then
`flashcl bench --json` on the same shape: the contiguous forward (GB/s and %bw
against the read bandwidth the bench measures on the device), paged caches of
16 and 256 rows a page (cost = paged ms / contiguous ms) and an fp8_e4m3 cache
(key rate against the bf16 one). GB/s counts Q, K, V and O once (2 bytes an
element, K and V at hkv heads) for every side, whatever a backend reads.
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
    ("b4 h16 N4096 d256", 4, 16, 4096, 256, False),
]


# The shapes float32 runs on (TF32 covers d <= 128).
FP32_LABELS = ("b4 h16 N4096 d128", "b4 h16 N4096 d128 causal", "b16 h16 N1024 d64")

DECODE_SHAPES = [  # (label, b, hq, hkv, sk, d)
    ("b1 hq32 hkv8 sk32768 d128", 1, 32, 8, 32768, 128),
    ("b32 hq32 hkv8 sk8192 d128", 32, 32, 8, 8192, 128),
]

# The goals for the decode shapes on an H200, printed next to the figures.
DECODE_GOALS = {"gbps_b1": 3000.0, "bw_percent_b1": 70.0, "vs_cudnn_b32": 0.9, "paged_cost": 1.10, "fp8_rate": 1.7}


def decode_bytes(b, hq, hkv, sk, d, elem=2):
    """Q, K, V and O once each, as `flashcl bench` counts them."""
    return float(elem) * (2 * b * hq * d + 2 * b * sk * hkv * d)


def fwd_flops(b, h, n, d, causal):
    return 4.0 * b * h * n * n * d * (0.5 if causal else 1.0)


def torch_times(iters, fp32_only=False):
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F

    out = {}
    backends = {"FLASH": SDPBackend.FLASH_ATTENTION, "CUDNN": SDPBackend.CUDNN_ATTENTION,
                "EFFICIENT": SDPBackend.EFFICIENT_ATTENTION}
    for label, b, h, n, d, causal in SHAPES:
        for dtype_name, dtype, names in (("bf16", torch.bfloat16, ("FLASH", "CUDNN")), ("fp32", torch.float32, ("EFFICIENT",))):
            if (dtype_name == "fp32" and label not in FP32_LABELS) or (dtype_name == "bf16" and fp32_only):
                continue
            q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3))
            g = torch.randn(b, h, n, d, device="cuda", dtype=dtype)
            for name in names:
                try:
                    with sdpa_kernel(backends[name]):
                        f = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                        ms_f = median_ms_cuda(f, iters)
                        ms_fb = median_ms_cuda(lambda: f().backward(g), iters)
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


def median_ms_cuda(fn, iters):
    import torch

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


def torch_decode_times(iters):
    """ms per decode call for each SDPA backend (and flash_attn_with_kvcache), per decode shape."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F

    backends = {"FLASH": SDPBackend.FLASH_ATTENTION, "CUDNN": SDPBackend.CUDNN_ATTENTION,
                "EFFICIENT": SDPBackend.EFFICIENT_ATTENTION}
    out = {}
    for label, b, hq, hkv, sk, d in DECODE_SHAPES:
        q = torch.randn(b, hq, 1, d, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(b, hkv, sk, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        expanded = None
        for name, backend in backends.items():
            how = "gqa"
            try:
                with sdpa_kernel(backend):
                    f = lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
                    ms = median_ms_cuda(f, iters)
            except (RuntimeError, TypeError):
                # This backend (or torch version) takes no GQA: K and V repeated to hq heads, not timed.
                try:
                    if expanded is None:
                        expanded = tuple(t.repeat_interleave(hq // hkv, dim=1) for t in (k, v))
                    ke, ve = expanded
                    with sdpa_kernel(backend):
                        ms = median_ms_cuda(lambda: F.scaled_dot_product_attention(q, ke, ve), iters)
                    how = "K/V expanded to hq heads"
                except RuntimeError as e:
                    print(f"torch {name} decode {label}: not available ({str(e).splitlines()[0]})")
                    continue
            out[(name, label)] = (ms, how)
        try:
            from flash_attn import flash_attn_with_kvcache

            qf = q.transpose(1, 2).contiguous()  # [b, 1, hq, d]
            kc, vc = (t.transpose(1, 2).contiguous() for t in (k, v))  # [b, sk, hkv, d]
            lens = torch.full((b,), sk, dtype=torch.int32, device="cuda")
            ms = median_ms_cuda(lambda: flash_attn_with_kvcache(qf, kc, vc, cache_seqlens=lens), iters)
            out[("flash_attn_with_kvcache", label)] = (ms, "contiguous cache")
            del qf, kc, vc
        except ImportError:
            pass
        except RuntimeError as e:
            print(f"flash_attn_with_kvcache {label}: failed ({str(e).splitlines()[0]})")
        del q, k, v, expanded
        torch.cuda.empty_cache()
    return out


def flashcl_decode(path, b, hq, hkv, sk, d, iters, extra):
    """`flashcl bench --json` on a decode shape: {path name: row} and the summary, or (None, error)."""
    cmd = [path, "bench", "--batch", str(b), "--heads", str(hq), "--kv-heads", str(hkv), "--seqlen", "1",
           "--seqlen-k", str(sk), "--head-dim", str(d), "--dtype", "bf16", "--json", "--iters", str(iters)] + extra
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return None, r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"
    rows, summary = {}, {}
    for line in r.stdout.splitlines():
        try:
            o = json.loads(line)
        except ValueError:
            continue
        if o.get("path") == "summary":
            summary = o
        elif "ms" in o:
            rows[o["path"]] = o
    return (rows, summary), None


def fmt_pct(x):
    return "n/a" if x is None else f"{x:.1f}%"


def report_decode(a, torch_dec):
    print("\ndecode, bf16: GB/s counts Q, K, V, O once (the same bytes for every side); "
          "%bw = GB/s / the read bandwidth flashcl bench measures on the device", flush=True)
    for label, b, hq, hkv, sk, d in DECODE_SHAPES:
        nbytes = decode_bytes(b, hq, hkv, sk, d)
        best = None
        for (name, lab), (ms, how) in sorted(torch_dec.items()):
            if lab != label:
                continue
            gbps = nbytes / (ms * 1e-3) * 1e-9
            print(f"decode {label:27s} torch {name:24s} {ms:8.4f} ms {gbps:8.1f} GB/s ({how})")
            if name != "flash_attn_with_kvcache" and (best is None or ms < best[1]):
                best = (name, ms)
        # Contiguous: bf16 flash alone (the variant mode's row); then the caches next to it in one process each.
        got, err = flashcl_decode(a.flashcl, b, hq, hkv, sk, d, a.iters, ["--no-plain", "--read-bw", "measure"])
        if got is None:
            print(f"decode {label:27s} flashcl: {err}")
            continue
        rows, summary = got
        row = rows.get("flash+variants")
        if row is None:
            print(f"decode {label:27s} flashcl: no result row")
            continue
        line = (f"decode {label:27s} flashcl {'contiguous':18s} {row['ms']:8.4f} ms {row['gbps']:8.1f} GB/s, "
                f"{fmt_pct(row.get('bw_percent'))} of {summary.get('read_gbps') or float('nan'):.0f} GB/s read "
                f"[{row.get('kernel')}]")
        if best:
            line += f"; {best[1] / row['ms']:.2f}x torch {best[0]}'s speed"
        cudnn = torch_dec.get(("CUDNN", label))
        if cudnn:
            line += f"; {cudnn[0] / row['ms']:.2f}x cuDNN's"
        print(line, flush=True)
        for extra, what in ((["--page-size", "16"], "paged 16"), (["--page-size", "256"], "paged 256"),
                            (["--cache-dtype", "fp8_e4m3"], "fp8_e4m3 cache")):
            got, err = flashcl_decode(a.flashcl, b, hq, hkv, sk, d, a.iters, extra + ["--read-bw", "off"])
            if got is None:
                print(f"decode {label:27s} flashcl {what}: {err}")
                continue
            rows, summary = got
            kv = rows.get("kvcache")
            if kv is None or summary.get("cost") is None:
                print(f"decode {label:27s} flashcl {what}: no result")
                continue
            print(f"decode {label:27s} flashcl {what:18s} {kv['ms']:8.4f} ms {kv['gbps']:8.1f} GB/s, "
                  f"cost {summary['cost']:.2f}x contiguous, key rate {summary.get('key_rate_ratio') or 0:.2f}x",
                  flush=True)
    g = DECODE_GOALS
    print(f"goals (H200): b1 >= {g['gbps_b1']:.0f} GB/s and >= {g['bw_percent_b1']:.0f}% of the read rate; "
          f"b32 >= {g['vs_cudnn_b32']}x cuDNN; paged cost <= {g['paged_cost']}x; fp8 key rate >= {g['fp8_rate']}x")


def flashcl_cli(path, dtype, b, h, n, d, causal, backward, iters, env=None):
    cmd = [path, "bench", "--batch", str(b), "--heads", str(h), "--seqlen", str(n), "--head-dim", str(d),
           "--json", "--path", "flash", "--iters", str(iters)]
    if dtype == "tf32":
        cmd.append("--allow-tf32")  # the plain run stays exact float32: both in one process
    elif dtype != "fp32":
        cmd += ["--dtype", dtype, "--no-plain"]
    if causal:
        cmd.append("--causal")
    if backward:
        cmd.append("--backward")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        return None, r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"
    if dtype == "tf32":
        return {"exact": bench_json_passes(r.stdout, "flash", "tflops"),
                "tf32": bench_json_passes(r.stdout, "flash+variants", "tflops")}, None
    want = "flash" if dtype == "fp32" else "flash+variants"  # variants mode names the 16-bit run so
    return bench_json_passes(r.stdout, want, "tflops"), None


def bench_json_passes(stdout, path, field):
    """`flashcl bench --json` output -> {pass: (field's value, kernel)} for the rows of `path`."""
    res = {}
    for line in stdout.splitlines():
        try:
            o = json.loads(line)
        except ValueError:
            continue
        if o.get("path") == path and field in o:
            res[o.get("pass", "fwd")] = (o[field], o.get("kernel", "?"))
    return res


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


def report_fp32(a, torch_res):
    print("\nfloat32: FlashCL exact (portable kernels) and TF32 (allow_tf32) TF/s; ratio = FlashCL / torch "
          "EFFICIENT fp32, same GPU, same run", flush=True)
    for label, b, h, n, d, causal in SHAPES:
        if label not in FP32_LABELS:
            continue
        ref = torch_res.get(("EFFICIENT", "fp32", label))
        got, err = flashcl_cli(a.flashcl, "tf32", b, h, n, d, causal, not a.no_backward, a.iters)
        if not got:
            print(f"fp32 {label:28s} flashcl: {err}")
            continue
        for mode in ("exact", "tf32"):
            line = f"fp32 {label:28s} {mode:5s}"
            for i, pass_ in enumerate(("fwd", "fwd+bwd")):
                r = got[mode].get(pass_)
                if not r:
                    continue
                line += f" | {pass_} {r[0]:6.1f} TF/s [{r[1]}]"
                if ref:
                    line += f" ratio {r[0] / ref[i]:.2f}"
            print(line, flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flashcl", required=True, help="path of the flashcl CLI")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--no-backward", action="store_true")
    ap.add_argument("--no-torch", action="store_true", help="FlashCL figures only (no ratios)")
    ap.add_argument("--mma-fwd", nargs="*", default=[], help="FLASHCL_MMA_FWD shapes W:BC:MT:QL to compare")
    ap.add_argument("--no-decode", action="store_true", help="skip the decode shapes")
    ap.add_argument("--decode-only", action="store_true", help="only the decode shapes")
    ap.add_argument("--fp32-only", action="store_true", help="only the float32 (exact and TF32) shapes")
    a = ap.parse_args()
    if not a.no_decode and not a.fp32_only:
        report_decode(a, {} if a.no_torch else torch_decode_times(a.iters))
    if a.decode_only:
        return 0
    torch_res = {} if a.no_torch else torch_times(a.iters, a.fp32_only)
    if not a.fp32_only:
        print("\nratio = FlashCL TF/s / torch FLASH (FlashAttention-2) TF/s, same GPU, same run", flush=True)
        report_bf16(a, torch_res, "table", None)
        for shape in a.mma_fwd:
            report_bf16(a, torch_res, shape, dict(os.environ, FLASHCL_MMA_FWD=shape))
    report_fp32(a, torch_res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
