"""The pool's byte buffer: one ``uint8`` tensor every sub-pool's views are built over, and
how its memory is given back and taken again (``release_memory`` / ``resume_memory``).

Three kinds, chosen once at construction (:func:`allocate`):

- :class:`VirtualBuffer` (CUDA, the default where the driver can): memory mapped behind a
  reserved virtual range (:mod:`ukv.execution.vmm`). A release unmaps and frees the
  physical memory; a resume maps new memory **at the same address**, so kernels, views
  and CUDA graphs captured before the release (SGLang's decode graphs) stay valid.
- :class:`EngineBuffer` (``allocation_context=``): allocated by torch inside a context the
  engine gives (e.g. SGLang's ``memory_saver_adapter.region(...)``), so the engine's
  allocator owns the memory and the engine pauses and resumes it. The pool never frees or
  reallocates it, so its address stays; a release only stops the pool touching it.
- :class:`TorchBuffer` (CPU, ``meta``, drivers without virtual memory management,
  ``virtual_memory=False``): torch's allocator. A release shrinks the storage to nothing;
  a resume allocates new memory, at a new address.

Each buffer comes zeroed (a padding write to physical token 0 lands in zeros; a page
nobody wrote reads zeros), but ``meta`` ones, which hold no memory.
"""

from __future__ import annotations

import contextlib
import logging
import weakref
from collections.abc import Callable
from typing import Any

import torch

from ukv.errors import PoolConfigError
from ukv.execution import vmm

logger = logging.getLogger("ukv")

AllocationContext = Callable[[], contextlib.AbstractContextManager[Any]]
"""A zero-argument callable returning the context the buffer is allocated in."""


class Buffer:
    """The byte buffer and how its memory is given back.

    Attributes:
        raw: shape ``[total_bytes]`` uint8 on the pool's device.
        kind: ``"cuda-vmm"``, ``"engine"`` or ``"torch"``.
        keeps_address: Whether :meth:`resume` brings the memory back at ``raw``'s
            address (the pool never moves it).
        why_moves: Why it does not keep the address ("" when it does).
    """

    kind = "torch"
    keeps_address = False
    why_moves = ""

    def __init__(self, raw: torch.Tensor) -> None:
        self.raw = raw

    def release(self) -> None:
        """Give the memory back (the caller made sure no kernel still uses it)."""
        raise NotImplementedError

    def resume(self) -> None:
        """Take memory back (contents undefined). On failure the memory stays given back
        and the call may be repeated."""
        raise NotImplementedError


class TorchBuffer(Buffer):
    """Memory from torch's allocator: a resume brings it back at a new address."""

    def __init__(self, total_bytes: int, device: torch.device, why_moves: str) -> None:
        if device.type == "meta":
            raw = torch.empty(total_bytes, dtype=torch.uint8, device=device)
        else:
            raw = torch.zeros(total_bytes, dtype=torch.uint8, device=device)
        super().__init__(raw)
        self.why_moves = why_moves

    def release(self) -> None:
        self.raw.untyped_storage().resize_(0)
        if self.raw.is_cuda:
            with torch.cuda.device(self.raw.device):
                torch.cuda.empty_cache()  # back to the driver, not only to torch's cache

    def resume(self) -> None:
        self.raw.untyped_storage().resize_(self.raw.numel())


class EngineBuffer(Buffer):
    """Memory the engine's allocation context owns; the engine gives it back and takes it
    again (after :meth:`release`, before :meth:`resume`), the pool never does."""

    kind = "engine"
    keeps_address = True

    def __init__(self, total_bytes: int, device: torch.device, context: AllocationContext):
        with context():
            if device.type == "meta":
                raw = torch.empty(total_bytes, dtype=torch.uint8, device=device)
            else:
                raw = torch.zeros(total_bytes, dtype=torch.uint8, device=device)
        super().__init__(raw)

    def release(self) -> None:
        pass  # the engine pauses its region

    def resume(self) -> None:
        pass  # the engine resumed its region before resume_memory()


class _CudaArray:
    """What ``torch.as_tensor`` reads a device pointer from; the tensor's storage keeps
    it (and through it the mapping) alive."""

    def __init__(self, mapping: vmm.Mapping, nbytes: int) -> None:
        self.mapping = mapping
        self.__cuda_array_interface__ = {
            "shape": (nbytes,),
            "typestr": "|u1",
            "data": (mapping.address, False),
            "version": 2,
        }


class VirtualBuffer(Buffer):
    """CUDA memory mapped behind a reserved range: released and resumed in place.

    Raises:
        vmm.DriverError: reserving or mapping failed.
        RuntimeError: torch did not wrap the range in place.
    """

    kind = "cuda-vmm"
    keeps_address = True

    def __init__(self, total_bytes: int, device: torch.device, driver: vmm.Driver) -> None:
        with torch.cuda.device(device):
            torch.cuda.synchronize()  # makes the device's primary context current
            mapping = vmm.Mapping(driver, int(device.index or 0), total_bytes)
            array = _CudaArray(mapping, total_bytes)
            finalizer = weakref.finalize(array, _close, mapping, device)
            finalizer.atexit = False  # the process's exit frees the device memory anyway
            raw = torch.as_tensor(array, device=device)
            if raw.data_ptr() != mapping.address or raw.device != device:
                raise RuntimeError(
                    f"torch wrapped the mapping at {raw.data_ptr():#x} on {raw.device}, "
                    f"not at {mapping.address:#x} on {device}"
                )
            raw.zero_()
        super().__init__(raw)
        self.mapping = mapping

    def release(self) -> None:
        self.mapping.unmap()

    def resume(self) -> None:
        with torch.cuda.device(self.raw.device):
            self.mapping.map()


def _close(mapping: vmm.Mapping, device: torch.device) -> None:
    """Free the mapping once no tensor uses it, after every kernel that might."""
    try:
        torch.cuda.synchronize(device)
    except Exception:  # noqa: BLE001 - a finalizer must not raise
        pass
    mapping.close()


def allocate(
    total_bytes: int,
    device: torch.device,
    *,
    virtual_memory: bool | None = None,
    allocation_context: AllocationContext | None = None,
    driver: vmm.Driver | None = None,
) -> Buffer:
    """The pool's buffer (see the module docstring for the kinds).

    Args:
        total_bytes: Size of the buffer.
        device: The pool's device.
        virtual_memory: True: CUDA virtual memory or refuse; False: torch's allocator;
            None: virtual memory where the driver supports it, torch's allocator
            otherwise (a failure to map falls back, with a warning).
        allocation_context: Allocate with torch inside this context (the engine owns
            the memory); excludes ``virtual_memory=True``.
        driver: The CUDA driver (tests); default ``libcuda.so.1``.

    Raises:
        PoolConfigError: bad ``virtual_memory`` / ``allocation_context``, or
            ``virtual_memory=True`` where it cannot be had.
    """
    if virtual_memory is not None and not isinstance(virtual_memory, bool):
        raise PoolConfigError(
            f"invalid virtual_memory = {virtual_memory!r}: must be a bool or None"
        )
    if allocation_context is not None:
        if not callable(allocation_context):
            raise PoolConfigError(
                f"invalid allocation_context = {allocation_context!r}: must be a callable "
                "returning a context manager"
            )
        if virtual_memory:
            raise PoolConfigError(
                "invalid virtual_memory = True with an allocation_context: the engine's "
                "context owns the memory"
            )
        return EngineBuffer(total_bytes, device, allocation_context)
    if device.type != "cuda" or virtual_memory is False:
        why = (
            "the pool was built with virtual_memory=False"
            if device.type == "cuda"
            else f"a {device.type} pool's memory comes from torch's allocator"
        )
        if virtual_memory:
            raise PoolConfigError(
                f"invalid virtual_memory = True: device {device} has no CUDA virtual memory"
            )
        return TorchBuffer(total_bytes, device, why)
    try:
        driver = vmm.Driver() if driver is None else driver
        refusal = vmm.unsupported(driver, int(device.index or 0))
        if refusal is None:
            return VirtualBuffer(total_bytes, device, driver)
        why = refusal
    except (OSError, RuntimeError) as exc:  # no libcuda, a driver call, torch's wrapping
        why = f"mapping CUDA virtual memory failed: {exc}"
    if virtual_memory:
        raise PoolConfigError(f"invalid virtual_memory = True: {why}")
    logger.warning("ukv pool on %s uses torch's allocator: %s", device, why)
    return TorchBuffer(total_bytes, device, why)
