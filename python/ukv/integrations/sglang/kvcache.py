"""The cache-side pools: K/V and state views over the drop-in's one buffer.

``UnifiedMHATokenToKVPool`` (one MHA sub-pool's K/V), ``UnifiedMambaPool`` (one state
sub-pool) and ``UnifiedSWAKVPool`` (the full + SWA pair) take **physical** ids, as
SGLang's do: the attention backends translate once per forward. Their views are read from
ukv's pool when first used, so a pool built before its allocators fix the page size still
hands out the right views. Writes go through ukv's ``set_kv`` (its store kernel, fp8
scaling and checks).
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from ukv.integrations.sglang import bases
from ukv.integrations.sglang.errors import SGLangArgumentError, SGLangWriteLocError, translated
from ukv.integrations.sglang.pool import UnifiedKVPool

__all__ = ["UnifiedMHATokenToKVPool", "UnifiedMambaPool", "UnifiedSWAKVPool"]

_MHABase: Any = bases.names["MHATokenToKVPool"]
_MambaBase: Any = bases.names["MambaPool"]
_SWABase: Any = bases.names["SWAKVPool"]


def _split_tokens(loc: torch.Tensor, page_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    loc = loc.to(torch.int64)
    return loc // page_size, loc % page_size


class UnifiedMHATokenToKVPool(_MHABase):
    """K/V of one MHA sub-pool of the drop-in pool, addressed by physical token ids.

    Args:
        unified_buffer: The drop-in pool.
        sub_pool_name: An MHA sub-pool.
        page_size: Accepted for SGLang's signature: the pool's page size (fixed by its
            allocators) governs, so a KV pool built before allocators with another page
            size still addresses the right bytes (its views are read when used).
        start_layer: First model layer of this pool (``layer.layer_id - start_layer`` is
            the pool's layer index).
        end_layer: Last model layer (informational).
        enable_alt_stream: Accepted.
    """

    def __init__(
        self,
        *,
        unified_buffer: UnifiedKVPool,
        sub_pool_name: str,
        page_size: int = 1,
        start_layer: int | None = None,
        end_layer: int | None = None,
        enable_alt_stream: bool = True,
    ) -> None:
        spec = unified_buffer.mha_spec(sub_pool_name)
        self._unified_buffer = unified_buffer
        self._sub_pool_name = sub_pool_name
        self.dtype = spec.store_dtype
        self.store_dtype = spec.store_dtype
        self.head_num = spec.head_num
        self.head_dim = spec.head_dim
        self.v_head_dim = spec.v_head_dim if spec.v_head_dim is not None else spec.head_dim
        self.layer_num = spec.layer_num
        self.device = unified_buffer.device
        self.start_layer = start_layer or 0
        self.end_layer = (
            end_layer if end_layer is not None else self.start_layer + self.layer_num - 1
        )
        self.layer_transfer_counter = None
        self.enable_custom_mem_pool = False
        self.custom_mem_pool = None
        self.quant_method = None  # ukv stores fp8 as bits; no SGLang quant method
        self.mem_usage = 0.0

    @property
    def page_size(self) -> int:
        """Tokens per page: the drop-in pool's KV page size."""
        return self._unified_buffer.page_size

    @property
    def _page_size(self) -> int:
        return self._unified_buffer.page_size

    @property
    def size(self) -> int:
        """Token slots of this sub-pool (its index space minus the padding slot)."""
        return self._unified_buffer.max_slots(self._sub_pool_name) - 1

    def is_quantized_kv_cache(self) -> bool:
        """False: no SGLang KV quantization method (an fp8 cache is stored as bits)."""
        return False

    def _clear_buffers(self) -> None:
        """Nothing to free: the drop-in pool owns the buffer."""

    # ----- views ---------------------------------------------------------------------------------

    @property
    def data_ptrs(self) -> torch.Tensor:
        """Data pointers of every K then V layer view (uint64), for external inspectors."""
        views = self.k_buffer + self.v_buffer
        return torch.tensor([v.data_ptr() for v in views], dtype=torch.uint64)

    @property
    def data_strides(self) -> torch.Tensor:
        """Bytes per page of every K then V layer view."""
        views = self.k_buffer + self.v_buffer
        return torch.tensor([v.stride(0) * v.element_size() for v in views])

    def get_v_head_dim(self) -> int:
        """The V head dim."""
        return self.v_head_dim

    @property
    def k_buffer(self) -> list[torch.Tensor]:
        """Per-layer K views ``[num_pages, page_size, head_num, head_dim]``."""
        return self._unified_buffer.mha_views_for(self._sub_pool_name)[0]

    @property
    def v_buffer(self) -> list[torch.Tensor]:
        """Per-layer V views ``[num_pages, page_size, head_num, v_head_dim]``."""
        return self._unified_buffer.mha_views_for(self._sub_pool_name)[1]

    def _wait_for_layer(self, index: int) -> None:
        if self.layer_transfer_counter is not None:
            self.layer_transfer_counter.wait_until(index)

    def get_key_buffer(self, index: int) -> torch.Tensor:
        """K view of this pool's layer ``index`` (pool-local: the hybrid pools that own
        this one, SGLang's ``HybridLinearKVPool`` and ``UnifiedSWAKVPool``, map the
        model's layer id to it first, on reads and writes alike)."""
        self._wait_for_layer(index)
        return self.k_buffer[index]

    def get_value_buffer(self, index: int) -> torch.Tensor:
        """V view of this pool's layer ``index`` (pool-local, as :meth:`get_key_buffer`)."""
        self._wait_for_layer(index)
        return self.v_buffer[index]

    def get_kv_buffer(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(K, V) views of this pool's layer ``index`` (pool-local)."""
        return self.get_key_buffer(index), self.get_value_buffer(index)

    def get_kv_size_bytes(self) -> tuple[int, int]:
        """(0, 0): the drop-in pool accounts for the whole buffer once."""
        return 0, 0

    def get_contiguous_buf_infos(self) -> tuple[list[int], list[int], list[int]]:
        """(data pointers, byte lengths, bytes per page) of every K then V layer view."""
        views = self.k_buffer + self.v_buffer
        ptrs = [v.data_ptr() for v in views]
        lens = [v.shape[0] * v.stride(0) * v.element_size() for v in views]
        items = [v.stride(0) * v.element_size() for v in views]
        return ptrs, lens, items

    # ----- bytes ---------------------------------------------------------------------------------

    def set_kv_buffer(
        self,
        layer: Any,
        loc: torch.Tensor,
        cache_k: torch.Tensor,
        cache_v: torch.Tensor,
        k_scale: Any = None,
        v_scale: Any = None,
        layer_id_override: int | None = None,
        dcp_kv_mask: Any = None,
    ) -> None:
        """Store K/V rows at **physical** token ids ``loc`` (never translates).

        ``layer_id_override`` is the pool's own layer index, as the hybrid pools pass it
        (the index :meth:`get_key_buffer` reads); without it, ``layer.layer_id -
        start_layer`` (a pool used on its own, addressed by model layer ids).

        Raises:
            SGLangArgumentError: ``dcp_kv_mask`` given (decode context parallel is not
                supported), or bad shapes, dtypes or layer.
        """
        if dcp_kv_mask is not None:
            raise SGLangArgumentError(
                "set_kv_buffer: decode context parallel (dcp_kv_mask) is not supported "
                "by the unified memory pool"
            )
        index = (
            layer_id_override
            if layer_id_override is not None
            else layer.layer_id - self.start_layer
        )
        fp8 = self.store_dtype == torch.uint8
        with translated():
            self._unified_buffer.ukv_pool.set_kv(
                self._sub_pool_name,
                index,
                loc,
                cache_k,
                cache_v,
                k_scale=k_scale if fp8 else None,
                v_scale=v_scale if fp8 else None,
            )

    def move_kv_cache(self, tgt_loc: torch.Tensor, src_loc: torch.Tensor) -> None:
        """Copy every layer's K/V rows from physical tokens ``src_loc`` to ``tgt_loc``.

        The drop-in's allocators never call this on their own pool (ukv has moved those
        bytes already); it is here for SGLang code that copies tokens itself.
        """
        if tgt_loc.numel() == 0:
            return
        tp, to = _split_tokens(tgt_loc, self._page_size)
        sp, so = _split_tokens(src_loc, self._page_size)
        for view in self.k_buffer + self.v_buffer:
            view[tp, to] = view[sp, so]

    def get_cpu_copy(self, indices: torch.Tensor) -> list[list[torch.Tensor]]:
        """Host copies ``[[k, v] per layer]`` of the rows at **physical** tokens ``indices``."""
        p, o = _split_tokens(indices, self._page_size)
        return [[k[p, o].cpu(), v[p, o].cpu()] for k, v in zip(self.k_buffer, self.v_buffer)]

    def load_cpu_copy(self, kv_cache_cpu: list[list[torch.Tensor]], indices: torch.Tensor) -> None:
        """Write :meth:`get_cpu_copy`'s rows back at **physical** tokens ``indices``.

        Raises:
            SGLangArgumentError: the copy has another layer count or row count.
        """
        self._check_cpu_copy(kv_cache_cpu, indices)
        p, o = _split_tokens(indices, self._page_size)
        for (kc, vc), k, v in zip(kv_cache_cpu, self.k_buffer, self.v_buffer):
            k[p, o] = kc.to(k.device)
            v[p, o] = vc.to(v.device)

    def _check_cpu_copy(
        self, kv_cache_cpu: list[list[torch.Tensor]], indices: torch.Tensor
    ) -> None:
        """Raise ``SGLangArgumentError`` unless the copy has this pool's layer count and a
        row for each of ``indices`` (nothing written yet)."""
        if len(kv_cache_cpu) != self.layer_num or any(
            kc.shape[0] != indices.numel() for kc, _ in kv_cache_cpu
        ):
            raise SGLangArgumentError(
                f"load_cpu_copy: copy of {len(kv_cache_cpu)} layers does not match "
                f"{self.layer_num} layers x {indices.numel()} tokens"
            )


def _draft_scratch(
    spec: Any, rows: int, draft_tokens: int, device: Any
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Speculative verification's per-draft scratch, ``rows + 1`` rows by batch position
    (SGLang's verify kernels index it with ``arange(batch)``): the temporal state and each
    conv state once per draft token.

    Raises:
        SGLangConfigError: ``draft_tokens`` or ``rows`` not positive.
    """
    from ukv.integrations.sglang.errors import SGLangConfigError

    if isinstance(draft_tokens, bool) or not isinstance(draft_tokens, int) or draft_tokens < 1:
        raise SGLangConfigError(f"speculative_num_draft_tokens = {draft_tokens!r}: must be >= 1")
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
        raise SGLangConfigError(f"spec_state_size = {rows!r}: must be >= 1")
    lead = (spec.layer_num, rows + 1, draft_tokens)
    ssm = torch.zeros((*lead, *spec.temporal_state_shape), dtype=spec.temporal_dtype, device=device)
    windows = [
        torch.zeros((*lead, *shape), dtype=spec.conv_dtype, device=device)
        for shape in spec.conv_state_shapes
    ]
    return ssm, windows


class UnifiedMambaPool(_MambaBase):
    """State views of one state sub-pool, addressed by **physical** slot ids.

    Args:
        unified_buffer: The drop-in pool.
        sub_pool_name: A state sub-pool.
        spec_state_size: Rows of the speculative scratch, less one (SGLang passes its
            request-table size: the verify kernels index the scratch by batch row).
        mamba_layer_ids: Model layer ids of the state layers, in order.
        enable_memory_saver: Accepted: the pool's memory saver (the unified buffer's
            region) covers the speculative scratch too.
        speculative_num_draft_tokens: Draft tokens per verify step; with it, the state
            is SGLang's ``SpeculativeState``: the per-draft scratch
            (``intermediate_ssm``, ``intermediate_conv_window``) is a buffer of its own
            beside the unified one, rows by batch position, as SGLang's pools keep it.
    """

    def __init__(
        self,
        *,
        unified_buffer: UnifiedKVPool,
        sub_pool_name: str,
        spec_state_size: int,
        mamba_layer_ids: list[int],
        enable_memory_saver: bool = False,
        speculative_num_draft_tokens: int | None = None,
    ) -> None:
        from ukv.integrations.sglang.errors import SGLangConfigError

        spec = unified_buffer.mamba_spec(sub_pool_name)
        if spec.layer_num != len(mamba_layer_ids):
            raise SGLangConfigError(
                f"mamba_layer_ids has {len(mamba_layer_ids)} layers, spec "
                f"{sub_pool_name!r} has {spec.layer_num}"
            )
        self._unified_buffer = unified_buffer
        self._sub_pool_name = sub_pool_name
        self._max_size = unified_buffer.max_slots(sub_pool_name) - 1
        self.size = self._max_size
        self.device = unified_buffer.device
        self.num_mamba_layers = spec.layer_num
        self.mamba_map = {lid: i for i, lid in enumerate(mamba_layer_ids)}
        self.enable_custom_mem_pool = False
        self.custom_mem_pool = None
        self.enable_linear_replayssm = False
        self.replayssm_write_pos = None
        self.replayssm_cache_base = None
        self.mem_usage = unified_buffer.total_bytes / (1 << 30)
        self._scratch = None
        if speculative_num_draft_tokens is not None:
            region = unified_buffer.allocation_context()  # the memory saver's, if on
            with region() if region is not None else contextlib.nullcontext():
                self._scratch = _draft_scratch(
                    spec, spec_state_size, speculative_num_draft_tokens, self.device
                )

    @property
    def mamba_cache(self) -> Any:
        """``State(conv=[...], temporal=...)`` over the buffer: ``conv[i]`` of shape
        ``[layers, slots, *conv_i]``, ``temporal`` ``[layers, slots, *temporal]``."""
        conv, temporal = self._unified_buffer.mamba_views_for(self._sub_pool_name)
        if self._scratch is None:
            return self.State(conv=list(conv), temporal=temporal)
        ssm, windows = self._scratch
        return self.SpeculativeState(
            conv=list(conv),
            temporal=temporal,
            intermediate_ssm=ssm,
            intermediate_conv_window=windows,
        )

    def mamba2_layer_cache(self, index: int) -> Any:
        """The state views of this pool's layer ``index`` (pool-local: SGLang's request
        table, ``HybridReqToTokenPool.mamba2_layer_cache``, maps the model's layer id
        through its ``mamba_map`` before it calls this, as for SGLang's own
        ``MambaPool``)."""
        return self.mamba_cache.at_layer_idx(index)

    def clear_slots(self, indices: torch.Tensor) -> None:
        """Zero these **physical** slots (every layer)."""
        cache = self.mamba_cache
        idx = indices.to(torch.int64)
        idx = idx[idx >= 0]
        for c in cache.conv:
            c[:, idx] = 0
        cache.temporal[:, idx] = 0

    def copy_from(self, src_index: torch.Tensor, dst_index: torch.Tensor) -> None:
        """Copy states between **physical** slots (every layer)."""
        cache = self.mamba_cache
        src, dst = src_index.to(torch.int64), dst_index.to(torch.int64)
        for c in cache.conv:
            c[:, dst] = c[:, src]
        cache.temporal[:, dst] = cache.temporal[:, src]

    def _copy_from_physical(self, src_index: torch.Tensor, dst_index: torch.Tensor) -> None:
        """As :meth:`copy_from` (the name SGLang's allocator calls for relocations)."""
        self.copy_from(src_index, dst_index)

    def get_cpu_copy(self, indices: torch.Tensor) -> list[torch.Tensor]:
        """Host copies of these **physical** slots: the conv states then the temporal."""
        cache = self.mamba_cache
        idx = indices.to(torch.int64)
        return [c[:, idx].cpu() for c in cache.conv] + [cache.temporal[:, idx].cpu()]

    def load_cpu_copy(self, mamba_cache_cpu: list[torch.Tensor], indices: torch.Tensor) -> None:
        """Write :meth:`get_cpu_copy`'s states back at these **physical** slots."""
        cache = self.mamba_cache
        idx = indices.to(torch.int64)
        targets = list(cache.conv) + [cache.temporal]
        if len(mamba_cache_cpu) != len(targets):
            raise SGLangArgumentError(
                f"load_cpu_copy: {len(mamba_cache_cpu)} tensors, expected {len(targets)}"
            )
        for t, c in zip(targets, mamba_cache_cpu):
            t[:, idx] = c.to(t.device)


class UnifiedSWAKVPool(_SWABase):
    """The full + SWA pair's K/V pools over one drop-in pool (two MHA sub-pools).

    Args:
        unified_buffer: The drop-in pool with MHA sub-pools ``"full"`` and ``"swa"``.
        swa_attention_layer_ids: Model layer ids of the sliding-window layers.
        full_attention_layer_ids: Model layer ids of the full-attention layers.
        page_size, start_layer, end_layer: As :class:`UnifiedMHATokenToKVPool` (the
            page size is the pool's, fixed by its allocators).
        enable_memory_saver: Accepted (the unified buffer's own setting governs).
    """

    #: The class of the two sides' K/V pools (SGLang 0.5.23's drop-in names its own).
    _kv_pool_cls: Any = UnifiedMHATokenToKVPool

    def __init__(
        self,
        *,
        unified_buffer: UnifiedKVPool,
        swa_attention_layer_ids: list[int],
        full_attention_layer_ids: list[int],
        page_size: int = 1,
        start_layer: int | None = None,
        end_layer: int | None = None,
        enable_memory_saver: bool = False,
    ) -> None:
        full, swa = unified_buffer.mha_spec("full"), unified_buffer.mha_spec("swa")
        if full.store_dtype != swa.store_dtype:
            from ukv.integrations.sglang.errors import SGLangConfigError

            raise SGLangConfigError(
                f"full and swa sub-pools must share store_dtype; got full={full.store_dtype}, "
                f"swa={swa.store_dtype}"
            )
        self.unified_buffer = unified_buffer
        self._unified_buffer = unified_buffer
        self.swa_layer_nums = len(swa_attention_layer_ids)
        self.full_layer_nums = len(full_attention_layer_ids)
        self.layer_num = self.full_layer_nums + self.swa_layer_nums
        self.start_layer = start_layer or 0
        self.layer_transfer_counter = None
        self.dtype = full.store_dtype
        self.head_num = full.head_num
        self.head_dim = full.head_dim
        self.device = unified_buffer.device
        self.full_kv_pool = self._kv_pool_cls(
            unified_buffer=unified_buffer,
            sub_pool_name="full",
            page_size=page_size,
            start_layer=start_layer,
            end_layer=end_layer,
        )
        self.swa_kv_pool = self._kv_pool_cls(
            unified_buffer=unified_buffer,
            sub_pool_name="swa",
            page_size=page_size,
            start_layer=start_layer,
            end_layer=end_layer,
        )
        self.enable_custom_mem_pool = False
        self.custom_mem_pool = None
        self.layers_mapping: dict[int, tuple[int, bool]] = {}
        for i, gid in enumerate(full_attention_layer_ids):
            self.layers_mapping[gid] = (i, False)
        for i, gid in enumerate(swa_attention_layer_ids):
            self.layers_mapping[gid] = (i, True)
        self.full_to_swa_index_mapping = None
        self.mem_usage = 0.0
        self._full_allocator: Any = None
        self._swa_allocator: Any = None

    @property
    def page_size(self) -> int:
        """Tokens per page: the drop-in pool's KV page size."""
        return self.unified_buffer.page_size

    @property
    def size(self) -> int:
        """Full-side token slots (minus the padding slot)."""
        return self.unified_buffer.max_slots("full") - 1

    @property
    def size_swa(self) -> int:
        """SWA-side token slots (minus the padding slot)."""
        return self.unified_buffer.max_slots("swa") - 1

    def attach_allocators(self, *, full_allocator: Any, swa_allocator: Any) -> None:
        """Wire the two sides' allocators (their tables translate ids)."""
        self._full_allocator = full_allocator
        self._swa_allocator = swa_allocator

    def register_mapping(self, full_to_swa_index_mapping: torch.Tensor) -> None:
        """Nothing to register: the SWA side's table is the mapping."""

    def translate_loc_from_full_to_swa(self, kv_indices: torch.Tensor) -> torch.Tensor:
        """Virtual token ids -> SWA physical token ids, int32, unclamped (a released page
        gives a negative id; callers filter).

        Raises:
            SGLangArgumentError: called before ``attach_allocators``.
        """
        if self._swa_allocator is None:
            raise SGLangArgumentError(
                "UnifiedSWAKVPool.translate_loc_from_full_to_swa called before attach_allocators"
            )
        return self._virt_tokens_to_phys_tokens(kv_indices, self._swa_allocator).to(torch.int32)

    @staticmethod
    def _virt_tokens_to_phys_tokens(tokens: torch.Tensor, allocator: Any) -> torch.Tensor:
        """Virtual token ids -> physical token ids of ``allocator``'s side (SGLang's name);
        a page the side does not bind gives a negative id."""
        ps = allocator.page_size
        v2p = allocator.virtual_to_physical
        t = tokens.to(torch.int64).to(v2p.device)
        return v2p[t // ps] * ps + t % ps

    def _side(self, layer_id: int) -> tuple[int, UnifiedMHATokenToKVPool]:
        index, is_swa = self.layers_mapping[layer_id]
        return index, self.swa_kv_pool if is_swa else self.full_kv_pool

    def get_key_buffer(self, layer_id: int) -> torch.Tensor:
        """K view of model layer ``layer_id`` (its side's)."""
        index, pool = self._side(layer_id)
        return pool.k_buffer[index]

    def get_value_buffer(self, layer_id: int) -> torch.Tensor:
        """V view of model layer ``layer_id``."""
        index, pool = self._side(layer_id)
        return pool.v_buffer[index]

    def get_kv_buffer(self, layer_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(K, V) views of model layer ``layer_id``."""
        return self.get_key_buffer(layer_id), self.get_value_buffer(layer_id)

    def get_kv_size_bytes(self) -> tuple[int, int]:
        """(0, 0): the drop-in pool accounts for the whole buffer once."""
        return 0, 0

    def get_contiguous_buf_infos(self) -> Any:
        """The full side's buffer infos."""
        return self.full_kv_pool.get_contiguous_buf_infos()

    def get_state_buf_infos(self) -> Any:
        """The SWA side's buffer infos."""
        return self.swa_kv_pool.get_contiguous_buf_infos()

    def set_kv_buffer(
        self,
        layer: Any,
        loc_info: Any,
        cache_k: torch.Tensor,
        cache_v: torch.Tensor,
        k_scale: Any = None,
        v_scale: Any = None,
    ) -> None:
        """Store a layer's K/V on its side: ``loc_info.full_loc`` for a full layer,
        ``loc_info.swa_loc`` for an SWA layer (both **physical**; never translates).

        Raises:
            SGLangWriteLocError: the layer's side has no loc in ``loc_info``.
        """
        index, is_swa = self.layers_mapping[layer.layer_id]
        loc = getattr(loc_info, "swa_loc" if is_swa else "full_loc", None)
        if loc is None:
            side = "swa_loc" if is_swa else "full_loc"
            raise SGLangWriteLocError(
                f"UnifiedSWAKVPool.set_kv_buffer: layer {layer.layer_id} "
                f"({'SWA' if is_swa else 'full'}) received no {side}"
            )
        pool = self.swa_kv_pool if is_swa else self.full_kv_pool
        pool.set_kv_buffer(None, loc, cache_k, cache_v, k_scale, v_scale, layer_id_override=index)

    def move_kv_cache(self, tgt_loc: torch.Tensor, src_loc: torch.Tensor) -> None:
        """Never meaningful on the pair: each side relocates on its own.

        Raises:
            SGLangArgumentError: always.
        """
        raise SGLangArgumentError(
            "UnifiedSWAKVPool.move_kv_cache: relocations are per side (full_kv_pool / swa_kv_pool)"
        )

    def get_cpu_copy(self, indices: torch.Tensor, mamba_indices: Any = None) -> dict[str, Any]:
        """Host copies of these **virtual** tokens: ``{"full": ..., "swa": ... or None}``
        (the SWA side only of tokens it still binds)."""
        pool = self.unified_buffer.ukv_pool
        with translated():
            full = pool.get_cpu_copy("full", indices)
            live = self._swa_live(indices)
            swa = pool.get_cpu_copy("swa", indices[live]) if bool(live.any()) else None
        return {"full": full, "swa": swa, "swa_mask": live}

    def load_cpu_copy(
        self, kv_cache_cpu: dict[str, Any], indices: torch.Tensor, mamba_indices: Any = None
    ) -> None:
        """Write :meth:`get_cpu_copy`'s copies back at these **virtual** tokens (the SWA
        side at the tokens that had one, which must be bound again)."""
        pool = self.unified_buffer.ukv_pool
        with translated():
            pool.load_cpu_copy("full", kv_cache_cpu["full"], indices)
            if kv_cache_cpu.get("swa") is not None:
                pool.load_cpu_copy("swa", kv_cache_cpu["swa"], indices[kv_cache_cpu["swa_mask"]])

    def _swa_live(self, indices: torch.Tensor) -> torch.Tensor:
        assert self._swa_allocator is not None
        ps = self.page_size
        v2p = self._swa_allocator.virtual_to_physical
        pages = indices.to(torch.int64).to(v2p.device) // ps
        return (v2p[pages] > 0).to(indices.device)
