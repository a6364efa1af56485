"""PyTorch: autograd and torch.compile.

Two custom operators, flashcl::forward and flashcl::backward
(torch.library.custom_op, with fake implementations for tracing), so that
torch.compile keeps a FlashCL call as one opaque node instead of breaking the
graph at the extension; and one torch.autograd.Function over them that saves
q, k, v, out, the LSE and the dropout (seed, offset), so the backward pass
regenerates the forward's dropout mask. Imported only when tensors arrive.

Tensors on another device than the CPU are copied to host memory for the
call and the results copied back to their device.
"""
import contextlib
from typing import Optional, Tuple

import torch

from . import _context, _core

Tensor = torch.Tensor


def _symbolic(tensors):
    """Whether these tensors hold no data to compute with: traced by torch.compile or torch.jit.trace,
    fake (FakeTensorMode) or on the meta device. Their calls go through the custom operators, whose
    fake kernels give the outputs' shapes (eager calls skip the dispatcher, which such a trace would
    not see: torch.jit.trace recorded only the outputs' allocation)."""
    if torch.compiler.is_compiling() or torch.jit.is_tracing():
        return True
    for x in tensors:
        if x is not None and (x.device.type == "meta" or _is_fake(x)):
            return True
    return False


try:
    from torch._subclasses.fake_tensor import is_fake as _is_fake
except ImportError:  # older torch: no fake tensors to see

    def _is_fake(x):
        return False


def _refuse_functorch(tensors):
    """torch.func's transforms (vmap, jvp, grad) wrap the tensors; the extension cannot read those."""
    is_wrapped = getattr(torch._C._functorch, "is_functorch_wrapped_tensor", None)
    if is_wrapped is not None and any(x is not None and is_wrapped(x) for x in tensors):
        raise NotImplementedError("FlashCL does not support torch.func transforms (vmap, jvp, grad, jacrev); call "
                                  "it on plain tensors (loop over the batch dimension instead of vmap)")


def _host(x):
    return x if x is None or x.device.type == "cpu" else x.cpu()


def _spec(alibi_slopes, sinks, bias, mask, block_mask, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
          softmax_scale, causal, window_left, window_right, softcap, dropout_p, dropout_seed, dropout_offset,
          block_q, block_k, path):
    """A Spec from the operators' flat arguments (their schema has no objects). `path` carries allow_tf32 as a
    ":tf32" suffix (see _flat)."""
    path, _, options = path.partition(":")
    return _core.Spec(softmax_scale=softmax_scale, causal=causal, window_size=(window_left, window_right),
                      softcap=softcap, alibi_slopes=_host(alibi_slopes), dropout_p=dropout_p,
                      dropout_seed=dropout_seed if dropout_seed >= 0 else None, dropout_offset=dropout_offset,
                      sinks=_host(sinks), bias=_host(bias), mask=_host(mask), block_mask=_host(block_mask),
                      block_size=(block_q, block_k) if block_mask is not None else None,
                      cu_seqlens_q=_host(cu_seqlens_q), cu_seqlens_k=_host(cu_seqlens_k),
                      max_seqlen_q=max_seqlen_q if max_seqlen_q >= 0 else None,
                      max_seqlen_k=max_seqlen_k if max_seqlen_k >= 0 else None, path=path,
                      allow_tf32=options == "tf32")


def _or_minus_one(n):
    """A max_seqlen for the operators' schema: -1 for None (0 is a bound: every sequence empty)."""
    return -1 if n is None else int(n)


# The operators' scalar arguments, in their order: (name, whether it is a float, what stands for it among the
# plain arguments when it is traced; never read). Under torch.compile any of them may be a tensor of the graph (a
# numpy scalar such as 1 / np.sqrt(d), which dynamo traces as a tensor, or a 0-d tensor), whose value is known
# only when the graph runs. Those travel in one int64 tensor (`traced`, floats as their float64 bits) beside the
# plain arguments, with a bit mask (`traced_mask`) saying which arguments it replaces; the operators take the
# values from it (_untrace) and check them as an eager call does.
_SCALARS = (("max_seqlen_q", False, 0), ("max_seqlen_k", False, 0), ("softmax_scale", True, None),
            ("causal", False, False), ("window_left", False, -1), ("window_right", False, -1),
            ("softcap", True, 0.0), ("dropout_p", True, 0.0), ("dropout_seed", False, -1),
            ("dropout_offset", False, 0), ("block_q", False, 0), ("block_k", False, 0))


def _as_traced(name, is_float, x):
    """A traced scalar as a 0-d int64 tensor (a float as its float64 bits); ArgumentTypeError for a tensor that
    holds no single number of the right kind (known while tracing: its shape and dtype)."""
    t = torch.as_tensor(x)
    if t.numel() != 1 or t.is_complex() or (not is_float and t.is_floating_point()):
        what = "a number" if is_float else "an integer"
        raise _core.ArgumentTypeError(f"{name} must be {what}, got a tensor of shape {tuple(t.shape)} and dtype "
                                      f"{t.dtype}")
    t = t.reshape(())
    return t.to(torch.float64).view(torch.int64) if is_float else t.to(torch.int64)


def _untrace(scalars, traced, traced_mask):
    """The operators' scalar arguments with the traced ones' values (see _SCALARS)."""
    if not traced_mask:
        return list(scalars)
    bits, floats = traced.tolist(), traced.view(torch.float64).tolist()
    out = list(scalars)
    for i, (name, is_float, _) in enumerate(_SCALARS):
        if traced_mask >> i & 1:
            out[i] = floats[i] if is_float else (bool(bits[i]) if name == "causal" else int(bits[i]))
    return out


def _flat(spec):
    """The operators' flat arguments for a Spec (the inverse of _spec), then `traced` and `traced_mask` (None
    and 0 but under torch.compile: see _SCALARS)."""
    left, right = spec.window_size
    bq, bk = spec.block_size if spec.block_size is not None else (0, 0)
    given = (spec.max_seqlen_q, spec.max_seqlen_k, spec.softmax_scale, spec.causal, left, right, spec.softcap,
             spec.dropout_p, spec.dropout_seed, spec.dropout_offset, bq, bk)
    is_traced = [_core.traced(x) for x in given]
    traced, traced_mask = None, 0
    if any(is_traced):
        traced = torch.stack([_as_traced(name, is_float, x) if t else torch.zeros((), dtype=torch.int64)
                              for (name, is_float, _), x, t in zip(_SCALARS, given, is_traced)])
        traced_mask = sum(1 << i for i, t in enumerate(is_traced) if t)
        given = tuple(stand_in if t else x for x, (_, _, stand_in), t in zip(given, _SCALARS, is_traced))
    max_q, max_k, scale, causal, left, right, softcap, dropout_p, seed, offset, bq, bk = given
    seed = -1 if seed is None else int(seed)
    return (spec.alibi_slopes, spec.sinks, spec.bias, spec.mask, spec.block_mask, spec.cu_seqlens_q,
            spec.cu_seqlens_k, _or_minus_one(max_q), _or_minus_one(max_k), scale, bool(causal), int(left),
            int(right), float(softcap or 0.0), float(dropout_p or 0.0), seed, int(offset or 0), int(bq), int(bk),
            # allow_tf32 rides on the path string, which the forward and the backward operators both take: a new
            # argument would change both operators' schemas and every caller of them.
            spec.path + (":tf32" if spec.allow_tf32 else ""), traced, traced_mask)


def _forward(q: Tensor, k: Tensor, v: Tensor, alibi_slopes: Optional[Tensor], sinks: Optional[Tensor],
             bias: Optional[Tensor], mask: Optional[Tensor], block_mask: Optional[Tensor],
             cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor], max_seqlen_q: int,
             max_seqlen_k: int, softmax_scale: Optional[float], causal: bool, window_left: int,
             window_right: int, softcap: float, dropout_p: float, dropout_seed: int, dropout_offset: int,
             block_q: int, block_k: int, path: str, traced: Optional[Tensor] = None,
             traced_mask: int = 0) -> Tuple[Tensor, Tensor, Tensor]:
    """(out, softmax_lse, rng_state): rng_state = [seed, offset] of the dropout (a seed < 0 draws one)."""
    (max_seqlen_q, max_seqlen_k, softmax_scale, causal, window_left, window_right, softcap, dropout_p, dropout_seed,
     dropout_offset, block_q, block_k) = _untrace(
        (max_seqlen_q, max_seqlen_k, softmax_scale, causal, window_left, window_right, softcap, dropout_p,
         dropout_seed, dropout_offset, block_q, block_k), traced, traced_mask)
    spec = _spec(alibi_slopes, sinks, bias, mask, block_mask, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                 max_seqlen_k, softmax_scale, causal, window_left, window_right, softcap, dropout_p, dropout_seed,
                 dropout_offset, block_q, block_k, path)
    out, lse = _core.forward(_host(q), _host(k), _host(v), spec)
    rng_state = torch.tensor([spec.dropout_seed or 0, spec.dropout_offset or 0], dtype=torch.int64)
    if q.device.type != "cpu":
        out, lse, rng_state = out.to(q.device), lse.to(q.device), rng_state.to(q.device)
    return out, lse, rng_state


# Eager calls use _forward and _backward directly: the dispatcher in front of
# a Python custom op costs about 100 us a call here, and autograd is ours
# anyway. Only traced code (torch.compile) goes through the operators.
forward_op = torch.library.custom_op("flashcl::forward", mutates_args=())(_forward)


@forward_op.register_fake
def _(q, k, v, alibi_slopes, sinks, bias, mask, block_mask, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
      softmax_scale, causal, window_left, window_right, softcap, dropout_p, dropout_seed, dropout_offset, block_q,
      block_k, path, traced=None, traced_mask=0):
    if cu_seqlens_q is not None:  # (total, h, d): LSE is (h, total)
        lse_shape = (q.shape[1], q.shape[0])
    else:
        lse_shape = (q.shape[0], q.shape[2], q.shape[1])
    out = q.new_empty(tuple(q.shape[:-1]) + (v.shape[-1],))
    return out, q.new_empty(lse_shape, dtype=torch.float32), q.new_empty((2,), dtype=torch.int64)


def _backward(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, softmax_lse: Tensor, dq: Tensor,
              dk: Tensor, dv: Tensor, dsinks: Optional[Tensor], rng_state: Tensor,
              alibi_slopes: Optional[Tensor], sinks: Optional[Tensor], bias: Optional[Tensor],
              mask: Optional[Tensor], block_mask: Optional[Tensor], cu_seqlens_q: Optional[Tensor],
              cu_seqlens_k: Optional[Tensor], max_seqlen_q: int, max_seqlen_k: int,
              softmax_scale: Optional[float], causal: bool, window_left: int, window_right: int, softcap: float,
              dropout_p: float, block_q: int, block_k: int, path: str, traced: Optional[Tensor] = None,
              traced_mask: int = 0) -> None:
    """Writes dq, dk, dv (and dsinks when given) in place, as flash_attn's _flash_attn_backward."""
    seed, offset = (int(x) for x in rng_state.tolist())
    (max_seqlen_q, max_seqlen_k, softmax_scale, causal, window_left, window_right, softcap, dropout_p, _, _, block_q,
     block_k) = _untrace((max_seqlen_q, max_seqlen_k, softmax_scale, causal, window_left, window_right, softcap,
                          dropout_p, seed, offset, block_q, block_k), traced, traced_mask)
    spec = _spec(alibi_slopes, sinks, bias, mask, block_mask, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                 max_seqlen_k, softmax_scale, causal, window_left, window_right, softcap, dropout_p, seed, offset,
                 block_q, block_k, path)
    on_host = dq.device.type == "cpu"
    grads = (dq, dk, dv) if on_host else (None, None, None)
    gq, gk, gv, gs = _core.backward(_host(dout), _host(q), _host(k), _host(v), _host(out), _host(softmax_lse), spec,
                                    *grads, want_dsinks=dsinks is not None)
    if not on_host:
        dq.copy_(gq), dk.copy_(gk), dv.copy_(gv)
    if dsinks is not None:
        dsinks.copy_(gs)


backward_op = torch.library.custom_op("flashcl::backward", mutates_args=("dq", "dk", "dv", "dsinks"))(_backward)


@backward_op.register_fake
def _(dout, q, k, v, out, softmax_lse, dq, dk, dv, dsinks, rng_state, *args):
    return None


class _Packing:
    """How the differentiable inputs hold q, k, v: separately, (q, kv) or qkv (dimension -3)."""

    @staticmethod
    def split(packing, inputs):
        if packing == "qkv":
            return inputs[0].unbind(-3)
        if packing == "kv":
            return (inputs[0],) + tuple(inputs[1].unbind(-3))
        return inputs

    @staticmethod
    def gradients(packing, inputs):
        """Gradient tensors of the inputs' shapes, and the dq, dk, dv views into them."""
        if packing == "qkv":
            g = torch.empty_like(inputs[0])
            return (g,), g.unbind(-3)
        if packing == "kv":
            gq, gkv = torch.empty_like(inputs[0]), torch.empty_like(inputs[1])
            return (gq, gkv), (gq,) + tuple(gkv.unbind(-3))
        g = tuple(torch.empty_like(x) for x in inputs)
        return g, g


class AttentionFunction(torch.autograd.Function):
    """out, softmax_lse = attention(q, k, v); backward through flashcl::backward."""

    @staticmethod
    def forward(ctx, packing, scalars, alibi_slopes, sinks, bias, mask, block_mask, cu_seqlens_q, cu_seqlens_k,
                traced, *inputs):
        q, k, v = _Packing.split(packing, inputs)
        fwd = forward_op if _symbolic(inputs) else _forward
        out, lse, rng_state = fwd(q, k, v, alibi_slopes, sinks, bias, mask, block_mask, cu_seqlens_q, cu_seqlens_k,
                                  *scalars[:-1], traced, scalars[-1])
        ctx.packing, ctx.scalars = packing, scalars
        # The backward runs on the forward's context (attention(context=...), `with ctx:`), not on whatever
        # context is current when autograd calls it (outside the `with`, the thread's default device).
        ctx.flashcl_context = None if fwd is forward_op else _context.current()
        ctx.sinks_grad = sinks is not None and sinks.requires_grad
        ctx.save_for_backward(out, lse, rng_state, alibi_slopes, sinks, bias, mask, block_mask, cu_seqlens_q,
                              cu_seqlens_k, traced, *inputs)
        # softmax_lse stays an output autograd tracks, as flash_attn's FlashAttnFunc returns it: a loss through
        # it runs the backward, which ignores its gradient there as flash_attn's does (out's alone is used).
        ctx.mark_non_differentiable(rng_state)
        return out, lse, rng_state

    @staticmethod
    def backward(ctx, dout, _dlse, _drng):
        out, lse, rng_state, alibi, sinks, bias, mask, block_mask, cu_q, cu_k, traced, *inputs = ctx.saved_tensors
        q, k, v = _Packing.split(ctx.packing, inputs)
        grads, (dq, dk, dv) = _Packing.gradients(ctx.packing, inputs)
        dsinks = torch.empty_like(sinks, dtype=torch.float32) if ctx.sinks_grad else None
        (max_q, max_k, scale, causal, left, right, softcap, dropout_p, _seed, _offset, bq, bk, path,
         traced_mask) = ctx.scalars
        bwd = backward_op if _symbolic((dout,) + tuple(inputs)) else _backward
        with ctx.flashcl_context if bwd is _backward and ctx.flashcl_context is not None else contextlib.nullcontext():
            bwd(dout.contiguous(), q, k, v, out, lse, dq, dk, dv, dsinks, rng_state, alibi, sinks, bias, mask,
                block_mask, cu_q, cu_k, max_q, max_k, scale, causal, left, right, softcap, dropout_p, bq, bk, path,
                traced, traced_mask)
        grads = tuple(grads)
        anchor = next((x for x in inputs if x.requires_grad), None)
        if torch.is_grad_enabled() and anchor is not None and not torch.compiler.is_compiling():
            grads = _FirstOrderOnly.apply(anchor, *grads)  # backward(create_graph=True)
        return (None, None, None, dsinks, None, None, None, None, None, None) + tuple(grads)


class _RefusedBackward(torch.autograd.Function):
    """out as it is, tied to tensors whose gradient FlashCL does not compute: a backward through it
    raises the message (the forward, with or without grad mode, is not affected)."""

    @staticmethod
    def forward(ctx, out, message, *tensors):
        ctx.message = message
        return out.clone()

    @staticmethod
    def backward(ctx, grad):
        raise NotImplementedError(ctx.message)


class _IgnoredGradient(torch.autograd.Function):
    """value as it is (a copy), an output of the attention as far as autograd goes: it requires grad when
    `tensors` do, and a loss through it gives them zero gradients (flash_attn's S_dmask, an output of its
    autograd Function whose gradient the backward ignores)."""

    @staticmethod
    def forward(ctx, value, *tensors):
        ctx.shapes = [(t.shape, t.dtype, t.device) for t in tensors]
        return value.clone()

    @staticmethod
    def backward(ctx, grad):
        return (None,) + tuple(torch.zeros(s, dtype=d, device=dev) for s, d, dev in ctx.shapes)


def ignored_gradient(value, tensors):
    """value, or (grad mode on, one of tensors requiring grad) value tied to them through _IgnoredGradient."""
    needs = [t for t in tensors if t is not None and isinstance(t, torch.Tensor) and t.requires_grad]
    if not needs or not torch.is_grad_enabled():
        return value
    return _IgnoredGradient.apply(value, *needs)


def refuse_backward(out, message, tensors):
    """out, or (grad mode on, one of tensors requiring grad) out tied to them through _RefusedBackward."""
    needs = [t for t in tensors if t is not None and isinstance(t, torch.Tensor) and t.requires_grad]
    if not needs or not torch.is_grad_enabled():
        return out
    return _RefusedBackward.apply(out, message, *needs)


class _FirstOrderOnly(torch.autograd.Function):
    """The gradients as they are, tied to the graph (through `anchor`, an input that requires grad) by a
    node that refuses to be differentiated: a second-order gradient through attention (double
    backward) is refused, as SDPA's flash backward refuses it, rather than silently missing the
    attention's term. A backward(create_graph=True) that never differentiates them is unaffected."""

    @staticmethod
    def forward(ctx, anchor, *grads):
        return tuple(g.clone() for g in grads)  # (copies: a caller may change a gradient in place)

    @staticmethod
    def backward(ctx, *unused):
        raise RuntimeError("FlashCL's attention backward is not differentiable (a double backward through "
                           "attention); use SDPA's math backend for second-order gradients")


def _no_data(x):
    """What x is when it holds no data (a meta or fake tensor), in words; None when it holds data."""
    return "on device meta" if x.device.type == "meta" else "a fake tensor (FakeTensorMode)" if _is_fake(x) else None


def _check_data(inputs, spec, packing):
    """Meta or fake tensors beside a q that holds data: the call would take the fake kernel's path and return
    q-device outputs of uninitialised memory (a meta k), or fail naming nothing (a meta ALiBi slope's host
    copy; FakeTensorMode's assertion about real inputs). Refused by name; an all shape-only call is fine.
    The other way round, a real k or v beside a meta or fake q, is refused too (its data would be ignored and
    a meta output returned); feature arrays (cu_seqlens say) may hold data in a shape-only call."""
    names = {"none": ("q", "k", "v"), "qkv": ("qkv",), "kv": ("q", "kv")}[packing]
    if _symbolic(inputs[:1]):
        q_what = _no_data(inputs[0])
        if q_what is None:  # traced by torch.compile or torch.jit.trace: every input is symbolic there
            return
        for name, x in list(zip(names, inputs))[1:]:
            if x is not None and _no_data(x) is None:
                raise ValueError(f"{name} holds data, but {names[0]} is {q_what}: pass tensors of one kind (all "
                                 "real, or all meta/fake for shapes only)")
        return
    for name, x in list(zip(names, inputs)) + spec.arrays():
        what = None if x is None else _no_data(x)
        if what is not None:
            raise ValueError(f"{name} is {what}, which holds no data, but {names[0]} holds data: pass tensors of "
                             "one kind (all real, or all meta/fake for shapes only)")


def _check_no_grad(spec):
    for name in ("alibi_slopes", "bias"):
        x = getattr(spec, name)
        if x is not None and x.requires_grad:
            raise ValueError(f"{name} requires grad, but FlashCL computes no gradient for it (detach it)")


def _distinct(tensors):
    """The tensors, any repeat of an earlier one (the same object) replaced by a copy: traced by
    torch.compile, an autograd.Function refuses one tensor in two of its inputs, which the usual
    calls make (flash_attn_varlen_func(q, k, v, cu, cu, ...), the qkvpacked varlen form's
    cu_seqlens, attention(x, x, x)). The copy is differentiable: its gradient reaches the original."""
    out = []
    for t in tensors:
        if t is not None and any(t is u for u in out):
            t = t.clone()
        out.append(t)
    return out


def attention(inputs, spec, packing="none"):
    """(out, softmax_lse, rng_state) for tensors; differentiable in the inputs (and sinks)."""
    if not torch.compiler.is_compiling():  # (dynamo cannot trace the check; its own tracing needs none)
        _refuse_functorch(list(inputs) + [x for _, x in spec.arrays()])
        _check_data(inputs, spec, packing)
    _check_no_grad(spec)
    _core.check_spec(spec)  # before _flat turns the scalars into ints
    needs_grad = torch.is_grad_enabled() and (
        any(x.requires_grad for x in inputs) or (spec.sinks is not None and spec.sinks.requires_grad))
    flat = _flat(spec)
    if not needs_grad:
        q, k, v = _Packing.split(packing, inputs)
        return (forward_op if _symbolic(inputs) else _forward)(q, k, v, *flat)
    tensors = list(flat[:7]) + [flat[-2]] + list(inputs)
    if torch.compiler.is_compiling():
        tensors = _distinct(tensors)
    return AttentionFunction.apply(packing, flat[7:-2] + flat[-1:], *tensors)


def _kvcache(q: Tensor, k_cache: Tensor, v_cache: Tensor, k: Optional[Tensor], v: Optional[Tensor],
             rotary_cos: Optional[Tensor], rotary_sin: Optional[Tensor], cache_seqlens: Optional[Tensor],
             cache_seqlens_int: int, cache_batch_idx: Optional[Tensor], cache_leftpad: Optional[Tensor],
             block_table: Optional[Tensor], alibi_slopes: Optional[Tensor], k_scale: Optional[Tensor],
             v_scale: Optional[Tensor], softmax_scale: Optional[float], causal: bool, window_left: int,
             window_right: int, softcap: float, rotary_interleaved: bool, num_splits: int,
             return_lse: bool) -> Tuple[Tensor, Tensor]:
    """flash_attn_with_kvcache as one operator, for traced code: (out, softmax_lse, or an empty tensor without
    return_lse); k and v appended into k_cache and v_cache in place. cache_seqlens_int: an int cache_seqlens
    (-1 when it is the tensor or None)."""
    from . import _kvcache

    spec = _core.Spec(softmax_scale=softmax_scale, causal=causal, window_size=(window_left, window_right),
                      softcap=softcap, alibi_slopes=alibi_slopes)
    seqlens = cache_seqlens if cache_seqlens is not None else cache_seqlens_int if cache_seqlens_int >= 0 else None
    out, lse = _kvcache.forward_kvcache(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, seqlens, cache_batch_idx,
                                        cache_leftpad, block_table, spec, rotary_interleaved, num_splits, return_lse,
                                        k_scale, v_scale)
    return out, lse if lse is not None else out.new_empty((0,), dtype=torch.float32)


# With an append the call writes the caches: declared, so that the compiled graph orders it against their other
# readers. Without one it writes nothing, and a second operator says so (a declared write makes aot_eager copy
# both caches in and out on every call).
kvcache_op = torch.library.custom_op("flashcl::forward_kvcache", mutates_args=("k_cache", "v_cache"))(_kvcache)
kvcache_read_op = torch.library.custom_op("flashcl::forward_kvcache_read", mutates_args=())(_kvcache)


def _kvcache_fake(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_seqlens_int,
                  cache_batch_idx, cache_leftpad, block_table, alibi_slopes, k_scale, v_scale, softmax_scale, causal,
                  window_left, window_right, softcap, rotary_interleaved, num_splits, return_lse):
    b, sq, hq = q.shape[:3]
    out = q.new_empty((b, sq, hq, v_cache.shape[-1]))
    return out, q.new_empty((b, hq, sq) if return_lse else (0,), dtype=torch.float32)


kvcache_op.register_fake(_kvcache_fake)
kvcache_read_op.register_fake(_kvcache_fake)


def _exact(x, types):
    """x is of one of these types exactly (a bool is not an int here, as the eager checks see it)."""
    return type(x) in types


def kvcache(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx, cache_leftpad,
            block_table, softmax_scale, causal, window_size, softcap, rotary_interleaved, alibi_slopes, num_splits,
            return_lse, k_scale, v_scale):
    """flash_attn_with_kvcache through an operator when torch.compile traces it (dynamo would otherwise trace
    into the argument checks, which read cache_seqlens' values: a graph break, or an error with
    fullgraph=True); None when the call should run as it is: not compiling, caches that are not tensors or
    that require grad, or arguments the operator's schema would coerce (any value but a plain bool, int or
    float of the kind the eager checks accept runs those checks, which then refuse or convert it)."""
    if not (torch.compiler.is_compiling() and isinstance(k_cache, Tensor) and isinstance(v_cache, Tensor)):
        return None
    if k_cache.requires_grad or v_cache.requires_grad:
        return None
    if not (isinstance(window_size, (tuple, list)) and len(window_size) == 2):
        return None
    window_left, window_right = window_size
    ints = (window_left, window_right, num_splits)
    # The flags as the eager checks take them (_core.as_bool): a bool, or a plain int as its truth value.
    if not (all(_exact(x, (int,)) for x in ints) and _exact(causal, (bool, int))
            and _exact(rotary_interleaved, (bool, int)) and (softmax_scale is None or _exact(softmax_scale, (int, float)))
            and (softcap is None or _exact(softcap, (int, float))) and _exact(return_lse, (bool, int))):
        return None
    if not (cache_seqlens is None or isinstance(cache_seqlens, Tensor)
            or (_exact(cache_seqlens, (int,)) and cache_seqlens >= 0)):
        return None  # (a negative int is refused by the eager checks, with their message)
    scales = []
    for x in (k_scale, v_scale):
        if x is not None and not isinstance(x, Tensor):
            if not _exact(x, (int, float)):
                return None
            x = torch.tensor([float(x)], dtype=torch.float32)
        scales.append(x)
    tensors = (q, k, v, rotary_cos, rotary_sin, cache_batch_idx, cache_leftpad, block_table, alibi_slopes)
    if not all(x is None or isinstance(x, Tensor) for x in tensors):  # (the scales are by now)
        return None
    # The results carry no gradient, as eager ones: inputs that require grad go in detached (an operator
    # without an autograd formula would make AOT autograd refuse the graph).
    (q, k, v, rotary_cos, rotary_sin, alibi_slopes, k_scale, v_scale) = (
        x.detach() if x is not None else None for x in (q, k, v, rotary_cos, rotary_sin, alibi_slopes) + tuple(scales))
    seqlens_int = cache_seqlens if _exact(cache_seqlens, (int,)) else -1
    seqlens = cache_seqlens if isinstance(cache_seqlens, Tensor) else None
    op = kvcache_op if k is not None or v is not None else kvcache_read_op
    return op(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, seqlens, seqlens_int, cache_batch_idx,
              cache_leftpad, block_table, alibi_slopes, k_scale, v_scale,
              None if softmax_scale is None else float(softmax_scale), bool(causal), window_left, window_right,
              float(softcap or 0.0), bool(rotary_interleaved), num_splits, bool(return_lse))
