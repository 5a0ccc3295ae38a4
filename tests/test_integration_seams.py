"""The small public seams engine integrations use: move listeners, the free virtual pages
in hand-out order, and binding the SWA side of pages allocated on full alone."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ukv


def _swa_pool(ps: int = 2) -> tuple[ukv.UnifiedKVPool, ukv.SWAHybridAllocator]:
    full = ukv.MHASpec(
        "full", layer_num=1, head_num=1, head_dim=4, dtype=torch.float32, grow="down"
    )
    swa = ukv.MHASpec("swa", layer_num=1, head_num=1, head_dim=4, dtype=torch.float32, grow="up")
    pool = ukv.UnifiedKVPool(1 << 13, [full, swa], page_size=ps, device="cpu", bind={"swa": "full"})
    return pool, ukv.SWAHybridAllocator(pool)


def test_move_listener_hears_every_plan_with_moves_after_the_bytes_moved() -> None:
    pool, _ = _swa_pool()
    a = pool.allocator("full")
    heard: list = []

    def listener(moves: list) -> None:
        # The bytes have moved already: each destination page holds its new owner.
        p2v = a.p2v.numpy()
        for name, src, dst in moves:
            assert name == "full" and src.dtype == np.int64 and dst.shape == src.shape
            assert (p2v[dst] >= 0).all()
        heard.append(moves)

    pool.add_move_listener(listener)
    ids = a.alloc(8)
    assert heard == []  # no moves, no call
    a.free(ids[2:4])
    assert len(heard) == 1 and heard[0][0][1].size == 1
    moved = pool.stats().pages_moved
    pool.remove_move_listener(listener)
    a.free(ids[:2])
    assert len(heard) == 1 and pool.stats().pages_moved >= moved
    with pytest.raises(ukv.ArgumentError, match="not a move listener"):
        pool.remove_move_listener(listener)


def test_free_virtual_pages_follow_fifo_reuse() -> None:
    pool, _ = _swa_pool()
    a = pool.allocator("full")
    first = a.free_virtual_pages()
    assert first is not None and first[0] == a.min_page_index
    ids = a.alloc(4)
    assert np.array_equal(np.unique(ids.numpy() // 2), first[:2])
    a.free(ids[:2])
    after = a.free_virtual_pages()
    assert after[-1] == first[0] and np.array_equal(after[:-1], first[2:])
    assert pool.allocator("swa").free_virtual_pages() is None
    after[0] = -5  # a copy: the pool is untouched
    assert a.free_virtual_pages()[0] == first[2]


def test_bind_swa_pages_binds_only_live_unbound_pages() -> None:
    pool, h = _swa_pool()
    a, s = pool.allocator("full"), pool.allocator("swa")
    ids = a.alloc(4)  # full side only
    pages = torch.from_numpy(np.unique(ids.numpy() // 2))
    assert (s.v2p[pages] == -1).all()
    before = s.v2p.clone()
    with pytest.raises(ukv.ArgumentError, match="not live"):
        h.bind_swa_pages(torch.tensor([int(pages[0]), 40]))  # page 40 is not live on full
    with pytest.raises(ukv.InvalidIdError, match="reserved"):
        h.bind_swa_pages(torch.tensor([0]))
    assert torch.equal(s.v2p, before)  # nothing bound
    assert h.bind_swa_pages(pages) is True
    assert (s.v2p[pages] > 0).all()
    with pytest.raises(ukv.ArgumentError, match="already bound"):
        h.bind_swa_pages(pages)
    assert h.bind_swa_pages(torch.empty(0, dtype=torch.int64)) is True
    h.free(ids)
    assert s.allocated_count() == 0 and a.allocated_count() == 0
    pool.check_invariants()
