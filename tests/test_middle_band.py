"""A pool with a middle band (API.md §3: at most one ``grow="middle"`` spec floating
between the up and the down sub-pool): it builds, allocates on all three sides, and the
bytes of the middle band survive the slides an end band's growth forces on it."""

from __future__ import annotations

import numpy as np
import torch

import ukv


def _spec(name: str, layers: int, grow: str) -> ukv.MHASpec:
    return ukv.MHASpec(name, layers, 2, 4, torch.float16, grow=grow)


def _three_band_pool(lazy: bool, device: str) -> ukv.UnifiedKVPool:
    """Up 64 B entries, middle 96 B, down 32 B; 6400 bytes."""
    specs = [_spec("kv", 2, "up"), _spec("swa", 3, "middle"), _spec("state", 1, "down")]
    return ukv.UnifiedKVPool(6400, specs, device=device, lazy=lazy)


def _stamp(pool: ukv.UnifiedKVPool, ids: torch.Tensor) -> None:
    """Write each token's virtual id into layer 0's K row of the middle band."""
    alloc = pool.allocator("swa")
    loc = alloc.translate_kv_loc(ids)
    k = ids.to(torch.float16).view(-1, 1, 1).expand(-1, 2, 4).contiguous()
    pool.set_kv("swa", 0, loc, k, torch.zeros_like(k))


def _check(pool: ukv.UnifiedKVPool, ids: torch.Tensor) -> None:
    loc = pool.allocator("swa").translate_kv_loc(ids)
    k = pool.kv_views("swa")[0][0]
    got = k[loc, 0].to(torch.float32)[:, 0, 0]
    assert torch.equal(got, ids.to(torch.float32)), (got, ids)


def test_grow_middle_is_a_valid_direction() -> None:
    assert "middle" in ukv.specs.GROW_DIRECTIONS
    spec = _spec("swa", 1, "middle")
    assert spec.grow == "middle"


def test_three_band_pool_moves_the_middle_band_and_keeps_its_bytes(device: str) -> None:
    for lazy in (False, True):
        pool = _three_band_pool(lazy, device)
        assert "grow=middle" in pool.summary()
        mid = pool.allocator("swa")
        ids = mid.alloc(6)
        assert ids is not None
        _stamp(pool, ids)
        # The up end takes everything it can: the middle band must slide out of its way.
        kv = pool.allocator("kv")
        before = pool.stats().sub_pools[1].pages_moved
        n = kv.schedulable_available_size()
        kv_ids = kv.alloc(n)
        assert kv_ids is not None
        assert kv.alloc(1) is None
        assert pool.stats().sub_pools[1].pages_moved > before
        pool.check_invariants()
        _check(pool, ids)
        # The up end gives 20 pages back; the down end then takes all it can, which is
        # more than the slack above the middle band: the middle band slides down into the
        # freed bytes (its capacity counts that slide).
        kv.free(kv_ids[:20])
        pool.flush(urgent=True)
        state = pool.allocator("state")
        n = state.schedulable_available_size()
        assert n * 32 > 96, n
        before = pool.stats().sub_pools[1].pages_moved
        assert state.alloc(n) is not None
        assert state.alloc(1) is None
        assert pool.stats().sub_pools[1].pages_moved > before
        pool.check_invariants()
        _check(pool, ids)


def _stamp_any(pool: ukv.UnifiedKVPool, name: str, ids: torch.Tensor) -> None:
    loc = pool.allocator(name).translate_kv_loc(ids)
    k = ids.to(torch.float16).view(-1, 1, 1).expand(-1, 2, 4).contiguous()
    pool.set_kv(name, 0, loc, k, torch.zeros_like(k))


def _check_any(pool: ukv.UnifiedKVPool, name: str, ids: torch.Tensor) -> None:
    loc = pool.allocator(name).translate_kv_loc(ids)
    got = pool.kv_views(name)[0][0][loc, 0].to(torch.float32)[:, 0, 0]
    assert torch.equal(got, ids.to(torch.float32)), (name, got, ids)


def test_middle_band_listed_first_keeps_every_sides_bytes(device: str) -> None:
    """Sub-pool indices need not follow band order: with the middle band at index 0, a
    plan whose end band flushes and whose middle band slides into the vacated bytes must
    still copy the end band's sources first (the core's ``move_order``)."""

    for lazy in (False, True):
        specs = [_spec("swa", 3, "middle"), _spec("kv", 2, "up"), _spec("state", 1, "down")]
        pool = ukv.UnifiedKVPool(6400, specs, device=device, lazy=lazy)
        rng = np.random.default_rng(7 + lazy)
        live: dict[str, list[torch.Tensor]] = {"swa": [], "kv": [], "state": []}
        for _ in range(150):
            name = ("swa", "kv", "state")[int(rng.integers(3))]
            alloc = pool.allocator(name)
            if rng.random() < 0.55:
                room = alloc.schedulable_available_size()
                if room:
                    ids = alloc.alloc(int(rng.integers(1, min(room, 12) + 1)))
                    assert ids is not None
                    _stamp_any(pool, name, ids)
                    live[name].append(ids)
            elif live[name]:
                alloc.free(live[name].pop(int(rng.integers(len(live[name])))))
            pool.check_invariants()
            for side, held in live.items():
                for ids in held:
                    _check_any(pool, side, ids)
