"""Giving the byte buffer's memory back and taking it again (``release_memory`` /
``resume_memory``, SGLang's ``enable_memory_saver``): tables, ids and sizes survive, the
bytes survive with ``keep_contents``, every call that touches bytes is refused in between
with the pool unchanged, and the pool works on afterwards (allocations, compaction, frees)
with every live byte intact."""

from __future__ import annotations

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
    pool.release_memory(keep_contents=True)
    assert pool.memory_released
    assert pool.raw.untyped_storage().nbytes() == 0
    assert _same(before, _snapshot(pool)), "queries still answer, from the same tables"
    pool.resume_memory()
    assert not pool.memory_released and pool.raw.untyped_storage().nbytes() == pool.total_bytes
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
    alloc.free(ids[: 2 * PS])  # eager: the survivors above move down
    assert len(heard) == 1
    pool.release_memory(keep_contents=True)
    pool.resume_memory()
    moved_before = pool.stats().pages_moved
    alloc.free(ids[2 * PS : 4 * PS])
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
