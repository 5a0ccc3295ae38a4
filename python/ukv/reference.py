"""Pure-torch references for the ops of :mod:`ukv.ops`, one per kernel of :mod:`ukv.kernels`.

Each ``*_ref`` function here has the semantics of the op of the same name without the
``_ref``, written in plain torch indexing: tests hold the Triton kernels to them, and
:mod:`ukv.ops` runs them instead of a kernel where :func:`ukv.ops.use_triton` says no
(CPU without ``TRITON_INTERPRET=1``, or no Triton). They take arguments that the
wrappers in :mod:`ukv.ops` have already validated and check nothing themselves.

For a reader, each op sits in three places side by side: the kernel
(``ukv/kernels/<op>.py``), its validating wrapper (``ukv/ops.py``) and its reference
(here). An id outside its table is skipped, never written, exactly as in the kernels.
"""

from __future__ import annotations

import torch

from ukv.errors import ArgumentError
from ukv.specs import FP8_DTYPES

__all__ = [
    "clear_slots_ref",
    "copy_slots_ref",
    "move_pages_ref",
    "store_kv_ref",
    "store_payload",
    "translate_ref",
]


# ------------------------------------------------------------------------------ helpers


def _in_range(ids: torch.Tensor, size: int) -> torch.Tensor:
    return (ids >= 0) & (ids < size)


def _unit_rows(buf: torch.Tensor, unit_bytes: int) -> torch.Tensor:
    """``buf`` as ``(num_units, unit_bytes)`` rows, the trailing partial unit dropped."""
    num_units = buf.numel() // unit_bytes
    return buf[: num_units * unit_bytes].view(num_units, unit_bytes)


# ------------------------------------------------------------------------------ store_kv


def store_payload(
    name: str,
    x: torch.Tensor,
    view_dtype: torch.dtype,
    scale: float | torch.Tensor | None,
    fp8_dtype: torch.dtype | None,
) -> torch.Tensor:
    """Convert ``x`` to what is stored in a view of ``view_dtype`` (a new tensor if cast).

    The scale divides only when a cast happens (the quantisation step), as in SGLang.
    """
    if x.dtype == view_dtype:
        return x
    target = fp8_dtype if fp8_dtype is not None else view_dtype
    if target == torch.uint8 and x.dtype in FP8_DTYPES:
        target = x.dtype  # already-quantised fp8: store its bits as they are
    if x.dtype != target:
        if target == torch.uint8:
            dtype = str(x.dtype).removeprefix("torch.")
            raise ArgumentError(f"fp8_dtype is needed to store {name} of {dtype} in uint8 views")
        if scale is not None:
            x = x / scale
        x = x.to(target)
    return x.view(view_dtype)


def store_kv_ref(
    k_view: torch.Tensor,
    v_view: torch.Tensor,
    loc: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    k_scale: float | torch.Tensor | None = None,
    v_scale: float | torch.Tensor | None = None,
    fp8_dtype: torch.dtype | None = None,
) -> None:
    """Pure-torch :func:`ukv.ops.store_kv`: ``k_view[loc // ps, loc % ps] = k`` (and V).

    Args: as :func:`ukv.ops.store_kv`, already validated.
    """
    k = store_payload("k", k, k_view.dtype, k_scale, fp8_dtype)
    v = store_payload("v", v, v_view.dtype, v_scale, fp8_dtype)
    page_size = k_view.shape[1]
    loc = loc.to(torch.int64)
    keep = _in_range(loc, k_view.shape[0] * page_size)
    loc, k, v = loc[keep], k[keep], v[keep]
    page, tok = loc // page_size, loc % page_size
    k_view[page, tok] = k
    v_view[page, tok] = v


# ---------------------------------------------------------------------------- move_pages


def move_pages_ref(
    buf: torch.Tensor,
    page_bytes: int,
    src: torch.Tensor,
    dst: torch.Tensor,
    *,
    tables: torch.Tensor | None = None,
    tab_idx: torch.Tensor | None = None,
    tab_val: torch.Tensor | None = None,
) -> None:
    """Pure-torch :func:`ukv.ops.move_pages`: ``pages[dst] = pages[src]``, then the tables.

    Args: as :func:`ukv.ops.move_pages`, already validated.
    """
    pages = _unit_rows(buf, page_bytes)
    src, dst = src.to(torch.int64), dst.to(torch.int64)
    keep = _in_range(src, pages.shape[0]) & _in_range(dst, pages.shape[0])
    pages[dst[keep]] = pages[src[keep]]  # the right-hand side is gathered first
    if tables is not None and tab_idx is not None and tab_val is not None:
        keep = _in_range(tab_idx, tables.numel())
        tables[tab_idx[keep]] = tab_val[keep]


# --------------------------------------------------------------------------- state slots


def copy_slots_ref(
    buf: torch.Tensor, entry_bytes: int, src: torch.Tensor, dst: torch.Tensor
) -> None:
    """Pure-torch :func:`ukv.ops.copy_slots`. Args: as there, already validated."""
    move_pages_ref(buf, entry_bytes, src, dst)


def clear_slots_ref(buf: torch.Tensor, entry_bytes: int, slots: torch.Tensor) -> None:
    """Pure-torch :func:`ukv.ops.clear_slots`. Args: as there, already validated."""
    entries = _unit_rows(buf, entry_bytes)
    slots = slots.to(torch.int64)
    entries[slots[_in_range(slots, entries.shape[0])]] = 0


# ----------------------------------------------------------------------------- translate


def translate_ref(
    ids: torch.Tensor,
    v2p: torch.Tensor,
    page_size: int,
    *,
    out: torch.Tensor | None = None,
    out_dtype: torch.dtype = torch.int64,
    slots: bool = False,
) -> torch.Tensor:
    """Pure-torch :func:`ukv.ops.translate`. Args/Returns: as there, already validated."""
    ids64 = ids.to(torch.int64)
    page = torch.div(ids64, page_size, rounding_mode="floor")
    valid = ((ids64 > 0) if slots else (ids64 >= 0)) & (page < v2p.numel())
    if v2p.numel() == 0:
        phys = torch.zeros_like(ids64)
    else:
        base = v2p[torch.where(valid, page, 0)].to(torch.int64)
        phys = base * page_size + ids64 % page_size
    phys = torch.where(valid & (phys >= 0), phys, -1 if slots else 0).to(out_dtype)
    if out is None:
        return phys
    return out.copy_(phys)  # phys is materialised first, so out may alias ids
