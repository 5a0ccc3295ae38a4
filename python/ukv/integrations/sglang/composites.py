"""The composite allocators SGLang's scheduler holds: Mamba hybrid and SWA hybrid.

Each pairs two :class:`MultiEndedAllocator` objects (SGLang's ``full_attn_allocator`` and
``mamba_allocator`` / ``swa_attn_allocator``) over one drop-in pool. The SWA composite
runs every allocation and free through ukv's ``SWAHybridAllocator``: both sides bind or
release in one core plan, and ``available_size`` is ukv's exact joint capacity.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ukv.integrations.sglang import bases
from ukv.integrations.sglang.allocator import AllocSurface, MultiEndedAllocator, _empty_ids
from ukv.integrations.sglang.errors import (
    SGLangArgumentError,
    translated,
)
from ukv.integrations.sglang.pool import UnifiedKVPool

__all__ = ["UnifiedMambaTokenToKVPoolAllocator", "UnifiedSWATokenToKVPoolAllocator"]

_Base: Any = bases.names["BaseTokenToKVPoolAllocator"]
_SWABase: Any = bases.names["SWATokenToKVPoolAllocator"]


def _slot_ids(value: Any) -> torch.Tensor:
    """State slot ids as a 1-D tensor (SGLang passes one request's slot as a 0-d tensor)."""
    return torch.as_tensor(value).reshape(-1)


class _PairMixin:
    """What both composites share: construction, forwards, flushes, host copies."""

    unified_buffer: UnifiedKVPool
    full_attn_allocator: MultiEndedAllocator
    #: The sides' allocator class, and the SWA side's (SGLang 0.5.23's drop-in names
    #: its own: ``v0523.allocator``).
    _side_cls: Any = MultiEndedAllocator
    _swa_side_cls: Any = MultiEndedAllocator

    def _init_pair(
        self,
        *,
        unified_buffer: UnifiedKVPool,
        kvcache: Any,
        device: str,
        page_size: int,
        need_sort: bool,
        forward_stream: Any,
        lazy_compaction: bool,
        other: str,
        other_kvcache: Any,
        other_is_owner: bool,
        other_page_size: int,
    ) -> MultiEndedAllocator:
        """Build the full side (an id owner over ``kvcache.full_kv_pool``) and the other
        side (sub-pool ``other``), bind them as peers and set the state SGLang's base
        allocator would; return the other side."""
        self.unified_buffer = unified_buffer
        self._kvcache = kvcache
        self.page_size = page_size
        self.device = device
        self.need_sort = need_sort
        self.dtype = unified_buffer.mha_spec("full").store_dtype
        common = dict(
            unified_buffer=unified_buffer,
            device=device,
            need_sort=need_sort,
            forward_stream=forward_stream,
            lazy_compaction=lazy_compaction,
        )
        full = self._side_cls(
            kvcache=kvcache.full_kv_pool,
            sub_pool_name="full",
            is_id_owner=True,
            page_size=page_size,
            **common,
        )
        second = (self._side_cls if other_is_owner else self._swa_side_cls)(
            kvcache=other_kvcache,
            sub_pool_name=other,
            is_id_owner=other_is_owner,
            page_size=other_page_size,
            **common,
        )
        full.bind_peer(second)
        second.bind_peer(full)
        self.full_attn_allocator = full
        self.lazy_compaction = full.lazy_compaction
        self.is_not_in_free_group = True
        self.free_group: list[torch.Tensor] = []
        self.free_pages = _empty_ids(device)
        self.release_pages = _empty_ids(device)
        return second

    def _sides(self) -> tuple[MultiEndedAllocator, MultiEndedAllocator]:
        raise NotImplementedError

    def set_latest_forward_done_event(self, event: Any) -> None:
        """Report the latest forward's completion event (once, for the whole pool)."""
        self.full_attn_allocator.set_latest_forward_done_event(event)

    def set_inflight_forward(self, event: Any, out_cache_loc_virtual: torch.Tensor | None) -> None:
        """Report a launched forward and its KV writes (once: ukv's pool guards every
        KV sub-pool with the write set and every state slot while it is in flight)."""
        self.full_attn_allocator.set_inflight_forward(event, out_cache_loc_virtual)

    def flush_opportunistic(self) -> int:
        """One non-urgent compaction pass of both sides; the number of page moves."""
        return self.full_attn_allocator.flush_opportunistic()

    def backup_state(self) -> list[Any]:
        """Markers of both sides."""
        return [a.backup_state() for a in self._sides()]

    def restore_state(self, state: list[Any]) -> list[Any]:
        """Restore both sides' markers (see ``MultiEndedAllocator.restore_state``)."""
        if len(state) != 2:
            raise SGLangArgumentError(f"restore_state: expected 2 side states, got {len(state)}")
        a, b = self._sides()
        return a.restore_state(state[0]) + b.restore_state(state[1])

    def translate_kv_loc(
        self, loc: torch.Tensor, *, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Full-side virtual token ids -> physical token ids (int64; tombstones -> 0)."""
        return self.full_attn_allocator.translate_kv_loc(loc, out=out)

    def is_slot_allocated(self, slot: int) -> bool:
        """Whether virtual token ``slot`` is live on the full side."""
        return self.full_attn_allocator.is_slot_allocated(slot)

    def allocator_state_str(self) -> str:
        """The full side's state."""
        return self.full_attn_allocator.allocator_state_str()

    def get_kvcache(self) -> Any:
        """The composite kvcache this allocator was built with."""
        return self._kvcache  # type: ignore[attr-defined]


class UnifiedMambaTokenToKVPoolAllocator(_PairMixin, _Base):
    """Full-attention tokens plus the Mamba side's slots over one drop-in pool.

    Args:
        unified_buffer: A drop-in pool with sub-pools ``"full"`` (MHA) and ``"mamba"``.
        kvcache: SGLang's ``HybridLinearKVPool`` (its ``full_kv_pool`` and ``mamba_pool``
            become the sides' kvcaches).
        device, page_size, need_sort, forward_stream, lazy_compaction: as
            :class:`MultiEndedAllocator`.
    """

    def __init__(
        self,
        *,
        unified_buffer: UnifiedKVPool,
        kvcache: Any,
        device: str,
        page_size: int = 1,
        need_sort: bool = False,
        forward_stream: Any = None,
        lazy_compaction: bool = False,
    ) -> None:
        self.mamba_allocator = self._init_pair(
            unified_buffer=unified_buffer,
            kvcache=kvcache,
            device=device,
            page_size=page_size,
            need_sort=need_sort,
            forward_stream=forward_stream,
            lazy_compaction=lazy_compaction,
            other="mamba",
            other_kvcache=kvcache.mamba_pool,
            other_is_owner=True,
            other_page_size=1,  # state is one slot per request
        )

    def _sides(self) -> tuple[MultiEndedAllocator, MultiEndedAllocator]:
        return self.full_attn_allocator, self.mamba_allocator

    @property
    def size(self) -> int:
        """Tokens: schedulable plus allocated (the same view as ``available_size``)."""
        fa = self.full_attn_allocator
        return fa.schedulable_available_size() + fa.allocated_count()

    @size.setter
    def size(self, value: int) -> None:
        pass  # computed

    def available_size(self) -> int:
        """Full tokens realizable now, counting what an urgent flush of the state side frees."""
        return self.full_attn_allocator.schedulable_available_size()

    def full_available_size(self) -> int:
        """As :meth:`available_size`."""
        return self.available_size()

    def mamba_slot_full_token_cost(self) -> int:
        """Full tokens of bytes one state slot takes from the shared gap (rounded up)."""
        return math.ceil(self.mamba_allocator.entry_bytes / self.full_attn_allocator.entry_bytes)

    @property
    def size_full(self) -> int:
        """Full tokens of the full side's index space (minus the padding slot)."""
        return self.full_attn_allocator.max_slots - 1

    @property
    def size_mamba(self) -> int:
        """State slots of the state side's index space (minus the padding slot)."""
        return self.mamba_allocator.max_slots - 1

    def debug_print(self) -> str:
        """Both sides' availability."""
        return (
            f"#full-available={self.full_attn_allocator.available_size()}, "
            f"#mamba-available={self.mamba_allocator.available_size()}"
        )

    def alloc(self, need_size: int) -> torch.Tensor | None:
        """Full-side tokens (see ``MultiEndedAllocator.alloc``)."""
        return self.full_attn_allocator.alloc(need_size)

    def alloc_extend(self, *args: Any, **kwargs: Any) -> torch.Tensor | None:
        """Full-side extend (the state side does not grow per token)."""
        return self.full_attn_allocator.alloc_extend(*args, **kwargs)

    def alloc_decode(self, seq_lens: Any, seq_lens_cpu: Any, last_loc: Any) -> torch.Tensor | None:
        """Full-side decode."""
        return self.full_attn_allocator.alloc_decode(seq_lens, seq_lens_cpu, last_loc)

    def free(self, free_index: torch.Tensor) -> None:
        """Free full-side tokens (queued inside a free group)."""
        if free_index is None or free_index.numel() == 0:
            return
        self.full_attn_allocator.free(free_index)

    def free_group_begin(self) -> None:
        """Queue full-side frees (one compaction at :meth:`free_group_end`)."""
        self.full_attn_allocator.free_group_begin()
        self.is_not_in_free_group = False

    def free_group_end(self) -> None:
        """Apply the queued frees in one plan."""
        self.full_attn_allocator.free_group_end()
        self.is_not_in_free_group = True

    def clear(self) -> None:
        """Free everything on both sides."""
        self.full_attn_allocator.clear()
        self.mamba_allocator.clear()
        self.is_not_in_free_group = True

    def get_cpu_copy(self, indices: torch.Tensor, mamba_indices: Any = None) -> Any:
        """Host copies of these **virtual** tokens (and state slots: a request's one slot,
        0-d as SGLang passes ``req.mamba_pool_idx``, or several), for retraction."""
        pool = self.unified_buffer.ukv_pool
        with translated():
            kv = pool.get_cpu_copy("full", indices)
            states = None
            if mamba_indices is not None:
                states = pool.get_cpu_copy("mamba", _slot_ids(mamba_indices))
        return kv, states

    def load_cpu_copy(
        self, kv_cache_cpu: Any, indices: torch.Tensor, mamba_indices: torch.Tensor | None = None
    ) -> None:
        """Write :meth:`get_cpu_copy`'s copies back at these virtual tokens (and slots).

        Raises:
            SGLangArgumentError: the copy holds a state but no ``mamba_indices`` were
                given (the request would resume with whatever its new slot holds), or
                ``mamba_indices`` were given for a copy without a state.
        """
        kv, states = kv_cache_cpu
        if (states is None) != (mamba_indices is None):
            raise SGLangArgumentError(
                "load_cpu_copy: the copy "
                + (
                    "holds a state but mamba_indices is None"
                    if states is not None
                    else f"holds no state but mamba_indices = {mamba_indices!r}"
                )
                + " (nothing was written)"
            )
        pool = self.unified_buffer.ukv_pool
        with translated():
            pool.load_cpu_copy("full", kv, indices)
            if states is not None:
                pool.load_cpu_copy("mamba", states, _slot_ids(mamba_indices))


class UnifiedSWATokenToKVPoolAllocator(_PairMixin, AllocSurface, _SWABase):
    """Full and sliding-window attention over one virtual id space and one drop-in pool.

    Args:
        unified_buffer: A drop-in pool with MHA sub-pools ``"full"`` and ``"swa"``.
        kvcache: A :class:`~ukv.integrations.sglang.kvcache.UnifiedSWAKVPool` (or any
            object with ``full_kv_pool``, ``swa_kv_pool`` and ``attach_allocators``).
        full_max_total_num_tokens, swa_max_total_num_tokens: The static caps SGLang's leak
            check counts against (``size_full``, ``size_swa``).
        device, page_size, need_sort, forward_stream, lazy_compaction: as
            :class:`MultiEndedAllocator`.
    """

    def __init__(
        self,
        *,
        unified_buffer: UnifiedKVPool,
        kvcache: Any,
        device: str,
        full_max_total_num_tokens: int,
        swa_max_total_num_tokens: int,
        page_size: int = 1,
        need_sort: bool = False,
        forward_stream: Any = None,
        lazy_compaction: bool = False,
    ) -> None:
        self._size_full = full_max_total_num_tokens
        self._size_swa = swa_max_total_num_tokens
        # SGLang's names of the same static caps (its tests read them).
        self._full_max_total_num_tokens = full_max_total_num_tokens
        self._swa_max_total_num_tokens = swa_max_total_num_tokens
        self.swa_attn_allocator = self._init_pair(
            unified_buffer=unified_buffer,
            kvcache=kvcache,
            device=device,
            page_size=page_size,
            need_sort=need_sort,
            forward_stream=forward_stream,
            lazy_compaction=lazy_compaction,
            other="swa",
            other_kvcache=kvcache.swa_kv_pool,
            other_is_owner=False,  # binds full's virtual ids
            other_page_size=page_size,
        )
        kvcache.attach_allocators(
            full_allocator=self.full_attn_allocator, swa_allocator=self.swa_attn_allocator
        )

    def _sides(self) -> tuple[MultiEndedAllocator, MultiEndedAllocator]:
        return self.full_attn_allocator, self.swa_attn_allocator

    def _allocating(self, what: str) -> Any:
        """Both sides allocate in one core plan (tail pages reused in extend and decode);
        ``alloc`` gives None when the tokens do not fit jointly."""
        return self._joint

    @property
    def _joint(self) -> Any:
        joint = self.unified_buffer.swa_hybrid()
        assert joint is not None, "the swa sub-pool binds full's ids"
        return joint

    @property
    def size(self) -> int:
        """The smaller static cap."""
        return min(self._size_full, self._size_swa)

    @size.setter
    def size(self, value: int) -> None:
        pass  # computed

    @property
    def size_full(self) -> int:
        """Static cap of the full side (tokens)."""
        return self._size_full

    @property
    def size_swa(self) -> int:
        """Static cap of the SWA side (tokens)."""
        return self._size_swa

    def available_size(self) -> int:
        """Joint tokens: ``n <= available_size()`` guarantees both sides fit (ukv's exact
        joint capacity, computed in its core)."""
        return int(self._joint.available_size())

    def _conserve_full_available_size(self) -> int:
        """The full side's static cap minus its live tokens: negative once the side
        borrowed the other's bytes beyond its cap. Kept exact, as SGLang keeps it: its
        idle leak check adds this to the tokens the radix cache holds and expects the
        cap, which a clamp at 0 would break."""
        return self._size_full - self.full_attn_allocator.allocated_count()

    def _conserve_swa_available_size(self) -> int:
        """The SWA side's static cap minus its live tokens (exact, as the full side's)."""
        return self._size_swa - self.swa_attn_allocator.allocated_count()

    def full_available_size(self) -> int:
        """SGLang's per-side view: ``min(static cap - live, schedulable)``.

        Both sides grow into the same gap, so each side's schedulable size alone counts
        the whole gap; the static caps (which the factory's buffer holds in full, above
        ukv's reserved floor) bound each side so that two per-side checks that pass
        imply a joint allocation that fits, and an idle pool reports its caps (SGLang's
        leak check: ``available + evictable + protected == cap``)."""
        return min(
            self._conserve_full_available_size(),
            self.full_attn_allocator.schedulable_available_size(),
        )

    def swa_available_size(self) -> int:
        """As :meth:`full_available_size`, for the SWA side."""
        return min(
            self._conserve_swa_available_size(),
            self.swa_attn_allocator.schedulable_available_size(),
        )

    def schedulable_full_available_size(self) -> int:
        """Tokens the full side alone could take after compaction."""
        return self.full_attn_allocator.schedulable_available_size()

    def schedulable_swa_available_size(self) -> int:
        """Tokens the SWA side alone could take after compaction."""
        return self.swa_attn_allocator.schedulable_available_size()

    def debug_print(self) -> str:
        """Each side's and the joint availability."""
        return (
            f"#full-available={self.full_attn_allocator.available_size()}, "
            f"#swa-available={self.swa_attn_allocator.available_size()}, "
            f"#joint-available={self.available_size()}"
        )

    def translate_loc_from_full_to_swa(
        self, kv_indices: torch.Tensor, *, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Virtual token ids -> SWA physical token ids, int32; released -> 0 (the sink).

        Raises:
            SGLangArgumentError: ``out`` is not int32 of ``kv_indices``' shape.
        """
        if out is not None and (out.dtype != torch.int32 or out.shape != kv_indices.shape):
            raise SGLangArgumentError(
                f"translate_loc_from_full_to_swa: out= must be int32 of shape "
                f"{tuple(kv_indices.shape)}; got {out.dtype} {tuple(out.shape)}"
            )
        with translated():
            return self._joint.translate_loc_from_full_to_swa(kv_indices, out=out)

    def free(self, free_index: torch.Tensor) -> None:
        """Release both sides of these tokens (SWA sides already released are skipped)."""
        if free_index is None or free_index.numel() == 0:
            return
        self.full_attn_allocator.order_after_forward()
        with translated():
            self._joint.free(free_index)
            if self.is_not_in_free_group:
                self.unified_buffer.settle_if_lockstep()

    def free_swa(self, free_index: torch.Tensor) -> None:
        """Release only the SWA side of tokens that left the window; tokens whose SWA side
        is already released (freed tokens among them) are skipped, as SGLang's composite
        skips them (``UnifiedRadixCache`` frees a node's full side, then its SWA side).

        The ids go to the host once (a copy of GPU ids: SGLang's own selection
        ``swa_indices[swa_indices > 0]`` waits for the GPU too); the frees still queued
        are applied first (a token an earlier ``free`` released must read as released);
        the core then releases the tokens still bound on the SWA side and skips the rest,
        at once, so the next translation reads 0 for these tokens, as SGLang's composite
        zeroes their mapping at once (``SWAHybridAllocator.free_swa_now``)."""
        if free_index is None or free_index.numel() == 0:
            return
        self.full_attn_allocator.order_after_forward()
        with translated():
            self._joint.free_swa_now(free_index.reshape(-1).contiguous())
            if self.is_not_in_free_group:
                self.unified_buffer.settle_if_lockstep()

    def set_full_to_swa_mapping(self, full_indices: Any, swa_indices: Any) -> None:
        """No mapping to keep: the SWA side's table is the mapping."""

    def free_group_begin(self) -> None:
        """Queue frees of both sides until :meth:`free_group_end`."""
        with translated():
            self._joint.free_group_begin()
        self.is_not_in_free_group = False

    def free_group_end(self) -> None:
        """Apply the queued frees of both sides in one plan."""
        self.full_attn_allocator.order_after_forward()
        with translated():
            self._joint.free_group_end()
            self.unified_buffer.settle_if_lockstep()
        self.is_not_in_free_group = True

    def clear(self) -> None:
        """Free everything (both sides)."""
        with translated():
            self._joint.clear()
        self.is_not_in_free_group = True

    def get_cpu_copy(self, indices: torch.Tensor, mamba_indices: Any = None) -> Any:
        """Host copies of both sides of these **virtual** tokens (SWA side: only the
        tokens it still binds)."""
        return self._kvcache.get_cpu_copy(indices)

    def load_cpu_copy(
        self, kv_cache_cpu: Any, indices: torch.Tensor, mamba_indices: Any = None
    ) -> None:
        """Write :meth:`get_cpu_copy`'s copies back at these virtual tokens."""
        self._kvcache.load_cpu_copy(kv_cache_cpu, indices)
