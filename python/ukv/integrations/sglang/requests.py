"""The request side of a Mamba hybrid: state slots per request and the request table.

``UnifiedMambaSlotAllocator`` presents SGLang's slot-allocator surface over the state
side's :class:`MultiEndedAllocator` (virtual slot ids; ``translate`` keeps −1, the
padding of state kernels, as −1). ``UnifiedHybridReqToTokenPool`` is SGLang's
``HybridReqToTokenPool`` whose state pool is the drop-in's.
"""

from __future__ import annotations

from typing import Any

import torch

from ukv.integrations.sglang import bases
from ukv.integrations.sglang.allocator import MultiEndedAllocator
from ukv.integrations.sglang.errors import SGLangConfigError, translated
from ukv.integrations.sglang.kvcache import UnifiedMambaPool
from ukv.integrations.sglang.pool import UnifiedKVPool

__all__ = ["UnifiedHybridReqToTokenPool", "UnifiedMambaSlotAllocator"]

_ReqBase: Any = bases.names["HybridReqToTokenPool"]


class UnifiedMambaSlotAllocator:
    """State slots (virtual ids) of the state side, SGLang's slot-allocator surface.

    Args:
        mea: The state side's :class:`MultiEndedAllocator`.
        max_size: Slots excluding the padding slot 0.
        device: Where ids live.
    """

    def __init__(self, mea: MultiEndedAllocator, max_size: int, device: str) -> None:
        self._multi_ended_allocator = mea
        self._max_size = max_size
        self._device = device
        self._alloc_iter: Any = None

    def translate(
        self, virtual_ids: torch.Tensor, out_dtype: torch.dtype = torch.int64
    ) -> torch.Tensor:
        """Virtual slot ids -> physical slots (one launch on CUDA); −1 (padding) stays
        −1, and so does an id that names no live slot (slot 0, the padding anchor,
        included)."""
        sub = self._multi_ended_allocator._sub
        with translated():
            return sub.translate_slots(virtual_ids.to(sub.v2p.device), out_dtype=out_dtype)

    @property
    def virtual_to_physical(self) -> torch.Tensor:
        """The state side's read-only v2p table."""
        return self._multi_ended_allocator.virtual_to_physical

    @property
    def size(self) -> int:
        """Slots excluding the padding slot."""
        return self._max_size

    def available_size(self) -> int:
        """``size - allocated`` (the leak check's view)."""
        return self._max_size - self._multi_ended_allocator.allocated_count()

    def schedulable_available_size(self) -> int:
        """Slots ``alloc`` is guaranteed to get (after an urgent flush of the full side)."""
        return self._multi_ended_allocator.schedulable_available_size()

    @property
    def free_slots(self) -> torch.Tensor:
        """Physical slots beyond the watermark (never handed out yet since the last
        compaction), for SGLang's invariant checker."""
        a = self._multi_ended_allocator
        wm = a.watermark_physical
        start, end = (wm, a.num_pages) if a.grow_direction == "up" else (a.min_page_index, wm + 1)
        return torch.arange(start, max(start, end), dtype=torch.int64)

    def alloc(self, need_size: int) -> torch.Tensor | None:
        """``need_size`` virtual slots (one at a time from an open group first); None when
        they do not fit."""
        if self._alloc_iter is not None and need_size == 1:
            slot = next(self._alloc_iter, None)
            if slot is not None:
                return slot
        return self._multi_ended_allocator.alloc(need_size)

    def free(self, free_index: torch.Tensor) -> None:
        """Free these virtual slots."""
        self._multi_ended_allocator.free(free_index)

    def clear(self) -> None:
        """Free every slot and forget an open group."""
        self._alloc_iter = None
        self._multi_ended_allocator.clear()

    def alloc_group_begin(self, num_reqs: int) -> None:
        """Take ``num_reqs`` slots now for the batch; ``alloc(1)`` draws from them."""
        self._alloc_iter = None
        if num_reqs > 0:
            got = self._multi_ended_allocator.alloc(num_reqs)
            if got is not None:
                self._alloc_iter = iter(got.split(1))

    def alloc_group_end(self) -> None:
        """Free the group's slots nobody took."""
        if self._alloc_iter is not None:
            rest = list(self._alloc_iter)
            if rest:
                self._multi_ended_allocator.free(torch.cat(rest))
        self._alloc_iter = None

    def is_slot_allocated(self, slot: Any) -> bool:
        """Whether virtual slot ``slot`` is live."""
        return self._multi_ended_allocator.is_slot_allocated(int(slot))

    def allocator_state_str(self) -> str:
        """The state side's allocator state."""
        return self._multi_ended_allocator.allocator_state_str()


class UnifiedHybridReqToTokenPool(_ReqBase):
    """SGLang's hybrid request table with the drop-in's state pool (virtual state ids;
    ``translate_mamba_indices`` gives the physical slots kernels read).

    ``enable_mamba_extra_buffer``: each request also holds ping-pong track slots (one, or
    two with the overlap schedule) for the radix cache's state checkpoints; they are
    ordinary state slots of the drop-in's slot allocator (virtual ids, translated like
    the request's own slot) and compact like them.

    ``speculative_num_draft_tokens``: the state pool also carries SGLang's per-draft
    verify scratch (rows by batch position, beside the unified buffer).
    """

    #: The class of the state pool (SGLang 0.5.23's drop-in names its own).
    _mamba_pool_cls: Any = UnifiedMambaPool

    def __init__(
        self, *, unified_buffer: UnifiedKVPool, mamba_sub_pool_name: str, **table: Any
    ) -> None:
        """Args: the drop-in pool, its state sub-pool's name, and SGLang's
        ``HybridReqToTokenPool`` keywords (``size``, ``mamba_spec_state_size``,
        ``max_context_len``, ``device``, ``enable_memory_saver``, ``cache_params``,
        ``mamba_layer_ids``, ``enable_mamba_extra_buffer``,
        ``speculative_num_draft_tokens``, ``enable_overlap_schedule``, ``start_layer``);
        ``mamba_size`` is the state sub-pool's slot count."""
        self._unified_buffer = unified_buffer
        self._mamba_sub_pool_name = mamba_sub_pool_name
        self._shared_mamba_size = unified_buffer.max_slots(mamba_sub_pool_name) - 1
        super().__init__(mamba_size=self._shared_mamba_size, **table)

    def _init_mamba_pool(
        self,
        mamba_size: int,
        mamba_spec_state_size: int,
        cache_params: Any,
        mamba_layer_ids: list[int],
        device: str,
        enable_mamba_extra_buffer: bool,
        speculative_num_draft_tokens: int | None = None,
        **_unused: Any,
    ) -> None:
        if mamba_size != self._shared_mamba_size:
            raise SGLangConfigError(
                f"mamba_size = {mamba_size} != unified_buffer.max_slots("
                f"{self._mamba_sub_pool_name!r}) - 1 = {self._shared_mamba_size}"
            )
        self.mamba_pool = self._mamba_pool_cls(
            unified_buffer=self._unified_buffer,
            sub_pool_name=self._mamba_sub_pool_name,
            spec_state_size=mamba_spec_state_size,
            mamba_layer_ids=mamba_layer_ids,
            enable_memory_saver=bool(getattr(self, "enable_memory_saver", False)),
            speculative_num_draft_tokens=speculative_num_draft_tokens,
        )
        self.mamba_allocator: UnifiedMambaSlotAllocator | None = None  # wired by the factory
        self.mamba_map = {lid: i for i, lid in enumerate(mamba_layer_ids)}
        self.mamba_ckpt_pool = None
        self.device = device
        rows = self.req_to_token.shape[0]
        self.req_index_to_mamba_index_mapping = torch.zeros(rows, dtype=torch.int32, device=device)
        if enable_mamba_extra_buffer:
            # int64 like the slot ids SGLang stores into it (virtual, as the request's slot).
            self.req_index_to_mamba_ping_pong_track_buffer_mapping = torch.zeros(
                (rows, self.mamba_ping_pong_track_buffer_size), dtype=torch.int64, device=device
            )

    def translate_mamba_indices(self, virtual_ids: torch.Tensor) -> torch.Tensor:
        """Virtual state slots -> physical slots, int32; −1 (padding) stays −1."""
        assert self.mamba_allocator is not None, "wired by init_unified_mamba_pools"
        return self.mamba_allocator.translate(virtual_ids, out_dtype=torch.int32)
