"""Review round 4's findings on the SGLang drop-in, each pinned by the call sequence that
showed it (the shared docs' ``review-round4.md``): the admission and leak-check formulas
of SGLang's scheduler (F1), layer indices as SGLang's hybrid pools pass them (F2, F3),
frees that settle in lockstep (F5), installation order (F9, N9), fp8 flavours (F10) and
the small items (N4, N5, N7), plus SGLang's own tests' geometry reads (issue 26 item 1).

Runs on the stand-in bases and, through ``test_sglang_dropin_real.py``'s child process,
on SGLang's own.
"""

from __future__ import annotations

import os
import subprocess
import sys
import types

import numpy as np
import pytest
import torch

import ukv
from ukv.errors import DeferredFreeError
from ukv.integrations.sglang import errors as E
from ukv.integrations.sglang.allocator import MultiEndedAllocator
from ukv.integrations.sglang.install import SITE_DIR
from ukv.integrations.sglang.pool import UnifiedKVPool, lockstep_required

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dropin_builders import DEV, D, H, mamba, mamba_bundle, mha, settle, swa_bundle  # noqa: E402

Layer = types.SimpleNamespace


# ----- F1: SGLang's per-side budgets on the SWA composite -----------------------------------------


def _sglang_admits(a, n: int, evictable: int = 0) -> bool:
    """SGLang's PrefillAdder: ``rem_total_tokens`` and ``rem_swa_tokens`` per side."""
    return n <= a.full_available_size() + evictable and n <= a.swa_available_size() + evictable


def _extend(a, n: int) -> torch.Tensor | None:
    """One request's prefill of ``n`` tokens through the composite's ``alloc_extend``."""
    zero = torch.zeros(1, dtype=torch.int64, device=DEV)
    seq = torch.full((1,), n, dtype=torch.int64, device=DEV)
    last = torch.full((1,), -1, dtype=torch.int64, device=DEV)
    return a.alloc_extend(zero, zero.cpu(), seq, seq.cpu(), last, n)


@pytest.mark.parametrize("page_size", [1, 4])
@pytest.mark.parametrize("lazy", [False, True])
@pytest.mark.parametrize("caps", [(64, 64), (96, 32), (32, 96)])
def test_swa_side_views_admit_only_what_fits_and_keep_the_leak_check(
    caps: tuple[int, int], lazy: bool, page_size: int
) -> None:
    full_cap, swa_cap = caps
    a = swa_bundle(full_cap, swa_cap, page_size=page_size, lazy=lazy).token_to_kv_pool_allocator
    # Idle, empty: SGLang's leak check is available + evictable + protected == static cap.
    assert (a.full_available_size(), a.swa_available_size()) == (full_cap, swa_cap)
    # The largest prefill SGLang's admission accepts must allocate (it raises otherwise).
    n = min(full_cap, swa_cap)
    assert _sglang_admits(a, n) and not _sglang_admits(a, n + page_size)
    ids = _extend(a, n)
    assert ids is not None and ids.numel() == n
    # The window leaves: the SWA side of the first tokens goes, the full side stays (a
    # radix cache would hold them as evictable): each side's view still adds up to its cap.
    gone = ids[: n // 2]
    a.free_swa(gone)
    settle(a.unified_buffer)
    held_full, held_swa = n, n - gone.numel()
    assert a.full_available_size() + held_full == full_cap
    assert a.swa_available_size() + held_swa == swa_cap
    # What both views admit now still allocates jointly.
    more = min(a.full_available_size(), a.swa_available_size())
    more -= more % page_size
    if more:
        assert _extend(a, more) is not None
    a.clear()
    settle(a.unified_buffer)
    assert (a.full_available_size(), a.swa_available_size()) == (full_cap, swa_cap)


def test_swa_conserve_views_stay_exact_when_a_side_borrows() -> None:
    a = swa_bundle(64, 16, page_size=1).token_to_kv_pool_allocator
    # The full side borrows the SWA side's bytes while its windows are released: it can
    # hold more than its static cap. SGLang's leak identity (available + held == cap)
    # needs ``cap - allocated`` exact there, negative: no clamp (SGLang's own tests
    # assert the identity after every operation).
    while (ids := a.alloc(8)) is not None:
        a.free_swa(ids)
        settle(a.unified_buffer)
    held = a.full_attn_allocator.allocated_count()
    assert held > 64
    assert a._conserve_full_available_size() == 64 - held
    assert a.full_available_size() + held == 64
    assert a._conserve_swa_available_size() == 16 and not _sglang_admits(a, 1)


# ----- F2, F3: layer ids through SGLang's hybrid pools ------------------------------------------


def test_mamba_layers_reach_their_own_state_through_the_request_table() -> None:
    """F2: SGLang's request table maps the model's layer id to the pool's index before it
    asks the state pool; the state pool must not map it a second time."""
    mamba_ids = [0, 1, 2, 4, 5, 6]
    b = mamba_bundle(
        mamba_layer_ids=mamba_ids,
        full_attention_layer_ids=[3, 7],
        end_layer=7,
    )
    req = b.req_to_token_pool
    temporal = req.mamba_pool.mamba_cache.temporal
    for i, lid in enumerate(mamba_ids):
        got = req.mamba2_layer_cache(lid)
        assert got.temporal.data_ptr() == temporal[i].data_ptr(), (lid, i)
        assert got.temporal.shape == temporal[i].shape


@pytest.mark.parametrize("page_size", [1, 4])
def test_a_pipeline_stage_reads_the_layer_it_wrote(page_size: int) -> None:
    """F3: a stage holding model layers 2..9 (``start_layer=2``): every full layer's K/V
    written through SGLang's ``HybridLinearKVPool`` reads back from the same layer."""
    full_ids, mamba_ids = [3, 5, 7, 9], [2, 4, 6, 8]
    b = mamba_bundle(
        page_size=page_size,
        start_layer=2,
        end_layer=9,
        mamba_layer_ids=mamba_ids,
        full_attention_layer_ids=full_ids,
    )
    a, kv = b.token_to_kv_pool_allocator, b.token_to_kv_pool
    ids = a.alloc(page_size * 2)
    phys = a.translate_kv_loc(ids)
    for value, lid in enumerate(full_ids, start=1):
        k = torch.full((ids.numel(), H, D), float(value), device=DEV)
        kv.set_kv_buffer(Layer(layer_id=lid), phys, k, -k)
    for value, lid in enumerate(full_ids, start=1):
        keys = kv.get_key_buffer(lid).reshape(-1, H, D)[phys]
        values = kv.get_value_buffer(lid).reshape(-1, H, D)[phys]
        assert bool((keys == value).all()) and bool((values == -value).all()), lid


# ----- F5: frees settle before the call returns in lockstep mode ------------------------------------


def test_lockstep_mode_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UKV_SGLANG_LOCKSTEP", "1")
    assert lockstep_required()
    monkeypatch.setenv("UKV_SGLANG_LOCKSTEP", "0")
    assert not lockstep_required()
    monkeypatch.delenv("UKV_SGLANG_LOCKSTEP")
    assert lockstep_required()  # the default: sizes exact after every free call


@pytest.mark.parametrize("lockstep", [False, True])
def test_every_free_call_settles_in_lockstep_mode(
    monkeypatch: pytest.MonkeyPatch, lockstep: bool
) -> None:
    monkeypatch.setenv("UKV_SGLANG_LOCKSTEP", "1" if lockstep else "0")
    a = swa_bundle(64, 64, page_size=2, lazy=True).token_to_kv_pool_allocator
    pool = a.unified_buffer.ukv_pool
    before = a.available_size()
    ids = a.alloc(16)
    synced: list[str] = []
    real = pool.sync_frees
    monkeypatch.setattr(pool, "sync_frees", lambda: (synced.append("sync"), real())[1])
    a.free_swa(ids[:4])
    a.free_group_begin()
    a.free(ids[4:8])
    a.free_group_end()
    a.free(ids[8:])
    # Once per call outside a group, and at the group's end (none inside it: sizes do
    # not change inside a group).
    assert len(synced) == (3 if lockstep else 0)
    if lockstep:  # on CUDA the ids are on the GPU: their frees count when free returns
        assert a.swa_attn_allocator.allocated_count() == 0
        assert a.full_attn_allocator.allocated_count() == 4  # free_swa kept their full side
        a.free(ids[:4])
        assert a.full_attn_allocator.allocated_count() == 0 and a.available_size() == before


# ----- F9, N9: installation ------------------------------------------------------------------------


def _fake_sglang(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """SGLang's package parents as empty stand-ins (unless SGLang is importable)."""
    for name in ("sglang", "sglang.srt", "sglang.srt.mem_cache"):
        if name not in sys.modules:
            pkg = types.ModuleType(name)
            pkg.__path__ = []  # type: ignore[attr-defined]
            monkeypatch.setitem(sys.modules, name, pkg)
    return sys.modules["sglang.srt.mem_cache"]


def test_a_late_install_is_refused_and_leaves_nothing_behind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ukv.integrations import sglang as dropin

    parent = _fake_sglang(monkeypatch)
    name = "sglang.srt.mem_cache.multi_ended_allocator"
    theirs = types.ModuleType(name)  # SGLang's own module, imported before install()
    monkeypatch.setitem(sys.modules, name, theirs)
    parent.multi_ended_allocator = theirs  # type: ignore[attr-defined]
    env_before = dict(os.environ)
    with pytest.raises(E.SGLangInstallError, match="multi_ended_allocator"):
        dropin.install()
    assert not dropin.installed() and sys.modules[name] is theirs
    assert dict(os.environ) == env_before
    # A side-by-side comparison may ask for the mixed installation on purpose.
    dropin.install(replace_loaded=True, propagate=False)
    try:
        assert name not in sys.modules and not hasattr(parent, "multi_ended_allocator")
        import importlib

        ours = importlib.import_module(name)
        assert ours.__ukv_dropin__ and parent.multi_ended_allocator is ours
    finally:
        dropin.uninstall()
        # Both import forms forget the drop-in after uninstall.
        assert name not in sys.modules and not hasattr(parent, "multi_ended_allocator")


def _child_says(code: str, env: dict[str, str]) -> str:
    res = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout.strip()


def test_install_reaches_processes_started_after_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    """N9: SGLang runs its scheduler in processes it starts; ``install()`` in the launcher
    exports itself to them (a ``sitecustomize`` of the user's still runs)."""
    from ukv.integrations import sglang as dropin

    user = os.path.join(str(tmp_path), "user_site")
    os.makedirs(user)
    with open(os.path.join(user, "sitecustomize.py"), "w") as f:
        f.write("import os\nos.environ['USER_SITE_RAN'] = '1'\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(ukv.__file__)))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([user, root]))
    probe = (
        "import os, ukv.integrations.sglang as d; "
        "print(d.installed(), os.environ.get('USER_SITE_RAN'))"
    )
    _fake_sglang(monkeypatch)
    dropin.install()
    try:
        assert os.environ["UKV_SGLANG_DROPIN"] == "1"
        assert os.environ["PYTHONPATH"].split(os.pathsep)[0] == SITE_DIR
        assert _child_says(probe, dict(os.environ)) == "True 1"
    finally:
        dropin.uninstall()
    assert "UKV_SGLANG_DROPIN" not in os.environ
    assert os.environ["PYTHONPATH"] == os.pathsep.join([user, root])
    assert _child_says(probe, dict(os.environ)) == "False 1"


# ----- F10: fp8 flavours -----------------------------------------------------------------------------


@pytest.mark.parametrize("kv_dtype", [torch.float8_e5m2, torch.float8_e4m3fn])
def test_fp8_caches_keep_their_flavour(kv_dtype: torch.dtype) -> None:
    b = swa_bundle(64, 64, page_size=1, kv_cache_dtype=kv_dtype)
    a, kv = b.token_to_kv_pool_allocator, b.token_to_kv_pool
    assert b.unified_memory_pool.spec("full").to_ukv().dtype == kv_dtype
    ids = a.alloc(3)
    full_loc = a.translate_kv_loc(ids)
    wanted = torch.tensor([1.0, 300.0, 1000.0], device=DEV)
    k = wanted[:, None, None].expand(3, H, D).contiguous()
    write = types.SimpleNamespace(loc=ids, swa_loc=None, full_loc=full_loc)
    kv.set_kv_buffer(Layer(layer_id=1), write, k, k)
    bits = kv.get_key_buffer(1).reshape(-1, H, D)[full_loc][:, 0, 0]
    assert bits.dtype == torch.uint8
    assert torch.equal(bits.cpu(), wanted.to(kv_dtype).view(torch.uint8).cpu())


def test_an_fp8_flavour_must_be_fp8() -> None:
    from ukv.integrations.sglang.specs import MHASubPoolSpec

    with pytest.raises(E.SGLangConfigError, match="kv_dtype"):
        MHASubPoolSpec(
            name="full",
            layer_num=1,
            head_num=1,
            head_dim=4,
            store_dtype=torch.uint8,
            kv_dtype=torch.float16,
            grow_direction="up",
        )


# ----- N4, N5, N7 -------------------------------------------------------------------------------------


def test_a_rejected_queued_free_keeps_its_records() -> None:
    record = types.SimpleNamespace(
        sub_pool="full",
        ids=np.array([5, 6]),
        rejected=np.array([6]),
        freed=np.array([5]),
        reason="not live",
    )
    with pytest.raises(E.SGLangDeferredFreeError) as info, E.translated():
        raise DeferredFreeError.of([record])
    err = info.value
    assert isinstance(err, AssertionError) and isinstance(err, DeferredFreeError)
    assert isinstance(err, E.SGLangDoubleFreeError) and err.failures == (record,)


def test_a_state_copy_is_not_loaded_without_its_slot() -> None:
    b = mamba_bundle(page_size=1)
    a, req = b.token_to_kv_pool_allocator, b.req_to_token_pool
    r = types.SimpleNamespace(req_pool_idx=None, mamba_pool_idx=None)
    assert req.alloc([r]) is not None
    ids = a.alloc(4)
    copy = a.get_cpu_copy(ids, r.mamba_pool_idx)
    with pytest.raises(E.SGLangArgumentError, match="mamba_indices is None"):
        a.load_cpu_copy(copy, ids)
    with pytest.raises(E.SGLangArgumentError, match="holds no state"):
        a.load_cpu_copy((copy[0], None), ids, r.mamba_pool_idx)
    a.load_cpu_copy(copy, ids, r.mamba_pool_idx)


@pytest.mark.parametrize("n", [0, -4])
def test_nothing_asked_gives_nothing(n: int) -> None:
    swa = swa_bundle(64, 64, page_size=2).token_to_kv_pool_allocator
    mam = mamba_bundle(page_size=2).token_to_kv_pool_allocator
    for a in (swa, mam, swa.full_attn_allocator):
        before = a.available_size()
        got = a.alloc(n)
        assert got is not None and got.numel() == 0 and got.dtype == torch.int64
        assert a.available_size() == before


# ----- issue 26 item 1: geometry reads before the allocators fix nothing ------------------------


@pytest.mark.parametrize("page_size", [4, 8])
def test_geometry_read_at_page_size_one_then_allocators_at_the_serving_size(
    page_size: int,
) -> None:
    full, other = mha("full", "up"), mamba("down")
    total = full.entry_bytes() * 256 + other.entry_bytes() * 16
    pool = UnifiedKVPool(
        total_bytes=total, sub_pool_specs=[full, other], device=DEV, enable_memory_saver=False
    )
    slots = pool.max_slots("full")
    assert slots == total // full.entry_bytes()
    assert pool.min_slot_index("full") >= 1 and not pool.is_built
    fa = MultiEndedAllocator(
        kvcache=None,
        unified_buffer=pool,
        sub_pool_name="full",
        device=DEV,
        is_id_owner=True,
        page_size=page_size,
    )
    MultiEndedAllocator(
        kvcache=None,
        unified_buffer=pool,
        sub_pool_name="mamba",
        device=DEV,
        is_id_owner=True,
    )
    assert pool.is_built and pool.page_size == page_size and fa.max_slots == slots
    assert fa.num_pages == slots // page_size
    assert fa.min_slot_index == pool.min_slot_index("full")
    ids = fa.alloc(page_size * 3)
    assert ids is not None and bool((fa.translate_kv_loc(ids) >= fa.min_slot_index).all())
