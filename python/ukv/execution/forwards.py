"""Forwards in flight, as the caller reports them (lazy mode's hazards).

A forward launched on another stream may still read pages a flush vacates, and writes the
KV of its new tokens (``out_cache_loc``) and the recurrent state of every request in its
batch in place. The caller reports each forward with an event that completes when it ends;
until then:

* its vacated pages stay parked in the core (per completion token);
* a non-urgent flush moves none of the pages **any** unretired forward writes (the union
  of their write sets: overlap scheduling keeps two forwards in flight);
* a non-urgent flush moves no state slot at all (nothing says which slots a forward
  updates, and it updates them in place).

Write sets given as GPU ids land on the host asynchronously; a flush that finds one still
in flight leaves the KV sub-pools alone rather than wait. Host ids are copied at report
time, so a caller may refill its staging tensor at once.
"""

from __future__ import annotations

import itertools
from typing import Any

import torch

from ukv._convert import host_ids
from ukv.execution.deferred import LandingIds


class Forwards:
    """Completion events and write sets of the forwards a pool was told about."""

    def __init__(self) -> None:
        self.events: dict[int, Any] = {}
        self.write_locs: dict[int, LandingIds] = {}
        self._tokens = itertools.count(1)

    def __bool__(self) -> bool:
        """Whether any reported forward has not been retired yet."""
        return bool(self.events)

    def report(self, event: Any, writes: LandingIds | None) -> int:
        """Record a forward; returns its completion token."""
        token = next(self._tokens)
        self.events[token] = event
        if writes is not None:
            self.write_locs[token] = writes
        return token

    @staticmethod
    def landing(ids: torch.Tensor, ring: Any) -> LandingIds:
        """``out_cache_loc`` as a landing: staged from the GPU, or a private host copy."""
        if ids.is_cuda and ring is not None:
            return LandingIds.stage(ring, ids)
        return LandingIds.ready(host_ids("out_cache_loc", ids).copy())

    def retire(self, arena: Any) -> None:
        """Tell the core (``arena``; None: no core, as on a tensor-parallel follower)
        about completed forwards, in report order: a forward is retired
        only once every earlier one has completed too. (Its vacated pages are parked
        under the newest token; retiring a later forward first would hand them out while
        an earlier one still reads them, and drop the newest token the core waits on.)"""
        if not self.events:
            return
        for token, event in list(self.events.items()):  # dicts keep report order
            if not event.query():
                return
            if arena is not None:
                arena.retire_token(token)
            del self.events[token]
            landing = self.write_locs.pop(token, None)
            if landing is not None:
                landing.release()

    def hand_write_sets(self, arena: Any, paged: list[int]) -> bool:
        """Give the core every write set that has landed; True when one is still in
        flight (the KV sub-pools must not be flushed non-urgently then)."""
        blocked = False
        for token, landing in list(self.write_locs.items()):
            if not landing.landed():
                blocked = True
                continue
            ids = landing.take()
            for i in paged:
                arena.set_inflight_writes(i, token, ids)
            del self.write_locs[token]
        return blocked

    def wait(self, tokens: list[int]) -> None:
        """Make the current stream wait for (or, for host events, wait on) these forwards
        and every unretired one reported before them (a forward on another stream may
        complete out of order)."""
        if not tokens:
            return
        last = max(tokens)
        for token, event in list(self.events.items()):
            if token > last:
                break
            if isinstance(event, torch.cuda.Event):
                torch.cuda.current_stream().wait_event(event)
            elif hasattr(event, "synchronize"):
                event.synchronize()

    def in_segment(self, seg: int) -> list[LandingIds]:
        """Write sets whose ids land in staging segment ``seg``."""
        return [w for w in self.write_locs.values() if w.segment == seg]
