"""tools/plot.py's grouping of `flashcl bench --sweep` rows into lines and its titles (no matplotlib needed:
the pictures are not drawn). Rows of different problems at one N (causal and not, other KV heads, other
V head dims) must never share a line, and the title names the KV heads and d_v the rows share."""
import importlib.util
import os

PLOT = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "plot.py")


def load_plot():
    spec = importlib.util.spec_from_file_location("flashcl_tools_plot", PLOT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def row(n, causal=False, kv_heads=8, head_dim_v=64, path="flash", **extra):
    r = {"path": path, "pass": "fwd", "device": "dev", "batch": 1, "heads": 8, "kv_heads": kv_heads, "seqlen": n,
         "seqlen_k": n, "head_dim": 64, "head_dim_v": head_dim_v, "causal": causal, "dtype": "float32",
         "ms": float(n), "tflops": 1.0}
    r.update(extra)
    return r


def test_causal_and_non_causal_rows_are_separate_lines():
    plot = load_plot()
    rows = [row(n, causal=c) for c in (False, True) for n in (256, 512)] + [{"path": "summary"}]
    split = plot.varying(rows)
    s = plot.series(rows, split=split)
    assert split == ("causal",)
    assert sorted(s) == ["flash causal", "flash non-causal"]
    assert [r["causal"] for _, r in s["flash causal"]] == [True, True]
    assert [n for n, _ in s["flash non-causal"]] == [256, 512]
    title = plot.title_of(rows)
    assert "causal" not in title and "hkv=8" in title and "dv=64" in title


def test_kv_heads_and_head_dim_v_are_named():
    plot = load_plot()
    gqa = [row(n, kv_heads=2, head_dim_v=32, causal=True) for n in (256, 512)]
    assert plot.title_of(gqa) == "dev: b=1 h=8 hkv=2 d=64 dv=32 float32 causal"
    mixed = gqa + [row(n, kv_heads=8, head_dim_v=32, causal=True) for n in (256, 512)]
    s = plot.series(mixed, split=plot.varying(mixed))
    assert sorted(s) == ["flash hkv=2", "flash hkv=8"]
    title = plot.title_of(mixed)
    assert "hkv=" not in title and "dv=32" in title and title.endswith("causal")


def test_rows_without_the_newer_fields():
    """Files written before bench gave kv_heads and head_dim_v, and peers' rows: heads and head_dim."""
    plot = load_plot()
    old = [{k: v for k, v in row(n).items() if k not in ("kv_heads", "head_dim_v")} for n in (256, 512)]
    peers = [row(n, path="torch sdpa") for n in (256, 512)]
    assert plot.varying(old + peers) == ()
    assert plot.title_of(old) == "dev: b=1 h=8 hkv=8 d=64 dv=64 float32"
    assert sorted(plot.series(old + peers)) == ["flash", "torch sdpa"]
