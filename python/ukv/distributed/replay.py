"""Apply a recorded plan to a follower's bytes and tables, without a core.

The follower runs the leader's plan with the kernel the leader's own executor runs
(:func:`ukv.kernels.plan.apply_plan_kernel`, one launch per sub-pool with work, in the
core's band order), reading the same packed sections: page pairs and changed
``[v2p | p2v]`` rows. On a CPU buffer without Triton's interpreter a torch reference does
the same (whole page envelopes copied with the right-hand side materialised first, as the
move contract needs). Reset sub-pools get the record's full table copy.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ukv import ops
from ukv.distributed.wire import Record
from ukv.execution.host import _as_records

try:
    from ukv.kernels import plan as _plan_k
except ImportError:  # pragma: no cover - Triton is Linux-only
    _plan_k = None  # type: ignore[assignment]

__all__ = ["Replayer"]


class Replayer:
    """Applies records to one buffer and its per-sub-pool ``[v2p | p2v]`` tables.

    Args:
        raw: The follower's byte buffer, shape ``[total_bytes]`` uint8.
        tables: Per sub-pool ``[v2p | p2v]`` int64 tensors on ``raw``'s device.
        page_bytes: Per sub-pool bytes per page.
        move_order: Sub-pool order in which moves run (the leader core's band order).
    """

    def __init__(
        self,
        raw: torch.Tensor,
        tables: list[torch.Tensor],
        page_bytes: list[int],
        move_order: tuple[int, ...],
    ) -> None:
        self.raw = raw
        self.tables = tables
        self.rank = {p: r for r, p in enumerate(move_order)}
        self.triton = _plan_k is not None and ops.use_triton(raw.device)
        self._scratch = torch.zeros(2, dtype=torch.int64, device=raw.device)
        self._geo = [self._geometry(pb) for pb in page_bytes]

    def _geometry(self, page_bytes: int) -> tuple[Any, ...]:
        raw = self.raw
        if not self.triton:
            return (_as_records(ops._unit_rows(raw, page_bytes).numpy()),)
        return ops._word_envelope(raw, page_bytes)

    def apply(self, rec: Record, payload: torch.Tensor) -> None:
        """Carry out one record's moves, rows and resets.

        Args:
            rec: The record (its section offsets index ``payload``).
            payload: ``rec.payload`` on the buffer's device (shape ``[P]`` int64).
        """
        sections = sorted(rec.sections, key=lambda s: self.rank.get(s[0], s[0]))
        for sec in sections:
            if self.triton:
                self._launch(sec, payload)
            else:
                self._reference(sec, payload)
        for i, table in zip(rec.resets.tolist(), rec.tables):
            self.tables[i].copy_(torch.from_numpy(np.ascontiguousarray(table)))

    def _reference(self, sec: tuple[int, ...], payload: torch.Tensor) -> None:
        pool, src, dst, rows, vals, moves, num_rows = sec
        (pages,) = self._geo[pool]
        if moves:
            words = payload.numpy()
            pages[words[dst : dst + moves]] = pages[words[src : src + moves]]
        if num_rows:
            self.tables[pool][payload[rows : rows + num_rows]] = payload[vals : vals + num_rows]

    def _launch(self, sec: tuple[int, ...], payload: torch.Tensor) -> None:
        pool, src, dst, rows, vals, moves, num_rows = sec
        words, page_words, num_pages, block, tiles, chunks = self._geo[pool]
        table = self.tables[pool]
        tab_blocks = -(-num_rows // ops.TABLE_BLOCK)
        s = self._scratch
        _plan_k.apply_plan_kernel[(moves + tab_blocks, chunks if moves else 1)](
            words,
            payload[src:] if moves else s,
            payload[dst:] if moves else s,
            table,
            payload[rows:] if num_rows else s,
            payload[vals:] if num_rows else s,
            s,
            s,
            s,
            s,
            s,
            s,
            moves,
            page_words,
            num_pages,
            num_rows,
            table.numel(),
            0,
            tab_blocks,
            1,
            1,
            0,
            0,
            BLOCK=block,
            TILES=tiles,
            TAB_BLOCK=ops.TABLE_BLOCK,
            HAS_TOKENS=False,
            HAS_REQ=False,
            num_warps=ops.MOVE_NUM_WARPS,
        )
