"""Caller-chosen virtual ids through the public API: ``alloc_at`` binds given free pages,
``rebind`` gives a live page's bytes a new id; refusals leave the pool as it was."""

from __future__ import annotations

import pytest
import torch

import ukv

H, D = 2, 4


def _pool(device: str, lazy: bool = False, page_size: int = 1) -> ukv.UnifiedKVPool:
    full = ukv.MHASpec("full", layer_num=2, head_num=H, head_dim=D, dtype=torch.float32, grow="up")
    state = ukv.MambaSpec(
        "mamba",
        layer_num=2,
        conv_shapes=((4, 3),),
        conv_dtype=torch.float32,
        temporal_shape=(2, 2, 2),
        temporal_dtype=torch.float32,
        grow="down",
    )
    total = full.entry_bytes * 64 * page_size + state.entry_bytes * 16
    return ukv.UnifiedKVPool(total, [full, state], device=device, lazy=lazy, page_size=page_size)


def _tables(a: ukv.SubPoolAllocator) -> tuple[torch.Tensor, torch.Tensor]:
    return a.v2p.clone(), a.p2v.clone()


@pytest.mark.parametrize("page_size", [1, 4])
def test_alloc_at_binds_the_chosen_ids(device: str, page_size: int) -> None:
    pool = _pool(device, page_size=page_size)
    a = pool.allocator("full")
    wm = a.watermark
    phys = a.alloc_at(torch.tensor([20, 21, 22]))
    assert phys is not None and phys.tolist() == [wm, wm + 1, wm + 2]
    assert a.v2p[[20, 21, 22]].tolist() == phys.tolist()
    free = a.free_virtual_pages()
    assert free is not None and not {20, 21, 22} & set(free.tolist())
    pool.check_invariants()


def test_rebind_keeps_the_bytes_under_the_new_id(device: str) -> None:
    pool = _pool(device, lazy=True)
    a = pool.allocator("full")
    ids = a.alloc(3)
    k = torch.arange(3 * H * D, dtype=torch.float32).reshape(3, H, D).to(device)
    pool.set_kv("full", 0, a.translate_kv_loc(ids), k, -k)
    a.rebind(ids, torch.tensor([40, 41, 42]))
    K, V = pool.kv_views("full")
    new = torch.tensor([40, 41, 42], device=ids.device)
    assert torch.equal(K[0][a.translate_kv_loc(new), 0], k)
    assert torch.equal(V[0][a.translate_kv_loc(new), 0], -k)
    assert not any(a.is_slot_allocated(int(v)) for v in ids.tolist())
    free = a.free_virtual_pages()
    assert free is not None and free[:3].tolist() == ids.tolist()  # back in front, in order
    a.free(new)
    pool.sync_frees()
    pool.check_invariants()


def test_refusals_change_nothing(device: str) -> None:
    pool = _pool(device)
    a = pool.allocator("full")
    a.alloc_at(torch.tensor([10]))
    before = _tables(a)
    for bad in ([10], [11, 11], [0]):
        with pytest.raises(ukv.UkvError):
            a.alloc_at(torch.tensor(bad))
    with pytest.raises(ukv.UkvError):
        a.rebind(torch.tensor([12]), torch.tensor([13]))  # 12 is not live
    with pytest.raises(ukv.UkvError):
        pool.allocator("mamba").rebind(torch.tensor([10]), torch.tensor([13]))
    assert a.alloc_at(torch.arange(2, 1000)) is None  # more than the pool holds
    after = _tables(a)
    assert torch.equal(before[0], after[0]) and torch.equal(before[1], after[1])
    pool.check_invariants()
