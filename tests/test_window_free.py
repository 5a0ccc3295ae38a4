"""The window free: ``SWAHybridAllocator.free_swa_now`` and the SGLang drop-ins' ``free_swa``
(0.5.16 and 0.5.23 layouts, on the stand-in bases), and ``pool.inflight_frees``.

SGLang's composite keeps only the tokens whose SWA side is still bound (``swa_indices[
swa_indices > 0]``), releases them and zeroes their mapping at once. The drop-in reads the
ids on the host against the SWA side's table after the frees still queued are applied, so
the edge cases are: ids already released on the SWA side, ids freed with their full side
(by a free applied or still queued), duplicates, ids outside the id space, frees inside a
free group, and lockstep on or off. Each test checks the end state against what SGLang's
rule gives, and the pool's invariants.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from dropin_builders import DEV, swa_bundle
from pool_builders import swa_hybrid
from standins import StandInEvent

import ukv
from ukv.errors import ArgumentError
from ukv.execution.deferred import LandingIds
from ukv.integrations.sglang.v0523 import factories as F0523


def _hybrid(device: str, ps: int, lazy: bool) -> tuple[ukv.UnifiedKVPool, Any]:
    return swa_hybrid(device, full_layers=2, swa_layers=1, ps=ps, pages=(32, 24), lazy=lazy)


def _host(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy().astype(np.int64)


def _swa_bound_pages(pool: ukv.UnifiedKVPool, ids: torch.Tensor) -> set[int]:
    """SGLang's rule on the host tables: the pages of ``ids`` bound on the SWA side."""
    v2p = pool.allocator("swa").v2p.cpu().numpy()
    pages = _host(ids) // pool.page_size
    return {int(p) for p in pages if 0 <= p < len(v2p) and v2p[p] > 0}


def _queue_device_free(pool: ukv.UnifiedKVPool, a: Any, ids: torch.Tensor) -> StandInEvent:
    """Queue a composite free the way a free of GPU ids is queued (its copy to the host not
    landed yet), with a stand-in event the pool must wait on."""
    ev = StandInEvent()
    landing = LandingIds(_host(ids), ev)
    pool._runtime.queue_free(pool._idx("full"), landing, a._core_free)
    return ev


# ----- inflight_frees --------------------------------------------------------------------


def test_inflight_frees_counts_queued_frees_without_a_snapshot() -> None:
    pool, a = _hybrid("cpu", 1, False)
    assert pool.inflight_frees == 0
    ids = a.alloc(6)
    _queue_device_free(pool, a, ids[:2])
    ev = _queue_device_free(pool, a, ids[2:4])
    assert pool.inflight_frees == pool.stats().inflight_frees == 2
    a.free(ids[4:])  # host ids behind queued frees of their space queue too
    assert pool.inflight_frees == pool.stats().inflight_frees == 3
    pool.sync_frees()
    assert ev.syncs == 1
    assert pool.inflight_frees == pool.stats().inflight_frees == 0
    assert a.allocated_count() == 0
    pool.check_invariants()


# ----- free_swa_now ----------------------------------------------------------------------


@pytest.mark.parametrize("ps", [1, 4])
@pytest.mark.parametrize("lazy", [False, True])
def test_free_swa_now_releases_only_what_is_still_bound(device: str, ps: int, lazy: bool) -> None:
    pool, a = _hybrid(device, ps, lazy)
    ids = a.alloc(12 * ps)
    released, freed, kept = ids[: 3 * ps], ids[3 * ps : 6 * ps], ids[6 * ps : 9 * ps]
    rest = ids[9 * ps :]
    a.free_swa_now(released)
    a.free(freed)
    pool.sync_frees()  # on CUDA a free of device ids lands asynchronously
    full_rest = a.translate_kv_loc(rest).cpu()
    swa_live = a.swa.allocated_count()
    outside = torch.tensor([-1, 10**6], dtype=ids.dtype, device=ids.device)
    mixed = torch.cat([released, freed, kept, kept[:ps], outside])  # duplicates too
    assert _swa_bound_pages(pool, mixed) == {int(p) for p in _host(kept) // ps}
    a.free_swa_now(mixed)
    assert a.swa.allocated_count() == swa_live - kept.numel()
    assert a.allocated_count() == 9 * ps  # the full side keeps released, kept and rest
    for gone in (released, freed, kept):
        assert bool((a.translate_loc_from_full_to_swa(gone) == 0).all())
    assert bool((a.translate_kv_loc(kept) > 0).all())
    assert torch.equal(a.translate_kv_loc(rest).cpu(), full_rest)  # full side untouched
    assert bool((a.translate_loc_from_full_to_swa(rest) > 0).all())
    a.free_swa_now(mixed)  # nothing left to release: a no-op, not an error
    assert a.swa.allocated_count() == swa_live - kept.numel()
    pool.check_invariants()
    a.free(torch.cat([released, kept, rest]))
    pool.sync_frees()
    assert a.allocated_count() == a.swa.allocated_count() == 0
    pool.check_invariants()


@pytest.mark.parametrize("lazy", [False, True])
def test_free_swa_now_inside_a_free_group_ends_as_outside(device: str, lazy: bool) -> None:
    ends = []
    for grouped in (False, True):
        pool, a = _hybrid(device, 2, lazy)
        ids = a.alloc(16)
        gone, kept = ids[:6], ids[6:10]
        if grouped:
            a.free_group_begin()
        a.free(gone)
        a.free_swa_now(torch.cat([gone, kept]))
        if grouped:
            a.free_group_end()
        pool.sync_frees()
        pool.check_invariants()
        assert bool((a.translate_loc_from_full_to_swa(torch.cat([gone, kept])) == 0).all())
        ends.append((a.allocated_count(), a.swa.allocated_count(), a.available_size()))
    assert ends[0] == ends[1] == (10, 6, ends[0][2])


def test_free_swa_now_waits_for_queued_frees_of_its_id_space() -> None:
    """A free of GPU ids still queued (its copy not landed) is applied first, waiting for
    it, so the ids it frees read as released and are skipped (SGLang's radix cache frees
    a node's full side, then calls ``free_swa`` on the same ids)."""
    pool, a = _hybrid("cpu", 1, False)
    ids = a.alloc(8)
    ev = _queue_device_free(pool, a, ids[:4])
    a.free_swa_now(ids[:6])  # the queued free's ids, and two still bound
    assert ev.syncs == 1 and pool.inflight_frees == 0
    assert a.allocated_count() == 4 and a.swa.allocated_count() == 2
    assert bool((a.translate_loc_from_full_to_swa(ids[:6]) == 0).all())
    pool.check_invariants()


def test_free_swa_now_does_not_wait_when_nothing_is_queued() -> None:
    pool, a = _hybrid("cpu", 1, False)
    ids = a.alloc(4)
    a.free_swa_now(ids[:2])
    assert pool.stats().gpu_waits == 0
    assert a.swa.allocated_count() == 2


@pytest.mark.parametrize(
    "bad,message",
    [
        (torch.tensor([1.0, 2.0]), "ids: dtype torch.float32"),
        (torch.tensor([[1, 2]]), "ids: shape (1, 2)"),
        (torch.arange(8)[::2], "ids: stride (2,)"),
        ([1, 2], "ids: list"),
    ],
)
def test_free_swa_now_refuses_bad_ids_and_changes_nothing(bad: Any, message: str) -> None:
    pool, a = _hybrid("cpu", 1, False)
    a.alloc(8)
    before = (pool.allocator("full").v2p.clone(), pool.allocator("swa").v2p.clone())
    with pytest.raises(ArgumentError, match=message.replace("(", r"\(").replace(")", r"\)")):
        a.free_swa_now(bad)
    assert torch.equal(pool.allocator("full").v2p, before[0])
    assert torch.equal(pool.allocator("swa").v2p, before[1])


# ----- the SGLang drop-ins' free_swa -----------------------------------------------------

KV0523 = {
    "device": DEV,
    "kv_cache_dtype": torch.float16,
    "head_num": 2,
    "head_dim": 4,
    "v_head_dim": 4,
    "swa_head_num": 2,
    "swa_head_dim": 4,
    "swa_v_head_dim": 4,
    "start_layer": 0,
    "end_layer": 1,
    "swa_attention_layer_ids": [0],
    "full_attention_layer_ids": [1],
    "full_max_total_num_tokens": 64,
    "swa_max_total_num_tokens": 64,
    "enable_memory_saver": False,
    "need_sort": False,
}


def _dropin(release: str, ps: int, lazy: bool, lockstep: bool) -> Any:
    if release == "0.5.16":
        a = swa_bundle(64, 64, page_size=ps, lazy=lazy).token_to_kv_pool_allocator
    else:
        b = F0523.init_unified_swa_pools(page_size=ps, lazy_compaction=lazy, **KV0523)
        a = b.token_to_kv_pool_allocator
    a.unified_buffer.lockstep = lockstep
    return a


def _views(a: Any) -> tuple[int, int, int]:
    return a.full_available_size(), a.swa_available_size(), a.available_size()


RELEASES = ["0.5.16", "0.5.23"]


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("ps", [1, 4])
@pytest.mark.parametrize("lazy", [False, True])
@pytest.mark.parametrize("lockstep", [False, True])
def test_dropin_free_swa_keeps_sglangs_rule(
    release: str, ps: int, lazy: bool, lockstep: bool
) -> None:
    a = _dropin(release, ps, lazy, lockstep)
    caps = _views(a)
    ids = a.alloc(8 * ps)
    freed, released, kept = ids[: 2 * ps], ids[2 * ps : 4 * ps], ids[4 * ps : 6 * ps]
    a.free(freed)
    a.free_swa(released)
    a.unified_buffer.ukv_pool.sync_frees()
    views = _views(a)
    a.free_swa(freed)  # freed with their full side: nothing to do
    a.free_swa(released)  # already released: nothing to do
    a.unified_buffer.ukv_pool.sync_frees()
    assert _views(a) == views
    a.free_swa(torch.cat([freed, released, kept, kept.flip(0)]))  # a mix, duplicates
    assert bool((a.translate_loc_from_full_to_swa(torch.cat([released, kept])) == 0).all())
    assert bool((a.translate_kv_loc(kept) > 0).all())
    assert a.full_attn_allocator.allocated_count() == 6 * ps
    assert a.swa_attn_allocator.allocated_count() == 2 * ps
    a.free(ids[2 * ps :])
    a.unified_buffer.ukv_pool.sync_frees()
    assert _views(a) == caps  # SGLang's idle leak check holds
    a.unified_buffer.ukv_pool.check_invariants()


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("lazy", [False, True])
@pytest.mark.parametrize("lockstep", [False, True])
def test_dropin_free_swa_in_a_free_group_ends_as_outside(
    release: str, lazy: bool, lockstep: bool
) -> None:
    ends = []
    for grouped in (False, True):
        a = _dropin(release, 2, lazy, lockstep)
        ids = a.alloc(16)
        gone, kept = ids[:6], ids[6:10]
        if grouped:
            a.free_group_begin()
        a.free(gone)
        a.free_swa(torch.cat([gone, kept]))
        a.free_swa(kept)  # twice in the group: the second finds nothing bound
        if grouped:
            a.free_group_end()
        a.unified_buffer.ukv_pool.sync_frees()
        assert bool((a.translate_loc_from_full_to_swa(ids[:10]) == 0).all())
        assert bool((a.translate_kv_loc(kept) > 0).all())
        a.unified_buffer.ukv_pool.check_invariants()
        ends.append(
            (a.full_attn_allocator.allocated_count(), a.swa_attn_allocator.allocated_count())
            + _views(a)
        )
    assert ends[0] == ends[1]
    assert ends[0][:2] == (10, 6)


@pytest.mark.parametrize("release", RELEASES)
def test_dropin_free_swa_skips_ids_a_queued_free_releases(release: str) -> None:
    """The composite ``free`` of GPU ids is queued until its copy lands; the window free
    that follows on the same ids must find them released (found on an H100)."""
    a = _dropin(release, 1, False, False)
    pool = a.unified_buffer.ukv_pool
    if pool.device.type != "cpu":
        pytest.skip("the stand-in landing is for a CPU pool")
    ids = a.alloc(8)
    ev = _queue_device_free(pool, a._joint, ids[:4])
    assert pool.inflight_frees == 1
    a.free_swa(ids[:6])
    assert ev.syncs == 1 and pool.inflight_frees == 0
    assert a.full_attn_allocator.allocated_count() == 4
    assert a.swa_attn_allocator.allocated_count() == 2
    pool.check_invariants()


def test_dropin_free_swa_takes_any_layout_of_ids() -> None:
    """SGLang passes ``req_to_token`` slices; a strided or 2-D id tensor works as its
    flattened copy (the 0.5.16 drop-in's selection made one)."""
    a = _dropin("0.5.16", 1, False, False)
    ids = a.alloc(8)
    a.free_swa(ids[::2])
    a.free_swa(ids[1:5].reshape(2, 2))
    assert a.swa_attn_allocator.allocated_count() == 2  # ids[5] and ids[7] keep theirs
    a.unified_buffer.ukv_pool.check_invariants()
