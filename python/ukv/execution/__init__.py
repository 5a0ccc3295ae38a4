"""Plan execution: how a pool carries out what the core decided, one executor per device.

After every operation the native arena leaves a plan (waits on in-flight forwards, page
moves, changed table rows, whole-table resets, the ids it hands out). The pool's
executor carries it out before the call returns:

- :class:`~ukv.execution.packed.PackedExecutor` (CUDA, and CPU under Triton's
  interpreter): the core writes the payload into a pinned staging ring and one launch
  per sub-pool with work reads it from there.
- :class:`~ukv.execution.host.HostExecutor` (CPU): NumPy moves whole pages in place;
  the tables are the core's own memory, so rows cost nothing.
- :class:`~ukv.execution.meta.MetaExecutor` (``meta``): bookkeeping only.

:mod:`.deferred` queues frees of ids that live on the GPU until their copy to the host
has landed; :mod:`.ring` is the staging memory; :mod:`.launch` the light launch path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from ukv import ops
from ukv.execution.base import PLAN_MOVES, PLAN_RESETS, PLAN_ROWS, PLAN_WAITS, Executor
from ukv.execution.host import HostExecutor
from ukv.execution.meta import MetaExecutor
from ukv.execution.packed import PackedExecutor

if TYPE_CHECKING:
    from ukv import _core
    from ukv._tables import DeviceTables

__all__ = ["Executor", "HostExecutor", "MetaExecutor", "PackedExecutor", "make_executor"]


def make_executor(
    raw: torch.Tensor,
    arena: _core.Arena,
    tables: list[DeviceTables],
    infos: list[dict],
    wait: Callable[[list[int]], None],
    inflight: dict[int, Any] | None = None,
) -> Executor:
    """The executor for a pool whose byte buffer is ``raw``.

    Args:
        raw: The pool's buffer (its device picks the executor).
        arena: The pool's native arena.
        tables: Per-sub-pool tables (device mirrors on CUDA).
        infos: ``arena.pool_info(i)`` of every sub-pool.
        wait: Makes the current stream wait on in-flight forwards.
        inflight: Eager pools: the unretired reported forwards, by token (see
            :class:`~ukv.execution.base.Executor`); None for lazy pools.
    """
    mirrored = any(t.mirrored for t in tables)
    mask = PLAN_WAITS | PLAN_MOVES | PLAN_RESETS | (PLAN_ROWS if mirrored else 0)
    if raw.device.type == "meta":
        return MetaExecutor(arena, tables, wait, mask)  # no bytes: nothing to order
    if ops.use_triton(raw.device):
        return PackedExecutor(arena, tables, wait, mask, raw, infos, inflight)
    return HostExecutor(arena, tables, wait, mask, raw, infos, inflight)
