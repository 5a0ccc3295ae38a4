"""Attention KV geometry of one group of layers (full or sliding-window).

Per token and per layer an attention layer caches one K row of ``num_kv_heads * head_dim``
elements and one V row of ``num_kv_heads * v_head_dim`` elements, so

    bytes_per_token = num_layers * num_kv_heads * (head_dim + v_head_dim) * itemsize

which is exactly :attr:`ukv.MHASpec.entry_bytes` of the spec :meth:`AttentionShape.spec`
builds. A sliding-window group keeps at most ``window`` tokens per request; a chunked group
(Llama 4's ``attention_chunk_size``) keeps at most one chunk, modelled as a window of the
chunk's length (the most it ever holds). Multi-head latent attention (MLA, ``kv_lora_rank``
set) caches one latent row of ``kv_lora_rank + qk_rope_head_dim`` elements per token and
layer, which every tensor-parallel rank keeps whole:

    bytes_per_token = num_layers * (kv_lora_rank + head_dim) * itemsize   (head_dim = rope part)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from ukv.errors import PoolConfigError
from ukv.models.sharding import shard_evenly, shard_kv_heads
from ukv.specs import SUPPORTED_DTYPES, GrowDirection, MHASpec, MLASpec, store_dtype_for

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
        num_q_heads: Query heads per layer (unsharded count on an unsharded shape); only
            checked when sharding (engines refuse a ``tp_size`` that does not divide them).
            None: unknown, not checked.
        chunked: The window is an attention chunk (Llama 4): a request holds at most one
            chunk of tokens, never more than ``window``.
        kv_lora_rank: MLA latent width; None for ordinary attention. With it set,
            ``num_kv_heads`` must be 1 and ``head_dim`` is ``qk_rope_head_dim``.

    Raises:
        PoolConfigError: A field is invalid; the message names it and the value.
    """

    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype = torch.bfloat16
    v_head_dim: int | None = None
    window: int | None = None
    num_q_heads: int | None = None
    chunked: bool = False
    kv_lora_rank: int | None = None

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
        for field in ("num_q_heads", "kv_lora_rank"):
            if getattr(self, field) is not None:
                object.__setattr__(
                    self, field, check_positive("attention", field, getattr(self, field))
                )
        if not isinstance(self.chunked, bool) or (self.chunked and self.window is None):
            raise PoolConfigError(
                f"attention chunked must be a bool and needs a window (the chunk), "
                f"got chunked={self.chunked!r}, window={self.window!r}"
            )
        if self.kv_lora_rank is not None and self.num_kv_heads != 1:
            raise PoolConfigError(
                f"attention with kv_lora_rank (MLA) caches one latent row: num_kv_heads must "
                f"be 1, got {self.num_kv_heads!r}"
            )

    @property
    def is_mla(self) -> bool:
        """Whether this is multi-head latent attention (``kv_lora_rank`` set)."""
        return self.kv_lora_rank is not None

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
            ``num_layers * num_kv_heads * (head_dim + v_head_dim) * itemsize``; for MLA
            ``num_layers * (kv_lora_rank + head_dim) * itemsize``.
        """
        if self.kv_lora_rank is not None:
            return self.num_layers * (self.kv_lora_rank + self.head_dim) * self.itemsize
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
            are replicated (``num_kv_heads < tp_size``); an MLA latent is kept whole.
            Query heads, when known, are split too.

        Raises:
            PoolConfigError: ``tp_size`` does not divide the query heads, or the KV heads
                can be neither split nor replicated evenly.
        """
        q_heads = self.num_q_heads
        if q_heads is not None:
            q_heads = shard_evenly(q_heads, tp_size, "num_attention_heads (query heads)")
        kv_heads = (
            self.num_kv_heads
            if self.kv_lora_rank is not None
            else shard_kv_heads(self.num_kv_heads, tp_size)
        )
        return dataclasses.replace(self, num_kv_heads=kv_heads, num_q_heads=q_heads)

    def spec(self, name: str, grow: GrowDirection) -> MHASpec | MLASpec:
        """The pool spec of this group.

        Args:
            name: Sub-pool name.
            grow: ``"up"`` or ``"down"``.

        Returns:
            An :class:`ukv.MHASpec` (an :class:`ukv.MLASpec` for MLA) whose
            ``entry_bytes`` equals :meth:`bytes_per_token`.

        Raises:
            PoolConfigError: ``name`` or ``grow`` is invalid.
        """
        if self.kv_lora_rank is not None:
            return MLASpec(
                name=name,
                layer_num=self.num_layers,
                kv_lora_rank=self.kv_lora_rank,
                qk_rope_head_dim=self.head_dim,
                dtype=self.dtype,
                grow=grow,
            )
        return MHASpec(
            name=name,
            layer_num=self.num_layers,
            head_num=self.num_kv_heads,
            head_dim=self.head_dim,
            dtype=self.dtype,
            v_head_dim=self.value_head_dim,
            grow=grow,
        )
