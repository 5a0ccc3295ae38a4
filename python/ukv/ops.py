"""Validating wrappers around ukv's Triton kernels (the references are in :mod:`ukv.reference`).

Each public op here (``store_kv``, ``move_pages``, ``copy_slots``, ``clear_slots``,
``translate``) does the same four things: validate its arguments (shape, dtype, device,
contiguity; :class:`~ukv.errors.ArgumentError` naming the argument and the bad value),
allocate what it returns, compute the grid, and launch one kernel. On that kernel path
none of them synchronises the host with the device or reads a tensor's values on the
host, so every op runs on the caller's stream and can be captured in a CUDA graph.

Each op has a ``*_ref`` twin in :mod:`ukv.reference`, written in plain torch with identical
semantics. Tests hold the kernels to them, and they are the CPU fallback: :func:`use_triton`
picks the kernel on CUDA (or on CPU under ``TRITON_INTERPRET=1``, which is how CPU tests run
the kernels) and the reference everywhere else. The references take already-validated
arguments.

Semantics shared by kernels and references: an id outside its table (a ``loc`` past the
view, a page past the buffer, a table index past the table, a slot ``< 0``) is skipped
rather than written, so a bad id can never write outside the pool. Valid plans never
contain such ids; the wrappers do not check values, because that would need a host sync.
"""

from __future__ import annotations

import os
from numbers import Integral
from typing import NamedTuple

import torch

from ukv.errors import ArgumentError
from ukv.reference import (
    _unit_rows,
    clear_slots_ref,
    copy_slots_ref,
    move_pages_ref,
    store_kv_ref,
    translate_ref,
)
from ukv.reference import store_payload as _store_payload
from ukv.specs import FP8_DTYPES

try:
    from ukv.kernels import move_pages as _move_k
    from ukv.kernels import state as _state_k
    from ukv.kernels import store_kv as _store_k
    from ukv.kernels import translate as _translate_k
except ImportError:  # Triton is Linux-only; the torch references still work.
    _move_k = _state_k = _store_k = _translate_k = None  # type: ignore[assignment]

__all__ = [
    "clear_slots",
    "copy_slots",
    "move_pages",
    "StoreTarget",
    "store_kv",
    "store_kv_to",
    "store_target",
    "translate",
    "use_triton",
]

INDEX_DTYPES = (torch.int32, torch.int64)
"""Dtypes accepted for token, page and slot ids."""

TRANSLATE_OUT_DTYPES = (torch.int64, torch.int32)
"""int64 for the full-attention translate, int32 for the SWA one (API.md §5)."""

WORD_DTYPES = (torch.int64, torch.int32, torch.int16, torch.uint8)
"""Word types for byte moves, widest first; the widest that fits the page is used."""

_BITS_DTYPES = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}

# store_kv tiling: a BLOCK_N x BLOCK_ROW tile of about STORE_TILE_BYTES per program and
# K/V side; rows longer than STORE_MAX_ROW_BYTES are walked in several column tiles.
# Tuned on an H200 (benches/bench_kernels.py --sweep): 4 KiB tiles beat 8-32 KiB by ~2%.
STORE_TILE_BYTES = 4096
STORE_MAX_ROW_BYTES = 4096
STORE_NUM_WARPS = 4

# move_pages / copy_slots / clear_slots tiling: MOVE_TILES tiles of MOVE_TILE_BYTES per
# program, so a 16 KiB page is one program and a 4 MiB page 256. Tuned on an H200
# (--sweep): 4 tiles of 4 KiB at 8 warps beat one 16 KiB tile by ~5% at every page size
# from 16 KiB to 4 MiB; cache-eviction hints on the loads and stores cost another ~3%.
MOVE_TILE_BYTES = 4096
MOVE_TILES = 4
MOVE_NUM_WARPS = 8
MAX_GRID_AXIS1 = 65535  # CUDA's limit on gridDim.y: huge units get more tiles per program
TABLE_BLOCK = 1024
TABLE_NUM_WARPS = 4

TRANSLATE_BLOCK = 1024
TRANSLATE_NUM_WARPS = 4


# ----------------------------------------------------------------------------- dispatch


def use_triton(device: torch.device | str) -> bool:
    """Whether ops on ``device`` run the Triton kernels (else the torch references).

    Args:
        device: The device the op's tensors live on.

    Returns:
        True on CUDA, and on CPU when ``TRITON_INTERPRET=1`` (Triton's interpreter);
        False otherwise, or when Triton is not installed.
    """
    if _store_k is None:
        return False
    device_type = device.type if isinstance(device, torch.device) else torch.device(device).type
    if device_type == "cuda":
        return True
    return device_type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1"


# --------------------------------------------------------------------------- validation


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _check_tensor(
    name: str,
    value: object,
    *,
    ndim: int | None = None,
    dtypes: tuple[torch.dtype, ...] | None = None,
    device: torch.device | None = None,
) -> torch.Tensor:
    """Raise ArgumentError unless ``value`` is a tensor of this rank, dtype and device."""
    if not isinstance(value, torch.Tensor):
        raise ArgumentError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if ndim is not None and value.dim() != ndim:
        raise ArgumentError(
            f"{name} must be {ndim}-D, got shape {tuple(value.shape)} ({value.dim()}-D)"
        )
    if dtypes is not None and value.dtype not in dtypes:
        allowed = " or ".join(_dtype_name(d) for d in dtypes)
        raise ArgumentError(f"{name} must be {allowed}, got {_dtype_name(value.dtype)}")
    if device is not None and value.device != device:
        raise ArgumentError(f"{name} is on {value.device}, expected {device}")
    return value


def _check_positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral) or value <= 0:
        raise ArgumentError(f"{name} must be a positive int, got {value!r}")
    return int(value)


def _check_same_length(name: str, value: torch.Tensor, other_name: str, other: torch.Tensor):
    if value.numel() != other.numel():
        raise ArgumentError(
            f"{name} has {value.numel()} elements but {other_name} has {other.numel()}"
        )


def _rows_contiguous(t: torch.Tensor) -> bool:
    """Whether each ``t[..., :, :]`` (the trailing two dims) is one contiguous run."""
    heads, dim = t.shape[-2], t.shape[-1]
    return (dim <= 1 or t.stride(-1) == 1) and (heads <= 1 or t.stride(-2) == dim)


def _check_buffer(name: str, buf: torch.Tensor, unit_name: str, unit_bytes: object) -> int:
    """Validate a flat uint8 pool buffer and a page/entry size; return the size."""
    _check_tensor(name, buf, ndim=1, dtypes=(torch.uint8,))
    if buf.numel() > 1 and buf.stride(0) != 1:
        raise ArgumentError(f"{name} must be contiguous, got stride {buf.stride(0)}")
    unit = _check_positive_int(unit_name, unit_bytes)
    if unit > buf.numel():
        raise ArgumentError(f"{unit_name}={unit} exceeds {name}'s {buf.numel()} bytes")
    return unit


def _check_pairs(buf: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> None:
    _check_tensor("src", src, ndim=1, dtypes=INDEX_DTYPES, device=buf.device)
    _check_tensor("dst", dst, ndim=1, dtypes=INDEX_DTYPES, device=buf.device)
    _check_same_length("dst", dst, "src", src)


class TableUpdate(NamedTuple):
    """A fused table update: ``tables[idx[i]] = val[i]`` (all int64, 1-D)."""

    tables: torch.Tensor
    idx: torch.Tensor
    val: torch.Tensor


def _check_table_update(
    device: torch.device,
    tables: torch.Tensor | None,
    tab_idx: torch.Tensor | None,
    tab_val: torch.Tensor | None,
) -> TableUpdate | None:
    """Validate the optional fused table update; None when there is nothing to apply."""
    if tables is None and tab_idx is None and tab_val is None:
        return None
    if tables is None or tab_idx is None or tab_val is None:
        given = {"tables": tables, "tab_idx": tab_idx, "tab_val": tab_val}
        missing = ", ".join(name for name, arg in given.items() if arg is None)
        raise ArgumentError(f"tables, tab_idx and tab_val go together; missing {missing}")
    _check_tensor("tables", tables, ndim=1, dtypes=(torch.int64,), device=device)
    _check_tensor("tab_idx", tab_idx, ndim=1, dtypes=(torch.int64,), device=device)
    _check_tensor("tab_val", tab_val, ndim=1, dtypes=(torch.int64,), device=device)
    _check_same_length("tab_val", tab_val, "tab_idx", tab_idx)
    if tab_idx.numel() == 0 or tables.numel() == 0:  # an empty table takes no update
        return None
    return TableUpdate(tables, tab_idx, tab_val)


# ------------------------------------------------------------------------------ helpers


def _next_pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _as_bits(t: torch.Tensor) -> torch.Tensor:
    """Bit-view ``t`` as the integer dtype of the same width (kernels move bits)."""
    bits = _BITS_DTYPES[t.element_size()]
    return t if t.dtype == bits else t.view(bits)


def _word_dtype(buf: torch.Tensor, unit_bytes: int) -> torch.dtype:
    """The widest word dividing ``unit_bytes`` and the buffer's address alignment."""
    for dtype in WORD_DTYPES:
        size = dtype.itemsize
        aligned = buf.data_ptr() % size == 0 and buf.storage_offset() % size == 0
        if unit_bytes % size == 0 and aligned:
            return dtype
    return torch.uint8


# ------------------------------------------------------------------------------ store_kv


def _check_fp8_dtype(fp8_dtype: object, k_view: torch.Tensor) -> None:
    if fp8_dtype is None:
        return
    if fp8_dtype not in FP8_DTYPES:
        allowed = " or ".join(sorted(_dtype_name(d) for d in FP8_DTYPES))
        raise ArgumentError(f"fp8_dtype must be {allowed} or None, got {fp8_dtype!r}")
    if k_view.dtype != torch.uint8:
        raise ArgumentError(
            f"fp8_dtype={_dtype_name(fp8_dtype)} needs uint8 views, "
            f"got k_view of {_dtype_name(k_view.dtype)}"
        )


def _check_view(name: str, view: torch.Tensor) -> torch.Tensor:
    _check_tensor(name, view, ndim=4)
    if not _rows_contiguous(view):
        raise ArgumentError(
            f"{name} must have contiguous trailing (head, dim) dims, "
            f"got shape {tuple(view.shape)} strides {view.stride()}"
        )
    return view


class StoreTarget(NamedTuple):
    """One layer's K/V views, validated once, with what every store into them reuses.

    Built by :func:`store_target`; a pool keeps one per layer, so a ``set_kv`` call checks
    and bit-views only its new rows. Fields are read-only facts about the views.
    """

    k_view: torch.Tensor
    v_view: torch.Tensor
    k_bits: torch.Tensor
    v_bits: torch.Tensor
    fp8_dtype: torch.dtype | None
    page_size: int
    num_slots: int
    k_row: int
    v_row: int
    block_n: int
    block_k: int
    block_v: int


def store_target(
    k_view: torch.Tensor, v_view: torch.Tensor, fp8_dtype: torch.dtype | None = None
) -> StoreTarget:
    """Validate one layer's K/V views for :func:`store_kv_to`.

    Args: ``k_view``, ``v_view`` and ``fp8_dtype`` as for :func:`store_kv`.

    Raises:
        ArgumentError: On a wrong rank, a non-contiguous view row, views that do not match,
            or a bad ``fp8_dtype``.
    """
    _check_view("k_view", k_view)
    _check_view("v_view", v_view)
    _check_tensor("v_view", v_view, device=k_view.device)
    if v_view.shape[:3] != k_view.shape[:3]:
        raise ArgumentError(
            f"v_view shape {tuple(v_view.shape)} does not match k_view "
            f"{tuple(k_view.shape)} in (num_pages, page_size, head_num)"
        )
    if v_view.dtype != k_view.dtype:
        raise ArgumentError(
            f"v_view is {_dtype_name(v_view.dtype)} but k_view is {_dtype_name(k_view.dtype)}"
        )
    _check_fp8_dtype(fp8_dtype, k_view)
    num_pages, page_size, heads, head_dim = k_view.shape
    k_row, v_row = heads * head_dim, heads * v_view.shape[3]
    max_block_row = STORE_MAX_ROW_BYTES // k_view.element_size()
    block_k = min(_next_pow2(k_row), max_block_row)
    block_v = min(_next_pow2(v_row), max_block_row)
    block_n = max(1, STORE_TILE_BYTES // k_view.element_size() // max(block_k, block_v))
    return StoreTarget(
        k_view,
        v_view,
        _as_bits(k_view),
        _as_bits(v_view),
        fp8_dtype,
        page_size,
        num_pages * page_size,
        k_row,
        v_row,
        block_n,
        block_k,
        block_v,
    )


def _check_store_rows(
    target: StoreTarget, loc: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> None:
    device = target.k_view.device
    _check_tensor("loc", loc, ndim=1, dtypes=INDEX_DTYPES, device=device)
    num_tokens, heads = loc.numel(), target.k_view.shape[2]
    for name, x, view in (("k", k, target.k_view), ("v", v, target.v_view)):
        _check_tensor(name, x, ndim=3, device=device)
        if not (x.dtype.is_floating_point or x.dtype == view.dtype):
            raise ArgumentError(
                f"{name} is {_dtype_name(x.dtype)}: K/V must be a float dtype "
                f"(or already {_dtype_name(view.dtype)}, the view's store dtype)"
            )
        expected = (num_tokens, heads, view.shape[3])
        if tuple(x.shape) != expected:
            raise ArgumentError(f"{name} must have shape {expected}, got {tuple(x.shape)}")


def _store_kv_triton(t: StoreTarget, loc: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    grid = (_cdiv(loc.numel(), t.block_n), 2)
    _store_k.store_kv_kernel[grid](
        t.k_bits,
        t.v_bits,
        _as_bits(k),
        _as_bits(v),
        loc,
        loc.numel(),
        t.num_slots,
        loc.stride(0),
        t.k_view.stride(0),
        t.k_view.stride(1),
        t.v_view.stride(0),
        t.v_view.stride(1),
        k.stride(0),
        v.stride(0),
        PAGE_SIZE=t.page_size,
        K_ROW=t.k_row,
        V_ROW=t.v_row,
        BLOCK_N=t.block_n,
        BLOCK_K=t.block_k,
        BLOCK_V=t.block_v,
        num_warps=STORE_NUM_WARPS,
    )


def store_kv(
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
    """Store new K/V rows at physical token ids, in place, in one launch.

    Byte-identical to ``k_view[loc // ps, loc % ps] = k; v_view[...] = v`` after the
    dtype conversion below. The caller's ``k`` and ``v`` are never modified.

    Args:
        k_view: One layer's K view, shape ``[num_pages, page_size, head_num, head_dim]``,
            trailing two dims contiguous (any page/token strides).
        v_view: The layer's V view, shape ``[num_pages, page_size, head_num, v_head_dim]``,
            same dtype and device as ``k_view``.
        loc: Physical token ids, shape ``[N]``, int32 or int64. Token ``t`` is written at
            ``[t // page_size, t % page_size]``; ids outside the view are skipped. Ids
            must be distinct (as for advanced-index assignment).
        k: Keys, shape ``[N, head_num, head_dim]``, any float dtype.
        v: Values, shape ``[N, head_num, v_head_dim]``.
        k_scale: Divides ``k`` before it is cast to the store dtype (only when a cast
            happens, i.e. when ``k`` is not already of the store dtype).
        v_scale: The same for ``v``.
        fp8_dtype: For ``uint8`` views holding fp8 (e4m3fn or e5m2) KV: ``k``/``v`` are
            cast to it and bit-viewed as ``uint8``. Needed unless ``k``/``v`` are already
            fp8 or ``uint8`` (pre-encoded bytes).

    Raises:
        ArgumentError: On a wrong shape, dtype, device or non-contiguous view row.
    """
    target = store_target(k_view, v_view, fp8_dtype)
    store_kv_to(target, loc, k, v, k_scale=k_scale, v_scale=v_scale)


def store_kv_to(
    target: StoreTarget,
    loc: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    k_scale: float | torch.Tensor | None = None,
    v_scale: float | torch.Tensor | None = None,
) -> None:
    """:func:`store_kv` into views already validated by :func:`store_target`.

    Args: ``loc``, ``k``, ``v``, ``k_scale``, ``v_scale`` as for :func:`store_kv`.

    Raises:
        ArgumentError: On a wrong shape, dtype or device of ``loc``, ``k`` or ``v``.
    """
    _check_store_rows(target, loc, k, v)
    k_view, v_view, fp8_dtype = target.k_view, target.v_view, target.fp8_dtype
    if loc.numel() == 0 or k_view.device.type == "meta":
        return
    if not use_triton(k_view.device):
        store_kv_ref(
            k_view, v_view, loc, k, v, k_scale=k_scale, v_scale=v_scale, fp8_dtype=fp8_dtype
        )
        return
    k = _store_payload("k", k, k_view.dtype, k_scale, fp8_dtype)
    v = _store_payload("v", v, v_view.dtype, v_scale, fp8_dtype)
    k = k if _rows_contiguous(k) else k.contiguous()
    v = v if _rows_contiguous(v) else v.contiguous()
    _store_kv_triton(target, loc, k, v)


# ---------------------------------------------------------------------------- move_pages


def _envelope_tiling(unit_words: int, word_bytes: int) -> tuple[int, int, int]:
    """``(BLOCK, TILES, chunks per unit)`` for copying or zeroing units of words.

    A unit so large that its chunks would overflow grid axis 1 gets more tiles per chunk.
    """
    block = min(_next_pow2(unit_words), MOVE_TILE_BYTES // word_bytes)
    tiles = min(MOVE_TILES, _cdiv(unit_words, block))
    tiles = max(tiles, _cdiv(unit_words, block * MAX_GRID_AXIS1))
    return block, tiles, _cdiv(unit_words, block * tiles)


class _WordEnvelope(NamedTuple):
    """A buffer's whole units (pages or state slots) as wide words, with the tiling that
    copies or zeroes one unit: what the page-move, slot-clear and plan kernels take."""

    words: torch.Tensor
    unit_words: int
    num_units: int
    block: int
    tiles: int
    chunks: int


def _word_envelope(buf: torch.Tensor, unit_bytes: int) -> _WordEnvelope:
    """View ``buf``'s whole ``unit_bytes`` units as the widest word both the unit size and
    the buffer's alignment allow (the trailing partial unit dropped), and tile one unit.

    Args:
        buf: A byte buffer, ``shape: [total_bytes]``, uint8, contiguous.
        unit_bytes: Bytes per unit (> 0).

    Returns:
        ``words: shape [num_units * unit_words]``, the unit's length in words, the number
        of whole units, and ``(BLOCK, TILES, chunks per unit)`` as
        :func:`_envelope_tiling` gives them.
    """
    word = _word_dtype(buf, unit_bytes)
    words = _unit_rows(buf, unit_bytes).view(-1).view(word)
    unit_words = unit_bytes // word.itemsize
    tiling = _envelope_tiling(unit_words, word.itemsize)
    return _WordEnvelope(words, unit_words, buf.numel() // unit_bytes, *tiling)


def _launch_move(
    buf: torch.Tensor,
    page_bytes: int,
    src: torch.Tensor,
    dst: torch.Tensor,
    update: TableUpdate | None,
) -> None:
    """One launch of the page-move kernel (pages as wide words, optional table update)."""
    words, page_words, num_pages, block, tiles, num_chunks = _word_envelope(buf, page_bytes)
    num_pairs = src.numel()
    num_updates = 0 if update is None else update.idx.numel()
    # Stand-ins for unused pointer arguments (an empty tensor may hold a null pointer);
    # the kernel never dereferences them: HAS_TABLES is False, or num_pairs is 0.
    tables, tab_idx, tab_val = (src, src, src) if update is None else update
    if num_pairs == 0:
        src = dst = tab_idx
        num_chunks = 1
    grid = (num_pairs + _cdiv(num_updates, TABLE_BLOCK), num_chunks)
    _move_k.move_pages_kernel[grid](
        words,
        src,
        dst,
        tables,
        tab_idx,
        tab_val,
        num_pairs,
        page_words,
        num_pages,
        num_updates,
        0 if update is None else tables.numel(),
        src.stride(0),
        dst.stride(0),
        tables.stride(0),
        tab_idx.stride(0),
        tab_val.stride(0),
        BLOCK=block,
        TILES=tiles,
        TAB_BLOCK=TABLE_BLOCK,
        HAS_TABLES=update is not None,
        num_warps=MOVE_NUM_WARPS if num_pairs else TABLE_NUM_WARPS,
    )


def move_pages(
    buf: torch.Tensor,
    page_bytes: int,
    src: torch.Tensor,
    dst: torch.Tensor,
    *,
    tables: torch.Tensor | None = None,
    tab_idx: torch.Tensor | None = None,
    tab_val: torch.Tensor | None = None,
) -> None:
    """Execute a move plan: copy whole pages inside ``buf``, then update tables; one launch.

    Page ``p`` is the byte range ``[p*page_bytes, (p+1)*page_bytes)`` of ``buf``. Pages
    move as the widest integer word dividing ``page_bytes`` and the buffer's alignment.
    Nothing is launched when there is neither a page nor a table update.

    Args:
        buf: The pool's byte buffer, shape ``[total_bytes]``, uint8, contiguous. Its
            length need not be a multiple of ``page_bytes`` (the tail is not a page).
        page_bytes: Bytes per page of the sub-pool being compacted (> 0).
        src: Source page ids, shape ``[M]``, int32 or int64.
        dst: Destination page ids, shape ``[M]``; distinct, and disjoint from ``src``
            (pairs with a page outside the buffer are skipped).
        tables: Optional int64 table to update in the same launch, shape ``[T]``.
        tab_idx: Indices into ``tables``, shape ``[U]``, int64; duplicates must carry
            identical values; indices outside ``tables`` are skipped.
        tab_val: Values, shape ``[U]``, int64.

    Raises:
        ArgumentError: On a wrong shape, dtype or device, a non-positive or too large
            ``page_bytes``, or a partial table update (``tables``, ``tab_idx`` and
            ``tab_val`` go together).
    """
    page_bytes = _check_buffer("buf", buf, "page_bytes", page_bytes)
    _check_pairs(buf, src, dst)
    update = _check_table_update(buf.device, tables, tab_idx, tab_val)
    if (src.numel() == 0 and update is None) or buf.device.type == "meta":
        return
    if not use_triton(buf.device):
        move_pages_ref(buf, page_bytes, src, dst, tables=tables, tab_idx=tab_idx, tab_val=tab_val)
        return
    _launch_move(buf, page_bytes, src, dst, update)


# --------------------------------------------------------------------------- state slots


def copy_slots(buf: torch.Tensor, entry_bytes: int, src: torch.Tensor, dst: torch.Tensor) -> None:
    """Copy whole Mamba state slots (copy-on-write of a request's state), one launch.

    Slot ``s`` is the envelope ``[s*entry_bytes, (s+1)*entry_bytes)`` of ``buf``: all
    conv and temporal rows of every layer, so one envelope copy is ``conv[:, dst] =
    conv[:, src]`` for every conv tensor plus the temporal one.

    Args:
        buf: The pool's byte buffer, shape ``[total_bytes]``, uint8, contiguous.
        entry_bytes: Bytes per state slot (> 0).
        src: Source slots, shape ``[M]``, int32 or int64.
        dst: Destination slots, shape ``[M]``; distinct and disjoint from ``src``.

    Raises:
        ArgumentError: On a wrong shape, dtype or device, or a bad ``entry_bytes``.
    """
    entry_bytes = _check_buffer("buf", buf, "entry_bytes", entry_bytes)
    _check_pairs(buf, src, dst)
    if src.numel() == 0 or buf.device.type == "meta":
        return
    if not use_triton(buf.device):
        copy_slots_ref(buf, entry_bytes, src, dst)
        return
    _launch_move(buf, entry_bytes, src, dst, None)


def _launch_clear(buf: torch.Tensor, entry_bytes: int, slots: torch.Tensor) -> None:
    words, slot_words, num_slots, block, tiles, num_chunks = _word_envelope(buf, entry_bytes)
    grid = (slots.numel(), num_chunks)
    _state_k.clear_slots_kernel[grid](
        words,
        slots,
        slots.numel(),
        slot_words,
        num_slots,
        slots.stride(0),
        BLOCK=block,
        TILES=tiles,
        num_warps=MOVE_NUM_WARPS,
    )


def clear_slots(buf: torch.Tensor, entry_bytes: int, slots: torch.Tensor) -> None:
    """Zero whole Mamba state slots (``conv[:, s] = 0``, ``temporal[:, s] = 0``), one launch.

    Args:
        buf: The pool's byte buffer, shape ``[total_bytes]``, uint8, contiguous.
        entry_bytes: Bytes per state slot (> 0).
        slots: Slots to zero, shape ``[S]``, int32 or int64. Ids ``< 0`` (padding) and
            ids past the buffer are skipped.

    Raises:
        ArgumentError: On a wrong shape, dtype or device, or a bad ``entry_bytes``.
    """
    entry_bytes = _check_buffer("buf", buf, "entry_bytes", entry_bytes)
    _check_tensor("slots", slots, ndim=1, dtypes=INDEX_DTYPES, device=buf.device)
    if slots.numel() == 0 or buf.device.type == "meta":
        return
    if not use_triton(buf.device):
        clear_slots_ref(buf, entry_bytes, slots)
        return
    _launch_clear(buf, entry_bytes, slots)


# ----------------------------------------------------------------------------- translate


def _check_translate_out(
    out: torch.Tensor | None, ids: torch.Tensor, out_dtype: torch.dtype
) -> torch.Tensor | None:
    if out is None:
        return None
    _check_tensor("out", out, dtypes=(out_dtype,), device=ids.device)
    if out.shape != ids.shape:
        raise ArgumentError(
            f"out must have the shape of ids {tuple(ids.shape)}, got {tuple(out.shape)}"
        )
    return out


def _overlap_is_unsafe(out: torch.Tensor, ids: torch.Tensor) -> bool:
    """True when ``out`` shares memory with ``ids`` other than element for element."""
    if out.untyped_storage().data_ptr() != ids.untyped_storage().data_ptr():
        return False
    same_elements = out.dtype == ids.dtype and out.stride() == ids.stride()
    if same_elements and out.data_ptr() == ids.data_ptr():
        return False  # exact alias: each program loads its ids before storing them
    out_lo, ids_lo = out.data_ptr(), ids.data_ptr()
    out_hi = out_lo + ((out.numel() - 1) * abs(out.stride(0)) + 1) * out.element_size()
    ids_hi = ids_lo + ((ids.numel() - 1) * abs(ids.stride(0)) + 1) * ids.element_size()
    return out_lo < ids_hi and ids_lo < out_hi


def _launch_translate(
    ids: torch.Tensor, v2p: torch.Tensor, page_size: int, out: torch.Tensor, slots: bool
) -> None:
    grid = (_cdiv(ids.numel(), TRANSLATE_BLOCK),)
    _translate_k.translate_kernel[grid](
        ids,
        v2p,
        out,
        ids.numel(),
        v2p.numel(),
        ids.stride(0),
        v2p.stride(0),
        out.stride(0),
        PAGE_SIZE=page_size,
        BLOCK=TRANSLATE_BLOCK,
        SLOTS=slots,
        num_warps=TRANSLATE_NUM_WARPS,
    )


def translate(
    ids: torch.Tensor,
    v2p: torch.Tensor,
    page_size: int,
    *,
    out: torch.Tensor | None = None,
    out_dtype: torch.dtype = torch.int64,
    slots: bool = False,
) -> torch.Tensor:
    """Map virtual token ids to physical token ids: ``v2p[id // ps] * ps + id % ps``.

    A result that names no live token is 0, the padding sink: a tombstoned page
    (``v2p == -1``), a negative id, or an id whose page is past ``v2p``. One launch, no
    host sync, no data-dependent shape: safe inside CUDA-graph capture.

    Args:
        ids: Virtual token ids, shape ``[N]`` (N may be 0), int32 or int64, any stride.
        v2p: Virtual page → physical page table, shape ``[P]``, int32 or int64.
        page_size: Tokens per page (>= 1).
        out: Optional result tensor, shape ``[N]``, dtype ``out_dtype``; written in place
            and returned (same object). It may alias ``ids``.
        out_dtype: ``torch.int64`` (full attention) or ``torch.int32`` (SWA).
        slots: State slots (``page_size`` 1): what names no live slot maps to -1 ("no
            state") instead of 0, and so does id 0 (the padding anchor).

    Returns:
        Physical token ids, shape ``[N]``, dtype ``out_dtype`` (``out`` when given).

    Raises:
        ArgumentError: On a wrong dtype, shape or device of ``ids``, ``v2p`` or ``out``,
            a bad ``out_dtype`` or a non-positive ``page_size``.
    """
    _check_tensor("ids", ids, ndim=1, dtypes=INDEX_DTYPES)
    _check_tensor("v2p", v2p, ndim=1, dtypes=INDEX_DTYPES, device=ids.device)
    page_size = _check_positive_int("page_size", page_size)
    if out_dtype not in TRANSLATE_OUT_DTYPES:
        raise ArgumentError(f"out_dtype must be int64 or int32, got {out_dtype!r}")
    out = _check_translate_out(out, ids, out_dtype)
    if slots and page_size != 1:
        raise ArgumentError(f"slots=True needs page_size 1 (state slots), got {page_size}")
    if not use_triton(ids.device):
        return translate_ref(ids, v2p, page_size, out=out, out_dtype=out_dtype, slots=slots)
    result = torch.empty(ids.shape, dtype=out_dtype, device=ids.device) if out is None else out
    if ids.numel() == 0:
        return result
    if v2p.numel() == 0:  # every id is past the table: all map to the sink (or -1)
        return result.fill_(-1 if slots else 0)
    if out is not None and _overlap_is_unsafe(out, ids):
        staged = torch.empty_like(out)
        _launch_translate(ids, v2p, page_size, staged, slots)
        return out.copy_(staged)
    _launch_translate(ids, v2p, page_size, result, slots)
    return result
