"""Read-only aliases of the pool's v2p/p2v tables.

On a CPU or ``meta`` pool the tables callers read are the core's own memory (zero-copy),
and on CUDA they are the mirrors every ukv kernel translates through: a caller's write to
either would make the tables disagree with where the bytes are, silently. torch has no
read-only tensors, so the tables are handed out as :class:`ReadOnlyTable`, a tensor
subclass over the same storage that refuses every in-place op, ``out=`` target and item
assignment with :class:`~ukv.errors.ArgumentError`. Views of it (slices, ``view``,
``detach``) stay read-only; anything that makes new memory (indexing with a tensor,
``clone``, ``to``, arithmetic) comes back as a plain tensor. ``numpy()`` gives a
non-writable array. The pool itself keeps the plain tensors.

Kernels that take raw pointers (a caller's own Triton or CUDA code) cannot be policed;
the docstrings of ``v2p``/``p2v`` say the tables are for reading.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ukv.errors import ArgumentError

# In-place dunders that do not follow the trailing-underscore convention.
_INPLACE_DUNDERS = frozenset(
    f"__i{op}__"
    for op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor")
    + ("lshift", "rshift", "matmul")
)


class ReadOnlyTable(torch.Tensor):
    """A tensor over a ukv table's memory that refuses writes (see the module docstring)."""

    #: What the table is, for error messages ("v2p of sub-pool 'full'").
    _ukv_label: str = "a ukv table"

    @classmethod
    def __torch_function__(
        cls,
        func: Callable[..., Any],
        types: tuple[type, ...],
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        target = args[0] if args else None
        if isinstance(target, ReadOnlyTable) and _mutates(name):
            raise _refuse(target, name)
        out = kwargs.get("out")
        for o in out if isinstance(out, tuple | list) else (out,):
            if isinstance(o, ReadOnlyTable):
                raise _refuse(o, f"{name}(out=...)")
        with torch._C.DisableTorchFunctionSubclass():
            ret = func(*args, **kwargs)
        if name in ("numpy", "__array__") and isinstance(ret, np.ndarray):
            ret.flags.writeable = False
            return ret
        if isinstance(ret, torch.Tensor) and isinstance(target, ReadOnlyTable):
            return _keep_if_view(ret, target)
        return ret


def _mutates(name: str) -> bool:
    if name == "__setitem__" or name in _INPLACE_DUNDERS:
        return True
    return name.endswith("_") and not name.endswith("__")


def _refuse(table: ReadOnlyTable, what: str) -> ArgumentError:
    return ArgumentError(
        f"bad argument: {table._ukv_label} is read-only ({what} would write it); the pool "
        "maintains it after every operation. Copy it with .clone() to modify a copy."
    )


def _keep_if_view(ret: torch.Tensor, src: ReadOnlyTable) -> torch.Tensor:
    """A result that aliases the table's storage stays read-only; new memory is plain."""
    same = (
        ret.device == src.device
        and ret.untyped_storage().data_ptr() == src.untyped_storage().data_ptr()
    )
    if not same:
        return ret
    alias = ret.as_subclass(ReadOnlyTable)
    alias._ukv_label = src._ukv_label
    return alias


def read_only(table: torch.Tensor, label: str) -> torch.Tensor:
    """A :class:`ReadOnlyTable` over ``table``'s memory, named ``label`` in errors."""
    alias = table.as_subclass(ReadOnlyTable)
    alias._ukv_label = label
    return alias
