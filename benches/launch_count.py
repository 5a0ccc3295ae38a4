"""Kernel launches, copies and host-device syncs per call, counted with ``torch.profiler``.

A bench wraps each call it wants counted in a named scope and runs a stretch of code
under :meth:`LaunchCounter.recording`; :meth:`LaunchCounter.counts` then says what ran on
the GPU on behalf of each scope::

    counter = LaunchCounter(cuda=True)
    with counter.recording():
        for _ in range(steps):
            with counter.scope("alloc_decode"):
                allocator.alloc_decode(...)
            ...  # work outside every scope is counted under OUTSIDE
    per_scope = counter.counts()  # {"alloc_decode": Counts(kernels=..., ...), OUTSIDE: ...}

Method (CUDA): the profiler records CPU and CUDA activity. A scope is a
``record_function`` range named ``ukvbench::<name>``. Every device activity (a kernel, a
memcpy, a memset) is matched to the host API call that launched it (``cudaLaunchKernel``,
``cuLaunchKernel`` (Triton), ``cudaMemcpyAsync``, ...) by CUPTI's correlation id, and
counted in the scope during which that call started on the host. A device activity whose
API call is not in the trace is placed by the torch op it is linked to; one with neither
is counted as unattributed (reported, so a gap in the method shows instead of vanishing).
Syncs (``cudaStreamSynchronize``, ``cudaDeviceSynchronize``, ``cudaEventSynchronize`` and
the driver's ``cu*Synchronize``) are host API calls, counted where they start. The API
calls that launch a kernel are counted too (``launch_calls``): where every launch is in
the trace they equal ``kernels``, a cross-check of the attribution.

Triton kernels are launched by Triton's own launcher (``cuLaunchKernelEx``), inside no
torch op. While recording, every Triton launch (``JITFunction.run``, and the
interpreter's ``InterpretedFunction.run``) runs inside a ``triton::<kernel>`` marker, a
``RecordFunction`` of the op kind (``torch._C._profiler._RecordFunctionFast``, what
Inductor marks its Triton launches with), so its kernel is linked to the marker even where
the profiler keeps no record of the driver call; the markers also count Triton launches
per scope (``triton``).

On CPU there is no device activity: :class:`Counts` then holds the aten ops each scope
ran (``aten_ops``, nested ones included) and the Triton launches (run by Triton's
interpreter), so a CPU smoke run exercises the scopes and their attribution, not a launch
count.

Standard library and torch only.
"""

from __future__ import annotations

import bisect
import contextlib
import importlib
import inspect
import logging
import re
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import torch

SCOPE_PREFIX = "ukvbench::"
TRITON_PREFIX = "triton::"
OUTSIDE = "(outside every scope)"
UNATTRIBUTED = "(unattributed)"

_LAUNCH_API = re.compile(r"^cu(da)?(Launch(Cooperative)?Kernel|GraphLaunch)")
_MEMCPY_API = re.compile(r"^cu(da)?Memcpy")
_MEMSET_API = re.compile(r"^cu(da)?Memset")
_SYNC_API = re.compile(r"^cu(da)?(Stream|Device|Event|Ctx)Synchronize")


@dataclass
class Counts:
    """What one scope ran (totals over the recording; divide by steps for a rate)."""

    kernels: int = 0  # device kernels launched from inside the scope
    memcpys: int = 0  # device memcpys (host<->device and device<->device)
    memsets: int = 0
    syncs: int = 0  # host calls that wait for the device
    launch_calls: int = 0  # host API calls that launch a kernel (cross-check of kernels)
    triton: int = 0  # Triton kernel launches (their markers) inside the scope
    aten_ops: int = 0  # CPU only: aten ops run inside the scope (nested ones included)

    def add(self, other: Counts) -> None:
        for k, v in asdict(other).items():
            setattr(self, k, getattr(self, k) + v)

    def per(self, n: int) -> dict[str, float]:
        """Each count divided by ``n`` (steps)."""
        return {k: v / n for k, v in asdict(self).items()}


def _api_kind(name: str) -> str | None:
    """What a host API call of this name launches: ``"kernel"``, ``"memcpy"``,
    ``"memset"``, ``"sync"`` (it waits instead), or None (something else)."""
    if _LAUNCH_API.match(name):
        return "kernel"
    if _MEMCPY_API.match(name):
        return "memcpy"
    if _MEMSET_API.match(name):
        return "memset"
    if _SYNC_API.match(name):
        return "sync"
    return None


def _device_kind(name: str) -> str | None:
    """By its name alone (for a device activity whose API call is not in the trace):
    ``"memcpy"``, ``"memset"``, None for a sync or wait record, else ``"kernel"``."""
    low = name.lower()
    if "memcpy" in low:
        return "memcpy"
    if "memset" in low:
        return "memset"
    if "sync" in low or "wait" in low:
        return None
    return "kernel"


def attribute(events: Iterable[Any], cuda: bool) -> dict[str, Counts]:
    """Per scope (its name without the prefix), plus :data:`OUTSIDE` and
    :data:`UNATTRIBUTED`: the counts of ``events``, the profiler's kineto events
    (``prof.profiler.kineto_results.events()``; anything with their methods).
    """
    cpu, dev = [], []
    for e in events:
        (dev if e.device_type() != torch.autograd.DeviceType.CPU else cpu).append(e)
    scopes = sorted(
        (e.start_ns(), e.end_ns(), e.name()[len(SCOPE_PREFIX) :])
        for e in cpu
        if e.name().startswith(SCOPE_PREFIX)
    )
    starts = [s[0] for s in scopes]

    def where(t: int) -> str:
        i = bisect.bisect_right(starts, t) - 1
        if i >= 0 and t <= scopes[i][1]:
            return scopes[i][2]
        return OUTSIDE

    out: dict[str, Counts] = {name: Counts() for _, _, name in scopes}
    out.setdefault(OUTSIDE, Counts())
    out[UNATTRIBUTED] = Counts()
    api_at: dict[int, tuple[str, int]] = {}  # CUPTI correlation id -> (kind, start)
    op_at: dict[int, int] = {}  # torch op id -> its start
    annotations = set()
    for e in cpu:
        name, t = e.name(), e.start_ns()
        if name.startswith(SCOPE_PREFIX):
            annotations.add(name)
            continue
        if getattr(e, "is_user_annotation", lambda: False)():
            annotations.add(name)
        at = out.setdefault(where(t), Counts())
        api = _api_kind(name)
        if api == "sync":
            at.syncs += 1
        elif api is not None:
            at.launch_calls += api == "kernel"
            api_at[e.correlation_id()] = (api, t)
        else:
            op_at[e.correlation_id()] = t
            if name.startswith(TRITON_PREFIX):
                at.triton += 1
            elif not cuda and name.startswith("aten::"):
                at.aten_ops += 1
    for e in dev:
        name = e.name()
        if name in annotations or getattr(e, "is_user_annotation", lambda: False)():
            continue  # the device-side mirror of a record_function range
        kind, t = api_at.get(e.correlation_id(), (None, None))
        if kind is None:  # its API call is not in the trace: by name and linked op
            kind, t = _device_kind(name), op_at.get(e.linked_correlation_id())
            if kind is None:
                continue
        at = out[UNATTRIBUTED] if t is None else out.setdefault(where(t), Counts())
        if kind == "kernel":
            at.kernels += 1
        elif kind == "memcpy":
            at.memcpys += 1
        else:
            at.memsets += 1
    return out


class LaunchCounter:
    """Scopes and a profiler recording around them (see the module docstring).

    Args:
        cuda: Record CUDA activity (else CPU only: :attr:`Counts.aten_ops`).
    """

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self.active = False  # scopes are recorded only while a recording runs
        self._events: list[Any] = []

    def scope(self, name: str) -> contextlib.AbstractContextManager[Any]:
        """A named scope (a ``record_function`` range while recording, else nothing)."""
        if not self.active:
            return contextlib.nullcontext()
        return torch.profiler.record_function(SCOPE_PREFIX + name)

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        """Record everything that runs inside (the device is drained at both ends)."""
        acts = [torch.profiler.ProfilerActivity.CPU]
        if self.cuda:
            acts.append(torch.profiler.ProfilerActivity.CUDA)
            torch.cuda.synchronize()
        kw: dict[str, Any] = {}
        if "post_processing_timeout_s" in inspect.signature(torch.profiler.profile).parameters:
            # Only the raw events are read here: torch's own parse of them into
            # FunctionEvents (~100 µs an event) is cut short at once.
            kw["post_processing_timeout_s"] = 0.0
        log = logging.getLogger("torch.autograd.profiler")
        level = log.level
        log.setLevel(logging.ERROR)  # "timed out, returning partial results"
        try:
            with triton_markers(), torch.profiler.profile(activities=acts, **kw) as prof:
                self.active = True
                try:
                    yield
                    if self.cuda:
                        torch.cuda.synchronize()
                finally:
                    self.active = False
        finally:
            log.setLevel(level)
        self._events = list(prof.profiler.kineto_results.events())

    def counts(self) -> dict[str, Counts]:
        """Per scope of the last recording (see :func:`attribute`)."""
        return attribute(self._events, self.cuda)


def _launchers() -> list[type]:
    """Triton's kernel classes whose ``run`` launches a kernel (those importable)."""
    found = []
    for module, name in (
        ("triton.runtime.jit", "JITFunction"),
        ("triton.runtime.interpreter", "InterpretedFunction"),
    ):
        try:
            found.append(getattr(importlib.import_module(module), name))
        except (ImportError, AttributeError):
            pass
    return found


@contextlib.contextmanager
def triton_markers() -> Iterator[None]:
    """Every Triton launch inside runs in a ``triton::<kernel>`` op-kind marker."""
    mark = getattr(torch._C._profiler, "_RecordFunctionFast", None)
    patched = []
    if mark is not None:
        for cls in _launchers():
            run = cls.__dict__.get("run")
            if run is None:
                continue

            def marked(self: Any, *args: Any, _run: Any = run, **kw: Any) -> Any:
                if kw.get("warmup"):
                    return _run(self, *args, **kw)
                name = getattr(getattr(self, "fn", None), "__name__", "kernel")
                with mark(TRITON_PREFIX + name):
                    return _run(self, *args, **kw)

            cls.run = marked
            patched.append((cls, run))
    try:
        yield
    finally:
        for cls, run in patched:
            cls.run = run
