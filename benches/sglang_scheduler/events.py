"""The forward stream and its completion events, on CUDA and on the CPU.

SGLang's overlap loop launches forward N+1 on its forward stream before it processes
the result of forward N; the pools order their own work against in-flight forwards
with ``wait_stream(forward_stream)`` (an eager free), ``wait_event(forward_done)`` (an
urgent lazy flush) and ``event.query()`` (a non-urgent flush, reuse of vacated pages).

On CUDA these are real: a ``torch.cuda.Stream`` and ``torch.cuda.Event`` s, the forward's
writes are kernels on that stream (optionally after a ``torch.cuda._sleep`` so that the
forward is really still running while the scheduler goes on).

On the CPU there is no asynchrony, so it is modelled, worst case: a forward's effects
(its reads and writes of the pool's bytes) are queued at launch and *land* only when
something waits for it: the scheduler's ``copy_done.synchronize()`` when it processes
that forward's result, a pool's ``wait_stream``/``wait_event``/``event.synchronize()``,
or the driver's own drain. Everything the scheduler does on its stream runs at once.
Host stand-ins for ``torch.cuda.current_stream()`` turn the pools' stream waits into
landings: SGLang's allocator module gets a ``torch`` whose ``cuda.current_stream()`` is
the host stream (nothing else of it differs), the drop-in its ``current_stream`` seam.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import torch


class HostEvent:
    """A forward's completion on the CPU: done once its effects have landed."""

    def __init__(self, stream: HostForwardStream) -> None:
        self._stream = stream
        self.done = False

    def query(self) -> bool:
        return self.done

    def synchronize(self) -> None:
        self._stream.land_until(self)

    def record(self, stream: Any = None) -> None:
        """Recorded at launch (the forward stream's queue is its order)."""


class HostForwardStream:
    """The forward stream on the CPU: launched forwards land in launch order."""

    def __init__(self) -> None:
        self._queue: collections.deque[tuple[HostEvent, Callable[[], None]]] = collections.deque()

    def launch(self, effects: Callable[[], None]) -> HostEvent:
        ev = HostEvent(self)
        self._queue.append((ev, effects))
        return ev

    def land_until(self, event: HostEvent) -> None:
        while not event.done and self._queue:
            ev, effects = self._queue.popleft()
            effects()
            ev.done = True

    def synchronize(self) -> None:
        while self._queue:
            self.land_until(self._queue[-1][0])

    def wait_stream(self, other: Any) -> None:
        """``forward_stream.wait_stream(schedule_stream)``: the scheduler's work already ran."""

    @property
    def in_flight(self) -> int:
        return len(self._queue)


class HostCurrentStream:
    """What ``torch.cuda.current_stream()`` returns on the CPU: the scheduler's stream."""

    def wait_stream(self, other: Any) -> None:
        if isinstance(other, HostForwardStream):
            other.synchronize()

    def wait_event(self, event: Any) -> None:
        if event is not None and hasattr(event, "synchronize"):
            event.synchronize()

    def synchronize(self) -> None:
        pass


HOST_STREAM = HostCurrentStream()


class _CudaOnHost:
    """``torch.cuda`` with ``current_stream()`` answering the host stream."""

    def __getattr__(self, name: str) -> Any:
        if name == "current_stream":
            return lambda *a, **k: HOST_STREAM
        return getattr(torch.cuda, name)


class _TorchOnHost:
    """``torch`` whose ``cuda`` is :class:`_CudaOnHost`."""

    cuda = _CudaOnHost()

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)


def install_host_streams() -> None:
    """Route the pools' ``current_stream()`` to the host stream (CPU runs only)."""
    from sglang_scheduler import release

    sglang_alloc = release.import_allocator_module()
    if getattr(sglang_alloc, "__ukv_dropin__", False):
        from ukv.integrations.sglang import allocator as dropin_alloc

        dropin_alloc.current_stream = lambda: HOST_STREAM
    else:
        sglang_alloc.torch = _TorchOnHost()


class CudaForwardStream:
    """The forward stream on CUDA: a real stream; ``launch`` runs the effects on it."""

    def __init__(self, delay_us: int = 0) -> None:
        self.stream = torch.cuda.Stream()
        self.delay_cycles = int(delay_us * 1500)  # ~1.5 GHz SM clock

    def launch(self, effects: Callable[[], None]) -> torch.cuda.Event:
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            if self.delay_cycles:
                torch.cuda._sleep(self.delay_cycles)
            effects()
            ev = torch.cuda.Event()
            ev.record(self.stream)
        return ev

    def synchronize(self) -> None:
        self.stream.synchronize()

    @property
    def in_flight(self) -> int:
        return 0 if self.stream.query() else 1


def forward_stream(device: str, delay_us: int = 0) -> Any:
    return CudaForwardStream(delay_us) if device == "cuda" else HostForwardStream()


def sglang_stream_arg(stream: Any) -> Any:
    """What the pools' factories get as ``forward_stream``."""
    return stream.stream if isinstance(stream, CudaForwardStream) else stream
