"""Directed tests of the round-3 review's defects (review-round3.md), one or two per item,
each following the review's reproduction. Every one marked ``xfail`` failed on the code
before the fixes (2d4a02f); the marks went when the fixes landed.

Frees of device ids cannot be issued on a CPU pool: as in the review, a queued free is
queued where a CUDA pool queues one, ``PoolRuntime.queue_free`` (see ``queued.py``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ukv
from ukv.execution.deferred import LandingIds
from ukv.execution.ring import StagingRing

from .queued import StandInEvent


def _queue(pool: ukv.UnifiedKVPool, alloc, ids, *, swa: bool = False, done: bool = False):
    """A queued free of device ids with a stand-in event (as queued.QueuedFrees does)."""
    host = np.asarray(torch.as_tensor(ids).cpu().numpy(), dtype=np.int64).copy()
    event = StandInEvent()
    event.done = done
    apply = alloc._core_free_swa if swa else alloc._core_free
    pool._runtime.queue_free(alloc._index, LandingIds(host, event), apply)
    return event


def _swa_pool(ps: int, lazy: bool, device: str = "cpu", full_layers: int = 1):
    full = ukv.MHASpec("full", full_layers, 1, 4, torch.float32, grow="up")
    swa = ukv.MHASpec("swa", 1, 1, 4, torch.float32, grow="down")
    total = ukv.specs.reserved_floor([full, swa], ps)
    total += 16 * full.page_bytes(ps) + 16 * swa.page_bytes(ps)
    pool = ukv.UnifiedKVPool(
        total, [full, swa], page_size=ps, device=device, lazy=lazy, bind={"swa": "full"}
    )
    return pool, ukv.SWAHybridAllocator(pool, "full", "swa")


def _plain_pool(ps: int = 1, lazy: bool = False, device: str = "cpu") -> ukv.UnifiedKVPool:
    full = ukv.MHASpec("full", 1, 1, 4, torch.float32, grow="up")
    mamba = ukv.MambaSpec("mamba", 1, ((2, 3),), torch.float32, (2, 2), torch.float32, "down")
    total = ukv.specs.reserved_floor([full, mamba], ps) + 16 * full.page_bytes(ps) + 640
    return ukv.UnifiedKVPool(total, [full, mamba], page_size=ps, device=device, lazy=lazy)


def _got(ids: torch.Tensor | None) -> torch.Tensor:
    assert ids is not None, "the allocation did not fit"
    return ids


def _stamp_swa(pool, a, ids: torch.Tensor) -> None:
    loc = a.translate_loc_from_full_to_swa(ids).to(torch.int64)
    k = (ids.to(torch.float32) + 1).view(-1, 1, 1).expand(-1, 1, 4).contiguous()
    pool.set_kv("swa", 0, loc, k, k)


def _read_swa(pool, a, ids: torch.Tensor) -> list[float]:
    loc = a.translate_loc_from_full_to_swa(ids).to(torch.int64)
    k = pool.kv_views("swa")[0][0]
    return k[loc // pool.page_size, loc % pool.page_size][:, 0, 0].tolist()


# ----- C1 ----------------------------------------------------------------------------------


@pytest.mark.parametrize("queued", [False, True], ids=["direct", "queued"])
@pytest.mark.parametrize(
    "lazy",
    [
        # Lazy frees move nothing, so on a CPU pool (no device mirror) the dropped plan
        # loses no byte; on CUDA its rows never reach the mirror.
        pytest.param(False, id="eager"),
        pytest.param(True, id="lazy"),
    ],
)
@pytest.mark.parametrize("ps", [1, 4])
def test_c1_free_swa_inside_a_composite_group_keeps_swa_bytes(ps, lazy, queued) -> None:
    pool, a = _swa_pool(ps, lazy)
    ids = torch.cat([a.alloc(4 * ps), a.alloc(4 * ps)])  # requests A and B
    other = a.alloc(ps)
    _stamp_swa(pool, a, ids)
    a_ids, b_ids = ids[: 4 * ps], ids[4 * ps :]
    a.free_group_begin()
    if queued:  # behind a queued device free, the free_swa and the group end queue too
        ev1 = _queue(pool, a, other)
        ev2 = _queue(pool, a, a_ids, swa=True)
        a.free_group_end()
        ev1.done = ev2.done = True
        pool.sync_frees()
    else:
        a.free_swa(a_ids)
        a.free_group_end()
    pool.flush(urgent=True)
    pool.check_invariants()
    assert _read_swa(pool, a, b_ids) == (b_ids + 1).tolist(), "B's SWA rows lost"


def test_c1_a_composite_group_end_that_raises_changes_nothing() -> None:
    pool, a = _swa_pool(1, False)
    ids = torch.cat([a.alloc(4), a.alloc(4)])
    swa = pool._idx("swa")
    pool.allocator("swa").free_group_begin()  # a group on the SWA side only
    a.free_swa(ids[:4])
    before = [pool._arena.pool_state(i) for i in range(2)]
    with pytest.raises(ukv.ArgumentError):
        a.free_group_end()
    assert [pool._arena.pool_state(i) for i in range(2)] == before
    assert pool._arena.in_free_group(swa), "the SWA group was closed by a call that raised"


# ----- C2 ----------------------------------------------------------------------------------


def _table_pool(ps: int):
    pool = _plain_pool(ps)
    kv = pool.allocator("full")
    return pool, kv, ukv.RequestTable(kv, 4, 64)


def test_c2_middle_span_free_never_frees_another_requests_tokens() -> None:
    pool, kv, tab = _table_pool(1)
    r0 = tab.alloc_request()
    tab.append_tokens(r0, kv.alloc(6, host=True))
    try:
        tab.free_tokens(r0, 2, 4)
    except ukv.ArgumentError:
        pass  # refusing a middle span is a fix too
    r1 = tab.alloc_request()
    tab.append_tokens(r1, kv.alloc(kv.available_size(), host=True))
    tab.free_request(r0)
    r1_ids = tab.tokens(r1).tolist()
    assert all(kv.is_slot_allocated(t) for t in r1_ids), "r0's free freed r1's tokens"
    tab.free_request(r1)
    assert kv.allocated_count() == 0


def test_c2_suffix_from_inside_a_page_keeps_the_row_allocated() -> None:
    pool, kv, tab = _table_pool(4)
    r0 = tab.alloc_request()
    tab.append_tokens(r0, kv.alloc(8, host=True))
    try:
        tab.free_tokens(r0, 6)
    except ukv.ArgumentError:
        pass
    row = tab.tokens(r0).tolist()
    assert all(kv.is_slot_allocated(t) for t in row), f"row {row} holds freed tokens"
    pool.get_cpu_copy("full", torch.tensor(row))  # every token of the row is live
    tab.free_request(r0)
    assert kv.allocated_count() == 0


# ----- C3 ----------------------------------------------------------------------------------


def _cycle_until(alloc, ids: torch.Tensor, rounds: int = 64) -> torch.Tensor:
    """Allocate and free until the allocator hands ``ids`` out again (the FIFO comes
    round); the last allocation is kept and returned (empty if it never came round)."""
    want = set(ids.tolist())
    for _ in range(rounds):
        got = alloc.alloc(len(ids), host=True)
        if got is None:
            break
        if want <= set(got.tolist()):
            return got
        alloc.free(got)
    return torch.empty(0, dtype=torch.int64)


def test_c3_host_free_behind_a_queued_free_swa_keeps_the_next_owner() -> None:
    pool, a = _swa_pool(1, False)
    req_a = _got(a.alloc(4))
    ev = _queue(pool, a, req_a, swa=True)  # free_swa of ids on the GPU, not landed
    a.free(req_a)  # the request finishes: freed from the host mirror
    req_b = _cycle_until(a, req_a)  # the ids come round again, for request B
    ev.done = True
    pool.sync_frees()
    swa_v2p = pool._arena.v2p(pool._idx("swa"))
    assert (swa_v2p[req_b.numpy()] >= 0).all(), "B's SWA binding was released"
    assert (a.translate_loc_from_full_to_swa(req_b) != 0).all()
    pool.check_invariants()


def test_c3_host_free_behind_a_queued_free_of_the_same_ids_is_a_double_free() -> None:
    pool = _plain_pool()
    fa = pool.allocator("full")
    ids = _got(fa.alloc(4))
    ev = _queue(pool, fa, ids)
    raised = False
    try:
        fa.free(ids)  # queued behind the device free of the same ids (never overtakes it)
    except ukv.DoubleFreeError:
        raised = True
    try:
        other = _cycle_until(fa, ids)  # an alloc that needs the ids applies the queue
    except ukv.DoubleFreeError:
        raised = True
        other = _cycle_until(fa, ids)
    ev.done = True
    try:
        pool.sync_frees()
    except ukv.DoubleFreeError:
        raised = True
    assert raised, "a double free went unreported"
    assert all(fa.is_slot_allocated(int(t)) for t in other), "a live id was freed"


# ----- C5, C7 -----------------------------------------------------------------------------


def _lazy_with_holes():
    pool = _plain_pool(1, lazy=True)
    fa = pool.allocator("full")
    ids = _got(fa.alloc(12))
    fa.free(ids[:4])  # holes below the survivors
    return pool, fa, ids


def test_c5_lazy_flush_keeps_every_unretired_forwards_pages() -> None:
    pool, fa, ids = _lazy_with_holes()
    n, n1 = ids[-1:], ids[-2:-1]
    pool.set_inflight_forward(StandInEvent(), n.clone())  # forward N
    pool.set_inflight_forward(StandInEvent(), n1.clone())  # N+1, N still running
    before = fa.translate_kv_loc(torch.cat([n, n1]))
    pool.flush()
    assert fa.translate_kv_loc(torch.cat([n, n1])).tolist() == before.tolist()


def test_c6_lazy_flush_moves_no_state_slot_under_a_forward() -> None:
    pool = _plain_pool(1, lazy=True)
    ma = pool.allocator("mamba")
    slots = _got(ma.alloc(3))
    v2p = pool._arena.v2p(pool._idx("mamba"))
    top = int(slots[np.argmax(v2p[slots.numpy()])])  # the band's anchored end
    ma.free(torch.tensor([top]))
    keep = torch.tensor([int(s) for s in slots if int(s) != top])
    before = ma.translate_kv_loc(keep).tolist()
    ev = StandInEvent()
    pool.set_inflight_forward(ev)  # updates the states of its batch in place
    pool.flush()
    assert ma.translate_kv_loc(keep).tolist() == before, "a state moved under the forward"
    ev.done = True
    pool.flush()


def test_c7_a_reused_host_out_cache_loc_keeps_the_reported_write_set() -> None:
    pool, fa, ids = _lazy_with_holes()
    staging = ids[-1:].clone()
    before = fa.translate_kv_loc(staging.clone())
    pool.set_inflight_forward(StandInEvent(), staging)
    staging[0] = ids[4]  # the engine fills its buffer for the next batch
    pool.flush()
    assert fa.translate_kv_loc(ids[-1:]).tolist() == before.tolist()


# ----- C8, C9 -----------------------------------------------------------------------------


def test_c8_a_rejected_queued_free_leaks_nothing_and_names_its_ids() -> None:
    pool = _plain_pool()
    fa = pool.allocator("full")
    ids = _got(fa.alloc(4))
    fa.free(ids[3:])  # an engine bug elsewhere: token 4 freed already
    _queue(pool, fa, ids, done=True)
    errors: list[BaseException] = []
    got = None
    try:
        got = fa.alloc(1)
    except ukv.DoubleFreeError as e:
        errors.append(e)
    try:
        pool.sync_frees()
    except ukv.DoubleFreeError as e:
        errors.append(e)
    assert errors, "the double free of the queued batch went unreported"
    assert len(pool._runtime.frees) == 0
    named: set[int] = set()
    for err in errors:
        for failed in getattr(err, "failures", ()):
            named |= {int(t) for t in failed.ids}
    for failed in pool.failed_frees:
        named |= {int(t) for t in failed.ids}
    held = fa.allocated_count() - (0 if got is None else len(got))
    valid = {int(t) for t in ids[:3]}
    assert held == 0 or valid <= named, f"{held} tokens leaked, named {sorted(named)}"


def test_c9_queries_do_not_move_pages() -> None:
    pool = _plain_pool()
    fa = pool.allocator("full")
    gone, keep = _got(fa.alloc(2)), _got(fa.alloc(2))
    _queue(pool, fa, gone, done=True)  # landed, not applied yet
    before = fa.translate_kv_loc(keep).tolist()
    fa.available_size()
    fa.schedulable_available_size()
    pool.stats()
    assert fa.translate_kv_loc(keep).tolist() == before, "a query moved pages"


# ----- C10, C11 ---------------------------------------------------------------------------


def test_c10_cpu_copy_of_the_swa_side_of_the_lowest_ids(device: str) -> None:
    pool, a = _swa_pool(1, False, device, full_layers=2)  # 64 B per full token, 32 per SWA
    assert pool.min_slot_index("full") != pool.min_slot_index("swa")
    ids = a.alloc(2)
    _stamp_swa(pool, a, ids.to(a.v2p.device))
    copy = pool.get_cpu_copy("swa", ids)
    assert copy[0][:, 0, 0].tolist() == (ids.cpu().float() + 1).tolist()
    pool.load_cpu_copy("swa", [c * 2 for c in copy], ids)


def test_c11_swa_factory_minimum_pool_admits_one_max_context_extend(device: str) -> None:
    full = ukv.MHASpec("full", 1, 1, 4, torch.float16, grow="up")
    swa = ukv.MHASpec("swa", 1, 1, 4, torch.float16, grow="down")
    ctx, window = 64, 8

    def build(total: int):
        return ukv.build_swa_hybrid(
            full, swa, window=window, total_bytes=total, max_context_len=ctx, page_size=1,
            device=device,
        )  # fmt: skip

    lo, hi = 1, 1 << 16  # the smallest size the boot check accepts
    while lo < hi:
        mid = (lo + hi) // 2
        try:
            build(mid)
            hi = mid
        except ukv.PoolConfigError:
            lo = mid + 1
    hp = build(lo)
    z, n = torch.tensor([0]), torch.tensor([ctx])
    got = hp.allocator.alloc_extend(z, z, n, n, torch.tensor([-1]), ctx)
    assert got is not None, (
        f"a pool of {lo} bytes passed the boot check but takes no {ctx}-token extend"
    )


# ----- C12, C13 ---------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["detach", "release"])
def test_c12_a_landing_forgets_the_event_it_gave_back(how: str) -> None:
    ring = StagingRing(torch.device("cpu"), elements=64, segments=4)
    event = StandInEvent()
    event.done = True
    off = ring.take(4)
    landing = LandingIds(ring.array[off : off + 4], event, ring, ring.hold(off))
    getattr(landing, how)()
    assert landing.landed()
    assert ring._spare and ring._spare[-1] is event
    reused = ring._spare.pop()  # the ring records the spare event for other work
    reused.done = False  # type: ignore[attr-defined]
    assert landing.landed(), "the landing reports on the recycled event's new work"


def test_c13_mamba_slot_zero_translates_to_minus_one(device: str) -> None:
    pool = _plain_pool(device=device)
    slots = ukv.MambaSlots(pool, "mamba")
    got = slots.translate(torch.tensor([0, -1], device=pool.allocator("mamba").v2p.device))
    assert got.tolist() == [-1, -1]
