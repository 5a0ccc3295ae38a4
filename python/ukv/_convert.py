"""Turning caller tensors into host arrays the native core reads in place.

The core lives on the host. Id tensors on the CPU are handed over as NumPy views of the
same memory (no copy, no per-element work); tensors on a CUDA device are copied to the
host once, which waits for that copy (the only host-device synchronisation on these
paths, and only when the caller keeps ids on the device). Every rejection is an
:class:`~ukv.errors.ArgumentError` naming the argument and the bad value.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping

import numpy as np
import torch

from ukv.errors import ArgumentError

ID_DTYPES = (torch.int32, torch.int64)
NP_ID_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))


def sub_pool_index(index: Mapping[str, int], name: object) -> int:
    """The index of sub-pool ``name`` in ``index`` (name -> index).

    Raises:
        ArgumentError: no sub-pool has that name.
    """
    try:
        return index[name]  # type: ignore[index]
    except (KeyError, TypeError):
        raise ArgumentError(
            f"bad argument name = {name!r}: no such sub-pool (have {list(index)})"
        ) from None


def host_ids(name: str, value: object) -> np.ndarray:
    """A 1-D int32/int64 host array viewing ``value``'s memory where possible.

    Args:
        name: Argument name for messages.
        value: A torch tensor (any device) or NumPy array of shape ``[N]``.

    Returns:
        np.ndarray: shape ``[N]``, int32 or int64, C-contiguous.

    Raises:
        ArgumentError: wrong type, dtype, rank, or a non-contiguous tensor.
    """
    if type(value) is torch.Tensor and not value.is_cuda:
        # Hot path: a CPU tensor already in the right form costs one view and three checks.
        try:
            arr = value.numpy()
        except (RuntimeError, TypeError):
            arr = None
        if (
            arr is not None
            and arr.ndim == 1
            and arr.dtype in NP_ID_DTYPES
            and arr.flags.c_contiguous
            and value.is_contiguous()
        ):
            return arr
    if isinstance(value, torch.Tensor):
        if value.dtype not in ID_DTYPES:
            raise ArgumentError(
                f"bad argument {name}: dtype {value.dtype} must be torch.int32 or torch.int64"
            )
        if value.dim() != 1:
            raise ArgumentError(f"bad argument {name}: shape {tuple(value.shape)} must be 1-D")
        if not value.is_contiguous():
            raise ArgumentError(f"bad argument {name}: stride {value.stride()} must be contiguous")
        if value.device.type == "meta":
            raise ArgumentError(f"bad argument {name}: device meta holds no ids")
        if value.device.type != "cpu":
            value = value.cpu()
        return value.numpy()
    if isinstance(value, np.ndarray):
        if value.dtype not in NP_ID_DTYPES:
            raise ArgumentError(f"bad argument {name}: dtype {value.dtype} must be int32 or int64")
        if value.ndim != 1:
            raise ArgumentError(f"bad argument {name}: shape {value.shape} must be 1-D")
        if not value.flags.c_contiguous:
            raise ArgumentError(f"bad argument {name}: strides {value.strides} must be contiguous")
        return value
    raise ArgumentError(
        f"bad argument {name}: {type(value).__name__} must be a torch.Tensor or numpy array"
    )


def cpu_lengths(name: str, value: object) -> np.ndarray:
    """Host length array: like :func:`host_ids` but the tensor must already be on the CPU.

    Raises:
        ArgumentError: as :func:`host_ids`, or a tensor that is not on the CPU.
    """
    if isinstance(value, torch.Tensor) and value.device.type != "cpu":
        raise ArgumentError(
            f"bad argument {name}: device {value.device} must be cpu (it is read on the host)"
        )
    return host_ids(name, value)


def count(name: str, value: object) -> int:
    """A non-negative integer count (bools and floats are rejected).

    Raises:
        ArgumentError: not an integer, negative, or beyond int64.
    """
    if type(value) is int and 0 <= value < 1 << 63:
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ArgumentError(f"bad argument {name} = {value!r}: must be an int")
    n = int(value)
    if n < 0:
        raise ArgumentError(f"bad argument {name} = {value}: must be >= 0")
    if n >= 1 << 63:
        raise ArgumentError(f"bad argument {name} = {value}: must be below 2**63")
    return n


def live_mask(ids: np.ndarray, v2p: np.ndarray, page_size: int, min_slot: int) -> np.ndarray:
    """Which ids name a live slot (bound page, above the floor, inside the table)."""
    pages = ids // page_size
    ok = (ids >= min_slot) & (pages < len(v2p) - 1)
    ok[ok] = v2p[pages[ok]] >= 0
    return ok


def first_dead_id(ids: np.ndarray, v2p: np.ndarray, page_size: int, min_slot: int) -> int | None:
    """The first id that names no live slot (vectorised over every id), or None."""
    ok = live_mask(ids, v2p, page_size, min_slot)
    if ok.all():
        return None
    return int(ids[int(np.argmin(ok))])
