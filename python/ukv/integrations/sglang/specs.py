"""SGLang's sub-pool specs (``MHASubPoolSpec``, ``MambaSubPoolSpec``) over ukv's specs.

Same fields and methods as SGLang's (``entry_bytes()`` is a method there, a property on
ukv's specs); :meth:`to_ukv` gives the ukv spec the drop-in builds its pool from. Bad
values raise :class:`~ukv.integrations.sglang.errors.SGLangConfigError` (an
``AssertionError`` and a ``PoolConfigError``) naming the field and value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import torch

from ukv.errors import PoolConfigError
from ukv.integrations.sglang.errors import SGLangConfigError
from ukv.specs import FP8_DTYPES, MambaSpec, MHASpec

__all__ = ["MHASubPoolSpec", "MambaSubPoolSpec", "SubPoolSpec"]

GROW_DIRECTIONS = ("up", "down")


def _check_common(name: str, layer_num: int, grow_direction: str) -> None:
    if grow_direction not in GROW_DIRECTIONS:
        raise SGLangConfigError(
            f"grow_direction must be 'up' or 'down'; got {grow_direction!r} (sub-pool {name!r})"
        )
    if isinstance(layer_num, bool) or not isinstance(layer_num, int) or layer_num <= 0:
        raise SGLangConfigError(
            f"layer_num must be positive; got {layer_num!r} (sub-pool {name!r})"
        )


@dataclass(frozen=True, kw_only=True)
class SubPoolSpec:
    """What every sub-pool spec has: a name, its layers and the end it grows from."""

    name: str
    layer_num: int
    grow_direction: str


@dataclass(frozen=True, kw_only=True)
class MHASubPoolSpec(SubPoolSpec):
    """K/V rows of ``layer_num`` full-attention (or sliding-window) layers per token.

    ``store_dtype`` is the buffer's dtype (``uint8`` for an fp8 cache, as SGLang passes it).
    ``kv_dtype`` (a drop-in keyword, not SGLang's) names the fp8 flavour a ``uint8`` store
    holds: ``torch.float8_e4m3fn`` (the default) or ``torch.float8_e5m2``; the factories
    pass SGLang's ``kv_cache_dtype`` so an e5m2 cache is stored as e5m2 bits.
    """

    head_num: int
    head_dim: int
    store_dtype: torch.dtype
    v_head_dim: int | None = None
    kv_dtype: torch.dtype | None = None
    _ukv: MHASpec = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_common(self.name, self.layer_num, self.grow_direction)
        if self.v_head_dim is None:
            object.__setattr__(self, "v_head_dim", self.head_dim)
        logical = self._logical_dtype()
        try:
            spec = MHASpec(
                self.name,
                layer_num=self.layer_num,
                head_num=self.head_num,
                head_dim=self.head_dim,
                dtype=logical,
                v_head_dim=self.v_head_dim,
                grow=cast(Any, self.grow_direction),
            )
        except PoolConfigError as exc:
            raise SGLangConfigError(str(exc)) from exc
        object.__setattr__(self, "_ukv", spec)

    def _logical_dtype(self) -> torch.dtype:
        """The dtype ukv's spec takes: the fp8 flavour for a ``uint8`` store (same bytes),
        else the store dtype.

        Raises:
            SGLangConfigError: ``kv_dtype`` is not an fp8 flavour while the store is
                ``uint8``, or disagrees with a non-``uint8`` store.
        """
        if self.store_dtype != torch.uint8:
            if self.kv_dtype not in (None, self.store_dtype):
                raise SGLangConfigError(
                    f"kv_dtype = {self.kv_dtype} disagrees with store_dtype = "
                    f"{self.store_dtype} (sub-pool {self.name!r})"
                )
            return self.store_dtype
        flavour = torch.float8_e4m3fn if self.kv_dtype is None else self.kv_dtype
        if flavour not in FP8_DTYPES:
            raise SGLangConfigError(
                f"kv_dtype = {self.kv_dtype} for a uint8 store (sub-pool {self.name!r}): "
                f"must be one of {sorted(str(d) for d in FP8_DTYPES)}"
            )
        return flavour

    def to_ukv(self) -> MHASpec:
        """The ukv spec of the same geometry."""
        return self._ukv

    def k_row_bytes(self) -> int:
        """Bytes of one token's K row in one layer."""
        return int(self._ukv.k_row_bytes)

    def v_row_bytes(self) -> int:
        """Bytes of one token's V row in one layer."""
        return int(self._ukv.v_row_bytes)

    def entry_bytes(self) -> int:
        """Bytes of one token across all layers (K and V)."""
        return int(self._ukv.entry_bytes)

    def page_bytes(self, page_size: int) -> int:
        """Bytes of one page of ``page_size`` tokens."""
        return self.entry_bytes() * int(page_size)

    def layer_k_offset_in_page(self, layer_id: int, page_size: int) -> int:
        """Byte offset of layer ``layer_id``'s K rows inside a page (``L*ps*(k+v)``)."""
        return int(self._ukv.layer_k_offset_in_page(layer_id, page_size))

    def layer_v_offset_in_page(self, layer_id: int, page_size: int) -> int:
        """Byte offset of layer ``layer_id``'s V rows inside a page (K's ``+ ps*k``)."""
        return int(self._ukv.layer_v_offset_in_page(layer_id, page_size))

    def get_dtype(self) -> torch.dtype:
        """The store dtype."""
        return self.store_dtype


@dataclass(frozen=True, kw_only=True)
class MambaSubPoolSpec(SubPoolSpec):
    """One request's recurrent state (conv states and a temporal state) per slot."""

    conv_state_shapes: tuple[tuple[int, ...], ...]
    conv_dtype: torch.dtype
    temporal_state_shape: tuple[int, ...]
    temporal_dtype: torch.dtype
    _ukv: MambaSpec = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_common(self.name, self.layer_num, self.grow_direction)
        try:
            spec = MambaSpec(
                self.name,
                layer_num=self.layer_num,
                conv_shapes=tuple(tuple(int(x) for x in s) for s in self.conv_state_shapes),
                conv_dtype=self.conv_dtype,
                temporal_shape=tuple(int(x) for x in self.temporal_state_shape),
                temporal_dtype=self.temporal_dtype,
                grow=cast(Any, self.grow_direction),
            )
        except (PoolConfigError, TypeError) as exc:
            raise SGLangConfigError(str(exc)) from exc
        object.__setattr__(self, "_ukv", spec)

    def to_ukv(self) -> MambaSpec:
        """The ukv spec of the same geometry."""
        return self._ukv

    def entry_bytes(self) -> int:
        """Bytes of one state slot across all layers."""
        return int(self._ukv.entry_bytes)

    def get_dtype(self) -> torch.dtype:
        """The temporal (dominant) state's dtype."""
        return self.temporal_dtype
