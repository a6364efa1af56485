"""flashcl.DeviceArray: an array that stays on the OpenCL device between calls.

For KV caches on a device that does not share host memory (a discrete GPU).
flash_attn_with_kvcache with numpy or CPU-tensor caches must copy the whole
cache to the device and, when it appends, back again on every call, because
the kernels cannot read host memory there; with DeviceArray caches only q, the
new rows and the output cross. The append happens in the DeviceArray's buffer.

    k_cache = flashcl.to_device(np.zeros((batch, capacity, heads_kv, d), np.float16))
    out = flash_attn_with_kvcache(q, k_cache, v_cache, k=k, v=v, cache_seqlens=lens)
    k_cache.numpy()          # read back when wanted

A DeviceArray belongs to the flashcl.Context that made it (by default this
thread's), and calls must run on that context. On devices that share host
memory (POCL, integrated GPUs) numpy caches are already used in place.
"""
from . import _arrays, _context


class DeviceArray:
    """A C-contiguous array in a device buffer of its own: shape, dtype (the source array's),
    context, nbytes; numpy() or to_host() read it back."""

    __slots__ = ("_resident", "_template", "shape", "dtype", "context")

    def __init__(self, resident, template, shape, context):
        self._resident, self._template, self.shape, self.context = resident, template, shape, context
        self.dtype = template.dtype

    @property
    def nbytes(self):
        return self._resident.nbytes

    @property
    def ndim(self):
        return len(self.shape)

    def to_host(self):
        """A new host array of the kind it was made from (numpy, or a CPU tensor) holding its values."""
        out = _arrays.empty(self._template, self.shape)
        self.context._c.from_device(self._resident, _arrays.raw_bits(out))
        return out

    def numpy(self):
        """Its values as a numpy array (made from a tensor: the tensor's numpy view)."""
        out = self.to_host()
        return out if not _arrays.is_torch(out) else _to_numpy(out)

    def __repr__(self):
        return f"flashcl.DeviceArray(shape={self.shape}, dtype={self.dtype}, device={self.context.device_name!r})"


def _to_numpy(t):
    """A CPU tensor as numpy (bfloat16 and fp8 through ml_dtypes, which numpy needs for them)."""
    name = _arrays.dtype_name(t)
    if name == "bfloat16" or name in _arrays._FP8_NAMES:
        try:
            import ml_dtypes
        except ImportError as e:
            raise ImportError(f"DeviceArray.numpy(): a {name} array needs the ml_dtypes package (numpy has no {name} "
                              "of its own): pip install ml_dtypes, or flashcl[bfloat16]; to_host() gives the torch "
                              "tensor without it") from e

        torch = _arrays.torch_module()
        bits = t.view(torch.int16 if name == "bfloat16" else torch.uint8).numpy()
        return bits.view(getattr(ml_dtypes, name))
    return t.numpy()


def to_device(x, context=None):
    """A DeviceArray holding a copy of x (a numpy array or a torch tensor, any dtype; a tensor on
    another torch device goes through host memory), on `context` (default: this thread's)."""
    _arrays.kind_check([("x", x)], required=("x",))
    _arrays.refuse_no_data([("x", x)])
    ctx = _context.resolve(context)
    x = _arrays.host(x)
    if _arrays.is_torch(x):
        x = x.detach().contiguous()
        template = x.reshape(-1)[:0].clone()
    else:
        import numpy as np

        # Numbers in native byte order (bfloat16 and float8 through ml_dtypes): what the extension can take
        # and a cache can be (its dtype must be q's); others failed there with a TypeError naming nothing.
        plain = x.dtype.kind in "biufc" or x.dtype.name in ("bfloat16",) + _arrays._FP8_NAMES
        if not plain or not x.dtype.isnative:
            raise ValueError(f"x has dtype {x.dtype}: to_device takes numbers in native byte order")
        x = np.ascontiguousarray(x)
        template = x.reshape(-1)[:0].copy()
    shape = tuple(int(n) for n in x.shape)
    if not 1 <= len(shape) <= 4 or 0 in shape:
        raise ValueError(f"to_device takes arrays of 1 to 4 dimensions, none of them 0; got shape {shape}")
    return DeviceArray(ctx._c.to_device(_arrays.raw_bits(x)), template, shape, ctx)
