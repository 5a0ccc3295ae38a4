"""CUDA virtual memory through the driver API: an address that outlives its memory.

``cuMemAddressReserve`` reserves a virtual range once; ``cuMemCreate`` + ``cuMemMap`` +
``cuMemSetAccess`` put physical memory behind it, and ``cuMemUnmap`` + ``cuMemRelease``
give the physical memory back while the range stays reserved. Mapping new memory later
puts it at the same address, so kernels and CUDA graphs that captured the address stay
valid (what ``torch_memory_saver`` does for SGLang, here without its preload library).

The driver is reached with ``ctypes`` on ``libcuda.so.1`` (every machine with an NVIDIA
driver has it; no Python package needed). :class:`Driver` takes any object with the
driver's function names, so the CPU tests drive :class:`Mapping` with a stand-in.
"""

from __future__ import annotations

import ctypes
from typing import Any

__all__ = ["Driver", "DriverError", "Mapping", "unsupported"]

CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 102
CU_MEM_ALLOCATION_TYPE_PINNED = 1
CU_MEM_LOCATION_TYPE_DEVICE = 1
CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 1
CUDA_ERROR_OUT_OF_MEMORY = 2


class _Location(ctypes.Structure):  # CUmemLocation
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):  # CUmemAllocationProp::allocFlags
    _fields_ = [
        ("compressionType", ctypes.c_ubyte),
        ("gpuDirectRDMACapable", ctypes.c_ubyte),
        ("usage", ctypes.c_ushort),
        ("reserved", ctypes.c_ubyte * 4),
    ]


class _Prop(ctypes.Structure):  # CUmemAllocationProp (32 bytes)
    _fields_ = [
        ("type", ctypes.c_int),
        ("requestedHandleTypes", ctypes.c_int),
        ("location", _Location),
        ("win32HandleMetaData", ctypes.c_void_p),
        ("allocFlags", _AllocFlags),
    ]


class _AccessDesc(ctypes.Structure):  # CUmemAccessDesc
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


class DriverError(RuntimeError):
    """A CUDA driver call failed.

    Attributes:
        call: The driver function.
        code: Its ``CUresult``.
    """

    def __init__(self, call: str, code: int, text: str) -> None:
        super().__init__(f"{call} failed: CUDA error {code} ({text})")
        self.call = call
        self.code = code


class Driver:
    """The driver functions this module calls, raising :class:`DriverError` on failure.

    Args:
        lib: The driver library (default: ``ctypes.CDLL("libcuda.so.1")``); any object
            whose attributes are the driver's functions (tests pass a stand-in).

    Raises:
        OSError: the driver library cannot be loaded.
    """

    def __init__(self, lib: Any = None) -> None:
        self.lib = ctypes.CDLL("libcuda.so.1") if lib is None else lib

    def call(self, name: str, *args: Any) -> None:
        """Call driver function ``name``; raise :class:`DriverError` unless it succeeds."""
        code = int(getattr(self.lib, name)(*args))
        if code != 0:
            raise DriverError(name, code, self._text(code))

    def _text(self, code: int) -> str:
        text = ctypes.c_char_p()
        try:
            if int(self.lib.cuGetErrorString(ctypes.c_int(code), ctypes.byref(text))) == 0:
                return (text.value or b"").decode(errors="replace")
        except (AttributeError, ctypes.ArgumentError):
            pass
        return "unknown error"


def unsupported(driver: Driver, index: int) -> str | None:
    """Why device ``index`` cannot map virtual memory (None: it can)."""
    dev = ctypes.c_int()
    flag = ctypes.c_int()
    try:
        driver.call("cuInit", ctypes.c_uint(0))
        driver.call("cuDeviceGet", ctypes.byref(dev), ctypes.c_int(index))
        attr = ctypes.c_int(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)
        driver.call("cuDeviceGetAttribute", ctypes.byref(flag), attr, dev)
    except (DriverError, AttributeError) as exc:
        return f"the driver cannot tell whether device {index} maps virtual memory ({exc})"
    if not flag.value:
        return f"the driver of device {index} does not support virtual memory management"
    return None


class Mapping:
    """A reserved virtual range of at least ``nbytes`` on device ``index``, with physical
    memory mapped behind it (:meth:`map`) or not (:meth:`unmap`).

    Args:
        driver: The driver.
        index: The CUDA device ordinal (the pool's device).
        nbytes: Bytes the caller needs; the range is rounded up to the driver's
            recommended granularity (2 MiB on current GPUs).

    Raises:
        DriverError: the reservation or the first mapping failed (nothing is left
            reserved or allocated then).
    """

    def __init__(self, driver: Driver, index: int, nbytes: int) -> None:
        self.driver = driver
        self.index = index
        self._prop = _Prop()
        self._prop.type = CU_MEM_ALLOCATION_TYPE_PINNED
        self._prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE
        self._prop.location.id = index
        self._access = _AccessDesc()
        self._access.location.type = CU_MEM_LOCATION_TYPE_DEVICE
        self._access.location.id = index
        self._access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        gran = ctypes.c_size_t()
        driver.call(
            "cuMemGetAllocationGranularity",
            ctypes.byref(gran),
            ctypes.byref(self._prop),
            ctypes.c_int(CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
        )
        step = max(1, int(gran.value))
        self.size = -(-max(1, nbytes) // step) * step
        ptr = ctypes.c_uint64()
        driver.call(
            "cuMemAddressReserve",
            ctypes.byref(ptr),
            ctypes.c_size_t(self.size),
            ctypes.c_size_t(step),
            ctypes.c_uint64(0),
            ctypes.c_ulonglong(0),
        )
        self.address = int(ptr.value)
        self._handle: int | None = None
        try:
            self.map()
        except BaseException:
            self._free_address()
            raise

    @property
    def mapped(self) -> bool:
        """Whether physical memory is mapped behind the range."""
        return self._handle is not None

    def map(self) -> None:
        """Create physical memory and map it at :attr:`address`, read-write for the
        device. On failure nothing stays allocated or mapped (the range stays reserved).

        Raises:
            DriverError: creating, mapping or granting access failed (code 2: out of
                memory).
        """
        assert self._handle is None, "the range is mapped already"
        d = self.driver
        handle = ctypes.c_ulonglong()
        d.call(
            "cuMemCreate",
            ctypes.byref(handle),
            ctypes.c_size_t(self.size),
            ctypes.byref(self._prop),
            ctypes.c_ulonglong(0),
        )
        addr, size = ctypes.c_uint64(self.address), ctypes.c_size_t(self.size)
        try:
            d.call("cuMemMap", addr, size, ctypes.c_size_t(0), handle, ctypes.c_ulonglong(0))
            try:
                d.call("cuMemSetAccess", addr, size, ctypes.byref(self._access), ctypes.c_size_t(1))
            except BaseException:
                d.call("cuMemUnmap", addr, size)
                raise
        except BaseException:
            d.call("cuMemRelease", handle)
            raise
        self._handle = int(handle.value)

    def unmap(self) -> None:
        """Unmap the physical memory and give it back to the driver; the range stays
        reserved (the caller makes sure no kernel still uses it)."""
        assert self._handle is not None, "the range is not mapped"
        handle, self._handle = self._handle, None
        self.driver.call("cuMemUnmap", ctypes.c_uint64(self.address), ctypes.c_size_t(self.size))
        self.driver.call("cuMemRelease", ctypes.c_ulonglong(handle))

    def close(self) -> None:
        """Unmap (if mapped) and free the range. Never raises: it runs when the last
        tensor over the range is collected, possibly late in the interpreter's life."""
        try:
            if self._handle is not None:
                self.unmap()
            self._free_address()
        except Exception:  # noqa: BLE001 - a finalizer must not raise
            pass

    def _free_address(self) -> None:
        if self.address:
            address, self.address = self.address, 0
            self.driver.call(
                "cuMemAddressFree", ctypes.c_uint64(address), ctypes.c_size_t(self.size)
            )
