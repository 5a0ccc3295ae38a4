"""Model-based tests of the allocator API (API.md §3/§4, reference-design §3, §9, §10).

A pure-Python reference model of the two-ended arena predicts, after every public call,
the exact virtual ids handed out (FIFO free-id recycling), success or None, the physical
placement (eager and lazy), the watermarks, availability from byte-exact frontier math,
and the v2p/p2v tables. A hypothesis ``RuleBasedStateMachine`` drives a real CPU pool and
the model side by side and compares everything, including the bytes of every live page
(each page carries a marker that must follow it through every compaction).

The second half replays the reference's unit-test scenarios (§10) that apply to this API.
"""

from __future__ import annotations

import random
import zlib
from collections import deque
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import ukv
from ukv.errors import ArgumentError, DoubleFreeError

# ================================================================================ the model


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class FakeEvent:
    """A completion event for ``set_inflight_forward``: only ``query()``, no sync."""

    def __init__(self) -> None:
        self.fired = False

    def query(self) -> bool:
        return self.fired


class SideModel:
    """One sub-pool: geometry, watermark, tables, free ids, holes, pending batches."""

    def __init__(
        self,
        name: str,
        *,
        page_size: int,
        page_bytes: int,
        num_pages: int,
        min_page: int,
        up: bool,
        lazy: bool,
        paged: bool,
    ) -> None:
        self.name = name
        self.ps = page_size
        self.pb = page_bytes
        self.num_pages = num_pages
        self.min_page = min_page
        self.up = up
        self.lazy = lazy
        self.paged = paged
        self.pages_moved = 0
        self.compactions = 0
        self.reset()

    def reset(self) -> None:
        self.wm = self.min_page if self.up else self.num_pages - 1
        self.v2p: dict[int, int] = {}
        self.p2v: dict[int, int] = {}
        self.free_ids: deque[int] = deque(range(self.min_page, self.num_pages))
        self.holes: list[int] = []
        self.pending: list[list] = []  # [token, pages]
        self.write_sets: dict[int, list[int]] = {}  # by forward token: every one blocks
        self.group: list[int] | None = None

    # ----- geometry of the band
    def high_byte(self) -> int:
        return (self.wm if self.up else self.num_pages) * self.pb

    def low_byte(self) -> int:
        return (self.min_page if self.up else self.wm + 1) * self.pb

    def index_room(self) -> int:
        return self.num_pages - self.wm if self.up else self.wm + 1 - self.min_page

    def in_band(self, p: int) -> bool:
        if self.up:
            return self.min_page <= p < self.wm
        return self.wm < p < self.num_pages

    def span(self) -> int:
        return self.wm - self.min_page if self.up else self.num_pages - 1 - self.wm

    def pending_pages(self) -> int:
        return sum(len(b[1]) for b in self.pending)

    def live(self) -> int:
        return len(self.v2p)

    def record_moves(self, n: int) -> None:
        if n:
            self.pages_moved += n
            self.compactions += 1

    # ----- tables as the pool exposes them
    def v2p_array(self) -> np.ndarray:
        arr = np.full(self.num_pages + 1, -1, dtype=np.int64)
        arr[0] = 0
        for v, p in self.v2p.items():
            arr[v] = p
        return arr

    def p2v_array(self) -> np.ndarray:
        arr = np.full(self.num_pages + 1, -1, dtype=np.int64)
        arr[0] = 0
        for p, v in self.p2v.items():
            arr[p] = v
        return arr

    def live_tokens(self) -> list[int]:
        return [v * self.ps + o for v in sorted(self.v2p) for o in range(self.ps)]

    def phys_token(self, t: int) -> int:
        return self.v2p[t // self.ps] * self.ps + t % self.ps


class ArenaModel:
    """Both sub-pools plus the in-flight forward bookkeeping of ``UnifiedKVPool``."""

    def __init__(self, sides: list[SideModel], max_moves: int) -> None:
        self.sides = sides
        self.upside = next(s for s in sides if s.up)
        self.downside = next(s for s in sides if not s.up)
        self.max_moves = max_moves
        self.latest: int | None = None
        self.events: dict[int, FakeEvent] = {}
        self.write_locs: dict[int, list[int]] = {}
        self.next_token = 1

    def other(self, s: SideModel) -> SideModel:
        return self.downside if s is self.upside else self.upside

    # ----- capacity (reference-design §3.3/§3.4)
    def gap(self) -> int:
        return max(0, self.downside.low_byte() - self.upside.high_byte())

    def avail_pages(self, s: SideModel) -> int:
        return len(s.holes) + max(0, min(self.gap() // s.pb, s.index_room()))

    def sched_pages(self, s: SideModel) -> int:
        nb = self.other(s)
        extra = (len(nb.holes) + nb.pending_pages()) * nb.pb if nb.lazy else 0
        return len(s.holes) + max(0, min((self.gap() + extra) // s.pb, s.index_room()))

    # ----- allocation (§3.5, §3.6)
    def make_room(self, s: SideModel, n: int) -> bool:
        if n <= self.avail_pages(s):
            return True
        if n > self.sched_pages(s):
            return False
        self.flush_one(self.other(s), urgent=True)
        ok = n <= self.avail_pages(s)
        assert ok, "model: the urgent neighbour flush did not make the promised room"
        return ok

    def alloc_pages(self, s: SideModel, n: int) -> list[int] | None:
        if n == 0:
            return []
        if n > len(s.free_ids) or not self.make_room(s, n):
            return None
        vpages = [s.free_ids.popleft() for _ in range(n)]
        n_holes = min(len(s.holes), n)
        for v in vpages[:n_holes]:
            self._bind(s, v, s.holes.pop(0))
        fresh = vpages[n_holes:]
        if s.up:
            start = s.wm
            s.wm += len(fresh)
        else:
            s.wm -= len(fresh)
            start = s.wm + 1
        for i, v in enumerate(fresh):
            self._bind(s, v, start + i)
        return vpages

    @staticmethod
    def _bind(s: SideModel, v: int, p: int) -> None:
        assert v not in s.v2p and p not in s.p2v
        s.v2p[v] = p
        s.p2v[p] = v

    def alloc_tokens(self, s: SideModel, n_tokens: int) -> list[int] | None:
        vp = self.alloc_pages(s, n_tokens // s.ps)
        if vp is None:
            return None
        return [v * s.ps + o for v in vp for o in range(s.ps)]

    def alloc_extend(self, s: SideModel, reqs: list[tuple[int, int, int]]) -> list[int] | None:
        ps = s.ps
        n = sum(cdiv(seq, ps) - cdiv(pre, ps) for pre, seq, _ in reqs)
        vp = self.alloc_pages(s, n)
        if vp is None:
            return None
        out: list[int] = []
        base = 0
        for pre, seq, last in reqs:
            tail_end = min(cdiv(pre, ps) * ps, seq)
            out.extend(last + (pos - pre + 1) for pos in range(pre, tail_end))
            for pos in range(tail_end, seq):
                out.append(vp[base + (pos - tail_end) // ps] * ps + pos % ps)
            base += cdiv(seq - tail_end, ps)
        return out

    def alloc_decode(self, s: SideModel, reqs: list[tuple[int, int]]) -> list[int] | None:
        n = sum(1 for seq, _ in reqs if (seq - 1) % s.ps == 0)
        vp = self.alloc_pages(s, n)
        if vp is None:
            return None
        out, k = [], 0
        for seq, last in reqs:
            if (seq - 1) % s.ps == 0:
                out.append(vp[k] * s.ps)
                k += 1
            else:
                out.append(last + 1)
        return out

    # ----- free (§3.10, §3.11, §3.15)
    def free(self, s: SideModel, tokens: list[int]) -> None:
        pages: list[int] = []
        for t in tokens:
            if t // s.ps not in pages:
                pages.append(t // s.ps)
        if s.group is not None:
            s.group.extend(pages)
            return
        self.release(s, pages)

    def group_end(self, s: SideModel) -> None:
        pages, s.group = s.group, None
        self.release(s, pages)

    def release(self, s: SideModel, pages: list[int]) -> None:
        freed = [s.v2p.pop(v) for v in pages]
        s.free_ids.extend(pages)
        for p in freed:
            del s.p2v[p]
        if s.lazy:
            s.holes.extend(freed)
        else:
            self.compact_eager(s, freed)

    @staticmethod
    def compact_eager(s: SideModel, freed: list[int]) -> None:
        k = len(freed)
        if k == 0:
            return
        freed = sorted(freed)
        if s.up:
            new_wm = s.wm - k
            dst = [p for p in freed if p < new_wm]
            lo, hi = new_wm, s.wm
        else:
            new_wm = s.wm + k
            dst = [p for p in freed if p > new_wm]
            lo, hi = s.wm + 1, new_wm + 1
        s.wm = new_wm
        survivors = [p for p in range(lo, hi) if p in s.p2v]
        assert len(survivors) == len(dst)
        for src, d in zip(survivors, dst):  # i-th smallest survivor -> i-th smallest hole
            v = s.p2v.pop(src)
            s.v2p[v] = d
            s.p2v[d] = v
        s.record_moves(len(dst))

    # ----- lazy flush (§3.12, §3.13)
    def pool_flush(self, urgent: bool) -> int:
        if not any(s.lazy for s in self.sides):
            return 0
        self.retire_completed()
        if not urgent:
            for token, loc in self.write_locs.items():
                for s in self.sides:
                    if s.paged:
                        self.set_write_set(s, token, loc)
            self.write_locs.clear()
        # A non-urgent flush moves no state slot while any forward is unretired (it
        # updates its batch's states in place; review round 3, C6).
        states_blocked = not urgent and bool(self.events)
        return sum(self.flush_one(s, urgent) for s in self.sides if s.paged or not states_blocked)

    @staticmethod
    def set_write_set(s: SideModel, token: int, tokens: list[int]) -> None:
        s.write_sets[token] = [t // s.ps for t in tokens if t >= 0 and t // s.ps < s.num_pages]

    @staticmethod
    def _absorb(s: SideModel) -> None:
        s.holes.sort()
        if s.up:
            while s.holes and s.holes[-1] == s.wm - 1:
                s.holes.pop()
                s.wm -= 1
        else:
            while s.holes and s.holes[0] == s.wm + 1:
                s.holes.pop(0)
                s.wm += 1

    def flush_one(self, s: SideModel, urgent: bool) -> int:
        if not s.lazy:
            return 0
        if urgent:
            for _, pages in s.pending:
                s.holes.extend(pages)
            s.pending = []
        self._absorb(s)
        if not s.holes:
            return 0
        if urgent:
            self.latest = None
            s.write_sets.clear()
        # survivor walk: topmost survivors into the deepest holes; no page any unretired
        # forward writes (the union of their sets; review round 3, C5)
        blockers = (
            set()
            if urgent
            else {s.v2p[v] for ws in s.write_sets.values() for v in ws if v in s.v2p}
        )
        cap = float("inf") if urgent else self.max_moves
        n_holes = len(s.holes)
        step = -1 if s.up else 1
        src = s.wm - 1 if s.up else s.wm + 1
        pairs: list[tuple[int, int]] = []
        while len(pairs) < n_holes and len(pairs) < cap:
            dst = s.holes[len(pairs)] if s.up else s.holes[n_holes - 1 - len(pairs)]
            while s.in_band(src) and src not in s.p2v:
                src += step
            crossed = src < dst if s.up else src > dst
            if crossed or not s.in_band(src) or src in blockers:
                break
            pairs.append((src, dst))
            src += step
        moves = len(pairs)
        released = False
        if moves:
            for src, dst in pairs:
                v = s.p2v.pop(src)
                s.v2p[v] = dst
                s.p2v[dst] = v
            s.record_moves(moves)
            if s.up:
                s.holes = s.holes[moves:]
            else:
                s.holes = s.holes[: n_holes - moves]
            vacated = [src for src, _ in pairs]
            if self.latest is None:
                s.holes.extend(vacated)
                released = True
            else:
                s.pending.append([self.latest, vacated])
        if urgent:
            s.holes = []
            s.wm = s.min_page + s.live() if s.up else s.num_pages - 1 - s.live()
        elif released:
            self._absorb(s)
        return moves

    # ----- in-flight forwards (§3.14)
    def set_inflight(self, event: FakeEvent, loc: list[int] | None) -> None:
        token = self.next_token
        self.next_token += 1
        self.events[token] = event
        if loc is not None:
            self.write_locs[token] = loc
        self.latest = token

    def retire_completed(self) -> None:
        for token, ev in list(self.events.items()):  # in report order, up to the first
            if not ev.query():  # forward still running (later ones wait behind it)
                return
            self.retire(token)
            del self.events[token]
            self.write_locs.pop(token, None)

    def retire(self, token: int) -> None:
        for s in self.sides:
            i = 0
            while i < len(s.pending):  # swap_remove order, as the core does
                if s.pending[i][0] == token:
                    batch = s.pending[i]
                    s.pending[i] = s.pending[-1]
                    s.pending.pop()
                    s.holes.extend(batch[1])
                else:
                    i += 1
            s.write_sets.pop(token, None)
        if self.latest == token:
            self.latest = None

    def clear(self, s: SideModel) -> None:
        s.reset()


# ========================================================================= pool geometry


@dataclass(frozen=True)
class Config:
    """A two-sided pool: an MHA sub-pool "full" and a Mamba sub-pool "mamba".

    ``tiny``: full MHA L=1, H=1, D=3 fp16 (entry 12 B); mamba L=1, conv ((2, 3),) fp32 +
    temporal (4,) fp32 (entry 40 B). 12 and 40 divide neither way, so the frontier math
    must convert bytes exactly. ``ref``: the reference fixtures of §10 (entries 64 B and
    160 B). ``total = n_full * page_size * full_entry + n_mamba * mamba_entry``.
    """

    full_grow: str = "up"
    page_size: int = 1
    lazy: bool = False
    max_moves: int = 2
    geometry: str = "tiny"
    n_full: int = 24
    n_mamba: int = 8
    device: str = "cpu"


GEOMETRIES = {
    # name: (full (L, H, D), full entry, mamba (L, conv_shapes, temporal_shape), mamba entry)
    "tiny": ((1, 1, 3), 1 * (3 * 2 + 3 * 2), (1, ((2, 3),), (4,)), 1 * 6 * 4 + 1 * 4 * 4),
    "ref": ((2, 2, 4), 2 * (8 * 2 + 8 * 2), (2, ((4, 3),), (2, 2, 2)), 2 * 12 * 4 + 2 * 8 * 4),
}


def total_bytes(cfg: Config) -> int:
    _, full_entry, _, mamba_entry = GEOMETRIES[cfg.geometry]
    return cfg.n_full * cfg.page_size * full_entry + cfg.n_mamba * mamba_entry


def build_pool(cfg: Config) -> ukv.UnifiedKVPool:
    (fl, fh, fd), full_entry, (ml, conv, temporal), mamba_entry = GEOMETRIES[cfg.geometry]
    mamba_grow = "down" if cfg.full_grow == "up" else "up"
    full = ukv.MHASpec("full", fl, fh, fd, torch.float16, grow=cfg.full_grow)
    mamba = ukv.MambaSpec(
        "mamba", ml, conv, torch.float32, temporal, torch.float32, grow=mamba_grow
    )
    assert (full.entry_bytes, mamba.entry_bytes) == (full_entry, mamba_entry)
    return ukv.UnifiedKVPool(
        total_bytes(cfg),
        [full, mamba],
        page_size=cfg.page_size,
        device=cfg.device,
        lazy=cfg.lazy,
        max_moves_per_flush=cfg.max_moves,
    )


def build_model(cfg: Config) -> ArenaModel:
    """Geometry from first principles (API.md §3, reference-design §2.6)."""
    _, full_entry, _, mamba_entry = GEOMETRIES[cfg.geometry]
    total, ps = total_bytes(cfg), cfg.page_size
    full_pb = ps * full_entry
    floor = max(full_pb, mamba_entry)  # a whole page of the paged spec, an entry of the state
    sides = [
        SideModel(
            "full",
            page_size=ps,
            page_bytes=full_pb,
            num_pages=total // full_pb,
            min_page=cdiv(floor, full_pb),
            up=cfg.full_grow == "up",
            lazy=cfg.lazy,
            paged=True,
        ),
        SideModel(
            "mamba",
            page_size=1,
            page_bytes=mamba_entry,
            num_pages=total // mamba_entry,
            min_page=cdiv(floor, mamba_entry),
            up=cfg.full_grow != "up",
            lazy=cfg.lazy,
            paged=False,
        ),
    ]
    return ArenaModel(sides, cfg.max_moves)


def marker(side: int, v: int) -> int:
    return side * 100_000 + v + 1


def as_ids(values: list[int], kind: str):
    if kind == "numpy":
        return np.asarray(values, dtype=np.int64)
    return torch.tensor(values, dtype=torch.int32 if kind == "int32" else torch.int64)


def lens(values: list[int], dtype: torch.dtype = torch.int64) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype)


class Harness:
    """A real pool and the model, driven together through the public API.

    Every operation calls the pool and the model and compares what the call returns;
    :meth:`check` compares the whole observable state. Each live page carries a marker
    (its virtual id) in all of its bytes, which must follow the page through compaction.
    """

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.pool = build_pool(cfg)
        self.model = build_model(cfg)
        self.allocs = [self.pool.allocator("full"), self.pool.allocator("mamba")]
        self.bytes = cfg.device == "cpu"
        for a, s in zip(self.allocs, self.model.sides):
            assert (a.num_pages, a.min_page_index, a.page_size) == (s.num_pages, s.min_page, s.ps)
            assert a.grow == ("up" if s.up else "down")
        # requests built by alloc_extend/alloc_decode: id -> virtual token ids
        self.requests: list[dict[int, list[int]]] = [{}, {}]
        self.next_req = 0
        self.checks = 0

    # ----- helpers
    def side(self, i: int) -> SideModel:
        return self.model.sides[i]

    def _words(self, s: SideModel) -> torch.Tensor:
        """Side ``s``'s physical pages as rows of int32 words (a view of ``pool.raw``)."""
        return self.pool.raw[: s.num_pages * s.pb].view(torch.int32).view(s.num_pages, s.pb // 4)

    def _stamp(self, i: int, before: set[int]) -> None:
        s = self.side(i)
        new = set(s.v2p) - before
        if self.bytes and new:
            words = self._words(s)
            for v in new:
                words[s.v2p[v]] = marker(i, v)

    def _result(self, got, expected) -> None:
        if expected is None:
            assert got is None, f"expected None, got {got}"
            return
        assert got is not None, f"expected {expected}, got None"
        assert got.dtype == torch.int64
        assert got.tolist() == expected

    def _drop_requests(self, i: int, pages: set[int]) -> None:
        ps = self.side(i).ps
        reqs = self.requests[i]
        for rid in [r for r, toks in reqs.items() if any(t // ps in pages for t in toks)]:
            del reqs[rid]

    def amount(self, i: int, kind) -> int:
        """Tokens for ``kind``: pages as an int, or around the capacity queries."""
        a, ps = self.allocs[i], self.side(i).ps
        if isinstance(kind, int):
            return kind * ps
        base = a.available_size() if kind.startswith("avail") else a.schedulable_available_size()
        return base + (ps if kind.endswith("+1") else 0)

    def freeable(self, i: int) -> list[int]:
        s = self.side(i)
        return sorted(set(s.v2p) - set(s.group or ()))

    # ----- operations
    def alloc(self, i: int, n: int):
        s, a = self.side(i), self.allocs[i]
        avail, sched = a.available_size(), a.schedulable_available_size()
        before = set(s.v2p)
        expected = self.model.alloc_tokens(s, n)
        got = a.alloc(n)
        self._result(got, expected)
        # feasibility (§9.9): n <= schedulable <=> success; eager: schedulable == available
        assert (got is not None) == (n <= sched), f"alloc({n}) with schedulable {sched}"
        assert s.lazy or avail == sched
        self._stamp(i, before)
        return got

    def alloc_extend(self, i: int, batch: list[tuple[int | None, int]], dtype=torch.int64):
        """``batch``: (request id or None for a new request, tokens to add)."""
        s, a = self.side(i), self.allocs[i]
        reqs = self.requests[i]
        rows = []
        for rid, add in batch:
            toks = reqs[rid] if rid is not None else []
            rows.append((rid, len(toks), len(toks) + add, toks[-1] if toks else -1))
        pre, seq = lens([r[1] for r in rows], dtype), lens([r[2] for r in rows], dtype)
        last = lens([r[3] for r in rows], dtype)
        before = set(s.v2p)
        expected = self.model.alloc_extend(s, [r[1:] for r in rows])
        got = a.alloc_extend(pre, pre.clone(), seq, seq.clone(), last, sum(b[1] for b in batch))
        self._result(got, expected)
        if expected is not None:
            pos = 0
            for rid, p, q, _ in rows:
                new, pos = expected[pos : pos + q - p], pos + q - p
                if rid is not None:
                    reqs[rid] = reqs[rid] + new
                elif new:
                    reqs[self.next_req] = new
                    self.next_req += 1
        self._stamp(i, before)
        return got

    def alloc_decode(self, i: int, batch: list[int | None]):
        """``batch``: request ids (None: a new request whose first token this is)."""
        s, a = self.side(i), self.allocs[i]
        reqs = self.requests[i]
        rows = [(len(reqs[r]) + 1, reqs[r][-1]) if r is not None else (1, -1) for r in batch]
        seq, last = lens([r[0] for r in rows]), lens([r[1] for r in rows])
        before = set(s.v2p)
        expected = self.model.alloc_decode(s, rows)
        got = a.alloc_decode(seq, seq.clone(), last)
        self._result(got, expected)
        if expected is not None:
            for rid, t in zip(batch, expected):
                if rid is None:
                    reqs[self.next_req] = [t]
                    self.next_req += 1
                else:
                    reqs[rid].append(t)
        self._stamp(i, before)
        return got

    def free(self, i: int, tokens: list[int], kind: str = "int64") -> None:
        self.model.free(self.side(i), tokens)
        self.allocs[i].free(as_ids(tokens, kind))
        self._drop_requests(i, {t // self.side(i).ps for t in tokens})

    def free_pages(self, i: int, pages: list[int], kind: str = "int64") -> None:
        ps = self.side(i).ps
        self.free(i, [v * ps + (v * 7) % ps for v in pages], kind)

    def group_begin(self, i: int) -> None:
        self.allocs[i].free_group_begin()
        self.side(i).group = []

    def group_end(self, i: int) -> None:
        self.model.group_end(self.side(i))
        self.allocs[i].free_group_end()

    def flush(self, urgent: bool) -> int:
        expected = self.model.pool_flush(urgent)
        got = self.pool.flush(urgent)
        assert got == expected
        return got

    def clear(self, i: int) -> None:
        self.model.clear(self.side(i))
        self.allocs[i].clear()
        self.requests[i].clear()

    def launch_forward(self, loc: list[int] | None) -> FakeEvent:
        ev = FakeEvent()
        self.model.set_inflight(ev, loc)
        self.pool.set_inflight_forward(ev, None if loc is None else torch.tensor(loc))
        return ev

    def retire_completed(self) -> None:
        self.model.retire_completed()
        self.pool.retire_completed()

    def drain(self) -> None:
        """Free everything, flush urgently: both bands pack to nothing (no ghost pages)."""
        for i in range(len(self.allocs)):
            if self.side(i).group is not None:
                self.group_end(i)
            if self.side(i).v2p:
                self.free_pages(i, sorted(self.side(i).v2p))
        self.flush(urgent=True)
        self.check()
        for i, a in enumerate(self.allocs):
            assert a.allocated_count() == 0
            assert self.pool._arena.pool_state(i)[1:] == (0, 0, 0, 0), "pages left after drain"

    # ----- the whole observable state
    def check(self) -> None:
        self.checks += 1
        self.pool.check_invariants()
        m = self.model
        stats = self.pool.stats()
        assert stats.free_gap_bytes == m.gap()
        for i, (s, a) in enumerate(zip(m.sides, self.allocs)):
            ctx = f"side {s.name}"
            state = self.pool._arena.pool_state(i)
            assert state == (s.wm, s.live(), len(s.holes), s.pending_pages(), s.span()), ctx
            assert a.watermark == s.wm, ctx
            assert a.available_size() == m.avail_pages(s) * s.ps, ctx
            assert a.schedulable_available_size() == m.sched_pages(s) * s.ps, ctx
            assert a.allocated_count() == s.live() * s.ps, ctx
            assert self.pool._arena.free_ids(i).tolist() == list(s.free_ids), ctx
            v2p, p2v = a.v2p.numpy(), a.p2v.numpy()
            np.testing.assert_array_equal(v2p, s.v2p_array(), err_msg=f"{ctx} v2p")
            np.testing.assert_array_equal(p2v, s.p2v_array(), err_msg=f"{ctx} p2v")
            sub = stats.sub_pools[i]
            assert (sub.pages_moved, sub.compactions) == (s.pages_moved, s.compactions), ctx
            assert (sub.live_pages, sub.span_pages, sub.used_bytes) == (
                s.live(),
                s.span(),
                s.span() * s.pb,
            ), ctx
            # v2p/p2v are inverse on live pages (§9.1)
            live_v = np.nonzero(v2p[1:-1] >= 0)[0] + 1
            assert (p2v[v2p[live_v]] == live_v).all(), ctx
            # is_slot_allocated over the whole id space and past it; page granular, page 0
            # (the padding anchor) always reads as allocated
            for t in range(-2, (s.num_pages + 1) * s.ps + 1):
                want = t >= 0 and (t // s.ps == 0 or t // s.ps in s.v2p)
                assert a.is_slot_allocated(t) == want, f"{ctx} token {t}"
            # translate: every live token, plus dead ones that clamp to the sink
            live_t = s.live_tokens()
            dead = [0, -1, s.num_pages * s.ps + 3] + [f * s.ps for f in list(s.free_ids)[:3]]
            ids = torch.tensor(live_t + dead, dtype=torch.int64)
            want = [s.phys_token(t) for t in live_t] + [0] * len(dead)
            if self.checks % 2:
                out = torch.full_like(ids, -7)
                got = a.translate_kv_loc(ids, out=out)
                assert got is out
            else:
                got = a.translate_kv_loc(ids)
            assert got.tolist() == want, ctx
            # bytes: every live page still carries its marker (data follows compaction)
            if self.bytes and s.v2p:
                vs = sorted(s.v2p)
                rows = self._words(s)[[s.v2p[v] for v in vs]]
                exp = torch.tensor([marker(i, v) for v in vs], dtype=torch.int32)
                assert torch.equal(rows, exp[:, None].expand_as(rows)), f"{ctx} page bytes"


# ===================================================================== the state machine

MAX_REQUESTS = 5
AMOUNT = st.sampled_from([1, 1, 2, 2, 3, 4, 0, "avail", "avail+1", "sched", "sched+1"])
ID_KIND = st.sampled_from(["int64", "int32", "numpy"])
SIDE = st.sampled_from([0, 1])


class AllocatorMachine(RuleBasedStateMachine):
    """Random public-API traffic on a real pool, compared with the model at every step."""

    CONFIG: Config

    def __init__(self) -> None:
        super().__init__()
        self.h = Harness(self.CONFIG)

    @initialize(data=st.data())
    def populate(self, data) -> None:
        """Start from a few live chunks on both sides, so frees and flushes have material."""
        for i in (0, 1):
            for n in data.draw(st.lists(st.integers(1, 3), max_size=4), label=f"chunks {i}"):
                self.h.alloc(i, n * self.h.side(i).ps)

    @rule(i=SIDE, kind=AMOUNT)
    def alloc(self, i, kind) -> None:
        self.h.alloc(i, self.h.amount(i, kind))

    @rule(data=st.data(), i=SIDE)
    def alloc_extend(self, data, i) -> None:
        reqs, ps = self.h.requests[i], self.h.side(i).ps
        olds = (
            data.draw(st.lists(st.sampled_from(sorted(reqs)), unique=True, max_size=3))
            if reqs
            else []
        )
        n_new = data.draw(st.integers(0, max(0, min(2, MAX_REQUESTS - len(reqs)))))
        batch = [(r, data.draw(st.integers(0, 2 * ps + 1))) for r in olds]
        batch += [(None, data.draw(st.integers(0, 2 * ps + 1))) for _ in range(n_new)]
        if batch:
            batch = [batch[k] for k in data.draw(st.permutations(range(len(batch))))]
            self.h.alloc_extend(i, batch, data.draw(st.sampled_from([torch.int64, torch.int32])))

    @rule(data=st.data(), i=SIDE)
    def alloc_decode(self, data, i) -> None:
        reqs = self.h.requests[i]
        olds = (
            data.draw(st.lists(st.sampled_from(sorted(reqs)), unique=True, max_size=3))
            if reqs
            else []
        )
        n_new = data.draw(st.integers(0, max(0, min(1, MAX_REQUESTS - len(reqs)))))
        if olds or n_new:
            self.h.alloc_decode(i, olds + [None] * n_new)

    @rule(data=st.data(), i=SIDE, kind=ID_KIND)
    def free(self, data, i, kind) -> None:
        """Free a random subset of live pages, naming one or more tokens of each."""
        cands, ps = self.h.freeable(i), self.h.side(i).ps
        if not cands:
            return
        pages = data.draw(st.lists(st.sampled_from(cands), min_size=1, unique=True))
        tokens = []
        for v in pages:  # at page size > 1 any token (or several) of a page frees it
            offs = data.draw(st.lists(st.integers(0, ps - 1), min_size=1, max_size=2, unique=True))
            tokens += [v * ps + o for o in offs]
        tokens = [tokens[k] for k in data.draw(st.permutations(range(len(tokens))))]
        self.h.free(i, tokens, kind)

    @rule(data=st.data(), i=SIDE)
    def free_one(self, data, i) -> None:
        """Free one live page (often an interior one: a hole in lazy mode)."""
        cands = self.h.freeable(i)
        if cands:
            self.h.free_pages(i, [data.draw(st.sampled_from(cands))])

    @rule(i=SIDE)
    def free_group_begin(self, i) -> None:
        if self.h.side(i).group is None:
            self.h.group_begin(i)

    @rule(i=SIDE)
    def free_group_end(self, i) -> None:
        if self.h.side(i).group is not None:
            self.h.group_end(i)

    @rule(urgent=st.booleans())
    def flush(self, urgent) -> None:
        self.h.flush(urgent)

    @rule(i=SIDE, coin=st.integers(0, 3))
    def clear(self, i, coin) -> None:
        if coin == 0:  # clear is drastic: only one draw in four does it
            self.h.clear(i)

    @precondition(lambda self: self.CONFIG.lazy)
    @rule(data=st.data())
    def launch_forward(self, data) -> None:
        toks = self.h.side(0).live_tokens()
        loc = None
        if toks and data.draw(st.booleans(), label="writes"):
            loc = data.draw(st.lists(st.sampled_from(toks), min_size=1, max_size=4, unique=True))
        self.h.launch_forward(loc)

    @precondition(lambda self: any(not e.fired for e in self.h.model.events.values()))
    @rule(data=st.data())
    def complete_forward(self, data) -> None:
        unfired = [t for t, e in self.h.model.events.items() if not e.fired]
        self.h.model.events[data.draw(st.sampled_from(unfired))].fired = True

    @precondition(lambda self: self.CONFIG.lazy)
    @rule()
    def retire_completed(self) -> None:
        self.h.retire_completed()

    @invariant()
    def matches_model(self) -> None:
        self.h.check()

    def teardown(self) -> None:
        self.h.drain()


CONFIGS = [
    Config(full_grow=g, page_size=ps, lazy=lazy, n_full=24 if ps == 1 else 8)
    for g in ("up", "down")
    for ps in (1, 8)
    for lazy in (False, True)
]


def cfg_id(c: Config) -> str:
    return f"full-{c.full_grow}-ps{c.page_size}-{'lazy' if c.lazy else 'eager'}"


def run_machine(cfg: Config, examples: int, steps: int) -> None:
    name = f"Machine_{cfg_id(cfg).replace('-', '_')}"
    machine = type(name, (AllocatorMachine,), {"CONFIG": cfg})
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=steps,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        ),
    )


@pytest.fixture
def torch_ops(monkeypatch):
    """Run the pool's byte moves and translations with the torch reference ops (fast);
    the Triton kernels (interpreted on CPU) are exercised by the ``*_triton`` tests."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")


@pytest.mark.parametrize("cfg", CONFIGS, ids=cfg_id)
def test_allocator_matches_model(cfg: Config, torch_ops) -> None:
    run_machine(cfg, examples=10, steps=25)


@pytest.mark.parametrize("cfg", [CONFIGS[2], CONFIGS[5]], ids=cfg_id)
def test_allocator_matches_model_triton(cfg: Config) -> None:
    """The same with the pool's Triton kernels (under the interpreter on CPU)."""
    run_machine(cfg, examples=3, steps=15)


# ============================================================== seeded random walks


def random_walk(h: Harness, rng: random.Random, ops: int, *, check_every: int = 1) -> None:
    """Seeded traffic with a fixed op mix that keeps holes, flushes and forwards frequent.

    The mix leans towards frees while a side is nearly full, so the walk hovers around
    the frontier without spending most of its steps on allocations that cannot fit.
    """
    lazy = h.cfg.lazy
    for step in range(ops):
        i = 0 if rng.random() < 0.6 else 1
        if not h.freeable(i) and h.model.sched_pages(h.side(i)) == 0:
            i = 1 - i  # this side is empty and squeezed out: let the other side free
        s, ps = h.side(i), h.side(i).ps
        cands = h.freeable(i)
        r = rng.random()
        if cands and h.model.avail_pages(s) < 3 and rng.random() < 0.6:
            r = 0.5  # nearly full: free
        if s.group is not None and rng.random() < 0.25:
            r = 0.75  # groups stay open for a few steps only
        if r < 0.3 or not cands:
            n = rng.choice([1, 1, 2, 3, 5]) * ps
            h.alloc(i, n if rng.random() < 0.9 else h.amount(i, rng.choice(["sched", "sched+1"])))
        elif r < 0.42:
            reqs = h.requests[i]
            olds = rng.sample(sorted(reqs), min(len(reqs), rng.randint(0, 2)))
            batch = [(q, rng.randint(0, 2 * ps + 1)) for q in olds]
            if len(reqs) < MAX_REQUESTS:
                batch.append((None, rng.randint(1, 2 * ps + 1)))
            if not batch:
                pass
            elif rng.random() < 0.5:
                h.alloc_extend(i, batch, rng.choice([torch.int64, torch.int32]))
            else:
                h.alloc_decode(i, [q for q, _ in batch])
        elif r < 0.72:
            in_reqs = {t // ps for toks in h.requests[i].values() for t in toks}
            spare = [v for v in cands if v not in in_reqs]
            pool = spare if spare and rng.random() < 0.95 else cands  # let requests live on
            k = min(len(pool), rng.randint(1, 4))
            h.free_pages(i, rng.sample(pool, k), rng.choice(["int64", "int32", "numpy"]))
        elif r < 0.78:
            if s.group is None:
                h.group_begin(i)
            else:
                h.group_end(i)
        elif r < 0.90 or (not lazy and r > 0.91):
            h.flush(urgent=rng.random() < 0.3)
        elif r < 0.91:
            h.clear(i)
        elif lazy and r < 0.955:
            toks = h.side(0).live_tokens()
            write = toks and rng.random() < 0.6
            h.launch_forward(rng.sample(toks, min(len(toks), rng.randint(1, 3))) if write else None)
        else:
            for ev in h.model.events.values():
                ev.fired = ev.fired or rng.random() < 0.5
            if rng.random() < 0.5:
                h.retire_completed()
        if step % check_every == 0:
            h.check()
    h.check()
    h.drain()


@pytest.mark.parametrize("cfg", CONFIGS, ids=cfg_id)
def test_seeded_walk_matches_model(cfg: Config, torch_ops) -> None:
    # a move cap of 1 (every non-urgent flush is partial) and the default cap
    cfg = Config(
        cfg.full_grow,
        cfg.page_size,
        cfg.lazy,
        1 if cfg.page_size == 1 else 4096,
        n_full=cfg.n_full,
        n_mamba=cfg.n_mamba,
    )
    h = Harness(cfg)
    random_walk(h, random.Random(zlib.crc32(cfg_id(cfg).encode()) ^ 0xC0FFEE), 250)


def serving_walk(h: Harness, rng: random.Random, steps: int) -> None:
    """Request lifecycles as a serving engine drives them: admit (extend from an empty
    prefix, plus one state slot), decode rounds, chunked extends, finish (free every token
    of a request and its slot). Keeps partial last pages alive, so the page-tail reuse of
    ``alloc_extend``/``alloc_decode`` is exercised at every page size."""
    ps = h.side(0).ps
    for _ in range(steps):
        reqs = h.requests[0]
        r = rng.random()
        if r < 0.25 and len(reqs) < MAX_REQUESTS or not reqs:
            new = [(None, rng.randint(1, 3 * ps)) for _ in range(rng.randint(1, 2))]
            if h.alloc_extend(0, new) is not None:
                h.alloc(1, len(new))
        elif r < 0.6:
            h.alloc_decode(0, sorted(reqs))
        elif r < 0.75:
            rids = rng.sample(sorted(reqs), rng.randint(1, len(reqs)))
            h.alloc_extend(0, [(q, rng.randint(0, 2 * ps)) for q in rids])
        elif r < 0.9:
            rid = rng.choice(sorted(reqs))
            h.free(0, list(reversed(reqs[rid])), rng.choice(["int64", "int32"]))
            if h.side(1).v2p:
                h.free_pages(1, [rng.choice(sorted(h.side(1).v2p))])
        else:
            h.flush(urgent=rng.random() < 0.3)
        h.check()
    h.drain()


@pytest.mark.parametrize("cfg", [c for c in CONFIGS if c.page_size == 8], ids=cfg_id)
def test_serving_walk_matches_model(cfg: Config, torch_ops) -> None:
    cfg = Config(cfg.full_grow, 8, cfg.lazy, n_full=14, n_mamba=10)
    h = Harness(cfg)
    serving_walk(h, random.Random(zlib.crc32(cfg_id(cfg).encode())), 150)


# ======================================================= worked geometry (§2.7)


def ref_specs(full_grow: str = "up", full_layers: int = 2, mamba_layers: int = 2):
    other = "down" if full_grow == "up" else "up"
    full = ukv.MHASpec("full", full_layers, 2, 4, torch.float16, grow=full_grow)
    mamba = ukv.MambaSpec(
        "mamba", mamba_layers, ((4, 3),), torch.float32, (2, 2, 2), torch.float32, grow=other
    )
    return full, mamba


def ref_pool(n_full: int = 64, n_mamba: int = 16, *, full_grow: str = "up", **kw):
    full, mamba = ref_specs(full_grow)
    total = n_full * full.entry_bytes + n_mamba * mamba.entry_bytes
    kw.setdefault("device", "cpu")
    pool = ukv.UnifiedKVPool(total, [full, mamba], **kw)
    return pool, pool.allocator("full"), pool.allocator("mamba")


def test_worked_geometry_full_up_mamba_down() -> None:
    full, mamba = ref_specs("up")
    assert (full.entry_bytes, mamba.entry_bytes) == (64, 160)
    pool, fa, ma = ref_pool()
    assert pool.total_bytes == 64 * 64 + 16 * 160 == 6656
    assert pool.reserved_floor == 160
    assert (pool.max_slots("full"), pool.min_slot_index("full")) == (104, 3)
    assert (pool.max_slots("mamba"), pool.min_slot_index("mamba")) == (41, 1)
    # full: gap (41*160 - 3*64) // 64 = 6368 // 64 = 99 (index room 101)
    assert (fa.watermark, fa.available_size(), fa.schedulable_available_size()) == (3, 99, 99)
    assert pool._arena.free_ids(0).tolist() == list(range(3, 104))
    # mamba: 6368 // 160 = 39 (index room 40)
    assert (ma.watermark, ma.available_size()) == (40, 39)
    assert pool._arena.free_ids(1).tolist() == list(range(1, 41))
    assert pool.stats().free_gap_bytes == 6368
    assert fa.allocated_count() == ma.allocated_count() == 0
    pool.check_invariants()
    # Each side converts the shared gap with its own page size: 3 mamba slots cost 480 B.
    assert ma.alloc(3).tolist() == [1, 2, 3]
    assert fa.available_size() == (6368 - 480) // 64 == 92
    assert ma.available_size() == 36
    assert fa.alloc(93) is None
    assert fa.alloc(92) is not None
    assert fa.available_size() == ma.available_size() == 0
    pool.check_invariants()


def test_worked_geometry_reversed() -> None:
    # full down: pages (…, 103], top byte 104*64 = 6656; mamba up from slot 1 (byte 160).
    pool, fa, ma = ref_pool(full_grow="down")
    assert (fa.watermark, ma.watermark) == (103, 1)
    gap = 104 * 64 - 1 * 160
    assert pool.stats().free_gap_bytes == gap == 6496
    assert fa.available_size() == min(gap // 64, 103 + 1 - 3) == 101
    assert ma.available_size() == min(gap // 160, 41 - 1) == 40
    assert fa.alloc(3).tolist() == [3, 4, 5]
    assert fa.v2p[[3, 4, 5]].tolist() == [101, 102, 103]  # a fresh extension is ascending
    assert ma.available_size() == (gap - 3 * 64) // 160 == 39
    pool.check_invariants()


# ================================================ TestMultiEndedAllocator (§10)


def stamp_full(pool, ids: torch.Tensor, base: float = 0.0) -> None:
    """Write K = id + base, V = -(id + base) at every layer of these virtual tokens."""
    fa = pool.allocator("full")
    spec = pool.spec("full")
    loc = fa.translate_kv_loc(ids)
    val = (ids.to(torch.float16) + base)[:, None, None].expand(-1, spec.head_num, spec.head_dim)
    for layer in range(spec.layer_num):
        pool.set_kv("full", layer, loc, val.contiguous(), (-val).contiguous())


def assert_full_stamps(pool, ids: torch.Tensor, base: float = 0.0) -> None:
    fa = pool.allocator("full")
    k, v = pool.kv_views("full")
    loc = fa.translate_kv_loc(ids)
    want = ids.to(torch.float16) + base
    for layer in range(len(k)):
        got_k = k[layer][loc // fa.page_size, loc % fa.page_size]
        got_v = v[layer][loc // fa.page_size, loc % fa.page_size]
        assert torch.equal(got_k, want[:, None, None].expand_as(got_k))
        assert torch.equal(got_v, -want[:, None, None].expand_as(got_v))


def stamp_mamba(pool, ids: torch.Tensor) -> None:
    conv, temporal = pool.state_views("mamba")
    phys = pool.allocator("mamba").translate_kv_loc(ids)
    for c in conv:
        c[:, phys] = ids.to(c.dtype).view(1, -1, *[1] * (c.dim() - 2))
    temporal[:, phys] = -ids.to(temporal.dtype).view(1, -1, *[1] * (temporal.dim() - 2))


def assert_mamba_stamps(pool, ids: torch.Tensor) -> None:
    conv, temporal = pool.state_views("mamba")
    phys = pool.allocator("mamba").translate_kv_loc(ids)
    for c in conv:
        got = c[:, phys]
        assert torch.equal(got, ids.to(c.dtype).view(1, -1, *[1] * (c.dim() - 2)).expand_as(got))
    got = temporal[:, phys]
    want = -ids.to(temporal.dtype).view(1, -1, *[1] * (temporal.dim() - 2))
    assert torch.equal(got, want.expand_as(got))


def assert_bound(alloc, ids: torch.Tensor) -> None:
    pages = torch.unique(ids // alloc.page_size)
    phys = alloc.v2p[pages]
    assert (phys >= alloc.min_page_index).all()
    assert torch.equal(alloc.p2v[phys], pages)


def test_basic_alloc_free_compaction() -> None:
    pool, fa, _ = ref_pool()
    a, b, c = fa.alloc(3), fa.alloc(5), fa.alloc(2)
    assert (a.tolist(), b.tolist(), c.tolist()) == ([3, 4, 5], list(range(6, 11)), [11, 12])
    for ids in (a, b, c):
        stamp_full(pool, ids)
    pool.check_invariants()
    fa.free(b)
    # the vacated band [8, 13) holds survivors 11, 12; they move into holes 6, 7
    assert fa.watermark == 8
    assert fa.v2p[[3, 4, 5, 11, 12]].tolist() == [3, 4, 5, 6, 7]
    assert_bound(fa, a)
    assert_bound(fa, c)
    assert_full_stamps(pool, a)
    assert_full_stamps(pool, c)
    assert pool.stats().pages_moved == 2
    pool.check_invariants()
    fa.free(c)
    fa.free(a)
    assert fa.allocated_count() == 0 and fa.watermark == 3
    pool.check_invariants()


def test_grow_down_side() -> None:
    pool, _, ma = ref_pool()
    a, b, c = ma.alloc(2), ma.alloc(3), ma.alloc(1)
    assert (a.tolist(), b.tolist(), c.tolist()) == ([1, 2], [3, 4, 5], [6])
    assert ma.v2p[1:7].tolist() == [39, 40, 36, 37, 38, 35]  # fresh extensions ascend
    for ids in (a, b, c):
        stamp_mamba(pool, ids)
    ma.free(b)
    assert ma.watermark == 37 and ma.v2p[6].item() == 38  # survivor 35 -> hole 38
    assert_bound(ma, a)
    assert_bound(ma, c)
    assert_mamba_stamps(pool, a)
    assert_mamba_stamps(pool, c)
    pool.check_invariants()
    ma.free(torch.cat([a, c]))
    assert ma.allocated_count() == 0 and ma.watermark == 40
    pool.check_invariants()


@pytest.mark.parametrize("full_grow", ["up", "down"])
def test_byte_frontier_coordination(full_grow) -> None:
    pool, fa, ma = ref_pool(8, 8, full_grow=full_grow)
    before = fa.available_size()
    assert ma.alloc(3) is not None
    assert fa.available_size() < before
    avail = fa.available_size()
    snap = (fa.v2p.clone(), pool._arena.free_ids(0).tolist(), fa.watermark)
    assert fa.alloc(avail + 1) is None
    assert torch.equal(fa.v2p, snap[0]) and pool._arena.free_ids(0).tolist() == snap[1]
    assert fa.watermark == snap[2]
    assert fa.alloc(avail) is not None
    assert ma.available_size() == 0 and ma.alloc(1) is None
    pool.check_invariants()


def test_randomized_reference_seed(torch_ops) -> None:
    """§10 ``randomized``: seed 0xC0FFEE, 48/24, 400 ops on the reference geometry, with
    the model checking every step (eager, page size 1, full up / mamba down)."""
    h = Harness(Config("up", 1, False, geometry="ref", n_full=48, n_mamba=24))
    rng = random.Random(0xC0FFEE)
    for _ in range(400):
        i = 0 if rng.random() < 0.6 else 1
        live = sorted(h.side(i).v2p)
        if rng.random() < 0.55 or not live:
            h.alloc(i, rng.randint(1, 5))
        else:
            h.free_pages(i, rng.sample(live, rng.randint(1, len(live))))
        h.check()
    h.drain()


def test_lazy_retract_churn_no_ghost() -> None:
    """§10: lazy full (64/16), move cap 2, 3000 ops with seed 0x5373, non-urgent flushes
    half the time; after a drain and 64 flushes nothing is left (no ghost pages)."""
    h = Harness(
        Config("up", 1, True, max_moves=2, geometry="ref", n_full=64, n_mamba=16, device="meta")
    )
    rng = random.Random(0x5373)
    fa = h.allocs[0]
    for step in range(3000):
        live = sorted(h.side(0).v2p)
        avail = fa.available_size()
        if (rng.random() < 0.55 and avail) or not live:
            if avail:
                h.alloc(0, rng.randint(1, min(5, avail)))
        else:
            h.free_pages(0, rng.sample(live, rng.randint(1, min(len(live), 6))))
        if rng.random() < 0.5:
            h.flush(urgent=False)
        if step % 100 == 0:
            h.check()
        else:
            h.pool.check_invariants()
    h.check()
    h.free_pages(0, sorted(h.side(0).v2p))
    for _ in range(64):
        h.flush(urgent=False)
    h.check()
    assert fa.allocated_count() == 0
    assert h.pool._arena.pool_state(0)[1:] == (0, 0, 0, 0)


@pytest.mark.parametrize("lazy", [False, True])
def test_double_free_raises(lazy) -> None:
    pool, fa, _ = ref_pool(lazy=lazy)
    a = fa.alloc(3)
    fa.free(a)
    v2p, free = fa.v2p.clone(), pool._arena.free_ids(0).tolist()
    with pytest.raises(DoubleFreeError):
        fa.free(a)
    assert torch.equal(fa.v2p, v2p) and pool._arena.free_ids(0).tolist() == free
    pool.check_invariants()


# --------------------------------------------------------------------------- translate


@pytest.mark.parametrize("page_size", [1, 8])
def test_translate_out_in_place(page_size) -> None:
    pool, fa, _ = ref_pool(page_size=page_size)
    v = fa.alloc(4 * page_size)
    ref = fa.v2p[v // page_size] * page_size + v % page_size
    out = torch.full_like(v, -5)
    ptr = out.data_ptr()
    got = fa.translate_kv_loc(v, out=out)
    assert got is out and out.data_ptr() == ptr
    assert torch.equal(out, ref)
    fresh = fa.translate_kv_loc(v)
    assert torch.equal(fresh, ref) and fresh.dtype == torch.int64
    # a fresh result owns its memory: it is not a view of v2p
    assert fresh.untyped_storage().data_ptr() != fa.v2p.untyped_storage().data_ptr()
    # int32 ids translate too
    assert torch.equal(fa.translate_kv_loc(v.to(torch.int32)), ref)


@pytest.mark.parametrize("page_size", [1, 8])
def test_translate_out_rejects_wrong_dtype_and_shape(page_size) -> None:
    pool, fa, _ = ref_pool(page_size=page_size)
    v = fa.alloc(2 * page_size)
    with pytest.raises(ArgumentError):
        fa.translate_kv_loc(v, out=torch.empty(v.numel(), dtype=torch.int32))
    with pytest.raises(ArgumentError):
        fa.translate_kv_loc(v, out=torch.empty(v.numel() + 1, dtype=torch.int64))


@pytest.mark.parametrize("page_size", [1, 8])
def test_translate_out_aliasing_input(page_size) -> None:
    pool, fa, _ = ref_pool(page_size=page_size)
    v = fa.alloc(3 * page_size)
    fa.free(fa.alloc(page_size))  # some history
    expected = fa.translate_kv_loc(v)
    buf = v.clone()
    ptr = buf.data_ptr()
    got = fa.translate_kv_loc(buf, out=buf)
    assert got is buf and buf.data_ptr() == ptr
    assert torch.equal(buf, expected)


@pytest.mark.parametrize("page_size", [1, 8])
def test_translate_on_buffer_slice(page_size) -> None:
    pool, fa, _ = ref_pool(page_size=page_size)
    v = fa.alloc(2 * page_size)
    buf = torch.zeros(4 * v.numel(), dtype=torch.int64)
    buf[: v.numel()] = v
    head = buf[: v.numel()]
    got = fa.translate_kv_loc(head, out=head)
    assert got.data_ptr() == buf.data_ptr()
    assert torch.equal(buf[: v.numel()], fa.v2p[v // page_size] * page_size + v % page_size)
    assert (buf[v.numel() :] == 0).all()


@pytest.mark.parametrize("page_size", [1, 8])
@pytest.mark.parametrize("lazy", [False, True])
def test_translate_clamps_tombstones(page_size, lazy) -> None:
    pool, fa, _ = ref_pool(page_size=page_size, lazy=lazy)
    v = fa.alloc(3 * page_size)
    dead = v[:page_size]
    fa.free(dead)  # tombstones the first page
    assert (fa.v2p[dead // page_size] == -1).all()
    ids = torch.cat([v, torch.tensor([-1, 0, fa.num_pages * page_size + 1])])
    for got in (fa.translate_kv_loc(ids), fa.translate_kv_loc(ids, out=torch.empty_like(ids))):
        assert (got >= 0).all()
        assert (got[:page_size] == 0).all()
        assert (got[page_size : 3 * page_size] > 0).all()
        assert (got[3 * page_size :] == 0).all()


# ============================================ TestPagedMultiEndedAllocator (§10)


def paged_pool(n_full_pages: int = 16, n_swa_pages: int = 8, **kw):
    """Full up and swa down, both MHA L=2, H=2, D=4 fp16 (64 B), page size 8."""
    full = ukv.MHASpec("full", 2, 2, 4, torch.float16, grow="up")
    swa = ukv.MHASpec("swa", 2, 2, 4, torch.float16, grow="down")
    total = (n_full_pages + n_swa_pages) * 8 * 64
    kw.setdefault("device", "cpu")
    pool = ukv.UnifiedKVPool(total, [full, swa], page_size=8, **kw)
    return pool, pool.allocator("full"), pool.allocator("swa")


def test_paged_alloc_token_aligned() -> None:
    _, fa, _ = paged_pool()
    ids = fa.alloc(16)
    assert ids.numel() == 16 and ids.dtype == torch.int64
    for page in ids.view(2, 8):
        p = int(page[0]) // 8
        assert page.tolist() == list(range(p * 8, p * 8 + 8))


def test_paged_alloc_non_aligned_raises() -> None:
    pool, fa, _ = paged_pool()
    with pytest.raises(ArgumentError, match="5"):
        fa.alloc(5)
    assert fa.allocated_count() == 0
    pool.check_invariants()


def test_paged_v2p_sized_by_pages() -> None:
    pool, fa, sa = paged_pool(n_full_pages=10)
    for a in (fa, sa):
        assert a.num_pages == pool.total_bytes // 512 == 18
        assert a.v2p.numel() == a.p2v.numel() == a.num_pages + 1
    assert pool.reserved_floor == 512 and fa.min_page_index == 1


def test_paged_compaction_relocates_whole_pages() -> None:
    pool, fa, _ = paged_pool()
    a, b, c = fa.alloc(8), fa.alloc(8), fa.alloc(8)
    for ids in (a, b, c):
        stamp_full(pool, ids)
    fa.free(b)
    assert fa.v2p[c[0] // 8].item() == 2  # c's page moved into b's
    assert_bound(fa, a)
    assert_bound(fa, c)
    assert_full_stamps(pool, a)
    assert_full_stamps(pool, c)
    pool.check_invariants()


def test_paged_free_unique_by_page() -> None:
    pool, fa, _ = paged_pool()
    ids = fa.alloc(16)
    assert fa.allocated_count() == 16 and pool.stats().sub_pools[0].span_pages == 2
    fa.free(ids)  # 16 tokens, 2 pages: each page freed once
    assert fa.allocated_count() == 0 and pool.stats().sub_pools[0].span_pages == 0
    pool.check_invariants()


def test_paged_index_space_overflow() -> None:
    pool, fa, _ = paged_pool(n_full_pages=4)
    avail = fa.available_size()
    assert avail % 8 == 0 and fa.alloc(avail) is not None
    assert fa.alloc(8) is None
    pool.check_invariants()


def test_paged_alloc_extend_binds_v2p_p2v() -> None:
    pool, fa, _ = paged_pool()
    free_before = pool._arena.free_ids(0).tolist()
    head = free_before[:2]
    wm, count = fa.watermark, fa.allocated_count()
    z = torch.zeros(1, dtype=torch.int64)
    s = torch.tensor([16])
    out = fa.alloc_extend(z, z, s, s, torch.tensor([-1]), 16)
    assert out.tolist() == [head[0] * 8 + k for k in range(8)] + [head[1] * 8 + k for k in range(8)]
    assert_bound(fa, out)
    assert fa.allocated_count() == count + 16
    assert pool.stats().sub_pools[0].span_pages == 2 and fa.watermark == wm + 2
    assert pool._arena.free_ids(0).tolist() == free_before[2:]  # taken from the front


def test_paged_alloc_decode_binds_on_page_wrap() -> None:
    pool, fa, _ = paged_pool()
    first = fa.alloc(8)
    head = int(pool._arena.free_ids(0)[0])
    wm, nfree = fa.watermark, len(pool._arena.free_ids(0))
    s = torch.tensor([9])
    out = fa.alloc_decode(s, s, first[-1:])
    assert out.tolist() == [head * 8]
    assert fa.v2p[head].item() == wm and fa.p2v[wm].item() == head
    assert fa.allocated_count() == 16 and fa.watermark == wm + 1
    assert len(pool._arena.free_ids(0)) == nfree - 1


def test_paged_alloc_decode_no_op_when_no_new_page() -> None:
    pool, fa, _ = paged_pool()
    first = fa.alloc(8)
    wm, nfree = fa.watermark, pool._arena.free_ids(0).tolist()
    s = torch.tensor([7])  # the 7th token continues the page after token 5
    out = fa.alloc_decode(s, s, first[5:6])
    assert out.tolist() == [int(first[6])]
    assert fa.watermark == wm and fa.allocated_count() == 8
    assert pool._arena.free_ids(0).tolist() == nfree


def test_paged_translate_round_trip_and_tombstone() -> None:
    pool, fa, _ = paged_pool()
    v = fa.alloc(16)
    phys = fa.translate_kv_loc(v)
    assert phys.view(2, 8)[:, 0].tolist() == [
        int(fa.v2p[int(v[0]) // 8]) * 8,
        int(fa.v2p[int(v[8]) // 8]) * 8,
    ]
    assert (phys.view(2, 8) - phys.view(2, 8)[:, :1] == torch.arange(8)).all()
    assert fa.allocated_count() == 16


# ========================================================== TestLazyCompaction (§10)


def lazy_pool(**kw):
    return ref_pool(lazy=True, **kw)


def span(pool, i: int = 0) -> tuple[int, int, int, int, int]:
    return pool._arena.pool_state(i)


def test_lazy_state_initialized() -> None:
    pool, fa, _ = lazy_pool()
    assert span(pool) == (fa.min_page_index, 0, 0, 0, 0)


def test_lazy_alloc_increments_live_page_count() -> None:
    pool, fa, _ = lazy_pool()
    assert fa.alloc(8).numel() == 8
    wm, live, holes, pending, _ = span(pool)
    assert (live, holes, pending) == (8, 0, 0) and fa.allocated_count() == 8


def test_lazy_free_boundary_then_urgent_flush() -> None:
    pool, fa, _ = lazy_pool()
    a = fa.alloc(3)
    wm = fa.watermark
    fa.free(a[-1:])
    assert span(pool)[:3] == (wm, 2, 1)  # the watermark stays, one hole
    pool.flush(urgent=True)
    assert span(pool)[:3] == (wm - 1, 2, 0)
    pool.check_invariants()


def test_lazy_free_non_boundary_pushes_hole() -> None:
    pool, fa, _ = lazy_pool()
    a = fa.alloc(5)
    wm = fa.watermark
    fa.free(a[2:3])
    assert span(pool)[:3] == (wm, 4, 1)


def test_lazy_free_inward_walk() -> None:
    pool, fa, _ = lazy_pool()
    a = fa.alloc(5)
    wm = fa.watermark
    for k in (2, 4, 3):
        fa.free(a[k : k + 1])
    assert span(pool)[:3] == (wm, 2, 3)
    pool.flush(urgent=True)
    assert span(pool)[:3] == (wm - 3, 2, 0)
    pool.check_invariants()


def test_lazy_alloc_drains_holes_first() -> None:
    pool, fa, _ = lazy_pool()
    a = fa.alloc(5)
    wm = fa.watermark
    holes = fa.v2p[a[[1, 3]]].tolist()
    fa.free(a[1:2])
    fa.free(a[3:4])
    b = fa.alloc(2)
    assert fa.watermark == wm and span(pool)[2] == 0
    assert fa.v2p[b].tolist() == holes  # FIFO: in the order they were freed
    c = fa.alloc(1)
    assert fa.watermark == wm + 1 and fa.v2p[c].tolist() == [wm]
    pool.check_invariants()


def test_lazy_available_size_includes_holes() -> None:
    pool, fa, _ = lazy_pool()
    initial = fa.available_size()
    a = fa.alloc(5)
    fa.free(a[:3])
    assert span(pool)[2] == 3
    assert fa.available_size() == initial - 2


def test_lazy_flush_compacts_holes_into_gap() -> None:
    pool, fa, _ = lazy_pool()
    a = fa.alloc(5)
    stamp_full(pool, a)
    wm = fa.watermark
    fa.free(a[1:2])
    assert pool.flush(urgent=True) >= 1
    assert fa.watermark < wm and span(pool)[1:3] == (4, 0)
    keep = a[[0, 2, 3, 4]]
    assert_full_stamps(pool, keep)
    assert_bound(fa, keep)
    pool.check_invariants()


def test_lazy_v2p_p2v_identity_after_flush() -> None:
    pool, fa, _ = lazy_pool()
    a = fa.alloc(8)
    fa.free(a[[1, 3, 5]])
    pool.flush(urgent=True)
    live = a[[0, 2, 4, 6, 7]]
    assert torch.equal(fa.p2v[fa.v2p[live]], live)
    assert span(pool)[1:3] == (5, 0)
    pool.check_invariants()


def test_lazy_vs_eager_equivalence(torch_ops) -> None:
    """§10: the same trace under eager and lazy gives the same ids and data."""
    runs = []
    for lazy in (False, True):
        pool, fa, _ = ref_pool(lazy=lazy)
        rng = random.Random(42)
        live: list[int] = []
        ids_seen = []
        for _ in range(200):
            if rng.random() < 0.6 or not live:
                got = fa.alloc(rng.randint(1, 6))
                ids_seen.append(None if got is None else got.tolist())
                if got is not None:
                    stamp_full(pool, got)
                    live += got.tolist()
            else:
                k = rng.randint(1, min(4, len(live)))
                live.sort()
                gone, live = live[:k], live[k:]
                fa.free(torch.tensor(gone))
        if lazy:
            pool.flush(urgent=True)
        pool.check_invariants()
        assert_full_stamps(pool, torch.tensor(sorted(live)))
        runs.append((ids_seen, sorted(live)))
    assert runs[0] == runs[1]


def test_lazy_non_urgent_stops_at_write_set_blocker() -> None:
    pool, fa, _ = lazy_pool()
    a = fa.alloc(5)
    ev = FakeEvent()
    fa.free(a[1:2])
    pool.set_inflight_forward(ev, a[-1:])  # the forward writes the topmost survivor
    assert pool.flush(urgent=False) == 0
    assert span(pool)[2:4] == (1, 0)
    ev.fired = True
    assert pool.flush(urgent=False) >= 1
    assert span(pool)[2:4] == (0, 0)
    pool.check_invariants()


def test_lazy_non_urgent_read_race_uses_pending_reuse() -> None:
    pool, fa, _ = lazy_pool()
    a = fa.alloc(5)
    stamp_full(pool, a)
    ev = FakeEvent()
    fa.free(a[1:2])
    pool.set_inflight_forward(ev, None)  # no writes, but the forward may still read
    moves = pool.flush(urgent=False)
    assert moves >= 1
    assert span(pool)[3] == moves  # the vacated pages wait for the forward
    wm = fa.watermark
    assert fa.alloc(1) is not None and fa.watermark == wm + 1  # pending pages are not reused
    ev.fired = True
    pool.flush(urgent=False)
    assert span(pool)[3] == 0
    assert_full_stamps(pool, a[[0, 2, 3, 4]])
    pool.check_invariants()


def test_lazy_pending_reuse_released_by_urgent_flush() -> None:
    pool, fa, _ = lazy_pool()
    a = fa.alloc(6)
    pool.set_inflight_forward(FakeEvent(), None)
    fa.free(a[[0, 2]])
    assert pool.flush(urgent=False) >= 1 and span(pool)[3] > 0
    pool.flush(urgent=True)  # waits on the forward: everything packs
    assert span(pool)[1:] == (4, 0, 0, 4)
    pool.check_invariants()


def test_lazy_flush_opportunistic() -> None:
    pool, fa, _ = lazy_pool()
    assert pool.flush() == 0
    a = fa.alloc(3)
    fa.free(a[:1])
    assert pool.flush() >= 1
    assert span(pool)[1:] == (2, 0, 0, 2)


def test_eager_flush_is_zero() -> None:
    pool, fa, _ = ref_pool()
    a = fa.alloc(3)
    fa.free(a[:1])
    assert pool.flush() == 0 and pool.flush(urgent=True) == 0


# ======================================================= §12: bugs we must not have


def test_pending_batches_sharing_an_event_are_all_kept() -> None:
    """§12.3: two non-urgent flushes under one unfired event (move cap 1) must keep both
    batches of vacated pages; after the event fires they are absorbed (no ghost)."""
    pool, fa, _ = ref_pool(lazy=True, max_moves_per_flush=1)
    a = fa.alloc(8)
    fa.free(a[[0, 2]])  # two interior holes
    ev = FakeEvent()
    pool.set_inflight_forward(ev, None)
    assert pool.flush(urgent=False) == 1
    assert pool.flush(urgent=False) == 1
    assert span(pool)[3] == 2  # both batches pending
    ev.fired = True
    pool.flush(urgent=False)
    for _ in range(3):
        pool.flush(urgent=True)
    wm, live, holes, pending, sp = span(pool)
    assert (live, holes, pending, sp) == (6, 0, 0, 6)
    assert wm == fa.min_page_index + 6
    pool.check_invariants()


@pytest.mark.parametrize("full_grow", ["up", "down"])
@pytest.mark.parametrize("lazy", [False, True])
def test_frontier_exact_in_bytes(full_grow, lazy) -> None:
    """§12.4: the frontier is checked exactly in bytes in both directions (entries of 64 B
    and 160 B do not divide each other); no band ever crosses the other."""
    for k in range(0, 25, 3):
        pool, fa, ma = ref_pool(8, 8, full_grow=full_grow, lazy=lazy)
        assert fa.alloc(k) is not None
        n = ma.available_size()
        assert ma.alloc(n + 1) is None
        assert ma.alloc(n) is not None
        up, down = (fa, ma) if full_grow == "up" else (ma, fa)
        up_high = up.watermark * up.page_bytes
        down_low = (down.watermark + 1) * down.page_bytes
        assert up_high <= down_low
        assert pool.stats().free_gap_bytes == down_low - up_high < ma.page_bytes
        assert fa.available_size() == (down_low - up_high) // fa.page_bytes
        pool.check_invariants()


def test_alloc_decode_at_page_size_one_takes_a_slot() -> None:
    """§12.8: at page size 1 every decode token is a new page, counted on the host."""
    pool, fa, _ = ref_pool()
    first = fa.alloc(2)
    s = torch.tensor([3, 1])
    out = fa.alloc_decode(s, s, torch.tensor([int(first[-1]), -1]))
    assert out.tolist() == [5, 6]
    assert fa.allocated_count() == 4
    assert_bound(fa, out)
    pool.check_invariants()


def test_padding_sink_holds_a_whole_page() -> None:
    """§12.2: full with 4 layers and 2 KiB/token at page size 16 next to a 4.8 KB mamba
    entry: a store to full token 0 (the padding sink) must not touch any mamba slot."""
    full = ukv.MHASpec("full", 4, 2, 64, torch.float16, grow="up")
    mamba = ukv.MambaSpec("mamba", 1, ((300,),), torch.float32, (900,), torch.float32, grow="down")
    assert (full.entry_bytes, mamba.entry_bytes) == (2048, 4800)
    pool = ukv.UnifiedKVPool(3 * 16 * 2048 + 10 * 4800, [full, mamba], page_size=16, device="cpu")
    assert pool.reserved_floor == 16 * 2048
    assert pool.min_slot_index("mamba") * 4800 >= pool.reserved_floor
    ma = pool.allocator("mamba")
    slots = ma.alloc(ma.available_size())
    stamp_mamba(pool, slots)
    loc = torch.zeros(16, dtype=torch.int64)
    loc[1:] = torch.arange(1, 16)  # the whole page-0 envelope
    kv = torch.full((16, 2, 64), 7.0)
    for layer in range(4):
        pool.set_kv("full", layer, loc, kv, kv)
    assert_mamba_stamps(pool, slots)
    assert (pool.raw[: pool.reserved_floor] != 0).any()  # the store did land in the sink
    pool.check_invariants()
