"""The CPU executor: pages move by NumPy fancy indexing over the pool's own memory.

On a CPU pool the torch tables are zero-copy views of the core's tables, so changed rows
need no work; only page moves cost anything. Each sub-pool's pages are viewed as one
record of ``page_bytes`` per page, so one indexing statement copies whole pages (NumPy
materialises the right-hand side first, which the move contract needs: a page may be a
source and, in the same plan, never a destination).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ukv import layout
from ukv.execution.base import PLAN_MOVES, Executor

if TYPE_CHECKING:
    from ukv import _core
    from ukv._tables import DeviceTables
    from ukv.execution.continuation import DeviceLast


class HostExecutor(Executor):
    """Moves pages of a CPU pool with NumPy."""

    def __init__(
        self,
        arena: _core.Arena,
        tables: list[DeviceTables],
        wait: Callable[[list[int]], None],
        work_mask: int,
        raw: torch.Tensor,
        infos: list[dict],
        inflight: dict[int, Any] | None = None,
    ) -> None:
        super().__init__(arena, tables, wait, work_mask, inflight)
        self._raw = raw  # the arrays below alias its memory: keep it alive with them
        self._rows = [
            _as_records(
                _alias(layout.page_envelope_view(raw, int(i["page_bytes"]), int(i["num_pages"])))
            )
            for i in infos
        ]

    def run(self, want_ids: bool = False, last: DeviceLast | None = None) -> torch.Tensor | None:
        """Execute the last plan: waits, resets, then every sub-pool's page moves."""
        flags = self.arena.plan_flags()
        if not flags & self.work_mask:
            return None
        self.prologue(flags)
        if flags & PLAN_MOVES:
            for i, src, dst in self.arena.plan_moves():
                rows = self._rows[i]
                rows[dst] = rows[src]
        return None


def _alias(view: torch.Tensor) -> np.ndarray:
    """A NumPy array over a contiguous CPU uint8 view's memory. Unlike ``Tensor.numpy()``
    it leaves the storage resizable (torch pins a storage exported to NumPy), so the pool
    can give its buffer's memory back (``release_memory``); the executor is rebuilt when
    the memory comes back."""
    assert view.device.type == "cpu" and view.dtype == torch.uint8 and view.is_contiguous()
    if view.numel() == 0:
        return np.empty(tuple(view.shape), dtype=np.uint8)
    memory = (ctypes.c_uint8 * view.numel()).from_address(view.data_ptr())
    return np.ctypeslib.as_array(memory).reshape(tuple(view.shape))


def _as_records(rows: np.ndarray) -> np.ndarray:
    """``(num_pages, page_bytes)`` uint8 rows as a 1-D array of ``page_bytes``-sized
    records over the same memory: NumPy's fancy indexing then copies a whole page per
    element, about twice as fast for small pages as indexing uint8 rows."""
    if not rows.flags.c_contiguous:
        return rows
    return rows.view(np.dtype((np.void, rows.shape[1]))).reshape(rows.shape[0])
