"""Replicated mode: every rank runs its own pool on the same operation stream.

This is how SGLang runs tensor parallelism: every rank's scheduler issues the same
allocator calls in the same order, so every rank's core makes the same decisions, and
each rank's pool moves its own head shard's bytes. Nothing about the plans is sent; the
ranks only compare one digest per step (:mod:`ukv.distributed.divergence`), so a rank
that took another path (a different call, another free order, timing-dependent
retirement of a lazy forward) is caught at the step it happened, by name.

What keeps ranks identical is the caller's: the same calls with the same host arguments.
Two things in ukv depend on timing and must be pinned at step boundaries: frees of ids
on the GPU (call ``pool.sync_frees()`` or free host ids) and, in lazy mode, retirement
of in-flight forwards (retire at the same points on every rank, e.g. after
synchronising the forward's event).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from ukv.distributed.geometry import pool_words
from ukv.distributed.group import Group
from ukv.distributed.leader import check_modes
from ukv.distributed.tap import PlanTap
from ukv.errors import PoolConfigError

if TYPE_CHECKING:
    from ukv.pool import UnifiedKVPool

__all__ = ["ReplicatedPool"]


class ReplicatedPool:
    """One rank's pool in replicated mode, with the per-step divergence check.

    Args:
        pool: This rank's pool (its own head shard; same geometry on every rank).
        group: A ``torch.distributed`` group with a gloo backend (None: the default).
        check: Compare the ranks at every :meth:`step` (one 8-byte all-gather).
        check_tables: Also fold a digest of every sub-pool's tables into the check
            (hashes the host tables: O(table rows) per step).

    Raises:
        PoolConfigError: The group cannot carry host tensors, or the ranks' pools do not
            have the same geometry (the message names the first differing rank).
    """

    def __init__(
        self,
        pool: UnifiedKVPool,
        group: Any = None,
        *,
        check: bool = True,
        check_tables: bool = False,
    ) -> None:
        self.group = Group.of(group)
        self.pool = pool
        self.check = bool(check)
        self.check_tables = bool(check_tables)
        self.step_index = 0
        _agree_on_geometry(self.group, pool, check_modes(self.check, self.check_tables))
        self._tap = PlanTap(pool)

    @property
    def rank(self) -> int:
        """This rank in the group."""
        return self.group.rank

    def step(self) -> int:
        """End the current step: compare every rank's plans since the last call.

        Call it on every rank at the same point (e.g. after the scheduler's allocations
        and before the forward).

        Returns:
            The index of the step just checked.

        Raises:
            DivergenceError: The ranks' plans (or tables) differ; names the step and the
                first differing plan on every rank.
        """
        tap, step = self._tap, self.step_index
        with self.pool.lock:  # no other thread's plan joins the step while it is compared
            try:
                if self.check:
                    tap.check(self.group, step, self.check_tables)
            finally:
                tap.new_step()
                self.step_index += 1
        return step


def _agree_on_geometry(group: Group, pool: UnifiedKVPool, modes: int) -> None:
    mine = torch.cat([torch.tensor([modes]), torch.from_numpy(pool_words(pool))])
    rows = group.all_gather_words(mine)
    for r in range(group.size):
        if rows[r][0] != rows[0][0]:
            raise PoolConfigError(
                f"invalid check settings on rank {r}: check/check_tables word {int(rows[r][0])}"
                f", rank 0 has {int(rows[0][0])} (every rank must check alike)"
            )
        if not torch.equal(rows[r], rows[0]):
            raise PoolConfigError(
                f"invalid pool geometry on rank {r}: {rows[r].tolist()} differs from rank 0's "
                f"{rows[0].tolist()} (every rank needs the same sizes, page size and specs' "
                "entry bytes)"
            )
