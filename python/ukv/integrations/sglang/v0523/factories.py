"""SGLang 0.5.23's factories, keyword for keyword: ``init_unified_swa_pools``,
``init_unified_mamba_pools`` and the tri-pool ``init_unified_mamba_swa_pools``.

Sizing is SGLang 0.5.23's (the buffer is the sum of the sides' token or slot budgets, or
the ``total_bytes`` / ``unified_total_bytes`` given, with its one-request feasibility
floor), so a pool built here has SGLang's geometry byte for byte. Flags not served raise
:class:`~ukv.integrations.sglang.errors.SGLangNotImplementedError` naming the flag.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

from ukv.integrations.sglang.errors import SGLangConfigError, SGLangNotImplementedError
from ukv.integrations.sglang.factories import UnifiedPoolBundle, UnifiedSWAPoolBundle
from ukv.integrations.sglang.requests import UnifiedMambaSlotAllocator
from ukv.integrations.sglang.v0523.composites import (
    UnifiedMambaSWATokenToKVPoolAllocator,
    UnifiedMambaTokenToKVPoolAllocator,
    UnifiedSWATokenToKVPoolAllocator,
)
from ukv.integrations.sglang.v0523.kvcache import (
    UnifiedHybridLinearKVPool,
    UnifiedMHATokenToKVPool,
    UnifiedSWAKVPool,
)
from ukv.integrations.sglang.v0523.pool import UnifiedKVPool
from ukv.integrations.sglang.v0523.requests import UnifiedHybridReqToTokenPool
from ukv.integrations.sglang.v0523.specs import (
    MambaSubPoolSpec,
    MHASubPoolSpec,
    _reserved_floor_bytes,
    _store_dtype_for,
)

__all__ = ["init_unified_mamba_pools", "init_unified_mamba_swa_pools", "init_unified_swa_pools"]


def _refuse_flags(**flags: Any) -> None:
    for flag, value in flags.items():
        if value:
            raise SGLangNotImplementedError(
                f"{flag} = {value!r} is not implemented by the ukv drop-in (docs/SGLANG.md, "
                "SGLang 0.5.23)"
            )


def _need_layers(what: str, **layers: list[int]) -> None:
    for kind, ids in layers.items():
        if not ids:
            raise SGLangConfigError(f"{what} with zero {kind} layers is degenerate")


def _bs1_floor(total_bytes: int, terms: list[tuple[str, int]], factory: str) -> None:
    """SGLang's boot check: one worst-case request alone must fit the buffer.

    Raises:
        SGLangConfigError: it does not (SGLang raises ``RuntimeError``).
    """
    floor = sum(b for _, b in terms)
    if total_bytes < floor:
        detail = " + ".join(f"{n}={b}" for n, b in terms)
        raise SGLangConfigError(
            f"{factory}: byte budget {total_bytes} cannot fit ONE worst-case request "
            f"(bs=1 floor {floor} = {detail})"
        )


def _full_spec(a: Any) -> MHASubPoolSpec:
    """The full-attention spec (grow-down END) of a factory's keywords ``a``."""
    return MHASubPoolSpec(
        name="full", layer_num=len(a.full_attention_layer_ids), head_num=a.head_num,
        head_dim=a.head_dim, v_head_dim=a.v_head_dim,
        store_dtype=_store_dtype_for(a.kv_cache_dtype), kv_cache_dtype=a.kv_cache_dtype,
        grow_direction="down",
    )  # fmt: skip


def _kv_pair(a: Any, swa_grow: str) -> tuple[MHASubPoolSpec, MHASubPoolSpec]:
    """The full (grow-down END) and SWA specs of a factory's keywords ``a``."""
    dtype = a.kv_cache_dtype
    full = _full_spec(a)
    swa = MHASubPoolSpec(
        name="swa", layer_num=len(a.swa_attention_layer_ids), head_num=a.swa_head_num,
        head_dim=a.swa_head_dim, v_head_dim=a.swa_v_head_dim, store_dtype=_store_dtype_for(dtype),
        kv_cache_dtype=dtype, grow_direction=swa_grow,
    )  # fmt: skip
    return full, swa


def _state_spec(a: Any) -> MambaSubPoolSpec:
    """The state spec (grow-up END) of a factory's keywords ``a``."""
    cp = a.mamba2_cache_params
    return MambaSubPoolSpec(
        name="mamba", layer_num=len(a.mamba_layer_ids),
        conv_state_shapes=tuple(tuple(int(x) for x in s) for s in cp.shape.conv),
        conv_dtype=cp.dtype.conv, temporal_state_shape=tuple(int(x) for x in cp.shape.temporal),
        temporal_dtype=cp.dtype.temporal, conv_slice_axis=getattr(cp.shape, "conv_slice_axis", 0),
        grow_direction="up",
    )  # fmt: skip


def _pool(
    a: Any, specs: list[Any], total_bytes: int, floor: list[tuple[str, int]]
) -> UnifiedKVPool:
    return UnifiedKVPool(
        total_bytes=total_bytes, sub_pool_specs=specs, device=a.device, enable_memory_saver=False,
        page_size=a.page_size, bs1_floor_terms=floor,
    )  # fmt: skip


def _swa_token_pool(a: Any, pool: UnifiedKVPool) -> UnifiedSWAKVPool:
    return UnifiedSWAKVPool(
        unified_buffer=pool, swa_attention_layer_ids=a.swa_attention_layer_ids,
        full_attention_layer_ids=a.full_attention_layer_ids, page_size=a.page_size,
        start_layer=a.start_layer, end_layer=a.end_layer,
    )  # fmt: skip


def _request_table(a: Any, pool: UnifiedKVPool) -> UnifiedHybridReqToTokenPool:
    return UnifiedHybridReqToTokenPool(
        unified_buffer=pool, mamba_sub_pool_name="mamba", size=a.max_num_reqs,
        mamba_spec_state_size=a.max_num_reqs,
        max_context_len=a.model_context_len + a.extra_max_context_len, device=a.device,
        enable_memory_saver=False, cache_params=a.mamba2_cache_params,
        mamba_layer_ids=a.mamba_layer_ids, enable_mamba_extra_buffer=a.enable_mamba_extra_buffer,
        enable_mamba_extra_buffer_lazy=a.enable_mamba_extra_buffer_lazy,
        speculative_num_draft_tokens=getattr(a, "speculative_num_draft_tokens", None),
        enable_overlap_schedule=not a.disable_overlap_schedule, start_layer=a.start_layer,
        pre_alloc_size=a.decode_pre_alloc_size,
    )  # fmt: skip


def _allocator_kw(a: Any) -> dict[str, Any]:
    """The keywords every composite allocator takes from its factory's."""
    keys = ("device", "page_size", "need_sort", "forward_stream", "lazy_compaction")
    return {k: getattr(a, k) for k in keys}


def _window_tokens(a: Any) -> int:
    """SWA tokens one request holds at most: a window and a page (or its context)."""
    if a.sliding_window_size is None:
        return int(a.model_context_len)
    return min(a.model_context_len, a.sliding_window_size + a.page_size)


def _wire_slots(allocator: Any, req_pool: Any, device: str) -> UnifiedMambaSlotAllocator:
    """The request table's state-slot allocator over the state side, and the state
    pool's host capacities and transfer translate."""
    slots = UnifiedMambaSlotAllocator(
        allocator.mamba_allocator, req_pool._shared_mamba_size, device
    )
    req_pool.mamba_allocator = slots
    state = req_pool.mamba_pool
    state.host_transfer_translate = slots.translate
    state.host_capacity_tokens = req_pool._shared_mamba_size
    state.host_capacity_bytes = req_pool._shared_mamba_size * allocator.mamba_allocator.entry_bytes
    return slots


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
    full_max_total_num_tokens: int | None = None,
    swa_max_total_num_tokens: int | None = None,
    total_bytes: int | None = None,
    enable_memory_saver: bool,
    post_capture_active: bool = False,
    need_sort: bool,
    forward_stream: Any = None,
    lazy_compaction: bool = False,
    model_context_len: int | None = None,
    sliding_window_size: int | None = None,
    fused_draft: Any = None,
) -> UnifiedSWAPoolBundle:
    """The SWA-hybrid stack (SGLang 0.5.23's keywords and sizing).

    Raises:
        SGLangConfigError: no full or no SWA layers, no size given, or a buffer that
            cannot hold one request.
        SGLangNotImplementedError: ``enable_memory_saver``, ``post_capture_active`` or
            ``fused_draft``.
    """
    a = SimpleNamespace(**locals())
    _need_layers("SWA-hybrid", **{"full-attention": a.full_attention_layer_ids,
                                  "SWA": a.swa_attention_layer_ids})  # fmt: skip
    _refuse_flags(
        enable_memory_saver=enable_memory_saver,
        post_capture_active=post_capture_active,
        fused_draft=fused_draft,
    )
    full, swa = _kv_pair(a, "up")
    caps: dict[str, Any] = {}
    if total_bytes is None:
        if full_max_total_num_tokens is None or swa_max_total_num_tokens is None:
            raise SGLangConfigError(
                "total_bytes or both legacy full/SWA capacities must be provided"
            )
        total_bytes = full_max_total_num_tokens * full.entry_bytes()
        total_bytes += swa_max_total_num_tokens * swa.entry_bytes()
        caps = {
            "full_max_total_num_tokens": full_max_total_num_tokens,
            "swa_max_total_num_tokens": swa_max_total_num_tokens,
        }
    floor: list[tuple[str, int]] = []
    if model_context_len is not None:
        floor = [
            ("swa_window_kv", _window_tokens(a) * swa.entry_bytes()),
            ("sink", _reserved_floor_bytes([full, swa], page_size)),
        ]
        _bs1_floor(total_bytes, floor, "init_unified_swa_pools")
    pool = _pool(a, [full, swa], total_bytes, floor)
    token_pool = _swa_token_pool(a, pool)
    allocator = UnifiedSWATokenToKVPoolAllocator(
        unified_buffer=pool, kvcache=token_pool, **_allocator_kw(a), **caps
    )
    return UnifiedSWAPoolBundle(pool, token_pool, allocator)  # type: ignore[arg-type]


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
    v_head_dim: int | None = None,
    kv_lora_rank: int | None = None,
    qk_rope_head_dim: int | None = None,
    fused_draft: Any = None,
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
    enable_mamba_extra_buffer_lazy: bool = False,
    speculative_num_draft_tokens: int | None = None,
    disable_overlap_schedule: bool = False,
    need_sort: bool = False,
    mamba_full_memory_ratio: float | None = None,
    forward_stream: Any = None,
    lazy_compaction: bool = False,
    decode_pre_alloc_size: int = 0,
    unified_total_bytes: int | None = None,
) -> UnifiedPoolBundle:
    """The Mamba-hybrid stack (SGLang 0.5.23's keywords and sizing). With
    ``speculative_num_draft_tokens`` the state pool is SGLang's ``SpeculativeState``: the
    per-draft verify scratch beside the unified buffer, ``max_num_reqs + 1`` rows by batch
    position (as the 0.5.16 layout's, and SGLang 0.5.23's own ``UnifiedMambaPool``).

    Raises:
        SGLangConfigError: a buffer that cannot hold one request.
        SGLangNotImplementedError: ``use_mla_backend``, ``fused_draft`` or
            ``enable_memory_saver``.
    """
    a = SimpleNamespace(**locals())
    _refuse_flags(
        use_mla_backend=use_mla_backend,
        fused_draft=fused_draft,
        enable_memory_saver=enable_memory_saver,
    )
    full = _full_spec(a)
    state = _state_spec(a)
    tokens = max_total_num_tokens * full.entry_bytes()
    total = (tokens if unified_total_bytes is None else unified_total_bytes) + (
        max_mamba_cache_size * state.entry_bytes()
    )
    floor = [
        ("bs1_state_slots", 3 * state.entry_bytes()),
        ("sink", _reserved_floor_bytes([full, state], page_size)),
    ]
    _bs1_floor(total, floor, "init_unified_mamba_pools")
    pool = _pool(a, [full, state], total, [])
    req_pool = _request_table(a, pool)
    full_kv = UnifiedMHATokenToKVPool(
        unified_buffer=pool, sub_pool_name="full", page_size=page_size, start_layer=start_layer,
        end_layer=end_layer,
    )  # fmt: skip
    token_pool = UnifiedHybridLinearKVPool(
        page_size=page_size, size=max_total_num_tokens, dtype=kv_cache_dtype, head_num=head_num,
        head_dim=head_dim, device=device, mamba_pool=req_pool.mamba_pool, use_mla=False,
        full_attention_layer_ids=[0] if is_draft_worker else list(full_attention_layer_ids),
        enable_memory_saver=False, start_layer=start_layer, full_kv_pool=full_kv,
    )  # fmt: skip
    allocator = UnifiedMambaTokenToKVPoolAllocator(
        unified_buffer=pool, kvcache=token_pool, **_allocator_kw(a)
    )
    full_kv.host_capacity_tokens = max_total_num_tokens
    full_kv.host_capacity_bytes = max_total_num_tokens * full.entry_bytes()
    token_pool._mamba_translate = _wire_slots(allocator, req_pool, device).translate
    return UnifiedPoolBundle(pool, token_pool, allocator, req_pool)  # type: ignore[arg-type]


def init_unified_mamba_swa_pools(
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
    mamba_layer_ids: list[int],
    mamba2_cache_params: Any,
    full_max_total_num_tokens: int,
    swa_max_total_num_tokens: int,
    max_mamba_cache_size: int,
    model_context_len: int,
    extra_max_context_len: int,
    max_num_reqs: int,
    enable_memory_saver: bool,
    enable_mamba_extra_buffer: bool,
    enable_mamba_extra_buffer_lazy: bool,
    disable_overlap_schedule: bool,
    need_sort: bool,
    speculative_num_draft_tokens: int | None = None,
    forward_stream: Any = None,
    lazy_compaction: bool = False,
    unified_total_bytes: int | None = None,
    sliding_window_size: int | None = None,
    decode_pre_alloc_size: int = 0,
    fused_draft: Any = None,
) -> UnifiedPoolBundle:
    """The tri-pool stack: state (grow-up END), SWA (float middle: ukv's middle band),
    full (grow-down END), SGLang 0.5.23's keywords and sizing. ``speculative_num_draft_
    tokens`` and the extra buffer go to the request table as in
    :func:`init_unified_mamba_pools` (the state pool is then SGLang's
    ``SpeculativeState``, the per-draft verify scratch beside the unified buffer).

    Raises:
        SGLangConfigError: no full, SWA or state layers, or a buffer that cannot hold
            one request.
        SGLangNotImplementedError: ``enable_memory_saver`` or ``fused_draft``.
    """
    a = SimpleNamespace(**locals())
    _need_layers("tri-pool", **{"full-attention": full_attention_layer_ids,
                                "SWA-attention": swa_attention_layer_ids,
                                "state": mamba_layer_ids})  # fmt: skip
    _refuse_flags(enable_memory_saver=enable_memory_saver, fused_draft=fused_draft)
    full, swa = _kv_pair(a, "float")
    state = _state_spec(a)
    if unified_total_bytes is None:
        unified_total_bytes = full_max_total_num_tokens * full.entry_bytes()
        unified_total_bytes += swa_max_total_num_tokens * swa.entry_bytes()
    total = unified_total_bytes + max_mamba_cache_size * state.entry_bytes()
    floor = [
        ("swa_window_kv", _window_tokens(a) * swa.entry_bytes()),
        ("bs1_state_slots", 3 * state.entry_bytes()),
        ("sink", _reserved_floor_bytes([full, swa, state], page_size)),
    ]
    _bs1_floor(total, floor, "init_unified_mamba_swa_pools")
    pool = _pool(a, [full, swa, state], total, [])
    token_pool = _swa_token_pool(a, pool)
    req_pool = _request_table(a, pool)
    allocator = UnifiedMambaSWATokenToKVPoolAllocator(
        unified_buffer=pool,
        kvcache=token_pool,
        mamba_kvcache=req_pool.mamba_pool,
        full_max_total_num_tokens=full_max_total_num_tokens,
        swa_max_total_num_tokens=swa_max_total_num_tokens,
        **_allocator_kw(a),
    )
    _wire_slots(allocator, req_pool, device)
    return UnifiedPoolBundle(pool, token_pool, allocator, req_pool)  # type: ignore[arg-type]
