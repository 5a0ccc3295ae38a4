"""A pool's geometry as int64 words: what every rank's pool must share to run in lockstep.

Ranks of one tensor-parallel group hold different heads of the same layers, so their
bytes differ, but the bookkeeping must be identical: the same page sizes, page counts,
table lengths and byte budget. :func:`pool_words` writes that down from a pool;
a follower, which has no core, builds its buffer and tables from the leader's words and
checks its own specs against them (:func:`spec_mismatch`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ukv.specs import Spec

if TYPE_CHECKING:
    from ukv.pool import UnifiedKVPool

__all__ = ["HEAD_WORDS", "POOL_WORDS", "WORDS", "Geometry", "pool_words", "spec_mismatch"]

MAX_POOLS = 3
HEAD_WORDS = 8
"""Global words: number of sub-pools, total bytes, lazy, reserved floor, move order (3),
page size."""
POOL_WORDS = 8
"""Per sub-pool: entry bytes, page size, page bytes, pages, first page, virtual pages,
v2p rows, p2v rows."""
WORDS = HEAD_WORDS + MAX_POOLS * POOL_WORDS


@dataclass(frozen=True)
class Geometry:
    """Decoded geometry words.

    Attributes:
        total_bytes: The byte budget.
        lazy: Lazy compaction.
        page_size: The pool's KV page size.
        move_order: The order sub-pools' moves run in (the core's ``move_order()``).
        pools: Per sub-pool, the :data:`POOL_WORDS` values (entry bytes, page size,
            page bytes, pages, first page, virtual pages, v2p rows, p2v rows).
    """

    total_bytes: int
    lazy: bool
    page_size: int
    move_order: tuple[int, ...]
    pools: tuple[tuple[int, ...], ...]

    @classmethod
    def read(cls, words: np.ndarray) -> Geometry:
        """Decode :func:`pool_words`' output."""
        n = int(words[0])
        pools = tuple(
            tuple(int(x) for x in words[HEAD_WORDS + POOL_WORDS * i :][:POOL_WORDS])
            for i in range(n)
        )
        order = tuple(int(x) for x in words[4 : 4 + n])
        return cls(int(words[1]), bool(words[2]), int(words[7]), order, pools)

    def table_len(self, i: int) -> int:
        """Rows of ``[v2p | p2v]`` of sub-pool ``i``."""
        return self.pools[i][6] + self.pools[i][7]


def pool_words(pool: UnifiedKVPool) -> np.ndarray:
    """The geometry of ``pool`` as :data:`WORDS` int64 words."""
    arena = pool._runtime.arena
    n = arena.num_pools()
    out = np.full(WORDS, -1, dtype=np.int64)
    order = list(arena.move_order())
    out[:4] = (n, pool.total_bytes, int(pool.lazy), arena.reserved_floor())
    out[4 : 4 + len(order)] = order
    out[7] = pool.page_size
    for i in range(n):
        info = arena.pool_info(i)
        t = pool._runtime.tables[i]
        out[HEAD_WORDS + POOL_WORDS * i :][:POOL_WORDS] = [
            info["entry_bytes"],
            info["page_size"],
            info["page_bytes"],
            info["num_pages"],
            info["min_page_index"],
            info["num_virtual_pages"],
            t.v2p.numel(),
            t.p2v.numel(),
        ]
    return out


def spec_mismatch(geo: Geometry, specs: Sequence[Spec]) -> str | None:
    """Why ``specs`` cannot follow a pool of geometry ``geo`` (None if they can)."""
    if len(specs) != len(geo.pools):
        return f"{len(specs)} specs, the leader's pool has {len(geo.pools)} sub-pools"
    for i, (spec, words) in enumerate(zip(specs, geo.pools)):
        mine = (spec.entry_bytes, spec.effective_page_size(geo.page_size))
        if mine != words[:2]:
            return (
                f"sub-pool {i} ({spec.name!r}): entry_bytes, page_size {mine} but the "
                f"leader's are {words[:2]}"
            )
    return None
