"""``SWAHybridAllocator.transfer_swa_pages`` through the public API: the SWA page of one full
id is read through another afterwards (the bytes stay, also across a later compaction), no
count or capacity changes, and every refusal names the bad page and leaves the pool as it
was."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pool_builders import swa_hybrid

import ukv
from ukv.errors import ArgumentError, InvalidIdError

H, D = 2, 4


def _swa(device: str, ps: int = 1, lazy: bool = False):
    return swa_hybrid(device, full_layers=2, heads=H, head_dim=D, dtype=torch.float32,
                      ps=ps, lazy=lazy)  # fmt: skip


def _dev(pool: ukv.UnifiedKVPool, ids: torch.Tensor) -> torch.Tensor:
    return ids.to(pool.allocator("full").v2p.device)


def _state(pool: ukv.UnifiedKVPool, a: ukv.SWAHybridAllocator) -> tuple:
    sides = [pool.allocator(n) for n in ("full", "swa")]
    return (
        [(s.v2p.cpu().clone(), s.p2v.cpu().clone(), s.allocated_count()) for s in sides],
        a.available_size(),
        a.swa_available_size(),
        pool.stats().pages_moved,
    )


def _same(before: tuple, after: tuple) -> None:
    for (v0, p0, n0), (v1, p1, n1) in zip(before[0], after[0]):
        assert torch.equal(v0, v1) and torch.equal(p0, p1) and n0 == n1
    assert before[1:] == after[1:]


def _write(pool, a, ids: torch.Tensor, stamp: torch.Tensor) -> None:
    pool.set_kv("swa", 0, a.translate_loc_from_full_to_swa(_dev(pool, ids)).long(), stamp, -stamp)


def _read(pool, a, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    k, v = pool.kv_views("swa")
    slots = a.translate_loc_from_full_to_swa(_dev(pool, ids)).long()
    return k[0].reshape(-1, H, D)[slots], v[0].reshape(-1, H, D)[slots]


def _kept_and_incoming(pool, a, n: int):
    """``n`` pages of full ids whose SWA side is released (the prefix a radix node keeps),
    then ``n`` pages of fresh ids bound on both sides (the request that wrote the same
    tokens again), with a stamp written at the fresh ids' SWA slots."""
    ps = a.page_size
    kept = a.alloc(n * ps)
    a.free_swa(kept)
    incoming = a.alloc(n * ps)
    stamp = torch.arange(n * ps * H * D, dtype=torch.float32).reshape(n * ps, H, D) + 1
    stamp = stamp.to(pool.device)
    _write(pool, a, incoming, stamp)
    return kept, incoming, stamp


@pytest.mark.parametrize("ps", [1, 4])
@pytest.mark.parametrize("lazy", [False, True])
def test_transfer_keeps_the_bytes_under_the_kept_ids(device: str, ps: int, lazy: bool) -> None:
    pool, a = _swa(device, ps, lazy)
    below = a.alloc(2 * ps)  # a neighbour whose release makes the SWA side compact later
    kept, incoming, stamp = _kept_and_incoming(pool, a, 3)
    counts = (a.available_size(), a.swa_available_size(), pool.allocator("swa").allocated_count())
    moved = pool.stats().pages_moved
    a.transfer_swa_pages(incoming[::ps] // ps, kept[::ps] // ps)
    assert (
        a.available_size(),
        a.swa_available_size(),
        pool.allocator("swa").allocated_count(),
    ) == counts
    assert pool.stats().pages_moved == moved, "no byte moves"
    k, v = _read(pool, a, kept)
    assert torch.equal(k, stamp) and torch.equal(v, -stamp)
    # The incoming ids keep their full side and read the padding sink on SWA.
    assert (a.translate_loc_from_full_to_swa(_dev(pool, incoming)) == 0).all()
    assert all(a.is_slot_allocated(int(t)) for t in incoming.tolist())
    pool.check_invariants()
    # A compaction after the transfer moves the page with its new owner.
    a.free(below)
    pool.sync_frees()
    pool.flush(urgent=True)
    assert pool.stats().pages_moved > moved
    k, v = _read(pool, a, kept)
    assert torch.equal(k, stamp) and torch.equal(v, -stamp)
    pool.check_invariants()
    # Freeing the kept ids releases the transferred pages with them.
    a.free(kept)
    a.free(incoming)
    pool.sync_frees()
    assert pool.allocator("swa").allocated_count() == 0
    assert pool.allocator("full").allocated_count() == 0


def test_transfer_takes_host_device_and_numpy_ids(device: str) -> None:
    pool, a = _swa(device)
    kept, incoming, stamp = _kept_and_incoming(pool, a, 3)
    a.transfer_swa_pages(_dev(pool, incoming[:1]), _dev(pool, kept[:1]))
    a.transfer_swa_pages(incoming[1:2].cpu().to(torch.int32), kept[1:2].cpu())
    a.transfer_swa_pages(incoming[2:].cpu().numpy(), kept[2:].cpu().numpy().astype(np.int32))
    k, _ = _read(pool, a, kept)
    assert torch.equal(k, stamp)
    a.transfer_swa_pages(torch.tensor([], dtype=torch.int64), torch.tensor([], dtype=torch.int64))
    pool.check_invariants()


def test_refusals_name_the_bad_page_and_change_nothing(device: str) -> None:
    pool, a = _swa(device)
    kept, incoming, _ = _kept_and_incoming(pool, a, 2)
    (k0, k1), (i0, i1) = kept.tolist(), incoming.tolist()
    never = 30  # in the id space, never allocated
    t = torch.tensor
    before = _state(pool, a)
    cases = [
        (ArgumentError, [k0], [k1], f"from = {k0}"),  # no SWA page
        (ArgumentError, [i0, i0], [k0, k1], f"from = {i0}"),  # repeated
        (ArgumentError, [i0, i1], [k0, k0], f"to = {k0}"),  # repeated
        (ArgumentError, [i0], [i1], f"to = {i1}"),  # already bound on SWA
        (ArgumentError, [i0], [i0], f"to = {i0}"),  # A == B
        (ArgumentError, [i0], [never], f"to = {never}"),  # not live on full
        (ArgumentError, [i0], [k0, k1], "to = 2"),  # lengths differ
        (InvalidIdError, [i0], [-3], "-3"),
        (InvalidIdError, [i0], [0], "0"),  # the padding sink
        (InvalidIdError, [10_000], [k0], "10000"),
        (ArgumentError, [i0, i1], [k0, never], f"to = {never}"),  # a late bad pair
    ]
    for exc, src, dst, named in cases:
        with pytest.raises(exc, match=named):
            a.transfer_swa_pages(t(src), t(dst))
        _same(before, _state(pool, a))
    with pytest.raises(ArgumentError, match="dtype"):
        a.transfer_swa_pages(t([float(i0)]), t([k0]))
    with pytest.raises(ArgumentError):
        a.transfer_swa_pages(t([[i0]]), t([[k0]]))
    _same(before, _state(pool, a))
    pool.check_invariants()


def test_ids_being_freed_are_refused(device: str) -> None:
    pool, a = _swa(device)
    kept, incoming, _ = _kept_and_incoming(pool, a, 2)
    a.free_group_begin()
    a.free(kept[1:])
    before = _state(pool, a)
    with pytest.raises(ArgumentError, match=f"to = {int(kept[1])}"):
        a.transfer_swa_pages(incoming[1:], kept[1:])
    _same(before, _state(pool, a))
    a.transfer_swa_pages(incoming[:1], kept[:1])
    a.free_group_end()
    pool.sync_frees()
    pool.check_invariants()
