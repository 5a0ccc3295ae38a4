"""SGLang's base classes when SGLang is importable, stand-ins otherwise.

SGLang checks the pool's objects with ``isinstance`` against its own classes, so the
drop-in's classes derive from them. They are imported here and only here (never by
``import ukv``); where SGLang is not importable (CI, or an engine-less test), each name is
a stand-in that carries no behaviour SGLang's scheduler would rely on, except
:class:`ReqToTokenPool`, :class:`HybridReqToTokenPool` and :class:`HybridLinearKVPool`,
which implement the small request-slot and layer-routing surface the drop-in inherits
from SGLang, so the drop-in works standalone.

Where SGLang keeps them is the installed release's ``layouts.Layout.bases`` (0.5.16 and
0.5.23 keep these in ``sglang.srt.mem_cache.memory_pool``, ``swa_memory_pool`` and
``allocator``; 0.5.23 adds ``MLATokenToKVPool``).
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

import torch

from ukv.integrations.sglang import layouts

__all__ = ["FROM_SGLANG", "names"]

# name -> (module, attribute), of the installed SGLang's layout (the version seam lives
# in ``layouts``).
_SOURCES: dict[str, tuple[str, str]] = layouts.current().bases


def _load_sglang() -> dict[str, Any] | None:
    found: dict[str, Any] = {}
    try:
        for name, (module, attr) in _SOURCES.items():
            found[name] = getattr(importlib.import_module(module), attr)
    except ImportError:
        return None
    return found


# ----- stand-ins (SGLang not importable) -----------------------------------------------------


class _BaseTokenToKVPoolAllocator:
    """Stand-in for SGLang's allocator base (the drop-in sets its own state)."""


class _SWATokenToKVPoolAllocator(_BaseTokenToKVPoolAllocator):
    """Stand-in for SGLang's SWA allocator (``isinstance`` only)."""


class _KVCache:
    """Stand-in for SGLang's ``KVCache`` base."""


class _MHATokenToKVPool(_KVCache):
    """Stand-in for SGLang's MHA pool (the drop-in implements its surface itself)."""


class _MLATokenToKVPool(_KVCache):
    """Stand-in for SGLang's MLA pool (``isinstance`` only)."""


class _SWAKVPool(_KVCache):
    """Stand-in for SGLang's SWA pool (``isinstance`` only)."""


class _MambaPool:
    """Stand-in for SGLang's Mamba pool: its ``State`` and ``SpeculativeState`` records."""

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class State:
        """Conv and temporal state views: ``conv[i]`` ``[layers, slots, *conv_i]``,
        ``temporal`` ``[layers, slots, *temporal]``."""

        conv: list[torch.Tensor]
        temporal: torch.Tensor

        def at_layer_idx(self, layer: int) -> Any:
            """The same record for one layer (lists indexed element-wise, as SGLang's)."""
            kwargs: dict[str, Any] = {}
            for f in dataclasses.fields(self):
                v = getattr(self, f.name)
                kwargs[f.name] = (
                    None
                    if v is None
                    else [t[layer] for t in v]
                    if isinstance(v, list)
                    else v[layer]
                )
            return type(self)(**kwargs)

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class SpeculativeState(State):
        """Plus the per-draft scratch of speculative verification: ``intermediate_ssm``
        ``[layers, rows, draft_tokens, *temporal]`` and ``intermediate_conv_window[i]``
        ``[layers, rows, draft_tokens, *conv_i]``, rows indexed by batch position."""

        intermediate_ssm: torch.Tensor | None
        intermediate_conv_window: list[torch.Tensor]


class _KVWriteLoc:
    """Stand-in for SGLang's per-forward write locations of a hybrid SWA pool
    (``physical``: 0.5.23's mark that the ids are physical, which its unified pools
    demand)."""

    def __init__(
        self, loc: Any, swa_loc: Any = None, full_loc: Any = None, physical: bool = False
    ) -> None:
        self.loc = loc
        self.swa_loc = swa_loc
        self.full_loc = full_loc
        self.physical = physical


class _ReqToTokenPool:
    """Stand-in request table: request slot -> token ids (slot 0 is padding)."""

    def __init__(
        self, size: int, max_context_len: int, device: str, enable_memory_saver: bool
    ) -> None:
        self.size = size
        self.max_context_len = max_context_len
        self.device = device
        self.req_to_token = torch.zeros(
            (size + 1, max_context_len), dtype=torch.int32, device=device
        )
        self.free_slots = list(range(1, size + 1))

    def write(self, indices: Any, values: Any) -> None:
        self.req_to_token[indices] = values

    def available_size(self) -> int:
        return len(self.free_slots)

    def alloc(self, reqs: list[Any]) -> list[int] | None:
        """Give every request without a slot one (``req.req_pool_idx``); None when short."""
        fresh = [r for r in reqs if getattr(r, "req_pool_idx", None) is None]
        if len(fresh) > len(self.free_slots):
            return None
        for r in fresh:
            r.req_pool_idx = self.free_slots.pop(0)
        return [r.req_pool_idx for r in reqs]

    def free(self, req: Any) -> None:
        self.free_slots.append(req.req_pool_idx)
        req.req_pool_idx = None

    def clear(self) -> None:
        self.free_slots = list(range(1, self.size + 1))


class _HybridReqToTokenPool(_ReqToTokenPool):
    """Stand-in hybrid request table: one state slot per request (``req.mamba_pool_idx``)."""

    # Set by the subclass's ``_init_mamba_pool`` and by the factory.
    mamba_allocator: Any
    mamba_pool: Any
    mamba_map: dict[int, int]
    req_index_to_mamba_index_mapping: torch.Tensor
    req_index_to_mamba_ping_pong_track_buffer_mapping: torch.Tensor

    def __init__(
        self,
        *,
        size: int,
        mamba_size: int,
        mamba_spec_state_size: int,
        max_context_len: int,
        device: str,
        enable_memory_saver: bool,
        cache_params: Any,
        mamba_layer_ids: list[int],
        enable_mamba_extra_buffer: bool,
        speculative_num_draft_tokens: int | None = None,
        enable_overlap_schedule: bool = True,
        start_layer: int | None = None,
        **_ignored: Any,
    ) -> None:
        super().__init__(size, max_context_len, device, enable_memory_saver)
        self.enable_mamba_extra_buffer = enable_mamba_extra_buffer
        self.enable_memory_saver = enable_memory_saver
        self.mamba_ping_pong_track_buffer_size = 2 if enable_overlap_schedule else 1
        self.start_layer = start_layer or 0
        self._init_mamba_pool(
            mamba_size=mamba_size,
            mamba_spec_state_size=mamba_spec_state_size,
            cache_params=cache_params,
            mamba_layer_ids=mamba_layer_ids,
            device=device,
            enable_mamba_extra_buffer=enable_mamba_extra_buffer,
            speculative_num_draft_tokens=speculative_num_draft_tokens,
        )

    def _init_mamba_pool(self, **kwargs: Any) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def alloc(self, reqs: list[Any]) -> list[int] | None:
        """Request slots, a state slot for each request that has none and, with the extra
        buffer, its ping-pong track slots (``req.mamba_ping_pong_track_buffer``)."""
        got = super().alloc(reqs)
        if got is None:
            return None
        for r in reqs:
            if getattr(r, "mamba_pool_idx", None) is None:
                mid = self.mamba_allocator.alloc(1)
                assert mid is not None, "Not enough space for mamba cache"
                r.mamba_pool_idx = mid[0]
            self.req_index_to_mamba_index_mapping[r.req_pool_idx] = int(r.mamba_pool_idx)
            if self.enable_mamba_extra_buffer:
                if getattr(r, "mamba_ping_pong_track_buffer", None) is None:
                    track = self.mamba_allocator.alloc(self.mamba_ping_pong_track_buffer_size)
                    assert track is not None, "Not enough space for mamba ping pong idx"
                    r.mamba_ping_pong_track_buffer = track
                    r.mamba_next_track_idx = 0
                mapping = self.req_index_to_mamba_ping_pong_track_buffer_mapping
                mapping[r.req_pool_idx] = r.mamba_ping_pong_track_buffer.to(mapping.device)
        return got

    def get_mamba_indices(self, req_indices: torch.Tensor) -> torch.Tensor:
        return self.req_index_to_mamba_index_mapping[req_indices]

    def mamba2_layer_cache(self, layer_id: int) -> Any:
        """The state views of model layer ``layer_id``: mapped to the pool's own layer
        index here, as SGLang's request table does, then asked of the state pool."""
        return self.mamba_pool.mamba2_layer_cache(self.mamba_map[layer_id])

    def free_mamba_cache(self, req: Any) -> None:
        """Free the request's state slot and its ping-pong track slots."""
        self.mamba_allocator.free(torch.as_tensor([int(req.mamba_pool_idx)]))
        req.mamba_pool_idx = None
        if self.enable_mamba_extra_buffer and req.mamba_ping_pong_track_buffer is not None:
            track = req.mamba_ping_pong_track_buffer
            self.mamba_allocator.free(track[track >= 0])
            req.mamba_ping_pong_track_buffer = None

    def clear(self) -> None:
        super().clear()
        self.mamba_allocator.clear()


class _HybridLinearKVPool(_KVCache):
    """Stand-in hybrid KV pool: routes full-attention layers to ``full_kv_pool``."""

    def __init__(
        self,
        *,
        size: int,
        dtype: torch.dtype,
        page_size: int,
        head_num: int,
        head_dim: int,
        full_attention_layer_ids: list[int],
        device: str,
        mamba_pool: Any,
        full_kv_pool: Any,
        start_layer: int | None = None,
        **_ignored: Any,
    ) -> None:
        self.size = size
        self.dtype = dtype
        self.page_size = page_size
        self.head_num = head_num
        self.head_dim = head_dim
        self.device = device
        self.mamba_pool = mamba_pool
        self.full_kv_pool = full_kv_pool
        self.start_layer = start_layer or 0
        self.full_attention_layer_id_mapping = {
            lid: i for i, lid in enumerate(full_attention_layer_ids)
        }
        self._mamba_translate = lambda ids: ids

    def _layer(self, layer_id: int) -> int:
        return self.full_attention_layer_id_mapping[layer_id]

    def get_key_buffer(self, layer_id: int) -> torch.Tensor:
        return self.full_kv_pool.get_key_buffer(self._layer(layer_id))

    def get_value_buffer(self, layer_id: int) -> torch.Tensor:
        return self.full_kv_pool.get_value_buffer(self._layer(layer_id))

    def set_kv_buffer(self, layer: Any, loc: torch.Tensor, k: Any, v: Any, *args: Any) -> None:
        self.full_kv_pool.set_kv_buffer(
            None, loc, k, v, *args, layer_id_override=self._layer(layer.layer_id)
        )

    def move_kv_cache(self, tgt_loc: torch.Tensor, src_loc: torch.Tensor) -> None:
        self.full_kv_pool.move_kv_cache(tgt_loc, src_loc)


class _TorchMemorySaverAdapter:
    """Stand-in for SGLang's memory-saver adapter: without SGLang (and its
    ``torch_memory_saver``) there is no region to allocate in."""

    @staticmethod
    def create(enable: bool) -> Any:
        if enable:
            from ukv.integrations.sglang.errors import SGLangNotImplementedError

            raise SGLangNotImplementedError(
                "enable_memory_saver=True needs SGLang's TorchMemorySaverAdapter (SGLang and "
                "torch_memory_saver installed): the drop-in allocates its buffer in that region"
            )
        return None


_STAND_INS: dict[str, Any] = {
    "BaseTokenToKVPoolAllocator": _BaseTokenToKVPoolAllocator,
    "SWATokenToKVPoolAllocator": _SWATokenToKVPoolAllocator,
    "SWAKVPool": _SWAKVPool,
    "ReqToTokenPool": _ReqToTokenPool,
    "HybridReqToTokenPool": _HybridReqToTokenPool,
    "HybridLinearKVPool": _HybridLinearKVPool,
    "MHATokenToKVPool": _MHATokenToKVPool,
    "MLATokenToKVPool": _MLATokenToKVPool,
    "MambaPool": _MambaPool,
    "KVWriteLoc": _KVWriteLoc,
    "TorchMemorySaverAdapter": _TorchMemorySaverAdapter,
    "GPU_MEMORY_TYPE_KV_CACHE": "kv_cache",
}

_sglang = _load_sglang()
#: Whether the base classes are SGLang's own (else the stand-ins above).
FROM_SGLANG: bool = _sglang is not None
#: name -> class: SGLang's where SGLang is importable (a name the installed layout does not
#: list keeps its stand-in), else the stand-ins.
names: dict[str, Any] = {**_STAND_INS, **(_sglang or {})}
