"""Hybrid composites through the public API: the SWA and Mamba composites, the request
table and the factories, on the test device (CPU by default).

Every randomized run checks both sides' invariants after every operation, the feasibility
contract (``n <= available_size()`` ⇒ success; one page more ⇒ None with nothing changed)
and that bytes written through virtual ids read back intact after compaction moved them.
The SWA traces follow the reference's allocator tests (reference-design §10).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pool_builders import swa_hybrid

import ukv
from ukv.errors import ArgumentError, InvalidIdError, PoolConfigError


def _swa(device: str, full_layers=4, swa_layers=2, ps=1, pages=(32, 16), lazy=False, **kw):
    return swa_hybrid(device, full_layers=full_layers, swa_layers=swa_layers, ps=ps,
                      pages=pages, lazy=lazy, **kw)  # fmt: skip


def _sides(pool):
    return tuple(pool._arena.pool_state(i) for i in range(2))


def _ids_to(pool, ids):
    return ids.to(pool.allocator("full").v2p.device)


# ----- SWA composite ------------------------------------------------------------------


def test_swa_alloc_binds_both_sides(device: str) -> None:
    pool, a = _swa(device)
    ids = a.alloc(3)
    assert ids is not None and len(ids) == 3
    full_v2p, swa_v2p = pool.allocator("full").v2p.cpu(), pool.allocator("swa").v2p.cpu()
    assert (full_v2p[ids.cpu()] >= 0).all() and (swa_v2p[ids.cpu()] >= 0).all()
    a.free(ids)
    pool.sync_frees()  # on CUDA a free of device ids lands asynchronously
    assert (pool.allocator("full").v2p.cpu()[ids.cpu()] == -1).all()
    assert (pool.allocator("swa").v2p.cpu()[ids.cpu()] == -1).all()
    pool.check_invariants()


def test_free_swa_keeps_the_virtual_id_alive(device: str) -> None:
    pool, a = _swa(device)
    v = a.alloc(3)
    a.free_swa(v[1:2])
    pool.sync_frees()  # on CUDA a free of device ids lands asynchronously
    assert a.is_slot_allocated(int(v[1]))
    assert int(pool.allocator("swa").v2p.cpu()[int(v[1])]) == -1
    assert int(a.translate_loc_from_full_to_swa(_ids_to(pool, v[1:2]))[0]) == 0, "sink"
    a.free_swa(v[1:2])  # already released: skipped, not an error
    a.free(v)
    pool.sync_frees()
    assert not a.is_slot_allocated(int(v[1]))
    pool.check_invariants()


def test_free_swa_compacts_only_the_swa_side(device: str) -> None:
    pool, a = _swa(device)
    ids = [a.alloc(1) for _ in range(3)]
    c = _ids_to(pool, ids[2])
    full_before = int(a.translate_kv_loc(c)[0])
    swa_before = int(a.translate_loc_from_full_to_swa(c)[0])
    a.free_swa(ids[1])
    pool.sync_frees()  # on CUDA a free of device ids lands asynchronously
    assert int(a.translate_kv_loc(c)[0]) == full_before
    assert int(a.translate_loc_from_full_to_swa(c)[0]) != swa_before
    pool.check_invariants()


def test_swa_translate_is_int32_and_takes_out(device: str) -> None:
    pool, a = _swa(device)
    ids = _ids_to(pool, a.alloc(4))
    out = torch.empty(4, dtype=torch.int32, device=ids.device)
    got = a.translate_loc_from_full_to_swa(ids, out=out)
    assert got is out and got.dtype == torch.int32
    assert torch.equal(got, a.translate_loc_from_full_to_swa(ids))
    with pytest.raises(ArgumentError):
        a.translate_loc_from_full_to_swa(
            ids, out=torch.empty(4, dtype=torch.int64, device=ids.device)
        )


@pytest.mark.parametrize("ps", [1, 4])
@pytest.mark.parametrize("lazy", [False, True])
def test_joint_availability_is_exact(device: str, ps: int, lazy: bool) -> None:
    """available ⇒ success and one page more ⇒ None with both sides unchanged, along a
    random trace that leaves holes and moves the frontier."""
    pool, a = _swa(device, ps=ps, pages=(24, 12), lazy=lazy)
    rng = np.random.default_rng(11 + ps + lazy)
    live = []
    for _ in range(120):
        # Frees of device ids (CUDA) count once applied, and queries apply none: exact
        # sizes are a statement about a settled pool.
        pool.sync_frees()
        # what alloc is guaranteed to get (lazy pools may also drain pending holes)
        avail = a.schedulable_available_size()
        assert a.available_size() <= avail
        if not lazy:
            assert avail <= min(a.full_available_size(), a.swa_available_size())
        before = _sides(pool)
        assert a.alloc(avail + ps) is None
        assert _sides(pool) == before, "a failed joint alloc changed a side"
        if avail:
            n = ps * int(rng.integers(1, avail // ps + 1))
            ids = a.alloc(n)
            assert ids is not None, f"alloc({n}) failed with available {avail}"
            live.append(ids)
        if live and rng.random() < 0.5:
            victim = live.pop(int(rng.integers(len(live))))
            if rng.random() < 0.3:
                a.free_swa(victim)  # the ids stay live on full: keep them
                live.append(victim)
            else:
                a.free(victim)
        pool.check_invariants()


def test_swa_side_larger_than_full_keeps_its_table_in_bounds(device: str) -> None:
    """The reference sized the SWA table by its own page count and went out of bounds
    after 24 cycles when SWA entries were larger (1 full layer, 5 SWA layers)."""
    pool, a = _swa(device, full_layers=1, swa_layers=5, pages=(40, 20))
    assert pool.allocator("swa").v2p.numel() == pool.allocator("full").v2p.numel()
    for _ in range(60):
        ids = a.alloc(1)
        assert ids is not None
        a.free(ids)
    pool.check_invariants()


def test_swa_randomized_trace_keeps_bytes(device: str) -> None:
    """Reference trace (seed 0xBADBEE, 48/24 pages, 3 layers each, 400 ops): alloc 1-4 with
    probability 0.5, composite free 0.3, free_swa of a whole batch 0.2; stamps on both
    sides read back after every step's compaction; drain to empty."""
    pool, a = _swa(device, full_layers=3, swa_layers=3, pages=(48, 24))
    fk, _ = pool.kv_views("full")
    sk, _ = pool.kv_views("swa")
    rng = np.random.default_rng(0xBADBEE)
    live: list[tuple[torch.Tensor, float, bool]] = []  # ids, stamp, swa side live
    for step in range(400):
        r = rng.random()
        if r < 0.5 or not live:
            ids = a.alloc(int(rng.integers(1, 5)))
            if ids is not None:
                stamp = float(step % 251)
                x = torch.full((len(ids), 2, 4), stamp, dtype=torch.float16, device=pool.device)
                d = _ids_to(pool, ids)
                pool.set_kv("full", 0, a.translate_kv_loc(d), x, x)
                pool.set_kv("swa", 0, a.translate_loc_from_full_to_swa(d).long(), x, x)
                live.append((ids, stamp, True))
        elif r < 0.8:
            a.free(live.pop(int(rng.integers(len(live))))[0])
        else:
            k = int(rng.integers(len(live)))
            ids, stamp, _ = live[k]
            a.free_swa(ids)
            live[k] = (ids, stamp, False)
        pool.check_invariants()
        for ids, stamp, swa_live in live:
            d = _ids_to(pool, ids)
            assert (fk[0][a.translate_kv_loc(d), 0] == stamp).all()
            if swa_live:
                assert (sk[0][a.translate_loc_from_full_to_swa(d).long(), 0] == stamp).all()
    for ids, _, _ in live:
        a.free(ids)
    pool.sync_frees()  # on CUDA frees of device ids land asynchronously
    assert pool.allocator("full").allocated_count() == 0
    assert pool.allocator("swa").allocated_count() == 0
    assert pool.stats().pages_moved > 0


def test_swa_composite_needs_a_bound_pool(device: str) -> None:
    full = ukv.MHASpec("full", 1, 2, 4, torch.float16, grow="up")
    swa = ukv.MHASpec("swa", 1, 2, 4, torch.float16, grow="down")
    pool = ukv.UnifiedKVPool(1 << 14, [full, swa], device=device)
    with pytest.raises(ArgumentError, match="bind"):
        ukv.SWAHybridAllocator(pool)
    with pytest.raises(PoolConfigError, match="nope"):
        ukv.UnifiedKVPool(1 << 14, [full, swa], device=device, bind={"nope": "full"})


# ----- Mamba composite ------------------------------------------------------------------


def _mamba(device: str, ps: int = 1, total: int = 1 << 15, **kw):
    full = ukv.MHASpec("full", 2, 2, 4, torch.float16, grow="up")
    mamba = ukv.MambaSpec(
        "mamba", 2, ((4, 3),), torch.float32, (2, 2, 2), torch.float32, grow="down"
    )
    return ukv.build_mamba_hybrid(
        full,
        mamba,
        total_bytes=total,
        max_context_len=64,
        max_requests=8,
        page_size=ps,
        device=device,
        **kw,
    )


def test_mamba_slot_cost_and_shortage_report(device: str) -> None:
    hp = _mamba(device)
    a, slots = hp.allocator, hp.allocator.mamba_slots
    full_entry = hp.pool.spec("full").entry_bytes
    assert a.mamba_slot_full_token_cost() == -(-hp.pool.spec("mamba").entry_bytes // full_entry)
    tokens = a.alloc(a.available_size())
    assert tokens is not None and slots.available_size() == 0
    need = a.tokens_to_release_for_states(3)
    assert need is not None and need > 0
    a.free(tokens[-need:])
    assert slots.alloc(3) is not None, "the report's figure is enough"
    assert a.tokens_to_release_for_states(0) == 0
    hp.pool.check_invariants()


def test_mamba_shortage_report_is_tight(device: str) -> None:
    hp = _mamba(device)
    a, slots = hp.allocator, hp.allocator.mamba_slots
    tokens = a.alloc(a.available_size())
    need = a.tokens_to_release_for_states(2)
    assert need is not None and need > 0
    a.free(tokens[len(tokens) - need + 1 :])  # one token short of the report
    assert slots.alloc(2) is None


def test_mamba_slots_group_and_translate(device: str) -> None:
    hp = _mamba(device)
    slots = hp.allocator.mamba_slots
    assert slots.alloc_group_begin(3)
    got = [slots.alloc(1) for _ in range(4)]
    assert all(g is not None for g in got)
    slots.alloc_group_end()
    assert slots.allocated_count() == 4
    ids = torch.cat([g.cpu() for g in got] + [torch.tensor([-1])])
    phys = slots.translate(ids.to(hp.allocator.v2p.device)).cpu()
    assert int(phys[-1]) == -1 and (phys[:-1] >= 0).all()
    with pytest.raises(ArgumentError):
        slots.alloc_group_end()


# ----- request table ------------------------------------------------------------------


def test_request_table_frees_from_the_host_mirror(device: str) -> None:
    hp = _mamba(device, ps=4)
    a, table = hp.allocator, hp.requests
    assert table is not None
    r = table.alloc_request()
    ids = a.alloc(8, host=True)
    table.append_tokens(r, ids)
    slot = a.mamba_slots.alloc(1, host=True)
    table.set_state(r, int(slot[0]))
    assert torch.equal(table.tokens(r), ids)
    assert torch.equal(table.req_to_token[r, :8].cpu().long(), ids)
    phys = table.translate_mamba_indices(torch.tensor([r, (r + 1) % 8]))
    assert phys.dtype == torch.int32 and int(phys[1]) == -1 and int(phys[0]) >= 0
    assert int(table.last_loc([r])[0]) == int(ids[-1])
    table.free_request(r)
    assert a.allocated_count() == 0 and a.mamba_slots.allocated_count() == 0
    with pytest.raises(InvalidIdError):
        table.free_request(r)
    with pytest.raises(ArgumentError, match="max_context_len"):
        r2 = table.alloc_request()
        table.append_tokens(r2, torch.arange(65))


# ----- factories ------------------------------------------------------------------------


def test_boot_check_says_how_short_the_pool_is(device: str) -> None:
    full = ukv.MHASpec("full", 2, 2, 4, torch.float16, grow="up")
    mamba = ukv.MambaSpec(
        "mamba", 2, ((4, 3),), torch.float32, (2, 2, 2), torch.float32, grow="down"
    )
    with pytest.raises(PoolConfigError, match="short by"):
        ukv.build_mamba_hybrid(full, mamba, total_bytes=4096, max_context_len=4096, device=device)
    hp = ukv.build_mamba_hybrid(
        full,
        mamba,
        max_tokens=1024,
        max_requests=4,
        max_context_len=256,
        page_size=16,
        device=device,
    )
    assert hp.allocator.available_size() >= 1024 - 16
    assert hp.allocator.mamba_slots.available_size() >= 4


@pytest.mark.parametrize("name", ["Qwen3-Next-80B-A3B", "Nemotron-Nano-9B-v2", "Jamba-1.5-Mini"])
def test_factories_build_preset_pools_on_meta(name: str) -> None:
    hp = ukv.build_mamba_hybrid(
        model=name,
        total_bytes=8 << 30,
        max_context_len=131072,
        max_requests=64,
        device="meta",
        tp_size=2,
    )
    assert hp.allocator.alloc(16 * 100) is not None
    assert hp.allocator.mamba_slots.alloc(4) is not None


@pytest.mark.parametrize("name", ["gpt-oss-120b", "Gemma-3-27B"])
def test_swa_factory_from_preset(name: str) -> None:
    # An unchunked 32K prefill binds 32K SWA tokens too: size for 8K prefill chunks.
    hp = ukv.build_swa_hybrid(
        model=name,
        total_bytes=8 << 30,
        max_context_len=32768,
        max_extend_tokens=8192,
        device="meta",
    )
    assert hp.window is not None
    ids = hp.allocator.alloc(1024)
    assert ids is not None
    hp.allocator.free_swa(ids[:512])
    hp.allocator.free(ids)
    hp.pool.check_invariants()
