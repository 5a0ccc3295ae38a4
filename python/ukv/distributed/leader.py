"""Leader mode: rank 0 plans, every other rank applies rank 0's plans.

Only the leader has a core. Each plan its pool executes is also packed (the core's int64
payload: ids, page pairs, changed table rows; see :mod:`ukv.distributed.wire`) into the
step's message, and :meth:`LeaderPool.step` broadcasts that message to the followers
(:class:`ukv.distributed.follower.FollowerPool`), which apply it to their own head
shard's bytes and tables with the same kernel. No follower can decide differently, so
this mode has no timing hazards (device frees, lazy retirement) that replicated mode
must pin; its cost is the broadcast per step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ukv.distributed.geometry import pool_words
from ukv.distributed.group import Group
from ukv.distributed.tap import PlanTap
from ukv.distributed.transport import CHUNK_WORDS, Channel
from ukv.errors import PoolConfigError

if TYPE_CHECKING:
    from ukv.pool import UnifiedKVPool

__all__ = ["LeaderPool", "agree", "check_modes"]


class LeaderPool:
    """Rank 0's pool in leader mode: its plans are broadcast at every :meth:`step`.

    Args:
        pool: The leader's pool (its own head shard).
        group: A gloo ``torch.distributed`` group whose rank 0 is this process.
        check: Compare the ranks at every step (one 8-byte all-gather).
        check_tables: Also compare every sub-pool's tables (the followers hash their
            own tables: on CUDA a device-to-host copy per step).
        chunk_words: Size of the fixed first broadcast of each step.

    Raises:
        PoolConfigError: This process is not rank 0 of the group, the group cannot carry
            host tensors, or a follower's specs do not match the pool (names the rank).
    """

    def __init__(
        self,
        pool: UnifiedKVPool,
        group: Any = None,
        *,
        check: bool = True,
        check_tables: bool = False,
        chunk_words: int = CHUNK_WORDS,
    ) -> None:
        self.group = Group.of(group)
        if self.group.rank != 0:
            raise PoolConfigError(
                f"invalid rank {self.group.rank} for LeaderPool: the leader is rank 0 "
                "(other ranks build a FollowerPool)"
            )
        self.pool = pool
        self.check = bool(check)
        self.check_tables = bool(check_tables)
        self.step_index = 0
        self.channel = Channel(self.group, chunk_words)
        self._tap = PlanTap(pool)
        tables = self._tap.host_tables()
        head = pool_words(pool)
        modes = check_modes(self.check, self.check_tables)
        msg = np.concatenate([[0, modes], head, *tables]).astype(np.int64)
        msg[0] = len(msg)
        self.channel.send(msg)
        agree(self.group, None)

    def step(self) -> int:
        """Send the step's plans to the followers and compare the ranks.

        Call it at the point every follower calls ``FollowerPool.step`` (after the
        scheduler's allocations and frees, before the forward that uses them). Holds
        the pool's lock while it sends.

        Returns:
            The index of the step just sent.

        Raises:
            DivergenceError: A follower's tables (or received plans) differ.
        """
        tap, step = self._tap, self.step_index
        with self.pool.lock:  # no other thread's plan joins the step while it is sent
            try:
                self.channel.send(tap.log.message(step))
                if self.check:
                    tap.check(self.group, step, self.check_tables)
            finally:
                tap.new_step()
                self.step_index += 1
        return step


def check_modes(check: bool, check_tables: bool) -> int:
    """The check settings as one word (every rank must use the same, or the per-step
    collective would be missing on some ranks)."""
    return int(check) | int(check_tables) << 1


def agree(group: Group, problem: str | None) -> None:
    """Every rank learns whether any rank refused the handshake; all raise if one did."""
    flags = group.all_gather_word(0 if problem is None else 1)
    if not any(flags):
        return
    why = group.all_gather_object(problem)
    first = next(r for r, f in enumerate(flags) if f)
    raise PoolConfigError(f"invalid tensor-parallel setup on rank {first}: {why[first]}")
