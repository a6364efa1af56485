"""numpy arrays and PyTorch tensors, seen the same way.

A call takes either numpy arrays or PyTorch tensors and returns the same
kind. Neither library is imported here unless the caller already uses it:
torch is looked up in sys.modules, ml_dtypes (numpy's bfloat16) only when a
bfloat16 array appears.
"""
import sys

import numpy as np

from . import _flashcl
from .errors import ArgumentTypeError

# Storage codes of the C descriptor (flashcl_dtype) by dtype name; the same
# names in numpy (ml_dtypes adds "bfloat16") and in torch ("torch.float16").
_STORAGE = {"float32": _flashcl.DTYPE_F32, "float16": _flashcl.DTYPE_F16, "bfloat16": _flashcl.DTYPE_BF16}


def torch_module():
    """torch if the program has imported it, else None (we never import it ourselves)."""
    return sys.modules.get("torch")


def is_torch(x):
    torch = torch_module()
    return torch is not None and isinstance(x, torch.Tensor)


_NAMES = {}  # dtype object -> name; str(dtype) is slow enough to show in a call's overhead


def dtype_name(x):
    """'float32', 'float16', 'bfloat16', ... for an array or a tensor."""
    dt = x.dtype
    name = _NAMES.get(dt)
    if name is None:
        name = str(dt)
        name = _NAMES[dt] = name[6:] if name.startswith("torch.") else name
    return name


def storage_code(name, x):
    """The C storage code for q/k/v's dtype; ValueError naming the argument otherwise."""
    code = _STORAGE.get(dtype_name(x))
    if code is None:
        swapped = isinstance(x, np.ndarray) and not x.dtype.isnative
        note = f" (in non-native byte order: pass {name}.astype({name}.dtype.newbyteorder('=')))" if swapped else ""
        raise ValueError(f"{name} has dtype {dtype_name(x)}; FlashCL stores float32, float16 or bfloat16{note}")
    return code


def kind_check(names_values, required=()):
    """All given arrays are numpy or all are torch tensors; returns True for torch. None stands for an absent
    optional array, except for the names in `required` (q, k, v, ...), where it is refused by name as any other
    non-array is (the calls failed later with an AttributeError naming nothing). A wrong kind is an
    ArgumentTypeError (a TypeError and the ValueError it used to be)."""
    for name, x in names_values:
        if x is None and name in required:
            raise ArgumentTypeError(f"{name} must be a numpy array or a torch tensor, not None")
    kinds = {name: is_torch(x) for name, x in names_values if x is not None}
    for name, x in names_values:  # (first: a list beside tensors is no numpy array, as "mixed kinds" would say)
        if x is not None and not kinds[name] and not isinstance(x, np.ndarray):
            raise ArgumentTypeError(f"{name} must be a numpy array or a torch tensor, not {type(x).__name__}")
    if len(set(kinds.values())) > 1:
        torch_names = [n for n, t in kinds.items() if t]
        other = [n for n, t in kinds.items() if not t]
        raise ValueError(f"mixed array kinds: {', '.join(torch_names)} are torch tensors, {', '.join(other)} are not")
    torch_kind = any(kinds.values())
    if torch_kind:
        strided = torch_module().strided
        for name, x in names_values:
            if x is not None and x.layout != strided:
                raise ValueError(f"{name} is a {x.layout} tensor; FlashCL takes dense (torch.strided) tensors")
    return torch_kind


def rows_contiguous(x):
    """An array the library only reads, with its last dimension packed: x itself, or a copy where that dimension
    is strided (or, numpy, any stride is negative), as flash_attn's maybe_contiguous copies; the library reads
    each row as packed elements. Also a copy where rows overlap: a dimension before the heads (batch,
    sequence, qkv's parts) strided less than a row, as torch's expand and numpy's broadcast_to make, which the
    library refuses (a zero head stride it reads as it is). Outputs and caches written in place are never
    copied: those are refused by name instead (a copy would take the results)."""
    if is_torch(x):
        if not x.ndim or x.is_contiguous():  # (first: no sizes read, which torch.jit.trace would record)
            return x
        strided_last = x.stride(-1) != 1 and x.shape[-1] > 1
        row = x.shape[-1]
        overlapping = any(x.shape[i] > 1 and x.stride(i) < row for i in range(x.ndim - 2))
        return x.contiguous() if strided_last or overlapping else x
    if isinstance(x, np.ndarray) and x.ndim and (
            (x.shape[-1] > 1 and x.strides[-1] != x.itemsize) or any(s < 0 for s in x.strides) or
            any(x.shape[i] > 1 and x.strides[i] < x.shape[-1] * x.itemsize for i in range(x.ndim - 2))):
        return np.ascontiguousarray(x)
    return x


def holds_no_data(x):
    """A meta tensor or a fake one (FakeTensorMode): shapes only. Never while torch.compile traces (its
    example values are fake, but a call that breaks the graph runs on the real tensors)."""
    torch = torch_module()
    if torch is None or not isinstance(x, torch.Tensor) or torch.compiler.is_compiling():
        return False
    from torch._subclasses.fake_tensor import is_fake

    return x.device.type == "meta" or is_fake(x)


def refuse_no_data(names_values):
    """Meta tensors and fake ones (FakeTensorMode) hold no data: the calls without a fake kernel (the KV cache,
    paged varlen, merge_states, attention_backward, dropout_mask, plan, to_device) refuse them by name, where the
    extension would read a fake tensor's null pointer and a host copy of a meta tensor fails naming nothing. Not
    while torch.compile traces (its example values are fake; such a call breaks the graph and runs eagerly)."""
    torch = torch_module()
    if torch is None or torch.compiler.is_compiling():
        return
    from torch._subclasses.fake_tensor import is_fake

    for name, x in names_values:
        if isinstance(x, torch.Tensor):
            if x.device.type == "meta":
                raise ValueError(f"{name} is on device meta, which holds no data")
            if is_fake(x):
                raise ValueError(f"{name} is a fake tensor (FakeTensorMode), which holds no data")


def raw(x):
    """What the extension reads: host memory with a dtype nanobind understands.

    numpy has no bfloat16 of its own: ml_dtypes' bfloat16 arrays go as their
    16-bit patterns (a view, no copy). Tensors are detached (DLPack refuses
    tensors that require grad; the memory is the same) and must be on the CPU
    by now (see host()).
    """
    if x is None:
        return None
    if isinstance(x, np.ndarray):
        return x.view(np.uint16) if x.dtype.name == "bfloat16" else x
    return x.detach()


_FP8_NAMES = ("float8_e4m3fn", "float8_e5m2")

# What the extension takes for each array-valued feature (its own error messages say the same).
FEATURE_DTYPES = {"alibi_slopes": "float32", "sinks": "float32", "bias": "float32", "mask": "bool or uint8",
                  "block_mask": "bool or uint8", "cu_seqlens_q": "int32", "cu_seqlens_k": "int32"}


def native(x):
    """x, or for a numpy array in non-native byte order (read from a big-endian file, say) a native copy of the
    same values and dtype (the extension's array conversion refuses such arrays with a TypeError naming no
    argument; the checks would name its dtype '>i4' where int32 is meant)."""
    if isinstance(x, np.ndarray) and not x.dtype.isnative:
        return x.astype(x.dtype.newbyteorder("="))
    return x


def raw_feature(name, x):
    """raw(x) for an array-valued feature (FEATURE_DTYPES): a numpy array in non-native byte order (read
    from a big-endian file, say) becomes a native copy, as its values are what counts (the extension's
    array conversion refuses it with a TypeError naming no argument); a dtype that is no plain number
    (object, strings, dates, structured, bfloat16, float8, complex) is refused naming the argument."""
    if x is None or not isinstance(x, np.ndarray):
        return raw(x)
    if x.dtype.kind not in "biuf":
        raise ValueError(f"{name} has dtype {x.dtype}, expected {FEATURE_DTYPES[name]}")
    return native(x)


def raw_bits(x):
    """raw(x), with 8-bit floats (which the extension does not know as floats) as their bytes: a view,
    so that a write through it (an append into an fp8 cache) lands in x."""
    if dtype_name(x) in _FP8_NAMES:
        return x.view(np.uint8) if isinstance(x, np.ndarray) else x.detach().view(torch_module().uint8)
    return raw(x)


def to_numpy(x):
    """A numpy array of x's values (a tensor detached and copied to host memory; an array as is)."""
    return x if isinstance(x, np.ndarray) else x.detach().cpu().numpy()


def host(x):
    """A tensor on another device (CUDA, MPS, XPU, ...) is copied to host memory."""
    if x is not None and is_torch(x) and x.device.type != "cpu":
        return x.cpu()
    return x


def to_device_of(like, *results):
    """The results (computed in host memory) moved to the device of `like`, a tensor on CUDA, MPS, ...;
    as they are for numpy inputs and CPU tensors."""
    if like is None or not is_torch(like) or like.device.type == "cpu":
        return results
    return tuple(None if x is None else x.to(like.device) for x in results)


def empty(like, shape, dtype=None):
    """An uninitialised array of `like`'s kind (in host memory) and dtype (or one named)."""
    if isinstance(like, np.ndarray):
        return np.empty(shape, dtype=like.dtype if dtype is None else np.dtype(dtype))
    torch = torch_module()
    dt = like.dtype if dtype is None else getattr(torch, dtype)
    return torch.empty(shape, dtype=dt, device="cpu")


def zeros(like, shape, dtype=None):
    out = empty(like, shape, dtype)
    out[...] = 0
    return out
