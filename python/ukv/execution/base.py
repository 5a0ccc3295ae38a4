"""What every plan executor shares: reading the plan's flags, waits and table resets."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from ukv import _core
    from ukv._tables import DeviceTables
    from ukv.execution.continuation import DeviceLast

# Bits of ``Arena.plan_flags()``.
PLAN_WAITS, PLAN_MOVES, PLAN_RESETS, PLAN_ROWS = 1, 2, 4, 8


class Executor:
    """Executes the arena's last plan on one kind of device.

    Args:
        arena: The pool's native arena.
        tables: The pool's per-sub-pool tables.
        wait: Makes the current stream wait on in-flight forwards (by completion token).
        work_mask: The plan flags that mean work for this executor.
        inflight: Eager pools: the reported forwards not retired yet, by token (the
            runtime's own dict, read live). A plan that moves pages first waits on every
            one of them: a forward on another stream may still write the pages it moves
            (review round 4, F4). None for lazy pools, whose plans list their waits.
    """

    #: Whether :meth:`run` returns the allocation's ids (on the pool's device).
    returns_ids = False

    def __init__(
        self,
        arena: _core.Arena,
        tables: list[DeviceTables],
        wait: Callable[[list[int]], None],
        work_mask: int,
        inflight: dict[int, Any] | None = None,
    ) -> None:
        self.arena = arena
        self.tables = tables
        self.wait = wait
        self.work_mask = work_mask
        self.inflight: dict[int, Any] = {} if inflight is None else inflight

    def prologue(self, flags: int) -> None:
        """Waits and whole-table re-uploads, which every device handles alike."""
        if flags & PLAN_WAITS:
            self.wait(self.arena.plan_waits())
        if flags & PLAN_MOVES and self.inflight:
            # An eager plan's moves run after every reported forward still unretired:
            # its pages may be the ones such a forward writes (the core lists no waits).
            self.wait(list(self.inflight))
        if flags & PLAN_RESETS:
            for i in self.arena.plan_resets():
                self.tables[i].reupload()

    def run(self, want_ids: bool = False, last: DeviceLast | None = None) -> torch.Tensor | None:
        """Execute the last plan; see the subclasses. Returns ids only if ``returns_ids``."""
        raise NotImplementedError
