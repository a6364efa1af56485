#!/usr/bin/env python3
"""Renders the PNGs of the README from committed bench output.

    python3 tools/plot.py --sweep docs/bench/pocl-sweep.json [more.json] [--peers docs/bench/pocl-torch.json]
                          [--decode docs/bench/pocl-decode.json] --prefix pocl --out docs/img

Inputs are JSON lines as `flashcl bench --sweep` writes them (one object per
path and pass, then a "summary" object per point) and, for peers, as
tools/bench_torch_sweep.py writes them (the same fields). Figures:

  <prefix>-time.png      ms per forward against N (log-log): flash, standard, peers
  <prefix>-tflops.png    TFLOP/s against N
  <prefix>-memory.png    extra device memory against N (log-log; measured
                         flashcl_context_scratch_bytes): standard's N^2 against flash's N
  <prefix>-roofline.png  the device's roofline from its measured roofs (compute:
                         roof_gflops, OpenBLAS SGEMM on a CPU or --peak-gflops; bandwidth:
                         read_gbps, the bench's read kernel) with each kernel at the
                         largest N both ran, placed by arithmetic intensity = FLOPs / HBM
                         bytes. HBM bytes, as the FlashAttention paper counts them: flash
                         reads Q and writes O once and streams K and V once per block of
                         Br query rows, Theta(N^2 d^2 / M) with Br ~ M/d (Br from the plan);
                         standard also writes and reads S and P (N^2 each).
  <prefix>-decode.png    decode GB/s against the context length, with the read roof

Rows of different problems at the same N are different lines: where the inputs mix causal and
non-causal rows, KV head counts or V head dims, each line's label names its own ("flash causal",
"flash hkv=2", "flash dv=64"), and the title names what all rows share (hkv, dv, causal).

matplotlib is an optional tool dependency (pip install matplotlib); the grouping above needs none.
"""
import argparse
import json
import math
import os

plt = None  # matplotlib.pyplot, imported by load_pyplot() when pictures are drawn


def load_pyplot():
    global plt
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as pyplot
    plt = pyplot


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                rows.append(json.loads(line))
    return rows


DTYPE_NAMES = {"float32": "f32", "f32": "f32", "float16": "f16", "f16": "f16", "bfloat16": "bf16", "bf16": "bf16"}


def dtype_of(r):
    return DTYPE_NAMES.get(r.get("dtype", "float32"), r.get("dtype"))


SHAPE_FIELDS = ("causal", "kv_heads", "head_dim_v")


def shape_of(r):
    """What makes rows of one N different problems besides the storage: causal, KV heads and V's head dim
    (files from before bench wrote kv_heads and head_dim_v, and peers', mean heads and head_dim)."""
    return {"causal": bool(r.get("causal")), "kv_heads": r.get("kv_heads", r.get("heads")),
            "head_dim_v": r.get("head_dim_v", r.get("head_dim"))}


def varying(rows):
    """The shape fields whose values differ between the rows: their lines are kept apart and named."""
    data = [shape_of(r) for r in rows if r.get("path") not in (None, "summary")]
    return tuple(k for k in SHAPE_FIELDS if len({d[k] for d in data}) > 1)


def shape_label(r, fields):
    words = []
    sh = shape_of(r)
    for k in fields:
        if k == "causal":
            words.append("causal" if sh[k] else "non-causal")
        else:
            words.append(f"{'hkv' if k == 'kv_heads' else 'dv'}={sh[k]}")
    return " ".join(words)


def series(rows, pas="fwd", key="seqlen", with_dtype=False, split=()):
    """{label: [(n, row)]} of the rows that ran, sorted by n. The label is the path, with the
    storage type when the picture mixes types (a 16-bit flash sweep is "flash+variants" to
    bench, since the type is its only variant), and the shape fields in split (varying(rows)),
    so that causal and non-causal rows (or other KV heads, other d_v) never share a line."""
    out = {}
    for r in rows:
        if r.get("path") in (None, "summary") or r.get("pass", "fwd") != pas or r.get("ms") in (None, 0):
            continue
        label = r["path"]
        if with_dtype:
            if label == "flash+variants" and r.get("features", "") in ("", "f16", "bf16"):
                label = "flash"
            label = f"{label} {dtype_of(r)}"
        if split:
            label = f"{label} {shape_label(r, split)}"
        out.setdefault(label, []).append((r[key], r))
    return {p: sorted(v, key=lambda t: t[0]) for p, v in out.items()}


def mixed_dtypes(rows):
    return len({dtype_of(r) for r in rows if r.get("path") not in (None, "summary")}) > 1


def title_of(rows):
    """The device and what every row shares: b, h, KV heads, d, V's head dim, storage, causal (a field
    that varies is left to the lines' labels)."""
    r = next((r for r in rows if r.get("path") not in (None, "summary")), {})
    kind = "" if mixed_dtypes(rows) else f" {r.get('dtype', 'float32')}"
    sh, split = shape_of(r), varying(rows)
    hkv = "" if "kv_heads" in split else f" hkv={sh['kv_heads']}"
    dv = "" if "head_dim_v" in split else f" dv={sh['head_dim_v']}"
    causal = " causal" if "causal" not in split and sh["causal"] else ""
    return (f"{r.get('device', '?')}: b={r.get('batch')} h={r.get('heads')}{hkv} d={r.get('head_dim')}{dv}"
            f"{kind}{causal}")


STYLE = {"flash": ("C0", "o"), "standard": ("C3", "s")}


def style(path, i):
    """Colour and marker: flash and standard keep theirs; a typed label ("flash bf16") its path's marker."""
    if " " not in path:
        return STYLE.get(path, (f"C{2 + i}", "^"))
    return f"C{2 + i}", STYLE.get(path.split()[0], (None, "^"))[1]


def finish(fig, ax, title, out, legend_size=None):
    """Every picture's title, grid and legend, then the PNG written and the figure closed."""
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=legend_size)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    print("wrote", out)


def plot_xy(all_series, field, ylabel, title, out, logy=True):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, (path, pts) in enumerate(all_series.items()):
        c, m = style(path, i)
        ax.plot([n for n, _ in pts], [r[field] for _, r in pts], marker=m, color=c, label=path)
    ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel("sequence length N")
    ax.set_ylabel(ylabel)
    finish(fig, ax, title, out)


def plot_memory(s, title, out):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, (path, pts) in enumerate(s.items()):
        pts = [(n, r) for n, r in pts if r.get("bytes_extra")]
        if not pts:
            continue
        c, m = style(path, i)
        ns = [n for n, _ in pts]
        ys = [r["bytes_extra"] for _, r in pts]
        ax.plot(ns, ys, marker=m, color=c, label=f"{path} (measured)")
        # The slope a path should have, through its first point: N for flash, N^2 for standard.
        k = 2 if path.split()[0] == "standard" else 1
        ax.plot(ns, [ys[0] * (n / ns[0]) ** k for n in ns], ls="--", color=c, alpha=0.5, label=f"~N^{k}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequence length N")
    ax.set_ylabel("extra device memory (bytes)")
    finish(fig, ax, title, out)


def hbm_bytes(path, r):
    """The model's HBM traffic of one forward (see the module docstring)."""
    b, h, n, nk, d = r["batch"], r["heads"], r["seqlen"], r["seqlen_k"], r["head_dim"]
    e = {"float32": 4, "f32": 4, "float16": 2, "f16": 2, "bfloat16": 2, "bf16": 2}.get(r.get("dtype"), 4)
    qo = 2 * b * h * n * d * e
    if path == "flash":
        br = max(1, r.get("block_rows") or 1)
        return qo + 2 * b * r.get("kv_heads", h) * nk * d * e * math.ceil(n / br)
    if path == "standard":
        return qo + 2 * b * h * nk * d * e + 4 * b * h * n * nk * 4  # S and P, each written and read, float32
    return None


def plot_roofline(rows, s, title, out, peak_arg):
    summary = [r for r in rows if r.get("path") == "summary"]
    # A roof is a maximum: on a shared machine the best of the measurements (one per point) is the nearest.
    peak = peak_arg or max((r["roof_gflops"] for r in summary if r.get("roof_gflops")), default=None)
    bw = max((r["read_gbps"] for r in summary if r.get("read_gbps")), default=None)
    if not peak or not bw:
        hints = [h for h, v in (("for the compute roof give plot.py --peak-gflops G, or sweep with --roof (OpenBLAS "
                                 "on a CPU)", peak), ("for the read rate sweep with --read-bw measure", bw)) if not v]
        print(f"skipped {out}: {'; '.join(hints)}")
        return
    fig, ax = plt.subplots(figsize=(7, 4.5))
    xs = [2 ** (i / 4) for i in range(-8, 48)]
    ax.plot(xs, [min(peak, x * bw) for x in xs], color="k", label=f"roofs: {peak:.0f} GFLOP/s, {bw:.0f} GB/s")
    common = None
    for path, pts in s.items():  # the lines of flash and standard (one per shape where the shapes vary)
        if path.split()[0] in ("flash", "standard"):
            ns = {n for n, _ in pts}
            common = ns if common is None else common & ns
    for i, (path, pts) in enumerate(s.items()):
        if path.split()[0] not in ("flash", "standard"):
            continue
        pick = [(n, r) for n, r in pts if not common or n == max(common)] or pts[-1:]
        n, r = pick[-1]
        hb = hbm_bytes(path.split()[0], r)
        ai = r["flops"] / hb
        c, m = style(path, i)
        ax.plot([ai], [r["gflops"]], marker=m, color=c, ms=9, ls="none",
                label=f"{path} N={n}: {ai:.1f} FLOP/B, {r['gflops']:.0f} GFLOP/s")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per HBM byte, model)")
    ax.set_ylabel("GFLOP/s")
    finish(fig, ax, title, out, legend_size=8)


def plot_decode(rows, title, out):
    s = series(rows, key="seqlen_k", split=varying(rows))
    summary = [r for r in rows if r.get("path") == "summary"]
    bw = max((r["read_gbps"] for r in summary if r.get("read_gbps")), default=None)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, (path, pts) in enumerate(s.items()):
        c, m = style(path, i)
        ax.plot([n for n, _ in pts], [r["gbps"] for _, r in pts], marker=m, color=c, label=path)
    if bw:
        ax.axhline(bw, color="k", ls="--", label=f"read roof {bw:.0f} GB/s (measured)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("context length (keys)")
    ax.set_ylabel("GB/s (Q, K, V, O once)")
    finish(fig, ax, title, out)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sweep", required=True, nargs="+",
                   help="flashcl bench --sweep JSON files (e.g. both paths to 2048, flash alone beyond)")
    p.add_argument("--peers", nargs="*", default=[], help="peer JSON lines (tools/bench_torch_sweep.py)")
    p.add_argument("--decode", help="flashcl bench --sweep JSON of a decode shape")
    p.add_argument("--peak-gflops", type=float, help="compute roof where the sweep has none (GPUs)")
    p.add_argument("--prefix", required=True)
    p.add_argument("--out", default="docs/img")
    a = p.parse_args()
    load_pyplot()
    os.makedirs(a.out, exist_ok=True)
    rows = [r for f in a.sweep for r in load(f)]
    peers = [r for f in a.peers for r in load(f)]
    mixed = mixed_dtypes(rows + peers)
    split = varying(rows + peers)
    s = series(rows, with_dtype=mixed, split=split)
    both = dict(s, **series(peers, with_dtype=mixed, split=split))
    t = title_of(rows + peers)
    o = lambda name: os.path.join(a.out, f"{a.prefix}-{name}.png")  # noqa: E731
    plot_xy(both, "ms", "ms per forward", t, o("time"))
    plot_xy(both, "tflops", "TFLOP/s", t, o("tflops"), logy=False)
    plot_memory(s, t, o("memory"))
    # The roofs are float32 ones (SGEMM, the FMA kernel): only the float32 kernels are placed.
    f32 = [r for r in rows if r.get("path") == "summary" or dtype_of(r) == "f32"]
    plot_roofline(rows, series(f32, split=varying(f32)), title_of(f32) if mixed else t, o("roofline"), a.peak_gflops)
    if a.decode:
        d = load(a.decode)
        plot_decode(d, title_of(d), o("decode"))


if __name__ == "__main__":
    main()
