"""Recurrent state geometry: what one request's Mamba / linear-attention state costs.

A state layer keeps, per request, a short convolution window and one temporal (SSM) state;
neither grows with the sequence. Three mixers are modelled, each with its own formula
(shapes are per layer; conv shapes are ``(channels, d_conv - 1)`` as SGLang lays them out,
and :class:`ukv.MambaSpec` only multiplies them, so the orientation changes no byte):

* **Mamba1** (Jamba): the conv sees the ``d_inner`` expanded channels; the SSM state holds
  ``d_state`` values per channel.

  - conv ``(d_inner, d_conv - 1)``
  - temporal ``(d_inner, d_state)``

* **Mamba2** (Nemotron-H, Granite-4.0-H): the conv sees x, B and C together, i.e.
  ``heads*head_dim`` channels of x plus ``groups*d_state`` channels each of B and C; the
  SSM state is ``head_dim x d_state`` per head.

  - conv ``(heads*head_dim + 2*groups*d_state, d_conv - 1)``
  - temporal ``(heads, head_dim, d_state)``

* **Gated-DeltaNet** (Qwen3-Next): the conv sees q and k (``Hk*dk`` each) and v
  (``Hv*dv``); the state is a ``dk x dv`` matrix per value head.

  - conv ``(2*Hk*dk + Hv*dv, k - 1)``
  - temporal ``(Hv, dk, dv)`` (SGLang stores the last two transposed; same bytes)

* **Lightning attention** (MiniMax-Text-01): no conv; a ``dk x dk`` state per head.

  - temporal ``(heads, head_dim, head_dim)``

* **Kimi Delta Attention** (Kimi-Linear): the conv sees q, k and v (``heads*head_dim``
  each; SGLang keeps three tensors, vLLM one of the summed width: same bytes); a
  ``head_dim x head_dim`` state per head, always fp32.

  - conv ``(3*heads*head_dim, k - 1)``
  - temporal ``(heads, head_dim, head_dim)``

* **Short convolution** (LFM2): the conv window is the whole state.

  - conv ``(channels, L_cache - 1)``, no temporal state

Per request: ``num_layers * (prod(conv) * conv_itemsize + prod(temporal) * temporal_itemsize)``,
which is exactly :attr:`ukv.MambaSpec.entry_bytes` of the spec :meth:`StateShape.spec`
builds. Conv state is kept in the model dtype and the SSM state in fp32 by default (engines
accumulate the recurrence in fp32).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch

from ukv.errors import PoolConfigError
from ukv.models.attention import check_dtype, check_positive
from ukv.models.sharding import shard_evenly, shard_groups
from ukv.specs import GrowDirection, MambaSpec, store_dtype_for

__all__ = [
    "GatedDeltaNetMixer",
    "KDAMixer",
    "LightningMixer",
    "Mamba1Mixer",
    "Mamba2Mixer",
    "Mixer",
    "MixerKind",
    "ShortConvMixer",
    "StateShape",
]

MixerKind = Literal["mamba1", "mamba2", "gated_deltanet", "lightning", "kda", "short_conv"]


def _validate_positive(obj: object, owner: str) -> None:
    """Check and normalise every field of a mixer dataclass (all are positive ints)."""
    for field in dataclasses.fields(obj):  # type: ignore[arg-type]
        value = check_positive(owner, field.name, getattr(obj, field.name))
        object.__setattr__(obj, field.name, value)


@dataclass(frozen=True)
class Mamba1Mixer:
    """Mamba (v1) selective-scan layer, as in Jamba.

    Args:
        d_inner: Expanded channels (``mamba_expand * hidden_size``; per rank when sharded).
        d_state: SSM state size per channel.
        d_conv: Convolution kernel width.

    Raises:
        PoolConfigError: A field is not a positive int.
    """

    kind: ClassVar[MixerKind] = "mamba1"

    d_inner: int
    d_state: int
    d_conv: int

    def __post_init__(self) -> None:
        _validate_positive(self, "mamba1")

    @property
    def conv_shapes(self) -> tuple[tuple[int, ...], ...]:
        """``((d_inner, d_conv - 1),)``."""
        return ((self.d_inner, self.d_conv - 1),)

    @property
    def temporal_shape(self) -> tuple[int, ...]:
        """``(d_inner, d_state)``."""
        return (self.d_inner, self.d_state)

    def sharded(self, tp_size: int) -> Mamba1Mixer:
        """One rank's share: ``d_inner`` split evenly.

        Raises:
            PoolConfigError: ``tp_size`` does not divide ``d_inner``.
        """
        return dataclasses.replace(
            self, d_inner=shard_evenly(self.d_inner, tp_size, "mamba d_inner")
        )


@dataclass(frozen=True)
class Mamba2Mixer:
    """Mamba2 (SSD) layer, as in Nemotron-H and Granite-4.0-H.

    Args:
        num_heads: SSM heads (per rank when sharded).
        head_dim: Channels per head.
        num_groups: B/C groups (per rank when sharded).
        d_state: SSM state size.
        d_conv: Convolution kernel width.

    Raises:
        PoolConfigError: A field is not a positive int.
    """

    kind: ClassVar[MixerKind] = "mamba2"

    num_heads: int
    head_dim: int
    num_groups: int
    d_state: int
    d_conv: int

    def __post_init__(self) -> None:
        _validate_positive(self, "mamba2")

    @property
    def conv_dim(self) -> int:
        """Conv channels: ``num_heads * head_dim + 2 * num_groups * d_state`` (x, B, C)."""
        return self.num_heads * self.head_dim + 2 * self.num_groups * self.d_state

    @property
    def conv_shapes(self) -> tuple[tuple[int, ...], ...]:
        """``((conv_dim, d_conv - 1),)``."""
        return ((self.conv_dim, self.d_conv - 1),)

    @property
    def temporal_shape(self) -> tuple[int, ...]:
        """``(num_heads, head_dim, d_state)``."""
        return (self.num_heads, self.head_dim, self.d_state)

    def sharded(self, tp_size: int) -> Mamba2Mixer:
        """One rank's share: heads split evenly, groups split or (one group) replicated.

        Raises:
            PoolConfigError: ``tp_size`` does not divide ``num_heads``, or the groups can
                be neither split nor replicated.
        """
        return dataclasses.replace(
            self,
            num_heads=shard_evenly(self.num_heads, tp_size, "mamba num_heads"),
            num_groups=shard_groups(self.num_groups, tp_size, "mamba num_groups"),
        )


@dataclass(frozen=True)
class GatedDeltaNetMixer:
    """Gated-DeltaNet linear-attention layer, as in Qwen3-Next.

    Args:
        num_k_heads: Query/key heads (``linear_num_key_heads``; per rank when sharded).
        num_v_heads: Value heads (``linear_num_value_heads``; per rank when sharded).
        head_k_dim: Key head dimension (``linear_key_head_dim``).
        head_v_dim: Value head dimension (``linear_value_head_dim``).
        conv_kernel: Convolution kernel width (``linear_conv_kernel_dim``).

    Raises:
        PoolConfigError: A field is not a positive int.
    """

    kind: ClassVar[MixerKind] = "gated_deltanet"

    num_k_heads: int
    num_v_heads: int
    head_k_dim: int
    head_v_dim: int
    conv_kernel: int

    def __post_init__(self) -> None:
        _validate_positive(self, "gated_deltanet")

    @property
    def conv_dim(self) -> int:
        """Conv channels: ``2 * num_k_heads * head_k_dim + num_v_heads * head_v_dim`` (q, k, v)."""
        return 2 * self.num_k_heads * self.head_k_dim + self.num_v_heads * self.head_v_dim

    @property
    def conv_shapes(self) -> tuple[tuple[int, ...], ...]:
        """``((conv_dim, conv_kernel - 1),)``."""
        return ((self.conv_dim, self.conv_kernel - 1),)

    @property
    def temporal_shape(self) -> tuple[int, ...]:
        """``(num_v_heads, head_k_dim, head_v_dim)``."""
        return (self.num_v_heads, self.head_k_dim, self.head_v_dim)

    def sharded(self, tp_size: int) -> GatedDeltaNetMixer:
        """One rank's share: value heads split evenly, key heads split or replicated.

        Key heads play the role of Mamba2 groups (engines build the layer's state from the
        same Mamba2 shape rule), so a single key head is replicated.

        Raises:
            PoolConfigError: ``tp_size`` does not divide ``num_v_heads``, or the key heads
                can be neither split nor replicated.
        """
        return dataclasses.replace(
            self,
            num_v_heads=shard_evenly(self.num_v_heads, tp_size, "linear num_v_heads"),
            num_k_heads=shard_groups(self.num_k_heads, tp_size, "linear num_k_heads"),
        )


@dataclass(frozen=True)
class LightningMixer:
    """Lightning (linear) attention layer, as in MiniMax-Text-01: no conv state.

    Args:
        num_heads: Heads (``num_attention_heads``; per rank when sharded).
        head_dim: Head dimension.

    Raises:
        PoolConfigError: A field is not a positive int.
    """

    kind: ClassVar[MixerKind] = "lightning"

    num_heads: int
    head_dim: int

    def __post_init__(self) -> None:
        _validate_positive(self, "lightning")

    @property
    def conv_shapes(self) -> tuple[tuple[int, ...], ...]:
        """``()``: lightning attention keeps no conv window."""
        return ()

    @property
    def temporal_shape(self) -> tuple[int, ...] | None:
        """``(num_heads, head_dim, head_dim)``."""
        return (self.num_heads, self.head_dim, self.head_dim)

    def sharded(self, tp_size: int) -> LightningMixer:
        """One rank's share: heads split evenly.

        Raises:
            PoolConfigError: ``tp_size`` does not divide ``num_heads``.
        """
        return dataclasses.replace(
            self, num_heads=shard_evenly(self.num_heads, tp_size, "lightning num_heads")
        )


@dataclass(frozen=True)
class KDAMixer:
    """Kimi Delta Attention layer, as in Kimi-Linear.

    Args:
        num_heads: Heads (``linear_attn_config.num_heads``; per rank when sharded).
        head_dim: Head dimension (q, k and v alike).
        conv_kernel: Short-convolution width (``short_conv_kernel_size``).

    Raises:
        PoolConfigError: A field is not a positive int.
    """

    kind: ClassVar[MixerKind] = "kda"

    num_heads: int
    head_dim: int
    conv_kernel: int

    def __post_init__(self) -> None:
        _validate_positive(self, "kda")

    @property
    def conv_shapes(self) -> tuple[tuple[int, ...], ...]:
        """``((3 * num_heads * head_dim, conv_kernel - 1),)`` (q, k and v together)."""
        return ((3 * self.num_heads * self.head_dim, self.conv_kernel - 1),)

    @property
    def temporal_shape(self) -> tuple[int, ...] | None:
        """``(num_heads, head_dim, head_dim)``."""
        return (self.num_heads, self.head_dim, self.head_dim)

    def sharded(self, tp_size: int) -> KDAMixer:
        """One rank's share: heads split evenly.

        Raises:
            PoolConfigError: ``tp_size`` does not divide ``num_heads``.
        """
        return dataclasses.replace(
            self, num_heads=shard_evenly(self.num_heads, tp_size, "kda num_heads")
        )


@dataclass(frozen=True)
class ShortConvMixer:
    """Gated short-convolution layer, as in LFM2: the conv window is the whole state.

    Args:
        channels: Conv channels (``hidden_size``; per rank when sharded).
        conv_kernel: Window (``conv_L_cache``); ``conv_kernel - 1`` past inputs are kept.

    Raises:
        PoolConfigError: A field is not a positive int, or ``conv_kernel`` is 1 (nothing
            would be kept).
    """

    kind: ClassVar[MixerKind] = "short_conv"

    channels: int
    conv_kernel: int

    def __post_init__(self) -> None:
        _validate_positive(self, "short_conv")
        if self.conv_kernel < 2:
            raise PoolConfigError(
                f"short_conv conv_kernel must be >= 2 (it keeps conv_kernel - 1 inputs), "
                f"got {self.conv_kernel}"
            )

    @property
    def conv_shapes(self) -> tuple[tuple[int, ...], ...]:
        """``((channels, conv_kernel - 1),)``."""
        return ((self.channels, self.conv_kernel - 1),)

    @property
    def temporal_shape(self) -> tuple[int, ...] | None:
        """None: a short convolution has no recurrent state."""
        return None

    def sharded(self, tp_size: int) -> ShortConvMixer:
        """One rank's share: channels split evenly.

        Raises:
            PoolConfigError: ``tp_size`` does not divide ``channels``.
        """
        return dataclasses.replace(
            self, channels=shard_evenly(self.channels, tp_size, "short_conv channels")
        )


Mixer = Mamba1Mixer | Mamba2Mixer | GatedDeltaNetMixer | LightningMixer | KDAMixer | ShortConvMixer
MIXER_TYPES = (
    Mamba1Mixer,
    Mamba2Mixer,
    GatedDeltaNetMixer,
    LightningMixer,
    KDAMixer,
    ShortConvMixer,
)


@dataclass(frozen=True)
class StateShape:
    """Per-request recurrent state of a model's state layers (all share one mixer).

    Args:
        num_layers: State layers.
        mixer: The layers' geometry (:class:`Mamba1Mixer`, :class:`Mamba2Mixer` or
            :class:`GatedDeltaNetMixer`).
        conv_dtype: Dtype of the conv state (the model dtype in engines).
        temporal_dtype: Dtype of the SSM state (fp32 unless the model says otherwise).

    Raises:
        PoolConfigError: A field is invalid; the message names it and the value.
    """

    num_layers: int
    mixer: Mixer
    conv_dtype: torch.dtype = torch.bfloat16
    temporal_dtype: torch.dtype = torch.float32

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "num_layers", check_positive("state", "num_layers", self.num_layers)
        )
        if not isinstance(self.mixer, MIXER_TYPES):
            names = ", ".join(t.__name__ for t in MIXER_TYPES)
            raise PoolConfigError(f"state mixer must be one of {names}, got {self.mixer!r}")
        check_dtype("state", "conv_dtype", self.conv_dtype)
        check_dtype("state", "temporal_dtype", self.temporal_dtype)

    @property
    def conv_shapes(self) -> tuple[tuple[int, ...], ...]:
        """Per-layer shapes of the conv state tensors."""
        return self.mixer.conv_shapes

    @property
    def temporal_shape(self) -> tuple[int, ...] | None:
        """Per-layer shape of the temporal (SSM) state; None for a short convolution."""
        return self.mixer.temporal_shape

    def bytes_per_layer(self) -> int:
        """Bytes of one request's state in one layer.

        Returns:
            ``sum(prod(conv) * conv_itemsize) + prod(temporal) * temporal_itemsize`` (no
            temporal term for a short convolution).
        """
        conv_item = store_dtype_for(self.conv_dtype).itemsize
        temporal_item = store_dtype_for(self.temporal_dtype).itemsize
        conv = sum(math.prod(shape) for shape in self.conv_shapes) * conv_item
        temporal = self.temporal_shape
        return conv + (0 if temporal is None else math.prod(temporal) * temporal_item)

    def bytes_per_request(self) -> int:
        """Bytes of one request's state across all state layers.

        Returns:
            ``num_layers * bytes_per_layer()``.
        """
        return self.num_layers * self.bytes_per_layer()

    def sharded(self, tp_size: int) -> StateShape:
        """The state as one tensor-parallel rank holds it (see the mixers' ``sharded``).

        Raises:
            PoolConfigError: The mixer cannot be split over ``tp_size`` ranks.
        """
        return dataclasses.replace(self, mixer=self.mixer.sharded(tp_size))

    def spec(self, name: str, grow: GrowDirection) -> MambaSpec:
        """The pool spec of this state.

        Args:
            name: Sub-pool name.
            grow: ``"up"`` or ``"down"``.

        Returns:
            A :class:`ukv.MambaSpec` whose ``entry_bytes`` equals :meth:`bytes_per_request`.
            Lightning attention has no conv tensor (``conv_shapes=()``); a short
            convolution's single conv window is the spec's one state tensor (given as
            ``temporal_shape`` in ``conv_dtype``, with ``conv_shapes=()``).

        Raises:
            PoolConfigError: ``name`` or ``grow`` is invalid, or the layout is misaligned.
        """
        conv_shapes, conv_dtype = self.conv_shapes, self.conv_dtype
        temporal, temporal_dtype = self.temporal_shape, self.temporal_dtype
        if temporal is None:  # short convolution: the conv window is the whole state
            (temporal,), temporal_dtype, conv_shapes = conv_shapes, conv_dtype, ()
        return MambaSpec(
            name=name,
            layer_num=self.num_layers,
            conv_shapes=conv_shapes,
            conv_dtype=conv_dtype,
            temporal_shape=temporal,
            temporal_dtype=temporal_dtype,
            grow=grow,
        )
