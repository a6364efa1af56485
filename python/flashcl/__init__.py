"""FlashCL: exact FlashAttention on any OpenCL device, with FlashAttention-2's Python API.

    from flashcl import flash_attn_func
    out = flash_attn_func(q, k, v, causal=True)     # numpy arrays or torch tensors, (batch, seqlen, heads, dim)

See the README's "Python" section. FlashAttention-2's functions are in
flashcl.flash_attn_interface (also importable from here); FlashCL's own
features are attention(), attention_backward(), dropout_mask(), merge_states() and plan();
devices: devices(), Context, use_device(), FLASHCL_DEVICE; to_device() makes a DeviceArray
(a KV cache that stays on a discrete GPU between calls).
"""
from . import _context, _flashcl
from ._context import Context, current as current_context, use_device
from ._device import DeviceArray, to_device
from .errors import ArgumentTypeError, Error, InvalidArgumentError
from .extras import attention, attention_backward, dropout_mask, merge_states, plan
from .flash_attn_interface import (
    flash_attn_func,
    flash_attn_kvpacked_func,
    flash_attn_qkvpacked_func,
    flash_attn_varlen_func,
    flash_attn_varlen_kvpacked_func,
    flash_attn_varlen_qkvpacked_func,
    flash_attn_with_kvcache,
)

__version__ = _flashcl.version()
MAX_HEAD_DIM = _flashcl.MAX_HEAD_DIM


def devices():
    """The OpenCL devices: dicts with spec ("P:D", for Context and FLASHCL_DEVICE), name, vendor,
    platform, type and host_unified_memory. Empty when there is no OpenCL platform."""
    _context.driver_used()  # the driver is loaded now: a process forked later cannot use it
    return _flashcl.devices()


__all__ = [
    "ArgumentTypeError", "Context", "DeviceArray", "Error", "InvalidArgumentError", "MAX_HEAD_DIM", "attention",
    "attention_backward",
    "current_context",
    "devices", "dropout_mask", "flash_attn_func", "flash_attn_kvpacked_func", "flash_attn_qkvpacked_func",
    "flash_attn_varlen_func", "flash_attn_varlen_kvpacked_func", "flash_attn_varlen_qkvpacked_func",
    "flash_attn_with_kvcache", "merge_states", "plan", "to_device", "use_device",
]
