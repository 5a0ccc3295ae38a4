"""The CUDA executor: one staging write by the core and one launch per sub-pool with work.

After an operation the core writes the plan's whole payload (the ids it returns, page
pairs, changed ``[v2p | p2v]`` rows) into the pool's pinned staging ring
(``Arena.pack_plan``), and :func:`ukv.kernels.plan.apply_plan_kernel` reads it from
there: no host-to-device copy, no per-call pinned allocation, and a trusted launch that
skips the user-facing checks (the core made the plan; the pool made the views). A
plan touching one sub-pool, the common case, is one launch; the returned ids are
written by that same launch into a fresh device tensor.

The same executor runs on a CPU pool when Triton's interpreter is on (that is how the
CPU tests hold the CUDA path to the NumPy one): the ring is then plain memory and the
kernel gets tensor views instead of raw addresses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import torch

from ukv import ops
from ukv.execution.base import PLAN_MOVES, PLAN_RESETS, PLAN_ROWS, PLAN_WAITS, Executor
from ukv.execution.launch import DirectKernel, _get_stream
from ukv.execution.ring import StagingRing, device_address

if TYPE_CHECKING:
    from ukv import _core
    from ukv._tables import DeviceTables
    from ukv.execution.continuation import DeviceLast

try:
    from ukv.kernels import plan as _plan_k
except ImportError:  # pragma: no cover - Triton is Linux-only
    _plan_k = None  # type: ignore[assignment]

BLOCK = ops.TABLE_BLOCK
"""Table rows or returned ids per program."""


_NO_SECTION = (0, 0, 0, 0, 0, 0, 0)


class _Geometry(NamedTuple):
    """One sub-pool's launch constants, fixed for the pool's lifetime."""

    words: torch.Tensor
    words_addr: int
    page_words: int
    num_pages: int
    block: int
    tiles: int
    chunks: int
    table: torch.Tensor
    table_addr: int
    table_len: int
    constexprs: tuple[tuple[dict[str, Any], ...], ...]
    keys: tuple[tuple[Any, ...], tuple[Any, ...]]
    tails: tuple[tuple[Any, ...], tuple[Any, ...]]


class PackedExecutor(Executor):
    """Executes plans from a staging ring with one launch per sub-pool with work."""

    returns_ids = True

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
        self.device = raw.device
        self.index = raw.device.index if raw.device.type == "cuda" else -1
        self.ring = StagingRing(raw.device)
        self.kernel = DirectKernel(_plan_k.apply_plan_kernel, ops.MOVE_NUM_WARPS)
        self.direct = self.kernel.direct and raw.device.type == "cuda"
        # Host tables are the core's memory on a CPU pool: only device mirrors take rows.
        self.rows = bool(work_mask & PLAN_ROWS)
        # Stand-in target for pointer arguments a launch does not use (never written).
        self._scratch = torch.zeros(2, dtype=torch.int64, device=raw.device)
        self._scratch_addr = self._scratch.data_ptr()
        # Sections come in sub-pool index order; a plan's moves must run in the core's
        # band order (a middle band's slide reads nothing an end band still has to copy).
        order = list(arena.move_order())
        self._rank = {p: r for r, p in enumerate(order)}
        self._reorder = order != sorted(order)
        self._geo: list[_Geometry] = []
        for t, i in zip(tables, infos):
            self._geo.append(self._geometry(raw, t, i))

    def _geometry(self, raw: torch.Tensor, tables: DeviceTables, info: dict) -> _Geometry:
        env = ops._word_envelope(raw, int(info["page_bytes"]))
        block, tiles = env.block, env.tiles
        table = tables.both if tables.both is not None else self._scratch
        pool = len(self._geo) if hasattr(self, "_geo") else 0
        constexprs = tuple(
            tuple(
                {
                    "BLOCK": block,
                    "TILES": tiles,
                    "TAB_BLOCK": BLOCK,
                    "HAS_TOKENS": has_tok,
                    "HAS_REQ": has_req,
                }
                for has_req in (False, True)
            )
            for has_tok in (False, True)
        )
        return _Geometry(
            env.words,
            env.words.data_ptr(),
            env.unit_words,
            env.num_units,
            block,
            tiles,
            env.chunks,
            table,
            table.data_ptr(),
            table.numel() if tables.both is not None else 0,
            constexprs,
            ((pool, False, False), (pool, True, False)),
            (tuple(constexprs[0][0].values()), tuple(constexprs[1][0].values())),
        )

    def run(self, want_ids: bool = False, last: DeviceLast | None = None) -> torch.Tensor | None:
        """Execute the last plan.

        Args:
            want_ids: Return the allocation's ids as a new tensor on the pool's device.
            last: ``last_loc`` on the device, for the tokens the core left as
                continuations of it (checked and finished by the kernel).

        Returns:
            The ids (shape ``[N]``, int64) when ``want_ids``, else None.
        """
        arena = self.arena
        flags = arena.plan_flags()
        if not flags & self.work_mask and not want_ids:
            return None
        if flags & (PLAN_WAITS | PLAN_RESETS) or flags & PLAN_MOVES and self.inflight:
            self.prologue(flags)
        ring = self.ring
        base, at, view = ring.tensor, *ring.window()
        layout = arena.pack_plan(view, want_ids, self.rows)
        if layout[0] > len(view):
            if layout[0] <= ring.seg_len:
                ring.next_segment()
                at, view = ring.window()
            else:
                base, view = ring.big(layout[0])
                at = 0
            layout = arena.pack_plan(view, want_ids, self.rows)
        if base is ring.tensor:
            ring.commit(layout[0])
        sections = layout[5]
        if last is None and len(sections) <= 1 and base is ring.tensor:
            done, out = self._launch_hot(at, sections, layout, want_ids)
            if done:
                return out
        else:
            out = (
                torch.empty(layout[2], dtype=torch.int64, device=self.device) if want_ids else None
            )
        if not sections:
            if layout[2]:
                self._launch(base, at, None, layout, out, last)
        else:
            if self._reorder and len(sections) > 1:
                sections = sorted(sections, key=lambda sec: self._rank[sec[0]])
            for n, section in enumerate(sections):
                self._launch(base, at, section, layout if n == 0 else None, out, last)
        if base is not ring.tensor:
            # Recorded after the last launch that reads the buffer: its event completes
            # only once they have run, so big() cannot hand the memory out earlier.
            ring.keep(base)
        return out

    def _launch_hot(
        self, at: int, sections: list[Any], layout: tuple[Any, ...], want_ids: bool
    ) -> tuple[bool, torch.Tensor | None]:
        """The allocator's common case as one C-level launch: at most one sub-pool with
        work, ids relative to nothing, a kernel variant already compiled. Returns
        ``(launched, ids)``; when not launched, the ids tensor is for the general path."""
        num_tokens = layout[2]
        out = torch.empty(num_tokens, dtype=torch.int64, device=self.device) if want_ids else None
        if sections:
            pool, src, dst, rows, vals, moves, num_rows = sections[0]
        elif num_tokens:
            pool, src, dst, rows, vals, moves, num_rows = _NO_SECTION
        else:
            return True, out
        g = self._geo[pool]
        has_tok = num_tokens > 0 and out is not None
        hit = self.kernel.entry(g.keys[has_tok])
        if hit is None:
            return False, out
        raw, function, coop, pdl, metadata = hit
        addr = self.ring.addr + 8 * at
        tab_blocks = -(-num_rows // BLOCK)
        scratch = self._scratch_addr
        raw(
            moves + tab_blocks + (-(-num_tokens // BLOCK) if has_tok else 0),
            g.chunks if moves else 1,
            1,
            _get_stream(self.index),
            function,
            coop,
            pdl,
            None,
            None,
            metadata,
            None,
            None,
            None,
            g.words_addr,
            addr + 8 * src,
            addr + 8 * dst,
            g.table_addr,
            addr + 8 * rows,
            addr + 8 * vals,
            addr + 8 * layout[1],
            addr + 8 * layout[3],
            scratch,
            out.data_ptr() if has_tok and out is not None else scratch,
            scratch,
            scratch,
            moves,
            g.page_words,
            g.num_pages,
            num_rows,
            g.table_len,
            num_tokens if has_tok else 0,
            tab_blocks,
            1,
            1,
            0,
            0,
            *g.tails[has_tok],
        )
        return True, out

    def _launch(
        self,
        base: torch.Tensor,
        at: int,
        section: tuple[int, int, int, int, int, int, int] | None,
        layout: tuple[Any, ...] | None,
        out: torch.Tensor | None,
        last: DeviceLast | None,
    ) -> None:
        """One launch: a sub-pool's moves and rows, plus the returned ids if ``layout``."""
        pool, src, dst, rows, vals, moves, num_rows = section or _NO_SECTION
        g = self._geo[pool]
        num_tokens = layout[2] if layout is not None and out is not None else 0
        tok, req = (layout[1], layout[3]) if layout is not None else (0, 0)
        has_req = bool(num_tokens and layout is not None and layout[4] and last is not None)
        tab_blocks = -(-num_rows // BLOCK)
        grid = (moves + tab_blocks + -(-num_tokens // BLOCK), g.chunks if moves else 1)
        if has_req and last is not None:
            last_t, check, err_t = last.loc, last.check, last.record.tensor
            v2p_t, ps, id_lo, id_hi = check.v2p, check.page_size, check.id_lo, check.id_hi
        else:
            last_t = v2p_t = err_t = self._scratch
            ps, id_lo, id_hi = 1, 0, 0
        out_t = out if num_tokens and out is not None else self._scratch
        stride = last_t.stride(0)
        has_tok = num_tokens > 0
        constexprs = g.constexprs[has_tok][has_req]
        if has_req:
            key: tuple[Any, ...] = (
                pool,
                has_tok,
                True,
                last_t.dtype,
                last_t.data_ptr() % 16,
                stride,
            )
        else:
            key = g.keys[has_tok]
        ints = (moves, g.page_words, g.num_pages, num_rows, g.table_len, num_tokens, tab_blocks)
        args: tuple[Any, ...] = ()
        if self.direct:
            addr = self._addr(base) + 8 * at
            args = (
                g.words_addr,
                addr + 8 * src,
                addr + 8 * dst,
                g.table_addr,
                addr + 8 * rows,
                addr + 8 * vals,
                addr + 8 * tok,
                addr + 8 * req,
                last_t.data_ptr(),
                out_t.data_ptr(),
                v2p_t.data_ptr(),
                err_t.data_ptr(),
                *ints,
                stride,
                ps,
                id_lo,
                id_hi,
            )

        def jit_args() -> tuple[Any, ...]:
            view = base[at:]
            return (
                g.words,
                view[src:],
                view[dst:],
                g.table,
                view[rows:],
                view[vals:],
                view[tok:],
                view[req:],
                last_t,
                out_t,
                v2p_t,
                err_t,
                *ints,
                stride,
                ps,
                id_lo,
                id_hi,
            )

        self.kernel.launch(grid, self.index, key, args, jit_args, constexprs)

    def _addr(self, base: torch.Tensor) -> int:
        return self.ring.addr if base is self.ring.tensor else device_address(base)
