"""The ``meta`` executor: bookkeeping only. Pages are counted by the core, never moved,
so planning and simulation run at production sizes without the bytes."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ukv.execution.base import Executor

if TYPE_CHECKING:
    from ukv.execution.continuation import DeviceLast


class MetaExecutor(Executor):
    """Honours waits and resets; there are no bytes to move and no device tables."""

    def run(self, want_ids: bool = False, last: DeviceLast | None = None) -> torch.Tensor | None:
        """Execute the last plan (nothing beyond waits and resets)."""
        flags = self.arena.plan_flags()
        if flags & self.work_mask:
            self.prologue(flags)
        return None
