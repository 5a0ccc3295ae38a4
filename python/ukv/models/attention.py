"""Attention KV geometry of one group of layers (full or sliding-window).

Per token and per layer an attention layer caches one K row of ``num_kv_heads * head_dim``
elements and one V row of ``num_kv_heads * v_head_dim`` elements, so

    bytes_per_token = num_layers * num_kv_heads * (head_dim + v_head_dim) * itemsize

which is exactly :attr:`ukv.MHASpec.entry_bytes` of the spec :meth:`AttentionShape.spec`
builds. A sliding-window group keeps at most ``window`` tokens per request.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from ukv.errors import PoolConfigError
from ukv.models.sharding import shard_kv_heads
from ukv.specs import SUPPORTED_DTYPES, GrowDirection, MHASpec, store_dtype_for

__all__ = ["AttentionShape", "check_dtype", "check_positive"]


def check_positive(owner: str, field: str, value: object) -> int:
    """Validate a positive integer field of a model shape.

    Args:
        owner: What the field belongs to, for the message (e.g. ``"attention"``).
        field: Field name.
        value: Candidate value.

    Returns:
        ``value`` as a plain int.

    Raises:
        PoolConfigError: ``value`` is not an int ``>= 1`` (bools are rejected).
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PoolConfigError(f"{owner} {field} must be a positive int, got {value!r}")
    return int(value)


def check_dtype(owner: str, field: str, value: object) -> torch.dtype:
    """Validate a cache dtype field of a model shape.

    Args:
        owner: What the field belongs to, for the message.
        field: Field name.
        value: Candidate dtype.

    Returns:
        ``value``, a dtype the pool can store.

    Raises:
        PoolConfigError: ``value`` is not one of :data:`ukv.specs.SUPPORTED_DTYPES`.
    """
    if not isinstance(value, torch.dtype) or value not in SUPPORTED_DTYPES:
        names = sorted(str(d).removeprefix("torch.") for d in SUPPORTED_DTYPES)
        raise PoolConfigError(f"{owner} {field} must be one of {names}, got {value!r}")
    return value


@dataclass(frozen=True)
class AttentionShape:
    """KV cache of a group of attention layers that share one geometry.

    Args:
        num_layers: Attention layers in the group.
        num_kv_heads: KV heads per layer (after sharding, on a sharded shape).
        head_dim: K head dimension.
        dtype: KV cache dtype (fp8 is stored as one byte per element).
        v_head_dim: V head dimension; None means ``head_dim``. Always an int after
            construction.
        window: Sliding window in tokens; None for full attention.

    Raises:
        PoolConfigError: A field is invalid; the message names it and the value.
    """

    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype = torch.bfloat16
    v_head_dim: int | None = None
    window: int | None = None

    def __post_init__(self) -> None:
        for field in ("num_layers", "num_kv_heads", "head_dim"):
            object.__setattr__(
                self, field, check_positive("attention", field, getattr(self, field))
            )
        v_dim = self.head_dim if self.v_head_dim is None else self.v_head_dim
        object.__setattr__(self, "v_head_dim", check_positive("attention", "v_head_dim", v_dim))
        if self.window is not None:
            object.__setattr__(self, "window", check_positive("attention", "window", self.window))
        check_dtype("attention", "dtype", self.dtype)

    @property
    def value_head_dim(self) -> int:
        """``v_head_dim`` typed as ``int`` (it is never None after construction)."""
        assert self.v_head_dim is not None  # set by __post_init__
        return self.v_head_dim

    @property
    def itemsize(self) -> int:
        """Bytes per stored element (1 for fp8, which is stored as uint8)."""
        return store_dtype_for(self.dtype).itemsize

    def bytes_per_token(self) -> int:
        """Bytes one token costs across the group's layers (K and V).

        Returns:
            ``num_layers * num_kv_heads * (head_dim + v_head_dim) * itemsize``.
        """
        return (
            self.num_layers
            * self.num_kv_heads
            * (self.head_dim + self.value_head_dim)
            * self.itemsize
        )

    def sharded(self, tp_size: int) -> AttentionShape:
        """The group as one tensor-parallel rank holds it.

        Args:
            tp_size: Number of ranks (validated by the caller).

        Returns:
            A copy whose ``num_kv_heads`` is split over the ranks, or 1 when the heads
            are replicated (``num_kv_heads < tp_size``).

        Raises:
            PoolConfigError: The heads can be neither split nor replicated evenly.
        """
        return dataclasses.replace(self, num_kv_heads=shard_kv_heads(self.num_kv_heads, tp_size))

    def spec(self, name: str, grow: GrowDirection) -> MHASpec:
        """The pool spec of this group.

        Args:
            name: Sub-pool name.
            grow: ``"up"`` or ``"down"``.

        Returns:
            An :class:`ukv.MHASpec` whose ``entry_bytes`` equals :meth:`bytes_per_token`.

        Raises:
            PoolConfigError: ``name`` or ``grow`` is invalid.
        """
        return MHASpec(
            name=name,
            layer_num=self.num_layers,
            head_num=self.num_kv_heads,
            head_dim=self.head_dim,
            dtype=self.dtype,
            v_head_dim=self.value_head_dim,
            grow=grow,
        )
