"""The SGLang drop-in (``ukv.integrations.sglang``) with SGLang's keywords and call order.

Runs with whatever base classes ``bases`` found (SGLang's when it is importable, else the
stand-ins; tests/test_sglang_dropin_real.py runs this file against SGLang 0.5.16). A
recording ``kvcache`` stands in for an engine-owned cache: it keeps, per physical token,
the value the test wrote there, and checks every relocation the drop-in reports against
the bytes ukv actually moved.
"""

from __future__ import annotations

import os
import subprocess
import sys
import types

import pytest
import torch

import ukv
from ukv.integrations.sglang import errors as E
from ukv.integrations.sglang.allocator import MultiEndedAllocator
from ukv.integrations.sglang.composites import (
    UnifiedMambaTokenToKVPoolAllocator,
    UnifiedSWATokenToKVPoolAllocator,
)
from ukv.integrations.sglang.factories import init_unified_swa_pools
from ukv.integrations.sglang.kvcache import UnifiedMHATokenToKVPool
from ukv.integrations.sglang.pool import UnifiedKVPool

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dropin_builders import (  # noqa: E402
    DEV,
    D,
    Event,
    H,
    full_swa_pool,
    mamba,
    mamba_bundle,
    mha,
    pair,
    settle,
    side,
    swa_bundle,
)


class RecordingKV:
    """An engine-owned cache: remembers the value written at each physical token and
    checks every reported move against the drop-in's bytes (``view`` of layer 0)."""

    def __init__(self, pool: UnifiedKVPool, name: str) -> None:
        self.pool, self.name = pool, name
        self.shadow: dict[int, float] = {}
        self.moves = 0

    def view(self) -> torch.Tensor:
        k, _ = self.pool.mha_views_for(self.name)
        return k[0].reshape(-1, H, D)

    def write(self, phys: torch.Tensor, values: torch.Tensor) -> None:
        for p, v in zip(phys.tolist(), values.tolist()):
            self.shadow[p] = v

    def move_kv_cache(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        assert dst.dtype == torch.int64 and src.dtype == torch.int64 and dst.shape == src.shape
        ps = self.pool.page_size
        assert dst.numel() % ps == 0 and torch.equal(dst[::ps] % ps, torch.zeros_like(dst[::ps]))
        view = self.view()
        new = dict(self.shadow)
        for d, s in zip(dst.tolist(), src.tolist()):
            if s in self.shadow:
                assert float(view[d, 0, 0]) == self.shadow[s], (d, s)
                new[d] = self.shadow[s]
            new.pop(s, None) if s not in dst.tolist() else None
        self.shadow = new
        self.moves += dst.numel()


class RecordingStates:
    """An engine-owned state pool without ``move_kv_cache`` (the ``_copy_from_physical``
    path), checking each move against the drop-in's temporal state."""

    def __init__(self, pool: UnifiedKVPool) -> None:
        self.pool = pool
        self.shadow: dict[int, float] = {}
        self.moves = 0

    def _copy_from_physical(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        _, temporal = self.pool.mamba_views_for("mamba")
        new = dict(self.shadow)
        for s, d in zip(src.tolist(), dst.tolist()):
            if s in self.shadow:
                assert float(temporal[0, d].flatten()[0]) == self.shadow[s]
                new[d] = self.shadow[s]
        self.shadow = new
        self.moves += src.numel()


def write_tokens(
    pool: UnifiedKVPool, alloc: MultiEndedAllocator, rec: RecordingKV, ids: torch.Tensor
) -> None:
    """Write a distinct value per virtual token (through the physical ids, as SGLang does)."""
    phys = alloc.translate_kv_loc(ids)
    values = ids.to(torch.float32) + 1000.0
    k = values[:, None, None].expand(-1, H, D).contiguous()
    kv = UnifiedMHATokenToKVPool(
        unified_buffer=pool, sub_pool_name=rec.name, page_size=pool.page_size
    )
    kv.set_kv_buffer(types.SimpleNamespace(layer_id=0), phys, k, k)
    rec.write(phys, values)


def check_tokens(alloc: MultiEndedAllocator, rec: RecordingKV, ids: torch.Tensor) -> None:
    phys = alloc.translate_kv_loc(ids)
    got = rec.view()[phys, 0, 0]
    assert torch.equal(got, ids.to(torch.float32) + 1000.0)


# ----- construction and errors ----------------------------------------------------------------


def test_pool_asserts_are_typed() -> None:
    with pytest.raises(E.SGLangConfigError, match="exactly 2"):
        UnifiedKVPool(
            total_bytes=1 << 14,
            sub_pool_specs=[mha("full", "up")],
            device=DEV,
            enable_memory_saver=False,
        )
    with pytest.raises(AssertionError, match="grow-up and one grow-down"):
        UnifiedKVPool(
            total_bytes=1 << 14,
            sub_pool_specs=[mha("a", "up"), mha("b", "up")],
            device=DEV,
            enable_memory_saver=False,
        )
    with pytest.raises(ukv.PoolConfigError, match="unique"):
        UnifiedKVPool(
            total_bytes=1 << 14,
            sub_pool_specs=[mha("a", "up"), mha("a", "down")],
            device=DEV,
            enable_memory_saver=False,
        )
    with pytest.raises(E.SGLangConfigError, match="page_size"):
        UnifiedKVPool(
            total_bytes=1 << 14,
            sub_pool_specs=[mha("a", "up"), mha("b", "down")],
            device=DEV,
            enable_memory_saver=False,
            page_size=0,
        )
    try:  # the memory saver needs SGLang's adapter and its torch_memory_saver, as in SGLang
        import torch_memory_saver  # noqa: F401
    except ImportError:
        with pytest.raises((NotImplementedError, ImportError), match="memory_saver"):
            UnifiedKVPool(
                total_bytes=1 << 14,
                sub_pool_specs=[mha("a", "up"), mha("b", "down")],
                device=DEV,
                enable_memory_saver=True,
            )
    with pytest.raises(E.SGLangConfigError, match="Increase total_bytes"):
        UnifiedKVPool(
            total_bytes=256,
            sub_pool_specs=[mha("a", "up"), mha("b", "down")],
            device=DEV,
            enable_memory_saver=False,
            page_size=4,
        )
    with pytest.raises(E.SGLangConfigError, match="grow_direction"):
        mha("x", "sideways")


def test_spec_geometry_matches_the_contract() -> None:
    s = mha("full", "up", layers=3)
    k, v = s.k_row_bytes(), s.v_row_bytes()
    assert s.entry_bytes() == 3 * (k + v)
    assert s.page_bytes(4) == 4 * s.entry_bytes()
    assert s.layer_k_offset_in_page(2, 4) == 2 * 4 * (k + v)
    assert s.layer_v_offset_in_page(2, 4) == 2 * 4 * (k + v) + 4 * k
    assert mamba().entry_bytes() == 2 * (4 * 3 * 4 + 8 * 4)


def test_allocators_fix_the_page_size_after_the_pool() -> None:
    pool = full_swa_pool(1)
    assert not pool.is_built
    full = side(pool, "full", owner=True, page_size=4)
    swa = side(pool, "swa", owner=False, page_size=4)
    assert pool.is_built and pool.page_size == 4
    k, _ = pool.mha_views_for("full")
    assert k[0].shape[1:] == (4, H, D) and k[0].shape[0] * 4 == pool.max_slots("full")
    assert pool.ukv_pool.owner_of("swa") == "full"
    with pytest.raises(E.SGLangMisalignedError, match="misaligned"):
        full.alloc(3)
    with pytest.raises(E.SGLangArgumentError):
        swa.alloc(4)
    # A geometry read fixes nothing (SGLang reads max_slots, then builds allocators at
    # the serving page size); reading the views builds ukv's pool at the page size known
    # then, and a later allocator with another one is refused.
    other = UnifiedKVPool(
        total_bytes=1 << 14,
        sub_pool_specs=[mha("full", "down"), mamba()],
        device=DEV,
        enable_memory_saver=False,
        page_size=2,
    )
    assert other.max_slots("full") == (1 << 14) // other.spec("full").entry_bytes()
    other.min_slot_index("full")
    assert not other.is_built and other.page_size == 2
    other.mha_views_for("full")
    with pytest.raises(E.SGLangConfigError, match="already fixed at 2"):
        side(other, "full", owner=True, page_size=4)
    with pytest.raises(E.SGLangConfigError, match="page_size must be 1"):
        side(other, "mamba", owner=True, page_size=2)


def test_tables_are_read_only_and_state_is_sglangs() -> None:
    pool = UnifiedKVPool(
        total_bytes=1 << 14,
        sub_pool_specs=[mha("full", "down"), mamba()],
        device=DEV,
        enable_memory_saver=False,
        page_size=2,
    )
    a = side(pool, "full", owner=True, page_size=2)
    m = side(pool, "mamba", owner=True, page_size=1)
    a.bind_peer(m)
    assert a.watermark_physical == a.num_pages - 1 and m.watermark_physical == m.min_page_index
    first = a.free_virtual_ids[:2].clone()
    ids = a.alloc(4)
    assert torch.equal(ids // 2, first.repeat_interleave(2)[::2].repeat_interleave(2) // 1)
    assert a.live_page_count == 2 and a._allocated_pages() == 2 and a.allocated_count() == 4
    assert a._byte_low_frontier() == (a.watermark_physical + 1) * a.entry_bytes_per_page
    assert m._byte_high_frontier() == m.min_page_index * m.entry_bytes_per_page
    with pytest.raises(ukv.ArgumentError):
        a.virtual_to_physical[1] = 5
    with pytest.raises(E.SGLangArgumentError, match="int64"):
        a.translate_kv_loc(ids, out=torch.empty(4, dtype=torch.int32, device=ids.device))
    out = torch.empty(4, dtype=torch.int64, device=ids.device)
    assert a.translate_kv_loc(ids, out=out) is out
    a.free(ids)
    with pytest.raises(E.SGLangDoubleFreeError):
        a.free(ids)
        settle(pool)  # a free of GPU ids is refused when it is applied
    with pytest.raises(ukv.DoubleFreeError):
        a.free(ids)
        settle(pool)
    settle(pool)
    assert a.allocated_count() == 0


# ----- the scheduler's per-step sequence --------------------------------------------------------


@pytest.mark.parametrize("lazy", [False, True])
@pytest.mark.parametrize("page_size", [1, 4])
def test_mamba_pair_scheduler_steps_with_a_recording_kvcache(lazy: bool, page_size: int) -> None:
    pool = UnifiedKVPool(
        total_bytes=1 << 15,
        sub_pool_specs=[mha("full", "down"), mamba()],
        device=DEV,
        enable_memory_saver=False,
        page_size=page_size,
    )
    rec = RecordingKV(pool, "full")
    states = RecordingStates(pool)
    kvcache = types.SimpleNamespace(full_kv_pool=rec, mamba_pool=states)
    alloc = UnifiedMambaTokenToKVPoolAllocator(
        unified_buffer=pool,
        kvcache=kvcache,
        device=DEV,
        page_size=page_size,
        lazy_compaction=lazy,
    )
    fa = alloc.full_attn_allocator
    ps = page_size
    # Three requests prefill (extend from empty).
    lens = [5, 9, 3]
    pre = torch.zeros(3, dtype=torch.int64)
    seq = torch.tensor(lens, dtype=torch.int64)
    ids = alloc.alloc_extend(pre, pre, seq, seq, torch.full((3,), -1), sum(lens))
    assert ids is not None and ids.numel() == sum(lens)
    reqs = list(torch.split(ids, lens))
    write_tokens(pool, fa, rec, ids)
    ev = Event()
    alloc.set_inflight_forward(ev, ids)
    alloc.set_latest_forward_done_event(ev)
    for step in range(12):
        last = torch.stack([r[-1] for r in reqs])
        seq = torch.tensor([r.numel() + 1 for r in reqs], dtype=torch.int64)
        new = alloc.alloc_decode(seq, seq, last)
        assert new is not None
        reqs = [torch.cat([r, n.view(1)]) for r, n in zip(reqs, new)]
        write_tokens(pool, fa, rec, new)
        ev.done = True
        ev = Event()
        alloc.set_inflight_forward(ev, new)
        if step == 4:  # request 1 finishes: a radix-cache free inside a free group
            alloc.free_group_begin()
            alloc.free(reqs[1][: (reqs[1].numel() // ps) * ps])
            alloc.free(reqs[1][(reqs[1].numel() // ps) * ps :])
            alloc.free_group_end()
            reqs[1] = reqs[1][:0]
            reqs = [r for r in reqs if r.numel()]
        alloc.flush_opportunistic()
        for r in reqs:
            check_tokens(fa, rec, r)
    ev.done = True
    # Retract request 0 to the host and bring it back at new ids.
    victim = reqs[0]
    copy = alloc.get_cpu_copy(victim)
    alloc.free(victim)
    alloc.flush_opportunistic()
    back = alloc.alloc(((victim.numel() + ps - 1) // ps) * ps)[: victim.numel()]
    alloc.load_cpu_copy(copy, back)
    got = rec.view()[fa.translate_kv_loc(back), 0, 0]
    assert torch.equal(got, victim.to(torch.float32) + 1000.0)
    fa._flush(urgent=True)
    for r in reqs[1:]:
        check_tokens(fa, rec, r)
    pool.ukv_pool.check_invariants()
    # Request 1's pages sat between the others': compaction moved pages, and every
    # move was reported to the engine's cache and matched the bytes.
    moved = pool.ukv_pool.stats().sub_pools[0].pages_moved
    assert moved > 0 and rec.moves == moved * page_size


def test_mamba_slots_move_through_copy_from_physical() -> None:
    pool = UnifiedKVPool(
        total_bytes=1 << 14,
        sub_pool_specs=[mha("full", "down"), mamba()],
        device=DEV,
        enable_memory_saver=False,
    )
    states = RecordingStates(pool)
    rec = RecordingKV(pool, "full")
    alloc = UnifiedMambaTokenToKVPoolAllocator(
        unified_buffer=pool,
        kvcache=types.SimpleNamespace(full_kv_pool=rec, mamba_pool=states),
        device=DEV,
    )
    ma = alloc.mamba_allocator
    slots = ma.alloc(4)
    _, temporal = pool.mamba_views_for("mamba")
    phys = ma.translate_kv_loc(slots)
    for s, p in zip(slots.tolist(), phys.tolist()):
        temporal[:, p] = float(s)
        states.shadow[p] = float(s)
    ma.free(slots[:2])
    settle(pool)
    assert states.moves == 2
    phys = ma.translate_kv_loc(slots[2:])
    assert torch.equal(temporal[0, phys].flatten(1)[:, 0], slots[2:].to(torch.float32))


def test_own_pool_is_not_told_about_moves() -> None:
    b = mamba_bundle(page_size=2, lazy=False)
    a = b.token_to_kv_pool_allocator
    fa = a.full_attn_allocator
    called = []
    b.token_to_kv_pool.full_kv_pool.move_kv_cache = lambda d, s: called.append(1)  # type: ignore[method-assign]
    ids = a.alloc(8)
    a.free(ids[2:4])
    a.free(ids[:2])
    settle(b.unified_memory_pool)
    assert b.unified_memory_pool.ukv_pool.stats().pages_moved >= 1 and not called
    assert fa.allocated_count() == 4


@pytest.mark.parametrize("lazy", [False, True])
def test_swa_pair_free_swa_inside_free_groups_keeps_bytes(lazy: bool) -> None:
    pool = full_swa_pool(2, total_bytes=1 << 15)
    full_rec, swa_rec = RecordingKV(pool, "full"), RecordingKV(pool, "swa")
    attached = {}
    kvcache = types.SimpleNamespace(
        full_kv_pool=full_rec,
        swa_kv_pool=swa_rec,
        attach_allocators=lambda **kw: attached.update(kw),
    )
    alloc = UnifiedSWATokenToKVPoolAllocator(
        unified_buffer=pool,
        kvcache=kvcache,
        device=DEV,
        full_max_total_num_tokens=128,
        swa_max_total_num_tokens=64,
        page_size=2,
        lazy_compaction=lazy,
    )
    assert attached == {
        "full_allocator": alloc.full_attn_allocator,
        "swa_allocator": alloc.swa_attn_allocator,
    }
    fa, sa = alloc.full_attn_allocator, alloc.swa_attn_allocator
    ids = alloc.alloc(16)
    write_tokens(pool, fa, full_rec, ids)
    swa_phys = alloc.translate_loc_from_full_to_swa(ids)
    assert swa_phys.dtype == torch.int32
    write_tokens(pool, _SwaView(alloc), swa_rec, ids)
    alloc.free_group_begin()
    alloc.free_swa(ids[:6])  # the window moved past the first three pages
    alloc.free_swa(ids[:2])  # already released: skipped
    alloc.free(ids[12:])
    alloc.free_group_end()
    alloc.flush_opportunistic()
    live = ids[:12]
    check_tokens(fa, full_rec, live)
    check_tokens(_SwaView(alloc), swa_rec, ids[6:12])
    assert torch.equal(
        alloc.translate_loc_from_full_to_swa(ids[:6]),
        torch.zeros(6, dtype=torch.int32, device=ids.device),
    )
    out = torch.empty(3, dtype=torch.int64)
    with pytest.raises(E.SGLangArgumentError, match="int32"):
        alloc.translate_loc_from_full_to_swa(ids[:3], out=out)
    n = alloc.available_size()
    got = alloc.alloc(n)
    assert got is not None and alloc.alloc(2) is None
    alloc.free(got)
    alloc.free(live)
    settle(pool)
    assert fa.allocated_count() == 0 and sa.allocated_count() == 0
    pool.ukv_pool.check_invariants()


class _SwaView:
    """The SWA side addressed like an allocator (``translate_kv_loc``) for the helpers."""

    def __init__(self, alloc: UnifiedSWATokenToKVPoolAllocator) -> None:
        self.alloc = alloc

    def translate_kv_loc(self, ids: torch.Tensor) -> torch.Tensor:
        return self.alloc.translate_loc_from_full_to_swa(ids).to(torch.int64)


# ----- factories --------------------------------------------------------------------------------


def test_mamba_factory_with_sglangs_keywords() -> None:
    b = mamba_bundle()
    a, req = b.token_to_kv_pool_allocator, b.req_to_token_pool
    assert isinstance(a, UnifiedMambaTokenToKVPoolAllocator)
    # Nothing built ukv's pool before the allocators said how (lazy, page size 4).
    assert b.unified_memory_pool.ukv_pool.lazy and b.unified_memory_pool.ukv_pool.page_size == 4
    assert a.available_size() >= 256 and a.mamba_slot_full_token_cost() >= 1
    reqs = [types.SimpleNamespace(req_pool_idx=None, mamba_pool_idx=None) for _ in range(3)]
    assert req.alloc(reqs) is not None
    virt = torch.stack([torch.as_tensor(r.mamba_pool_idx) for r in reqs])
    phys = req.translate_mamba_indices(torch.cat([virt, torch.tensor([-1], device=virt.device)]))
    assert phys.dtype == torch.int32 and int(phys[-1]) == -1 and bool((phys[:-1] > 0).all())
    k = torch.randn(4, H, D, device=DEV)
    ids = a.alloc(4)
    b.token_to_kv_pool.set_kv_buffer(
        types.SimpleNamespace(layer_id=3), a.translate_kv_loc(ids), k, k
    )
    got = b.token_to_kv_pool.get_key_buffer(3).reshape(-1, H, D)[a.translate_kv_loc(ids)]
    assert torch.equal(got, k.bfloat16())
    # The memory saver allocates the buffer in SGLang's region: without SGLang's adapter
    # (stand-in bases) or its torch_memory_saver, refused as SGLang refuses it.
    try:
        import torch_memory_saver  # noqa: F401
    except ImportError:
        with pytest.raises((NotImplementedError, ImportError)):
            mamba_bundle(enable_memory_saver=True)
    with pytest.raises(AssertionError, match="MLA"):
        mamba_bundle(use_mla_backend=True)


def test_swa_factory_routes_write_locs() -> None:
    b = swa_bundle(
        64,
        32,
        page_size=2,
        lazy=True,
        end_layer=3,
        swa_attention_layer_ids=[0, 2],
        full_attention_layer_ids=[1, 3],
    )
    a, kv = b.token_to_kv_pool_allocator, b.token_to_kv_pool
    assert kv.full_to_swa_index_mapping is None and kv.layers_mapping[2] == (1, True)
    full_kv = kv.full_kv_pool
    assert not full_kv.is_quantized_kv_cache() and full_kv.get_v_head_dim() == D
    assert full_kv.data_ptrs.numel() == 2 * 2 and full_kv.data_strides.numel() == 4
    assert int(full_kv.data_ptrs[0]) == full_kv.k_buffer[0].data_ptr()
    ids = a.alloc(4)
    full_loc, swa_loc = a.translate_kv_loc(ids), a.translate_loc_from_full_to_swa(ids)
    k = torch.randn(4, H, D, device=DEV)
    loc = types.SimpleNamespace(full_loc=full_loc, swa_loc=swa_loc)
    kv.set_kv_buffer(types.SimpleNamespace(layer_id=2), loc, k, k)
    kv.set_kv_buffer(types.SimpleNamespace(layer_id=1), loc, -k, -k)
    assert torch.equal(kv.get_key_buffer(2).reshape(-1, H, D)[swa_loc.long()], k.half())
    assert torch.equal(kv.get_key_buffer(1).reshape(-1, H, D)[full_loc], (-k).half())
    with pytest.raises(E.SGLangWriteLocError, match="swa_loc"):
        kv.set_kv_buffer(
            types.SimpleNamespace(layer_id=0),
            types.SimpleNamespace(full_loc=full_loc, swa_loc=None),
            k,
            k,
        )
    copy = a.get_cpu_copy(ids)
    a.free(ids)
    back = a.alloc(4)
    a.load_cpu_copy(copy, back)
    assert torch.equal(
        kv.get_key_buffer(2).reshape(-1, H, D)[a.translate_loc_from_full_to_swa(back).long()],
        k.half(),
    )
    assert torch.equal(
        kv.translate_loc_from_full_to_swa(back), a.translate_loc_from_full_to_swa(back)
    )


# ----- installation ---------------------------------------------------------------------------------


def test_install_serves_sglangs_module_names(monkeypatch: pytest.MonkeyPatch) -> None:
    from ukv.integrations import sglang as dropin

    if "sglang" not in sys.modules:  # stand-in parents so the finder can serve children
        for name in ("sglang", "sglang.srt", "sglang.srt.mem_cache"):
            pkg = types.ModuleType(name)
            pkg.__path__ = []  # type: ignore[attr-defined]
            monkeypatch.setitem(sys.modules, name, pkg)
    dropin.install()
    try:
        import importlib

        mod = importlib.import_module("sglang.srt.mem_cache.multi_ended_allocator")
        pool_mod = importlib.import_module("sglang.srt.mem_cache.unified_memory_pool")
        assert mod.UnifiedMambaTokenToKVPoolAllocator is UnifiedMambaTokenToKVPoolAllocator
        assert pool_mod.init_unified_swa_pools is init_unified_swa_pools
        assert dropin.installed()
    finally:
        dropin.uninstall()
    assert not dropin.installed()
    assert "sglang.srt.mem_cache.multi_ended_allocator" not in sys.modules


def test_import_ukv_does_not_import_the_integration() -> None:
    code = (
        "import sys, ukv; bad = [m for m in sys.modules if m.startswith(('sglang', "
        "'ukv.integrations'))]; assert not bad, bad"
    )
    # The child imports the ukv this process imported (the installed wheel in CI).
    root = os.path.dirname(os.path.dirname(os.path.abspath(ukv.__file__)))
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": root})


# ----- SGLang's known defects (reference-design.md §12) stay fixed ------------------------------


def test_swa_table_spans_full_ids_beyond_the_swa_page_count() -> None:
    """Defect 1: the non-owner's table was sized by its own pages (an out-of-bounds index
    once full's ids outgrew them)."""
    # SWA tokens are 4x full's bytes: the SWA side's index space has a quarter of the pages.
    b = swa_bundle(full_tokens=64, swa_tokens=8, page_size=1, lazy=False, swa_heads=4 * H)
    a = b.token_to_kv_pool_allocator
    kept = []
    while (ids := a.alloc(1)) is not None:
        kept.append(ids)
        a.free_swa(ids)  # left the window at once: SWA pages never run out
    settle(b.unified_memory_pool)
    ids = torch.cat(kept)
    assert int(ids.max()) > a.swa_attn_allocator.max_slots
    assert torch.equal(
        a.translate_loc_from_full_to_swa(ids), torch.zeros_like(ids, dtype=torch.int32)
    )
    phys = b.token_to_kv_pool.translate_loc_from_full_to_swa(ids)
    assert bool((phys < 0).all())  # pool level: unclamped, callers filter
    a.free(ids)
    settle(b.unified_memory_pool)
    assert a.full_attn_allocator.allocated_count() == 0


@pytest.mark.parametrize("lazy", [False, True])
def test_frees_refuse_double_and_repeated_ids(lazy: bool) -> None:
    """Defect 7: lazy frees had no double-free check, and a repeated id double-counted."""
    b = mamba_bundle(page_size=1, lazy=lazy)
    a = b.token_to_kv_pool_allocator
    ids = a.alloc(6).cpu()  # host ids: the error comes from the free itself
    with pytest.raises(E.SGLangDoubleFreeError):
        a.free(torch.stack([ids[0], ids[0]]))
    assert a.full_attn_allocator.allocated_count() == 6  # nothing was freed
    a.free(ids[:3])
    with pytest.raises(AssertionError):
        a.free(ids[:1])
    assert a.full_attn_allocator.allocated_count() == 3


def test_alloc_decode_at_page_size_one() -> None:
    """Defect 8: decode at page size 1 counted no new pages on the host."""
    b = mamba_bundle(page_size=1, lazy=True)
    a = b.token_to_kv_pool_allocator
    ids = a.alloc(3)
    seq = torch.tensor([2, 2, 2])
    new = a.alloc_decode(seq, seq, ids)
    assert new is not None and new.numel() == 3
    assert a.full_attn_allocator.allocated_count() == 6


def test_pending_pages_under_one_unfired_event_come_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """Defect 3: two capped flushes under one unfired event lost a batch of pending pages
    for good (a 'ghost' page kept the span above the live pages)."""
    monkeypatch.setenv("SGLANG_LAZY_COMPACTION_MAX_MOVES_PER_CALL", "1")
    b = mamba_bundle(page_size=1, lazy=True)
    a = b.token_to_kv_pool_allocator
    fa = a.full_attn_allocator
    assert fa._lazy_max_moves_per_call == 1
    ids = a.alloc(8)
    ev = Event()
    a.set_inflight_forward(ev, None)
    a.free(ids[0:1])
    a.free(ids[2:3])
    a.flush_opportunistic()
    a.flush_opportunistic()
    ev.done = True
    a.flush_opportunistic()
    fa._flush(urgent=True)
    assert fa._allocated_pages() == fa.live_page_count == 6
    assert fa._pending_reuse == {} and fa._free_phys_pages.numel() == 0


def test_disable_lazy_compaction_env_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGLANG_DISABLE_LAZY_COMPACTION", "1")
    b = mamba_bundle(lazy=True)
    assert not b.unified_memory_pool.ukv_pool.lazy
    assert not b.token_to_kv_pool_allocator.lazy_compaction


@pytest.mark.parametrize("lazy", [False, True])
def test_eager_frees_wait_for_the_forward_stream(
    lazy: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Overlap mode: an eager free (and a free group's end) orders itself after the
    forward stream, whose forward may still read the bytes compaction moves."""
    waits: list[object] = []
    current = types.SimpleNamespace(wait_stream=waits.append)
    import ukv.integrations.sglang.allocator as allocator_module

    monkeypatch.setattr(allocator_module, "current_stream", lambda: current)
    forward = object()
    b = swa_bundle(64, 32, page_size=2, lazy=lazy, forward_stream=forward)
    a = b.token_to_kv_pool_allocator
    ids = a.alloc(8)
    assert waits == []
    a.free_swa(ids[:2])
    a.free_group_begin()
    a.free(ids[4:6])
    a.free_group_end()
    a.free(ids[:4])
    assert waits == ([] if lazy else [forward] * 4)


# ----- the rest of the allocator surface -------------------------------------------------------


def test_non_owner_binds_the_owners_pages() -> None:
    pool, full, swa = pair(lazy=False)
    assert swa.free_virtual_ids is None
    pages = full.free_virtual_ids[:2].clone()
    ids = full.alloc(4)
    swa.alloc_with_virtual(pages)
    assert bool((swa.virtual_to_physical[pages] > 0).all())
    assert swa.allocated_count() == 4 and full.is_slot_allocated(int(ids[0]))
    with pytest.raises(E.SGLangArgumentError, match="already bound"):
        swa.alloc_with_virtual(pages)
    with pytest.raises(E.SGLangArgumentError, match="id owner"):
        full.alloc_with_virtual(pages)
    # SGLang's primitives: take physical pages, then name them with chosen ids.
    phys = full.take_physical(2)
    assert phys is not None and phys.numel() == 1  # one page of two tokens
    chosen = torch.tensor([int(full.free_virtual_ids[-1])])
    full.bind(chosen, phys)
    assert int(full.virtual_to_physical[chosen]) == int(phys[0])
    with pytest.raises(E.SGLangArgumentError, match="not taken by take_physical"):
        full.bind(chosen, phys)
    full.free(chosen * 2)
    swa.free(ids)  # the SWA side only
    settle(pool)
    assert swa.allocated_count() == 0 and full.allocated_count() == 4
    full.free(ids)
    assert "sub_pool='full'" in full.allocator_state_str()


def test_lazy_holes_and_the_move_cap() -> None:
    pool, full, swa = pair(lazy=True)
    assert full._lazy_max_moves_per_call == 4096
    ids = full.alloc(8)  # four pages
    full.free(ids[2:4])  # a hole under two live pages
    settle(pool)
    holes = full._free_phys_pages
    assert holes.numel() == 1 and full._pending_reuse == {}
    assert full.live_page_count == 3 and full._allocated_pages() == 4
    assert int(full.physical_to_virtual[int(holes[0])]) == -1
    # SGLang's tests set the cap after both allocators exist; the next flush obeys it.
    full._lazy_max_moves_per_call = 7
    assert pool.ukv_pool.max_moves_per_flush == 7 and swa._lazy_max_moves_per_call == 7
    with pytest.raises(AssertionError, match="positive int"):
        full._lazy_max_moves_per_call = 0
    assert full._lazy_max_moves_per_call == 7
    assert full.flush_opportunistic() == 1
    assert full._free_phys_pages.numel() == 0 and full._allocated_pages() == 3


def test_backup_restore_and_clear() -> None:
    pool, full, swa = pair(lazy=False)
    state = full.backup_state()
    assert full.restore_state(state) == []
    ids = full.alloc(4)
    with pytest.raises(NotImplementedError, match="does not roll allocations back"):
        full.restore_state(state)
    # An alloc + free pair leaves the counts as they were, not the allocator (review N6).
    state = full.backup_state()
    full.free(full.alloc(2))
    settle(pool)
    assert full.allocated_count() == 4
    with pytest.raises(NotImplementedError, match="does not roll allocations back"):
        full.restore_state(state)
    full.free_group_begin()
    full.free(ids[:2])
    assert full.allocated_count() == 4  # queued until the group ends
    full.free_group_end()
    settle(pool)
    assert full.allocated_count() == 2
    full.clear()
    assert full.allocated_count() == 0 and full.watermark_physical == full.num_pages - 1


def test_state_slots_group_translate_and_host_copies() -> None:
    b = mamba_bundle(page_size=2, lazy=False)
    a, req = b.token_to_kv_pool_allocator, b.req_to_token_pool
    slots = req.mamba_allocator
    assert slots.size == b.unified_memory_pool.max_slots("mamba") - 1
    free_before = slots.available_size()
    slots.alloc_group_begin(3)
    first = slots.alloc(1)
    assert first.shape == (1,) and slots.available_size() == free_before - 3
    slots.alloc_group_end()  # the two untaken slots go back
    settle(b.unified_memory_pool)
    assert slots.available_size() == free_before - 1
    assert slots.is_slot_allocated(int(first)) and slots.free_slots.numel() > 0
    phys = slots.translate(torch.tensor([int(first), -1, 0]))
    assert int(phys[0]) > 0 and int(phys[1]) == -1 and int(phys[2]) == -1
    # Retraction of tokens and their state, by virtual ids.
    ids = a.alloc(4)
    k = torch.randn(4, H, D, device=DEV)
    kv = b.token_to_kv_pool
    kv.set_kv_buffer(types.SimpleNamespace(layer_id=1), a.translate_kv_loc(ids), k, k)
    _, temporal = b.unified_memory_pool.mamba_views_for("mamba")
    temporal[:, int(phys[0])] = 7.0
    # SGLang passes one request's slot as req.mamba_pool_idx: a 0-d tensor.
    copy = a.get_cpu_copy(ids, mamba_indices=first[0])
    a.free(ids)
    slots.free(first)
    ids2, first2 = a.alloc(4), slots.alloc(1)
    a.load_cpu_copy(copy, ids2, mamba_indices=first2[0])
    got = kv.get_key_buffer(1).reshape(-1, H, D)[a.translate_kv_loc(ids2)]
    assert torch.equal(got, k.bfloat16())
    assert bool((temporal[:, int(slots.translate(first2)[0])] == 7.0).all())
    settle(b.unified_memory_pool)
    with pytest.raises(ukv.InvalidIdError):
        a.get_cpu_copy(ids)  # not live any more (unless reused), checked by ukv


@pytest.mark.parametrize("overlap", [True, False])
def test_mamba_extra_buffer_track_slots_are_state_slots(overlap: bool) -> None:
    """``enable_mamba_extra_buffer``: each request's ping-pong track slots come from the
    drop-in's state slots (virtual ids, translated and compacted like the request's own)."""
    b = mamba_bundle(
        page_size=2,
        lazy=False,
        enable_mamba_extra_buffer=True,
        disable_overlap_schedule=not overlap,
    )
    req = b.req_to_token_pool
    slots = req.mamba_allocator
    per_req = 2 if overlap else 1
    assert req.req_index_to_mamba_ping_pong_track_buffer_mapping.shape[1] == per_req
    free_before = slots.available_size()
    reqs = [
        types.SimpleNamespace(
            req_pool_idx=None, mamba_pool_idx=None, mamba_ping_pong_track_buffer=None
        )
        for _ in range(3)
    ]
    assert req.alloc(reqs) is not None
    assert slots.available_size() == free_before - 3 * (1 + per_req)
    for r in reqs:
        track = req.req_index_to_mamba_ping_pong_track_buffer_mapping[r.req_pool_idx]
        assert torch.equal(track.cpu(), r.mamba_ping_pong_track_buffer.cpu())
        assert bool((req.translate_mamba_indices(track) > 0).all())
    # Freeing the first request's slots compacts the others' track slots; their
    # translations follow the moved states.
    _, temporal = b.unified_memory_pool.mamba_views_for("mamba")
    last = reqs[-1].mamba_ping_pong_track_buffer
    temporal[:, req.translate_mamba_indices(last).long()] = 3.0
    req.free_mamba_cache(reqs[0])
    settle(b.unified_memory_pool)
    assert slots.available_size() == free_before - 2 * (1 + per_req)
    assert bool((temporal[:, req.translate_mamba_indices(last).long()] == 3.0).all())


def test_kv_pools_built_before_allocators_follow_their_page_size() -> None:
    """SGLang may build the pool and its KV pools with page size 1 and the allocators with
    the serving page size: the KV pools address the bytes at the allocators' page size."""
    pool = full_swa_pool(1, total_bytes=1 << 15)
    from ukv.integrations.sglang.kvcache import UnifiedSWAKVPool

    kv = UnifiedSWAKVPool(
        unified_buffer=pool,
        swa_attention_layer_ids=[0, 2],
        full_attention_layer_ids=[1, 3],
        page_size=1,
    )
    assert not pool.is_built
    alloc = UnifiedSWATokenToKVPoolAllocator(
        unified_buffer=pool,
        kvcache=kv,
        device=DEV,
        full_max_total_num_tokens=128,
        swa_max_total_num_tokens=64,
        page_size=4,
        lazy_compaction=True,
    )
    assert pool.page_size == kv.page_size == kv.full_kv_pool.page_size == 4
    assert kv.size == pool.max_slots("full") - 1
    assert kv.full_kv_pool.k_buffer[0].shape[1] == 4
    ids = alloc.alloc(8)
    k = torch.randn(8, H, D, device=DEV)
    loc = bases_kvwriteloc(ids, alloc)
    kv.set_kv_buffer(types.SimpleNamespace(layer_id=1), loc, k, k)
    kv.set_kv_buffer(types.SimpleNamespace(layer_id=2), loc, -k, -k)
    alloc.free(ids[:4])  # compacts (eager) or leaves a hole (lazy), then flush
    alloc.flush_opportunistic()
    full_k = kv.get_key_buffer(1)
    swa_k = kv.get_key_buffer(2)
    fp, sp = alloc.translate_kv_loc(ids[4:]), alloc.translate_loc_from_full_to_swa(ids[4:]).long()
    assert torch.equal(full_k[fp // 4, fp % 4], k[4:])
    assert torch.equal(swa_k[sp // 4, sp % 4], -k[4:])


def bases_kvwriteloc(ids: torch.Tensor, alloc: UnifiedSWATokenToKVPoolAllocator) -> object:
    """SGLang's ``KVWriteLoc`` (or the stand-in) with both sides' physical locations."""
    from ukv.integrations.sglang import bases

    return bases.names["KVWriteLoc"](
        loc=ids,
        swa_loc=alloc.translate_loc_from_full_to_swa(ids),
        full_loc=alloc.translate_kv_loc(ids),
    )


@pytest.mark.parametrize("lazy", [False, True])
@pytest.mark.parametrize("page_size", [1, 4])
def test_randomized_swa_trace_keeps_bytes(lazy: bool, page_size: int) -> None:
    """A seeded random scheduler trace through the SWA factory's stack: every token's
    value, written through SGLang's write path, reads back on both sides (the SWA side
    while it is in the window) after every compaction."""
    gen = torch.Generator().manual_seed(1000 * page_size + lazy)
    window = 4 * page_size
    b = swa_bundle(full_tokens=160, swa_tokens=96, page_size=page_size, lazy=lazy)
    a, kv = b.token_to_kv_pool_allocator, b.token_to_kv_pool
    reqs: list[torch.Tensor] = []  # virtual tokens per request
    released: list[int] = []  # tokens whose SWA side is released, per request
    value = {}  # virtual token -> the value written

    def write(ids: torch.Tensor) -> None:
        vals = torch.rand(ids.numel(), generator=gen) * 100
        k = vals[:, None, None].expand(-1, H, D).to(DEV, torch.float16)
        loc = bases_kvwriteloc(ids, a)
        kv.set_kv_buffer(types.SimpleNamespace(layer_id=1), loc, k, k)  # full layer
        kv.set_kv_buffer(types.SimpleNamespace(layer_id=0), loc, -k, -k)  # SWA layer
        for t, v in zip(ids.tolist(), k[:, 0, 0].tolist()):
            value[t] = v

    def check() -> None:
        for r, gone in zip(reqs, released):
            want = torch.tensor([value[t] for t in r.tolist()], dtype=torch.float16, device=DEV)
            fp = a.translate_kv_loc(r)
            full = kv.get_key_buffer(1)[fp // page_size, fp % page_size, 0, 0]
            assert torch.equal(full, want)
            live = r[gone:]
            sp = a.translate_loc_from_full_to_swa(live).long()
            swa = kv.get_key_buffer(0)[sp // page_size, sp % page_size, 0, 0]
            assert torch.equal(swa, -want[gone:])

    for _ in range(80):
        op = int(torch.randint(0, 10, (1,), generator=gen))
        if op < 3 or not reqs:  # a new request prefills
            n = int(torch.randint(1, 3 * page_size + 2, (1,), generator=gen))
            zero = torch.zeros(1, dtype=torch.int64)
            seq = torch.tensor([n])
            ids = a.alloc_extend(zero, zero, seq, seq, torch.full((1,), -1), n)
            if ids is not None:
                reqs.append(ids)
                released.append(0)
                write(ids)
        elif op < 7:  # a decode step for every request
            last = torch.stack([r[-1] for r in reqs])
            seq = torch.tensor([r.numel() + 1 for r in reqs])
            new = a.alloc_decode(seq, seq, last)
            if new is not None:
                reqs = [torch.cat([r, t.view(1)]) for r, t in zip(reqs, new)]
                write(new)
        elif op < 9:  # the window moves: release whole pages that left it
            a.free_group_begin()
            for i, r in enumerate(reqs):
                out = ((r.numel() - window) // page_size) * page_size
                if out > released[i]:
                    a.free_swa(r[released[i] : out])
                    released[i] = out
            a.free_group_end()
        else:  # the oldest request finishes
            a.free(reqs.pop(0))
            released.pop(0)
        a.flush_opportunistic()
        check()
    b.unified_memory_pool.ukv_pool.check_invariants()
    assert b.unified_memory_pool.ukv_pool.stats().pages_moved > 0


@pytest.mark.parametrize("lazy", [False, True])
def test_speculative_verify_scratch_and_accepted_states_follow_compaction(lazy: bool) -> None:
    """Speculative decoding on a Mamba hybrid (Qwen3-Next MTP, EAGLE): the verify kernels
    write one state per draft token into the scratch row of each batch position; the
    accepted draft's state is then copied into the request's own slot (through
    ``translate_mamba_indices``), which compaction moves like any state slot."""
    drafts = 3
    b = mamba_bundle(page_size=1, lazy=lazy, speculative_num_draft_tokens=drafts, max_num_reqs=4)
    req, a = b.req_to_token_pool, b.token_to_kv_pool_allocator
    cache = req.mamba_pool.mamba_cache
    assert cache.intermediate_ssm.shape == (2, 5, drafts, 2, 2, 2)
    assert [w.shape for w in cache.intermediate_conv_window] == [(2, 5, drafts, 4, 3)]
    layer = req.mamba2_layer_cache(2)  # model layer 2 is the pool's state layer 1
    assert layer.intermediate_ssm.data_ptr() == cache.intermediate_ssm[1].data_ptr()
    reqs = [types.SimpleNamespace(req_pool_idx=None, mamba_pool_idx=None) for _ in range(3)]
    assert req.alloc(reqs) is not None
    # Verify step: batch row i writes draft t's state as 10 * i + t; draft i is accepted.
    for row in range(3):
        for t in range(drafts):
            cache.intermediate_ssm[:, row, t] = 10.0 * row + t
    slots = req.translate_mamba_indices(
        torch.stack([torch.as_tensor(r.mamba_pool_idx) for r in reqs])
    )
    for row, slot in enumerate(slots.tolist()):
        cache.temporal[:, slot] = cache.intermediate_ssm[:, row, row]
    # The first request finishes; compaction moves the last one's slot into its place.
    req.free_mamba_cache(reqs[0])
    a.flush_opportunistic()
    settle(b.unified_memory_pool)
    moved = int(req.translate_mamba_indices(torch.as_tensor([reqs[2].mamba_pool_idx]))[0])
    assert moved == int(slots[0]) != int(slots[2])
    for row in (1, 2):
        slot = int(req.translate_mamba_indices(torch.as_tensor([reqs[row].mamba_pool_idx]))[0])
        assert bool((cache.temporal[:, slot] == 10.0 * row + row).all()), row
