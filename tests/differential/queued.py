"""Frees of device ids, as the differential test issues them: the ONE place that knows
how the pool queues them (retarget it when the deferred-free machinery moves).

A CPU pool has no device ids, so a queued free is simulated exactly as
``UnifiedKVPool._free_device_ids`` queues one (review-round3.md): a ``Deferred(index,
"free", LandingIds(ids, event), apply)`` pushed on ``pool._deferred``, with a stand-in
event the driver completes at a later step. On a CUDA pool the ids are put on the pool's
GPU and freed through the public call; their landing is the GPU's business.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ukv.execution.deferred import Deferred, LandingIds


class StandInEvent:
    """An event whose completion the driver decides. ``on_done`` runs once, when it
    completes (by the driver, or by the pool synchronizing on it)."""

    def __init__(self, on_done: Callable[[], None] | None = None) -> None:
        self.done = False
        self.on_done = on_done

    def query(self) -> bool:
        return self.done

    def synchronize(self) -> None:
        self.complete()

    def complete(self) -> None:
        if not self.done:
            self.done = True
            if self.on_done is not None:
                self.on_done()


@dataclass
class Ticket:
    """One queued free: what it frees, and the queue entry that carries it."""

    index: int
    ids: np.ndarray
    swa: bool
    entry: Any
    event: StandInEvent | None
    meta: dict = field(default_factory=dict)


class QueuedFrees:
    """Queue frees of device ids on ``pool`` and follow them until the pool applies them."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self.real = pool.device.type == "cuda"
        self.tickets: list[Ticket] = []

    def free(self, alloc: Any, ids: np.ndarray, *, swa: bool = False) -> Ticket | None:
        """Free ``ids`` of ``alloc`` (``free_swa`` with ``swa``) as device ids."""
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        if ids.size == 0:
            return None
        pool = self.pool
        q = pool._deferred._q
        before = q[-1] if q else None
        event = None
        if self.real:
            dev = torch.from_numpy(ids).to(pool.device)
            (alloc.free_swa if swa else alloc.free)(dev)
            entry = q[-1] if q and q[-1] is not before else None
        else:
            event = StandInEvent()
            apply = alloc._core_free_swa if swa else alloc._core_free
            entry = Deferred(alloc._index, "free", LandingIds(ids.copy(), event), apply)
            with pool.lock:
                pool._check_usable()
                pool._deferred.push(entry)
        if entry is None:  # applied at once (CUDA: already landed and settled)
            return None
        t = Ticket(alloc._index, ids, swa, entry, event)
        self.tickets.append(t)
        return t

    def unlanded(self) -> list[Ticket]:
        """Queued frees whose ids have not landed (stand-in events only)."""
        return [t for t in self.tickets if t.event is not None and not t.event.done]

    def land(self, ticket: Ticket) -> None:
        """The ids of ``ticket`` land on the host (a no-op on a real GPU)."""
        if ticket.event is not None:
            ticket.event.complete()

    def settled(self) -> list[Ticket]:
        """Tickets the pool has applied since the last call, oldest first. They must
        leave the queue in call order (a prefix of the tickets)."""
        queued = {id(e) for e in self.pool._deferred._q}
        gone = [id(t.entry) not in queued for t in self.tickets]
        n = 0
        while n < len(gone) and gone[n]:
            n += 1
        assert not any(gone[n:]), (
            f"queued frees applied out of call order: {[t.ids.tolist() for t in self.tickets]}"
            f", applied {gone}"
        )
        done, self.tickets = self.tickets[:n], self.tickets[n:]
        return done

    def boundary_queued(self) -> bool:
        """Whether a free-group boundary waits in the queue behind frees (the core's
        group is then still open although the caller closed it)."""
        return any(e.kind != "free" for e in self.pool._deferred._q)

    def inflight(self) -> int:
        """Frees the pool reports still in flight (read without settling anything)."""
        return int(self.pool._deferred.frees())
