"""``init_unified_mamba_pools`` / ``init_unified_swa_pools``: SGLang's factories, keyword
for keyword, building the drop-in's stack.

Sizing follows SGLang (``tokens * full entry + states (or SWA tokens) * their entry``);
"full" grows down and the state / SWA side up. Flags not implemented yet raise
:class:`~ukv.integrations.sglang.errors.SGLangNotImplementedError` naming the flag.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from ukv.integrations.sglang import bases
from ukv.integrations.sglang.composites import (
    UnifiedMambaTokenToKVPoolAllocator,
    UnifiedSWATokenToKVPoolAllocator,
)
from ukv.integrations.sglang.errors import SGLangConfigError
from ukv.integrations.sglang.kvcache import UnifiedMHATokenToKVPool, UnifiedSWAKVPool
from ukv.integrations.sglang.pool import UnifiedKVPool
from ukv.integrations.sglang.requests import UnifiedHybridReqToTokenPool, UnifiedMambaSlotAllocator
from ukv.integrations.sglang.specs import MambaSubPoolSpec, MHASubPoolSpec
from ukv.specs import FP8_DTYPES, reserved_floor

__all__ = [
    "UnifiedPoolBundle",
    "UnifiedSWAPoolBundle",
    "init_unified_mamba_pools",
    "init_unified_swa_pools",
]


class UnifiedPoolBundle(NamedTuple):
    """What ``init_unified_mamba_pools`` builds."""

    unified_memory_pool: UnifiedKVPool
    token_to_kv_pool: Any
    token_to_kv_pool_allocator: UnifiedMambaTokenToKVPoolAllocator
    req_to_token_pool: UnifiedHybridReqToTokenPool


class UnifiedSWAPoolBundle(NamedTuple):
    """What ``init_unified_swa_pools`` builds."""

    unified_memory_pool: UnifiedKVPool
    token_to_kv_pool: UnifiedSWAKVPool
    token_to_kv_pool_allocator: UnifiedSWATokenToKVPoolAllocator


def _store_dtype_for(kv_cache_dtype: torch.dtype) -> torch.dtype:
    """SGLang's rule: fp8 caches are stored as ``uint8`` (the spec keeps the flavour)."""
    return torch.uint8 if kv_cache_dtype in FP8_DTYPES else kv_cache_dtype


def _pool_holding(
    sides: list[tuple[MHASubPoolSpec | MambaSubPoolSpec, int]],
    device: str,
    page_size: int,
    enable_memory_saver: bool,
) -> UnifiedKVPool:
    """A drop-in pool whose buffer holds every side's static budget at once, as SGLang
    sizes it (``tokens * entry`` per side), **plus** ukv's reserved floor and one page of
    each side. SGLang's scheduler budgets per side against those static caps (admission,
    eviction, the idle leak check); with the floor and the page rounding of each side's
    end added, two per-side checks that pass imply a joint allocation that fits.
    """
    specs = [s.to_ukv() for s, _ in sides]
    budget = sum(spec.entry_bytes() * int(n) for spec, n in sides)
    slack = sum(spec.page_bytes(page_size) for spec in specs)  # a state page is one slot
    return UnifiedKVPool(
        total_bytes=budget + reserved_floor(specs, page_size) + slack,
        sub_pool_specs=[s for s, _ in sides],
        device=device,
        enable_memory_saver=enable_memory_saver,
        page_size=page_size,
    )


def init_unified_mamba_pools(
    *,
    device: str,
    kv_cache_dtype: torch.dtype,
    head_num: int,
    head_dim: int,
    page_size: int,
    start_layer: int,
    end_layer: int,
    is_draft_worker: bool,
    use_mla_backend: bool,
    mamba_layer_ids: list[int],
    full_attention_layer_ids: list[int],
    mamba2_cache_params: Any,
    model_context_len: int,
    extra_max_context_len: int,
    max_total_num_tokens: int,
    max_mamba_cache_size: int,
    max_num_reqs: int,
    enable_memory_saver: bool,
    enable_mamba_extra_buffer: bool,
    speculative_num_draft_tokens: int | None,
    disable_overlap_schedule: bool,
    need_sort: bool,
    mamba_full_memory_ratio: float | None = None,
    forward_stream: Any = None,
    lazy_compaction: bool = False,
) -> UnifiedPoolBundle:
    """The Mamba-hybrid stack (SGLang's keywords).

    With ``speculative_num_draft_tokens``, the state pool carries SGLang's per-draft
    verify scratch (``SpeculativeState``), ``max_num_reqs + 1`` rows.

    Raises:
        SGLangConfigError: ``use_mla_backend`` or a bad page size / sizes.
        SGLangNotImplementedError: ``enable_memory_saver`` without SGLang's adapter.
    """
    if use_mla_backend:
        raise SGLangConfigError(
            "use_mla_backend = True: the unified pool has no MLA-hybrid-Mamba yet"
        )
    del mamba_full_memory_ratio, end_layer  # the ratio sizes SGLang's budget only
    full_spec = MHASubPoolSpec(
        name="full",
        layer_num=len(full_attention_layer_ids),
        head_num=head_num,
        head_dim=head_dim,
        store_dtype=_store_dtype_for(kv_cache_dtype),
        kv_dtype=kv_cache_dtype,
        grow_direction="down",
    )
    cp = mamba2_cache_params
    mamba_spec = MambaSubPoolSpec(
        name="mamba",
        layer_num=len(mamba_layer_ids),
        conv_state_shapes=tuple(tuple(int(x) for x in s) for s in cp.shape.conv),
        conv_dtype=cp.dtype.conv,
        temporal_state_shape=tuple(int(x) for x in cp.shape.temporal),
        temporal_dtype=cp.dtype.temporal,
        grow_direction="up",
    )
    pool = _pool_holding(
        [(full_spec, max_total_num_tokens), (mamba_spec, max_mamba_cache_size)],
        device,
        page_size,
        enable_memory_saver,
    )
    req_pool = UnifiedHybridReqToTokenPool(
        unified_buffer=pool,
        mamba_sub_pool_name="mamba",
        size=max_num_reqs,
        mamba_spec_state_size=max_num_reqs,
        max_context_len=model_context_len + extra_max_context_len,
        device=device,
        enable_memory_saver=enable_memory_saver,
        cache_params=mamba2_cache_params,
        mamba_layer_ids=mamba_layer_ids,
        enable_mamba_extra_buffer=enable_mamba_extra_buffer,
        speculative_num_draft_tokens=speculative_num_draft_tokens,
        enable_overlap_schedule=not disable_overlap_schedule,
        start_layer=start_layer,
    )
    full_kv = UnifiedMHATokenToKVPool(
        unified_buffer=pool, sub_pool_name="full", page_size=page_size, start_layer=start_layer
    )
    token_pool = bases.names["HybridLinearKVPool"](
        page_size=page_size,
        size=max_total_num_tokens,
        dtype=kv_cache_dtype,
        head_num=head_num,
        head_dim=head_dim,
        full_attention_layer_ids=[0] if is_draft_worker else list(full_attention_layer_ids),
        device=device,
        mamba_pool=req_pool.mamba_pool,
        enable_memory_saver=enable_memory_saver,
        use_mla=False,
        start_layer=start_layer,
        full_kv_pool=full_kv,
    )
    allocator = UnifiedMambaTokenToKVPoolAllocator(
        unified_buffer=pool,
        kvcache=token_pool,
        device=device,
        page_size=page_size,
        need_sort=need_sort,
        forward_stream=forward_stream,
        lazy_compaction=lazy_compaction,
    )
    slots = UnifiedMambaSlotAllocator(
        allocator.mamba_allocator, max_size=req_pool._shared_mamba_size, device=device
    )
    req_pool.mamba_allocator = slots
    token_pool._mamba_translate = slots.translate
    return UnifiedPoolBundle(pool, token_pool, allocator, req_pool)


def init_unified_swa_pools(
    *,
    device: str,
    kv_cache_dtype: torch.dtype,
    head_num: int,
    head_dim: int,
    v_head_dim: int,
    swa_head_num: int,
    swa_head_dim: int,
    swa_v_head_dim: int,
    page_size: int,
    start_layer: int,
    end_layer: int,
    swa_attention_layer_ids: list[int],
    full_attention_layer_ids: list[int],
    full_max_total_num_tokens: int,
    swa_max_total_num_tokens: int,
    enable_memory_saver: bool,
    need_sort: bool,
    forward_stream: Any = None,
    lazy_compaction: bool = False,
) -> UnifiedSWAPoolBundle:
    """The SWA-hybrid stack (SGLang's keywords).

    Raises:
        SGLangConfigError: no full or no SWA layers, or bad sizes.
        SGLangNotImplementedError: ``enable_memory_saver`` without SGLang's adapter.
    """
    if not full_attention_layer_ids or not swa_attention_layer_ids:
        raise SGLangConfigError(
            f"SWA hybrid needs both kinds of layers; got {len(full_attention_layer_ids)} full "
            f"and {len(swa_attention_layer_ids)} SWA"
        )
    store = _store_dtype_for(kv_cache_dtype)
    full_spec = MHASubPoolSpec(
        name="full",
        layer_num=len(full_attention_layer_ids),
        head_num=head_num,
        head_dim=head_dim,
        v_head_dim=v_head_dim,
        store_dtype=store,
        kv_dtype=kv_cache_dtype,
        grow_direction="down",
    )
    swa_spec = MHASubPoolSpec(
        name="swa",
        layer_num=len(swa_attention_layer_ids),
        head_num=swa_head_num,
        head_dim=swa_head_dim,
        v_head_dim=swa_v_head_dim,
        store_dtype=store,
        kv_dtype=kv_cache_dtype,
        grow_direction="up",
    )
    pool = _pool_holding(
        [(full_spec, full_max_total_num_tokens), (swa_spec, swa_max_total_num_tokens)],
        device,
        page_size,
        enable_memory_saver,
    )
    token_pool = UnifiedSWAKVPool(
        unified_buffer=pool,
        swa_attention_layer_ids=swa_attention_layer_ids,
        full_attention_layer_ids=full_attention_layer_ids,
        page_size=page_size,
        start_layer=start_layer,
        end_layer=end_layer,
    )
    allocator = UnifiedSWATokenToKVPoolAllocator(
        unified_buffer=pool,
        kvcache=token_pool,
        device=device,
        full_max_total_num_tokens=full_max_total_num_tokens,
        swa_max_total_num_tokens=swa_max_total_num_tokens,
        page_size=page_size,
        need_sort=need_sort,
        forward_stream=forward_stream,
        lazy_compaction=lazy_compaction,
    )
    return UnifiedSWAPoolBundle(pool, token_pool, allocator)
