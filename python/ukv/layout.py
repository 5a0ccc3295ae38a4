"""Strided tensor views of each sub-pool over the pool's single flat byte buffer.

The pool owns one ``uint8`` tensor; every sub-pool sees it through views built here, all
anchored at byte 0 and overlapping completely (the allocators keep the live byte ranges
disjoint, not the views). Physical page ``p`` of a sub-pool occupies bytes
``[p * page_bytes, (p + 1) * page_bytes)``, so moving a page is one contiguous copy and a
freed page vacates a contiguous byte range the peer sub-pool can grow into.

These are pure functions of ``(raw, spec, sizes)``: no allocation, no copies, nothing
cached, so they work on any device including ``meta`` (planning at production sizes
without memory). Every offset and stride is checked to be a whole number of elements;
``torch.as_strided`` would otherwise silently truncate a byte offset.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import torch

from ukv.errors import ArgumentError, PoolConfigError
from ukv.specs import MambaSpec, MHASpec, MLASpec, Spec, check_page_size

__all__ = ["mha_views", "mla_views", "page_envelope_view", "state_views", "views_for"]

RAW_DTYPE = torch.uint8
"""The dtype of the pool buffer every view is built over."""


class _Pages(NamedTuple):
    """Page geometry shared by every layer view of one paged sub-pool."""

    num_pages: int
    page_size: int
    page_bytes: int


def views_for(raw: torch.Tensor, spec: Spec, page_size: int, num_pages: int) -> Any:
    """Build the views of one sub-pool of any kind, from the sub-pool's geometry.

    The one dispatch from a spec to its view builder, shared by the pool and by a
    tensor-parallel follower (which has the geometry as words, not a core).

    Args:
        raw: The pool buffer, ``shape: [total_bytes]``, dtype uint8, any device.
        spec: The sub-pool's spec.
        page_size: Tokens per page of the sub-pool (a Mamba sub-pool has one slot per
            page and does not use it).
        num_pages: Physical pages (Mamba: slots) to expose; must fit in ``raw``.

    Returns:
        What :func:`mha_views` (``(k, v)``), :func:`mla_views` (one view per layer) or
        :func:`state_views` (``(conv, temporal)``) returns for ``spec``'s kind.

    Raises:
        ArgumentError: ``spec`` is not an MHA, MLA or Mamba spec, or ``raw`` is not a
            contiguous 1-D uint8 tensor.
        PoolConfigError: Sizes are invalid, do not fit in ``raw``, or are misaligned.
    """
    if isinstance(spec, MHASpec):
        return mha_views(raw, spec, page_size, num_pages)
    if isinstance(spec, MLASpec):
        return mla_views(raw, spec, page_size, num_pages)
    if isinstance(spec, MambaSpec):
        return state_views(raw, spec, num_pages)
    raise ArgumentError(
        f"bad argument spec = {spec!r}: not an MHASpec, MLASpec or MambaSpec "
        f"(got {type(spec).__name__})"
    )


def mha_views(
    raw: torch.Tensor, spec: MHASpec, page_size: int, num_pages: int
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Build per-layer K and V views of an MHA sub-pool, page-major.

    A page's bytes are ``[L0_K×ps | L0_V×ps | L1_K×ps | L1_V×ps | …]``; token ``t`` is at
    ``[t // page_size, t % page_size]``. The two trailing dims are contiguous.

    Args:
        raw: The pool buffer, ``shape: [total_bytes]``, dtype uint8, any device.
        spec: The sub-pool's spec.
        page_size: Tokens per page.
        num_pages: Physical pages to expose; ``num_pages * spec.page_bytes(page_size)`` must
            fit in ``raw``.

    Returns:
        ``(k, v)``, one view per layer, dtype ``spec.store_dtype``:
        ``k[L]: shape [num_pages, page_size, head_num, head_dim]``,
        ``v[L]: shape [num_pages, page_size, head_num, v_head_dim]``.

    Raises:
        ArgumentError: ``raw`` is not a contiguous 1-D uint8 tensor.
        PoolConfigError: Sizes are invalid, do not fit in ``raw``, or are misaligned.
    """
    pages = _page_geometry(spec, page_size, num_pages)
    typed = _typed_buffer(raw, spec.store_dtype, pages.num_pages * pages.page_bytes)
    k_shape = (spec.head_num, spec.head_dim)
    v_shape = (spec.head_num, spec.value_head_dim)
    k_offsets = [
        spec.layer_k_offset_in_page(layer, pages.page_size) for layer in range(spec.layer_num)
    ]
    v_offsets = [
        spec.layer_v_offset_in_page(layer, pages.page_size) for layer in range(spec.layer_num)
    ]
    k_views = [_paged_view(typed, pages, spec.k_row_bytes, k_shape, off) for off in k_offsets]
    v_views = [_paged_view(typed, pages, spec.v_row_bytes, v_shape, off) for off in v_offsets]
    return k_views, v_views


def mla_views(
    raw: torch.Tensor, spec: MLASpec, page_size: int, num_pages: int
) -> list[torch.Tensor]:
    """Build per-layer latent views of an MLA sub-pool, page-major.

    A page's bytes are ``[L0 rows×ps | L1 rows×ps | …]``; each row is the
    ``kv_lora_rank`` latent followed by the ``qk_rope_head_dim`` RoPE key part.

    Args:
        raw: The pool buffer, ``shape: [total_bytes]``, dtype uint8, any device.
        spec: The sub-pool's spec.
        page_size: Tokens per page.
        num_pages: Physical pages to expose; must fit in ``raw``.

    Returns:
        One view per layer, dtype ``spec.store_dtype``,
        ``shape: [num_pages, page_size, kv_lora_rank + qk_rope_head_dim]``.

    Raises:
        ArgumentError: ``raw`` is not a contiguous 1-D uint8 tensor.
        PoolConfigError: Sizes are invalid, do not fit in ``raw``, or are misaligned.
    """
    pages = _page_geometry(spec, page_size, num_pages)
    typed = _typed_buffer(raw, spec.store_dtype, pages.num_pages * pages.page_bytes)
    offsets = [spec.layer_offset_in_page(layer, pages.page_size) for layer in range(spec.layer_num)]
    row_shape = (spec.latent_dim,)
    return [_paged_view(typed, pages, spec.row_bytes, row_shape, off) for off in offsets]


def state_views(
    raw: torch.Tensor, spec: MambaSpec, max_slots: int
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Build the conv and temporal state views of a Mamba sub-pool, one slot per page.

    Slot ``s`` occupies bytes ``[s * entry_bytes, (s + 1) * entry_bytes)``, laid out as
    ``[conv0 × all layers][conv1 × all layers]…[temporal × all layers]``. The dims are
    ``(layer, slot)``, matching SGLang's ``MambaPool.State``.

    Args:
        raw: The pool buffer, ``shape: [total_bytes]``, dtype uint8, any device.
        spec: The sub-pool's spec.
        max_slots: Slots to expose; ``max_slots * spec.entry_bytes`` must fit in ``raw``.

    Returns:
        ``(conv, temporal)``: ``conv[i]: shape [layer_num, max_slots, *conv_shapes[i]]``,
        dtype ``spec.conv_store_dtype``; ``temporal: shape [layer_num, max_slots,
        *temporal_shape]``, dtype ``spec.temporal_store_dtype``.

    Raises:
        ArgumentError: ``raw`` is not a contiguous 1-D uint8 tensor.
        PoolConfigError: Sizes are invalid, do not fit in ``raw``, or are misaligned.
    """
    slots = _check_count("max_slots", max_slots)
    used = slots * spec.entry_bytes
    conv_typed = _typed_buffer(raw, spec.conv_store_dtype, used)
    conv = [
        _state_view(conv_typed, spec, slots, shape, spec.conv_region_offset(index))
        for index, shape in enumerate(spec.conv_shapes)
    ]
    temporal_typed = _typed_buffer(raw, spec.temporal_store_dtype, used)
    temporal = _state_view(
        temporal_typed, spec, slots, spec.temporal_shape, spec.temporal_region_offset
    )
    return conv, temporal


def page_envelope_view(raw: torch.Tensor, page_bytes: int, num_pages: int) -> torch.Tensor:
    """View the buffer as whole physical pages, for page moves and host copies.

    Args:
        raw: The pool buffer, ``shape: [total_bytes]``, dtype uint8, any device.
        page_bytes: Bytes of one physical page of the sub-pool (``spec.page_bytes(ps)``).
        num_pages: Pages to expose; ``num_pages * page_bytes`` must fit in ``raw``.

    Returns:
        A uint8 view, ``shape: [num_pages, page_bytes]``; row ``p`` is physical page ``p``.

    Raises:
        ArgumentError: ``raw`` is not a contiguous 1-D uint8 tensor.
        PoolConfigError: ``page_bytes`` or ``num_pages`` is invalid or does not fit.
    """
    if isinstance(page_bytes, bool) or not isinstance(page_bytes, int) or page_bytes < 1:
        raise PoolConfigError(f"page_bytes must be a positive int, got {page_bytes!r}")
    used = page_bytes * _check_count("num_pages", num_pages)
    return _typed_buffer(raw, RAW_DTYPE, used)[:used].view(num_pages, page_bytes)


def _page_geometry(spec: MHASpec | MLASpec, page_size: int, num_pages: int) -> _Pages:
    ps = check_page_size(page_size)
    return _Pages(_check_count("num_pages", num_pages), ps, spec.page_bytes(ps))


def _check_count(field: str, value: int) -> int:
    """Validate a page or slot count (zero is allowed: an empty view)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise PoolConfigError(f"{field} must be a non-negative int, got {value!r}")
    return value


def _typed_buffer(raw: torch.Tensor, dtype: torch.dtype, used_bytes: int) -> torch.Tensor:
    """Reinterpret ``raw`` as ``dtype`` after checking it holds ``used_bytes`` bytes.

    The tail past the last whole element is trimmed, since ``Tensor.view(dtype)`` needs the
    byte count to divide the new itemsize.
    """
    _check_raw(raw)
    if used_bytes > raw.numel():
        raise PoolConfigError(
            f"views need {used_bytes} bytes but the buffer holds {raw.numel()} bytes"
        )
    itemsize = dtype.itemsize
    _check_aligned("buffer storage offset", int(raw.storage_offset()), itemsize)
    whole = raw.numel() - raw.numel() % itemsize
    return raw[:whole].view(dtype)


def _check_raw(raw: torch.Tensor) -> None:
    if not isinstance(raw, torch.Tensor):
        raise ArgumentError(f"raw must be a torch.Tensor, got {type(raw).__name__}")
    if raw.dtype != RAW_DTYPE or raw.dim() != 1 or not raw.is_contiguous():
        raise ArgumentError(
            "raw must be a contiguous 1-D uint8 tensor, got "
            f"dtype={raw.dtype}, shape={tuple(raw.shape)}, stride={raw.stride()}"
        )


def _check_aligned(what: str, nbytes: int, itemsize: int) -> int:
    """Return ``nbytes // itemsize``, refusing a byte quantity that splits an element."""
    if nbytes % itemsize:
        raise PoolConfigError(f"{what} {nbytes} B is misaligned for itemsize {itemsize}")
    return nbytes // itemsize


def _contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major element strides of ``shape``."""
    strides: list[int] = []
    step = 1
    for dim in reversed(shape):
        strides.append(step)
        step *= dim
    return tuple(reversed(strides))


def _paged_view(
    typed: torch.Tensor,
    pages: _Pages,
    row_bytes: int,
    row_shape: tuple[int, ...],
    offset_bytes: int,
) -> torch.Tensor:
    """One layer's block of every page: ``shape: [num_pages, page_size, *row_shape]``."""
    itemsize = typed.element_size()
    size = (pages.num_pages, pages.page_size, *row_shape)
    stride = (
        _check_aligned("page stride", pages.page_bytes, itemsize),
        _check_aligned("row stride", row_bytes, itemsize),
        *_contiguous_strides(row_shape),
    )
    offset = typed.storage_offset() + _check_aligned("layer offset", offset_bytes, itemsize)
    return torch.as_strided(typed, size, stride, offset)


def _state_view(
    typed: torch.Tensor,
    spec: MambaSpec,
    max_slots: int,
    row_shape: tuple[int, ...],
    region_offset_bytes: int,
) -> torch.Tensor:
    """One state region of every slot: ``shape: [layer_num, max_slots, *row_shape]``."""
    itemsize = typed.element_size()
    size = (spec.layer_num, max_slots, *row_shape)
    stride = (
        math.prod(row_shape),
        _check_aligned("slot stride", spec.entry_bytes, itemsize),
        *_contiguous_strides(row_shape),
    )
    offset = typed.storage_offset() + _check_aligned("region offset", region_offset_bytes, itemsize)
    return torch.as_strided(typed, size, stride, offset)
