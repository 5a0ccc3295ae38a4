"""Frees of device ids, as the differential test issues them: the ONE place that knows
how the pool queues them (retarget it when the deferred-free machinery moves).

A CPU pool has no device ids, so a queued free is simulated exactly where a CUDA pool
queues one: ``PoolRuntime.queue_free(index, LandingIds(ids, event), apply)``, with a
stand-in event the driver completes at a later step. On a CUDA pool the ids are put on the pool's
GPU and freed through the public call; their landing is the GPU's business.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from standins import StandInEvent

from ukv.execution.deferred import LandingIds


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
        frees = pool._runtime.frees
        event = None
        if self.real:
            before = frees.entries(alloc._index)
            last = before[-1] if before else None
            dev = torch.from_numpy(ids).to(pool.device)
            (alloc.free_swa if swa else alloc.free)(dev)
            after = frees.entries(alloc._index)
            entry = after[-1] if after and after[-1] is not last else None
        else:
            event = StandInEvent()
            apply = alloc._core_free_swa if swa else alloc._core_free
            entry = pool._runtime.queue_free(alloc._index, LandingIds(ids.copy(), event), apply)
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
        """Tickets the pool has applied since the last call, oldest first. Within one id
        space they must leave the queue in call order (a prefix of that space's tickets);
        spaces are independent FIFOs."""
        frees = self.pool._runtime.frees
        queued = {id(e) for e in frees.entries()}
        done: list[Ticket] = []
        for space in {frees.space(t.index) for t in self.tickets}:
            mine = [t for t in self.tickets if frees.space(t.index) == space]
            gone = [id(t.entry) not in queued for t in mine]
            n = 0
            while n < len(gone) and gone[n]:
                n += 1
            assert not any(gone[n:]), (
                f"queued frees applied out of call order: {[t.ids.tolist() for t in mine]}"
                f", applied {gone}"
            )
            done += mine[:n]
        applied = {id(t) for t in done}
        done = [t for t in self.tickets if id(t) in applied]
        self.tickets = [t for t in self.tickets if id(t) not in applied]
        return done

    def boundary_queued(self) -> bool:
        """Whether a free-group boundary waits in the queue behind frees (the core's
        group is then still open although the caller closed it)."""
        return any(e.kind != "free" for e in self.pool._runtime.frees.entries())

    def inflight(self) -> int:
        """Frees the pool reports still in flight (read without settling anything)."""
        return int(self.pool._runtime.frees.frees())

    def queued_host_frees(self) -> int:
        """Host-id frees the pool queued behind queued frees of their id space (they
        never overtake them: review round 3, C3)."""
        mine = {id(t.entry) for t in self.tickets}
        entries = self.pool._runtime.frees.entries()
        return sum(1 for e in entries if e.kind == "free" and id(e) not in mine)
