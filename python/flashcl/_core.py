"""One attention call: FlashAttention-2's arguments checked and turned into a
FlashCL descriptor, outputs allocated, the extension called.

Works on numpy arrays and CPU tensors alike (no autograd here: _torch.py
builds that on top). Every shape is checked against q's here, before the C
library sees a descriptor, because a view that is too small for the
descriptor is an error there but one that is too large would be read in part.
"""
import math
import operator

import numpy as np

from . import _arrays, _context, _flashcl
from .errors import ArgumentTypeError


class Spec:
    """Everything of a call except q, k, v (and the backward's tensors).

    Scalars as FlashAttention-2 names them; the arrays (alibi_slopes, sinks,
    bias, mask, block_mask, cu_seqlens_*) of the caller's kind.
    """

    __slots__ = ("softmax_scale", "causal", "window_size", "softcap", "alibi_slopes", "dropout_p", "dropout_seed",
                 "dropout_offset", "sinks", "bias", "mask", "block_mask", "block_size", "cu_seqlens_q",
                 "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k", "path", "allow_tf32")

    def __init__(self, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                 dropout_p=0.0, dropout_seed=None, dropout_offset=0, sinks=None, bias=None, mask=None,
                 block_mask=None, block_size=None, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None,
                 max_seqlen_k=None, path="flash", allow_tf32=False):
        self.softmax_scale = softmax_scale
        self.causal = causal  # (check_spec makes it a bool)
        self.window_size = window_size
        self.softcap = softcap
        self.alibi_slopes = alibi_slopes
        self.dropout_p = dropout_p
        self.dropout_seed = dropout_seed
        self.dropout_offset = dropout_offset
        self.sinks = sinks
        self.bias = bias
        self.mask = mask
        self.block_mask = block_mask
        self.block_size = block_size
        self.cu_seqlens_q = cu_seqlens_q
        self.cu_seqlens_k = cu_seqlens_k
        self.max_seqlen_q = max_seqlen_q
        self.max_seqlen_k = max_seqlen_k
        self.path = path
        self.allow_tf32 = bool(allow_tf32)

    @property
    def varlen(self):
        return self.cu_seqlens_q is not None or self.cu_seqlens_k is not None

    def arrays(self):
        return [("alibi_slopes", self.alibi_slopes), ("sinks", self.sinks), ("bias", self.bias), ("mask", self.mask),
                ("block_mask", self.block_mask), ("cu_seqlens_q", self.cu_seqlens_q),
                ("cu_seqlens_k", self.cu_seqlens_k)]


def new_seed(torch_kind):
    """A dropout seed from the caller's generator: torch.manual_seed or numpy.random.seed reproduce it."""
    if torch_kind:
        torch = _arrays.torch_module()
        return int(torch.randint(0, 2**62, (1,), dtype=torch.int64).item())
    return int(np.random.randint(0, 2**62, dtype=np.int64))


def _shape(x):
    return tuple(int(n) for n in x.shape)


def _need(cond, message):
    """ValueError(message) unless cond; message may be a function (formatted only on failure)."""
    if not cond:
        raise ValueError(message() if callable(message) else message)


def _check_cu_seqlens(name, cu, total, max_len, max_name):
    """Offsets as flash_attn's varlen functions mean them: from 0, never decreasing, within the packed
    rows (rows past the last offset are padding), no sequence longer than max_seqlen (the kernels'
    grids and the bias/mask matrices stop there, so a longer sequence would come back partly
    unwritten). Returns the last offset: the rows the sequences use."""
    c = np.asarray(_arrays.to_numpy(cu), np.int64)
    _need(c[0] == 0 and c[-1] <= total,
          lambda: f"{name} must run from 0 to at most the {total} packed rows, got {c[0]} ... {c[-1]}")
    lengths = np.diff(c)
    _need(bool(np.all(lengths >= 0)), lambda: f"{name} must not decrease, got {c.tolist()}")
    _need(int(lengths.max()) <= max_len,
          lambda: f"{name}: sequence {int(lengths.argmax())} has {int(lengths.max())} rows, more than "
                  f"{max_name} ({max_len})")
    return int(c[-1])


class Problem:
    """The sizes of a call, read from q, k, v and checked against each other."""

    __slots__ = ("varlen", "batch", "seqlen_q", "seqlen_k", "heads_q", "heads_kv", "head_dim", "head_dim_v",
                 "max_seqlen_q", "max_seqlen_k", "score_rows", "score_cols", "used_q", "used_k", "dtype", "torch")

    def __init__(self, q, k, v, spec):
        check_spec(spec)
        self.torch = _arrays.kind_check([("q", q), ("k", k), ("v", v)] + spec.arrays(), required=("q", "k", "v"))
        self.varlen = spec.varlen
        self.dtype = _arrays.storage_code("q", q)
        for name, x in (("k", k), ("v", v)):
            _need(_arrays.dtype_name(x) == _arrays.dtype_name(q),
                  lambda: f"q, k and v must have one dtype: q is {_arrays.dtype_name(q)}, {name} is {_arrays.dtype_name(x)}")
        qs, ks, vs = _shape(q), _shape(k), _shape(v)
        if self.varlen:
            _need(spec.cu_seqlens_q is not None and spec.cu_seqlens_k is not None,
                  "varlen needs both cu_seqlens_q and cu_seqlens_k")
            for name, s in (("q", qs), ("k", ks), ("v", vs)):
                _need(len(s) == 3, lambda: f"{name} must be (total, heads, head_dim) with cu_seqlens, got shape {s}")
            cu_q, cu_k = _shape(spec.cu_seqlens_q), _shape(spec.cu_seqlens_k)
            _need(len(cu_q) == 1 and cu_q[0] >= 2, lambda: f"cu_seqlens_q must be (batch + 1,), got shape {cu_q}")
            _need(cu_k == cu_q, lambda: f"cu_seqlens_k has shape {cu_k}, cu_seqlens_q {cu_q}: one entry per sequence + 1")
            self.batch = cu_q[0] - 1
            self.seqlen_q, self.heads_q, self.head_dim = qs
            self.seqlen_k, self.heads_kv, _ = ks
            # Bounds above the packed totals are taken as the totals for the library (flash_attn only
            # sizes its grid with them, and callers pass fixed ones, a model's maximum length, to
            # small batches); the score-shaped arrays keep the caller's bounds (score_rows/cols).
            self.score_rows, self.score_cols = int(spec.max_seqlen_q), int(spec.max_seqlen_k)  # ints >= 0: check_spec
            self.max_seqlen_q = min(self.score_rows, self.seqlen_q)
            self.max_seqlen_k = min(self.score_cols, self.seqlen_k)
            self.used_q = _check_cu_seqlens("cu_seqlens_q", spec.cu_seqlens_q, self.seqlen_q, self.max_seqlen_q,
                                            "max_seqlen_q")
            self.used_k = _check_cu_seqlens("cu_seqlens_k", spec.cu_seqlens_k, self.seqlen_k, self.max_seqlen_k,
                                            "max_seqlen_k")
            kv_rows = (0,)
        else:
            for name, s in (("q", qs), ("k", ks), ("v", vs)):
                _need(len(s) == 4, lambda: f"{name} must be (batch, seqlen, heads, head_dim), got shape {s}")
            self.batch, self.seqlen_q, self.heads_q, self.head_dim = qs
            _, self.seqlen_k, self.heads_kv, _ = ks
            _need(ks[0] == self.batch, lambda: f"k has batch {ks[0]}, q has {self.batch}")
            self.max_seqlen_q, self.max_seqlen_k = self.seqlen_q, self.seqlen_k
            self.score_rows, self.score_cols = self.seqlen_q, self.seqlen_k
            self.used_q, self.used_k = self.seqlen_q, self.seqlen_k
            kv_rows = (0, 1)
        self.head_dim_v = vs[-1]
        _need(self.head_dim >= 1 and self.head_dim_v >= 1,
              lambda: f"head_dim must be >= 1: q's is {self.head_dim}, v's {self.head_dim_v}")
        _need(ks[-1] == self.head_dim, lambda: f"k's head_dim is {ks[-1]}, q's is {self.head_dim}")
        _need(all(vs[i] == ks[i] for i in kv_rows) and vs[-2] == ks[-2],
              lambda: f"v has shape {vs}, k {ks}: they must agree but for the last dimension")

    @property
    def window_bound(self):
        """The seqlen_k flash_attn clips the window against: k's length, or the caller's max_seqlen_k."""
        return self.score_cols

    @property
    def empty(self):
        """No query rows or no keys (a batch of 0, a sequence dimension or varlen total of 0, a varlen
        max_seqlen of 0: every sequence empty there): the library refuses empty arrays; the call is
        answered here, as flash_attn answers it."""
        return self.batch == 0 or self.seqlen_q == 0 or self.seqlen_k == 0 or self.max_seqlen_q == 0 or \
            self.max_seqlen_k == 0

    def lse_shape(self):
        return (self.heads_q, self.seqlen_q) if self.varlen else (self.batch, self.heads_q, self.seqlen_q)

    def out_shape(self):
        rows = (self.seqlen_q,) if self.varlen else (self.batch, self.seqlen_q)
        return rows + (self.heads_q, self.head_dim_v)

    def score_shape(self):
        """(b, h, rows, cols) of a bias or mask (per sequence with varlen: the caller's max_seqlen)."""
        return self.batch, self.heads_q, self.score_rows, self.score_cols


def _check_sink_values(sinks):
    """A sink of +inf or NaN turns its rows into NaN in the kernels (the library reads the values only on the
    device, so it cannot refuse them): refused here wherever the values are at hand. -inf is a head without
    a sink. Not while torch.compile traces, nor for tensors without data (their calls refuse them by name)."""
    torch = _arrays.torch_module()
    if torch is not None and isinstance(sinks, torch.Tensor):
        if torch.compiler.is_compiling() or _arrays.holds_no_data(sinks) or not sinks.dtype.is_floating_point:
            return
        values = sinks.detach().float().cpu().numpy()
    elif isinstance(sinks, np.ndarray) and sinks.dtype.kind == "f":
        values = sinks
    else:
        return  # another dtype: the extension refuses it by name
    bad = np.isnan(values) | np.isposinf(values)
    _need(not bad.any(), lambda: f"sinks must be finite or -inf (no sink), got {values[bad][0]} at head "
                                 f"{int(np.flatnonzero(bad)[0])}")


def _check_features(p, spec):
    """Shapes of the array-valued features (their dtypes: the extension checks). With varlen the
    score-shaped ones may be sized by the caller's max_seqlen or by the bounds the library takes
    (max_seqlen capped at the packed totals); the former are passed as views of the latter's size."""
    h, b = p.heads_q, p.batch
    if spec.alibi_slopes is not None:
        s = _shape(spec.alibi_slopes)
        _need(s in ((h,), (b, h)), lambda: f"alibi_slopes must be ({h},) or ({b}, {h}), got {s}")
    if spec.sinks is not None:
        s = _shape(spec.sinks)
        _need(s == (h,), lambda: f"sinks must be ({h},), got {s}")
        _check_sink_values(spec.sinks)
    rows, cols = p.max_seqlen_q, p.max_seqlen_k
    capped = (rows, cols) != (p.score_rows, p.score_cols)
    note = f" (or ({rows}, {cols}): max_seqlen capped at the packed totals)" if capped else ""
    for name in ("bias", "mask"):
        x = getattr(spec, name)
        if x is not None:
            s = _shape(x)
            _need(len(s) == 4 and s[0] in (1, b) and s[1] in (1, h) and s[2:] in ((p.score_rows, p.score_cols),
                                                                                  (rows, cols)),
                  lambda: f"{name} must be ({_or_one(b)}, {_or_one(h)}, {p.score_rows}, {p.score_cols}){note}, "
                          f"got {s}")
            setattr(spec, name, x[:, :, :rows, :cols])
    if spec.block_mask is not None:
        _need(spec.block_size is not None, "block_mask needs block_size=(block_q, block_k)")
        bq, bk = spec.block_size
        _need(bq >= 1 and bk >= 1, lambda: f"block_size must be positive, got {spec.block_size}")
        nq, nk = -(-rows // bq), -(-cols // bk)
        full = (-(-p.score_rows // bq), -(-p.score_cols // bk))
        s = _shape(spec.block_mask)
        _need(len(s) == 4 and s[0] in (1, b) and s[1] in (1, h) and s[2:] in (full, (nq, nk)),
              lambda: f"block_mask must be ({_or_one(b)}, {_or_one(h)}, {full[0]}, {full[1]}) for block_size "
                      f"{tuple(spec.block_size)}" + (f" (or ({nq}, {nk}) for the capped max_seqlen)" if capped else "")
                      + f", got {s}")
        spec.block_mask = spec.block_mask[:, :, :nq, :nk]


def _or_one(n):
    """A broadcastable dimension of n in a shape message: "n or 1", or "1" when n is 1."""
    return "1" if n == 1 else f"{n} or 1"


def _is_int(x):
    """An integer, a numpy integer or a 0-d integer tensor (anything with __index__), but not a bool."""
    if isinstance(x, int):  # (first: torch.compile(dynamic=True) passes sizes as symbolic ints, which dynamo
        return not isinstance(x, bool)  # shows as int and on which it cannot trace hasattr)
    if isinstance(x, bool) or (hasattr(x, "dtype") and str(x.dtype) == "torch.bool"):
        return False
    try:
        operator.index(x)
        return True
    except TypeError:
        return False


_PLAIN_SCALARS = frozenset((int, float, bool, type(None), str, tuple, list))


def traced(x):
    """A scalar argument torch.compile holds as a tensor of its graph: a numpy scalar or array, or a tensor,
    seen while it traces (dynamo turns numpy values into tensors, whose values are unknown until the graph
    runs). Such a value is not checked or converted here; the torch operators take it as a tensor and the
    call checks it when it runs (_torch.py)."""
    if type(x) in _PLAIN_SCALARS:  # (most arguments: answered without looking torch up, 32 times a call)
        return False
    torch = _arrays.torch_module()
    return torch is not None and isinstance(x, (np.ndarray, np.generic, torch.Tensor)) and \
        torch.compiler.is_compiling()


def _traced_number(x, integer):
    """Whether a traced value (traced()) holds one number, an integer one where `integer`: its shape and dtype
    are known while tracing, its value is not."""
    t = _arrays.torch_module().as_tensor(x)
    if t.numel() != 1 or t.is_complex():
        return False
    return not integer or not (t.is_floating_point() or str(t.dtype) == "torch.bool")


def _type_error(message):
    raise ArgumentTypeError(message() if callable(message) else message)


def _as_float(name, x):
    """A float-valued argument as a Python float (numpy scalars, 0-d arrays and one-element tensors give their
    value); None stays None; anything else is an ArgumentTypeError naming the argument."""
    if x is None:
        return x
    if traced(x):
        if not _traced_number(x, False):
            _type_error(lambda: f"{name} must be a number, got {x!r}")
        return x
    if not _is_real(x):
        _type_error(lambda: f"{name} must be a number, got {x!r}")
    return float(x)


def _as_int(x, message):
    """An integer argument as a Python int (numpy integers and 0-d integer arrays or tensors give their value)."""
    if traced(x):
        if not _traced_number(x, True):
            _type_error(message)
        return x
    if not _is_int(x):
        _type_error(message)
    return operator.index(x)


def as_bool(name, x):
    """A flag (causal, rotary_interleaved) as a Python bool: a bool, an integer (numpy's too) or a one-element
    bool or integer array; anything else is an ArgumentTypeError naming it (causal="no" was taken as True)."""
    if traced(x):
        if not _traced_number(x, True) and str(_arrays.torch_module().as_tensor(x).dtype) != "torch.bool":
            _type_error(lambda: f"{name} must be a bool, got {x!r}")
        return x
    if isinstance(x, (bool, np.bool_)) or _is_int(x):
        return bool(x)
    if hasattr(x, "dtype") and hasattr(x, "shape") and _arrays.dtype_name(x) == "bool" and \
            math.prod(int(n) for n in x.shape) == 1:
        return bool(x)
    _type_error(lambda: f"{name} must be a bool, got {x!r}")


def _int_pair(x, pair_message, entry_message):
    """A pair of integers (a tuple, a list or a 1-d numpy array of two) as a tuple of _as_int's values."""
    if isinstance(x, np.ndarray) and x.ndim == 1:
        x = tuple(x)
    if not (isinstance(x, (tuple, list)) and len(x) == 2):
        _type_error(pair_message)
    return tuple(_as_int(n, entry_message) for n in x)


def check_spec(spec):
    """The scalar arguments every path takes as plain numbers: checked here, before the torch operators
    flatten them to ints (which would truncate 1.5 to 1 and take True as 1), and replaced by Python numbers
    (numpy scalars, which callers pass as 1 / np.sqrt(d), would reach the operators' float and int
    arguments as tensors under torch.compile). A value of the wrong type is an ArgumentTypeError naming it."""
    ws = spec.window_size
    left, right = spec.window_size = _int_pair(
        ws, lambda: f"window_size must be a pair (left, right), got {ws!r}",
        lambda: f"window_size entries must be integers, got {tuple(ws)!r}")
    _need(traced(left) or traced(right) or (-2**31 <= left < 2**31 and -2**31 <= right < 2**31),
          lambda: f"window_size entries must be 32-bit integers, got {tuple(spec.window_size)}")
    # Seeds and offsets travel as int64 through torch (rng_state); 2**63 values are plenty.
    for name in ("dropout_seed", "dropout_offset"):
        x = getattr(spec, name)
        if x is None:
            continue
        message = lambda: f"{name} must be an integer in [0, 2**63), got {x!r}"  # noqa: E731
        x = _as_int(x, message)
        _need(traced(x) or 0 <= x < 2**63, message)
        setattr(spec, name, x)
    if spec.varlen:
        for name in ("max_seqlen_q", "max_seqlen_k"):
            x = getattr(spec, name)
            if traced(x):
                _as_int(x, lambda: f"{name} must be an integer >= 0 (the longest sequence) with cu_seqlens, got {x!r}")
            else:
                setattr(spec, name, check_max_seqlen(name, x))
    # Floats: the torch operators took them through float(), which reads "0.1" as 0.1 where the numpy
    # path failed with an error naming nothing; both paths refuse a non-number here, by name.
    for name in ("softmax_scale", "softcap", "dropout_p"):
        setattr(spec, name, _as_float(name, getattr(spec, name)))
    spec.causal = as_bool("causal", spec.causal)
    _need(traced(spec.dropout_p) or not spec.dropout_p or 0 <= spec.dropout_p < 1,
          lambda: f"dropout_p must be in [0, 1), got {spec.dropout_p}")
    if spec.block_mask is not None:  # (the operators flatten block_size to ints, None to (0, 0))
        _need(spec.block_size is not None, "block_mask needs block_size=(block_q, block_k)")
        bs = spec.block_size
        message = lambda: f"block_size must be a pair of integers (block_q, block_k), got {bs!r}"  # noqa: E731
        spec.block_size = _int_pair(bs, message, message)
    else:  # as the C API and the CLI: a block size with no mask to size is a mistake, not a no-op
        _need(spec.block_size is None, lambda: f"block_size only applies with block_mask, got {spec.block_size!r}")


def _is_real(x):
    """A real number: a float, an integer, a numpy scalar or a one-element tensor; not a string."""
    if isinstance(x, (str, bytes, np.complexfloating)) or not hasattr(x, "__float__"):
        return False
    try:
        float(x)
        return True
    except (TypeError, ValueError):
        return False


def check_max_seqlen(name, x):
    """A varlen bound: an integer >= 0, 0 when every sequence is empty there (flash_attn answers that
    call without its kernel); returned as a Python int."""
    message = lambda: f"{name} must be an integer >= 0 (the longest sequence) with cu_seqlens, got {x!r}"  # noqa: E731
    if x is None or not _is_int(x):
        _type_error(message)
    x = x if isinstance(x, int) else operator.index(x)  # (an int stays as it is: a symbolic size under compile)
    _need(x >= 0, message)
    return x


def clip_window(window_size, seqlen_k):
    """The window as flash_attn's C++ reads it: any negative side is unbounded (-1), and so is a side
    >= seqlen_k (flash_api.cpp drops it before the kernel: k's length, the varlen max_seqlen_k as
    given, the KV cache's capacity). Only the right side of a window can hide a key past that bound
    (with seqlen_q > seqlen_k), so dropping it changes the result there, as in flash_attn."""
    return tuple(-1 if w < 0 or w >= seqlen_k else int(w) for w in (int(x) for x in window_size))


_FLOAT32_TINY = float(np.finfo(np.float32).tiny)  # the smallest normal float32
_SCALE_MAX = _flashcl.MAX_SCALE  # the library's bound on |scale|: scale * log2(e) must stay a finite float32


def make_desc(p, spec):
    """The C descriptor for a checked problem (Problem, or the KV-cache call, ran check_spec)."""
    d = _flashcl.Desc()
    d.dtype = p.dtype
    d.batch, d.heads_q, d.heads_kv = p.batch, p.heads_q, p.heads_kv
    d.seqlen_q, d.seqlen_k = p.seqlen_q, p.seqlen_k
    d.head_dim, d.head_dim_v = p.head_dim, p.head_dim_v
    if p.varlen:
        d.max_seqlen_q, d.max_seqlen_k = p.max_seqlen_q, p.max_seqlen_k
    scale = spec.softmax_scale
    if scale is None:
        scale = 1.0 / math.sqrt(p.head_dim)
    # Any finite scale up to the library's bound, a negative one too (its kernels scale the scores before
    # their max). The C descriptor reads 0 as "the default": an explicit 0 (flash_attn's would attend
    # uniformly) is refused here rather than silently replaced, and so are NaN and infinities.
    _need(scale != 0 and math.isfinite(scale),
          lambda: f"softmax_scale must be a finite nonzero number, got {scale} (0 would be taken as 1/sqrt(head_dim))")
    # The descriptor holds a float32 and the kernels scale by it times log2(e): beyond _SCALE_MAX that
    # overflows (the library refuses it too). Below float32's smallest subnormal it would be 0, the
    # default: the smallest normal float32 in its place attends as flash_attn's float32 zero does
    # (uniformly: every score times it rounds to 0 in the exponent).
    _need(abs(scale) <= _SCALE_MAX,
          lambda: f"softmax_scale ({scale}) is beyond {_SCALE_MAX:.6g}: the kernels scale by it times log2(e) "
                  f"in float32 (the library's bound)")
    if float(np.float32(scale)) == 0.0:
        scale = math.copysign(_FLOAT32_TINY, scale)
    d.scale = scale
    d.causal = 1 if spec.causal else 0
    left, right = clip_window(spec.window_size, p.window_bound)
    if (left, right) != (-1, -1):
        d.window, d.window_left, d.window_right = 1, int(left), int(right)
    softcap = max(float(spec.softcap or 0.0), 0.0)  # <= 0: off, as flash_attn documents it
    # The descriptor holds a float32: a softcap that overflows it would reach the library as inf, one that
    # underflows as 0 (off).
    _need(softcap <= 1e37,  # (the library's bound)
          lambda: f"softcap ({spec.softcap}) must be a number up to 1e37 (0 or less turns it off, as in flash_attn)")
    _need(softcap == 0.0 or float(np.float32(softcap)) != 0.0,
          lambda: f"softcap ({spec.softcap}) rounds to 0 in float32, which would turn the softcap off")
    d.softcap = softcap
    if spec.dropout_p:
        _need(0 <= spec.dropout_p < 1, lambda: f"dropout_p must be in [0, 1), got {spec.dropout_p}")
        # The descriptor holds a float32: a p this close to 1 would reach the library as 1.0 and be refused
        # there with the rounded value.
        _need(float(np.float32(spec.dropout_p)) < 1,
              lambda: f"dropout_p ({spec.dropout_p}) rounds to 1 in float32 (the library's type); the largest "
                      f"float32 below 1 is {float(np.nextafter(np.float32(1), np.float32(0)))}")
        d.dropout_p = float(spec.dropout_p)
        d.dropout_seed = int(spec.dropout_seed)
        d.dropout_offset = int(spec.dropout_offset or 0)
    if spec.block_mask is not None:
        d.block_q, d.block_k = (int(n) for n in spec.block_size)
    _need(spec.path in ("flash", "standard"), lambda: f"path must be 'flash' or 'standard', got {spec.path!r}")
    d.path = _flashcl.PATH_STANDARD if spec.path == "standard" else _flashcl.PATH_FLASH
    d.allow_tf32 = 1 if spec.allow_tf32 else 0
    return d


def _features(spec):
    """The extension's keyword arguments for the array-valued features."""
    return {name: _arrays.raw_feature(name, x) for name, x in spec.arrays() if x is not None}


def prepare(q, k, v, spec):
    """Checks a call; returns (problem, descriptor). Draws the dropout seed if none was given."""
    p = Problem(q, k, v, spec)
    _check_features(p, spec)
    if spec.dropout_p and spec.dropout_seed is None:
        spec.dropout_seed = new_seed(p.torch)
    return p, make_desc(p, spec)


def _forward_empty(p, spec, out, lse):
    """An empty call's result: out = 0; LSE -inf, a row's with no key (its sink with sinks)."""
    out[...] = 0
    lse[...] = -np.inf
    if spec.sinks is not None and p.seqlen_q > 0:
        sinks = np.asarray(_arrays.to_numpy(spec.sinks), np.float32)
        values = np.broadcast_to(sinks[:, None] if p.varlen else sinks[None, :, None], p.lse_shape())
        lse[...] = values if isinstance(lse, np.ndarray) else _arrays.torch_module().from_numpy(values.copy())
        if p.varlen:
            lse[:, p.used_q:] = -np.inf  # padding rows, as in forward()
    return out, lse


def forward(q, k, v, spec, context=None):
    """(out, softmax_lse) for host arrays or CPU tensors of one kind."""
    p, d = prepare(q, k, v, spec)
    out = _arrays.empty(q, p.out_shape())
    lse = _arrays.empty(q, p.lse_shape(), "float32")
    if p.empty:
        return _forward_empty(p, spec, out, lse)
    ctx = _context.resolve(context)
    ctx._c.forward(d, _arrays.raw(q), _arrays.raw(k), _arrays.raw(v), _arrays.raw(out), _arrays.raw(lse),
                   **_features(spec))
    # Varlen padding rows (past the last offset), which no kernel writes: zeros, and LSE -inf as for
    # a row that sees no key (flash_attn leaves them unwritten, and a padded q from a projection
    # would carry what was there into its weights' gradients).
    if p.used_q < p.seqlen_q:
        out[p.used_q:] = 0
        lse[:, p.used_q:] = -np.inf
    return out, lse


def backward(dout, q, k, v, out, lse, spec, dq=None, dk=None, dv=None, want_dsinks=False, context=None):
    """(dq, dk, dv, dsinks or None); dq, dk, dv may be given (views of one packed gradient, say)."""
    p, d = prepare(q, k, v, spec)
    _need(_shape(dout) == p.out_shape(), lambda: f"dout has shape {_shape(dout)}, out is {p.out_shape()}")
    _need(_shape(out) == p.out_shape(), lambda: f"out has shape {_shape(out)}, expected {p.out_shape()}")
    _need(_shape(lse) == p.lse_shape(), lambda: f"softmax_lse has shape {_shape(lse)}, expected {p.lse_shape()}")
    for name, x in (("dout", dout), ("out", out)):
        _need(_arrays.dtype_name(x) == _arrays.dtype_name(q), lambda: f"{name} has dtype {_arrays.dtype_name(x)}, q has "
                                                              f"{_arrays.dtype_name(q)}")
    dq = _arrays.empty(q, _shape(q)) if dq is None else dq
    dk = _arrays.empty(k, _shape(k)) if dk is None else dk
    dv = _arrays.empty(v, _shape(v)) if dv is None else dv
    dsinks = _arrays.empty(q, (p.heads_q,), "float32") if want_dsinks and spec.sinks is not None else None
    if p.empty:  # out is 0 whatever the inputs: every gradient is 0
        for x in (dq, dk, dv, dsinks):
            if x is not None:
                x[...] = 0
        return dq, dk, dv, dsinks
    ctx = _context.resolve(context)
    ctx._c.backward(d, _arrays.raw(q), _arrays.raw(k), _arrays.raw(v), _arrays.raw(out), _arrays.raw(dout),
                    _arrays.raw(lse), _arrays.raw(dq), _arrays.raw(dk), _arrays.raw(dv), dsinks=_arrays.raw(dsinks),
                    **_features(spec))
    if p.used_q < p.seqlen_q:  # varlen padding rows: zero gradients (the forward's comment says why)
        dq[p.used_q:] = 0
    if p.used_k < p.seqlen_k:
        dk[p.used_k:] = 0
        dv[p.used_k:] = 0
    return dq, dk, dv, dsinks


def dropout_mask(q, k, v, spec, context=None):
    """The keep mask (bool) a call with these arguments applies: (b, h, max_sq, max_sk)."""
    p, d = prepare(q, k, v, spec)
    _need(d.dropout_p > 0, "dropout_mask needs dropout_p > 0")
    # The library writes (b, h, max_seqlen_q, max_seqlen_k) as it takes them (capped at the packed
    # totals); the caller's shape has zeros past them.
    mask = _arrays.empty(q, (p.batch, p.heads_q, p.max_seqlen_q, p.max_seqlen_k), "uint8")
    if p.empty:
        mask[...] = 0
    else:
        ctx = _context.resolve(context)
        cu = {name: _arrays.raw_feature(name, getattr(spec, name)) for name in ("cu_seqlens_q", "cu_seqlens_k")}
        ctx._c.dropout_mask(d, _arrays.raw(mask), **cu)
    if mask.shape != p.score_shape():
        full = _arrays.empty(q, p.score_shape(), "uint8")
        full[...] = 0
        full[:, :, :p.max_seqlen_q, :p.max_seqlen_k] = mask
        mask = full
    return mask.view(np.bool_) if isinstance(mask, np.ndarray) else mask.view(_arrays.torch_module().bool)


def plan(q, k, v, spec, backward=False, context=None):
    """What the forward (or backward) of this call runs on the context's device, and why."""
    _, d = prepare(q, k, v, spec)
    ctx = _context.resolve(context)
    return ctx._c.plan(d, backward, **_features(spec))
