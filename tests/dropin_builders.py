"""Builders the SGLang drop-in's tests share: specs, factory stacks with SGLang's keywords,
a bound allocator pair, and a forward event fired by hand.

Every stack lives on ``UKV_TEST_DEVICE`` (default ``cpu``; ``cuda`` on a GPU run).
"""

from __future__ import annotations

import os
import types
from typing import Any

import torch

from ukv.integrations.sglang import errors as E
from ukv.integrations.sglang.allocator import MultiEndedAllocator
from ukv.integrations.sglang.factories import init_unified_mamba_pools, init_unified_swa_pools
from ukv.integrations.sglang.pool import UnifiedKVPool
from ukv.integrations.sglang.specs import MambaSubPoolSpec, MHASubPoolSpec

H, D = 2, 4
#: The device of every pool (UKV_TEST_DEVICE=cuda on a GPU run).
DEV = os.environ.get("UKV_TEST_DEVICE", "cpu")


def settle(pool: UnifiedKVPool) -> None:
    """Apply frees still queued (frees of GPU ids land asynchronously; host ids at once)."""
    with E.translated():
        pool.ukv_pool.sync_frees()


def mha(name: str, grow: str, layers: int = 2) -> MHASubPoolSpec:
    return MHASubPoolSpec(
        name=name,
        layer_num=layers,
        head_num=H,
        head_dim=D,
        store_dtype=torch.float32,
        grow_direction=grow,
    )


def mamba(grow: str = "up") -> MambaSubPoolSpec:
    return MambaSubPoolSpec(
        name="mamba",
        layer_num=2,
        conv_state_shapes=((4, 3),),
        conv_dtype=torch.float32,
        temporal_state_shape=(2, 2, 2),
        temporal_dtype=torch.float32,
        grow_direction=grow,
    )


class Event:
    """A forward's completion event the test fires by hand."""

    def __init__(self) -> None:
        self.done = False

    def query(self) -> bool:
        return self.done


def cache_params(layers: list[int] | None = None) -> types.SimpleNamespace:
    """SGLang's ``mamba2_cache_params`` shape for the small test state."""
    return types.SimpleNamespace(
        shape=types.SimpleNamespace(conv=[(4, 3)], temporal=(2, 2, 2)),
        dtype=types.SimpleNamespace(conv=torch.float32, temporal=torch.float32),
        layers=layers if layers is not None else [0, 2],
    )


def mamba_bundle(page_size: int = 4, lazy: bool = True, **overrides: Any) -> Any:
    """``init_unified_mamba_pools`` with SGLang's keywords (mamba layers 0, 2; full 1, 3)."""
    kw: dict[str, Any] = dict(
        device=DEV,
        kv_cache_dtype=torch.bfloat16,
        head_num=H,
        head_dim=D,
        page_size=page_size,
        start_layer=0,
        end_layer=3,
        is_draft_worker=False,
        use_mla_backend=False,
        mamba_layer_ids=[0, 2],
        full_attention_layer_ids=[1, 3],
        mamba2_cache_params=cache_params(overrides.get("mamba_layer_ids")),
        model_context_len=64,
        extra_max_context_len=0,
        max_total_num_tokens=256,
        max_mamba_cache_size=8,
        max_num_reqs=8,
        enable_memory_saver=False,
        enable_mamba_extra_buffer=False,
        speculative_num_draft_tokens=None,
        disable_overlap_schedule=False,
        need_sort=False,
        mamba_full_memory_ratio=0.9,
        forward_stream=None,
        lazy_compaction=lazy,
    )
    kw.update(overrides)
    return init_unified_mamba_pools(**kw)


def swa_bundle(
    full_tokens: int = 64,
    swa_tokens: int = 64,
    page_size: int = 1,
    lazy: bool = False,
    swa_heads: int = H,
    **overrides: Any,
) -> Any:
    """``init_unified_swa_pools`` with SGLang's keywords (SWA layer 0, full layer 1)."""
    kw: dict[str, Any] = dict(
        device=DEV,
        kv_cache_dtype=torch.float16,
        head_num=H,
        head_dim=D,
        v_head_dim=D,
        swa_head_num=swa_heads,
        swa_head_dim=D,
        swa_v_head_dim=D,
        page_size=page_size,
        start_layer=0,
        end_layer=1,
        swa_attention_layer_ids=[0],
        full_attention_layer_ids=[1],
        full_max_total_num_tokens=full_tokens,
        swa_max_total_num_tokens=swa_tokens,
        enable_memory_saver=False,
        need_sort=False,
        lazy_compaction=lazy,
    )
    kw.update(overrides)
    return init_unified_swa_pools(**kw)


def full_swa_pool(page_size: int = 1, total_bytes: int = 1 << 14) -> UnifiedKVPool:
    """A bare drop-in pool of a full (grow-down) and an SWA (grow-up) sub-pool."""
    return UnifiedKVPool(
        total_bytes=total_bytes,
        sub_pool_specs=[mha("full", "down"), mha("swa", "up")],
        device=DEV,
        enable_memory_saver=False,
        page_size=page_size,
    )


def side(pool: UnifiedKVPool, name: str, *, owner: bool, **kw: Any) -> MultiEndedAllocator:
    """A bare allocator (no ``kvcache``) on sub-pool ``name`` of ``pool``; ``kw`` as
    ``MultiEndedAllocator``'s (``page_size``, ``lazy_compaction``...)."""
    return MultiEndedAllocator(
        kvcache=None, unified_buffer=pool, sub_pool_name=name, device=DEV, is_id_owner=owner, **kw
    )


def pair(
    lazy: bool, page_size: int = 2
) -> tuple[UnifiedKVPool, MultiEndedAllocator, MultiEndedAllocator]:
    """A bare drop-in pool with a full (owner) and an SWA (non-owner) allocator."""
    pool = full_swa_pool(page_size)
    full = side(pool, "full", owner=True, page_size=page_size, lazy_compaction=lazy)
    swa = side(pool, "swa", owner=False, page_size=page_size, lazy_compaction=lazy)
    return pool, full, swa
