"""Contexts: which OpenCL device the calls run on.

A flashcl_context is not thread-safe, so each thread gets its own default
context, created on first use on the device FLASHCL_DEVICE names (else the
first GPU, else the first device). use_device() changes the device of the
default contexts of every thread; `with Context(...)` runs the calls of one
thread on a given context.
"""
import os
import threading

from . import _flashcl

_local = threading.local()
_default_spec = None
_default_generation = 0  # bumped by use_device(): threads rebuild their default context
_driver_loaded = False  # this process, or the one it was forked from, loaded the OpenCL driver
_forked_after_load = False  # ... and this process was forked after that


def _after_fork_in_child():
    global _forked_after_load
    _forked_after_load = _driver_loaded


# A fork is noted as it happens rather than found by comparing process ids on every call: the check
# is then one flag, which torch.compile traces without a graph break (it cannot trace os.getpid).
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def driver_used():
    """Called before anything that loads the OpenCL driver: refused in a process forked after the
    driver was loaded (see _check_not_forked); else remembers that it is loaded."""
    global _driver_loaded
    _check_not_forked()
    _driver_loaded = True


def _check_not_forked():
    """OpenCL drivers do not survive fork(): POCL's threads stay in the parent, and a child's first
    call, even on a new context, waits for them forever. Refused as PyTorch refuses CUDA there."""
    if _forked_after_load:
        raise RuntimeError(
            "FlashCL cannot run in a process forked after it made an OpenCL context (the driver's threads and "
            "state do not survive fork()): start child processes with the 'spawn' or 'forkserver' method "
            "(multiprocessing.set_start_method('spawn'), DataLoader(multiprocessing_context='spawn')), or make "
            "the first FlashCL call in the children only")


class Context:
    """An OpenCL device with FlashCL's programs, plans and scratch memory for it.

    device: "P:D" (platform, device index as flashcl.devices() lists them) or
    text matched against the device's and the platform's names and vendors; None uses
    FLASHCL_DEVICE, else the first GPU, else the first device.
    zero_copy: on devices that share host memory (POCL, integrated GPUs) the
    kernels work on the arrays' memory in place; False copies through device
    buffers instead (what a discrete GPU always does).
    profiling: the context's queue records device times, for trace_kernels()
    (FLASHCL_PROFILING=1 does the same for every context; on NVIDIA a launch
    then costs about 7 us more).

    Used as `with ctx:` it becomes the context of this thread's calls.
    Calls on one context from several threads are serialised.
    """

    def __init__(self, device=None, zero_copy=True, profiling=False):
        # Named here: the binding's own refusal lists its signature and names no argument.
        if device is not None and not isinstance(device, str):
            raise TypeError(f"device must be a str ('P:D' from flashcl.devices(), or part of a device or platform "
                            f"name) or None, got {type(device).__name__}")
        if not isinstance(zero_copy, bool):
            raise TypeError(f"zero_copy must be a bool, got {type(zero_copy).__name__}")
        if not isinstance(profiling, bool):
            raise TypeError(f"profiling must be a bool, got {type(profiling).__name__}")
        driver_used()
        self._c = _flashcl.Context(device, zero_copy, profiling)

    device_name = property(lambda self: self._c.device_name)
    platform_name = property(lambda self: self._c.platform_name)
    device_type = property(lambda self: self._c.device_type, doc="'cpu', 'gpu', 'accelerator' or 'other'")
    host_unified_memory = property(lambda self: self._c.host_unified_memory)
    zero_copy = property(lambda self: self._c.zero_copy, doc="whether calls use the arrays' memory in place")
    cache_dir = property(lambda self: self._c.cache_dir, doc="the on-disk program cache ('' when off)")
    scratch_bytes = property(lambda self: self._c.scratch_bytes)

    def release_scratch(self):
        _check_not_forked()
        self._c.release_scratch()

    def transfer_stats(self):
        """Buffers made in place and by copying, and bytes copied, since the context was made."""
        _check_not_forked()
        return self._c.transfer_stats()

    @property
    def profiling(self):
        """Whether the queue records device times (trace_kernels needs it)."""
        _check_not_forked()
        return self._c.profiling

    def trace_kernels(self):
        """Where the time goes: `with ctx.trace_kernels() as trace: ...` runs the block's calls on this
        context (as `with ctx:`) and records every kernel they launch; after the block, trace.kernels is
        [(kernel name, device ms), ...] in launch order (the first 4096; NaN where the device gave no
        time), trace.launches how many there were, trace.by_kernel() {name: (ms, launches)}. Calls of
        other threads on this context are recorded too. One block at a time per context. Needs
        Context(profiling=True) or FLASHCL_PROFILING=1."""
        _check_not_forked()
        if not self._c.profiling:
            raise ValueError("trace_kernels needs a context whose queue records times: "
                             "flashcl.Context(profiling=True), or FLASHCL_PROFILING=1 before it is made")
        return KernelTrace(self)

    def __enter__(self):
        _stack().append(self)
        return self

    def __exit__(self, *exc):
        _stack().pop()
        return False

    def __repr__(self):
        return f"flashcl.Context({self.device_name!r}, {self.platform_name!r})"


class KernelTrace:
    """The kernels a block of calls launched, with their device times (Context.trace_kernels)."""

    def __init__(self, context):
        self._context = context
        self.kernels = []
        self.launches = 0

    def __enter__(self):
        ctx = self._context
        if getattr(ctx, "_tracing", False):  # a second block would stop the first's recording at its end
            raise RuntimeError("a trace_kernels() block is already open on this context")
        ctx._c.trace_kernels(True)
        ctx._tracing = True
        _stack().append(ctx)
        return self

    def __exit__(self, exc_type, exc, tb):
        ctx = self._context
        _stack().pop()
        try:
            if exc_type is None:  # (after an error the block's kernels are not waited for)
                self.kernels, self.launches = ctx._c.trace_read()
        finally:
            ctx._tracing = False
            ctx._c.trace_kernels(False)
        return False

    def by_kernel(self):
        """{kernel name: (device ms summed over its launches, launches)}, in order of first launch."""
        totals = {}
        for name, ms in self.kernels:
            total, count = totals.get(name, (0.0, 0))
            totals[name] = (total + ms, count + 1)
        return totals

    def __repr__(self):
        parts = ", ".join(f"{name} {ms:.4f} ms x{n}" for name, (ms, n) in self.by_kernel().items())
        return f"KernelTrace({self.launches} launches: {parts})"


def _stack():
    s = getattr(_local, "stack", None)
    if s is None:
        s = _local.stack = []
    return s


def resolve(context):
    """The context a call runs on: the one given, else current()."""
    if context is None:
        return current()
    if not isinstance(context, Context):  # (a device spec string failed later, as "'str' has no attribute '_c'")
        raise ValueError(f"context must be a flashcl.Context (flashcl.Context(spec) opens one), not "
                         f"{type(context).__name__}")
    _check_not_forked()
    return context


def current():
    """The context this thread's calls use now."""
    _check_not_forked()
    s = getattr(_local, "stack", None)
    if s:
        return s[-1]
    ctx = getattr(_local, "default", None)
    if ctx is None or _local.generation != _default_generation:
        ctx = _local.default = Context(_default_spec)
        _local.generation = _default_generation
    return ctx


def use_device(device=None):
    """Sets the device of every thread's default context (None: back to FLASHCL_DEVICE's rule).

    Checks the device now, on this thread, and raises flashcl.Error if it does not exist.
    """
    global _default_spec, _default_generation
    ctx = Context(device)
    _default_spec = device
    _default_generation += 1
    _local.default, _local.generation = ctx, _default_generation
    return ctx
