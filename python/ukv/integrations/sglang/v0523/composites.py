"""SGLang 0.5.23's composite allocators: Mamba, SWA pair, and the Mamba + SWA + full tri-pool.

The 0.5.16 drop-in composites (every allocation and free one ukv plan, ukv's exact joint
capacity) with 0.5.23's surface: the capacity hooks its scheduler calls unconditionally
(``create_prefill_budget``, ``can_reserve``, ``reclaim_plan``, ``ensure_capacity``,
``evict_to_free_tokens``, ``max_new_tokens_for_memory``...), page-rep segment frees,
the Mamba donor capability, zeroed pages on hand-out, and the tri-pool
``UnifiedMambaSWATokenToKVPoolAllocator`` (state END, SWA float, full END: ukv's middle
band). A page demand is priced on the pool as ukv compacts it (every END packed, the
float slid where the gap is), which is what ukv's allocation reaches by itself: an
allocation that does not fit flushes (and slides) in the same plan.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from ukv.hybrid.mamba import MambaHybridAllocator
from ukv.integrations.sglang import composites as v16
from ukv.integrations.sglang.errors import (
    SGLangArgumentError,
    SGLangConfigError,
    SGLangNotImplementedError,
)
from ukv.integrations.sglang.v0523.allocator import (
    FloatMultiEndedAllocator,
    MultiEndedAllocator,
    install_move_gate,
)

__all__ = [
    "UnifiedMambaSWATokenToKVPoolAllocator",
    "UnifiedMambaTokenToKVPoolAllocator",
    "UnifiedSWAAllocatorBase",
    "UnifiedSWATokenToKVPoolAllocator",
]


def _pages(tokens: float, page_size: int) -> int:
    return -(-math.ceil(tokens) // page_size)


def _new_pages(prefix_lens_cpu: Any, seq_lens_cpu: Any, page_size: int) -> int:
    """Pages an extend opens: per request ``ceil(seq / ps) - ceil(prefix / ps)``."""
    seq = torch.as_tensor(seq_lens_cpu, dtype=torch.int64)
    pre = torch.as_tensor(prefix_lens_cpu, dtype=torch.int64)
    return int(((seq + page_size - 1) // page_size - (pre + page_size - 1) // page_size).sum())


class _V23Surface:
    """What every 0.5.23 composite adds to the 0.5.16 drop-in's: tables, translates for
    transfers, refused gates, free groups as 0.5.23 keeps them, zeroed pages, segments."""

    unified_buffer: Any
    full_attn_allocator: Any
    page_size: int
    lazy_compaction: bool
    _kvcache: Any
    _side_cls: Any = MultiEndedAllocator
    free_group: list[torch.Tensor] | None

    def _members(self) -> tuple[Any, ...]:
        raise NotImplementedError

    # ----- tables and translates -------------------------------------------------------------

    @property
    def full_v2p_page_table(self) -> torch.Tensor:
        """The full side's page table (virtual -> physical, read-only)."""
        return self.full_attn_allocator.virtual_to_physical

    @property
    def full_p2v_page_table(self) -> torch.Tensor:
        """The full side's inverse page table (read-only)."""
        return self.full_attn_allocator.physical_to_virtual

    @property
    def draft_virtual_id_space(self) -> int:
        """Token ids of the full side's id space (minus the padding slot)."""
        return int(self.full_attn_allocator.max_slots) - 1

    def translate_write_loc(
        self, loc: torch.Tensor, *, out: torch.Tensor | None = None, out_width: int | None = None
    ) -> torch.Tensor:
        """The write loc (virtual tokens) -> full physical tokens."""
        return self.full_attn_allocator.translate_write_loc(loc, out=out, out_width=out_width)

    def translate_kv_indices_for_transfer(self, kv_indices: torch.Tensor) -> torch.Tensor:
        """Virtual tokens -> full physical tokens (int64), as a transfer addresses them."""
        return self.full_attn_allocator.translate_kv_loc(kv_indices.to(torch.int64))

    # ----- refused: move gates, HiCache -------------------------------------------------------

    def _gate(self, slot: str, feature: str, gate: Callable[[], bool]) -> None:
        install_move_gate(
            self._members(),
            slot=slot,
            gate=gate,
            feature=feature,
            lazy_compaction=self.lazy_compaction,
        )

    def set_disagg_move_gate(self, gate: Callable[[], bool]) -> None:
        """Refused (PD disaggregation): see ``v0523.allocator.install_move_gate``."""
        self._gate("disagg_move_gate", "PD disaggregation", gate)

    def set_host_transfer_move_gate(self, gate: Callable[[], bool]) -> None:
        """Refused (HiCache): see ``v0523.allocator.install_move_gate``."""
        self._gate("host_transfer_move_gate", "HiCache", gate)

    def set_hicache_transfer_done_event(self, transfer_key: Any, event: Any) -> None:
        """Refused: HiCache is not served with the unified pool."""
        self.full_attn_allocator.set_hicache_transfer_done_event(transfer_key, event)

    def prewarm_compaction(self) -> None:
        """Nothing to warm: ukv's plan executor is ready at construction."""

    def verify_byte_accounting(self) -> list[str]:
        """ukv's invariants of the whole pool (empty when they hold)."""
        return list(self.full_attn_allocator.verify_byte_accounting())

    def mamba_full_cache_donor(self) -> Any:
        """None: no state side (the Mamba composites return themselves)."""
        return None

    # ----- hand-out ---------------------------------------------------------------------------

    def alloc(self, need_size: int) -> torch.Tensor | None:
        """The 0.5.16 drop-in's ``alloc``, the pages it opened zeroed (as SGLang 0.5.23)."""
        return self._zero_new_pages(super().alloc(need_size))  # type: ignore[misc]

    def alloc_extend(self, *args: Any, **kwargs: Any) -> torch.Tensor | None:
        """The 0.5.16 drop-in's ``alloc_extend``, new pages zeroed."""
        return self._zero_new_pages(super().alloc_extend(*args, **kwargs))  # type: ignore[misc]

    def alloc_decode(self, seq_lens: Any, seq_lens_cpu: Any, last_loc: Any) -> torch.Tensor | None:
        """The 0.5.16 drop-in's ``alloc_decode``, a new page zeroed."""
        out = super().alloc_decode(seq_lens, seq_lens_cpu, last_loc)  # type: ignore[misc]
        return self._zero_new_pages(out)

    def _zero_new_pages(self, tokens: torch.Tensor | None) -> torch.Tensor | None:
        """Zero the page envelopes an allocation opened on each K/V side, as SGLang 0.5.23
        does, so a page's never-written slots read as zeros (finite), whatever a
        neighbour's bytes were. Sides whose kvcache is not the drop-in's are skipped."""
        if tokens is None or tokens.numel() == 0:
            return tokens
        for side in self._members():
            zero = getattr(side.get_kvcache(), "zero_pages_of_new_tokens", None)
            if zero is not None:
                zero(side.translate_kv_loc(tokens))
        return tokens

    # ----- free groups and segments -----------------------------------------------------------

    def free_group_begin(self) -> None:
        """Queue frees until :meth:`free_group_end` (ukv holds them; one plan then)."""
        super().free_group_begin()  # type: ignore[misc]
        self.free_group = []

    def free_group_end(self) -> None:
        """Apply the queued frees in one plan."""
        super().free_group_end()  # type: ignore[misc]
        self.free_group = None

    def flush_deferred_full_frees(self) -> None:
        """Apply the frees queued in an open free group, keeping the group open."""
        if getattr(self, "free_group", None) is not None:
            self.free_group_end()
            self.free_group_begin()

    def _reps(self, free_index: torch.Tensor, start_pos: int) -> torch.Tensor:
        return self.full_attn_allocator._page_reps(free_index.detach().to(torch.int64), start_pos)

    def free_segment(self, free_index: torch.Tensor, *, start_pos: int) -> None:
        """Free ``kv_row[start_pos : start_pos + n]`` of one request (whole pages).

        Raises:
            SGLangMisalignedError: ``start_pos`` not on a page boundary.
        """
        if free_index is None or free_index.numel() == 0:
            return
        self.free(self._reps(free_index, start_pos))  # type: ignore[attr-defined]

    def get_extend_allocation_demand(
        self,
        prefix_lens_cpu: Any,
        seq_lens_cpu: Any,
        *,
        conservative_num_tokens: int,
        shard_size: int,
    ) -> int:
        """Tokens an extend takes: whole new pages (the conservative count when sharded)."""
        if shard_size != 1:
            return conservative_num_tokens
        return self.page_size * _new_pages(prefix_lens_cpu, seq_lens_cpu, self.page_size)


class _MambaDonor:
    """SGLang 0.5.23's ``MambaFullCacheDonor``: a composite that frees full tokens so
    state slots fit (both Mamba composites)."""

    unified_buffer: Any
    mamba_allocator: Any
    _shortage: MambaHybridAllocator | None
    flush_deferred_full_frees: Callable[[], None]  # _V23Surface's

    def mamba_full_cache_donor(self) -> Any:
        """This composite."""
        return self

    def full_tokens_before_mamba_recheck(self, target_size: int) -> int:
        """Full tokens to free before ``target_size`` state slots fit: ukv's exact
        shortage (0 when they fit, and when no amount would do: the recheck fails)."""
        if self._shortage is None:
            self._shortage = MambaHybridAllocator(self.unified_buffer.ukv_pool, "full", "mamba")
        have = self.mamba_allocator.schedulable_available_size()
        if int(target_size) <= have:
            return 0
        return int(self._shortage.tokens_to_release_for_states(int(target_size)) or 0)

    def prepare_mamba_allocation(self, target_size: int) -> None:
        """Apply frees held in an open group (ukv flushes the full side itself when a
        state allocation needs its bytes)."""
        self.flush_deferred_full_frees()

    def _state_pool(self) -> Any:
        raise NotImplementedError

    def _kv_cpu_copy(self, indices: torch.Tensor) -> Any:
        """Host copy of the K/V of these **virtual** tokens (the composite's side(s))."""
        raise NotImplementedError

    def _kv_load_cpu_copy(self, kv: Any, indices: torch.Tensor) -> None:
        """Write :meth:`_kv_cpu_copy`'s copy back at these **virtual** tokens."""
        raise NotImplementedError

    def get_cpu_copy(
        self, indices: torch.Tensor, mamba_indices: Any = None, req_pool_index: Any = None
    ) -> Any:
        """Host copies of the K/V of these **virtual** tokens and, optionally, of the
        request's state slot (translated to its physical slot)."""
        return self._kv_cpu_copy(indices), self._copy_state(mamba_indices)

    def load_cpu_copy(
        self,
        kv_cache_cpu: Any,
        indices: torch.Tensor,
        mamba_indices: Any = None,
        req_pool_index: Any = None,
    ) -> None:
        """Write :meth:`get_cpu_copy`'s copies back at these **virtual** tokens / slot."""
        kv, states = kv_cache_cpu
        self._load_state(states, mamba_indices)
        self._kv_load_cpu_copy(kv, indices)

    def _copy_state(self, mamba_indices: Any) -> Any:
        """Host copy of a request's state slot (SGLang passes it 0-d), or None."""
        if mamba_indices is None:
            return None
        slots = v16._slot_ids(mamba_indices).to(torch.int64)
        return self._state_pool().get_cpu_copy(self.mamba_allocator.translate_kv_loc(slots))

    def _load_state(self, states: Any, mamba_indices: Any) -> None:
        """Write :meth:`_copy_state`'s copy back at the request's (new) slot.

        Raises:
            SGLangArgumentError: a state copy without ``mamba_indices`` or the reverse
                (before anything is written).
        """
        if (states is None) != (mamba_indices is None):
            raise SGLangArgumentError(
                "load_cpu_copy: the copy and mamba_indices disagree on a state (nothing written)"
            )
        if states is not None:
            slots = v16._slot_ids(mamba_indices).to(torch.int64)
            self._state_pool().load_cpu_copy(states, self.mamba_allocator.translate_kv_loc(slots))


class UnifiedMambaTokenToKVPoolAllocator(
    _MambaDonor, _V23Surface, v16.UnifiedMambaTokenToKVPoolAllocator
):
    """Full-attention tokens plus the state side's slots (SGLang 0.5.23's surface).

    Args:
        As the 0.5.16 drop-in's ``UnifiedMambaTokenToKVPoolAllocator``.
    """

    _side_cls = MultiEndedAllocator

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.free_group: list[torch.Tensor] | None = None  # type: ignore[assignment]
        self.free_page_reps_group: list[torch.Tensor] | None = None
        self._shortage: MambaHybridAllocator | None = None
        self.kvcache_full_translate()

    def kvcache_full_translate(self) -> None:
        """Give the full K/V pool its host-transfer translate (virtual -> physical)."""
        full = getattr(self._kvcache, "full_kv_pool", None)
        if full is not None:
            full.host_transfer_translate = self.full_attn_allocator.translate_kv_loc

    def _members(self) -> tuple[Any, ...]:
        return (self.full_attn_allocator, self.mamba_allocator)

    def clear(self) -> None:
        """Free everything on both sides."""
        super().clear()
        self.free_group = None

    # ----- retraction (virtual ids; the copy format is the drop-in's own) ---------------------

    def _state_pool(self) -> Any:
        return self._kvcache.mamba_pool

    def _kv_cpu_copy(self, indices: torch.Tensor) -> Any:
        return self._kvcache.full_kv_pool.get_cpu_copy(
            self.translate_kv_loc(indices.to(torch.int64))
        )

    def _kv_load_cpu_copy(self, kv: Any, indices: torch.Tensor) -> None:
        self._kvcache.full_kv_pool.load_cpu_copy(kv, self.translate_kv_loc(indices.to(torch.int64)))


class UnifiedSWAAllocatorBase(_V23Surface, v16.UnifiedSWATokenToKVPoolAllocator):
    """Full and SWA over one virtual id space (SGLang 0.5.23's shared surface).

    Args:
        unified_buffer, kvcache, device, page_size, need_sort, forward_stream,
            lazy_compaction: As the 0.5.16 drop-in's SWA composite.
        full_max_total_num_tokens, swa_max_total_num_tokens: The static caps, both or
            neither; without them the caps are what each side can take of the empty pool.

    Raises:
        SGLangConfigError: one cap given without the other.
    """

    _side_cls = MultiEndedAllocator
    _swa_side_cls = MultiEndedAllocator
    _swa_ring_cost = 0

    def __init__(
        self,
        *,
        unified_buffer: Any,
        kvcache: Any,
        device: str,
        full_max_total_num_tokens: int | None = None,
        swa_max_total_num_tokens: int | None = None,
        page_size: int = 1,
        need_sort: bool = False,
        forward_stream: Any = None,
        lazy_compaction: bool = False,
    ) -> None:
        if (full_max_total_num_tokens is None) != (swa_max_total_num_tokens is None):
            raise SGLangConfigError(
                "full_max_total_num_tokens and swa_max_total_num_tokens must either both be "
                "set or both be omitted"
            )
        legacy = full_max_total_num_tokens is not None
        super().__init__(
            unified_buffer=unified_buffer,
            kvcache=kvcache,
            device=device,
            full_max_total_num_tokens=int(full_max_total_num_tokens or 0),
            swa_max_total_num_tokens=int(swa_max_total_num_tokens or 0),
            page_size=page_size,
            need_sort=need_sort,
            forward_stream=forward_stream,
            lazy_compaction=lazy_compaction,
        )
        self._build_more_sides(device=device, need_sort=need_sort, forward_stream=forward_stream)
        if not legacy:
            fa = self.full_attn_allocator
            free_ids = fa.free_virtual_ids
            self._size_full = fa.available_size()
            self._size_swa = min(
                self.swa_attn_allocator.available_size(),
                (0 if free_ids is None else int(free_ids.numel())) * page_size,
            )
        self._full_max_total_num_tokens = self._size_full
        self._swa_max_total_num_tokens = self._size_swa
        self.free_group: list[torch.Tensor] | None = None  # type: ignore[assignment]
        self.free_page_reps_group: list[torch.Tensor] | None = None
        for name, side in (("full", "full_kv_pool"), ("swa", "swa_kv_pool")):
            pool = getattr(kvcache, side, None)
            if pool is not None:
                cap = self._size_full if name == "full" else self._size_swa
                pool.host_capacity_tokens = cap
                pool.host_capacity_bytes = cap * unified_buffer.spec(name).entry_bytes()
        if getattr(kvcache, "full_kv_pool", None) is not None:
            kvcache.full_kv_pool.host_transfer_translate = self.full_attn_allocator.translate_kv_loc

    def _build_more_sides(self, *, device: str, need_sort: bool, forward_stream: Any) -> None:
        """Build sides beyond the pair (the tri-pool's state END)."""

    def _members(self) -> tuple[Any, ...]:
        return (self.full_attn_allocator, self.swa_attn_allocator)

    # ----- 0.5.23's views of the capacity ------------------------------------------------------

    def conserve_full_available_size(self) -> int:
        """The full side's static cap minus its live tokens (the leak check's view)."""
        return self._conserve_full_available_size()

    def conserve_swa_available_size(self) -> int:
        """The SWA side's static cap minus its live tokens."""
        return self._conserve_swa_available_size()

    @property
    def current_full_capacity(self) -> int:
        """Full tokens available plus live."""
        return self.full_available_size() + self.full_attn_allocator.allocated_count()

    @property
    def current_swa_capacity(self) -> int:
        """SWA tokens available plus live."""
        return self.swa_available_size() + self.swa_attn_allocator.allocated_count()

    @property
    def swa_v2p_page_table(self) -> torch.Tensor:
        """The SWA side's page table, indexed by full's virtual pages (read-only)."""
        return self.swa_attn_allocator.virtual_to_physical

    def translate_loc_from_full_to_swa(
        self, kv_indices: torch.Tensor, *, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Virtual tokens -> SWA physical tokens, **int64** (0.5.23); released -> 0."""
        return self.swa_attn_allocator.translate_kv_loc(kv_indices, out=out)

    def translate_swa_indices_for_transfer(self, kv_indices: torch.Tensor) -> torch.Tensor:
        """As :meth:`translate_loc_from_full_to_swa`, on int64 ids."""
        return self.swa_attn_allocator.translate_kv_loc(kv_indices.to(torch.int64))

    # ----- allocation -------------------------------------------------------------------------

    def alloc_extend_swa_tail(
        self,
        prefix_lens: torch.Tensor,
        prefix_lens_cpu: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_cpu: torch.Tensor,
        last_loc: torch.Tensor,
        extend_num_tokens: int,
        swa_tail_len: int,
    ) -> torch.Tensor | None:
        """One request's extend with full K/V for every new token and SWA K/V for the
        last ``swa_tail_len`` only (a decode node's preallocation); None when it does
        not fit (nothing changes).

        Raises:
            SGLangArgumentError: more than one request, or a tail outside the extend.
        """
        if len(prefix_lens_cpu) != 1 or not 0 <= swa_tail_len <= extend_num_tokens:
            raise SGLangArgumentError(
                f"alloc_extend_swa_tail: one request and 0 <= swa_tail_len <= {extend_num_tokens}"
            )
        fa, sa, ps = self.full_attn_allocator, self.swa_attn_allocator, self.page_size
        new_pages = _new_pages(prefix_lens_cpu, seq_lens_cpu, ps)
        prefix, seq = int(prefix_lens_cpu[0]), int(seq_lens_cpu[0])
        first_new = -(-prefix // ps)
        swa_pages = (
            (-(-seq // ps) - max(first_new, (seq - swa_tail_len) // ps)) if swa_tail_len else 0
        )
        if not self.ensure_capacity(new_pages * ps, swa_pages * ps):
            return None
        out = fa.alloc_extend(
            prefix_lens, prefix_lens_cpu, seq_lens, seq_lens_cpu, last_loc, extend_num_tokens
        )
        if out is None:
            return None
        if swa_tail_len and swa_pages:
            host = out.to(torch.int64).cpu()
            opened = torch.unique(host[host % ps == 0] // ps)
            tail = torch.unique(host[-swa_tail_len:] // ps)
            try:
                sa.alloc_with_virtual(tail[torch.isin(tail, opened)])
            except SGLangArgumentError:
                fa.free(out)
                return None
        return self._zero_new_pages(out)

    # ----- frees ------------------------------------------------------------------------------

    def free_swa(self, free_index: torch.Tensor) -> None:
        """Release the SWA side of tokens that left the window; tokens whose SWA side is
        already gone are skipped, as SGLang 0.5.23 skips them (its radix cache frees a
        node's full side through ``full_attn_allocator`` first, which in ukv releases
        both sides). Inside a free group the SWA frees wait for the group's end and then
        skip what the group's full frees released."""
        if free_index is None or free_index.numel() == 0:
            return
        if self.free_group is not None:
            self._swa_group.append(free_index.detach().clone())
            return
        # The 0.5.16 drop-in's: queued frees applied, then the core releases the ids still
        # bound on the SWA side and skips the rest, at once (no selection on the device).
        super().free_swa(free_index.detach())

    def free_group_begin(self) -> None:
        """Queue frees until :meth:`free_group_end`."""
        super().free_group_begin()
        self._swa_group: list[torch.Tensor] = []

    def free_group_end(self) -> None:
        """Apply the group's frees in one plan, then its SWA frees of tokens the group
        did not release whole."""
        super().free_group_end()
        pending, self._swa_group = self._swa_group, []
        if pending:
            self.free_swa(torch.cat(pending))

    def free_full(self, free_index: torch.Tensor) -> None:
        """Release the full side (and the id) of tokens whose SWA side is released."""
        self.free(free_index)

    def free_swa_segment(self, free_index: torch.Tensor, *, start_pos: int) -> None:
        """Release the SWA side of a page-aligned kv-row segment."""
        if free_index is None or free_index.numel() == 0:
            return
        self.free_swa(self._reps(free_index, start_pos))

    def free_full_segment(self, free_index: torch.Tensor, *, start_pos: int) -> None:
        """Release the full side of a page-aligned segment whose SWA side is released."""
        self.free_segment(free_index, start_pos=start_pos)

    def set_full_to_swa_mapping(
        self, full_indices: torch.Tensor, swa_indices: torch.Tensor
    ) -> None:
        """Refused unless empty: binding SWA pages the caller chose (HiCache load-back).

        Raises:
            SGLangNotImplementedError: a non-empty mapping.
        """
        if full_indices.numel():
            raise SGLangNotImplementedError(
                "set_full_to_swa_mapping: the caller cannot choose SWA physical pages in "
                "ukv's core (HiCache load-back is not served; docs/SGLANG.md)"
            )

    def clear_full_to_swa_mapping(self, full_indices: torch.Tensor) -> None:
        """Nothing to clear: the SWA side's table is the mapping."""

    def clear(self) -> None:
        """Free everything."""
        super().clear()
        self.free_group = None

    def resize(self, config: Any) -> None:
        """Refused: post-capture backing (the only reason to resize) is not served.

        Raises:
            SGLangNotImplementedError: always.
        """
        raise SGLangNotImplementedError(
            "resize: post-capture backing is not served (docs/SGLANG.md)"
        )

    # ----- pricing a page demand ---------------------------------------------------------------

    def _fits(
        self,
        full_pages: int,
        swa_pages: int,
        *,
        full_reclaim: int = 0,
        swa_reclaim: int = 0,
        empty_pool: bool = False,
    ) -> bool:
        """Whether ``full_pages`` more full pages and ``swa_pages`` more SWA pages fit
        once ``*_reclaim`` live pages of each side are freed, on the pool as ukv packs it
        (an allocation that needs it flushes and slides in its own plan)."""
        fa, sa = self.full_attn_allocator, self.swa_attn_allocator
        if min(full_pages, swa_pages) < 0:
            return False
        lf = 0 if empty_pool else fa.allocated_count() // self.page_size
        ls = 0 if empty_pool else sa.allocated_count() // self.page_size
        tf = lf - (0 if empty_pool else min(lf, max(0, int(full_reclaim)))) + full_pages
        ts = ls - (0 if empty_pool else min(ls, max(0, int(swa_reclaim)))) + swa_pages
        ids = fa.num_virtual_ids - fa.min_page_index
        if tf > min(ids, fa.num_pages - fa.min_page_index) or ts > min(
            ids, sa.num_pages - sa.min_page_index
        ):
            return False
        return self._bytes_fit(tf, ts, empty_pool)

    def _bytes_fit(self, full_total: int, swa_total: int, empty_pool: bool) -> bool:
        """The pair, packed at the two ends: the up END's top within the down END's base."""
        fa, sa = self.full_attn_allocator, self.swa_attn_allocator
        up, down = (sa, fa) if fa.grow_direction == "down" else (fa, sa)
        up_total, down_total = (swa_total, full_total) if up is sa else (full_total, swa_total)
        high = (up.min_page_index + up_total) * up.entry_bytes_per_page
        return high <= (down.num_pages - down_total) * down.entry_bytes_per_page

    def ensure_capacity(self, full_tokens: int, swa_tokens: int) -> bool:
        """Whether ``full_tokens`` / ``swa_tokens`` more fit (ukv's allocation compacts by
        itself when it must, so nothing is flushed here)."""
        if full_tokens < 0 or swa_tokens < 0:
            return False
        return self._fits(_pages(full_tokens, self.page_size), _pages(swa_tokens, self.page_size))

    def reclaim_plan(
        self,
        full_tokens: float,
        swa_tokens: float,
        *,
        full_evictable_tokens: int = 0,
        swa_evictable_tokens: int = 0,
        empty_pool: bool = False,
        prefer_swa: bool = False,
    ) -> tuple[int, int] | None:
        """The fewest (full, SWA) tokens to evict before the demand fits (SWA minimised
        first, or full with ``prefer_swa``); None when no eviction of the evictable
        tokens would do."""
        if full_tokens < 0 or swa_tokens < 0:
            return None
        ps = self.page_size
        nf, ns = _pages(full_tokens, ps), _pages(swa_tokens, ps)

        def fits(rf: int, rs: int) -> bool:
            return self._fits(nf, ns, full_reclaim=rf, swa_reclaim=rs, empty_pool=empty_pool)

        if fits(0, 0):
            return (0, 0)
        if empty_pool:
            return None
        mf = (
            min(self.full_attn_allocator.allocated_count(), max(0, int(full_evictable_tokens)))
            // ps
        )
        ms = min(self.swa_attn_allocator.allocated_count(), max(0, int(swa_evictable_tokens))) // ps
        if not fits(mf, ms):
            return None
        if prefer_swa:
            rf = _first(mf, lambda v: fits(v, ms))
            rs = _first(ms, lambda v: fits(rf, v))
        else:
            rs = _first(ms, lambda v: fits(mf, v))
            rf = _first(mf, lambda v: fits(v, rs))
        return rf * ps, rs * ps

    def can_reserve(
        self,
        full_tokens: float,
        swa_tokens: float,
        *,
        full_evictable_tokens: int = 0,
        swa_evictable_tokens: int = 0,
        empty_pool: bool = False,
        require_token_slack: bool = False,
    ) -> bool:
        """Whether the demand fits once the evictable tokens are freed (or in the empty
        pool); with ``require_token_slack`` a demand at a static cap does not."""
        if full_tokens < 0 or swa_tokens < 0:
            return False
        if require_token_slack and (full_tokens >= self.size_full or swa_tokens >= self.size_swa):
            return False
        plan = self.reclaim_plan(
            full_tokens,
            swa_tokens,
            full_evictable_tokens=full_evictable_tokens,
            swa_evictable_tokens=swa_evictable_tokens,
            empty_pool=empty_pool,
        )
        return plan is not None

    def prealloc_fits_assumes_reclaim(self) -> bool:
        """True: :meth:`prealloc_fits` answers for the pool after reclaiming."""
        return True

    def prealloc_ceiling_fits(self, full_tokens: int, swa_tokens: int) -> bool | None:
        """Whether the demand fits the empty pool."""
        return self.can_reserve(full_tokens, swa_tokens, empty_pool=True)

    def prealloc_fits(
        self,
        tree_cache: Any,
        full_tokens: int,
        swa_tokens: int,
        *,
        full_budget_tokens: int,
        swa_budget_tokens: int | None = None,
    ) -> bool:
        """Both sides priced together against the pool (the scheduler's budgets folded
        into the demand, as SGLang 0.5.23 does)."""
        fe, se = tree_cache.full_evictable_size(), tree_cache.swa_evictable_size()
        full_tokens += self.full_available_size() + fe - full_budget_tokens
        if swa_budget_tokens is not None:
            swa_tokens += self.swa_available_size() + se - swa_budget_tokens
        return self.can_reserve(
            full_tokens, swa_tokens, full_evictable_tokens=fe, swa_evictable_tokens=se
        )

    def reclaim_for_prealloc(
        self, tree_cache: Any, full_tokens: int, swa_tokens: int
    ) -> str | None:
        """Evict what the demand needs; None when it is ready, else the shortfall."""
        ready = self.evict_to_free_tokens(tree_cache, full_tokens, swa_num_tokens=swa_tokens)
        if ready is None:
            ready = self.ensure_capacity(full_tokens, swa_tokens)
        return (
            None
            if ready
            else f"Unified FULL/SWA reclamation insufficient: needed=({full_tokens}, {swa_tokens})"
        )

    def evict_to_free_tokens(
        self, tree_cache: Any, num_tokens: int, *, swa_num_tokens: int | None = None
    ) -> bool | None:
        """Evict the fewest tree tokens that make ``num_tokens`` (and ``swa_num_tokens``)
        fit; whether they fit, or None when the tree cannot share prefixes or no eviction
        would do."""
        if tree_cache is None or not tree_cache.supports_prefix_sharing():
            return None
        from sglang.srt.mem_cache.base_prefix_cache import EvictParams  # type: ignore[import-not-found]

        swa = num_tokens if swa_num_tokens is None else swa_num_tokens
        self.flush_deferred_full_frees()
        plan = self.reclaim_plan(
            num_tokens,
            swa,
            full_evictable_tokens=tree_cache.full_evictable_size(),
            swa_evictable_tokens=tree_cache.swa_evictable_size(),
        )
        if plan is None:
            return self._evict_states(tree_cache, num_tokens, swa)
        if plan != (0, 0):
            tree_cache.evict_for_alloc(
                EvictParams(num_tokens=plan[0], swa_num_tokens=plan[1]),
                allocation_reclaim_satisfied=lambda: self.reclaim_plan(num_tokens, swa) == (0, 0),
            )
        return self.ensure_capacity(num_tokens, swa)

    def _evict_states(self, tree_cache: Any, full_tokens: int, swa_tokens: int) -> bool | None:
        """What to do when evicting tokens alone cannot make room (the pair: nothing)."""
        return None

    def create_prefill_budget(self, tree_cache: Any, *, num_mixed_decode_tokens: int = 0) -> Any:
        """SGLang's shared-envelope prefill budget over this allocator."""
        from sglang.srt.mem_cache.prefill_budget import (  # type: ignore[import-not-found]
            SharedSWAPrefillBudget,
        )

        return SharedSWAPrefillBudget(
            self, tree_cache, num_mixed_decode_tokens=num_mixed_decode_tokens
        )

    def swa_capacity_and_available(self, *, full_capacity: int, swa_capacity: int) -> Any:
        """``((full capacity, available), (SWA capacity, available))`` now."""
        return (
            (self.current_full_capacity, self.full_available_size()),
            (self.current_swa_capacity, self.swa_available_size()),
        )

    def max_new_tokens_for_memory(
        self,
        input_tokens: int,
        max_new_tokens: int,
        *,
        token_capacity: int,
        sliding_window_size: int | None,
        chunk_size: int | None,
    ) -> int | None:
        """The most new tokens a prompt of ``input_tokens`` can generate in the empty
        pool (None when the prompt alone does not fit)."""
        from sglang.srt.mem_cache.prefill_budget import (  # type: ignore[import-not-found]
            estimate_swa_kv_tokens,
        )

        def fits(n: int) -> bool:
            swa = estimate_swa_kv_tokens(
                input_tokens,
                n,
                sliding_window_size=sliding_window_size,
                page_size=self.page_size,
                allocation_limit=chunk_size,
            )
            return self.can_reserve(
                input_tokens + n + self.page_size, swa, empty_pool=True, require_token_slack=True
            )

        if not fits(0):
            return None
        return max_new_tokens if fits(max_new_tokens) else _last(max_new_tokens, fits)


def _first(high: int, predicate: Callable[[int], bool]) -> int:
    """The least ``v`` in ``[0, high]`` with ``predicate(v)`` (``predicate(high)`` holds)."""
    low = 0
    while low < high:
        mid = (low + high) // 2
        if predicate(mid):
            high = mid
        else:
            low = mid + 1
    return low


def _last(high: int, predicate: Callable[[int], bool]) -> int:
    """The greatest ``v`` in ``[0, high]`` with ``predicate(v)`` (``predicate(0)`` holds)."""
    low = 0
    while low < high:
        mid = (low + high + 1) // 2
        if predicate(mid):
            low = mid
        else:
            high = mid - 1
    return low


class UnifiedSWATokenToKVPoolAllocator(UnifiedSWAAllocatorBase):
    """The two-END full + SWA composite (SGLang 0.5.23)."""

    def available_size(self) -> int:
        """Joint tokens ``alloc`` gets, the urgent flush it runs when short included
        (ukv's exact ``joint_schedulable_pages``). SGLang 0.5.23's lazy count drains both
        sides' holes into the answer too (``_compute_available_size``); counting only what
        fits without compacting (the 0.5.16 layout's answer) reported less than SGLang
        right after frees, and its ``check_decode_capacity`` then retracted requests that
        SGLang's pool decodes (found by the scheduler driver). Equal in eager mode."""
        return int(self._joint.schedulable_available_size())

    def get_cpu_copy(
        self, indices: torch.Tensor, mamba_indices: Any = None, req_pool_index: Any = None
    ) -> Any:
        """Host copies of both K/V sides of these **virtual** tokens (SWA side: only the
        tokens it still binds). ``req_pool_index`` (0.5.23's ``Req.offload_kv_cache``
        passes it; SGLang's MHA pools ignore it) is accepted."""
        return super().get_cpu_copy(indices, mamba_indices)

    def load_cpu_copy(
        self,
        kv_cache_cpu: Any,
        indices: torch.Tensor,
        mamba_indices: Any = None,
        req_pool_index: Any = None,
    ) -> None:
        """Write :meth:`get_cpu_copy`'s copies back at these **virtual** tokens."""
        super().load_cpu_copy(kv_cache_cpu, indices, mamba_indices)


class UnifiedMambaSWATokenToKVPoolAllocator(_MambaDonor, UnifiedSWAAllocatorBase):
    """The tri-pool: state END (grow-up), SWA float (ukv's middle band), full END
    (grow-down), over one drop-in pool (SGLang 0.5.23's chain).

    Args:
        mamba_kvcache: The state pool (``req_to_token_pool.mamba_pool``).
        full_max_total_num_tokens, swa_max_total_num_tokens: The static caps (required).
        Others: as :class:`UnifiedSWAAllocatorBase`.
    """

    _swa_side_cls = FloatMultiEndedAllocator

    def __init__(
        self,
        *,
        mamba_kvcache: Any,
        full_max_total_num_tokens: int,
        swa_max_total_num_tokens: int,
        **kwargs: Any,
    ) -> None:
        self._mamba_kvcache = mamba_kvcache
        super().__init__(
            full_max_total_num_tokens=full_max_total_num_tokens,
            swa_max_total_num_tokens=swa_max_total_num_tokens,
            **kwargs,
        )
        # None: SGLang's leak checker skips the census of this composite.
        self.free_pages = None  # type: ignore[assignment]
        self.release_pages = None  # type: ignore[assignment]
        self._shortage: MambaHybridAllocator | None = None
        # Retraction copies the state here (translated), not through the state pool with
        # the request's virtual slot id (SGLang's Req would otherwise do that).
        self._kvcache.cpu_copy_carries_mamba = True

    def _build_more_sides(self, *, device: str, need_sort: bool, forward_stream: Any) -> None:
        self.mamba_allocator = self._side_cls(
            kvcache=self._mamba_kvcache,
            unified_buffer=self.unified_buffer,
            sub_pool_name="mamba",
            device=device,
            is_id_owner=True,
            page_size=1,
            need_sort=need_sort,
            forward_stream=forward_stream,
            lazy_compaction=self.lazy_compaction,
        )
        self.mamba_allocator.bind_high_peer(self.swa_attn_allocator)
        self.swa_attn_allocator.bind_low_peer(self.mamba_allocator)

    def _members(self) -> tuple[Any, ...]:
        return (self.full_attn_allocator, self.swa_attn_allocator, self.mamba_allocator)

    def _bytes_fit(self, full_total: int, swa_total: int, empty_pool: bool) -> bool:
        """The chain packed: states at the bottom, full at the top, the SWA float's
        pages on its own grid anywhere between."""
        fa, sa, ma = self.full_attn_allocator, self.swa_attn_allocator, self.mamba_allocator
        states = 0 if empty_pool else ma.allocated_count()
        state_top = (ma.min_page_index + states) * ma.entry_bytes_per_page
        full_base = (fa.num_pages - full_total) * fa.entry_bytes_per_page
        if swa_total == 0:
            return state_top <= full_base
        e = sa.entry_bytes_per_page
        return max(-(-state_top // e), sa.min_page_index) + swa_total <= full_base // e

    def _evict_states(self, tree_cache: Any, full_tokens: int, swa_tokens: int) -> bool | None:
        """Tokens alone cannot make room: evict cached states whose bytes block the gap."""
        from sglang.srt.mem_cache.base_prefix_cache import EvictParams  # type: ignore[import-not-found]

        if not tree_cache.mamba_evictable_size():
            return None
        fa, sa, ma = self.full_attn_allocator, self.swa_attn_allocator, self.mamba_allocator
        need = _pages(full_tokens, self.page_size) * fa.entry_bytes_per_page
        need += _pages(swa_tokens, self.page_size) * sa.entry_bytes_per_page
        tree_cache.evict_for_alloc(EvictParams(mamba_num=-(-need // ma.entry_bytes_per_page)))
        return self.ensure_capacity(full_tokens, swa_tokens)

    def _state_pool(self) -> Any:
        return self._mamba_kvcache

    def _kv_cpu_copy(self, indices: torch.Tensor) -> Any:
        return self._kvcache.get_cpu_copy(indices)  # both K/V sides

    def _kv_load_cpu_copy(self, kv: Any, indices: torch.Tensor) -> None:
        self._kvcache.load_cpu_copy(kv, indices)

    def mamba_slot_full_token_cost(self) -> int:
        """Tokens (a full and an SWA entry each) of bytes one state slot takes."""
        per_token = self.full_attn_allocator.entry_bytes + self.swa_attn_allocator.entry_bytes
        return -(-self.mamba_allocator.entry_bytes_per_page // per_token)

    def debug_print(self) -> str:
        """Each side's and the joint availability."""
        return super().debug_print() + f", #mamba-available={self.mamba_allocator.available_size()}"

    def clear(self) -> None:
        """Free everything (the three sides)."""
        super().clear()
        self.mamba_allocator.clear()

    def create_prefill_budget(self, tree_cache: Any, *, num_mixed_decode_tokens: int = 0) -> Any:
        """SGLang's per-side SWA prefill budget (as SGLang's tri-pool keeps it)."""
        from sglang.srt.mem_cache.prefill_budget import (  # type: ignore[import-not-found]
            SWAPrefillBudget,
        )

        return SWAPrefillBudget(self, tree_cache, num_mixed_decode_tokens=num_mixed_decode_tokens)

    def max_new_tokens_for_memory(
        self,
        input_tokens: int,
        max_new_tokens: int,
        *,
        token_capacity: int,
        sliding_window_size: int | None,
        chunk_size: int | None,
    ) -> int | None:
        """SGLang's token-count rule (its tri-pool keeps the base allocator's)."""
        paged = -(-input_tokens // self.page_size) * self.page_size
        return max(0, min(max_new_tokens, token_capacity - paged - self.page_size - 1))

    def swa_capacity_and_available(self, *, full_capacity: int, swa_capacity: int) -> Any:
        """The scheduler's capacities with the static-cap views (SGLang's tri-pool)."""
        return (
            (full_capacity, self.conserve_full_available_size()),
            (swa_capacity, self.conserve_swa_available_size()),
        )
