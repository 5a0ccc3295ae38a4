"""The version seam (``layouts``) and SGLang 0.5.23's drop-in classes on the stand-in bases.

Runs everywhere (no SGLang needed): the release is read from a fake install's metadata,
the finder serves 0.5.23's module names under ``UKV_SGLANG_LAYOUT=0.5.23``, and the
``v0523`` stack (SWA pair, Mamba, the Mamba + SWA + full tri-pool) allocates, frees,
compacts and reads back the bytes written, in 0.5.23's token-major layout.
``tests/test_sglang_0523.py`` compares the same classes with SGLang 0.5.23's own.
"""

from __future__ import annotations

import importlib
import sys
import types

import pytest
import torch

from ukv.integrations.sglang import bases, layouts
from ukv.integrations.sglang.errors import SGLangConfigError, SGLangNotImplementedError
from ukv.integrations.sglang.v0523 import factories as F
from ukv.integrations.sglang.v0523.specs import MambaSubPoolSpec, MHASubPoolSpec

# ----- the seam ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "layout", "warns"),
    [
        (None, "0.5.16", False),
        ("0.5.16", "0.5.16", False),
        ("0.5.23", "0.5.23", False),
        ("0.5.23.post1", "0.5.23", False),
        ("0.5.20", "0.5.16", True),
        ("0.6.0", "0.5.23", True),
    ],
)
def test_a_release_picks_its_layout(version: str | None, layout: str, warns: bool) -> None:
    if warns:
        with pytest.warns(UserWarning, match="no layout of its own"):
            assert layouts.layout_for(version).version == layout
    else:
        assert layouts.layout_for(version).version == layout


@pytest.mark.parametrize("source", ["dist-info", "_version.py"])
def test_the_installed_release_is_read_without_importing_sglang(
    tmp_path, monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    pkg = tmp_path / "sglang"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise RuntimeError('SGLang must not be imported')\n")
    if source == "dist-info":
        meta = tmp_path / "sglang-0.5.23.dist-info"
        meta.mkdir()
        (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.23\n")
    else:
        (pkg / "_version.py").write_text("__version__ = version = '0.5.23'\n")
    monkeypatch.delitem(sys.modules, "sglang", raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(layouts, "_cached", None)
    monkeypatch.delenv("UKV_SGLANG_LAYOUT", raising=False)
    assert layouts.installed_version() == "0.5.23"
    assert layouts.current() is layouts.SGLANG_0523
    assert "sglang" not in sys.modules


def test_every_served_name_exists_and_every_layout_names_its_bases() -> None:
    for layout in layouts.LAYOUTS:
        for served in layout.modules.values():
            for module, attr in served.values():
                assert hasattr(importlib.import_module(module), attr), (layout.version, attr)
        assert set(layout.bases) <= set(bases.names), layout.version


def test_install_serves_0523s_module_names(monkeypatch: pytest.MonkeyPatch) -> None:
    from ukv.integrations import sglang as dropin
    from ukv.integrations.sglang.v0523 import composites

    monkeypatch.setenv("UKV_SGLANG_LAYOUT", "0.5.23")
    if "sglang" not in sys.modules:  # stand-in parents so the finder can serve children
        for name in (
            "sglang",
            "sglang.srt",
            "sglang.srt.mem_cache",
            "sglang.srt.mem_cache.allocator",
        ):
            pkg = types.ModuleType(name)
            pkg.__path__ = []  # type: ignore[attr-defined]
            monkeypatch.setitem(sys.modules, name, pkg)
    dropin.install(propagate=False)
    try:
        swa = importlib.import_module("sglang.srt.mem_cache.allocator.unified_hybrid_swa")
        assert swa.UnifiedSWAAllocatorBase is composites.UnifiedSWAAllocatorBase
        assert swa.__ukv_sglang_layout__ == "0.5.23"
        ump = importlib.import_module("sglang.srt.mem_cache.unified_memory_pool")
        assert ump.init_unified_mamba_swa_pools is F.init_unified_mamba_swa_pools
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module("sglang.srt.mem_cache.multi_ended_allocator")
    finally:
        dropin.uninstall()
    assert "sglang.srt.mem_cache.allocator.unified_hybrid_swa" not in sys.modules


# ----- the 0.5.23 stack on stand-ins ------------------------------------------------------------

CONFIG = types.SimpleNamespace(
    shape=types.SimpleNamespace(conv=[(3, 8)], temporal=(1, 4, 8)),
    dtype=types.SimpleNamespace(conv=torch.bfloat16, temporal=torch.float32),
    layers=[0],
)
KV = {
    "device": "cpu",
    "kv_cache_dtype": torch.float16,
    "head_num": 1,
    "head_dim": 8,
    "v_head_dim": 8,
    "swa_head_num": 1,
    "swa_head_dim": 8,
    "swa_v_head_dim": 8,
    "start_layer": 0,
    "end_layer": 2,
    "swa_attention_layer_ids": [1],
    "full_attention_layer_ids": [0],
    "full_max_total_num_tokens": 100,
    "swa_max_total_num_tokens": 100,
    "enable_memory_saver": False,
    "need_sort": False,
}


def _swa(ps: int, lazy: bool) -> object:
    return F.init_unified_swa_pools(page_size=ps, lazy_compaction=lazy, **KV)


def _tri(ps: int, lazy: bool) -> object:
    return F.init_unified_mamba_swa_pools(
        page_size=ps,
        lazy_compaction=lazy,
        mamba_layer_ids=[0],
        mamba2_cache_params=CONFIG,
        max_mamba_cache_size=8,
        model_context_len=64 * ps,
        extra_max_context_len=1,
        max_num_reqs=4,
        enable_mamba_extra_buffer=False,
        enable_mamba_extra_buffer_lazy=False,
        disable_overlap_schedule=True,
        sliding_window_size=32,
        **KV,
    )


def _rows(ids: torch.Tensor, layer: int) -> torch.Tensor:
    return (ids.reshape(-1, 1, 1).float() * 8 + layer + torch.arange(8) / 16).half()


@pytest.mark.parametrize("ps", [1, 4])
@pytest.mark.parametrize("lazy", [False, True])
@pytest.mark.parametrize("build", [_swa, _tri], ids=["swa_pair", "tri_pool"])
def test_0523_stack_keeps_the_bytes_through_compaction(build, ps: int, lazy: bool) -> None:
    b = build(ps, lazy)
    a, kv = b.token_to_kv_pool_allocator, b.token_to_kv_pool
    ids = a.alloc(24 * ps)
    full, swa = a.translate_kv_loc(ids), a.translate_loc_from_full_to_swa(ids)
    assert swa.dtype == torch.int64  # 0.5.23's translate
    loc = bases.names["KVWriteLoc"](full, swa_loc=swa, full_loc=full)
    loc.physical = True  # 0.5.23's mark, which its write door demands (0.5.16's class lacks it)
    for layer in (0, 1):
        kv.set_kv_buffer(
            types.SimpleNamespace(layer_id=layer), loc, _rows(ids, layer), -_rows(ids, layer)
        )
    a.free_swa(ids[: 6 * ps])
    a.full_attn_allocator.free_segment(ids[8 * ps : 12 * ps], start_pos=0)  # SGLang's radix order
    a.free_swa_segment(ids[8 * ps : 12 * ps], start_pos=0)  # already released: skipped
    a.free(ids[12 * ps : 16 * ps])
    a.flush_opportunistic()
    live = torch.cat([ids[: 8 * ps], ids[16 * ps :]])
    windowed = live[6 * ps :]
    assert a.full_attn_allocator.allocated_count() == live.numel()
    assert a.swa_attn_allocator.allocated_count() == windowed.numel()
    got = kv.get_key_buffer(0)[a.translate_kv_loc(live)]
    assert torch.equal(got, _rows(live, 0))
    got = kv.get_value_buffer(1)[a.translate_loc_from_full_to_swa(windowed)]
    assert torch.equal(got, -_rows(windowed, 1))
    assert a.verify_byte_accounting() == []
    assert a.can_reserve(8 * ps, 8 * ps) and not a.can_reserve(10**6, 1)


def test_the_tri_pool_is_a_float_between_two_ends() -> None:
    b = _tri(1, True)
    pool, a, req = b.unified_memory_pool, b.token_to_kv_pool_allocator, b.req_to_token_pool
    assert [s.name for s in pool.sub_pool_specs] == ["mamba", "swa", "full"]
    assert pool.ukv_pool.spec("swa").grow == "middle"
    slots = req.mamba_allocator.alloc(3)
    phys = req.translate_mamba_indices(slots).long()
    conv = req.mamba_pool.mamba_cache.conv[0]
    conv[:, phys] = slots.reshape(1, -1, 1, 1).to(conv.dtype)
    ids = a.alloc(40)
    req.mamba_allocator.free(slots[:1])
    a.free(ids[:20])
    a.flush_opportunistic()
    phys = req.translate_mamba_indices(slots[1:]).long()
    conv = req.mamba_pool.mamba_cache.conv[0]
    assert torch.equal(
        conv[:, phys], slots[1:].reshape(1, -1, 1, 1).to(conv.dtype).expand_as(conv[:, phys])
    )
    assert a.mamba_slot_full_token_cost() == 3  # 176 state bytes over 32 + 32 per token
    kv_copy = a.get_cpu_copy(ids[20:24], mamba_indices=slots[1])
    a.load_cpu_copy(kv_copy, ids[20:24], mamba_indices=slots[1])


def test_what_ukv_refuses_is_refused_by_name() -> None:
    a = _swa(1, True).token_to_kv_pool_allocator
    for call in (
        lambda: a.set_disagg_move_gate(lambda: True),
        lambda: a.set_host_transfer_move_gate(lambda: True),
        lambda: a.set_full_to_swa_mapping(torch.tensor([1]), torch.tensor([5])),
        lambda: a.swa_attn_allocator.alloc_physical(1),
        lambda: a.resize(None),
        lambda: F.init_unified_swa_pools(page_size=1, **{**KV, "enable_memory_saver": True}),
        lambda: MHASubPoolSpec(
            name="full",
            layer_num=1,
            head_num=1,
            head_dim=8,
            store_dtype=torch.float16,
            grow_direction="down",
            draft_region=object(),
        ),
    ):
        with pytest.raises(SGLangNotImplementedError, match="docs/SGLANG.md"):
            call()
    a.set_full_to_swa_mapping(torch.tensor([], dtype=torch.int64), torch.tensor([]))  # empty: fine


def test_two_floats_are_refused_and_one_row_rule_checked() -> None:
    from ukv.integrations.sglang.v0523.pool import UnifiedKVPool

    def kv(name: str, grow: str, dim: int = 8) -> MHASubPoolSpec:
        return MHASubPoolSpec(
            name=name,
            layer_num=1,
            head_num=1,
            head_dim=dim,
            store_dtype=torch.float16,
            grow_direction=grow,
        )

    state = MambaSubPoolSpec(
        name="m",
        layer_num=1,
        conv_state_shapes=((3, 8),),
        conv_dtype=torch.bfloat16,
        temporal_state_shape=(0, 0, 0),
        temporal_dtype=torch.float32,
        grow_direction="up",
    )
    with pytest.raises(SGLangNotImplementedError, match="one middle band"):
        UnifiedKVPool(
            total_bytes=1 << 16,
            sub_pool_specs=[state, kv("a", "float"), kv("b", "float"), kv("c", "down")],
            device="cpu",
            enable_memory_saver=False,
        )
    with pytest.raises(SGLangConfigError, match="multiple of 16"):
        UnifiedKVPool(
            total_bytes=1 << 16,
            sub_pool_specs=[kv("a", "up", 4), kv("b", "down")],
            device="cpu",
            enable_memory_saver=False,
        )
    assert state.entry_bytes() == 48  # a conv-only state: no temporal bytes
