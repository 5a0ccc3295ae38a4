"""SGLang 0.5.23's cache-side pools over the drop-in's buffer, in 0.5.23's token-major layout.

The 0.5.16 drop-in's pools with 0.5.23's contract: K/V views ``(num_slots, heads, dim)``
indexed by the physical token id (the views come from ``v0523.pool``), writes that take
SGLang's ``KVWriteLoc`` and store rows at physical token ids, relocations of whole page
envelopes (``move_physical_pages``), zeroed envelopes on hand-out
(``zero_physical_pages``), whole-entry state operations, and the SWA pair's 0.5.23
translate (int64, released pages to the sink). Every byte is where SGLang 0.5.23's own
pools put it.
"""

from __future__ import annotations

from typing import Any

import torch

from ukv.integrations.sglang import bases
from ukv.integrations.sglang import kvcache as v16
from ukv.integrations.sglang.errors import (
    SGLangArgumentError,
    SGLangNotImplementedError,
    SGLangUnmarkedWriteLocError,
    SGLangWriteLocError,
)

__all__ = [
    "UnifiedHybridLinearKVPool",
    "UnifiedMHATokenToKVPool",
    "UnifiedMLATokenToKVPool",
    "UnifiedMambaPool",
    "UnifiedSWAKVPool",
]

_MLABase: Any = bases.names["MLATokenToKVPool"]
_LinearBase: Any = bases.names["HybridLinearKVPool"]


def _unwrap(loc_info: Any) -> tuple[Any, Any, Any]:
    """``(loc, swa_loc, full_loc)`` of SGLang's ``KVWriteLoc``, or of a bare loc."""
    if isinstance(loc_info, torch.Tensor) or not hasattr(loc_info, "loc"):
        return loc_info, None, None
    return loc_info.loc, getattr(loc_info, "swa_loc", None), getattr(loc_info, "full_loc", None)


def _require_physical(loc_info: Any, where: str) -> None:
    """SGLang 0.5.23's write door (``KVCache._check_physical_write_loc``): a unified
    pool takes only a ``KVWriteLoc`` marked ``physical=True``. A bare tensor, or a loc
    unmarked, names ids nobody translated (virtual ones, as 0.5.16's callers passed):
    writing there would land in another token's bytes.

    Raises:
        SGLangUnmarkedWriteLocError: ``loc_info`` is not marked physical.
    """
    if getattr(loc_info, "physical", False) is not True:
        raise SGLangUnmarkedWriteLocError(
            f"{where}: write loc is not marked physical. Hand the pool "
            "KVWriteLoc.for_batch(forward_batch) for a batch bound to a plan "
            "(KVLocPlan.bind), or KVWriteLoc(loc, physical=True) for ids translated "
            "separately (SGLang 0.5.23's unified pools refuse it too)."
        )


def _rows(t: torch.Tensor, dtype: torch.dtype, scale: Any, store: torch.dtype) -> torch.Tensor:
    """Rows as the cache stores them: scaled and cast to the cache dtype, viewed as the
    store dtype (fp8 caches are ``uint8``)."""
    if t.dtype != dtype:
        if scale is not None and not (isinstance(scale, (int, float)) and scale == 1.0):
            t = t / scale
        t = t.to(dtype)
    return t.view(store) if store != dtype else t


class UnifiedMHATokenToKVPool(v16.UnifiedMHATokenToKVPool):
    """K/V of one MHA sub-pool, token-major, addressed by physical token ids.

    Args:
        unified_buffer: The 0.5.23 drop-in pool.
        sub_pool_name, page_size, start_layer, end_layer, enable_alt_stream: As SGLang.
    """

    requires_physical_write_loc = True
    post_capture_active = False
    post_capture_backed_bytes = 0

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        spec: Any = self._unified_buffer.mha_spec(self._sub_pool_name)
        self.dtype = spec.kv_cache_dtype
        self.kv_cache_layout = "page_major"
        self.model_layer_ids: tuple[int, ...] = ()

    @property
    def grow_direction(self) -> str:
        """The sub-pool's growth direction (``"up"``, ``"down"`` or ``"float"``)."""
        return str(self._unified_buffer.spec(self._sub_pool_name).grow_direction)

    @property
    def _pool23(self) -> Any:
        """The 0.5.23 drop-in pool (``v0523.pool.UnifiedKVPool``)."""
        return self._unified_buffer

    def _envelopes(self) -> torch.Tensor:
        return self._pool23.page_envelopes(self._sub_pool_name)

    def set_kv_buffer(
        self,
        layer: Any,
        loc: Any,
        cache_k: torch.Tensor,
        cache_v: torch.Tensor,
        k_scale: Any = None,
        v_scale: Any = None,
        layer_id_override: int | None = None,
        dcp_kv_mask: Any = None,
    ) -> None:
        """Store K/V rows at **physical** token ids: SGLang's ``KVWriteLoc`` marked
        ``physical=True`` (never translates), as SGLang 0.5.23's unified pools demand.
        ``layer_id_override`` is the pool's own layer index.

        Raises:
            SGLangArgumentError: ``dcp_kv_mask`` given (decode context parallelism).
            SGLangUnmarkedWriteLocError: ``loc`` is not a ``KVWriteLoc`` marked physical
                (a ``ValueError``, as SGLang's).
        """
        if dcp_kv_mask is not None:
            raise SGLangArgumentError("set_kv_buffer: decode context parallel is not supported")
        _require_physical(loc, "set_kv_buffer (MHA)")
        index = (
            layer_id_override
            if layer_id_override is not None
            else layer.layer_id - self.start_layer
        )
        self._store(index, _unwrap(loc)[0], cache_k, cache_v, k_scale, v_scale)

    def _store(
        self,
        index: int,
        loc: torch.Tensor,
        cache_k: torch.Tensor,
        cache_v: torch.Tensor,
        k_scale: Any,
        v_scale: Any,
    ) -> None:
        """Write rows of pool layer ``index`` at physical tokens ``loc`` (checked by the
        caller)."""
        idx = loc.to(torch.int64).reshape(-1)
        k, v = self.k_buffer[index], self.v_buffer[index]
        k[idx] = _rows(cache_k, self.dtype, k_scale, k.dtype).reshape(-1, *k.shape[1:])
        v[idx] = _rows(cache_v, self.dtype, v_scale, v.dtype).reshape(-1, *v.shape[1:])

    def move_physical_pages(
        self, tgt_pages: torch.Tensor, src_pages: torch.Tensor, page_size: int
    ) -> None:
        """Copy whole page envelopes ``src_pages`` -> ``tgt_pages`` (disjoint sets).

        Raises:
            SGLangArgumentError: ``page_size`` is not this pool's.
        """
        if page_size != self.page_size:
            raise SGLangArgumentError(
                f"page ids of {page_size}-slot pages passed to a pool of {self.page_size}-slot pages"
            )
        env = self._envelopes()
        env[tgt_pages.to(torch.int64)] = env[src_pages.to(torch.int64)].clone()

    def move_kv_cache(self, tgt_loc: torch.Tensor, src_loc: torch.Tensor) -> None:
        """Relocate whole page envelopes given as page-major runs of physical tokens."""
        if tgt_loc.numel() == 0:
            return
        ps = self.page_size
        self.move_physical_pages(
            tgt_loc.reshape(-1, ps)[:, 0] // ps, src_loc.reshape(-1, ps)[:, 0] // ps, ps
        )

    def zero_physical_pages(self, phys_pages: torch.Tensor) -> None:
        """Zero whole page envelopes (physical page ids)."""
        self._envelopes().index_fill_(0, phys_pages.to(torch.int64).reshape(-1), 0)

    def zero_pages_of_new_tokens(self, phys_tokens: torch.Tensor) -> None:
        """Zero the envelope of every page a token at a page start opens (a page an
        allocation handed out enters at its first slot); the others land on the sink
        page 0, which holds no data. No host synchronisation."""
        ps = self.page_size
        t = phys_tokens.to(torch.int64).reshape(-1)
        self.zero_physical_pages(torch.where(t % ps == 0, t // ps, torch.zeros_like(t)))

    def get_page_envelope_buffer(self) -> torch.Tensor:
        """This sub-pool's ``(num_pages, page_bytes)`` envelope view."""
        return self._envelopes()

    def get_contiguous_buf_infos(self) -> tuple[list[int], list[int], list[int]]:
        """The raw buffer as page envelopes: ``([ptr], [bytes], [page_bytes])``."""
        raw = self._unified_buffer._raw
        page_bytes = self.page_size * self._unified_buffer.spec(self._sub_pool_name).entry_bytes()
        return [raw.data_ptr()], [self._pool23.active_allocation_bytes], [page_bytes]

    def get_cpu_copy(self, indices: torch.Tensor, **_unused: Any) -> list[list[torch.Tensor]]:
        """Host copies ``[[k, v] per layer]`` of the rows at **physical** tokens."""
        idx = indices.to(torch.int64)
        return [[k[idx].cpu(), v[idx].cpu()] for k, v in zip(self.k_buffer, self.v_buffer)]

    def load_cpu_copy(
        self, kv_cache_cpu: list[list[torch.Tensor]], indices: torch.Tensor, **_unused: Any
    ) -> None:
        """Write :meth:`get_cpu_copy`'s rows back at **physical** tokens.

        Raises:
            SGLangArgumentError: another layer or row count.
        """
        self._check_cpu_copy(kv_cache_cpu, indices)
        idx = indices.to(torch.int64)
        for (kc, vc), k, v in zip(kv_cache_cpu, self.k_buffer, self.v_buffer):
            k[idx] = kc.to(k.device)
            v[idx] = vc.to(v.device)

    def set_kv_buffer_prefix_valid(self, *args: Any, **kwargs: Any) -> None:
        """Refused, as SGLang 0.5.23 refuses it under the unified layout."""
        raise SGLangNotImplementedError(
            "prefix-valid commit is unsupported under the unified layout"
        )


class UnifiedMLATokenToKVPool(_MLABase):
    """Refused: MLA K/V in the unified pool (SGLang 0.5.23's MLA + Mamba path).

    Raises:
        SGLangNotImplementedError: always.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise SGLangNotImplementedError(
            "UnifiedMLATokenToKVPool: MLA K/V in the unified pool is not served by the ukv "
            "drop-in yet (docs/SGLANG.md, SGLang 0.5.23)"
        )


class UnifiedMambaPool(v16.UnifiedMambaPool):
    """State views of one state sub-pool (per-slot entries), by **physical** slot ids.

    Args:
        As the 0.5.16 drop-in's ``UnifiedMambaPool``.
    """

    def __init__(self, *, mamba_layer_ids: list[int], **kwargs: Any) -> None:
        super().__init__(mamba_layer_ids=mamba_layer_ids, **kwargs)
        spec: Any = self._unified_buffer.mamba_spec(self._sub_pool_name)
        self.mamba_layer_ids = list(mamba_layer_ids)
        self.conv_slice_axis = spec.conv_slice_axis
        self.linear_replayssm_cache_len = 16
        self.replayssm_is_kda = False
        self.enable_linear_replayssm_spec = False
        self.replayssm_spec_fold = False
        self.replayssm_spec_write_pos = None
        self.replayssm_is_flush = None
        self.debug_memory_pool = False
        self.conv_shard_groups = None

    def _entry_view(self) -> torch.Tensor:
        pool: Any = self._unified_buffer
        return pool.page_envelopes(self._sub_pool_name)

    def clear_slots(self, indices: torch.Tensor) -> None:
        """Zero these **physical** slots' whole entries."""
        idx = indices.to(torch.int64).reshape(-1)
        self._entry_view()[idx[idx >= 0]] = 0

    def copy_from(self, src_index: torch.Tensor, dst_index: torch.Tensor) -> None:
        """Copy whole entries between **physical** slots."""
        entries = self._entry_view()
        entries[dst_index.to(torch.int64)] = entries[src_index.to(torch.int64)]

    def move_kv_cache(self, tgt_loc: torch.Tensor, src_loc: torch.Tensor) -> None:
        """Relocate whole entries (disjoint physical slots)."""
        if tgt_loc.numel():
            self.copy_from(src_loc, tgt_loc)

    def move_physical_pages(
        self, tgt_pages: torch.Tensor, src_pages: torch.Tensor, page_size: int
    ) -> None:
        """As :meth:`move_kv_cache`: a state page is one slot.

        Raises:
            SGLangArgumentError: ``page_size != 1``.
        """
        if page_size != 1:
            raise SGLangArgumentError(f"state pages are single slots, got page_size {page_size}")
        self.move_kv_cache(tgt_pages, src_pages)

    def get_contiguous_buf_infos(self) -> tuple[list[int], list[int], list[int]]:
        """The raw buffer as per-slot entries: ``([ptr], [bytes], [entry_bytes])``."""
        raw = self._unified_buffer._raw
        entry = self._unified_buffer.spec(self._sub_pool_name).entry_bytes()
        return [raw.data_ptr()], [raw.numel()], [entry]

    def get_state_dim_per_tensor(self) -> list[Any]:
        """Empty: the transfer item is the whole entry."""
        return []

    get_state_layer_ids = get_state_dim_per_tensor
    get_state_slice_outer_counts = get_state_dim_per_tensor
    get_state_conv_shard_groups = get_state_dim_per_tensor


class UnifiedSWAKVPool(v16.UnifiedSWAKVPool):
    """The full + SWA pair's K/V pools (0.5.23's keywords and write routing).

    A full layer writes at ``full_loc``, or at ``loc`` when none is given (0.5.23's
    rule); an SWA layer needs ``swa_loc``.
    """

    _kv_pool_cls = UnifiedMHATokenToKVPool

    def __init__(
        self,
        *,
        swa_attention_layer_ids: list[int],
        full_attention_layer_ids: list[int],
        **kwargs: Any,
    ) -> None:
        super().__init__(
            swa_attention_layer_ids=swa_attention_layer_ids,
            full_attention_layer_ids=full_attention_layer_ids,
            **kwargs,
        )
        full: Any = self.unified_buffer.mha_spec("full")
        self.dtype = full.kv_cache_dtype
        self.full_kv_pool.model_layer_ids = tuple(full_attention_layer_ids)
        self.swa_kv_pool.model_layer_ids = tuple(swa_attention_layer_ids)

    @property
    def post_capture_active(self) -> bool:
        """False: the whole buffer is backed at construction."""
        return False

    @property
    def post_capture_backed_bytes(self) -> int:
        """0 (no post-capture backing)."""
        return 0

    def set_kv_buffer(
        self,
        layer: Any,
        loc_info: Any,
        cache_k: torch.Tensor,
        cache_v: torch.Tensor,
        k_scale: Any = None,
        v_scale: Any = None,
    ) -> None:
        """Store a layer's K/V on its side (physical ids; never translates).

        Raises:
            SGLangWriteLocError: an SWA layer without ``swa_loc``.
            SGLangUnmarkedWriteLocError: ``loc_info`` is not a ``KVWriteLoc`` marked
                physical (a ``ValueError``, as SGLang's).
        """
        loc, swa_loc, full_loc = _unwrap(loc_info)
        index, is_swa = self.layers_mapping[layer.layer_id]
        if is_swa and swa_loc is None:
            raise SGLangWriteLocError(
                f"UnifiedSWAKVPool.set_kv_buffer: SWA layer {layer.layer_id} received no swa_loc"
            )
        _require_physical(loc_info, "set_kv_buffer (SWA)")  # after the swa_loc check, as SGLang
        pool = self.swa_kv_pool if is_swa else self.full_kv_pool
        target = swa_loc if is_swa else (full_loc if full_loc is not None else loc)
        pool._store(index, target, cache_k, cache_v, k_scale, v_scale)

    def translate_loc_from_full_to_swa(self, kv_indices: torch.Tensor) -> torch.Tensor:
        """Virtual token ids -> SWA physical token ids, int64; a released page gives 0
        (the sink), as SGLang 0.5.23's pool.

        Raises:
            SGLangArgumentError: called before ``attach_allocators``.
        """
        if self._swa_allocator is None:
            raise SGLangArgumentError(
                "UnifiedSWAKVPool.translate_loc_from_full_to_swa called before attach_allocators"
            )
        return self._swa_allocator.translate_kv_loc(kv_indices)

    def finalize_backing(self, config: Any) -> None:
        """Refused (see ``UnifiedKVPool.finalize_backing``)."""
        pool: Any = self.unified_buffer
        pool.finalize_backing(config)

    def get_cpu_copy(
        self, indices: torch.Tensor, mamba_indices: Any = None, **_unused: Any
    ) -> dict[str, Any]:
        """Host copies of these **virtual** tokens: ``{"full", "swa", "swa_mask"}`` (the
        SWA side of the tokens it still binds)."""
        full = self.full_kv_pool.get_cpu_copy(
            self._virt_tokens_to_phys_tokens(indices, self._full_allocator)
        )
        live = self._swa_live(indices)
        swa = None
        if bool(live.any()):
            phys = self._virt_tokens_to_phys_tokens(indices[live], self._swa_allocator)
            swa = self.swa_kv_pool.get_cpu_copy(phys)
        return {"full": full, "swa": swa, "swa_mask": live.cpu()}

    def load_cpu_copy(
        self,
        kv_cache_cpu: dict[str, Any],
        indices: torch.Tensor,
        mamba_indices: Any = None,
        **_unused: Any,
    ) -> None:
        """Write :meth:`get_cpu_copy`'s copies back at these **virtual** tokens (the SWA
        side where the copy had one; those tokens must be bound on SWA again)."""
        full = self._virt_tokens_to_phys_tokens(indices, self._full_allocator)
        self.full_kv_pool.load_cpu_copy(kv_cache_cpu["full"], full)
        if kv_cache_cpu.get("swa") is not None:
            mask = kv_cache_cpu["swa_mask"].to(indices.device)
            phys = self._virt_tokens_to_phys_tokens(indices[mask], self._swa_allocator)
            self.swa_kv_pool.load_cpu_copy(kv_cache_cpu["swa"], phys)


class UnifiedHybridLinearKVPool(_LinearBase):
    """SGLang's ``HybridLinearKVPool`` over the drop-in's full K/V and state pools."""

    def get_kv_layer_ids(self) -> list[int]:
        """Empty: the K/V of a token is one whole-envelope entry (SGLang's rule)."""
        return []
