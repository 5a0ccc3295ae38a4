"""Layer patterns: which decoder layer holds which kind of cache.

A hybrid config says where its attention layers are in one of a few ways (an explicit
``layer_types`` list, a Nemotron-H pattern string, a period and an offset, an interval).
Each is decoded here into one tuple of :data:`LayerKind`, indexed by decoder layer, so the
rest of :mod:`ukv.models` never sees the config's own spelling.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from ukv.errors import PoolConfigError

__all__ = [
    "LAYER_KINDS",
    "LayerKind",
    "cache_layers",
    "count",
    "every_nth",
    "from_layer_types",
    "from_nemotron_pattern",
    "indices",
]

LayerKind = Literal["full", "mamba", "swa", "none", "full+mamba"]
"""Cache kind of one decoder layer: full attention, recurrent state (Mamba1, Mamba2,
Gated-DeltaNet, lightning, KDA or short conv), sliding-window or chunked attention, no cache
at all (an MLP / MoE-only layer), or attention and a state mixer side by side in one layer
(Falcon-H1's parallel layers, Zamba2's hybrid layers): such a layer holds both caches."""

LAYER_KINDS: tuple[LayerKind, ...] = ("full", "mamba", "swa", "none", "full+mamba")

NEMOTRON_PATTERN_KINDS: Mapping[str, LayerKind] = {
    "*": "full",  # self-attention
    "M": "mamba",  # Mamba2 mixer
    "-": "none",  # MLP
    "E": "none",  # mixture-of-experts MLP (Nemotron 3)
}
"""Characters of a Nemotron-H ``hybrid_override_pattern``."""


def every_nth(
    num_layers: int, period: int, offset: int, hit: LayerKind, other: LayerKind
) -> tuple[LayerKind, ...]:
    """Layers whose index is ``offset`` modulo ``period`` get ``hit``, the rest ``other``.

    Jamba puts attention at ``i % attn_layer_period == attn_layer_offset``; Qwen3-Next and
    Gemma 3 put full attention at ``(i + 1) % interval == 0``, i.e. offset ``interval - 1``.

    Args:
        num_layers: Decoder layers.
        period: Pattern period (``>= 1``).
        offset: Index of the ``hit`` layer inside each period, in ``[0, period)``.
        hit: Kind of the periodic layers.
        other: Kind of every other layer.

    Returns:
        One kind per decoder layer.

    Raises:
        PoolConfigError: ``period`` is not positive or ``offset`` is outside the period.
    """
    if period < 1 or not 0 <= offset < period:
        raise PoolConfigError(
            f"layer pattern needs period >= 1 and 0 <= offset < period, "
            f"got period {period}, offset {offset}"
        )
    return tuple(hit if i % period == offset else other for i in range(num_layers))


def from_layer_types(
    layer_types: Sequence[object], mapping: Mapping[str, LayerKind], key: str
) -> tuple[LayerKind, ...]:
    """Decode an explicit per-layer list such as ``["linear_attention", "full_attention"]``.

    Args:
        layer_types: The config's list, one entry per decoder layer.
        mapping: Config spelling -> kind, for this architecture.
        key: Config key the list came from, for the error message.

    Returns:
        One kind per decoder layer.

    Raises:
        PoolConfigError: An entry is not one of ``mapping``'s keys (the message names it and
            its index).
    """
    kinds: list[LayerKind] = []
    for i, entry in enumerate(layer_types):
        if not isinstance(entry, str) or entry not in mapping:
            accepted = ", ".join(repr(k) for k in sorted(mapping))
            raise PoolConfigError(f"{key}[{i}] is {entry!r}; expected one of {accepted}")
        kinds.append(mapping[entry])
    return tuple(kinds)


def from_nemotron_pattern(pattern: object) -> tuple[LayerKind, ...]:
    """Decode a Nemotron-H ``hybrid_override_pattern`` (one character per layer).

    Args:
        pattern: E.g. ``"M-M-M-MM-M*-..."``: ``M`` Mamba2, ``*`` attention, ``-`` MLP,
            ``E`` MoE.

    Returns:
        One kind per decoder layer.

    Raises:
        PoolConfigError: ``pattern`` is not a string or has an unknown character.
    """
    if not isinstance(pattern, str):
        raise PoolConfigError(f"hybrid_override_pattern must be a str, got {pattern!r}")
    return from_layer_types(list(pattern), NEMOTRON_PATTERN_KINDS, "hybrid_override_pattern")


def indices(kinds: Sequence[LayerKind], kind: LayerKind) -> tuple[int, ...]:
    """Decoder-layer indices of one kind, ascending (e.g. an engine's full-attention ids).

    Args:
        kinds: One kind per decoder layer.
        kind: The kind to look for.

    Returns:
        The indices ``i`` with ``kinds[i] == kind``.
    """
    return tuple(i for i, k in enumerate(kinds) if k == kind)


def count(kinds: Sequence[LayerKind], kind: LayerKind) -> int:
    """Number of decoder layers of one kind.

    Args:
        kinds: One kind per decoder layer.
        kind: The kind to count.

    Returns:
        ``len(indices(kinds, kind))``.
    """
    return sum(1 for k in kinds if k == kind)


def cache_layers(kinds: Sequence[LayerKind], cache: LayerKind) -> int:
    """Layers that hold one kind of cache: ``"full"`` and ``"mamba"`` also count the
    ``"full+mamba"`` layers, which hold both.

    Args:
        kinds: One kind per decoder layer.
        cache: ``"full"``, ``"mamba"`` or ``"swa"``.

    Returns:
        The number of layers holding that cache.
    """
    both = count(kinds, "full+mamba") if cache in ("full", "mamba") else 0
    return count(kinds, cache) + both
