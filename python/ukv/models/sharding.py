"""Tensor-parallel head sharding: how many heads or channels one rank holds.

The rules follow what serving engines (vLLM, SGLang) do when they split a layer over
``tp_size`` ranks, so a sharded shape's byte math matches what one GPU of such an engine
allocates:

* Query-side quantities (Mamba heads, ``d_inner``, Gated-DeltaNet value heads) are split
  evenly; a ``tp_size`` that does not divide them is refused.
* KV heads are split when there are at least ``tp_size`` of them, and replicated (one per
  rank) when there are fewer, provided ``tp_size`` is a multiple of their count.
* Mamba2 groups (and Gated-DeltaNet key heads, which play the same role) are split when
  ``tp_size`` divides them and replicated when there is exactly one; engines refuse every
  other count, and so does this module.

Every refusal is a :class:`ukv.PoolConfigError` that names the value and ``tp_size``.
"""

from __future__ import annotations

import numbers

from ukv.errors import PoolConfigError

__all__ = ["check_tp", "shard_evenly", "shard_groups", "shard_kv_heads"]


def _positive_int(value: object) -> int | None:
    """``value`` as a plain int if it is a (non-bool) integer ``>= 1``, else None."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        return None
    return int(value)


def check_tp(tp_size: object, tp_rank: object) -> tuple[int, int]:
    """Validate a tensor-parallel size and rank.

    Args:
        tp_size: Number of tensor-parallel ranks (``>= 1``).
        tp_rank: This rank, in ``[0, tp_size)``.

    Returns:
        ``(tp_size, tp_rank)`` as plain ints.

    Raises:
        PoolConfigError: ``tp_size`` is not a positive int, or ``tp_rank`` is out of range.
    """
    size = _positive_int(tp_size)
    if size is None:
        raise PoolConfigError(f"tp_size must be a positive int, got {tp_size!r}")
    rank = tp_rank if isinstance(tp_rank, numbers.Integral) else None
    if isinstance(tp_rank, bool) or rank is None or not 0 <= int(rank) < size:
        raise PoolConfigError(f"tp_rank must be in [0, {size}), got {tp_rank!r}")
    return size, int(rank)


def shard_evenly(value: int, tp_size: int, what: str) -> int:
    """Split a per-layer count evenly over the ranks.

    Args:
        value: The unsharded count (heads, channels).
        tp_size: Number of ranks.
        what: Name of the quantity, for the error message (e.g. ``"mamba num_heads"``).

    Returns:
        ``value // tp_size``.

    Raises:
        PoolConfigError: ``tp_size`` does not divide ``value``.
    """
    if value % tp_size:
        raise PoolConfigError(f"tp_size {tp_size} does not divide {what} {value}")
    return value // tp_size


def shard_kv_heads(num_kv_heads: int, tp_size: int) -> int:
    """KV heads one rank holds: split when there are enough, else replicated.

    Args:
        num_kv_heads: Unsharded KV heads of one layer.
        tp_size: Number of ranks.

    Returns:
        ``num_kv_heads // tp_size`` when ``num_kv_heads >= tp_size``, else 1 (each rank
        keeps a full copy of the one head its query heads read).

    Raises:
        PoolConfigError: ``num_kv_heads >= tp_size`` and ``tp_size`` does not divide it, or
            ``num_kv_heads < tp_size`` and is not a divisor of ``tp_size``.
    """
    if num_kv_heads >= tp_size:
        return shard_evenly(num_kv_heads, tp_size, "num_kv_heads")
    if tp_size % num_kv_heads:
        raise PoolConfigError(
            f"num_kv_heads {num_kv_heads} cannot be replicated over tp_size {tp_size}: "
            f"tp_size must be a multiple of it"
        )
    return 1


def shard_groups(num_groups: int, tp_size: int, what: str) -> int:
    """Mamba2 groups (or Gated-DeltaNet key heads) one rank holds.

    Args:
        num_groups: Unsharded group count of one layer.
        tp_size: Number of ranks.
        what: Name of the quantity, for the error message.

    Returns:
        ``num_groups // tp_size`` when ``tp_size`` divides it; 1 when ``num_groups == 1``
        (the single group is replicated on every rank).

    Raises:
        PoolConfigError: Neither rule applies (engines refuse such a split too).
    """
    if num_groups % tp_size == 0:
        return num_groups // tp_size
    if num_groups == 1:
        return 1
    raise PoolConfigError(
        f"tp_size {tp_size} does not divide {what} {num_groups} "
        f"(only a single group can be replicated across ranks)"
    )
