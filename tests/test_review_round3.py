"""Review round 3 (docs/RELIABILITY.md §7): the defects whose directed tests do not live in
the differential suite (tests/test_differential.py): the big staging buffer's event (C4),
state slots under a reported forward (C6), the SWA factory's boot check (C11), frees
queued behind device frees and their rejection (C3, C8), the request table's atomic free
(C2), the capture guard (S3), device guards (S2), the request table's staging (S5) and the
ring's teardown (S4).

Frees of device ids cannot be issued on a CPU pool; as in test_execution.py they are
queued through ``PoolRuntime.queue_free`` with a stand-in event, exactly where a CUDA
pool's staging copy would queue them.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from standins import StandInEvent as StandIn

import ukv
from ukv.execution import ring as ring_mod
from ukv.execution.deferred import LandingIds


def _full_mamba(lazy: bool = False, ps: int = 1) -> ukv.UnifiedKVPool:
    full = ukv.MHASpec("full", 1, 1, 4, torch.float32, grow="up")
    mamba = ukv.MambaSpec("mamba", 1, ((2,),), torch.float32, (2,), torch.float32, grow="down")
    return ukv.UnifiedKVPool(1 << 13, [full, mamba], page_size=ps, device="cpu", lazy=lazy)


def _queue_device_free(pool, alloc, ids, event, apply=None) -> None:
    host = np.asarray(torch.as_tensor(ids).cpu().numpy(), dtype=np.int64)
    pool._runtime.queue_free(alloc._index, LandingIds(host, event), apply or alloc._core_free)


# ----- C3 / C8: queued frees keep their order; a rejected one leaks nothing ---------------


def test_host_free_queues_behind_a_device_free_of_the_same_space() -> None:
    pool = _full_mamba()
    kv = pool.allocator("full")
    ids = kv.alloc(4, host=True)
    ev = StandIn()
    _queue_device_free(pool, kv, ids, ev)
    kv.free(ids)  # the caller's double free: must not overtake the queued one
    assert kv.allocated_count() == 4, "nothing applied while the device free is in flight"
    assert pool.stats().inflight_frees == 2
    ev.done = True
    with pytest.raises(ukv.DeferredFreeError) as err:
        pool.sync_frees()
    (failed,) = err.value.failures
    assert failed.rejected.tolist() == ids.tolist() and failed.freed.size == 0
    assert kv.allocated_count() == 0
    new = kv.alloc(4, host=True)
    assert all(kv.is_slot_allocated(int(t)) for t in new), "a recycled id stays live"
    pool.check_invariants()


def test_rejected_queued_free_frees_its_valid_ids_and_names_the_rest() -> None:
    pool = _full_mamba()
    kv = pool.allocator("full")
    ids = kv.alloc(4, host=True)
    kv.free(ids[3:])  # an engine bug elsewhere
    _queue_device_free(pool, kv, ids, StandIn(done=True))
    with pytest.raises(ukv.DeferredFreeError, match=rf"\[{int(ids[3])}\]") as err:
        kv.alloc(1)
    assert isinstance(err.value, ukv.DoubleFreeError)
    assert kv.allocated_count() == 0, "the three valid ids were freed, none leaks"
    assert pool.failed_frees[-1].freed.tolist() == ids[:3].tolist()
    assert kv.alloc(1) is not None, "the retried call runs"
    pool.check_invariants()


def test_queries_apply_no_queued_free() -> None:
    pool = _full_mamba()
    kv = pool.allocator("full")
    ids = kv.alloc(6, host=True)
    keep = ids[4:]
    _queue_device_free(pool, kv, ids[:2], StandIn(done=True))
    phys = kv.translate_kv_loc(keep).tolist()
    kv.available_size(), kv.schedulable_available_size(), pool.stats()
    pool.get_cpu_copy("full", keep)
    assert kv.translate_kv_loc(keep).tolist() == phys, "no query moved a page (C9)"
    pool.flush()
    assert kv.translate_kv_loc(keep).tolist() != phys, "a mutating call applies it"


# ----- C2: the request table frees only what it no longer holds, atomically --------------


def _table(ps: int):
    pool = _full_mamba(ps=ps)
    kv = pool.allocator("full")
    return pool, kv, ukv.RequestTable(kv, 4, 64)


def test_partial_page_suffix_keeps_the_kept_tokens_page() -> None:
    _, kv, tab = _table(ps=4)
    r = tab.alloc_request()
    ids = kv.alloc(8, host=True)
    tab.append_tokens(r, ids)
    tab.free_tokens(r, 6)  # tokens 6, 7 share a page with the kept 4, 5
    assert tab.length(r) == 6
    assert all(kv.is_slot_allocated(int(t)) for t in tab.tokens(r))
    tab.free_tokens(r, 2)  # the second page goes now (no kept token on it)
    assert not kv.is_slot_allocated(int(ids[4]))
    tab.free_request(r)
    assert kv.allocated_count() == 0


def test_free_request_is_atomic_when_a_token_was_freed_elsewhere() -> None:
    _, kv, tab = _table(ps=1)
    r = tab.alloc_request()
    ids = kv.alloc(4, host=True)
    tab.append_tokens(r, ids)
    kv.free(ids[1:2])  # freed behind the table's back
    with pytest.raises(ukv.InvalidIdError, match=str(int(ids[1]))):
        tab.free_request(r)
    assert tab.length(r) == 4 and kv.allocated_count() == 3, "nothing changed"


# ----- C4: the big staging buffer's event follows its launches ----------------------------


def test_big_payload_is_kept_after_its_last_launch(monkeypatch) -> None:
    monkeypatch.setattr(ring_mod, "RING_ELEMENTS", 1 << 9)  # 64-element segments
    pool = _full_mamba()
    if not hasattr(pool._exec, "ring"):
        pytest.skip("the packed executor (TRITON_INTERPRET=1 or CUDA) owns the staging ring")
    ring = pool._exec.ring
    order: list[str] = []
    real_launch = pool._exec._launch
    monkeypatch.setattr(ring, "keep", lambda t: order.append("keep"))
    monkeypatch.setattr(
        pool._exec,
        "_launch",
        lambda *a, **k: (order.append("launch"), real_launch(*a, **k))[1],
    )
    kv = pool.allocator("full")
    ids = kv.alloc(200, host=True)
    kv.free(ids[::2].contiguous())  # 50 moves: 100 words, past one 64-word segment
    assert "keep" in order, "the payload needed a buffer of its own"
    assert order.index("keep") > max(i for i, op in enumerate(order) if op == "launch")


# ----- C6: no state slot moves under an unretired forward ---------------------------------


def test_non_urgent_flush_moves_no_state_slot_under_a_forward() -> None:
    pool = _full_mamba(lazy=True)
    slots = pool.allocator("mamba")
    a, b, c = (slots.alloc(1, host=True) for _ in range(3))
    slots.free(a)  # the slot at the band's anchored end: b and c would walk into it
    ev = StandIn()
    pool.set_inflight_forward(ev)
    before = slots.translate_kv_loc(torch.cat([b, c])).tolist()
    assert pool.flush() == 0
    assert slots.translate_kv_loc(torch.cat([b, c])).tolist() == before
    ev.done = True
    assert pool.flush() >= 1, "once the forward retired, the slots compact"
    pool.check_invariants()


# ----- C11: the SWA factory admits one max_context_len extend it accepted -----------------


@pytest.mark.parametrize("extend", [None, 16])
def test_swa_factory_minimum_admits_one_full_extend(extend) -> None:
    full = ukv.MHASpec("full", 1, 1, 4, torch.float32, grow="up")
    swa = ukv.MHASpec("swa", 1, 1, 4, torch.float32, grow="down")
    kw = dict(window=8, max_context_len=64, max_extend_tokens=extend, page_size=1, device="cpu")
    with pytest.raises(ukv.PoolConfigError) as err:
        ukv.build_swa_hybrid(full, swa, total_bytes=1, **kw)
    need = int(re.search(r"needs (\d+) bytes", str(err.value)).group(1))
    hp = ukv.build_swa_hybrid(full, swa, total_bytes=need, **kw)
    a, chunk = hp.allocator, extend or 64
    got, done = [], 0
    while done < 64:
        n = min(chunk, 64 - done)
        pre, seq = torch.tensor([done]), torch.tensor([done + n])
        last = torch.tensor([got[-1][-1].item() if got else -1])
        ids = a.alloc_extend(pre, pre, seq, seq, last, n)
        assert ids is not None, f"extend {done}->{done + n} refused by a pool the check accepted"
        got.append(ids)
        done += n
        window_out = torch.cat(got)[: max(0, done - 8)]
        if window_out.numel():
            a.free_swa(window_out)
    hp.pool.check_invariants()


# ----- S3: no mutating call under CUDA-graph capture --------------------------------------


@pytest.mark.gpu
def test_mutating_calls_refuse_graph_capture() -> None:
    full = ukv.MHASpec("full", 1, 1, 4, torch.float16, grow="up")
    swa = ukv.MHASpec("swa", 1, 1, 4, torch.float16, grow="down")
    pool = ukv.UnifiedKVPool(1 << 16, [full, swa], device="cuda")
    kv = pool.allocator("full")
    ids = kv.alloc(4)
    out = torch.empty(4, dtype=torch.int64, device="cuda")
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    kv.translate_kv_loc(ids, out=out)  # warm the launch outside capture
    kv.free(kv.alloc(2))  # a free of device ids, queued while its ids land
    queued = pool.stats().inflight_frees
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph, stream=stream):
            kv.translate_kv_loc(ids, out=out)  # capturable
            for call in (lambda: kv.alloc(1), lambda: kv.free(ids[:1]), lambda: pool.flush()):
                with pytest.raises(ukv.ArgumentError, match="capturing"):
                    call()
    graph.replay()
    torch.cuda.synchronize()
    assert pool.stats().inflight_frees <= queued, "capture applied or queued nothing"
    pool.sync_frees()
    assert kv.allocated_count() == 4, "nothing was committed during capture"
    assert out.tolist() == kv.translate_kv_loc(ids).tolist()
    pool.check_invariants()


# ----- S5: the request table's device rows never see a later host write -------------------


@pytest.mark.gpu
def test_request_rows_copy_a_snapshot_not_the_mirror() -> None:
    full = ukv.MHASpec("full", 1, 1, 4, torch.float16, grow="up")
    swa = ukv.MHASpec("swa", 1, 1, 4, torch.float16, grow="down")
    pool = ukv.UnifiedKVPool(1 << 16, [full, swa], device="cuda")
    kv = pool.allocator("full")
    tab = ukv.RequestTable(kv, 2, 16)
    torch.cuda._sleep(50_000_000)  # the copies below queue behind ~25 ms of work
    r = tab.alloc_request()
    first = kv.alloc(4, host=True)
    tab.append_tokens(r, first)
    seen = tab.req_to_token[r, :4].clone()  # a kernel between the two copies
    tab.free_tokens(r, 0)
    second = kv.alloc(4, host=True)
    tab.append_tokens(r, second)  # rewrites the host row before the first copy has run
    torch.cuda.synchronize()
    assert seen.tolist() == first.tolist(), "the first copy delivered the later row"
    assert tab.req_to_token[r, :4].tolist() == second.tolist()
