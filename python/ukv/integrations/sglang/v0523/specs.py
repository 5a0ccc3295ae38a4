"""SGLang 0.5.23's sub-pool specs: token-major entries, carried by ukv as page envelopes.

0.5.23 lays a token slot out as one *entry* holding every layer (``[K_0 | V_0 | K_1 |
V_1 | ...]`` for MHA, ``[lat_0 | lat_1 | ...]`` for MLA, ``[conv[0] x L | ... | temporal
x L]`` for state), entries rounded up to 32 bytes (MHA, MLA), and a page is
``page_size`` entries back to back. ukv's core moves and places whole page envelopes and
never looks inside one, so each spec hands ukv an *envelope carrier*
(:meth:`MHASubPoolSpec.to_ukv`): a one-layer ukv spec of exactly one entry's bytes. The
views over the bytes are SGLang's (:func:`dense_views`, :func:`state_views`), so the
buffer holds every byte where SGLang 0.5.23 puts it.

The specs derive from the 0.5.16 drop-in's, so the drop-in pool and allocators take them.
Bad values raise :class:`~ukv.integrations.sglang.errors.SGLangConfigError` (an
``AssertionError``, as SGLang asserts) naming the field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, NamedTuple, cast

import torch

from ukv.errors import PoolConfigError
from ukv.integrations.sglang import specs as v16
from ukv.integrations.sglang.errors import SGLangConfigError, SGLangNotImplementedError
from ukv.specs import MambaSpec, MHASpec

__all__ = [
    "ENTRY_ALIGN_BYTES",
    "ROW_ALIGN_BYTES",
    "MHASubPoolSpec",
    "MLASubPoolSpec",
    "MambaSubPoolSpec",
    "Part",
    "dense_views",
    "state_views",
]

ENTRY_ALIGN_BYTES = 32
ROW_ALIGN_BYTES = 16
#: SGLang's grow directions -> ukv's (a "float" middle is ukv's "middle" band).
UKV_GROW = {"up": "up", "down": "down", "float": "middle"}
_CARRIER_DTYPE = torch.float8_e4m3fn  # one byte per element: any entry size is exact
_FP8_STORES = (torch.float8_e5m2, torch.float8_e4m3fn, torch.float8_e4m3fnuz)


def _store_dtype_for(kv_cache_dtype: torch.dtype) -> torch.dtype:
    """SGLang's rule: an fp8 cache is stored as ``uint8``."""
    return torch.uint8 if kv_cache_dtype in _FP8_STORES else kv_cache_dtype


def align_entry_bytes(num_bytes: int) -> int:
    """A slot's byte sum rounded up to the entry alignment (32 bytes)."""
    return -(-num_bytes // ENTRY_ALIGN_BYTES) * ENTRY_ALIGN_BYTES


def _reserved_floor_bytes(sub_pool_specs: list[Any], page_size: int) -> int:
    """SGLang's slot-0 sink: the largest entry, or page of a paged sub-pool (the same
    rule ukv's core reserves, so both place every sub-pool's first page alike)."""
    return max(
        [max(s.entry_bytes() for s in sub_pool_specs)]
        + [
            page_size * s.entry_bytes()
            for s in sub_pool_specs
            if not isinstance(s, MambaSubPoolSpec)
        ]
    )


class Part(NamedTuple):
    """One row family inside an entry: layer ``l`` at ``offset + l * layer_stride``."""

    name: str
    offset: int
    layer_stride: int
    layer_num: int
    row_shape: tuple[int, ...]
    dtype: torch.dtype


def _check_grow(name: str, layer_num: int, grow_direction: str) -> None:
    if grow_direction not in UKV_GROW:
        raise SGLangConfigError(
            f"grow_direction must be one of {tuple(UKV_GROW)}; got {grow_direction!r} "
            f"(sub-pool {name!r})"
        )
    if isinstance(layer_num, bool) or not isinstance(layer_num, int) or layer_num <= 0:
        raise SGLangConfigError(
            f"layer_num must be positive; got {layer_num!r} (sub-pool {name!r})"
        )


def _refuse_draft(name: str, draft_region: Any) -> None:
    if draft_region is not None:
        raise SGLangNotImplementedError(
            f"draft_region on sub-pool {name!r}: fused speculative-draft regions are not "
            "implemented by the ukv drop-in (docs/SGLANG.md, SGLang 0.5.23)"
        )


def _check_rows(name: str, **row_bytes: int) -> None:
    """SGLang's row rule: every part's row is a whole number of 16-byte units."""
    for part, nbytes in row_bytes.items():
        if nbytes % ROW_ALIGN_BYTES:
            raise SGLangConfigError(
                f"sub-pool {name!r}: a {nbytes}-byte {part} row is not a multiple of "
                f"{ROW_ALIGN_BYTES} bytes (SGLang's unified pool needs it)"
            )


def _kv_carrier(name: str, entry_bytes: int, grow: str) -> MHASpec:
    """A one-layer ukv MHA spec of exactly ``entry_bytes`` per token (K and V halves of
    one byte elements): an envelope ukv places and moves, never looks into."""
    return MHASpec(
        name,
        layer_num=1,
        head_num=1,
        head_dim=entry_bytes // 2,
        dtype=_CARRIER_DTYPE,
        grow=cast(Any, UKV_GROW[grow]),
    )


@dataclass(frozen=True, kw_only=True)
class MHASubPoolSpec(v16.MHASubPoolSpec):
    """SGLang 0.5.23's MHA spec: ``kv_cache_dtype`` names the cache dtype (``store_dtype``
    must be its storage dtype); ``grow_direction`` may be ``"float"``.

    Raises:
        SGLangConfigError: what SGLang asserts (directions, positive sizes, the store
            dtype rule).
        SGLangNotImplementedError: ``draft_region`` set.
    """

    kv_cache_dtype: torch.dtype | None = None
    draft_region: Any = None

    def __post_init__(self) -> None:
        _check_grow(self.name, self.layer_num, self.grow_direction)
        _refuse_draft(self.name, self.draft_region)
        for f in ("head_num", "head_dim"):
            if int(getattr(self, f)) <= 0:
                raise SGLangConfigError(f"{f} must be positive; got {getattr(self, f)!r}")
        if self.kv_cache_dtype is None:
            object.__setattr__(self, "kv_cache_dtype", self.store_dtype)
        expected = _store_dtype_for(cast(torch.dtype, self.kv_cache_dtype))
        if self.store_dtype != expected:
            raise SGLangConfigError(
                f"store_dtype = {self.store_dtype} does not match kv_cache_dtype = "
                f"{self.kv_cache_dtype} (expected {expected}; sub-pool {self.name!r})"
            )
        if self.v_head_dim is None:
            object.__setattr__(self, "v_head_dim", self.head_dim)
        if int(cast(int, self.v_head_dim)) <= 0:
            raise SGLangConfigError(f"v_head_dim must be positive; got {self.v_head_dim!r}")
        object.__setattr__(
            self, "_ukv", _kv_carrier(self.name, self.entry_bytes(), self.grow_direction)
        )

    def k_row_bytes(self) -> int:
        """Bytes of one token's K row in one layer."""
        return self.head_num * self.head_dim * self.store_dtype.itemsize

    def v_row_bytes(self) -> int:
        """Bytes of one token's V row in one layer."""
        return self.head_num * cast(int, self.v_head_dim) * self.store_dtype.itemsize

    def host_entry_bytes(self) -> int:
        """One token's bytes across all layers, before the entry alignment."""
        return self.layer_num * (self.k_row_bytes() + self.v_row_bytes())

    def entry_bytes(self) -> int:
        """One token's entry: every layer's K and V, rounded up to 32 bytes."""
        return align_entry_bytes(self.host_entry_bytes())

    def layer_k_offset_in_page(self, layer_id: int, page_size: int) -> int:
        """Byte offset of layer ``layer_id``'s K row of a page's first token (token-major:
        ``layer_id * (k + v)``; token ``j`` adds ``j * entry_bytes()``)."""
        return layer_id * (self.k_row_bytes() + self.v_row_bytes())

    def layer_v_offset_in_page(self, layer_id: int, page_size: int) -> int:
        """As :meth:`layer_k_offset_in_page`, for the V row (``+ k``)."""
        return self.layer_k_offset_in_page(layer_id, page_size) + self.k_row_bytes()

    def parts(self) -> tuple[Part, ...]:
        """The entry's K and V row families.

        Raises:
            SGLangConfigError: a K or V row that is not a multiple of 16 bytes.
        """
        _check_rows(self.name, K=self.k_row_bytes(), V=self.v_row_bytes())
        stride = self.k_row_bytes() + self.v_row_bytes()
        v_dim = cast(int, self.v_head_dim)
        return (
            Part("k", 0, stride, self.layer_num, (self.head_num, self.head_dim), self.store_dtype),
            Part(
                "v",
                self.k_row_bytes(),
                stride,
                self.layer_num,
                (self.head_num, v_dim),
                self.store_dtype,
            ),
        )

    def get_dtype(self) -> torch.dtype:
        """The store dtype."""
        return self.store_dtype


@dataclass(frozen=True, kw_only=True)
class MLASubPoolSpec(v16.SubPoolSpec):
    """SGLang 0.5.23's MLA spec: one latent row (``kv_lora_rank + qk_rope_head_dim``)
    per token per layer.

    Raises:
        SGLangConfigError: bad sizes or direction.
        SGLangNotImplementedError: ``draft_region`` set.
    """

    kv_lora_rank: int
    qk_rope_head_dim: int
    store_dtype: torch.dtype
    draft_region: Any = None
    _ukv: MHASpec = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_grow(self.name, self.layer_num, self.grow_direction)
        _refuse_draft(self.name, self.draft_region)
        for f in ("kv_lora_rank", "qk_rope_head_dim"):
            if int(getattr(self, f)) <= 0:
                raise SGLangConfigError(f"{f} must be positive; got {getattr(self, f)!r}")
        object.__setattr__(
            self, "_ukv", _kv_carrier(self.name, self.entry_bytes(), self.grow_direction)
        )

    @property
    def kv_cache_dim(self) -> int:
        """Elements of one latent row."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    def row_bytes(self) -> int:
        """Bytes of one latent row."""
        return self.kv_cache_dim * self.store_dtype.itemsize

    def entry_bytes(self) -> int:
        """One token's entry: every layer's latent row, rounded up to 32 bytes."""
        return align_entry_bytes(self.layer_num * self.row_bytes())

    def page_bytes(self, page_size: int) -> int:
        """Bytes of one page."""
        return page_size * self.entry_bytes()

    def parts(self) -> tuple[Part, ...]:
        """The entry's latent rows (shape ``(1, kv_cache_dim)`` as SGLang's views)."""
        _check_rows(self.name, latent=self.row_bytes())
        return (
            Part(
                "kv", 0, self.row_bytes(), self.layer_num, (1, self.kv_cache_dim), self.store_dtype
            ),
        )

    def to_ukv(self) -> MHASpec:
        """The envelope carrier ukv places and moves."""
        return self._ukv

    def get_dtype(self) -> torch.dtype:
        """The store dtype."""
        return self.store_dtype


@dataclass(frozen=True, kw_only=True)
class MambaSubPoolSpec(v16.MambaSubPoolSpec):
    """SGLang 0.5.23's state spec: ``conv_slice_axis`` and ``"float"`` are accepted; a
    conv-only state (a temporal shape with a 0) has no temporal bytes.

    Raises:
        SGLangConfigError: bad sizes or direction.
        SGLangNotImplementedError: ``draft_region`` set.
    """

    conv_slice_axis: int = 0
    draft_region: Any = None

    def __post_init__(self) -> None:
        _check_grow(self.name, self.layer_num, self.grow_direction)
        _refuse_draft(self.name, self.draft_region)
        if len(self.conv_state_shapes) == 0:
            raise SGLangConfigError(f"conv_state_shapes must be non-empty (sub-pool {self.name!r})")
        entry = self.entry_bytes()
        if entry < 2:
            raise SGLangConfigError(f"a state entry of {entry} bytes (sub-pool {self.name!r})")
        try:
            carrier = MambaSpec(
                self.name,
                layer_num=1,
                conv_shapes=((entry - 1,),),
                conv_dtype=_CARRIER_DTYPE,
                temporal_shape=(1,),
                temporal_dtype=_CARRIER_DTYPE,
                grow=cast(Any, UKV_GROW[self.grow_direction]),
            )
        except PoolConfigError as exc:
            raise SGLangConfigError(str(exc)) from exc
        object.__setattr__(self, "_ukv", carrier)

    def conv_row_bytes(self, idx: int) -> int:
        """Bytes of conv state ``idx`` of one layer."""
        return math.prod(int(x) for x in self.conv_state_shapes[idx]) * self.conv_dtype.itemsize

    def temporal_row_bytes(self) -> int:
        """Bytes of the temporal state of one layer (0 for a conv-only state)."""
        return math.prod(int(x) for x in self.temporal_state_shape) * self.temporal_dtype.itemsize

    def host_entry_bytes(self) -> int:
        """One slot's bytes: every conv state and the temporal state, every layer."""
        convs = sum(self.conv_row_bytes(i) for i in range(len(self.conv_state_shapes)))
        return self.layer_num * (convs + self.temporal_row_bytes())

    def entry_bytes(self) -> int:
        """One slot's bytes (no alignment, as SGLang's unfused state entries)."""
        return self.host_entry_bytes()

    def get_dtype(self) -> torch.dtype:
        """The conv state's dtype (SGLang's representative state dtype)."""
        return self.conv_dtype


def dense_views(
    raw: torch.Tensor, part: Part, entry_bytes: int, num_slots: int
) -> list[torch.Tensor]:
    """SGLang 0.5.23's per-layer views of one part: ``(num_slots, *row_shape)`` with the
    entry as slot stride, indexed by the physical token id."""
    item = part.dtype.itemsize
    base = raw.view(part.dtype)
    inner = [1]
    for d in reversed(part.row_shape[1:]):
        inner.insert(0, inner[0] * d)
    stride = (entry_bytes // item, *inner)
    return [
        torch.as_strided(
            base,
            size=(num_slots, *part.row_shape),
            stride=stride,
            storage_offset=(part.offset + layer * part.layer_stride) // item,
        )
        for layer in range(part.layer_num)
    ]


def state_views(
    raw: torch.Tensor, spec: MambaSubPoolSpec, max_slots: int
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """SGLang 0.5.23's state views over per-slot entries: ``conv[i]`` of shape
    ``(layers, max_slots, *conv_i)`` and the temporal ``(layers, max_slots, *temporal)``;
    an entry is ``[conv[0] x L | conv[1] x L | ... | temporal x L]``.

    Raises:
        SGLangConfigError: the entry is not a whole number of a state dtype's items.
    """
    entry, offset, layers = spec.entry_bytes(), 0, spec.layer_num
    views: list[torch.Tensor] = []
    shapes = [(tuple(int(x) for x in s), spec.conv_dtype) for s in spec.conv_state_shapes]
    shapes.append((tuple(int(x) for x in spec.temporal_state_shape), spec.temporal_dtype))
    for shape, dtype in shapes:
        item = dtype.itemsize
        if entry % item or offset % item:
            raise SGLangConfigError(
                f"misaligned state spec {spec.name!r}: entry {entry} B / offset {offset} B "
                f"are not multiples of the {dtype} itemsize {item} B"
            )
        row = math.prod(shape)
        inner = [1]
        for d in reversed(shape[1:]):
            inner.insert(0, inner[0] * d)
        views.append(
            torch.as_strided(
                raw.view(dtype),
                size=(layers, max_slots, *shape),
                stride=(row, entry // item, *inner),
                storage_offset=offset // item,
            )
        )
        offset += layers * row * item
    return views[:-1], views[-1]
