"""Giving the byte buffer's memory back and taking it again (``release_memory`` /
``resume_memory``, SGLang's ``enable_memory_saver``): tables, ids and sizes survive, the
bytes survive with ``keep_contents``, every call that touches bytes is refused in between
with the pool unchanged, and the pool works on afterwards (allocations, compaction, frees)
with every live byte intact."""

from __future__ import annotations

import contextlib
import os

import numpy as np
import pytest
import torch
from standins import StandInEvent

import ukv
from ukv.errors import ArgumentError

PS = 4


def _pool(device: str, lazy: bool = False) -> ukv.UnifiedKVPool:
    full = ukv.MHASpec("full", 2, 1, 4, torch.float32, grow="up")
    mamba = ukv.MambaSpec("mamba", 1, ((2, 3),), torch.float32, (2, 2), torch.float32, grow="down")
    return ukv.UnifiedKVPool(1 << 15, [full, mamba], page_size=PS, device=device, lazy=lazy)


def _write(pool: ukv.UnifiedKVPool, ids: torch.Tensor, seed: int) -> torch.Tensor:
    """Write distinct K/V rows at virtual ``ids``; returns what was written."""
    alloc = pool.allocator("full")
    phys = alloc.translate_kv_loc(ids)
    g = torch.Generator().manual_seed(seed)
    rows = torch.randn(2, 2, ids.numel(), 1, 4, generator=g).to(pool.device)
    for layer in range(2):
        pool.set_kv("full", layer, phys, rows[layer, 0], rows[layer, 1])
    return rows


def _read(pool: ukv.UnifiedKVPool, ids: torch.Tensor) -> torch.Tensor:
    copy = pool.get_cpu_copy("full", ids)
    return torch.stack([torch.stack([copy[2 * i], copy[2 * i + 1]]) for i in range(2)])


def _snapshot(pool: ukv.UnifiedKVPool) -> tuple:
    tables = [(a.v2p.cpu().clone(), a.p2v.cpu().clone()) for a in map(pool.allocator, pool.names)]
    sizes = [pool.allocator(n).available_size() for n in pool.names]
    return tables, sizes, str(pool.stats())


def _same(a: tuple, b: tuple) -> bool:
    ta, sa, xa = a
    tb, sb, xb = b
    return (
        sa == sb
        and xa == xb
        and all(torch.equal(x, y) and torch.equal(p, q) for (x, p), (y, q) in zip(ta, tb))
    )


@pytest.mark.parametrize("executor", ["packed", "host"])
@pytest.mark.parametrize("lazy", [False, True])
def test_contents_kept_across_release_and_resume(
    device: str, lazy: bool, executor: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if executor == "host":
        if device != "cpu":
            pytest.skip("the host executor is the CPU pool's")
        monkeypatch.setenv("TRITON_INTERPRET", "0")  # the CPU pool's own NumPy executor
    elif device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("the packed executor runs on CPU only under TRITON_INTERPRET=1")
    pool = _pool(device, lazy)
    assert type(pool._exec).__name__ == ("HostExecutor" if executor == "host" else "PackedExecutor")
    alloc = pool.allocator("full")
    a = alloc.alloc(8 * PS)
    b = alloc.alloc(8 * PS)
    assert a is not None and b is not None
    rows_b = _write(pool, b, 1)
    slots = pool.allocator("mamba").alloc(3)
    assert slots is not None
    before = _snapshot(pool)
    address = pool.raw.data_ptr()
    pool.release_memory(keep_contents=True)
    assert pool.memory_released
    if not pool.memory_release_keeps_address:  # torch's allocator: the storage shrinks
        assert pool.raw.untyped_storage().nbytes() == 0
    assert _same(before, _snapshot(pool)), "queries still answer, from the same tables"
    pool.resume_memory()
    assert not pool.memory_released and pool.raw.untyped_storage().nbytes() == pool.total_bytes
    if pool.memory_release_keeps_address:  # CUDA virtual memory: mapped in place again
        assert pool.raw.data_ptr() == address
    assert _same(before, _snapshot(pool))
    torch.testing.assert_close(_read(pool, b), rows_b.cpu(), rtol=0, atol=0)
    # The pool works on: a free that compacts moves b's pages, bytes follow.
    alloc.free(a)
    pool.flush(urgent=True)
    torch.testing.assert_close(_read(pool, b), rows_b.cpu(), rtol=0, atol=0)
    c = alloc.alloc(4 * PS)
    assert c is not None
    rows_c = _write(pool, c, 2)
    torch.testing.assert_close(_read(pool, c), rows_c.cpu(), rtol=0, atol=0)
    pool.check_invariants()


def test_contents_dropped_by_default_come_back_zero(device: str) -> None:
    pool = _pool(device)
    ids = pool.allocator("full").alloc(2 * PS)
    assert ids is not None
    _write(pool, ids, 3)
    k_views, _ = pool.kv_views("full")  # a view taken before the release
    pool.release_memory(force=True)  # live ids: dropping their bytes takes force (N3)
    pool.resume_memory()
    assert not _read(pool, ids).any()
    assert not pool.raw.any()
    # The old view sees the resumed buffer (same storage, new memory).
    phys = pool.allocator("full").translate_kv_loc(ids)
    rows = _write(pool, ids, 4)
    page, off = phys // PS, phys % PS
    torch.testing.assert_close(k_views[0][page, off].cpu(), rows[0, 0].cpu(), rtol=0, atol=0)


def _refusals(pool: ukv.UnifiedKVPool, live: torch.Tensor):
    alloc = pool.allocator("full")
    z = torch.zeros(1, 1, 4, device=pool.device)
    return {
        "alloc": lambda: alloc.alloc(PS),
        "free": lambda: alloc.free(live[:PS]),
        "alloc_decode": lambda: alloc.alloc_decode(
            torch.tensor([1]), torch.tensor([PS + 1]), live[PS - 1 : PS]
        ),
        "group": lambda: alloc.free_group_begin(),
        "flush": lambda: pool.flush(urgent=True),
        "clear": lambda: alloc.clear(),
        "set_kv": lambda: pool.set_kv("full", 0, alloc.translate_kv_loc(live[:1]), z, z),
        "get_cpu_copy": lambda: pool.get_cpu_copy("full", live[:1]),
        "load_cpu_copy": lambda: pool.load_cpu_copy("full", [torch.zeros(1)], live[:1]),
        "state_alloc": lambda: pool.allocator("mamba").alloc(1),
        "release again": lambda: pool.release_memory(),
        "forward": lambda: pool.set_inflight_forward(StandInEvent(), None),
        "kv_views": lambda: pool.kv_views("full"),  # a touch would fault (N2)
        "state_views": lambda: pool.state_views("mamba"),
    }


def test_calls_that_touch_bytes_are_refused_while_released(device: str) -> None:
    pool = _pool(device)
    live = pool.allocator("full").alloc(4 * PS)
    assert live is not None
    pool.release_memory(force=True)
    before = _snapshot(pool)
    for name, fn in _refusals(pool, live).items():
        with pytest.raises(ArgumentError, match="released"):
            fn()
        assert _same(before, _snapshot(pool)), f"{name} changed the pool"
    # Queries answer.
    assert pool.allocator("full").available_size() > 0
    assert pool.allocator("full").translate_kv_loc(live).shape == live.shape
    pool.resume_memory()
    pool.allocator("full").free(live)
    pool.check_invariants()


def test_resume_without_release_is_refused(device: str) -> None:
    pool = _pool(device)
    with pytest.raises(ArgumentError, match="not released"):
        pool.resume_memory()


def test_release_refused_while_a_forward_is_in_flight(device: str) -> None:
    pool = _pool(device)
    ids = pool.allocator("full").alloc(PS)
    assert ids is not None
    ev = StandInEvent()
    pool.set_inflight_forward(ev, ids)
    before = _snapshot(pool)
    with pytest.raises(ArgumentError, match="forward"):
        pool.release_memory()
    assert not pool.memory_released and _same(before, _snapshot(pool))
    ev.complete()
    pool.release_memory(keep_contents=True)
    assert pool.memory_released
    pool.resume_memory()


def test_queued_frees_are_applied_before_the_bytes_go(device: str) -> None:
    """A free queued behind a forward's event is applied (with its compaction) before
    the release, so no plan needs the bytes while they are gone."""
    pool = _pool(device)
    alloc = pool.allocator("full")
    a, b = alloc.alloc(4 * PS), alloc.alloc(4 * PS)
    assert a is not None and b is not None
    rows_b = _write(pool, b, 5)
    alloc.free(a.to(pool.device))  # device ids on CUDA: queued; host ids on CPU: applied
    pool.release_memory(keep_contents=True)
    assert pool.stats().inflight_frees == 0
    pool.resume_memory()
    torch.testing.assert_close(_read(pool, b), rows_b.cpu(), rtol=0, atol=0)
    assert np.all(alloc.translate_kv_loc(a).cpu().numpy() <= 0)
    pool.check_invariants()


def test_move_listeners_keep_hearing_after_a_resume(device: str) -> None:
    """Review round 4, F6: a release/resume cycle dropped every move listener, so a mirror
    of the bytes (the drop-in's foreign kvcache, a test shadow) went stale silently."""
    pool = _pool(device)
    alloc = pool.allocator("full")
    heard: list[list] = []
    pool.add_move_listener(heard.append)
    ids = alloc.alloc(8 * PS)
    assert ids is not None
    alloc.free(ids[: 2 * PS].cpu())  # host ids: applied now; eager: survivors move down
    assert len(heard) == 1
    pool.release_memory(keep_contents=True)
    pool.resume_memory()
    moved_before = pool.stats().pages_moved
    alloc.free(ids[2 * PS : 4 * PS].cpu())
    assert pool.stats().pages_moved > moved_before, "the free must move pages to test this"
    assert len(heard) == 2, "the listener missed the moves after the resume"
    ((name, src, dst),) = heard[1]
    assert name == "full" and len(src) == len(dst) == pool.stats().pages_moved - moved_before
    pool.remove_move_listener(heard.append)


def test_a_meta_pool_refuses_to_keep_contents_up_front() -> None:
    """Review round 4, N1: a meta pool's ``keep_contents=True`` raised an untyped
    NotImplementedError after the queued frees had been applied."""
    pool = _pool("meta")
    ids = pool.allocator("full").alloc(2 * PS)
    assert ids is not None
    before = _snapshot(pool)
    with pytest.raises(ArgumentError, match="keep_contents = True: a meta pool"):
        pool.release_memory(keep_contents=True)
    assert not pool.memory_released and _same(before, _snapshot(pool))
    pool.release_memory()  # no bytes to lose: live ids need no force on meta
    pool.resume_memory()
    assert _same(before, _snapshot(pool))


def test_views_are_refused_while_released(device: str) -> None:
    """Review round 4, N2: a view of a released buffer segfaulted the process on a touch
    (on CUDA a kernel would write freed memory). Views handed out before stay objects."""
    mla = ukv.MLASpec("lat", 1, 4, 4, torch.float32, grow="up")
    mamba = ukv.MambaSpec("mamba", 1, ((2, 3),), torch.float32, (2, 2), torch.float32, "down")
    pool = ukv.UnifiedKVPool(1 << 14, [mla, mamba], page_size=PS, device=device)
    pool.release_memory()
    for call in (lambda: pool.latent_views("lat"), lambda: pool.state_views("mamba")):
        with pytest.raises(ArgumentError, match="latent_views|state_views"):
            call()
    pool.resume_memory()
    assert len(pool.latent_views("lat")) == 1
    with pytest.raises(ArgumentError, match="no latent views"):
        pool.latent_views("mamba")  # still checked as before


def test_dropping_live_contents_needs_force(device: str) -> None:
    """Review round 4, N3: the default release dropped the bytes of live ids silently."""
    pool = _pool(device)
    full, mamba = pool.allocator("full"), pool.allocator("mamba")
    ids, slots = full.alloc(2 * PS), mamba.alloc(1)
    assert ids is not None and slots is not None
    rows = _write(pool, ids, 6)
    before = _snapshot(pool)
    with pytest.raises(ArgumentError, match=r"live pages \(2 of 'full', 1 of 'mamba'\)"):
        pool.release_memory()
    assert not pool.memory_released and _same(before, _snapshot(pool))
    torch.testing.assert_close(_read(pool, ids), rows.cpu(), rtol=0, atol=0)
    # Freed first (a free still queued counts: it is applied before the count), no force.
    full.free(ids.to(pool.device))
    mamba.free(slots)
    pool.release_memory()
    pool.resume_memory()
    pool.check_invariants()


# ----- keeping the address (issue 27 item 1; review round 4, F11) ----------------------------


def test_pools_without_virtual_memory_say_their_address_moves(device: str) -> None:
    """CPU and meta pools (and CUDA ones built with ``virtual_memory=False``) give the
    memory back through torch's allocator: they say so, and refuse ``keep_address``
    before changing anything."""
    for dev in {device, "meta"}:
        kw = {"virtual_memory": False} if dev.startswith("cuda") else {}
        full = ukv.MHASpec("full", 2, 1, 4, torch.float32, grow="up")
        mamba = ukv.MambaSpec("mamba", 1, ((2, 3),), torch.float32, (2, 2), torch.float32, "down")
        pool = ukv.UnifiedKVPool(1 << 15, [full, mamba], page_size=PS, device=dev, **kw)
        ids = pool.allocator("full").alloc(2 * PS)
        assert ids is not None and not pool.memory_release_keeps_address
        before = _snapshot(pool)
        with pytest.raises(ArgumentError, match="keep_address = True: .* would move"):
            pool.release_memory(keep_address=True, force=True)
        assert not pool.memory_released and _same(before, _snapshot(pool))
        pool.release_memory(force=True)  # without keep_address: as before
        pool.resume_memory()


def test_virtual_memory_and_allocation_context_are_checked(device: str) -> None:
    full = ukv.MHASpec("full", 2, 1, 4, torch.float32, grow="up")
    mamba = ukv.MambaSpec("mamba", 1, ((2, 3),), torch.float32, (2, 2), torch.float32, "down")

    def build(**kw):
        return ukv.UnifiedKVPool(1 << 15, [full, mamba], page_size=PS, device=device, **kw)

    bad = [
        ({"virtual_memory": "yes"}, "virtual_memory = 'yes'"),
        ({"allocation_context": 3}, "allocation_context = 3"),
        ({"allocation_context": contextlib.nullcontext, "virtual_memory": True}, "engine"),
    ]
    if device == "cpu":
        bad.append(({"virtual_memory": True}, "device cpu has no CUDA virtual memory"))
    for kw, match in bad:
        with pytest.raises(ukv.PoolConfigError, match=match):
            build(**kw)


class _EngineRegion:
    """An engine's allocation context (SGLang's ``memory_saver_adapter.region``): records
    what torch allocated while it was entered."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.inside: list[tuple[int, ...]] = []
        self.entered = 0
        self._monkeypatch = monkeypatch

    @contextlib.contextmanager
    def region(self):
        self.entered += 1
        zeros = torch.zeros

        def recording(*size, **kw):
            out = zeros(*size, **kw)
            self.inside.append(tuple(out.shape))
            return out

        with self._monkeypatch.context() as m:
            m.setattr(torch, "zeros", recording)
            yield


@pytest.mark.parametrize("keep_contents", [False, True])
def test_an_engine_context_owns_the_buffer_and_its_release(
    device: str, keep_contents: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The seam the SGLang drop-in uses: the buffer is allocated inside the engine's
    context, once; release and resume never free or reallocate it (the engine pauses
    and resumes its region), so the address stays; the pool still refuses byte-touching
    calls in between and restores or zeroes the bytes at the resume."""
    engine = _EngineRegion(monkeypatch)
    full = ukv.MHASpec("full", 2, 1, 4, torch.float32, grow="up")
    mamba = ukv.MambaSpec("mamba", 1, ((2, 3),), torch.float32, (2, 2), torch.float32, "down")
    pool = ukv.UnifiedKVPool(
        1 << 15, [full, mamba], page_size=PS, device=device, allocation_context=engine.region
    )
    assert engine.entered == 1 and engine.inside == [(1 << 15,)], "the buffer, inside, once"
    assert pool.memory_release_keeps_address
    ids = pool.allocator("full").alloc(4 * PS)
    assert ids is not None
    rows = _write(pool, ids, 7)
    address, storage = pool.raw.data_ptr(), pool.raw.untyped_storage().nbytes()
    pool.release_memory(keep_contents=keep_contents, force=True, keep_address=True)
    assert pool.memory_released and pool.raw.untyped_storage().nbytes() == storage
    with pytest.raises(ArgumentError, match="released"):
        pool.kv_views("full")
    pool.resume_memory()
    assert pool.raw.data_ptr() == address and engine.entered == 1
    want = rows.cpu() if keep_contents else torch.zeros_like(rows.cpu())
    torch.testing.assert_close(_read(pool, ids), want, rtol=0, atol=0)
    pool.allocator("full").free(ids[: 2 * PS])  # the same executor works on (moves bytes)
    pool.check_invariants()


def test_a_resume_that_finds_no_memory_leaves_the_pool_released(
    device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resume that cannot get the memory back (out of memory) changes nothing: the
    pool stays released, and a later resume succeeds."""
    pool = _pool(device)
    ids = pool.allocator("full").alloc(2 * PS)
    assert ids is not None
    rows = _write(pool, ids, 8)
    pool.release_memory(keep_contents=True)
    buffer = pool._runtime.buffer
    real = buffer.resume
    calls = []

    def short_of_memory() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise torch.OutOfMemoryError("injected: no memory for the resume")
        real()

    monkeypatch.setattr(buffer, "resume", short_of_memory)
    before = _snapshot(pool)
    with pytest.raises(torch.OutOfMemoryError, match="injected"):
        pool.resume_memory()
    assert pool.memory_released and _same(before, _snapshot(pool))
    with pytest.raises(ArgumentError, match="released"):
        pool.allocator("full").alloc(PS)
    pool.resume_memory()
    torch.testing.assert_close(_read(pool, ids), rows.cpu(), rtol=0, atol=0)


class _FakeDriver:
    """libcuda's virtual-memory calls, played on the host: tracks the reserved ranges,
    the physical allocations and what is mapped where; ``fail`` makes one call fail."""

    GRANULARITY = 2 << 20

    def __init__(self, vmm_supported: int = 1) -> None:
        self.supported = vmm_supported
        self.calls: list[str] = []
        self.reserved: dict[int, int] = {}
        self.handles: set[int] = set()
        self.mapped: dict[int, int] = {}
        self.fail: dict[str, int] = {}
        self._next = 1

    def __getattr__(self, name: str):
        if not name.startswith("cu"):
            raise AttributeError(name)

        def call(*args):
            self.calls.append(name)
            if name in self.fail:
                return self.fail.pop(name)
            return getattr(self, "_" + name, lambda *a: 0)(*args)

        return call

    def _cuDeviceGetAttribute(self, out, attr, dev):
        out._obj.value = self.supported if attr.value == 102 else 0
        return 0

    def _cuMemGetAllocationGranularity(self, out, prop, flags):
        assert prop._obj.location.type == 1 and prop._obj.type == 1  # device, pinned
        out._obj.value = self.GRANULARITY
        return 0

    def _cuMemAddressReserve(self, out, size, align, addr, flags):
        assert size.value % self.GRANULARITY == 0
        out._obj.value = 0x7F00_0000_0000 + len(self.reserved) * (1 << 32)
        self.reserved[out._obj.value] = size.value
        return 0

    def _cuMemCreate(self, out, size, prop, flags):
        out._obj.value = self._next
        self.handles.add(self._next)
        self._next += 1
        return 0

    def _cuMemMap(self, ptr, size, offset, handle, flags):
        assert ptr.value in self.reserved and ptr.value not in self.mapped
        self.mapped[ptr.value] = handle.value
        return 0

    def _cuMemUnmap(self, ptr, size):
        del self.mapped[ptr.value]
        return 0

    def _cuMemRelease(self, handle):
        self.handles.remove(handle.value)
        return 0

    def _cuMemAddressFree(self, ptr, size):
        assert ptr.value not in self.mapped
        del self.reserved[ptr.value]
        return 0

    def _cuGetErrorString(self, code, out):
        return 1  # unknown to the stand-in


def test_a_mapping_keeps_its_address_across_unmap_and_map() -> None:
    from ukv.execution import vmm

    lib = _FakeDriver()
    driver = vmm.Driver(lib)
    assert vmm.unsupported(driver, 0) is None
    m = vmm.Mapping(driver, 0, 3 << 20)
    assert m.size == 4 << 20 and m.mapped, "rounded up to the granularity, mapped"
    address = m.address
    assert lib.mapped == {address: 1} and lib.handles == {1}
    m.unmap()
    assert not m.mapped and lib.mapped == {} and lib.handles == set()
    assert lib.reserved == {address: 4 << 20}, "the range stays reserved"
    m.map()
    assert m.address == address and lib.mapped == {address: 2}
    assert lib.calls[-3:] == ["cuMemCreate", "cuMemMap", "cuMemSetAccess"]
    m.close()
    assert lib.reserved == {} and lib.handles == set() and lib.mapped == {}
    m.close()  # idempotent, never raises


def test_a_failed_map_leaves_nothing_allocated() -> None:
    from ukv.execution import vmm

    lib = _FakeDriver()
    m = vmm.Mapping(vmm.Driver(lib), 0, 1 << 20)
    m.unmap()
    lib.fail["cuMemSetAccess"] = 1
    with pytest.raises(vmm.DriverError, match="cuMemSetAccess failed: CUDA error 1"):
        m.map()
    assert not m.mapped and lib.mapped == {} and lib.handles == set()
    lib.fail["cuMemCreate"] = vmm.CUDA_ERROR_OUT_OF_MEMORY
    with pytest.raises(vmm.DriverError) as err:
        m.map()
    assert err.value.code == 2 and not m.mapped
    m.map()  # a retry succeeds at the same address
    assert lib.mapped == {m.address: 3}
    lib.fail["cuMemMap"] = 1
    with pytest.raises(vmm.DriverError):
        vmm.Mapping(vmm.Driver(lib), 0, 1 << 20)  # a new range whose first map fails
    assert list(lib.reserved) == [m.address], "the failed range was freed"


def test_a_driver_without_virtual_memory_is_named() -> None:
    from ukv.execution import vmm

    assert "does not support" in (vmm.unsupported(vmm.Driver(_FakeDriver(0)), 1) or "")
    lib = _FakeDriver()
    lib.fail["cuInit"] = 100
    assert "cannot tell" in (vmm.unsupported(vmm.Driver(lib), 0) or "")


# ----- GPU: the address survives, and so do CUDA graphs captured before ----------------------


def _cuda_pool(**kw) -> ukv.UnifiedKVPool:
    full = ukv.MHASpec("full", 2, 2, 64, torch.bfloat16, grow="up")
    mamba = ukv.MambaSpec("mamba", 1, ((8, 3),), torch.float32, (2, 4, 4), torch.float32, "down")
    return ukv.UnifiedKVPool(64 << 20, [full, mamba], page_size=PS, device="cuda", **kw)


@pytest.mark.gpu
def test_a_virtual_memory_release_gives_the_device_memory_back() -> None:
    pool = _cuda_pool(virtual_memory=True)
    assert pool.memory_release_keeps_address and pool._runtime.buffer.kind == "cuda-vmm"
    address = pool.raw.data_ptr()
    torch.cuda.synchronize()
    free_before, _ = torch.cuda.mem_get_info()
    pool.release_memory()
    free_released, _ = torch.cuda.mem_get_info()
    assert free_released - free_before >= pool.total_bytes // 2, "the memory was not freed"
    pool.resume_memory()
    free_resumed, _ = torch.cuda.mem_get_info()
    assert free_released - free_resumed >= pool.total_bytes // 2
    assert pool.raw.data_ptr() == address and not pool.raw.any()
    assert _cuda_pool().memory_release_keeps_address, "the default maps virtual memory"


@pytest.mark.gpu
@pytest.mark.parametrize("keep_contents", [False, True])
def test_a_graph_captured_before_a_release_replays_after_the_resume(keep_contents: bool) -> None:
    """SGLang's decode graphs are captured at start-up over the pool's buffer and tables;
    a memory-saver cycle (weight update) must leave them valid. The graph translates
    virtual ids and writes K/V through ``set_kv``; after release and resume (same
    address) its replay writes every byte where the ids say, also after a compaction
    moved the pages (the tables it reads are current)."""
    pool = _cuda_pool(virtual_memory=True)
    fa = pool.allocator("full")
    other = fa.alloc(8 * PS)  # below ids: freeing it moves ids' pages down
    ids = fa.alloc(4 * PS)
    assert other is not None and ids is not None
    rows_other = _cuda_rows(other.numel(), 1.0)
    phys_other = fa.translate_kv_loc(other)
    for layer in range(2):
        pool.set_kv("full", layer, phys_other, rows_other[layer], rows_other[layer])
    k = torch.zeros(2, ids.numel(), 2, 64, device="cuda", dtype=torch.bfloat16)
    phys = torch.empty(ids.numel(), dtype=torch.int64, device="cuda")

    def step() -> None:
        fa.translate_kv_loc(ids, out=phys)
        for layer in range(2):
            pool.set_kv("full", layer, phys, k[layer], k[layer])

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up: compile, fill the launch caches
        step()
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    address = pool.raw.data_ptr()
    pool.release_memory(keep_contents=keep_contents, force=True, keep_address=True)
    pool.resume_memory()
    assert pool.raw.data_ptr() == address
    k.copy_(_cuda_rows(ids.numel(), 2.0))
    graph.replay()
    torch.cuda.synchronize()
    _check_rows(pool, ids, k)
    want_other = rows_other if keep_contents else torch.zeros_like(rows_other)
    _check_rows(pool, other, want_other)
    fa.free(other.cpu())  # eager: ids' pages move down; the graph reads the new rows
    assert pool.stats().pages_moved > 0
    k.copy_(_cuda_rows(ids.numel(), 3.0))
    graph.replay()
    torch.cuda.synchronize()
    _check_rows(pool, ids, k)
    pool.check_invariants()


def _cuda_rows(n: int, seed: float) -> torch.Tensor:
    g = torch.Generator(device="cuda").manual_seed(int(seed * 1000))
    return torch.randn(2, n, 2, 64, device="cuda", generator=g).to(torch.bfloat16)


def _check_rows(pool: ukv.UnifiedKVPool, ids: torch.Tensor, rows: torch.Tensor) -> None:
    copy = pool.get_cpu_copy("full", ids)
    for layer in range(2):
        for half in range(2):
            assert torch.equal(copy[2 * layer + half], rows[layer].cpu()), (layer, half)
