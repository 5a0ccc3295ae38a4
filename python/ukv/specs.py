"""Sub-pool specs: what one slot of each cache kind costs in bytes, and where its rows sit.

A spec is the only thing the pool knows about a model's cache geometry. Everything that
decides placement (the Rust allocator's byte frontier, the reserved floor, the strided views
in :mod:`ukv.layout`, the move kernels) derives from the few integers defined here, so they
are computed in exactly one place and validated once, at construction: a spec that exists
is a spec whose rows can be viewed without misaligned reads.

Three kinds exist (API.md §2):

* :class:`MHASpec` — paged K and V rows per layer (full or sliding-window attention).
* :class:`MLASpec` — paged, one compressed latent row per layer (V is a prefix of it).
* :class:`MambaSpec` — per-request conv + temporal (SSM) state; always one slot per page.

fp8 caches are stored as ``uint8`` and bit-viewed, because ``index_put_`` and some kernels
have not accepted float8 tensors (SGLang does the same); ``dtype`` keeps the logical dtype
and ``store_dtype`` says what the buffer is viewed as.
"""

from __future__ import annotations

import abc
import math
import numbers
from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch

from ukv.errors import ArgumentError, PoolConfigError

__all__ = [
    "FP8_DTYPES",
    "FP8_STORE_DTYPE",
    "GROW_DIRECTIONS",
    "MAMBA_PAGE_SIZE",
    "SUPPORTED_DTYPES",
    "GrowDirection",
    "MHASpec",
    "MLASpec",
    "MambaSpec",
    "Spec",
    "SpecKind",
    "check_page_size",
    "reserved_floor",
    "store_dtype_for",
]

GrowDirection = Literal["up", "down", "middle"]
SpecKind = Literal["mha", "mamba", "mla"]

GROW_DIRECTIONS: tuple[GrowDirection, ...] = ("up", "down", "middle")
"""Accepted values of ``grow``: low-byte end upwards, high-byte end downwards, or a band
floating between the two (at most one per pool, beside one ``"up"`` and one ``"down"``)."""

FP8_DTYPES: frozenset[torch.dtype] = frozenset({torch.float8_e4m3fn, torch.float8_e5m2})
"""Logical dtypes stored as ``uint8`` and bit-viewed."""

SUPPORTED_DTYPES: frozenset[torch.dtype] = frozenset(
    {torch.float16, torch.bfloat16, torch.float32} | FP8_DTYPES
)
"""Logical dtypes a spec may name (cache and state dtypes alike)."""

FP8_STORE_DTYPE = torch.uint8
"""What fp8 caches are stored as."""

MAMBA_PAGE_SIZE = 1
"""Mamba state is per request, never paged: its page is always one slot."""

_SUPPORTED_NAMES = ", ".join(sorted(str(d).removeprefix("torch.") for d in SUPPORTED_DTYPES))


def store_dtype_for(dtype: torch.dtype) -> torch.dtype:
    """Return the dtype the byte buffer is viewed as for a logical cache dtype.

    Args:
        dtype: A logical dtype from :data:`SUPPORTED_DTYPES`.

    Returns:
        ``torch.uint8`` for fp8 dtypes (bit-viewed), otherwise ``dtype`` itself.
    """
    return FP8_STORE_DTYPE if dtype in FP8_DTYPES else dtype


def check_page_size(page_size: object) -> int:
    """Validate a pool page size (tokens per page).

    Args:
        page_size: The candidate value.

    Returns:
        ``page_size`` as a plain ``int``.

    Raises:
        PoolConfigError: ``page_size`` is not an int ``>= 1`` (bools are rejected).
    """
    value = _positive_int(page_size)
    if value is None:
        raise PoolConfigError(f"page_size must be a positive int, got {page_size!r}")
    return value


def reserved_floor(specs: Iterable[Spec], page_size: int) -> int:
    """Bytes at the bottom of the buffer that no sub-pool may hand out (the padding sink).

    A padded write to physical id 0 of a paged pool touches every layer block of page 0,
    i.e. up to ``page_size * entry_bytes`` bytes, not just one entry; reserving the largest
    such envelope keeps dummy writes from landing on a peer's live slots (reference §2.6).

    Args:
        specs: Every spec sharing the buffer.
        page_size: The pool page size; applies to paged specs only (Mamba uses 1).

    Returns:
        ``max(entry_bytes of every spec, page_size * entry_bytes of every paged spec)``.

    Raises:
        PoolConfigError: ``specs`` is empty or ``page_size`` is invalid.
    """
    ps = check_page_size(page_size)
    envelopes = [spec.page_bytes(ps) for spec in specs]
    if not envelopes:
        raise PoolConfigError("reserved_floor needs at least one spec, got none")
    return max(envelopes)


def _as_int(value: object) -> int | None:
    """``value`` as a plain int if it is a (non-bool) integer, else None."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        return None
    return int(value)


def _positive_int(value: object) -> int | None:
    """``value`` as a plain int if it is an integer ``>= 1``, else None."""
    as_int = _as_int(value)
    return as_int if as_int is not None and as_int > 0 else None


class Spec(abc.ABC):
    """Common surface of every sub-pool spec (frozen dataclasses below).

    Attributes:
        name: Sub-pool name, unique within a pool.
        layer_num: Number of layers whose rows one slot holds.
        grow: ``"up"`` (hands out pages from the low end), ``"down"`` (from the high end) or
            ``"middle"`` (a band floating between them).
        kind: ``"mha"``, ``"mamba"`` or ``"mla"``.
        is_paged: Whether the pool page size applies (False: one slot per page).
    """

    name: str
    layer_num: int
    grow: GrowDirection
    kind: ClassVar[SpecKind]
    is_paged: ClassVar[bool]

    @property
    @abc.abstractmethod
    def entry_bytes(self) -> int:
        """Bytes of one slot across all of its layers."""

    @property
    @abc.abstractmethod
    def store_dtype(self) -> torch.dtype:
        """Dtype the buffer is viewed as (``uint8`` for fp8; Mamba: the conv store dtype)."""

    def effective_page_size(self, page_size: int) -> int:
        """Return the page size this spec actually uses inside a pool of ``page_size``.

        Args:
            page_size: The pool page size.

        Returns:
            ``page_size`` for paged specs, 1 for Mamba.

        Raises:
            PoolConfigError: ``page_size`` is not a positive int.
        """
        ps = check_page_size(page_size)
        return ps if self.is_paged else MAMBA_PAGE_SIZE

    def page_bytes(self, page_size: int) -> int:
        """Bytes of one physical page of this sub-pool.

        Args:
            page_size: The pool page size (ignored by unpaged specs, which use 1).

        Returns:
            ``effective_page_size(page_size) * entry_bytes``.

        Raises:
            PoolConfigError: ``page_size`` is not a positive int.
        """
        return self.effective_page_size(page_size) * self.entry_bytes

    # -- validation helpers shared by the subclasses ------------------------------------

    def _fail(self, message: str) -> PoolConfigError:
        return PoolConfigError(f"{self.kind} spec {self.name!r}: {message}")

    def _validate_common(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise PoolConfigError(
                f"{self.kind} spec name must be a non-empty str, got {self.name!r}"
            )
        self._normalize_positive_int("layer_num")
        if self.grow not in GROW_DIRECTIONS:
            raise self._fail(f"grow must be 'up', 'down' or 'middle', got {self.grow!r}")

    def _normalize_positive_int(self, field: str) -> None:
        value = getattr(self, field)
        as_int = _positive_int(value)
        if as_int is None:
            raise self._fail(f"{field} must be a positive int, got {value!r}")
        object.__setattr__(self, field, as_int)

    def _check_dtype(self, field: str) -> None:
        value = getattr(self, field)
        if not isinstance(value, torch.dtype) or value not in SUPPORTED_DTYPES:
            raise self._fail(f"{field} must be one of {_SUPPORTED_NAMES}, got {value!r}")

    def _normalize_shape(self, field: str, shape: object) -> tuple[int, ...]:
        dims = tuple(shape) if isinstance(shape, (tuple, list)) else ()
        positive = [_positive_int(d) for d in dims]
        if not dims or None in positive:
            raise self._fail(f"{field} must be a non-empty tuple of positive ints, got {shape!r}")
        return tuple(d for d in positive if d is not None)

    def _check_index(self, field: str, value: object, bound: int) -> int:
        index = _as_int(value)
        if index is None or not 0 <= index < bound:
            raise ArgumentError(
                f"{self.kind} spec {self.name!r}: {field} must be in [0, {bound}), got {value!r}"
            )
        return index


class _TokenRows:
    """What a spec of token rows in one ``dtype`` (MHA, MLA) shares: how the buffer is
    viewed for it."""

    dtype: torch.dtype

    @property
    def store_dtype(self) -> torch.dtype:
        """Dtype the buffer is viewed as: ``uint8`` for fp8, else ``dtype``."""
        return store_dtype_for(self.dtype)

    @property
    def itemsize(self) -> int:
        """Bytes per stored element."""
        return self.store_dtype.itemsize


@dataclass(frozen=True)
class MHASpec(_TokenRows, Spec):
    """Paged multi-head attention KV: per layer, one K row and one V row per token.

    Within a page the bytes are ``[L0_K×ps | L0_V×ps | L1_K×ps | L1_V×ps | …]``; a K row is
    ``head_num * head_dim`` store elements, a V row ``head_num * v_head_dim``.

    Args:
        name: Sub-pool name.
        layer_num: Attention layers stored in this sub-pool.
        head_num: KV heads per layer.
        head_dim: K head dimension.
        dtype: Logical KV dtype (fp8 is stored as uint8).
        v_head_dim: V head dimension; None means ``head_dim``. Always an int after
            construction.
        grow: ``"up"``, ``"down"`` or ``"middle"``.

    Raises:
        PoolConfigError: A field is invalid; the message names the field and the value.
    """

    kind: ClassVar[SpecKind] = "mha"
    is_paged: ClassVar[bool] = True

    name: str
    layer_num: int
    head_num: int
    head_dim: int
    dtype: torch.dtype
    v_head_dim: int | None = None
    grow: GrowDirection = "up"

    def __post_init__(self) -> None:
        self._validate_common()
        self._normalize_positive_int("head_num")
        self._normalize_positive_int("head_dim")
        if self.v_head_dim is None:
            object.__setattr__(self, "v_head_dim", self.head_dim)
        self._normalize_positive_int("v_head_dim")
        self._check_dtype("dtype")

    @property
    def value_head_dim(self) -> int:
        """``v_head_dim`` typed as ``int`` (it is never None after construction)."""
        assert self.v_head_dim is not None  # set by __post_init__
        return self.v_head_dim

    @property
    def k_row_bytes(self) -> int:
        """Bytes of one token's K row in one layer: ``head_num * head_dim * itemsize``."""
        return self.head_num * self.head_dim * self.itemsize

    @property
    def v_row_bytes(self) -> int:
        """Bytes of one token's V row in one layer: ``head_num * v_head_dim * itemsize``."""
        return self.head_num * self.value_head_dim * self.itemsize

    @property
    def entry_bytes(self) -> int:
        """Bytes of one token across all layers: ``layer_num * (k_row + v_row)``."""
        return self.layer_num * (self.k_row_bytes + self.v_row_bytes)

    def layer_k_offset_in_page(self, layer: int, page_size: int) -> int:
        """Byte offset of layer ``layer``'s K block from the start of a page.

        Args:
            layer: Layer index in ``[0, layer_num)``.
            page_size: Pool page size (tokens per page).

        Returns:
            ``layer * page_size * (k_row_bytes + v_row_bytes)``.

        Raises:
            ArgumentError: ``layer`` is out of range.
            PoolConfigError: ``page_size`` is not a positive int.
        """
        ps = check_page_size(page_size)
        return (
            self._check_index("layer", layer, self.layer_num)
            * ps
            * (self.k_row_bytes + self.v_row_bytes)
        )

    def layer_v_offset_in_page(self, layer: int, page_size: int) -> int:
        """Byte offset of layer ``layer``'s V block from the start of a page.

        Args:
            layer: Layer index in ``[0, layer_num)``.
            page_size: Pool page size (tokens per page).

        Returns:
            ``layer_k_offset_in_page(layer, page_size) + page_size * k_row_bytes``.

        Raises:
            ArgumentError: ``layer`` is out of range.
            PoolConfigError: ``page_size`` is not a positive int.
        """
        return self.layer_k_offset_in_page(layer, page_size) + page_size * self.k_row_bytes


@dataclass(frozen=True)
class MLASpec(_TokenRows, Spec):
    """Paged multi-head latent attention: one compressed latent row per layer per token.

    A row holds ``kv_lora_rank + qk_rope_head_dim`` store elements (the V part is its
    ``kv_lora_rank`` prefix). Within a page the bytes are ``[L0 rows×ps | L1 rows×ps | …]``.

    Args:
        name: Sub-pool name.
        layer_num: MLA layers stored in this sub-pool.
        kv_lora_rank: Width of the compressed KV latent.
        qk_rope_head_dim: Width of the decoupled RoPE key part.
        dtype: Logical cache dtype (fp8 is stored as uint8).
        grow: ``"up"``, ``"down"`` or ``"middle"``.

    Raises:
        PoolConfigError: A field is invalid; the message names the field and the value.
    """

    kind: ClassVar[SpecKind] = "mla"
    is_paged: ClassVar[bool] = True

    name: str
    layer_num: int
    kv_lora_rank: int
    qk_rope_head_dim: int
    dtype: torch.dtype
    grow: GrowDirection = "up"

    def __post_init__(self) -> None:
        self._validate_common()
        self._normalize_positive_int("kv_lora_rank")
        self._normalize_positive_int("qk_rope_head_dim")
        self._check_dtype("dtype")

    @property
    def latent_dim(self) -> int:
        """Elements of one latent row: ``kv_lora_rank + qk_rope_head_dim``."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def row_bytes(self) -> int:
        """Bytes of one token's latent row in one layer."""
        return self.latent_dim * self.itemsize

    @property
    def entry_bytes(self) -> int:
        """Bytes of one token across all layers: ``layer_num * row_bytes``."""
        return self.layer_num * self.row_bytes

    def layer_offset_in_page(self, layer: int, page_size: int) -> int:
        """Byte offset of layer ``layer``'s latent block from the start of a page.

        Args:
            layer: Layer index in ``[0, layer_num)``.
            page_size: Pool page size (tokens per page).

        Returns:
            ``layer * page_size * row_bytes``.

        Raises:
            ArgumentError: ``layer`` is out of range.
            PoolConfigError: ``page_size`` is not a positive int.
        """
        ps = check_page_size(page_size)
        return self._check_index("layer", layer, self.layer_num) * ps * self.row_bytes


@dataclass(frozen=True)
class MambaSpec(Spec):
    """Per-request Mamba / linear-attention state: conv tensors plus one temporal tensor.

    One slot's envelope is ``[conv0 × all layers][conv1 × all layers]…[temporal × all
    layers]``; slots are ``entry_bytes`` apart and never paged. Because every slot of the
    buffer starts at a multiple of ``entry_bytes``, the entry must be a multiple of both
    itemsizes and the temporal region must start on a temporal element boundary.

    Args:
        name: Sub-pool name.
        layer_num: Mamba layers stored in this sub-pool.
        conv_shapes: One per-layer shape per conv tensor, e.g.
            ``((conv_dim, d_conv - 1),)``; ``()`` for a state with no conv window
            (lightning attention). Lists are accepted and stored as tuples.
        conv_dtype: Logical dtype of every conv tensor.
        temporal_shape: Per-layer shape of the temporal (SSM) state, e.g.
            ``(num_heads, head_dim, d_state)``.
        temporal_dtype: Logical dtype of the temporal state.
        grow: ``"up"``, ``"down"`` or ``"middle"``.

    Raises:
        PoolConfigError: A field is invalid, or the layout is misaligned (the message then
            contains "misaligned"); the message names the field and the value.
    """

    kind: ClassVar[SpecKind] = "mamba"
    is_paged: ClassVar[bool] = False

    name: str
    layer_num: int
    conv_shapes: tuple[tuple[int, ...], ...]
    conv_dtype: torch.dtype
    temporal_shape: tuple[int, ...]
    temporal_dtype: torch.dtype
    grow: GrowDirection = "up"

    def __post_init__(self) -> None:
        self._validate_common()
        self._normalize_conv_shapes()
        shape = self._normalize_shape("temporal_shape", self.temporal_shape)
        object.__setattr__(self, "temporal_shape", shape)
        self._check_dtype("conv_dtype")
        self._check_dtype("temporal_dtype")
        self._check_alignment()

    def _normalize_conv_shapes(self) -> None:
        shapes = self.conv_shapes
        if not isinstance(shapes, (tuple, list)):
            raise self._fail(f"conv_shapes must be a tuple of shapes, got {shapes!r}")
        if shapes and all(_as_int(dim) is not None for dim in shapes):  # one shape, not a tuple
            raise self._fail(
                f"conv_shapes must be a tuple of shapes like ((4, 3),), got {shapes!r}"
            )
        normalized = tuple(
            self._normalize_shape(f"conv_shapes[{i}]", shape) for i, shape in enumerate(shapes)
        )
        object.__setattr__(self, "conv_shapes", normalized)

    def _check_alignment(self) -> None:
        entry = self.entry_bytes
        for field, dtype in (
            ("conv_dtype", self.conv_dtype),
            ("temporal_dtype", self.temporal_dtype),
        ):
            itemsize = store_dtype_for(dtype).itemsize
            if entry % itemsize:
                raise self._fail(
                    f"entry_bytes {entry} is misaligned for {field} {dtype} (itemsize {itemsize})"
                )
        offset = self.temporal_region_offset
        if offset % self.temporal_itemsize:
            raise self._fail(
                f"temporal region offset {offset} is misaligned for temporal_dtype "
                f"{self.temporal_dtype} (itemsize {self.temporal_itemsize})"
            )

    @property
    def conv_store_dtype(self) -> torch.dtype:
        """Dtype the conv regions are viewed as (``uint8`` for fp8)."""
        return store_dtype_for(self.conv_dtype)

    @property
    def temporal_store_dtype(self) -> torch.dtype:
        """Dtype the temporal region is viewed as (``uint8`` for fp8)."""
        return store_dtype_for(self.temporal_dtype)

    @property
    def store_dtype(self) -> torch.dtype:
        """The conv store dtype (the representative state dtype, as in SGLang's MambaPool)."""
        return self.conv_store_dtype

    @property
    def conv_itemsize(self) -> int:
        """Bytes per stored conv element."""
        return self.conv_store_dtype.itemsize

    @property
    def temporal_itemsize(self) -> int:
        """Bytes per stored temporal element."""
        return self.temporal_store_dtype.itemsize

    @property
    def conv_row_bytes(self) -> tuple[int, ...]:
        """Bytes of one layer's row of each conv tensor: ``prod(conv_shapes[i]) * itemsize``."""
        return tuple(math.prod(shape) * self.conv_itemsize for shape in self.conv_shapes)

    @property
    def temporal_row_bytes(self) -> int:
        """Bytes of one layer's temporal row: ``prod(temporal_shape) * itemsize``."""
        return math.prod(self.temporal_shape) * self.temporal_itemsize

    def conv_region_offset(self, index: int) -> int:
        """Byte offset of conv tensor ``index``'s region (all layers) inside one slot.

        Args:
            index: Conv tensor index in ``[0, len(conv_shapes))``.

        Returns:
            ``sum(layer_num * conv_row_bytes[j] for j < index)``.

        Raises:
            ArgumentError: ``index`` is out of range.
        """
        count = self._check_index("conv index", index, len(self.conv_shapes))
        return self.layer_num * sum(self.conv_row_bytes[:count])

    @property
    def temporal_region_offset(self) -> int:
        """Byte offset of the temporal region (all layers) inside one slot: all conv bytes."""
        return self.layer_num * sum(self.conv_row_bytes)

    @property
    def entry_bytes(self) -> int:
        """Bytes of one slot: every conv row and the temporal row, for every layer."""
        return self.temporal_region_offset + self.layer_num * self.temporal_row_bytes
