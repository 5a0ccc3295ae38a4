"""The seeded engine and the checker of the differential test.

:class:`Engine` builds one pool configuration, then every :meth:`Engine.step` picks one
random engine action over the public surface (requests allocated, grown by
``alloc_extend`` / ``alloc_decode`` with a host ``last_loc``, rewritten with ``set_kv``,
evicted, freed through the request table, by host ids or as queued device ids, SWA
windows released, free groups, state slots allocated / copied / freed / grouped, lazy
flushes with reported forwards whose writes land when their stand-in event completes,
offload copies, clears, and calls that must raise), applies the same action to the
:mod:`.model`, and checks the pool against the model: the live sets of every side, the
counts, the queue, the invariants, and the bytes of every touched id (every live id at
each full check).

``triggers`` switches on engine behaviours that hit the round-3 defects
(review-round3.md): ``C1`` free_swa inside a free group, ``C2`` request-table frees of
middle spans and of suffixes starting inside a page, ``C3`` a host free of ids behind a
queued free_swa of the same ids, ``C5`` more than one lazy forward in flight, ``C6``
lazy forwards that update their requests' Mamba states in place, ``C7`` a reused host
``out_cache_loc`` buffer. Without them the engine avoids those sequences.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

import ukv
from ukv.errors import ArgumentError, DoubleFreeError, InvalidIdError

from .model import DEAD, LIVE, PagedSide, StateSide
from .queued import QueuedFrees, StandInEvent

KINDS = ("mamba2", "mamba3", "swa2", "swa3")
TRIGGERS = ("C1", "C2", "C3", "C5", "C6", "C7")


@dataclass(frozen=True)
class Config:
    """One pool configuration: ``kind`` is mamba2 (full + Mamba), mamba3 (full + an MHA
    middle band + Mamba), swa2 (full + SWA bound to full's ids) or swa3 (full + SWA as
    the middle band + Mamba)."""

    kind: str
    page_size: int
    lazy: bool
    triggers: frozenset[str] = frozenset()

    @property
    def label(self) -> str:
        trig = "+" + "+".join(sorted(self.triggers)) if self.triggers else ""
        return f"{self.kind}-ps{self.page_size}-{'lazy' if self.lazy else 'eager'}{trig}"


class DiffFailure(AssertionError):
    """The pool disagreed with the model (or raised where the model did not)."""


@dataclass
class Req:
    tokens: list[int]
    row: int | None = None
    slot: int | None = None
    swa_cut: int = 0  # leading tokens whose SWA pages are released (a page multiple)
    pinned: int = 0  # reported forwards still writing its tokens
    frozen: bool = False  # a middle span was freed: no more growth


@dataclass
class Forward:
    event: StandInEvent
    reqs: list[Req]
    ids: np.ndarray
    loc: torch.Tensor


@dataclass
class Totals:
    steps: int = 0
    full_checks: int = 0
    bytes_checked: int = 0
    ops: dict[str, int] = field(default_factory=dict)


def _specs(kind: str, order: int) -> tuple[list[ukv.Spec], dict[str, int], dict[str, str] | None]:
    full = ukv.MHASpec("full", 2, 1, 4, torch.float16, grow="up")
    mamba = ukv.MambaSpec("mamba", 1, ((2, 3),), torch.float32, (2, 2), torch.float32, "down")
    if kind == "mamba2":
        return [full, mamba], {"full": 20, "mamba": 12}, None
    if kind == "mamba3":
        mid = ukv.MHASpec("mid", 1, 2, 2, torch.float16, grow="middle")
        specs = [full, mid, mamba]
        specs.insert(order % 3, specs.pop(1))  # the middle band at any spec index
        return specs, {"full": 20, "mid": 8, "mamba": 10}, None
    if kind == "swa2":
        swa = ukv.MHASpec("swa", 1, 1, 4, torch.float16, grow="down")
        return [full, swa], {"full": 20, "swa": 12}, {"swa": "full"}
    swa = ukv.MHASpec("swa", 1, 1, 4, torch.float16, grow="middle")
    specs = [full, swa, mamba]
    specs.insert(order % 3, specs.pop(1))
    return specs, {"full": 20, "swa": 12, "mamba": 10}, {"swa": "full"}


class Engine:
    """A pool of configuration ``cfg`` on ``device``, its model, and the random engine."""

    def __init__(self, cfg: Config, seed: int, device: str = "cpu") -> None:
        self.cfg = cfg
        self.seed = seed
        self.rng = random.Random(seed)
        self.gen = torch.Generator().manual_seed(seed)
        ps = cfg.page_size
        self.ps = ps
        specs, pages, bind = _specs(cfg.kind, self.rng.randrange(3))
        total = ukv.specs.reserved_floor(specs, ps)
        total += sum(pages[s.name] * s.page_bytes(ps) for s in specs)
        self.pool = pool = ukv.UnifiedKVPool(
            total, specs, page_size=ps, device=device, lazy=cfg.lazy, bind=bind
        )
        self.dev = pool.allocator("full").v2p.device
        self.swa = cfg.kind.startswith("swa")
        self.comp: Any
        self.slots: ukv.MambaSlots | None = None
        if self.swa:
            self.comp = ukv.SWAHybridAllocator(pool, "full", "swa")
            if cfg.kind == "swa3":
                self.slots = ukv.MambaSlots(pool, "mamba")
        else:
            self.comp = ukv.MambaHybridAllocator(pool, "full", "mamba")
            self.slots = self.comp.mamba_slots
        self.mid = pool.allocator("mid") if cfg.kind == "mamba3" else None
        self.table = ukv.RequestTable(self.comp, 6, 10 * ps)
        self.window = 2 * ps
        self.queue = QueuedFrees(pool)
        # The model, one side per id space (the SWA side shares full's).
        self.sides: dict[str, PagedSide] = {}
        for name in ("full", "swa", "mid"):
            if name in pool.names:
                owner = "full" if name == "swa" else name
                info = pool._arena.pool_info(pool._idx(owner))
                k, v = pool.kv_views(name)
                views: list[tuple] = [(t.shape[2:], t.dtype) for pair in zip(k, v) for t in pair]
                self.sides[name] = PagedSide(
                    name, ps, info["min_virtual_page"], info["num_virtual_pages"], views
                )
        self.state: StateSide | None = None
        if "mamba" in pool.names:
            info = pool._arena.pool_info(pool._idx("mamba"))
            conv, temporal = pool.state_views("mamba")
            sviews = [((t.shape[0], *t.shape[2:]), t.dtype) for t in [*conv, temporal]]
            self.state = StateSide(
                "mamba", info["min_virtual_page"], info["num_virtual_pages"], sviews
            )
        self.reqs: list[Req] = []
        self.mid_reqs: list[np.ndarray] = []
        self.loose_slots: list[int] = []
        self.forwards: list[Forward] = []
        self.staging = torch.zeros(64, dtype=torch.int64)
        self.touched: dict[str, set[int]] = {}
        self.totals = Totals()
        self.ops = [
            (10, self.op_new),
            (16, self.op_grow),
            (5, self.op_rewrite),
            (5, self.op_free),
            (4, self.op_evict),
            (8 if self.swa else 0, self.op_free_swa),
            (3, self.op_group),
            (6, self.op_land),
            (7 if cfg.lazy else 4, self.op_flush),
            (8 if cfg.lazy else 2, self.op_forward),
            (8 if cfg.lazy else 2, self.op_forward_done),
            (8 if self.slots is not None else 0, self.op_state),
            (4 if self.mid is not None else 0, self.op_mid),
            (3, self.op_offload),
            (3, self.op_bad),
            (0.4, self.op_clear),
        ]
        # Phases of 150 steps alternately fill the pool (frees rarer) and drain it, so
        # it runs full (allocations refused, compaction under pressure) and empties.
        frees = {self.op_free, self.op_group, self.op_evict}
        self._weights = [w for w, _ in self.ops]
        self._fill_weights = [w * 0.25 if fn in frees else w for w, fn in self.ops]

    # ----- helpers ------------------------------------------------------------------------

    def _rand(self, n: int, side: PagedSide | StateSide) -> list[torch.Tensor]:
        return [
            torch.randint(-2048, 2048, (n, *d.shape[1:]), generator=self.gen).to(d.dtype)
            for d in side.data
        ]

    def _touch(self, name: str, ids: Any) -> None:
        self.touched.setdefault(name, set()).update(int(i) for i in np.asarray(ids).reshape(-1))

    def _phys(self, name: str, ids: np.ndarray) -> torch.Tensor:
        t = torch.from_numpy(np.ascontiguousarray(ids, dtype=np.int64)).to(self.dev)
        if name == "swa":
            return self.comp.translate_loc_from_full_to_swa(t).to(torch.int64)
        if name == "mamba":
            assert self.slots is not None
            return self.slots.translate(t)
        return self.pool.allocator(name).translate_kv_loc(t)

    def _write_kv(self, name: str, ids: np.ndarray, values: list[torch.Tensor] | None = None):
        """Stamp fresh random K/V at ``ids`` of side ``name`` (pool and model)."""
        if len(ids) == 0:
            return
        side = self.sides[name]
        ids = np.asarray(ids, dtype=np.int64)
        live = side.state[ids // self.ps] == LIVE
        if not live.all():  # e.g. SWA pages already released: the engine skips them
            ids = ids[live]
            values = None if values is None else [x[torch.from_numpy(live)] for x in values]
            if len(ids) == 0:
                return
        values = self._rand(len(ids), side) if values is None else values
        phys = self._phys(name, ids)
        for layer in range(len(values) // 2):
            k, v = values[2 * layer], values[2 * layer + 1]
            self.pool.set_kv(name, layer, phys, k.to(self.dev), v.to(self.dev))
        side.write(ids, values)
        self._touch(name, ids)

    def _write_state(self, slots: np.ndarray) -> None:
        assert self.state is not None
        values = self._rand(len(slots), self.state)
        phys = self._phys("mamba", slots)
        conv, temporal = self.pool.state_views("mamba")
        for view, x in zip([*conv, temporal], values):
            view[:, phys] = x.transpose(0, 1).to(view.device)
        self.state.write(slots, values)
        self._touch("mamba", slots)

    def _bind(self, ids: np.ndarray, new_pages: np.ndarray) -> None:
        self.sides["full"].bind(new_pages)
        if self.swa:
            self.sides["swa"].bind(new_pages)

    def _kv_sides(self) -> list[str]:
        return ["full", "swa"] if self.swa else ["full"]

    def _free_req_model(self, req: Req, with_slot: bool) -> None:
        pages = self.sides["full"].pages_of(np.array(req.tokens, dtype=np.int64))
        for name in self._kv_sides():
            self.sides[name].release(pages)
        if with_slot and req.slot is not None:
            assert self.state is not None
            self.state.release(np.array([req.slot]))
            req.slot = None

    def _freeable(self) -> list[Req]:
        return [r for r in self.reqs if r.pinned == 0]

    def _count(self, name: str) -> None:
        self.totals.ops[name] = self.totals.ops.get(name, 0) + 1

    def _before_host_free(self, ids: list[int]) -> None:
        """Without the C3 trigger, a host free never overtakes a queued free of the same
        ids, nor a queued group end (it would land inside a group the caller closed): the
        queue is landed and applied first."""
        if "C3" in self.cfg.triggers or not self.queue.tickets:
            return
        want = set(ids)
        if self.queue.boundary_queued() or any(
            want.intersection(t.ids.tolist()) for t in self.queue.tickets
        ):
            for t in self.queue.tickets:
                self.queue.land(t)
            self.pool.sync_frees()

    # ----- engine actions -----------------------------------------------------------------

    def op_new(self) -> None:
        ps, rng, comp = self.ps, self.rng, self.comp
        n = rng.randint(1, 3 * ps)
        sched = comp.schedulable_available_size()
        if rng.random() < 0.5:
            n = -(-n // ps) * ps
            ids = comp.alloc(n, host=rng.random() < 0.5)
            how = "alloc"
        else:
            z, t = torch.tensor([0]), torch.tensor([n])
            ids = comp.alloc_extend(z, z, t, t, torch.tensor([-1]), n)
            how = "extend"
        need = -(-n // ps) * ps
        if ids is None:
            if need <= sched:
                raise DiffFailure(f"{how}({n}) gave None within schedulable {sched}")
            self._count("full")
            return
        got = ids.cpu().numpy().astype(np.int64)
        assert len(got) == n, f"{how}({n}) gave {len(got)} ids"
        offs = np.arange(n) % ps
        assert (got % ps == offs).all(), f"{how} ids {got.tolist()} not at page offsets"
        pages = got // ps
        assert all(pages[j] == pages[j - 1] for j in range(1, n) if offs[j]), got.tolist()
        self._bind(got, np.unique(pages))
        for name in self._kv_sides():
            self._write_kv(name, got)
        req = Req(got.tolist())
        if rng.random() < 0.7:
            r = self.table.alloc_request()
            if r is not None:
                req.row = r
                self.table.append_tokens(r, torch.from_numpy(got))
        if self.slots is not None and rng.random() < 0.6:
            slot = self.slots.alloc(1, host=True)
            if slot is not None:
                s = slot.numpy().astype(np.int64)
                assert self.state is not None
                self.state.bind(s)
                self._write_state(s)
                if self.swa:  # the table's allocator has no state slots: a loose state
                    self.loose_slots.append(int(s[0]))
                else:
                    req.slot = int(s[0])
                    if req.row is not None:
                        self.table.set_state(req.row, req.slot)
        self.reqs.append(req)
        self._count(how)

    def op_grow(self) -> None:
        ps, rng, comp = self.ps, self.rng, self.comp
        cands = [r for r in self.reqs if not r.frozen and 0 < len(r.tokens) < 8 * ps]
        if not cands:
            return
        req = rng.choice(cands)
        L = len(req.tokens)
        k = 1 if rng.random() < 0.5 else rng.randint(1, 2 * ps)
        last = (
            self.table.last_loc([req.row])
            if req.row is not None
            else torch.tensor([req.tokens[-1]])
        )
        assert int(last[0]) == req.tokens[-1], "the table's last_loc is not the last token"
        if self.dev.type == "cuda" and rng.random() < 0.5:
            last = last.to(self.dev)  # checked by the kernel (check_device_errors)
        sched = comp.schedulable_available_size()
        seq = torch.tensor([L + k])
        if k == 1 and rng.random() < 0.7:
            ids = comp.alloc_decode(seq, seq, last)
            how = "decode"
        else:
            pre = torch.tensor([L])
            ids = comp.alloc_extend(pre, pre, seq, seq, last, k)
            how = "grow-extend"
        new_pages = -(-(L + k) // ps) - -(-L // ps)
        if ids is None:
            if new_pages * ps <= sched:
                raise DiffFailure(f"{how} of {k} gave None within schedulable {sched}")
            self._count("full")
            return
        got = ids.cpu().numpy().astype(np.int64)
        assert len(got) == k
        toks = req.tokens + got.tolist()
        fresh = []
        for j in range(k):
            pos = L + j
            if pos % ps:
                assert toks[pos] == toks[pos - 1] + 1, (
                    f"{how}: token {pos} is {toks[pos]}, its page continues at {toks[pos - 1] + 1}"
                )
            else:
                assert toks[pos] % ps == 0, f"{how}: new page starts at {toks[pos]}"
                fresh.append(toks[pos] // ps)
        self._bind(got, np.array(fresh, dtype=np.int64))
        for name in self._kv_sides():
            self._write_kv(name, got)
        req.tokens = toks
        if req.row is not None:
            self.table.append_tokens(req.row, torch.from_numpy(got))
        self._count(how)

    def op_rewrite(self) -> None:
        if not self.reqs:
            return
        req = self.rng.choice(self.reqs)
        toks = np.array(req.tokens, dtype=np.int64)
        if toks.size == 0:
            return
        pick = toks[np.array([self.rng.random() < 0.5 for _ in toks])]
        for name in self._kv_sides():
            side = self.sides[name]
            ok = pick[(side.state[pick // self.ps] == LIVE) & ~side.influx[pick]]
            self._write_kv(name, ok)
        if req.slot is not None:
            self._write_state(np.array([req.slot]))
        self._count("rewrite")

    def _free_one(self, req: Req) -> None:
        """Free a request: through the table (host ids) or as host / queued device ids."""
        self.reqs.remove(req)
        self._before_host_free(req.tokens)
        if req.row is not None:
            self.table.free_request(req.row)
            self._free_req_model(req, with_slot=True)
            self._count("free_request")
            return
        ids = np.array(req.tokens, dtype=np.int64)
        if self.rng.random() < 0.5:
            self._before_host_free(req.tokens)
            if ids.size:
                self.comp.free(torch.from_numpy(ids))
            self._count("free_host")
        else:
            self.queue.free(self.comp, ids)
            self._count("free_queued")
        self._free_req_model(req, with_slot=False)
        if req.slot is not None:
            self._free_slots([req.slot])

    def _free_slots(self, slots: list[int]) -> None:
        assert self.slots is not None and self.state is not None
        arr = np.array(slots, dtype=np.int64)
        if self.rng.random() < 0.5:
            self._before_host_free([])
            self.slots.free(torch.from_numpy(arr))
        else:
            self.queue.free(self.pool.allocator("mamba"), arr)
        self.state.release(arr)

    def op_free(self) -> None:
        cands = self._freeable()
        if cands:
            self._free_one(self.rng.choice(cands))

    def op_evict(self) -> None:
        ps, rng = self.ps, self.rng
        cands = [
            r for r in self._freeable() if r.row is not None and not r.frozen and len(r.tokens) > 1
        ]
        if not cands:
            return
        req = rng.choice(cands)
        assert req.row is not None
        L = len(req.tokens)
        c2 = "C2" in self.cfg.triggers
        if c2 and rng.random() < 0.5:
            start = rng.randrange(1, L)
            if rng.random() < 0.5 and not req.frozen:
                end = rng.randrange(start, L)
                self._evict_span(req, start, end)
                return
        else:
            start = rng.randrange(0, L) // ps * ps
        self._before_host_free(req.tokens[start:])
        try:
            self.table.free_tokens(req.row, start)
        except ArgumentError:
            if start % ps == 0:
                raise
            self._count("evict-refused")
            return  # refusing a suffix that starts inside a page is allowed
        keep = req.tokens[:start]
        kept = {t // ps for t in keep}
        gone = np.array(sorted({t // ps for t in req.tokens[start:]} - kept), dtype=np.int64)
        for name in self._kv_sides():
            self.sides[name].release(gone)
        for name in self._kv_sides():  # tokens of the kept page past the row: no owner
            self.sides[name].written[np.array(req.tokens[start:], dtype=np.int64)] = False
        req.tokens = keep
        req.swa_cut = min(req.swa_cut, start // ps * ps)
        self._count("evict")

    def _evict_span(self, req: Req, start: int, end: int) -> None:
        """A middle span (C2 trigger): refused, or freed and gone from the row."""
        assert req.row is not None
        try:
            self.table.free_tokens(req.row, start, end)
        except ArgumentError:
            self._count("span-refused")
            return
        ps = self.ps
        span = req.tokens[start:end]
        others = {t // ps for t in req.tokens[:start] + req.tokens[end:]}
        gone = np.array(sorted({t // ps for t in span} - others), dtype=np.int64)
        for name in self._kv_sides():
            self.sides[name].release(gone)
        req.tokens = req.tokens[:start] + req.tokens[end:]
        req.frozen = True
        self._count("span")

    def op_free_swa(self, in_group: bool = False) -> None:
        ps, rng = self.ps, self.rng
        cands = []
        for r in self._freeable():
            cut = (len(r.tokens) - self.window) // ps * ps
            if cut > r.swa_cut and not r.frozen:
                cands.append((r, cut))
        if not cands:
            return
        req, cut = rng.choice(cands)
        lo = 0 if rng.random() < 0.3 else req.swa_cut  # already released pages are skipped
        ids = np.array(req.tokens[lo:cut], dtype=np.int64)
        if in_group or rng.random() < 0.5:
            self._before_host_free(ids.tolist())
            self.comp.free_swa(torch.from_numpy(ids))
            self._count("free_swa_host")
        else:
            self.queue.free(self.comp, ids, swa=True)
            self._count("free_swa_queued")
        self.sides["swa"].release(self.sides["swa"].pages_of(ids))
        req.swa_cut = cut

    def op_group(self) -> None:
        rng = self.rng
        self.comp.free_group_begin()
        for _ in range(rng.randint(1, 3)):
            cands = self._freeable()
            if cands:
                self._free_one(rng.choice(cands))
            if self.swa and "C1" in self.cfg.triggers and rng.random() < 0.7:
                self.op_free_swa(in_group=True)
        self.comp.free_group_end()
        self._count("group")

    def op_land(self) -> None:
        waiting = self.queue.unlanded()
        if waiting:
            self.queue.land(self.rng.choice(waiting))
            self._count("land")
        if self.rng.random() < 0.2:
            self.pool.sync_frees()

    def op_flush(self) -> None:
        moved = self.pool.flush(urgent=self.rng.random() < 0.3)
        assert moved >= 0
        if not self.cfg.lazy:
            assert moved == 0, f"an eager flush moved {moved} pages"
        if self.rng.random() < 0.3:
            self.pool.retire_completed()
        self._count("flush")

    def op_forward(self) -> None:
        """Report a forward writing the last tokens of a request. Lazy: its writes land
        when its event completes (at the latest moment a side stream may land them);
        eager: at once (the caller orders streams)."""
        rng, cfg = self.rng, self.cfg
        busy = [f for f in self.forwards if not f.event.done]
        if cfg.lazy and busy and "C5" not in cfg.triggers:
            return  # one forward in flight at a time, unless C5
        cands = [r for r in self.reqs if r.tokens and r.pinned == 0]
        if not cands:
            return
        # A decode batch (the last token of a few requests) or an extend (a request's
        # last few tokens).
        if rng.random() < 0.5:
            batch = rng.sample(cands, min(len(cands), rng.randint(1, 3)))
            parts = [r.tokens[-1:] for r in batch]
        else:
            batch = [rng.choice(cands)]
            parts = [batch[0].tokens[-min(len(batch[0].tokens), rng.randint(1, self.ps + 1)) :]]
        ids = np.array([t for p in parts for t in p], dtype=np.int64)
        n = len(ids)
        if "C7" in cfg.triggers:
            self.staging[:n] = torch.from_numpy(ids)
            loc = self.staging[:n]
        else:
            loc = torch.from_numpy(ids.copy()).to(self.dev)
        if not cfg.lazy:
            event = StandInEvent()
            self.pool.set_inflight_forward(event, loc)
            for name in self._kv_sides():
                self._write_kv(name, ids)
            self.forwards.append(Forward(event, batch, ids, loc))
            self._count("forward")
            return
        # Where the forward's kernels write: translated at launch.
        targets = {name: self._phys(name, ids) for name in self._kv_sides()}
        values = {name: self._rand(len(ids), self.sides[name]) for name in self._kv_sides()}
        # C6: the forward also updates its requests' recurrent states in place.
        slots = np.array([r.slot for r in batch if r.slot is not None], dtype=np.int64)
        st = self.state if "C6" in cfg.triggers and slots.size else None
        st_phys = self._phys("mamba", slots) if st is not None else None
        st_vals = self._rand(len(slots), st) if st is not None else []
        fw: Forward

        def land() -> None:
            for name, phys in targets.items():
                for layer in range(len(values[name]) // 2):
                    k, v = values[name][2 * layer], values[name][2 * layer + 1]
                    self.pool.set_kv(name, layer, phys, k.to(self.dev), v.to(self.dev))
                side = self.sides[name]
                side.influx[ids] = False
                live = side.state[ids // self.ps] == LIVE
                mask = torch.from_numpy(live)
                side.write(ids[live], [x[mask] for x in values[name]])
                self._touch(name, ids)
            if st is not None:
                conv, temporal = self.pool.state_views("mamba")
                for view, x in zip([*conv, temporal], st_vals):
                    view[:, st_phys] = x.transpose(0, 1).to(view.device)
                st.influx[slots] = False
                st.write(slots, st_vals)
                self._touch("mamba", slots)
            for r in fw.reqs:
                r.pinned -= 1

        event = StandInEvent(on_done=land)
        fw = Forward(event, batch, ids, loc)
        self.pool.set_inflight_forward(event, loc)
        for name in self._kv_sides():
            self.sides[name].influx[ids] = True
        for r in batch:
            r.pinned += 1
        if st is not None:
            st.influx[slots] = True
        self.forwards.append(fw)
        self._count("forward")

    def op_forward_done(self) -> None:
        busy = [f for f in self.forwards if not f.event.done]
        if "C7" in self.cfg.triggers and self.reqs:
            # The engine fills its reused out_cache_loc buffer for the next batch.
            other = self.rng.choice(self.reqs).tokens[-1:]
            if other:
                self.staging[:] = other[0]
        if busy and self.rng.random() < 0.6:
            busy[0 if self.rng.random() < 0.5 else -1].event.complete()
            self._count("forward_done")
        self.forwards = [f for f in self.forwards if not f.event.done]

    def op_state(self) -> None:
        assert self.slots is not None and self.state is not None
        rng, slots = self.rng, self.slots
        r = rng.random()
        if r < 0.35:
            got = slots.alloc(rng.randint(1, 2), host=rng.random() < 0.5)
            if got is not None:
                s = got.cpu().numpy().astype(np.int64)
                self.state.bind(s)
                self._write_state(s)
                self.loose_slots += s.tolist()
            self._count("state_alloc")
        elif r < 0.6 and self.loose_slots:
            k = rng.randint(1, min(2, len(self.loose_slots)))
            pick = [self.loose_slots.pop(rng.randrange(len(self.loose_slots))) for _ in range(k)]
            self._free_slots(pick)
            self._count("state_free")
        elif r < 0.75 and self.loose_slots:
            src = rng.choice(self.loose_slots)
            got = slots.alloc(1, host=True)
            if got is not None:
                dst = got.numpy().astype(np.int64)
                self.state.bind(dst)
                ma = self.pool.allocator("mamba")
                ukv.ops.copy_slots(
                    self.pool.raw,
                    ma.page_bytes,
                    self._phys("mamba", np.array([src])),
                    self._phys("mamba", dst),
                )
                self.state.write(dst, [d[src : src + 1].clone() for d in self.state.data])
                self._touch("mamba", dst)
                self.loose_slots.append(int(dst[0]))
                self._count("state_copy")
        elif r < 0.85:
            k = rng.randint(0, 3)
            if not slots.alloc_group_begin(k):
                return
            reserved = slots._reserved.copy()
            assert reserved.size == k
            self.state.bind(reserved)
            taken: list[int] = []
            for _ in range(rng.randint(0, 2)):
                got = slots.alloc(1, host=True)
                if got is None:
                    continue
                sid = int(got[0])
                if len(taken) < k:
                    assert sid == reserved[len(taken)], f"group gave {sid}, reserved {reserved}"
                else:
                    self.state.bind(np.array([sid]))
                taken.append(sid)
            for sid in taken:
                self._write_state(np.array([sid]))
            slots.alloc_group_end()
            self.state.release(reserved[len(taken) :])
            self.loose_slots += taken
            self._count("state_group")
        else:
            live = self.loose_slots + [r.slot for r in self.reqs if r.slot is not None]
            if live:
                self._write_state(np.array(self.rng.sample(live, min(3, len(live)))))
                self._count("state_write")

    def op_mid(self) -> None:
        assert self.mid is not None
        rng, ps, mid = self.rng, self.ps, self.mid
        side = self.sides["mid"]
        r = rng.random()
        if r < 0.5:
            n = ps * rng.randint(1, 2)
            sched = mid.schedulable_available_size()
            got = mid.alloc(n)
            if got is None:
                if n <= sched:
                    raise DiffFailure(f"mid alloc({n}) gave None within schedulable {sched}")
                return
            ids = got.cpu().numpy().astype(np.int64)
            side.bind(side.pages_of(ids))
            self._write_kv("mid", ids)
            self.mid_reqs.append(ids)
            self._count("mid_alloc")
        elif r < 0.85 and self.mid_reqs:
            ids = self.mid_reqs.pop(rng.randrange(len(self.mid_reqs)))
            if rng.random() < 0.5:
                self._before_host_free([])
                mid.free(torch.from_numpy(ids))
            else:
                self.queue.free(mid, ids)
            side.release(side.pages_of(ids))
            self._count("mid_free")
        elif r < 0.95 and self.mid_reqs:
            self._write_kv("mid", rng.choice(self.mid_reqs))
        elif not self.queue.tickets:
            mid.clear()
            side.clear()
            self.mid_reqs = []
            self._count("mid_clear")

    def op_offload(self) -> None:
        """get_cpu_copy of some live ids (compared with the model); load_cpu_copy of new
        bytes at them."""
        rng = self.rng
        names = ["full"] + (["mid"] if self.mid is not None else [])
        if self.state is not None:
            names.append("mamba")
        name = rng.choice(names)
        side: PagedSide | StateSide = self.state if name == "mamba" else self.sides[name]  # type: ignore[assignment]
        ok = side.checked_slots() if isinstance(side, StateSide) else side.checked_tokens()
        if ok.size == 0:
            return
        ids = np.array(sorted(rng.sample(ok.tolist(), min(len(ok), 6))), dtype=np.int64)
        copy = self.pool.get_cpu_copy(name, torch.from_numpy(ids).to(self.dev)).wait()
        # get_cpu_copy settles queued frees (waiting): ids stay live, they are ours.
        t = torch.from_numpy(ids)
        for n, (got, want) in enumerate(zip(copy, side.data)):
            if not torch.equal(got, want[t]):
                raise DiffFailure(f"get_cpu_copy({name!r}) view {n} differs at ids {ids.tolist()}")
        if rng.random() < 0.5:
            values = self._rand(len(ids), side)
            self.pool.load_cpu_copy(name, values, torch.from_numpy(ids))
            side.write(ids, values)
            self._touch(name, ids)
        self._count("offload")

    def _expect(self, exc: type[BaseException], what: str, fn: Any) -> None:
        try:
            fn()
        except exc:
            self._count("bad-" + what)
            return
        except Exception as e:  # noqa: BLE001 - any other type is a failure too
            raise DiffFailure(
                f"{what}: raised {type(e).__name__}: {e}, expected {exc.__name__}"
            ) from e
        raise DiffFailure(f"{what}: returned, expected {exc.__name__}")

    def op_bad(self) -> None:
        rng, ps, comp = self.rng, self.ps, self.comp
        full = self.sides["full"]
        dead = np.flatnonzero(full.state == DEAD)
        dead = dead[dead >= full.lo_page]
        quiet = not self.queue.tickets
        r = rng.randrange(9)
        top = full.num_pages * ps
        if r == 0 and dead.size and quiet:
            tok = int(rng.choice(dead.tolist())) * ps
            self._expect(DoubleFreeError, "free dead", lambda: comp.free(torch.tensor([tok])))
        elif r == 1:
            bad = rng.choice([0, top + 3, -1 - rng.randrange(5)])
            self._expect(InvalidIdError, "free bad id", lambda: comp.free(torch.tensor([bad])))
        elif r == 2 and ps > 1:
            self._expect(ArgumentError, "alloc odd", lambda: comp.alloc(ps + 1))
        elif r == 3 and dead.size and ps > 1:
            # The core checks a host last_loc where the new token continues its page.
            tok = int(rng.choice(dead.tolist())) * ps
            seq = torch.tensor([2])
            self._expect(
                ArgumentError,
                "decode dead last",
                lambda: comp.alloc_decode(seq, seq, torch.tensor([tok])),
            )
        elif r == 4 and self.swa and dead.size and quiet:
            tok = int(rng.choice(dead.tolist())) * ps
            self._expect(
                InvalidIdError, "free_swa dead", lambda: comp.free_swa(torch.tensor([tok]))
            )
        elif r == 5 and dead.size:
            tok = int(rng.choice(dead.tolist())) * ps
            live = full.checked_tokens()[:2].tolist()
            ids = torch.tensor(live + [tok])
            self._expect(InvalidIdError, "copy dead", lambda: self.pool.get_cpu_copy("full", ids))
        elif r == 6 and dead.size:
            rows = [q for q in self.reqs if q.row is not None and not q.frozen]
            if rows:
                row = rng.choice(rows).row
                assert row is not None
                tok = int(rng.choice(dead.tolist())) * ps
                self._expect(
                    InvalidIdError,
                    "append dead",
                    lambda: self.table.append_tokens(row, torch.tensor([tok])),
                )
        elif r == 7 and self.state is not None and not self.swa and quiet:
            st = self.state
            free = np.flatnonzero(st.state == DEAD)
            free = free[free >= st.lo]
            rows = [q for q in self.reqs if q.row is not None]
            if free.size and rows:
                slot, row = int(rng.choice(free.tolist())), rng.choice(rows).row
                assert row is not None and self.slots is not None
                slots = self.slots
                self._expect(
                    InvalidIdError, "set_state dead", lambda: self.table.set_state(row, slot)
                )
                self._expect(
                    DoubleFreeError, "free dead slot", lambda: slots.free(torch.tensor([slot]))
                )
        elif r == 8:
            self._expect(ArgumentError, "alloc negative", lambda: comp.alloc(-ps))

    def op_clear(self) -> None:
        if any(r.pinned for r in self.reqs):
            return
        for req in list(self.reqs):
            if req.row is not None:
                self._free_one(req)
        self.comp.clear()  # a composite clears both its sides (Mamba: tokens and states)
        if self.cfg.kind == "swa3":
            assert self.slots is not None
            self.slots.clear()
        for name in self._kv_sides():
            self.sides[name].clear()
        if self.state is not None:
            self.state.clear()
        self.reqs = []
        self.loose_slots = []
        self._count("clear")

    # ----- the loop and the checks --------------------------------------------------------

    def step(self, full_check: bool) -> str:
        """One random action, then the checks. Returns the action's name."""
        fill = (self.totals.steps // 150) % 2 == 1
        weights = self._fill_weights if fill else self._weights
        _, fn = self.rng.choices(self.ops, weights=weights)[0]
        self.touched = {}
        fn()
        self.totals.steps += 1
        self.verify(full_check)
        return fn.__name__

    def run(self, steps: int, full_every: int = 1) -> Totals:
        """``steps`` actions, every one checked; a full check every ``full_every`` steps.
        Raises :class:`DiffFailure` naming the seed, step and action on a mismatch."""
        name = "build"
        for _ in range(steps):
            k = self.totals.steps + 1  # steps of this engine so far, all runs
            try:
                name = self.step(k % full_every == 0)
            except DiffFailure as e:
                raise DiffFailure(f"[{self.cfg.label} seed {self.seed} step {k}] {e}") from e
            except Exception as e:
                raise DiffFailure(
                    f"[{self.cfg.label} seed {self.seed} step {k} after {name}] "
                    f"{type(e).__name__}: {e}"
                ) from e
        return self.totals

    def drain(self) -> None:
        """Free everything; the pool must come back empty."""
        try:
            self._drain()
        except DiffFailure as e:
            raise DiffFailure(f"[{self.cfg.label} seed {self.seed} drain] {e}") from e
        except Exception as e:
            raise DiffFailure(
                f"[{self.cfg.label} seed {self.seed} drain] {type(e).__name__}: {e}"
            ) from e

    def _drain(self) -> None:
        for f in self.forwards:
            f.event.complete()
        self.forwards = []
        for req in list(self.reqs):
            self._free_one(req)
        if self.loose_slots:
            self._free_slots(self.loose_slots)
            self.loose_slots = []
        if self.mid is not None:
            for ids in self.mid_reqs:
                self.mid.free(torch.from_numpy(ids))
                self.sides["mid"].release(self.sides["mid"].pages_of(ids))
            self.mid_reqs = []
        for t in self.queue.tickets:
            self.queue.land(t)
        self.pool.sync_frees()
        self.pool.flush(urgent=True)
        self.verify(True)
        for name in self.pool.names:
            left = self.pool.allocator(name).allocated_count()
            if left:
                raise DiffFailure(f"{name} still holds {left} slots")

    def verify(self, full: bool) -> None:
        pool = self.pool
        if self.dev.type != "cuda":
            pool.check_invariants()
        elif full:  # reads the device tables back: at full checks only
            pool.check_invariants()
            pool.check_device_errors()  # every device last_loc given was valid
        else:
            pool._arena.check_invariants()  # the host tables, every step
        self.queue.settled()
        inflight = self.queue.inflight()
        want = len(self.queue.tickets) + self.queue.queued_host_frees()
        if inflight != want:
            raise DiffFailure(f"{inflight} frees in flight, {want} queued")
        for name, side in self.sides.items():
            v2p = pool._arena.v2p(pool._idx(name))[: side.num_pages]
            side.observe(v2p)
            have = v2p[side.lo_page :] >= 0
            want = side.state[side.lo_page :] != DEAD
            if not np.array_equal(have, want):
                diff = np.flatnonzero(have != want) + side.lo_page
                p = int(diff[0])
                raise DiffFailure(
                    f"{name}: page {p} (tokens {p * self.ps}..) is "
                    f"{'bound' if have[p - side.lo_page] else 'unbound'} in the pool, the model has "
                    f"it {['dead', 'live', 'held'][side.state[p]]} ({diff.size} pages differ)"
                )
            bound = v2p[side.lo_page :][have]
            if np.unique(bound).size != bound.size:
                raise DiffFailure(f"{name}: two virtual pages share a physical page")
            count = pool.allocator(name).allocated_count()
            if count != int(want.sum()) * self.ps:
                raise DiffFailure(
                    f"{name}: allocated_count {count}, model {int(want.sum()) * self.ps}"
                )
            ids = side.checked_tokens()
            if not full:
                t = self.touched.get(name)
                ids = ids[np.isin(ids, np.fromiter(t, np.int64))] if t else ids[:0]
            self._check_kv(name, side, ids)
        if self.state is not None:
            st = self.state
            v2p = pool._arena.v2p(pool._idx("mamba"))[: st.data[0].shape[0]]
            st.observe(v2p)
            have = v2p[st.lo :] >= 0
            want = st.state[st.lo :] != DEAD
            if not np.array_equal(have, want):
                s = int(np.flatnonzero(have != want)[0]) + st.lo
                raise DiffFailure(
                    f"mamba: slot {s} is {'bound' if have[s - st.lo] else 'unbound'} in the "
                    f"pool, the model has it {['dead', 'live', 'held'][st.state[s]]}"
                )
            ids = st.checked_slots()
            if not full:
                t = self.touched.get("mamba")
                ids = ids[np.isin(ids, np.fromiter(t, np.int64))] if t else ids[:0]
            self._check_states(ids)
        if full:
            self._check_table()
            self.totals.full_checks += 1

    def _check_kv(self, name: str, side: PagedSide, ids: np.ndarray) -> None:
        if ids.size == 0:
            return
        phys = self._phys(name, ids)
        k, v = self.pool.kv_views(name)
        views = [t for pair in zip(k, v) for t in pair]
        got = [view[phys // self.ps, phys % self.ps] for view in views]
        self._compare(name, "virtual tokens", ids, phys, got, side.data)

    def _check_states(self, slots: np.ndarray) -> None:
        if slots.size == 0:
            return
        assert self.state is not None
        phys = self._phys("mamba", slots)
        conv, temporal = self.pool.state_views("mamba")
        got = [view[:, phys].transpose(0, 1) for view in [*conv, temporal]]
        self._compare("mamba", "state slots", slots, phys, got, self.state.data)

    def _compare(
        self,
        name: str,
        what: str,
        ids: np.ndarray,
        phys: torch.Tensor,
        got: list[torch.Tensor],
        data: list[torch.Tensor],
    ) -> None:
        """Every view's bytes at ``phys`` against the model's at ``ids``: one copy from
        the device for all of them (and the physical ids)."""
        n = len(ids)

        def as_bytes(x: torch.Tensor) -> torch.Tensor:
            return x.contiguous().reshape(n, -1).view(torch.uint8)

        every = torch.cat([as_bytes(phys), *map(as_bytes, got)], dim=1).cpu()
        sink = every[:, :8].contiguous().view(torch.int64).reshape(-1) <= 0
        if bool(sink.any()):
            bad = ids[sink.numpy()]
            raise DiffFailure(f"{name}: live {what} {bad[:8].tolist()} translate to the sink")
        t = torch.from_numpy(ids)
        want = torch.cat([as_bytes(d[t]) for d in data], dim=1)
        if not torch.equal(every[:, 8:], want):
            at = 8
            for view, d in enumerate(data):
                w = as_bytes(d[t]).shape[1]
                row = (every[:, at : at + w] != as_bytes(d[t])).any(1)
                at += w
                if bool(row.any()):
                    lost = ids[row.numpy()]
                    raise DiffFailure(
                        f"{name}: view {view} lost bytes at {what} {lost[:8].tolist()} "
                        f"({int(row.sum())} of {n} checked)"
                    )
        self.totals.bytes_checked += want.numel()

    def _check_table(self) -> None:
        rows = {r.row: r for r in self.reqs if r.row is not None}
        assert self.table.available_requests() == self.table.max_requests - len(rows)
        for r, req in rows.items():
            host = self.table.tokens(r).tolist()
            if req.frozen:  # a freed middle span: gone from the row, or marked -1 in it
                host = [t for t in host if t >= 0]
            if host != req.tokens:
                raise DiffFailure(f"request row {r}: table {host}, model {req.tokens}")
            dev = self.table.req_to_token[r, : self.table.length(r)].cpu().tolist()
            if dev != self.table.tokens(r).tolist():
                raise DiffFailure(f"request row {r}: req_to_token {dev}, host {host}")
            want_slot = req.slot if (req.slot is not None and not self.swa) else -1
            if self.table.state(r) != want_slot:
                raise DiffFailure(
                    f"request row {r}: state {self.table.state(r)}, model {want_slot}"
                )
