"""A lighter launch path for ukv's own Triton launches on CUDA.

Triton's ``kernel[grid](...)`` re-derives, on every call, the specialisation of every
argument (dtype, 16-byte alignment, "equals 1") to find the compiled kernel; on an H200
host that is about 9 of the 14 µs a small launch costs (``benches/results/probe-h200.md``).
A ukv call site knows which of its arguments can change that specialisation, so it
passes a small key of exactly those facts. The first launch under a key goes through
Triton (compiling if needed) and keeps the compiled kernel's C launch function; later
launches call it directly with the current stream (what Triton's launcher object does,
minus its per-launch scratch allocation, which ukv's kernels do not use).

Only Triton releases whose launcher signature was checked on a GPU use the direct path
(:data:`DIRECT_TRITON`); every other version, Triton's interpreter, and any run with a
launch hook installed (profilers) take the ordinary path. ``UKV_DIRECT_LAUNCH=0`` turns
the direct path off.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import torch

try:
    import triton
    from triton import knobs as _knobs
except ImportError:  # pragma: no cover - Triton is Linux-only
    triton = None  # type: ignore[assignment]
    _knobs = None  # type: ignore[assignment]

DIRECT_TRITON = ("3.6",)
"""``major.minor`` Triton versions whose ``CompiledKernel.run`` signature ukv was run with."""

_get_stream: Callable[[int], int] = (
    torch._C._cuda_getCurrentRawStream if torch.cuda.is_available() else None  # type: ignore[assignment]
)
"""The current raw CUDA stream of a device index; None without CUDA (no direct launches)."""


def direct_launch_enabled() -> bool:
    """Whether :class:`DirectKernel` may bypass Triton's per-call binder here."""
    if triton is None or _knobs is None or _get_stream is None:
        return False
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        return False
    if os.environ.get("UKV_DIRECT_LAUNCH", "1") == "0":
        return False
    return ".".join(triton.__version__.split(".")[:2]) in DIRECT_TRITON


def _hooked() -> bool:
    """Whether a launch hook is installed (a profiler): then Triton's own path runs it."""
    hook = _knobs.runtime.launch_enter_hook
    return hook is not None and bool(getattr(hook, "calls", True))


class DirectKernel:
    """One ``@triton.jit`` kernel launched through its compiled launcher when possible.

    Args:
        fn: The jitted kernel.
        num_warps: Warps per program, fixed for the call site.
    """

    def __init__(self, fn: Any, num_warps: int) -> None:
        self.fn = fn
        self.num_warps = num_warps
        self.direct = direct_launch_enabled()
        self._compiled: dict[Hashable, tuple[Any, Any, Any, Any, Any]] = {}

    def entry(self, key: Hashable) -> tuple[Any, Any, Any, Any, Any] | None:
        """The cached ``(launch, function, cooperative, pdl, metadata)`` under ``key`` when
        the direct path may be used now; None otherwise (then call :meth:`launch`). A hot
        call site that calls the C launch itself passes, after those five and the grid,
        stream and ``None, None`` scratch, ``metadata, None, None, None``, the runtime
        arguments and the constexpr values (see :meth:`launch`)."""
        hit = self._compiled.get(key) if self.direct else None
        return None if hit is None or _hooked() else hit

    def launch(
        self,
        grid: tuple[int, int],
        device_index: int,
        key: Hashable,
        args: Sequence[Any],
        jit_args: Callable[[], Sequence[Any]],
        constexprs: dict[str, Any],
    ) -> None:
        """Launch on the current stream of ``device_index``.

        Args:
            grid: ``(axis0, axis1)`` program counts.
            device_index: The CUDA device the pool lives on (the current device).
            key: Everything about ``args`` that changes Triton's specialisation (dtypes,
                16-byte alignment of pointers, integers equal to 1 or divisible by 16,
                except those the kernel marks ``do_not_specialize``), plus the
                constexpr values.
            args: Runtime arguments in the kernel's order; pointers as plain int device
                addresses (what Triton's launcher takes without inspecting them).
            jit_args: Makes the same with tensors for the pointers, for Triton's own
                path (the first launch under a key, or no direct path).
            constexprs: The constexpr arguments by name (they follow ``args``).
        """
        if device_index >= 0 and torch._C._cuda_getDevice() != device_index:
            # The kernel's module is loaded in, and Triton compiles for, the current
            # device: make it the pool's for this launch (review round 3, S2).
            with torch.cuda.device(device_index):
                self.launch(grid, device_index, key, args, jit_args, constexprs)
            return
        hit = self._compiled.get(key) if self.direct else None
        if hit is not None and not _hooked():
            raw, function, coop, pdl, metadata = hit
            # What CudaLauncher.__call__ does, minus the scratch allocation (none here).
            raw(
                grid[0],
                grid[1],
                1,
                _get_stream(device_index),
                function,
                coop,
                pdl,
                None,
                None,
                metadata,
                None,
                None,
                None,
                *args,
                *constexprs.values(),
            )
            return
        compiled = self.fn[grid](*jit_args(), **constexprs, num_warps=self.num_warps)
        if self.direct and compiled is not None:
            entry = _raw_launch(compiled)
            if entry is not None:
                self._compiled[key] = entry


def _raw_launch(compiled: Any) -> tuple[Any, Any, Any, Any, Any] | None:
    """The C launch function of a compiled kernel and its fixed arguments, when it needs
    no per-launch scratch memory (ukv's kernels need none); None otherwise."""
    launcher = getattr(compiled, "run", None)
    raw = getattr(launcher, "launch", None)
    if raw is None:
        return None
    if getattr(launcher, "global_scratch_size", 1) or getattr(launcher, "profile_scratch_size", 1):
        return None
    coop = getattr(launcher, "launch_cooperative_grid", None)
    pdl = getattr(launcher, "launch_pdl", None)
    if coop is None or pdl is None:
        return None
    return raw, compiled.function, coop, pdl, compiled.packed_metadata
