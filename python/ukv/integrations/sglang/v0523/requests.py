"""SGLang 0.5.23's ``UnifiedHybridReqToTokenPool``: the request table with the drop-in's
state pool (0.5.23's keywords: the lazy extra buffer, preallocated decode rows).

The 0.5.16 drop-in's request table (virtual state ids, ``translate_mamba_indices``) built
through SGLang 0.5.23's ``HybridReqToTokenPool`` (its ``alloc`` reads ``req.kv``), with
the 0.5.23 state pool. The Qwen4-Exp side states (short-conv, n-gram) are refused, as
SGLang refuses them with the unified pool.
"""

from __future__ import annotations

from typing import Any

import torch

from ukv.integrations.sglang import requests as v16
from ukv.integrations.sglang.errors import SGLangConfigError, SGLangNotImplementedError
from ukv.integrations.sglang.v0523.kvcache import UnifiedMambaPool

__all__ = ["UnifiedHybridReqToTokenPool"]


class UnifiedHybridReqToTokenPool(v16.UnifiedHybridReqToTokenPool):
    """SGLang 0.5.23's hybrid request table over the drop-in's state pool.

    Args:
        As SGLang 0.5.23 (``enable_mamba_extra_buffer_lazy``, ``pre_alloc_size``: rows for
        a decode node's preallocated requests; ``size`` stays the running-request cap).

    Raises:
        SGLangConfigError: Qwen4-Exp side states (``short_conv_layer_ids``,
            ``ngram_context_len``), as SGLang refuses them with the unified pool.
    """

    _mamba_pool_cls = UnifiedMambaPool

    def __init__(
        self,
        *,
        unified_buffer: Any,
        mamba_sub_pool_name: str,
        size: int,
        mamba_spec_state_size: int,
        max_context_len: int,
        device: str,
        enable_memory_saver: bool,
        cache_params: Any,
        mamba_layer_ids: list[int],
        enable_mamba_extra_buffer: bool,
        enable_mamba_extra_buffer_lazy: bool = False,
        speculative_num_draft_tokens: int | None = None,
        enable_overlap_schedule: bool = True,
        start_layer: int | None = None,
        pre_alloc_size: int = 0,
    ) -> None:
        super().__init__(
            unified_buffer=unified_buffer,
            mamba_sub_pool_name=mamba_sub_pool_name,
            size=size + pre_alloc_size,
            mamba_spec_state_size=mamba_spec_state_size,
            max_context_len=max_context_len,
            device=device,
            enable_memory_saver=enable_memory_saver,
            cache_params=cache_params,
            mamba_layer_ids=mamba_layer_ids,
            enable_mamba_extra_buffer=enable_mamba_extra_buffer,
            enable_mamba_extra_buffer_lazy=enable_mamba_extra_buffer_lazy,
            speculative_num_draft_tokens=speculative_num_draft_tokens,
            enable_overlap_schedule=enable_overlap_schedule,
            start_layer=start_layer,
        )
        self.size = size
        self.pre_alloc_size = pre_alloc_size

    def _init_mamba_pool(
        self,
        mamba_size: int,
        mamba_spec_state_size: int,
        cache_params: Any,
        mamba_layer_ids: list[int],
        device: str,
        enable_mamba_extra_buffer: bool,
        speculative_num_draft_tokens: int | None = None,
        short_conv_layer_ids: list[int] | None = None,
        ngram_context_len: int = 0,
        **_unused: Any,
    ) -> None:
        if short_conv_layer_ids or ngram_context_len:
            raise SGLangConfigError(
                "Qwen4-Exp side states (short_conv_layer_ids, ngram_context_len) are not "
                "supported with the unified memory pool (as SGLang 0.5.23 refuses them)"
            )
        if len(cache_params.layers) < len(mamba_layer_ids):
            raise SGLangConfigError(
                f"cache_params.layers ({len(cache_params.layers)}) cannot supply "
                f"{len(mamba_layer_ids)} mamba layer ids"
            )
        super()._init_mamba_pool(
            mamba_size=mamba_size,
            mamba_spec_state_size=mamba_spec_state_size,
            cache_params=cache_params,
            mamba_layer_ids=mamba_layer_ids,
            device=device,
            enable_mamba_extra_buffer=enable_mamba_extra_buffer,
            speculative_num_draft_tokens=speculative_num_draft_tokens,
        )
        self._disabled_side_states(device)

    def _disabled_side_states(self, device: str) -> None:
        """SGLang 0.5.23's (disabled) Qwen4-Exp side-state pools, which its request
        table reads unconditionally; nothing without SGLang."""
        try:
            from sglang.srt.mem_cache.ple_state_pool import (  # type: ignore[import-not-found]
                NGramPool,
                ShortConvPool,
            )
        except ImportError:
            return
        self.short_conv_pool = ShortConvPool(
            size=0, state_shape=None, layer_ids=[], dtype=torch.bfloat16, device=device
        )
        self.ngram_pool = NGramPool(size=0, context_len=0, eos_token_id=0, device=device)

    @property
    def mamba_v2p_table(self) -> torch.Tensor | None:
        """The state side's virtual -> physical slot table (a plain gather at page size 1)."""
        if self.mamba_allocator is None:
            return None
        return self.mamba_allocator.virtual_to_physical

    def clone_for_fused_draft(self, *, layer_lanes: dict[int, int]) -> Any:
        """Refused: fused draft state regions are not implemented.

        Raises:
            SGLangNotImplementedError: always.
        """
        raise SGLangNotImplementedError(
            "clone_for_fused_draft: fused speculative-draft state is not implemented by the "
            "ukv drop-in (docs/SGLANG.md, SGLang 0.5.23)"
        )
