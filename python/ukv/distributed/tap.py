"""A tap on a pool's plan execution: every executed plan is also recorded for the step.

The pool executes each plan through one callable (``pool._runtime.run``, the executor's
``run``); the tap is a hook the runtime applies whenever it binds that callable (a resume
after ``release_memory`` builds a new executor and wraps it again), so after the pool's
own executor has carried the plan out, the same plan is packed again (ids and table rows
always included) into the step's :class:`~ukv.distributed.wire.StepLog`, with the name of
the API call that made it.
Nothing changes for the pool itself; the cost is one pack and one digest per plan.
At the end of a step, :meth:`PlanTap.check` compares it across ranks: the one check of
both modes whose ranks have a core (replicated, and leader mode's rank 0).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ukv.distributed.digest import digest_words
from ukv.distributed.divergence import check_plans
from ukv.distributed.group import Group
from ukv.distributed.wire import StepLog
from ukv.execution import base as execution_base
from ukv.execution.base import PLAN_RESETS

if TYPE_CHECKING:
    from ukv.pool import UnifiedKVPool

__all__ = ["PlanTap", "caller_name"]


_EXECUTION = os.path.dirname(os.path.abspath(execution_base.__file__))


def _unbound(want_ids: bool = False, last: Any = None) -> Any:
    raise AssertionError("the tap ran a plan before the runtime bound it")


def caller_name(depth: int) -> str:
    """The public ukv call (or user function) that led to this frame, e.g.
    ``SubPoolAllocator.free``: the first frame from ``depth`` up whose function is
    public, else the immediate caller."""
    frame: Any = sys._getframe(depth)
    first = frame
    for _ in range(8):
        if frame is None:
            break
        code = frame.f_code
        # ukv.execution is machinery under the API (the pool's runtime): never a label.
        inside = os.path.dirname(code.co_filename) == _EXECUTION
        if not inside and not code.co_name.startswith(("_", "<")):
            return str(getattr(code, "co_qualname", code.co_name))
        frame = frame.f_back
    return str(getattr(first.f_code, "co_qualname", first.f_code.co_name))


class PlanTap:
    """Records every plan ``pool`` executes into :attr:`log` (see the module docstring).

    Args:
        pool: The pool to tap (its executor keeps running every plan).

    Attributes:
        log: This step's records.
        digests: Digest of each record of this step.
        labels: The API call behind each record of this step.
    """

    def __init__(self, pool: UnifiedKVPool) -> None:
        self.pool = pool
        self.arena = pool._runtime.arena
        self.log = StepLog([int(t.v2p.numel() + t.p2v.numel()) for t in pool._runtime.tables])
        self.digests: list[int] = []
        self.labels: list[str] = []
        self._inner: Callable[..., Any] = _unbound
        pool._runtime.set_tap(self)  # raises PoolConfigError when already tapped

    def wrap(self, run: Callable[..., Any]) -> Callable[..., Any]:
        """What the runtime runs plans through instead of ``run`` (called by the runtime
        each time it binds its executor's ``run``)."""
        self._inner = run
        return self._run

    def _run(self, want_ids: bool = False, last: Any = None) -> torch.Tensor | None:
        out = self._inner(want_ids, last)
        flags = self.arena.plan_flags()
        finished = None
        if last is not None and out is not None:
            finished = out.detach().to("cpu").numpy()  # device-finished ids: a sync
        tables = None
        if flags & PLAN_RESETS:
            arena = self.arena
            tables = [(arena.v2p(i), arena.p2v(i)) for i in range(arena.num_pools())]
        rec = self.log.append(self.arena, flags, finished, tables)
        self.digests.append(digest_words(rec))
        self.labels.append(caller_name(3))
        return out

    def new_step(self) -> None:
        """Forget the current step's records."""
        self.log.reset()
        self.digests.clear()
        self.labels.clear()

    def check(self, group: Group, step: int, check_tables: bool) -> None:
        """Compare this step's plans (and, with ``check_tables``, the core's tables)
        across ``group``; call it before :meth:`new_step`.

        Raises:
            DivergenceError: The ranks' plans or tables differ (names the step and plan).
        """
        tables = self.host_tables() if check_tables else None
        check_plans(group, step, self.digests, tables, self._account, list(self.pool.names))

    def _account(self) -> tuple[list[str], list[str]]:
        """The API call behind each plan of the step and what each plan did."""
        return list(self.labels), [r.describe() for r in self.log.records()]

    def host_tables(self) -> list[np.ndarray]:
        """The core's ``[v2p | p2v]`` of every sub-pool (host memory, no copy of v2p)."""
        arena = self.arena
        return [np.concatenate([arena.v2p(i), arena.p2v(i)]) for i in range(arena.num_pools())]
