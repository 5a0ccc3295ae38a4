"""Data integrity: bytes written to a virtual slot read back intact after any compaction.

Random sequences of alloc / set_kv / state writes / free / flush run on both sub-pools of
one pool while a shadow copy remembers what every live virtual token and state slot
holds; after every operation, every live slot is read back through the current
virtual→physical table and compared byte for byte. On the CPU the page moves and K/V
stores run as Triton kernels in the interpreter, so the sequences are short; the GPU
variant (marked ``gpu``) runs 10,000 operations per configuration.
"""

from __future__ import annotations

import random

import pytest
import torch
from standins import StandInEvent as FakeEvent

import ukv

CPU_OPS = 120
GPU_OPS = 10_000


def _specs(kv_grow: str, state_kind: str) -> list[ukv.Spec]:
    other = "down" if kv_grow == "up" else "up"
    full = ukv.MHASpec(
        "full", layer_num=2, head_num=1, head_dim=4, dtype=torch.float16, grow=kv_grow
    )
    if state_kind == "mamba":
        side: ukv.Spec = ukv.MambaSpec(
            "side", 2, ((2, 3),), torch.float32, (2, 2), torch.float32, grow=other
        )
    else:
        side = ukv.MHASpec(
            "side",
            layer_num=3,
            head_num=1,
            head_dim=4,
            dtype=torch.float16,
            v_head_dim=2,
            grow=other,
        )
    return [full, side]


class Harness:
    """A pool plus the shadow copy of everything live in it."""

    def __init__(self, device: str, page_size: int, lazy: bool, kv_grow: str, side: str, seed: int):
        specs = _specs(kv_grow, side)
        budget = sum(s.page_bytes(page_size) for s in specs) * 14
        self.pool = ukv.UnifiedKVPool(budget, specs, page_size=page_size, device=device, lazy=lazy)
        self.rng = random.Random(seed)
        self.gen = torch.Generator().manual_seed(seed)
        self.device = device
        self.kv: list[tuple[str, torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]] = []
        self.states: list[tuple[torch.Tensor, list[torch.Tensor]]] = []
        self.events: list[FakeEvent] = []

    def _rand(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        return torch.randn(shape, generator=self.gen).to(dtype)

    def alloc_kv(self, name: str) -> None:
        alloc = self.pool.allocator(name)
        ps = alloc.page_size
        n = ps * self.rng.randint(1, 3)
        guaranteed = n <= alloc.schedulable_available_size()
        ids = alloc.alloc(n)
        if ids is None:
            assert not guaranteed, f"alloc({n}) failed within the schedulable size"
            return
        k_views, v_views = self.pool.kv_views(name)
        phys = alloc.translate_kv_loc(ids.to(alloc.v2p.device))
        rows = []
        for layer in range(len(k_views)):
            k = self._rand((n, *k_views[layer].shape[2:]), k_views[layer].dtype)
            v = self._rand((n, *v_views[layer].shape[2:]), v_views[layer].dtype)
            self.pool.set_kv(name, layer, phys, k.to(self.device), v.to(self.device))
            rows.append((k, v))
        self.kv.append((name, ids, rows))

    def alloc_state(self) -> None:
        alloc = self.pool.allocator("side")
        ids = alloc.alloc(self.rng.randint(1, 2))
        if ids is None:
            return
        conv, temporal = self.pool.state_views("side")
        phys = alloc.translate_kv_loc(ids.to(alloc.v2p.device))
        data = []
        for view in [*conv, temporal]:
            x = self._rand((view.shape[0], len(ids), *view.shape[2:]), view.dtype)
            view[:, phys] = x.to(self.device)
            data.append(x)
        self.states.append((ids, data))

    def free_some(self) -> None:
        pick_kv = self.kv and (not self.states or self.rng.random() < 0.6)
        if pick_kv:
            name, ids, _ = self.kv.pop(self.rng.randrange(len(self.kv)))
            self.pool.allocator(name).free(ids)
        elif self.states:
            ids, _ = self.states.pop(self.rng.randrange(len(self.states)))
            self.pool.allocator("side").free(ids)

    def forward_event(self) -> None:
        ev = FakeEvent()
        live = [ids for name, ids, _ in self.kv if name == "full"]
        loc = live[-1] if live else None
        self.pool.set_inflight_forward(ev, loc)
        self.events.append(ev)

    def step(self) -> None:
        r = self.rng.random()
        is_mamba = isinstance(self.pool.spec("side"), ukv.MambaSpec)
        if r < 0.30:
            self.alloc_kv("full")
        elif r < 0.50:
            self.alloc_state() if is_mamba else self.alloc_kv("side")
        elif r < 0.85:
            self.free_some()
        elif r < 0.92:
            self.pool.flush(urgent=self.rng.random() < 0.3)
        elif r < 0.96 and self.pool.lazy:
            self.forward_event()
        elif self.events:
            self.events.pop(0).done = True

    def verify(self) -> None:
        self.pool.check_invariants()
        for name, ids, rows in self.kv:
            alloc = self.pool.allocator(name)
            phys = alloc.translate_kv_loc(ids.to(alloc.v2p.device))
            ps = alloc.page_size
            k_views, v_views = self.pool.kv_views(name)
            for layer, (k, v) in enumerate(rows):
                got_k = k_views[layer][phys // ps, phys % ps].cpu()
                got_v = v_views[layer][phys // ps, phys % ps].cpu()
                assert torch.equal(got_k, k), (
                    f"{name} layer {layer} K lost at virtual {ids.tolist()}"
                )
                assert torch.equal(got_v, v), (
                    f"{name} layer {layer} V lost at virtual {ids.tolist()}"
                )
        if self.states:
            alloc = self.pool.allocator("side")
            conv, temporal = self.pool.state_views("side")
            for ids, data in self.states:
                phys = alloc.translate_kv_loc(ids.to(alloc.v2p.device))
                for view, x in zip([*conv, temporal], data):
                    assert torch.equal(view[:, phys].cpu(), x), (
                        f"state lost at virtual {ids.tolist()}"
                    )

    def drain(self) -> None:
        for ev in self.events:
            ev.done = True
        while self.kv or self.states:
            self.free_some()
        self.pool.flush(urgent=True)
        self.verify()
        for name in self.pool.names:
            assert self.pool.allocator(name).allocated_count() == 0


CONFIGS = [
    pytest.param(ps, lazy, grow, side, id=f"ps{ps}-{'lazy' if lazy else 'eager'}-kv{grow}-{side}")
    for ps, lazy, grow, side in [
        (1, False, "up", "mamba"),
        (4, False, "down", "mamba"),
        (1, True, "down", "mamba"),
        (4, True, "up", "mamba"),
        (2, False, "up", "swa"),
        (4, True, "down", "swa"),
    ]
]


def _run(device: str, ops: int, ps: int, lazy: bool, grow: str, side: str) -> None:
    h = Harness(device, ps, lazy, grow, side, seed=ps * 1000 + lazy * 100 + len(side))
    for _ in range(ops):
        h.step()
        h.verify()
    h.drain()
    assert h.pool.stats().pages_moved > 0, "the trace never compacted: it tests nothing"


@pytest.mark.parametrize(("ps", "lazy", "grow", "side"), CONFIGS)
def test_integrity_cpu(ps: int, lazy: bool, grow: str, side: str) -> None:
    _run("cpu", CPU_OPS, ps, lazy, grow, side)


@pytest.mark.parametrize(("ps", "lazy", "grow", "side"), CONFIGS)
def test_integrity_cpu_numpy_moves(ps, lazy, grow, side, monkeypatch) -> None:
    """The CPU pool without Triton (how it runs outside the tests): moves are NumPy
    record copies on the page envelopes, tables are the core's own."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert not ukv.ops.use_triton("cpu")
    _run("cpu", 5 * CPU_OPS, ps, lazy, grow, side)


@pytest.mark.gpu
@pytest.mark.parametrize(("ps", "lazy", "grow", "side"), CONFIGS)
def test_integrity_cuda(ps: int, lazy: bool, grow: str, side: str) -> None:
    # Two configurations run the full 10,000 operations, the others a fifth of that.
    long_run = (ps, lazy, side) in {(4, False, "mamba"), (4, True, "swa")}
    _run("cuda", GPU_OPS if long_run else GPU_OPS // 5, ps, lazy, grow, side)


@pytest.mark.parametrize("ps", [1, 4, 16])
def test_padding_sink_never_overlaps_a_live_page(device: str, ps: int) -> None:
    """Writes to physical token 0 (the sink) of either side never touch a live page of
    the other side, at any page size: the floor holds a whole page envelope."""
    specs = [
        ukv.MHASpec("full", layer_num=4, head_num=2, head_dim=8, dtype=torch.float16, grow="up"),
        ukv.MambaSpec("side", 1, ((3, 5),), torch.float32, (4, 4), torch.float32, grow="down"),
    ]
    budget = sum(s.page_bytes(ps) for s in specs) * 6
    pool = ukv.UnifiedKVPool(budget, specs, page_size=ps, device=device)
    full, side = pool.allocator("full"), pool.allocator("side")
    kv_ids = full.alloc(full.available_size() // 2 // ps * ps)
    st_ids = side.alloc(side.available_size())
    assert kv_ids is not None and st_ids is not None and len(st_ids) > 0
    pool.raw.fill_(0x5A)
    snapshot = pool.raw.clone()
    floor = pool.reserved_floor
    zero = torch.zeros(ps, dtype=torch.int64, device=pool.raw.device)
    ks, _ = pool.kv_views("full")
    for layer in range(len(ks)):
        junk = torch.full((ps, 2, 8), 7.0, device=pool.raw.device)
        pool.set_kv("full", layer, zero + torch.arange(ps, device=zero.device), junk, junk)
    conv, temporal = pool.state_views("side")
    conv[0][:, 0] = -1.0
    temporal[:, 0] = -1.0
    changed = (pool.raw != snapshot).nonzero().flatten()
    assert changed.numel() > 0
    assert int(changed.max()) < floor, (
        f"sink write reached byte {int(changed.max())} >= floor {floor}"
    )
