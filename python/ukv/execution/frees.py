"""The one owner of frees a pool has accepted but not applied yet.

A free of ids on the GPU cannot be applied until its asynchronous copy to the host has
landed (:mod:`ukv.execution.deferred`). While such a free is queued, every later free of
the same **id space** (a sub-pool's own ids, or its owner's ids for a pool that binds
another's, e.g. the SWA side of a full + SWA pair) must wait behind it, whatever kind of
ids it names: a host-id free that overtook a queued device-id free of the same ids would
release them, the ids could come round to a new request, and the queued free would then
release the new owner's pages. So there is one FIFO per id space, and a host-id free
joins the FIFO of its space whenever that FIFO is not empty (it never waits for the GPU).

A queued free the core rejects (an id freed twice, an id that is not live) is not dropped:
its valid ids are freed, the rejected ones are named in a :class:`~ukv.errors.DeferredFreeError`
raised by the call that applied it (before that call did anything of its own) and kept in
:attr:`DeferredFrees.failures`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ukv.errors import DeferredFreeError, InvalidIdError
from ukv.execution.deferred import Deferred, LandingIds

MAX_FAILURES_KEPT = 64
"""Rejected queued frees remembered in :attr:`DeferredFrees.failures` (oldest dropped)."""


@dataclass(frozen=True)
class FailedFree:
    """A queued free that the core rejected when it was applied.

    Attributes:
        sub_pool: The sub-pool the free was issued on.
        ids: Every id of the free, in the order given.
        rejected: The ids that were not live (or repeated), so not freed.
        freed: The ids that were freed anyway.
        reason: The core's message for the first rejected id.
    """

    sub_pool: str
    ids: np.ndarray
    rejected: np.ndarray
    freed: np.ndarray
    reason: str


class DeferredFrees:
    """Queued frees and free-group boundaries, one FIFO per id space.

    Args:
        names: Sub-pool names, by index.
        spaces: ``spaces[i]``: the index of the sub-pool whose ids sub-pool ``i`` names
            (its owner, or ``i`` itself).
        live: ``live(i, ids) -> bool mask``: which ids are live on sub-pool ``i`` (used
            to salvage the valid part of a rejected free).
    """

    def __init__(
        self,
        names: list[str],
        spaces: list[int],
        live: Callable[[int, np.ndarray], np.ndarray],
    ) -> None:
        self._names = names
        self._spaces = spaces
        self._live = live
        self._queues: dict[int, deque[Deferred]] = {s: deque() for s in set(spaces)}
        self._frees = [0] * len(names)
        self._num_frees = 0  # sum(self._frees), kept so that counting all is O(1)
        self._count = 0
        self.group_open = [False] * len(names)
        """Whether a free group is open on each sub-pool, as the caller sees it (a
        boundary still queued counts as done)."""
        self.failures: deque[FailedFree] = deque(maxlen=MAX_FAILURES_KEPT)
        """Queued frees the core rejected, newest last."""
        self.waits = 0
        """Times settling had to wait for the GPU."""

    # ----- queries --------------------------------------------------------------------

    def __bool__(self) -> bool:
        return self._count > 0

    def __len__(self) -> int:
        return self._count

    def frees(self, pool: int | None = None) -> int:
        """Queued frees (of one sub-pool, or all; O(1))."""
        return self._num_frees if pool is None else self._frees[pool]

    def blocks(self, pool: int) -> bool:
        """Whether anything of ``pool``'s id space is queued (a free of it must queue too)."""
        return bool(self._queues[self._spaces[pool]])

    def space_frees(self, pool: int) -> int:
        """Queued frees in ``pool``'s id space (any sub-pool of it)."""
        space = self._spaces[pool]
        return sum(1 for e in self._queues[space] if e.kind == "free")

    def entries(self, pool: int | None = None) -> list[Deferred]:
        """Queued entries, oldest first: of ``pool``'s id space, or of every space (each
        space's FIFO in turn)."""
        if pool is not None:
            return list(self._queues[self._spaces[pool]])
        return [e for q in self._queues.values() for e in q]

    def space(self, pool: int) -> int:
        """The sub-pool whose ids ``pool`` names (its FIFO's key)."""
        return self._spaces[pool]

    def in_segment(self, seg: int) -> list[LandingIds]:
        """The queued landings whose ids land in staging segment ``seg``."""
        return [
            e.landing
            for q in self._queues.values()
            for e in q
            if e.landing is not None and e.landing.segment == seg
        ]

    # ----- queueing -------------------------------------------------------------------

    def push(self, entry: Deferred) -> None:
        """Queue an entry behind everything queued in its id space."""
        self._queues[self._spaces[entry.pool]].append(entry)
        self._count += 1
        if entry.kind == "free":
            self._frees[entry.pool] += 1
            self._num_frees += 1

    def push_host_free(
        self, pool: int, ids: np.ndarray, apply: Callable[[np.ndarray], None]
    ) -> None:
        """Queue a free of host ids behind its space's queued frees (a private copy)."""
        self.push(Deferred(pool, "free", LandingIds.ready(np.array(ids, copy=True)), apply))

    # ----- applying -------------------------------------------------------------------

    def settle(self, run: Callable[[Deferred, np.ndarray | None], None], wait: bool) -> None:
        """Apply queued entries whose ids have landed, in order within each id space;
        with ``wait``, all of them (waiting for the GPU if it must).

        ``run(entry, ids)`` applies one entry to the core and executes its plan.

        Raises:
            DeferredFreeError: a queued free was rejected by the core; its valid ids
                were freed, everything else queued was applied as usual.
        """
        failed: list[FailedFree] = []
        for q in self._queues.values():
            while q:
                entry = q[0]
                if not entry.landed():
                    if not wait:
                        break
                    self.waits += 1
                    entry.wait()
                q.popleft()
                self._count -= 1
                if entry.kind == "free":
                    self._frees[entry.pool] -= 1
                    self._num_frees -= 1
                ids = entry.landing.take() if entry.landing is not None else None
                try:
                    run(entry, ids)
                except InvalidIdError as exc:  # the core refused the ids (a double free)
                    if entry.kind != "free" or ids is None:
                        raise
                    failed.append(self._salvage(entry, ids, exc, run))
        if failed:
            self.failures.extend(failed)
            raise DeferredFreeError.of(failed)

    def _salvage(
        self,
        entry: Deferred,
        ids: np.ndarray,
        exc: InvalidIdError,
        run: Callable[[Deferred, np.ndarray | None], None],
    ) -> FailedFree:
        """Free the live ids of a rejected free (each once) and describe the rest."""
        wide = ids.astype(np.int64, copy=False)
        ok = self._live(entry.pool, wide)
        # Keep the first occurrence of each id: a repeat is a double free of its own.
        _, first = np.unique(wide, return_index=True)
        once = np.zeros(wide.shape, dtype=bool)
        once[first] = True
        ok &= once
        freed = wide[ok]
        if freed.size:
            try:
                run(entry, np.ascontiguousarray(freed))
            except InvalidIdError:
                freed = freed[:0]
        rejected = wide[~ok] if freed.size else wide
        return FailedFree(
            self._names[entry.pool], wide.copy(), rejected.copy(), freed.copy(), str(exc)
        )
