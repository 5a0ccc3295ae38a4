"""``PoolStats`` / ``SubPoolStats``: a pool's occupancy and compaction counters.

:meth:`ukv.UnifiedKVPool.stats` returns one :class:`PoolStats`, a frozen snapshot read
from the core under the pool's lock (:func:`read`), so its fields are of one moment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["PoolStats", "SubPoolStats", "read", "summary"]


@dataclass(frozen=True)
class SubPoolStats:
    """Occupancy and compaction counters of one sub-pool."""

    name: str
    live_pages: int
    holes: int
    pending_pages: int
    span_pages: int
    used_bytes: int
    pages_moved: int
    bytes_moved: int
    compactions: int
    flushes: int


@dataclass(frozen=True)
class PoolStats:
    """A snapshot of the whole pool (``UnifiedKVPool.stats()``)."""

    total_bytes: int
    reserved_floor_bytes: int
    free_gap_bytes: int
    sub_pools: tuple[SubPoolStats, ...]
    inflight_frees: int = 0
    """Frees queued until their ids land on the host (and host-id frees behind them)."""
    gpu_waits: int = 0
    """Times a call had to wait for the GPU (an allocation needing in-flight frees, an
    urgent flush, ``sync_frees``, or staging memory the device was still reading)."""

    @property
    def pages_moved(self) -> int:
        """Pages moved by compaction so far, all sub-pools."""
        return sum(s.pages_moved for s in self.sub_pools)

    @property
    def bytes_moved(self) -> int:
        """Bytes moved by compaction so far, all sub-pools."""
        return sum(s.bytes_moved for s in self.sub_pools)

    @property
    def compactions(self) -> int:
        """Operations that moved at least one page, all sub-pools."""
        return sum(s.compactions for s in self.sub_pools)


def read(arena: Any, infos: list[dict], inflight_frees: int, gpu_waits: int) -> PoolStats:
    """The snapshot of a pool whose core is ``arena`` (call it under the pool's lock).

    Args:
        arena: The pool's ``ukv._core.Arena``.
        infos: ``arena.pool_info(i)`` of every sub-pool.
        inflight_frees: Frees queued, not applied yet.
        gpu_waits: Times a call waited for the GPU.
    """
    subs = []
    for i, info in enumerate(infos):
        _, live, holes, pending, span = arena.pool_state(i)
        moved, moved_bytes, compactions, flushes = arena.pool_stats(i)
        subs.append(
            SubPoolStats(
                name=info["name"],
                live_pages=live,
                holes=holes,
                pending_pages=pending,
                span_pages=span,
                used_bytes=span * info["page_bytes"],
                pages_moved=moved,
                bytes_moved=moved_bytes,
                compactions=compactions,
                flushes=flushes,
            )
        )
    return PoolStats(
        total_bytes=int(arena.total_bytes()),
        reserved_floor_bytes=int(arena.reserved_floor()),
        free_gap_bytes=int(arena.gap_bytes(0)),
        sub_pools=tuple(subs),
        inflight_frees=inflight_frees,
        gpu_waits=gpu_waits,
    )


def summary(device: Any, lazy: bool, arena: Any, specs: list[Any], infos: list[dict]) -> str:
    """One line describing a pool: size, floor, mode and each sub-pool's geometry."""
    parts = [
        f"{i['name']}({type(s).__name__}, grow={i['grow']}, entry={i['entry_bytes']}B, "
        f"page={i['page_size']}, pages={i['num_pages']}, first={i['min_page_index']})"
        for s, i in zip(specs, infos)
    ]
    return (
        f"ukv pool on {device}: {arena.total_bytes()} bytes, floor {arena.reserved_floor()}B, "
        f"{'lazy' if lazy else 'eager'}; " + "; ".join(parts)
    )
