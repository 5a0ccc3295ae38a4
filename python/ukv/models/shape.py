"""The cache shape of a model: what a pool needs to know about it, nothing else.

A :class:`ModelShape` is full attention plus one other kind of cache: recurrent state
("mamba": Mamba1, Mamba2, Gated-DeltaNet, lightning, KDA or short-conv layers) or
sliding-window / chunked attention ("swa"); or a single kind of cache: full attention only
("full", e.g. Llama), recurrent state only ("state", e.g. Mamba-2), or sliding-window
attention only ("sliding", e.g. Mistral-7B-v0.1). A single-kind model has one sub-pool.
It answers the byte questions a serving engine asks (KV bytes per token, state bytes per
request, SWA bytes per token and per request), shards itself for tensor parallelism, and
builds the two :mod:`ukv.specs` a :class:`ukv.UnifiedKVPool` is made of: the full side
grows up from byte 0, the other side grows down from the top.
"""

from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass
from typing import Literal

import torch

from ukv.errors import ArgumentError, PoolConfigError
from ukv.models import layers
from ukv.models.attention import AttentionShape, check_dtype, check_positive
from ukv.models.layers import LAYER_KINDS, LayerKind
from ukv.models.sharding import check_tp
from ukv.models.state import StateShape
from ukv.specs import GrowDirection, MambaSpec, MHASpec, MLASpec

__all__ = ["FULL_GROW", "OTHER_GROW", "ModelKind", "ModelShape"]

ModelKind = Literal["mamba", "swa", "full", "state", "sliding"]
HYBRID_KINDS: tuple[ModelKind, ...] = ("mamba", "swa")
"""Kinds with two sub-pools (full attention plus state or sliding window)."""
SINGLE_KINDS: tuple[ModelKind, ...] = ("full", "state", "sliding")
"""Kinds with one kind of cache (one sub-pool)."""

FULL_GROW: GrowDirection = "up"
"""Growth direction of the full-attention sub-pool built by :meth:`ModelShape.specs`."""

OTHER_GROW: GrowDirection = "down"
"""Growth direction of the state / sliding-window sub-pool built by :meth:`ModelShape.specs`."""


@dataclass(frozen=True)
class ModelShape:
    """Cache geometry of one hybrid model (optionally one tensor-parallel rank of it).

    Args:
        name: Model name (a preset name, or what the config was read from).
        architecture: Hugging Face ``model_type`` (e.g. ``"qwen3_next"``).
        full: The full-attention layers (``window`` must be None); None for a model
            without any ("state" or "sliding").
        state: The recurrent-state layers; None for a model without any.
        swa: The sliding-window (or chunked) layers (``window`` set); None for a model
            without any. At most one of ``state`` and ``swa`` is set, and at least one of
            the three groups.
        layer_kinds: One :data:`~ukv.models.layers.LayerKind` per decoder layer, where the
            config gives the pattern; its counts must match the layer groups.
        tp_size: Tensor-parallel ranks this shape was divided over (1: unsharded).
        tp_rank: The rank this shape describes, in ``[0, tp_size)``.
        max_position_embeddings: The longest request the model serves (the config's
            ``max_position_embeddings``); None when unknown.
        model_dtype: The serving dtype (the dtype engines run the weights in, which
            the default cache dtypes follow).
        config_ssm_dtype: SSM-state dtype the config itself names
            (``mamba_ssm_cache_dtype`` / ``mamba_ssm_dtype``); None when it names none.

    Raises:
        PoolConfigError: A field is invalid or the groups disagree with ``layer_kinds``;
            the message names the field and the value.
    """

    name: str
    architecture: str
    full: AttentionShape | None
    state: StateShape | None = None
    swa: AttentionShape | None = None
    layer_kinds: tuple[LayerKind, ...] | None = None
    tp_size: int = 1
    tp_rank: int = 0
    max_position_embeddings: int | None = None
    model_dtype: torch.dtype = torch.bfloat16
    config_ssm_dtype: torch.dtype | None = None

    def __post_init__(self) -> None:
        for field in ("name", "architecture"):
            value = getattr(self, field)
            if not isinstance(value, str) or not value.strip():
                raise PoolConfigError(f"model {field} must be a non-empty str, got {value!r}")
        self._check_groups()
        self._check_layer_kinds()
        if self.max_position_embeddings is not None:
            object.__setattr__(
                self,
                "max_position_embeddings",
                check_positive("model", "max_position_embeddings", self.max_position_embeddings),
            )
        check_dtype("model", "model_dtype", self.model_dtype)
        if self.config_ssm_dtype is not None:
            check_dtype("model", "config_ssm_dtype", self.config_ssm_dtype)
        size, rank = check_tp(self.tp_size, self.tp_rank)
        object.__setattr__(self, "tp_size", size)
        object.__setattr__(self, "tp_rank", rank)

    def _check_groups(self) -> None:
        if self.full is not None and (
            not isinstance(self.full, AttentionShape) or self.full.window is not None
        ):
            raise PoolConfigError(
                f"model {self.name!r}: full must be an AttentionShape without a window, "
                f"got {self.full!r}"
            )
        if self.state is not None and self.swa is not None:
            raise PoolConfigError(
                f"model {self.name!r}: at most one of state and swa can be set, got "
                f"state={self.state!r}, swa={self.swa!r}"
            )
        if self.full is None and self.state is None and self.swa is None:
            raise PoolConfigError(f"model {self.name!r} has no cache: full, state and swa are None")
        if self.state is not None and not isinstance(self.state, StateShape):
            raise PoolConfigError(
                f"model {self.name!r}: state must be a StateShape, got {self.state!r}"
            )
        if self.swa is not None and (
            not isinstance(self.swa, AttentionShape) or self.swa.window is None
        ):
            raise PoolConfigError(
                f"model {self.name!r}: swa must be an AttentionShape with a window, "
                f"got {self.swa!r}"
            )

    def _check_layer_kinds(self) -> None:
        if self.layer_kinds is None:
            return
        kinds = tuple(self.layer_kinds) if isinstance(self.layer_kinds, (list, tuple)) else None
        if kinds is None or any(k not in LAYER_KINDS for k in kinds):
            raise PoolConfigError(
                f"model {self.name!r}: layer_kinds must be a tuple of {LAYER_KINDS}, "
                f"got {self.layer_kinds!r}"
            )
        object.__setattr__(self, "layer_kinds", kinds)
        expected = {
            "full": 0 if self.full is None else self.full.num_layers,
            "mamba": 0 if self.state is None else self.state.num_layers,
            "swa": 0 if self.swa is None else self.swa.num_layers,
        }
        for kind, num in expected.items():
            found = layers.cache_layers(kinds, kind)  # type: ignore[arg-type]
            if found != num:
                raise PoolConfigError(
                    f"model {self.name!r}: layer_kinds has {found} {kind!r} layers, "
                    f"but the {kind} group has {num}"
                )

    # -- what kind of hybrid ------------------------------------------------------------

    @property
    def kind(self) -> ModelKind:
        """``"mamba"`` (full attention + recurrent state), ``"swa"`` (full + sliding or
        chunked), or a single kind: ``"full"``, ``"state"`` or ``"sliding"``."""
        if self.full is None:
            return "state" if self.state is not None else "sliding"
        if self.state is not None:
            return "mamba"
        return "swa" if self.swa is not None else "full"

    @property
    def is_hybrid(self) -> bool:
        """Whether the model has two kinds of cache (two sub-pools)."""
        return self.kind in HYBRID_KINDS

    @property
    def other_name(self) -> str:
        """Default sub-pool name of the non-full side: ``"mamba"`` or ``"swa"`` (single-kind
        models: the name of their one sub-pool)."""
        return {"mamba": "mamba", "swa": "swa", "full": "full", "state": "mamba"}.get(
            self.kind, "swa"
        )

    def layer_ids(self, kind: LayerKind) -> tuple[int, ...]:
        """Decoder-layer indices of one kind (e.g. an engine's full-attention layer ids).

        Args:
            kind: ``"full"``, ``"mamba"``, ``"swa"`` or ``"none"``.

        Returns:
            Ascending indices.

        Raises:
            ArgumentError: ``kind`` is unknown, or this shape has no layer pattern.
        """
        if kind not in LAYER_KINDS:
            raise ArgumentError(f"layer kind must be one of {LAYER_KINDS}, got {kind!r}")
        if self.layer_kinds is None:
            raise ArgumentError(f"model {self.name!r} has no layer pattern (layer_kinds is None)")
        return layers.indices(self.layer_kinds, kind)

    # -- byte math ------------------------------------------------------------------------

    def kv_bytes_per_token(self) -> int:
        """Full-attention KV bytes of one token across all full layers (K and V).

        Returns:
            ``layers * kv_heads * (head_dim + v_head_dim) * itemsize`` of :attr:`full`
            (MLA: the latent row); 0 for a model without full attention.
        """
        return 0 if self.full is None else self.full.bytes_per_token()

    def state_bytes_per_request(self) -> int:
        """Recurrent-state bytes of one request across all state layers.

        Returns:
            :meth:`StateShape.bytes_per_request` of :attr:`state`.

        Raises:
            ArgumentError: This is an SWA model (it has no recurrent state).
        """
        return self._state().bytes_per_request()

    def swa_bytes_per_token(self) -> int:
        """Sliding-window KV bytes of one token across all SWA layers.

        Returns:
            ``layers * kv_heads * (head_dim + v_head_dim) * itemsize`` of :attr:`swa`.

        Raises:
            ArgumentError: This is a mamba model (it has no sliding-window layers).
        """
        return self._swa().bytes_per_token()

    def swa_bytes_per_request(self, num_tokens: int | None = None) -> int:
        """Sliding-window bytes one request holds: at most ``window`` tokens.

        Args:
            num_tokens: The request's length; None means a request at least one window
                long (the cap).

        Returns:
            ``min(num_tokens, window) * swa_bytes_per_token()``.

        Raises:
            ArgumentError: This is a mamba model, or ``num_tokens`` is negative.
        """
        swa = self._swa()
        assert swa.window is not None  # checked at construction
        tokens = swa.window if num_tokens is None else min(_tokens(num_tokens), swa.window)
        return tokens * swa.bytes_per_token()

    def request_bytes(self, num_tokens: int) -> int:
        """All cache bytes one request of ``num_tokens`` tokens holds.

        Args:
            num_tokens: The request's length (``>= 0``).

        Returns:
            ``num_tokens * kv_bytes_per_token()`` plus the state bytes (if any) and
            ``swa_bytes_per_request(num_tokens)`` (if any sliding layers).

        Raises:
            ArgumentError: ``num_tokens`` is negative or not an int.
        """
        tokens = _tokens(num_tokens)
        other = 0
        if self.state is not None:
            other = self.state_bytes_per_request()
        elif self.swa is not None:
            other = self.swa_bytes_per_request(tokens)
        return tokens * self.kv_bytes_per_token() + other

    def _state(self) -> StateShape:
        if self.state is None:
            raise ArgumentError(
                f"model {self.name!r} is a {self.kind!r} model: it has no recurrent state"
            )
        return self.state

    def _swa(self) -> AttentionShape:
        if self.swa is None:
            raise ArgumentError(
                f"model {self.name!r} is a {self.kind!r} model: it has no sliding-window layers"
            )
        return self.swa

    # -- derived shapes -------------------------------------------------------------------

    def sharded(self, tp_size: int, tp_rank: int = 0) -> ModelShape:
        """The cache one tensor-parallel rank holds.

        KV heads are split over the ranks (or replicated when there are fewer heads than
        ranks); Mamba heads, ``d_inner`` and conv channels are split; see
        :mod:`ukv.models.sharding`. Every rank holds the same shape.

        Args:
            tp_size: Number of ranks (``>= 1``).
            tp_rank: This rank, in ``[0, tp_size)``.

        Returns:
            A new shape with ``tp_size`` / ``tp_rank`` recorded.

        Raises:
            PoolConfigError: ``tp_size`` / ``tp_rank`` is invalid, this shape is already
                sharded, or a head or channel count does not divide (the message names it).
        """
        size, rank = check_tp(tp_size, tp_rank)
        if self.tp_size != 1:
            raise PoolConfigError(
                f"model {self.name!r} is already sharded (tp_size {self.tp_size}); "
                f"shard the unsharded shape instead"
            )
        return dataclasses.replace(
            self,
            full=None if self.full is None else self.full.sharded(size),
            state=None if self.state is None else self.state.sharded(size),
            swa=None if self.swa is None else self.swa.sharded(size),
            tp_size=size,
            tp_rank=rank,
        )

    def with_dtypes(
        self,
        *,
        kv: torch.dtype | None = None,
        conv: torch.dtype | None = None,
        temporal: torch.dtype | None = None,
    ) -> ModelShape:
        """The same model with other cache dtypes (e.g. an fp8 KV cache).

        Args:
            kv: KV dtype of the full (and sliding-window) layers; None keeps it.
            conv: Conv-state dtype; None keeps it. Only for mamba models.
            temporal: SSM-state dtype; None keeps it. Only for mamba models.

        Returns:
            A new shape.

        Raises:
            ArgumentError: ``conv`` or ``temporal`` given for a model without state.
            PoolConfigError: A dtype is not supported.
        """
        if self.state is None and (conv is not None or temporal is not None):
            raise ArgumentError(
                f"model {self.name!r} is a {self.kind!r} model: it has no state dtypes"
            )
        full = (
            self.full
            if (kv is None or self.full is None)
            else dataclasses.replace(self.full, dtype=kv)
        )
        swa = (
            self.swa
            if (kv is None or self.swa is None)
            else dataclasses.replace(self.swa, dtype=kv)
        )
        state = self.state
        if state is not None:
            state = dataclasses.replace(
                state,
                conv_dtype=state.conv_dtype if conv is None else conv,
                temporal_dtype=state.temporal_dtype if temporal is None else temporal,
            )
        return dataclasses.replace(self, full=full, swa=swa, state=state)

    def specs(
        self, names: tuple[str, str] | None = None
    ) -> tuple[MHASpec | MLASpec | MambaSpec, ...]:
        """The pool specs of this model: full attention grows up, the other side down.

        Args:
            names: ``(full_name, other_name)``; default ``("full", "mamba")`` or
                ``("full", "swa")``. A single-kind model uses the name of its kind's
                side (``full_name`` for "full", ``other_name`` otherwise).

        Returns:
            ``(MHASpec, MambaSpec)`` for a mamba model (``MLASpec`` first for MLA),
            ``(MHASpec, MHASpec)`` for an SWA model, one spec for a single-kind model;
            their ``entry_bytes`` equal :meth:`kv_bytes_per_token` and
            :meth:`state_bytes_per_request` / :meth:`swa_bytes_per_token`.

        Raises:
            PoolConfigError: ``names`` is not two distinct non-empty strings.
        """
        default = names is None
        full_name, other_name = self._spec_names(names)
        other: MHASpec | MLASpec | MambaSpec | None = None
        if self.state is not None:
            other = self.state.spec(other_name, OTHER_GROW)
        elif self.swa is not None:
            other = self.swa.spec(other_name if not default else "swa", OTHER_GROW)
        if self.full is None:
            assert other is not None  # checked at construction
            return (other,)
        full = self.full.spec(full_name, FULL_GROW)
        return (full,) if other is None else (full, other)

    def _spec_names(self, names: tuple[str, str] | None) -> tuple[str, str]:
        if names is None:
            return "full", self.other_name
        if (
            not isinstance(names, (tuple, list))
            or len(names) != 2
            or not all(isinstance(n, str) and n.strip() for n in names)
            or names[0] == names[1]
        ):
            raise PoolConfigError(
                f"spec names must be two distinct non-empty strings, got {names!r}"
            )
        return names[0], names[1]


def _tokens(num_tokens: object) -> int:
    """Validate a token count (an int ``>= 0``)."""
    if (
        isinstance(num_tokens, bool)
        or not isinstance(num_tokens, numbers.Integral)
        or num_tokens < 0
    ):
        raise ArgumentError(f"num_tokens must be an int >= 0, got {num_tokens!r}")
    return int(num_tokens)
