"""FlashCL from Python: FlashAttention-2's API on numpy arrays and PyTorch tensors.

    .venv/bin/python examples/python_attention.py      (after bash tools/setup.sh)

Run by the test suite (python/tests/test_example.py).
"""
import numpy as np

import flashcl
from flashcl import flash_attn_func, flash_attn_varlen_func  # as from flash_attn

ctx = flashcl.current_context()  # this thread's default: FLASHCL_DEVICE, else the first GPU, else any device
print(f"device: {ctx.device_name} ({ctx.platform_name}), zero-copy: {ctx.zero_copy}")

# numpy: (batch, seqlen, heads, head_dim), GQA with 8 query heads on 2 K/V heads.
rng = np.random.default_rng(0)
q = rng.standard_normal((2, 100, 8, 64), dtype=np.float32)
k = rng.standard_normal((2, 120, 2, 64), dtype=np.float32)
v = rng.standard_normal((2, 120, 2, 64), dtype=np.float32)
out, lse, _ = flash_attn_func(q, k, v, causal=True, window_size=(32, 0), softcap=30.0, return_attn_probs=True)
print("numpy:", out.shape, out.dtype, "lse", lse.shape)

# Variable-length batch: three sequences packed in one (total, heads, dim) array.
cu = np.array([0, 30, 70, 100], np.int32)
out = flash_attn_varlen_func(q[0], k[0, :100], v[0, :100], cu, cu, 40, 40, causal=True)
print("varlen:", out.shape)

# FlashCL's own features: sinks, a boolean mask, a block-sparse mask.
mask = np.tril(np.ones((100, 120), bool), k=20)
out = flashcl.attention(q, k, v, sinks=np.zeros(8, np.float32), mask=mask)
print("mask + sinks:", out.shape, "plan:", flashcl.plan(q, k, v, causal=True)["kernel"])

# Decoding: the KV cache as DeviceArrays stays on the device (on a discrete GPU only q, the new
# rows and the output cross per step); flash_attn_with_kvcache appends k, v into it in place.
k_cache, v_cache = (flashcl.to_device(np.zeros((2, 256, 2, 64), np.float32)) for _ in range(2))
lens = np.zeros(2, np.int32)
for step_rows in (100, 1, 1):  # a prefill, then two decode steps
    q_step = rng.standard_normal((2, step_rows, 8, 64), dtype=np.float32)
    k_step, v_step = (rng.standard_normal((2, step_rows, 2, 64), dtype=np.float32) for _ in range(2))
    out = flashcl.flash_attn_with_kvcache(q_step, k_cache, v_cache, k=k_step, v=v_step, cache_seqlens=lens, causal=True)
    lens += step_rows
print("decode:", out.shape, "cache rows", lens.tolist(), "cache back on the host", k_cache.numpy().shape)

try:
    import torch
except ImportError:
    torch = None
if torch is not None:
    # PyTorch: same call, tensors back, differentiable.
    qt, kt, vt = (torch.from_numpy(x).to(torch.bfloat16).requires_grad_() for x in (q, k, v))
    out = flash_attn_func(qt, kt, vt, causal=True, dropout_p=0.1)
    out.float().square().mean().backward()
    print("torch:", out.dtype, "dq", tuple(qt.grad.shape))
