"""Defects found in the second review, each pinned by a test that failed before its fix
(docs/RELIABILITY.md, "Second round")."""

from __future__ import annotations

import pytest
import torch

import ukv


def _pool(device: str, lazy: bool = False) -> ukv.UnifiedKVPool:
    specs = [
        ukv.MHASpec("full", 2, 2, 4, torch.float16, grow="up"),
        ukv.MambaSpec("mamba", 2, ((4, 3),), torch.float32, (2, 2, 2), torch.float32, "down"),
    ]
    return ukv.UnifiedKVPool(1 << 16, specs, page_size=2, device=device, lazy=lazy)


class Done:
    def query(self) -> bool:
        return True


def test_eager_pool_keeps_no_completed_forwards(device: str) -> None:
    pool = _pool(device)
    loc = pool.allocator("full").alloc(2)
    for _ in range(20_000):
        pool.set_inflight_forward(Done(), loc)
    assert len(pool._events) <= 1 and len(pool._write_locs) <= 1


def test_get_cpu_copy_checks_every_id_and_raises_invalid_id(device: str) -> None:
    pool = _pool(device)
    fa = pool.allocator("full")
    ids = fa.alloc(8)
    dead = fa.alloc(2)
    fa.free(dead)
    pool.sync_frees()
    copy = pool.get_cpu_copy("full", ids)
    assert len(copy) == 4 and copy[0].shape == (8, 2, 4)
    with pytest.raises(ukv.InvalidIdError, match=str(int(dead[0]))):
        pool.get_cpu_copy("full", torch.cat([ids, dead]))
    with pytest.raises(ukv.InvalidIdError):
        pool.get_cpu_copy("full", torch.tensor([1 << 40]))
    with pytest.raises(ukv.InvalidIdError):
        pool.load_cpu_copy("full", copy, torch.cat([ids[:6], dead]))


def test_load_cpu_copy_is_atomic(device: str) -> None:
    pool = _pool(device)
    fa = pool.allocator("full")
    ids = fa.alloc(4)
    copy = pool.get_cpu_copy("full", ids)
    copy = [c + 1 for c in copy]
    copy[-1] = copy[-1][:3]  # the last tensor is short
    before = pool.raw.clone()
    with pytest.raises(ukv.ArgumentError, match=r"copy\[3\]"):
        pool.load_cpu_copy("full", copy, ids)
    assert torch.equal(pool.raw, before), "a rejected load wrote some tensors"


def test_state_copy_round_trips(device: str) -> None:
    pool = _pool(device)
    ma = pool.allocator("mamba")
    slots = ma.alloc(3)
    conv, temporal = pool.state_views("mamba")
    temporal[:, ma.translate_kv_loc(slots.to(ma.v2p.device))] = 5.0
    copy = pool.get_cpu_copy("mamba", slots, non_blocking=True).wait()
    assert all(c.shape[0] == 3 for c in copy) and (copy[-1] == 5.0).all()
    pool.load_cpu_copy("mamba", [c * 0 for c in copy], slots)
    assert (temporal[:, ma.translate_kv_loc(slots.to(ma.v2p.device))] == 0).all()
