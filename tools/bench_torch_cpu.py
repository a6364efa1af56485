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

Decode (--decode: one query row against a long KV cache, GQA; default
b1 hq32 hkv8 sk32768 d128 fp32, each size overridable, e.g. --seqlen-k 8192
on a small machine): forward only, torch SDPA (its default CPU kernel and the
MATH backend; GQA through enable_gqa, or K and V expanded to hq heads
beforehand where the torch version lacks it) next to `flashcl bench` on the
same shape. GB/s counts Q, K, V and O once (bytes of the storage type, K and V at hkv
heads) for both; %bw is flashcl's GB/s over the read bandwidth `flashcl bench`
measures on the device with all cores. The issue's POCL goals: >= 60% of that
read rate, and >= 3x torch's speed.

    python3 tools/bench_torch_cpu.py --decode [--seqlen-k 8192] [--no-torch]
"""
import argparse
import json
import os
import subprocess
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--decode", action="store_true",
                   help="decode preset: seqlen 1, seqlen-k 32768, heads 32, kv-heads 8, head-dim 128, forward only "
                        "(each overridable)")
    p.add_argument("--batch", type=int, default=None, help="default 1")
    p.add_argument("--heads", type=int, default=None, help="default 8 (32 with --decode)")
    p.add_argument("--kv-heads", type=int, default=None, help="default: --heads (8 with --decode)")
    p.add_argument("--seqlen", type=int, default=None, help="default 4096 (1 with --decode)")
    p.add_argument("--seqlen-k", type=int, default=None, help="default: --seqlen (32768 with --decode)")
    p.add_argument("--head-dim", type=int, default=None, help="default 64 (128 with --decode)")
    p.add_argument("--causal", action="store_true")
    p.add_argument("--dtype", choices=("f32", "f16", "bf16"), default="f32",
                   help="storage type of both sides (default f32); torch computes in it, FlashCL stores in it "
                        "and accumulates in float32 (flashcl bench --dtype, its flash+variants run)")
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
    p.add_argument("--no-torch", action="store_true", help="FlashCL's figures only")
    a = p.parse_args()
    preset = {"batch": 1, "heads": 32, "kv_heads": 8, "seqlen": 1, "seqlen_k": 32768, "head_dim": 128} if a.decode \
        else {"batch": 1, "heads": 8, "kv_heads": None, "seqlen": 4096, "seqlen_k": None, "head_dim": 64}
    for key, value in preset.items():
        if getattr(a, key) is None:
            setattr(a, key, value)
    if a.kv_heads is None:
        a.kv_heads = a.heads
    if a.seqlen_k is None:
        a.seqlen_k = a.seqlen
    if a.heads % a.kv_heads:
        p.error("--heads must be a multiple of --kv-heads")
    if a.decode or a.seqlen <= DECODE_MAX_SEQLEN_Q:
        a.no_backward = True  # decode is inference: the forward alone
    return a


# flashcl_forward runs its decode family (split-KV) up to this query length; GB/s is then the figure that counts.
DECODE_MAX_SEQLEN_Q = 16


ELEMENT_BYTES = {"f32": 4, "f16": 2, "bf16": 2}


def decode_bytes(a):
    """Q, K, V and O once each, in the storage type, as `flashcl bench` counts them."""
    return ELEMENT_BYTES[a.dtype] * (2 * a.batch * a.heads * a.seqlen * a.head_dim +
                                     2 * a.batch * a.kv_heads * a.seqlen_k * a.head_dim)


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
    # torch's own layout, its best case: q, dO [b, hq, sq, d]; k, v [b, hkv, sk, d].
    dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[a.dtype]
    q, dout = (torch.empty(a.batch, a.heads, a.seqlen, a.head_dim).uniform_(-1, 1).to(dtype) for _ in range(2))
    k, v = (torch.empty(a.batch, a.kv_heads, a.seqlen_k, a.head_dim).uniform_(-1, 1).to(dtype) for _ in range(2))
    return [q, k, v, dout]


def sdpa_call(a, q, k, v):
    """SDPA on q, k, v with GQA; how it was run ("gqa", "expanded" or "mha")."""
    import torch.nn.functional as F

    if a.heads == a.kv_heads:
        return (lambda: F.scaled_dot_product_attention(q, k, v, is_causal=a.causal)), "mha"
    try:
        F.scaled_dot_product_attention(q[:, :, :1], k[:, :, :1], v[:, :, :1], enable_gqa=True)
        return (lambda: F.scaled_dot_product_attention(q, k, v, is_causal=a.causal, enable_gqa=True)), "gqa"
    except TypeError:  # torch < 2.5: no enable_gqa; K and V repeated to hq heads once, outside the timing
        group = a.heads // a.kv_heads
        ke, ve = (t.repeat_interleave(group, dim=1) for t in (k, v))
        return (lambda: F.scaled_dot_product_attention(q, ke, ve, is_causal=a.causal)), "K/V expanded"


def torch_times(a, tensors):
    import torch

    q, k, v, dout = tensors
    out = {"version": torch.__version__, "threads": torch.get_num_threads()}
    with torch.no_grad():
        call, out["gqa"] = sdpa_call(a, q, k, v)
        out["fwd"] = time_torch(call, a.iters)
        if a.seqlen <= DECODE_MAX_SEQLEN_Q:
            from torch.nn.attention import SDPBackend, sdpa_kernel

            with sdpa_kernel(SDPBackend.MATH):
                out["fwd math"] = time_torch(call, a.iters)
    if not a.no_backward:
        qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
        call_g, _ = sdpa_call(a, qg, kg, vg)

        def pair():
            o = call_g()
            o.backward(dout)
            qg.grad = kg.grad = vg.grad = None

        out["fwd+bwd"] = time_torch(pair, a.iters)
    return out


def flashcl_times(a):
    """ms per pass from `flashcl bench --json`, and the roof it reports."""
    cmd = [a.flashcl, "bench", "--json", "--path", "flash", "--batch", str(a.batch), "--heads", str(a.heads),
           "--kv-heads", str(a.kv_heads), "--seqlen", str(a.seqlen), "--seqlen-k", str(a.seqlen_k), "--head-dim",
           str(a.head_dim), "--iters", str(a.iters)]
    if a.causal:
        cmd.append("--causal")
    if not a.no_backward:
        cmd.append("--backward")
    # Another storage type is a variant to bench: its run is "flash+variants"; the float32 one is skipped.
    path = "flash"
    if a.dtype != "f32":
        cmd += ["--dtype", a.dtype, "--no-plain"]
        path = "flash+variants"
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit("flashcl bench failed (%d): %s" % (run.returncode, run.stderr.strip()))
    out = {"roof": None, "read": None}
    for line in run.stdout.splitlines():
        obj = json.loads(line)
        if obj.get("path") == "summary":
            out["roof"] = obj.get("roof_gflops")
            out["read"] = obj.get("read_gbps")  # measured for decode shapes (null otherwise)
        elif obj.get("path") == path and "ms" in obj:
            out[obj.get("pass", "fwd")] = obj["ms"]
            out.setdefault("kernel", obj.get("kernel"))
            out.setdefault("bytes", obj.get("bytes"))
    return out


def report_decode(a, t, f):
    """GB/s of both sides from the same bytes, flashcl's %bw, and the speed ratio against torch's faster kernel."""
    nbytes = decode_bytes(a)
    if f.get("bytes") is not None and abs(f["bytes"] - nbytes) > 0.5:
        print("note: flashcl bench counted %d bytes, this script %d" % (f["bytes"], nbytes))
    read = f.get("read")
    print("problem  decode b%d hq%d hkv%d sq%d sk%d d%d %s; %s; flashcl kernel %s"
          % (a.batch, a.heads, a.kv_heads, a.seqlen, a.seqlen_k, a.head_dim, a.dtype,
             "torch %s on %d threads (%s)" % (t["version"], t["threads"], t["gqa"]) if t else "no torch",
             f.get("kernel")))
    print("read bw  %s" % ("%.1f GB/s (measured by flashcl bench on the device, all cores, best round)" % read
                           if read else "n/a"))
    print("%-22s %12s %10s %8s" % ("side", "ms", "GB/s", "%bw"))
    gb = lambda ms: nbytes / (ms * 1e-3) * 1e-9
    for name in ("fwd", "fwd math"):
        if name in t:
            label = "torch SDPA" + (" MATH" if name == "fwd math" else " (default)")
            print("%-22s %12.3f %10.2f %8s" % (label, t[name], gb(t[name]), "%.1f%%" % (100 * gb(t[name]) / read)
                                                if read else "n/a"))
    if "fwd" not in f:
        return
    pct = 100.0 * gb(f["fwd"]) / read if read else None
    print("%-22s %12.3f %10.2f %8s" % ("flashcl", f["fwd"], gb(f["fwd"]), "%.1f%%" % pct if pct else "n/a"))
    torch_best = min((t[k] for k in ("fwd", "fwd math") if k in t), default=None)
    if torch_best:
        print("ratio    %.2fx (torch's faster ms / flashcl ms); goal >= 3x" % (torch_best / f["fwd"]))
    if pct:
        print("%%bw      %.1f%% of the measured read rate; goal >= 60%%" % pct)


def main():
    a = parse_args()
    if not os.path.exists(a.flashcl):
        sys.exit("no flashcl binary at %s (build first, or pass --flashcl)" % a.flashcl)
    flops = 4.0 * a.batch * a.heads * a.seqlen * a.seqlen_k * a.head_dim * (0.5 if a.causal else 1.0)
    tensors = None if a.no_torch else torch_setup(a)
    t, f = {}, {}
    for _ in range(max(1, a.rounds)):
        # Each side's call runs inside its own turn, so the two never share the cores.
        sides = [(f, flashcl_times)] if a.no_torch else [(t, lambda a: torch_times(a, tensors)), (f, flashcl_times)]
        for side, measure in sides:
            for key, value in measure(a).items():
                if key in ("fwd", "fwd+bwd", "bwd", "fwd math"):
                    side[key] = min(side.get(key, value), value)
                elif key in ("roof", "read"):
                    if value is not None:  # a round without one keeps the best so far
                        side[key] = max(side.get(key) or value, value)
                else:
                    side[key] = value
    if a.seqlen <= DECODE_MAX_SEQLEN_Q:
        report_decode(a, t, f)
        return
    if a.no_torch:
        print("flashcl fwd %.1f ms%s" % (f["fwd"], ", fwd+bwd %.1f ms" % f["fwd+bwd"] if "fwd+bwd" in f else ""))
        return
    print("problem  b%d h%d N%d d%d %s %s; torch %s on %d threads; flashcl kernel %s"
          % (a.batch, a.heads, a.seqlen, a.head_dim, a.dtype, "causal" if a.causal else "non-causal", t["version"],
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
