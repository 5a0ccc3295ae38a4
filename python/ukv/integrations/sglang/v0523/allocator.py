"""SGLang 0.5.23's ``MultiEndedAllocator`` and ``FloatMultiEndedAllocator``, over ukv.

The 0.5.16 drop-in allocator (every call goes to ukv's allocator of the sub-pool) with
0.5.23's contract: relocations reach a foreign ``kvcache`` as whole physical pages
(``move_physical_pages(dst_pages, src_pages, page_size)``), ``free`` takes SGLang's
``_pages`` hint, page-rep segment frees, the write-loc translate, chain wiring
(``bind_low_peer`` / ``bind_high_peer``), and ``free_group`` as 0.5.23 keeps it (None
outside a group). ``FloatMultiEndedAllocator`` is the middle band of a three-sub-pool
pool (ukv's ``grow="middle"``).

What 0.5.23 does that ukv refuses on purpose raises
:class:`~ukv.integrations.sglang.errors.SGLangNotImplementedError` (docs/SGLANG.md):
move gates (PD disaggregation, HiCache), physical reservations without a virtual id
(``alloc_physical`` and its kin), and decode context parallelism.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch

from ukv.integrations.sglang import allocator as v16
from ukv.integrations.sglang.errors import (
    SGLangArgumentError,
    SGLangMisalignedError,
    SGLangNotImplementedError,
    translated,
)
from ukv.integrations.sglang.v0523 import handover

__all__ = ["FloatMultiEndedAllocator", "MultiEndedAllocator", "dcp_size", "install_move_gate"]


def _refuse(what: str, why: str) -> SGLangNotImplementedError:
    return SGLangNotImplementedError(f"{what}: {why} (docs/SGLANG.md, SGLang 0.5.23)")


def dcp_size() -> int:
    """SGLang's decode-context-parallel width (1 without SGLang's runtime context)."""
    try:
        from sglang.srt.runtime_context import get_parallel  # type: ignore[import-not-found]

        return int(get_parallel().attn_dcp_size)
    except Exception:  # noqa: BLE001 - no SGLang, or no context published: no DCP
        return 1


def install_move_gate(
    targets: Iterable[Any],
    *,
    slot: str,
    gate: Callable[[], bool],
    feature: str,
    lazy_compaction: bool,
) -> None:
    """Refused: a gate that blocks page moves while a transfer reads physical ids.

    ukv's core relocates inside allocations (an urgent flush of the peer, a slide of the
    middle band) and, eagerly, inside frees, as one plan; it has no way to hold those
    moves back for an outside transfer, so a gate would not be honoured.

    Raises:
        SGLangNotImplementedError: always.
    """
    raise _refuse(
        f"install_move_gate({slot!r}) for {feature}",
        "ukv's core moves pages inside allocations and frees and cannot hold them for a "
        "transfer; PD disaggregation and HiCache are not served with the unified pool",
    )


class MultiEndedAllocator(v16.MultiEndedAllocator):
    """One sub-pool's allocator (SGLang 0.5.23's keywords), backed by ukv.

    Args:
        kvcache, unified_buffer, sub_pool_name, device, is_id_owner, page_size,
            need_sort, forward_stream, lazy_compaction: As the 0.5.16 drop-in's.
        virtual_num_pages: A non-owner's id space (SGLang passes the owner's); ukv binds
            the owner's id space whatever it is.
        shards_under_dcp: Accepted; decode context parallelism is refused.

    Raises:
        SGLangArgumentError: ``virtual_num_pages`` on an id owner (SGLang asserts it).
        SGLangNotImplementedError: decode context parallelism (``attn_dcp_size > 1``)
            on a sharded sub-pool.
    """

    def __init__(
        self,
        *,
        kvcache: Any,
        unified_buffer: Any,
        sub_pool_name: str,
        device: str,
        is_id_owner: bool,
        virtual_num_pages: int | None = None,
        page_size: int = 1,
        shards_under_dcp: bool = False,
        need_sort: bool = False,
        forward_stream: Any = None,
        lazy_compaction: bool = False,
    ) -> None:
        if virtual_num_pages is not None and is_id_owner:
            raise SGLangArgumentError(
                "virtual_num_pages: only a non-owner allocator may use another pool's "
                "virtual-id space"
            )
        if shards_under_dcp and dcp_size() > 1:
            raise _refuse(
                f"decode context parallelism (attn_dcp_size = {dcp_size()})",
                "widened virtual ids are not implemented by the ukv drop-in",
            )
        super().__init__(
            kvcache=kvcache,
            unified_buffer=unified_buffer,
            sub_pool_name=sub_pool_name,
            device=device,
            is_id_owner=is_id_owner,
            page_size=page_size,
            need_sort=need_sort,
            forward_stream=forward_stream,
            lazy_compaction=lazy_compaction,
        )
        self.free_group: list[torch.Tensor] | None = None  # type: ignore[assignment]
        self.free_page_reps_group: list[torch.Tensor] | None = None
        self.pool_page_size = page_size
        self.shards_under_dcp = bool(shards_under_dcp)
        self.low_peer: MultiEndedAllocator | None = None
        self.high_peer: MultiEndedAllocator | None = None
        self.disagg_move_gate: Callable[[], bool] | None = None
        self.host_transfer_move_gate: Callable[[], bool] | None = None
        #: The SWA pages the last handover (:meth:`bind`) took from their holders.
        self._handed_over: frozenset[int] = frozenset()

    # ----- relocations ------------------------------------------------------------------------

    def _report_moves(self, src_pages: np.ndarray, dst_pages: np.ndarray) -> None:
        """Tell a foreign ``kvcache`` about one plan's moves of this sub-pool, as
        0.5.23 does: ``move_physical_pages(dst_pages, src_pages, page_size)``."""
        kv = self._kvcache
        if kv is None or getattr(kv, "_unified_buffer", None) is self.unified_buffer:
            return  # ukv moved these bytes itself
        if not hasattr(kv, "move_physical_pages"):
            super()._report_moves(src_pages, dst_pages)
            return
        device = v16._host_or(self.device)
        kv.move_physical_pages(
            torch.from_numpy(np.ascontiguousarray(dst_pages, dtype=np.int64)).to(device),
            torch.from_numpy(np.ascontiguousarray(src_pages, dtype=np.int64)).to(device),
            self.page_size,
        )

    def moves_blocked(self) -> bool:
        """False: move gates are refused (:func:`install_move_gate`)."""
        return False

    def prewarm_compaction(self) -> None:
        """Nothing to warm: ukv's plan executor is ready at construction."""

    # ----- chain wiring -----------------------------------------------------------------------

    def bind_peer(self, peer: v16.MultiEndedAllocator) -> None:
        """Bind the other END as this end's growth-side neighbour."""
        super().bind_peer(peer)
        if self.grow_direction == "up":
            self.high_peer = peer  # type: ignore[assignment]
        else:
            self.low_peer = peer  # type: ignore[assignment]

    def bind_low_peer(self, peer: MultiEndedAllocator) -> None:
        """Record the neighbour toward byte 0 (ukv's core chains the bands itself)."""
        self.low_peer = peer

    def bind_high_peer(self, peer: MultiEndedAllocator) -> None:
        """Record the neighbour toward the buffer's top."""
        self.high_peer = peer

    # ----- frees --------------------------------------------------------------------------------

    def free(self, free_index: torch.Tensor, *, _pages: torch.Tensor | None = None) -> None:
        """Free the pages of these virtual tokens. ``_pages`` (SGLang's precomputed page
        ids) is accepted; ukv derives the pages itself."""
        super().free(free_index)

    def _page_reps(self, free_index: torch.Tensor, start_pos: int) -> torch.Tensor:
        """One token of every page a page-aligned segment touches.

        Raises:
            SGLangMisalignedError: ``start_pos`` is not on a page boundary.
        """
        if start_pos % self.page_size:
            raise SGLangMisalignedError(f"segment start {start_pos} is not page-aligned")
        return free_index[:: self.page_size].contiguous()

    def free_segment(self, free_index: torch.Tensor, *, start_pos: int) -> None:
        """Free ``kv_row[start_pos : start_pos + n]`` of one request (whole pages)."""
        if free_index is None or free_index.numel() == 0:
            return
        self.free(self._page_reps(free_index.detach().to(torch.int64), start_pos))

    def free_group_begin(self) -> None:
        """Queue this sub-pool's frees until :meth:`free_group_end` (ukv holds them)."""
        super().free_group_begin()
        self.free_group = []
        self.free_page_reps_group = []

    def free_group_end(self) -> None:
        """Apply the queued frees in one pass."""
        super().free_group_end()
        self.free_group = None
        self.free_page_reps_group = None

    def clear(self) -> None:
        """Free every page of this sub-pool."""
        super().clear()
        self.free_group = None
        self.free_page_reps_group = None

    def flush_for_allocation(self) -> int:
        """An urgent compaction pass (ukv flushes the pool as a whole); the page moves."""
        return self._flush(True)

    # ----- translation ------------------------------------------------------------------------

    def translate_write_loc(
        self,
        widened_loc: torch.Tensor,
        *,
        out: torch.Tensor | None = None,
        out_width: int | None = None,
    ) -> torch.Tensor:
        """The write loc (virtual tokens) -> physical tokens, int64; with ``out_width``
        the lanes ``[n, out_width)`` of ``out`` are zeroed (the padding sink)."""
        n = widened_loc.numel()
        if out_width is None or out is None:
            return self.translate_kv_loc(widened_loc, out=out)
        if out_width < n or out.numel() < out_width:
            raise SGLangArgumentError(
                f"translate_write_loc: out_width = {out_width} for {n} ids and an out of "
                f"{out.numel()} lanes"
            )
        flat = out.view(-1)
        self.translate_kv_loc(widened_loc.reshape(-1), out=flat[:n])
        flat[n:out_width].zero_()
        return out

    # ----- what ukv refuses ---------------------------------------------------------------------

    def alloc_physical(self, need_size: int) -> torch.Tensor | None:
        """Refused (HiCache load-back): ukv binds every physical page to a virtual id.

        Raises:
            SGLangNotImplementedError: always.
        """
        raise _refuse("alloc_physical", "ukv binds every physical page to a virtual id")

    def cancel_physical_reservation(self, free_index: torch.Tensor) -> None:
        """Refused, as :meth:`alloc_physical`."""
        raise _refuse("cancel_physical_reservation", "there are no physical reservations")

    def free_physical(self, free_index: torch.Tensor) -> None:
        """Refused, as :meth:`alloc_physical`."""
        raise _refuse("free_physical", "ukv frees virtual ids, never bare physical pages")

    def take_physical_pages(self, num_pages: int) -> torch.Tensor | None:
        """Refused, as ``take_physical``."""
        raise _refuse("take_physical_pages", "ukv binds every physical page to a virtual id")

    def bind(self, virtual_ids: torch.Tensor, physical_ids: torch.Tensor) -> None:
        """On the SWA side: hand each physical page, held now by another live full id,
        over to ``virtual_ids[k]`` (SGLang's SWA radix recovery, ``_transfer_swa_pages``;
        :func:`~ukv.integrations.sglang.v0523.handover.hand_over`). The tombstone write
        into ``virtual_to_physical`` that follows is then accepted. Refused on an owner:
        the caller cannot choose free physical pages (ukv's core places pages).

        Raises:
            SGLangNotImplementedError: on an id owner.
            SGLangArgumentError: see ``hand_over`` (nothing changes then).
        """
        if self.is_id_owner:
            raise _refuse("bind", "the caller cannot choose physical pages in ukv's core")
        handover.hand_over(self, virtual_ids, physical_ids)

    @property
    def virtual_to_physical(self) -> torch.Tensor:
        """Virtual page -> physical page, read-only; right after a handover (:meth:`bind`)
        it also takes the tombstone write onto the pages just handed over (a no-op)."""
        table = self._sub.v2p
        if self._handed_over:
            return handover.table_after_handover(self, table)
        return table

    def clear_inverse_history(self) -> None:
        """ukv keeps no relocation history; ends a handover's tombstone-write window."""
        self._handed_over = frozenset()

    def set_hicache_transfer_done_event(self, transfer_key: Any, event: Any) -> None:
        """Refused: HiCache with the unified pool (see :func:`install_move_gate`).

        Raises:
            SGLangNotImplementedError: always.
        """
        raise _refuse("set_hicache_transfer_done_event", "HiCache is not served")

    # ----- diagnostics --------------------------------------------------------------------------

    def verify_byte_accounting(self) -> list[str]:
        """ukv's invariants of the whole pool: empty when they hold, else the failure."""
        try:
            with translated():
                self.unified_buffer.ukv_pool.check_invariants()
        except AssertionError as exc:
            return [str(exc)]
        return []


class FloatMultiEndedAllocator(MultiEndedAllocator):
    """The float middle of a three-sub-pool pool (ukv's middle band): it takes its holes
    first, then fresh pages beside its span; an END that needs its bytes slides it (the
    moves are in the END's plan). Its span is ``[low_wm_page, high_wm_page)``.

    Args:
        **kwargs: As :class:`MultiEndedAllocator` (SGLang passes keywords only).
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)

    def _span_pages(self) -> int:
        return int(self._stats().span_pages)

    @property
    def high_wm_page(self) -> int:
        """One past the band's top page."""
        return self.watermark_physical

    @property
    def low_wm_page(self) -> int:
        """The band's lowest page."""
        return self.watermark_physical - self._span_pages()

    def _hole_pages(self) -> int:
        """Unused pages inside the span (holes and pending pages)."""
        s = self._stats()
        return int(s.holes + s.pending_pages)

    def _live_pages(self) -> int:
        """Live pages."""
        return int(self._stats().live_pages)

    def _byte_low_frontier(self) -> int:
        return self.low_wm_page * self.entry_bytes_per_page

    def _byte_high_frontier(self) -> int:
        return self.high_wm_page * self.entry_bytes_per_page

    @property
    def _free_phys_pages(self) -> torch.Tensor:
        p2v = self._sub.p2v
        p2v = p2v.numpy() if p2v.device.type == "cpu" else p2v.cpu().numpy()
        lo, hi = self.low_wm_page, self.high_wm_page
        pages = np.arange(lo, hi, dtype=np.int64)
        return torch.from_numpy(pages[p2v[lo:hi] < 0]).to(v16._host_or(self.device))

    def pages_in_band(self, *, low_byte: int, high_byte: int) -> int:
        """Whole pages of this band's size between two byte offsets."""
        e = self.entry_bytes_per_page
        return max(0, high_byte // e - (-(-low_byte // e)))

    def bind_peer(self, peer: v16.MultiEndedAllocator) -> None:
        """Record an END as the neighbour on its side (a float has both)."""
        v16.MultiEndedAllocator.bind_peer(self, peer)
        if peer.grow_direction == "down":
            self.high_peer = peer  # type: ignore[assignment]
        else:
            self.low_peer = peer  # type: ignore[assignment]
