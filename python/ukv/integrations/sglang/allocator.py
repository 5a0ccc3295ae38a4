"""``MultiEndedAllocator``: SGLang's per-sub-pool allocator, over ukv's allocator.

SGLang's class keeps its tables and free lists itself and reports every relocation to the
``kvcache`` it was given. The drop-in keeps none: every call goes to ukv's allocator of the
sub-pool (built by the drop-in pool once both sub-pools have an allocator), and the state
SGLang's code reads (``virtual_to_physical``, ``watermark_physical``, frontiers, holes) is
read from ukv. Relocations: ukv moves the bytes of its own buffer in the plan's launch;
when this allocator's ``kvcache`` is a drop-in pool over the same buffer nothing more
happens, otherwise each plan's moves are forwarded to it (``move_kv_cache(dst, src)`` with
page ids expanded to tokens, or ``_copy_from_physical(src, dst)`` for a state pool).
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np
import torch

from ukv.integrations.sglang import bases
from ukv.integrations.sglang.errors import (
    SGLangArgumentError,
    SGLangMisalignedError,
    SGLangNotImplementedError,
    translated,
)
from ukv.integrations.sglang.pool import UnifiedKVPool

__all__ = ["AllocSurface", "MultiEndedAllocator"]

_Base: Any = bases.names["BaseTokenToKVPoolAllocator"]


def _empty_ids(device: Any) -> torch.Tensor:
    return torch.empty(0, dtype=torch.int64, device=_host_or(device))


def _host_or(device: Any) -> torch.device:
    d = torch.device(device)
    return torch.device("cpu") if d.type == "meta" else d


def current_stream() -> Any:
    """The current CUDA stream (a seam for tests on machines without CUDA)."""
    return torch.cuda.current_stream()


def _expand_pages(pages: np.ndarray, page_size: int) -> np.ndarray:
    """Physical pages -> their tokens, ``p*ps + 0..ps-1`` in page order."""
    return (pages[:, None] * page_size + np.arange(page_size, dtype=np.int64)).reshape(-1)


class AllocSurface:
    """SGLang's three allocation calls, over whatever ukv allocator ``_allocating`` names
    (one sub-pool's, or the SWA pair's joint one): the same keywords and results on both
    kinds of allocator SGLang's scheduler holds."""

    page_size: int
    device: Any

    def _allocating(self, what: str) -> Any:
        raise NotImplementedError

    def alloc(self, need_size: int) -> torch.Tensor | None:
        """``need_size`` virtual token ids (whole pages), or None when they do not fit;
        an empty tensor when ``need_size <= 0`` (as SGLang).

        Raises:
            SGLangMisalignedError: ``need_size`` is not a multiple of the page size.
            SGLangArgumentError: called on a non-owner.
        """
        target = self._allocating("alloc")
        if isinstance(need_size, int) and need_size <= 0:
            return _empty_ids(self.device)  # as SGLang: nothing asked, nothing taken
        if isinstance(need_size, int) and need_size % self.page_size:
            raise SGLangMisalignedError(
                f"alloc(need_size={need_size}) is misaligned: not a multiple of "
                f"page_size={self.page_size}"
            )
        with translated():
            return target.alloc(need_size)

    def alloc_extend(
        self,
        prefix_lens: torch.Tensor,
        prefix_lens_cpu: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_cpu: torch.Tensor,
        last_loc: torch.Tensor,
        extend_num_tokens: int,
        num_new_pages: int | None = None,
    ) -> torch.Tensor | None:
        """The new tokens of an extend batch, reusing each request's last page; None when
        they do not fit. ``num_new_pages`` is accepted (ukv counts them itself)."""
        target = self._allocating("alloc_extend")
        with translated():
            return target.alloc_extend(
                prefix_lens, prefix_lens_cpu, seq_lens, seq_lens_cpu, last_loc, extend_num_tokens
            )

    def alloc_decode(
        self, seq_lens: torch.Tensor, seq_lens_cpu: torch.Tensor, last_loc: torch.Tensor
    ) -> torch.Tensor | None:
        """One token per request (valid at every page size); None when it does not fit.

        Raises:
            SGLangArgumentError: a ``last_loc`` that is not the live token just before the
                request's new one.
        """
        target = self._allocating("alloc_decode")
        with translated():
            return target.alloc_decode(seq_lens, seq_lens_cpu, last_loc)


class MultiEndedAllocator(AllocSurface, _Base):
    """One sub-pool's allocator (SGLang's name and keywords), backed by ukv.

    Args:
        kvcache: The object that owns this sub-pool's bytes in SGLang (told of every
            relocation unless it is a drop-in pool over the same buffer).
        unified_buffer: The drop-in :class:`UnifiedKVPool`.
        sub_pool_name: Which sub-pool.
        device: Where ids are handed out.
        is_id_owner: False for the SWA side, which binds its partner's virtual ids.
        page_size: Tokens per page (1 for a state sub-pool).
        need_sort: Accepted (ukv's free order is FIFO by design).
        forward_stream: Overlap mode's forward stream: an eager free (or free-group end)
            first makes the current stream wait on it, since compaction moves bytes the
            in-flight forward may still read (lazy mode needs no barrier).
        lazy_compaction: Lazy compaction (``SGLANG_DISABLE_LAZY_COMPACTION=1`` overrides).

    Raises:
        SGLangConfigError: a claim the pool refuses (see ``UnifiedKVPool.claim``).
    """

    def __init__(
        self,
        *,
        kvcache: Any,
        unified_buffer: UnifiedKVPool,
        sub_pool_name: str,
        device: str,
        is_id_owner: bool,
        page_size: int = 1,
        need_sort: bool = False,
        forward_stream: Any = None,
        lazy_compaction: bool = False,
    ) -> None:
        unified_buffer.claim(
            sub_pool_name, page_size=page_size, is_id_owner=is_id_owner, lazy=lazy_compaction
        )
        spec = unified_buffer.spec(sub_pool_name)
        # The base allocator's state, set here (SGLang's base __init__ is abstract-only).
        self.max_slots = unified_buffer.max_slots(sub_pool_name)
        self.size = self.max_slots
        self.page_size = page_size
        self.dtype = spec.get_dtype()
        self.device = device
        self._kvcache = kvcache
        self.need_sort = need_sort
        self.free_pages = _empty_ids(device)
        self.release_pages = _empty_ids(device)
        self.is_not_in_free_group = True
        self.free_group: list[torch.Tensor] = []
        self.unified_buffer = unified_buffer
        self.sub_pool_name = sub_pool_name
        self.spec = spec
        self.grow_direction = spec.grow_direction
        self.entry_bytes = spec.entry_bytes()
        self.entry_bytes_per_page = self.entry_bytes * page_size
        self.min_slot_index = unified_buffer.min_slot_index(sub_pool_name)
        self.is_id_owner = bool(is_id_owner)
        self.forward_stream = forward_stream
        self.lazy_compaction = unified_buffer._claims[sub_pool_name].lazy
        self._peer: MultiEndedAllocator | None = None
        self._latest_forward_done_event: Any = None
        # Physical page -> the id it was taken under, between take_physical and bind.
        self._taken: dict[int, int] = {}
        unified_buffer.report_moves_to(sub_pool_name, self)

    # ----- ukv behind it -------------------------------------------------------------------------

    @property
    def _sub(self) -> Any:
        """ukv's allocator of this sub-pool (builds ukv's pool if needed)."""
        return self.unified_buffer._sub_allocator(self.sub_pool_name)

    def _report_moves(self, src_pages: np.ndarray, dst_pages: np.ndarray) -> None:
        """Tell a foreign ``kvcache`` about one plan's moves of this sub-pool."""
        kv = self._kvcache
        if kv is None or getattr(kv, "_unified_buffer", None) is self.unified_buffer:
            return  # ukv moved these bytes itself
        device = _host_or(self.device)
        src = torch.from_numpy(_expand_pages(src_pages, self.page_size)).to(device)
        dst = torch.from_numpy(_expand_pages(dst_pages, self.page_size)).to(device)
        if hasattr(kv, "move_kv_cache"):
            kv.move_kv_cache(dst, src)
        else:
            kv._copy_from_physical(src, dst)

    # ----- peer and state ------------------------------------------------------------------------

    def bind_peer(self, peer: MultiEndedAllocator) -> None:
        """Record the allocator of the other end (ukv pairs them in its core anyway)."""
        self._peer = peer

    @property
    def peer(self) -> MultiEndedAllocator | None:
        """The other end's allocator, if bound."""
        return self._peer

    @property
    def virtual_to_physical(self) -> torch.Tensor:
        """Virtual page -> physical page, read-only (writes raise ``ArgumentError``)."""
        return self._sub.v2p

    @property
    def physical_to_virtual(self) -> torch.Tensor:
        """Physical page -> virtual page, read-only."""
        return self._sub.p2v

    @property
    def watermark_physical(self) -> int:
        """Up: the next page to hand out; down: the highest free page."""
        return int(self._sub.watermark)

    @property
    def free_virtual_ids(self) -> torch.Tensor | None:
        """Free virtual pages in hand-out order (FIFO); None on a non-owner."""
        pages = self._sub.free_virtual_pages()
        if pages is None:
            return None
        return torch.from_numpy(pages).to(_host_or(self.device))

    @property
    def num_pages(self) -> int:
        """Physical pages of this sub-pool's index space."""
        return int(self._sub.num_pages)

    @property
    def num_virtual_ids(self) -> int:
        """Virtual pages of this sub-pool's id space (its owner's for a non-owner)."""
        return int(self._sub.num_virtual_pages)

    @property
    def min_page_index(self) -> int:
        """First page above the reserved floor."""
        return int(self._sub.min_page_index)

    @property
    def live_page_count(self) -> int:
        """Live pages (holes and pending pages excluded)."""
        return self._sub.allocated_count() // self.page_size

    def _stats(self) -> Any:
        pool = self.unified_buffer.ukv_pool
        return next(s for s in pool.stats().sub_pools if s.name == self.sub_pool_name)

    def _allocated_pages(self) -> int:
        """Pages between the floor and the watermark: live, holes and pending pages."""
        return int(self._stats().span_pages)

    def allocated_count(self) -> int:
        """Live tokens."""
        return int(self._sub.allocated_count())

    def is_slot_allocated(self, slot: int) -> bool:
        """Whether the page of virtual token ``slot`` is live."""
        with translated():
            return bool(self._sub.is_slot_allocated(slot))

    def _byte_high_frontier(self) -> int:
        """Byte just past this side's last page (up) / the buffer top of its range (down)."""
        if self.grow_direction == "up":
            return self.watermark_physical * self.entry_bytes_per_page
        return self.num_pages * self.entry_bytes_per_page

    def _byte_low_frontier(self) -> int:
        """First byte of this side's range (up) / of its lowest page (down)."""
        if self.grow_direction == "up":
            return self.min_page_index * self.entry_bytes_per_page
        return (self.watermark_physical + 1) * self.entry_bytes_per_page

    @property
    def _free_phys_pages(self) -> torch.Tensor:
        """Physical pages inside this side's span that hold no live page: holes, and pages
        vacated by compaction that wait for a forward (ukv keeps both in its core)."""
        p2v = self._sub.p2v.numpy() if self._sub.p2v.device.type == "cpu" else None
        if p2v is None:
            p2v = self._sub.p2v.cpu().numpy()
        wm = self.watermark_physical
        lo, hi = (
            (self.min_page_index, wm) if self.grow_direction == "up" else (wm + 1, self.num_pages)
        )
        pages = np.arange(lo, hi, dtype=np.int64)
        return torch.from_numpy(pages[p2v[lo:hi] < 0]).to(_host_or(self.device))

    @property
    def _pending_reuse(self) -> dict[str, int]:
        """Pages vacated by compaction that wait for a forward: ``{"pages": n}`` while there
        are any, else empty (ukv keeps them per forward in its core, not per event)."""
        n = int(self._stats().pending_pages)
        return {"pages": n} if n else {}

    @property
    def _pending_reuse_pages_cpu(self) -> set[int]:
        """The pending pages, when there are any: the span's unused pages minus the holes
        cannot be told apart from the outside, so this is empty unless pages are pending,
        and then every unused page of the span (a superset)."""
        if not self._pending_reuse:
            return set()
        return {int(p) for p in self._free_phys_pages.tolist()}

    @property
    def _lazy_max_moves_per_call(self) -> int:
        """The page-move cap of one non-urgent flush (settable any time; the next flush
        obeys it; ukv flushes both sides together, so the cap is the pool's)."""
        return int(self.unified_buffer.max_moves)

    @_lazy_max_moves_per_call.setter
    def _lazy_max_moves_per_call(self, value: int) -> None:
        self.unified_buffer.max_moves = value

    def allocator_state_str(self) -> str:
        """One line of this allocator's state."""
        return (
            f"sub_pool={self.sub_pool_name!r}, grow_direction={self.grow_direction}, "
            f"is_id_owner={self.is_id_owner}, page_size={self.page_size}, "
            f"min_page_index={self.min_page_index}, num_pages={self.num_pages}, "
            f"watermark_physical={self.watermark_physical}, "
            f"allocated_pages={self._allocated_pages()}"
        )

    def get_kvcache(self) -> Any:
        """The kvcache this allocator reports relocations to."""
        return self._kvcache

    # ----- capacity ----------------------------------------------------------------------------

    def available_size(self) -> int:
        """Tokens ``alloc`` can take now (holes included, no compaction of the peer)."""
        return int(self._sub.available_size())

    def schedulable_available_size(self) -> int:
        """Tokens ``alloc`` is guaranteed after an urgent flush of the peer."""
        return int(self._sub.schedulable_available_size())

    # ----- allocation --------------------------------------------------------------------------

    def _allocating(self, what: str) -> Any:
        """ukv's allocator of this sub-pool, for an allocation SGLang's ``what`` asks."""
        self._require_owner(what)
        return self._sub

    def _require_owner(self, what: str) -> None:
        if not self.is_id_owner:
            raise SGLangArgumentError(
                f"{what} on {self.sub_pool_name!r}: a non-owner binds its owner's ids "
                "(use alloc_with_virtual)"
            )

    def alloc_with_virtual(self, virtual_pages: torch.Tensor) -> None:
        """Bind the owner's virtual pages on this non-owner (SWA) side.

        Raises:
            SGLangArgumentError: called on an owner, the SWA side has no room, or a page
                not live on the owner or already bound.
            SGLangInvalidIdError: a page negative, reserved or out of range.
        """
        if self.is_id_owner:
            raise SGLangArgumentError(
                f"alloc_with_virtual on {self.sub_pool_name!r}: an id owner mints its own ids"
            )
        swa = self.unified_buffer.swa_hybrid()
        assert swa is not None, "a non-owner is always the SWA side of a bound pair"
        with translated():
            ok = swa.bind_swa_pages(virtual_pages.detach().cpu())
        if not ok:
            raise SGLangArgumentError(
                f"alloc_with_virtual: no room on {self.sub_pool_name!r} for "
                f"{virtual_pages.numel()} pages (check the joint available_size first)"
            )

    # ----- SGLang's allocation primitives (its alloc's insides; its tests call them) ----------

    def take_physical(self, need_size: int) -> torch.Tensor | None:
        """Physical pages for ``need_size`` tokens, to be named by :meth:`bind`; None when
        they do not fit; empty for ``need_size <= 0``.

        ukv has no physical page without a virtual id: the pages are taken under the ids
        the free queue hands out next, and :meth:`bind` renames them (those ids go back to
        the front of the queue), so the pool stays consistent in between.

        Raises:
            SGLangMisalignedError: ``need_size`` is not a multiple of the page size.
            SGLangArgumentError: called on a non-owner.
        """
        ids = self.alloc(need_size)
        if ids is None or ids.numel() == 0:
            return ids
        pages = ids[:: self.page_size] // self.page_size
        phys = self.virtual_to_physical[pages.to(self.virtual_to_physical.device)]
        self._taken.update(zip(phys.tolist(), pages.tolist()))
        return phys.to(_host_or(self.device))

    def take_physical_pages(self, num_pages: int) -> torch.Tensor | None:
        """:meth:`take_physical` of ``num_pages`` whole pages."""
        return self.take_physical(num_pages * self.page_size)

    def bind(self, virtual_ids: torch.Tensor, physical_ids: torch.Tensor) -> None:
        """Name pages :meth:`take_physical` gave: virtual page ``virtual_ids[k]`` now maps
        to physical page ``physical_ids[k]`` (and back).

        Raises:
            SGLangArgumentError: lengths differ, a physical page that :meth:`take_physical`
                did not give (or was bound already), or a virtual page that is live
                (nothing is bound then).
        """
        virt = [int(v) for v in torch.as_tensor(virtual_ids).reshape(-1).tolist()]
        phys = [int(p) for p in torch.as_tensor(physical_ids).reshape(-1).tolist()]
        unknown = [p for p in phys if p not in self._taken]
        if len(virt) != len(phys) or unknown:
            raise SGLangArgumentError(
                f"bind on {self.sub_pool_name!r}: {len(virt)} virtual for {len(phys)} "
                f"physical pages; physical pages not taken by take_physical: {unknown[:8]}"
            )
        held = [self._taken[p] for p in phys]
        moving = [(h, v) for h, v in zip(held, virt) if h != v]
        if moving:
            src, dst = zip(*moving)
            with translated():
                self._sub.rebind(np.asarray(src, np.int64), np.asarray(dst, np.int64))
        for p in phys:
            del self._taken[p]

    def bind_pages(self, virtual_pages: torch.Tensor, physical_pages: torch.Tensor) -> None:
        """Page-granular :meth:`bind` (the same thing: ukv's tables are per page)."""
        self.bind(virtual_pages, physical_pages)

    def _alloc_bind_fast_or_slow(self, v_pages: torch.Tensor, n: int) -> torch.Tensor | None:
        """Bind the ``n`` caller-chosen virtual pages ``v_pages`` to physical pages (holes
        first, then a fresh extension); their physical pages, None when they do not fit
        (checked first), empty for ``n == 0``. On a non-owner (the SWA side) the pages
        must be live on the owner, as :meth:`alloc_with_virtual` requires.

        Raises:
            SGLangArgumentError: a page that is live here, repeated, or (non-owner) not
                live on the owner.
            SGLangInvalidIdError: a page outside the id space.
        """
        if int(n) == 0:
            return _empty_ids(self.device)
        pages = torch.as_tensor(v_pages).reshape(-1)[: int(n)]
        with translated():
            if self.is_id_owner:
                phys = self._sub.alloc_at(pages)
            else:
                swa = self.unified_buffer.swa_hybrid()
                assert swa is not None, "a non-owner is always the SWA side of a bound pair"
                ok = swa.bind_swa_pages(pages.detach().cpu())
                phys = self.virtual_to_physical[pages.to(self.virtual_to_physical.device)]
                phys = phys if ok else None
        return None if phys is None else phys.to(_host_or(self.device))

    def free(self, free_index: torch.Tensor) -> None:
        """Free the pages of these virtual tokens (eager: compacts now; lazy: holes).

        Raises:
            SGLangDoubleFreeError: an id that is not live (nothing is freed).
            SGLangInvalidIdError: an id out of range or reserved.
        """
        if free_index is None or free_index.numel() == 0:
            return
        self.order_after_forward()
        with translated():
            if self.is_id_owner:
                self._sub.free(free_index)
            else:
                swa = self.unified_buffer.swa_hybrid()
                assert swa is not None
                swa.free_swa(free_index)
            if self.is_not_in_free_group:
                self.unified_buffer.settle_if_lockstep()

    def order_after_forward(self) -> None:
        """Eager mode with a ``forward_stream``: make the current stream wait on it, so
        the compaction a free triggers runs after the forward that may read those bytes."""
        if self.forward_stream is not None and not self.lazy_compaction:
            current_stream().wait_stream(self.forward_stream)

    def free_group_begin(self) -> None:
        """Queue this sub-pool's frees until :meth:`free_group_end` (one compaction)."""
        with translated():
            self._sub.free_group_begin()
        self.is_not_in_free_group = False

    def free_group_end(self) -> None:
        """Apply the queued frees in one pass."""
        self.order_after_forward()
        with translated():
            self._sub.free_group_end()
            self.unified_buffer.settle_if_lockstep()
        self.is_not_in_free_group = True

    def clear(self) -> None:
        """Free every page of this sub-pool."""
        with translated():
            self._sub.clear()
        self.is_not_in_free_group = True

    def clear_inverse_history(self) -> None:
        """Nothing to clear: ukv keeps no relocation history."""

    def backup_state(self) -> tuple[int, ...]:
        """A marker of the current allocation state (for :meth:`restore_state`): the
        watermark, live, unused and moved pages, and a digest of the free-id queue (an
        owner's alloc + free pair leaves the counts as they were but not its queue).

        Costs a copy of the free-id queue (SGLang's CUDA path never calls it; only its
        NPU DSv4 allocator rolls back with it)."""
        stats = self._stats()
        free = self._sub.free_virtual_pages()
        digest = 0 if free is None else zlib.crc32(free.tobytes())
        return (
            self.watermark_physical,
            self.allocated_count(),
            int(stats.holes) + int(stats.pending_pages),
            int(stats.pages_moved),
            digest,
        )

    def restore_state(self, state: tuple[int, ...]) -> list[Any]:
        """Return to a :meth:`backup_state` marker when nothing changed since; [] (no
        relocations to undo).

        Raises:
            SGLangNotImplementedError: the state changed since the marker (ukv does not
                roll allocations back; SGLang's own rollback was a stub that could corrupt
                state).
        """
        if tuple(state) != self.backup_state():
            raise SGLangNotImplementedError(
                f"restore_state({state!r}) on {self.sub_pool_name!r}: the allocator changed "
                f"since (now {self.backup_state()}); ukv does not roll allocations back"
            )
        return []

    # ----- translation ------------------------------------------------------------------------

    def translate_kv_loc(self, v: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
        """Virtual token ids -> physical token ids, int64; tombstones -> 0 (the sink).

        Raises:
            SGLangArgumentError: ``out`` is not int64 of ``v``'s shape.
        """
        if out is not None and (out.dtype != torch.int64 or out.shape != v.shape):
            raise SGLangArgumentError(
                f"translate_kv_loc: out= must be int64 of shape {tuple(v.shape)}; got "
                f"{out.dtype} {tuple(out.shape)}"
            )
        with translated():
            return self._sub.translate_kv_loc(v, out=out)

    # ----- lazy compaction -----------------------------------------------------------------

    def set_latest_forward_done_event(self, event: Any) -> None:
        """Record the latest forward's completion event; reported to ukv as a forward
        without KV writes, so no state slot moves (and no vacated page is reused) until
        it completes."""
        self._latest_forward_done_event = event
        if event is not None:
            with translated():
                self.unified_buffer.ukv_pool.set_inflight_forward(event, None)

    def set_inflight_forward(self, event: Any, out_cache_loc: torch.Tensor | None) -> None:
        """Report a launched forward: until ``event`` completes a non-urgent flush moves
        none of the pages it writes (``out_cache_loc``, virtual) and no state slot."""
        if event is None:
            return
        with translated():
            self.unified_buffer.ukv_pool.set_inflight_forward(event, out_cache_loc)

    def _flush(self, urgent: bool) -> int:
        """One compaction pass of ukv's pool (both sides: ukv flushes them together);
        the number of page moves."""
        with translated():
            return int(self.unified_buffer.ukv_pool.flush(urgent=bool(urgent)))

    def flush_opportunistic(self) -> int:
        """Apply the frees of GPU ids still in flight, then a non-urgent flush; the number
        of page moves.

        SGLang calls this where the GPU is drained (idle, and the disable-overlap
        boundary) and checks for leaks right after its idle call: applying every queued
        free here (waiting for their copies, which have landed in those places) makes
        that check count every free. The flush itself moves no page an in-flight forward
        writes.
        """
        with translated():
            self.unified_buffer.ukv_pool.sync_frees()
        return self._flush(False)

    def _drain_pending_reuse(self, urgent: bool = False) -> None:
        """Return pages whose forward completed to use (urgent: wait for queued frees)."""
        pool = self.unified_buffer.ukv_pool
        pool.retire_completed()
        if urgent:
            pool.sync_frees()

    def maybe_drain_pending_reuse(self) -> None:
        """Non-urgent :meth:`_drain_pending_reuse`."""
        self._drain_pending_reuse(urgent=False)

    def __repr__(self) -> str:
        return f"MultiEndedAllocator({self.allocator_state_str()})"
