"""``SWAHybridAllocator``: full and sliding-window attention over one virtual id space.

A hybrid SWA model (gpt-oss, Gemma 3) writes every new token into both its full-attention
layers and its sliding-window layers. The full sub-pool owns the virtual ids; the SWA
sub-pool binds the same ids (its v2p is indexed by full's virtual pages, so it is sized by
full's id space, whatever the two entry sizes). Every allocation binds both sides in one
core plan (all or nothing); ``free`` releases both; ``free_swa`` releases only the SWA side
of tokens that left the window (the id stays live on full until the composite ``free``).
``available_size`` is the joint capacity computed in the core: ``n <= available_size()``
guarantees both sides fit.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

import numpy as np
import torch

from ukv import _convert, ops
from ukv.allocator import SubPoolAllocator
from ukv.errors import ArgumentError
from ukv.specs import MHASpec

if TYPE_CHECKING:
    from collections.abc import Callable

    from ukv.pool import UnifiedKVPool


class SWAHybridAllocator(SubPoolAllocator):
    """The token allocator of a full + sliding-window hybrid (API.md §5).

    Inherits the token surface of :class:`~ukv.allocator.SubPoolAllocator` (``alloc``,
    ``alloc_extend``, ``alloc_decode``, ``free``, groups, ``translate_kv_loc`` on the full
    side, host ids, frees of device ids), with every operation applied to both sides.

    Args:
        pool: A pool whose ``swa`` sub-pool binds ``full``'s ids
            (``UnifiedKVPool(..., bind={swa: full})``, or :func:`ukv.build_swa_hybrid`).
        full: The full-attention sub-pool (the id owner).
        swa: The sliding-window sub-pool.

    Raises:
        ArgumentError: unknown names, specs that are not MHA, or a ``swa`` sub-pool that
            does not bind ``full``'s ids.
    """

    def __init__(self, pool: UnifiedKVPool, full: str = "full", swa: str = "swa") -> None:
        f, s = pool._runtime.index(full), pool._runtime.index(swa)
        for name in (full, swa):
            if not isinstance(pool.spec(name), MHASpec):
                raise ArgumentError(
                    f"bad argument {name!r}: {type(pool.spec(name)).__name__} is not an MHA sub-pool"
                )
        if pool.owner_of(swa) != full:
            raise ArgumentError(
                f"bad argument swa = {swa!r}: it binds {pool.owner_of(swa)!r}'s ids, not "
                f"{full!r}'s (build the pool with bind={{{swa!r}: {full!r}}})"
            )
        super().__init__(pool._runtime, f)
        self._pool = pool
        self._swa = s
        self.swa = pool.allocator(swa)
        self._bind_core()

    # ----- the two sides ----------------------------------------------------------------

    def _bind_core(self) -> None:
        super()._bind_core()
        if not hasattr(self, "_swa"):
            return  # called by the base constructor; rebound once the pair is known
        a, f, s = self._arena, self._index, self._swa
        self._core_alloc = partial(a.swa_alloc, f, s)
        self._core_extend = partial(a.swa_alloc_extend, f, s)
        self._core_decode = partial(a.swa_alloc_decode, f, s)
        self._core_free = partial(a.swa_free, f, s)
        self._core_available = partial(a.joint_available_pages, f, s)
        self._core_schedulable = partial(a.joint_schedulable_pages, f, s)

    def _core_group(self, kind: str) -> Callable[[object], None]:
        # One core operation for both sides (checked before either changes); closing
        # releases both sides' queued pages in one plan.
        a, f, s = self._arena, self._index, self._swa
        boundary = a.swa_free_group_begin if kind == "group_begin" else a.swa_free_group_end
        return lambda _ids: boundary(f, s)

    def _group_pools(self) -> tuple[int, ...]:
        return (self._index, self._swa)

    # ----- the window -------------------------------------------------------------------

    def free_swa(self, ids: torch.Tensor) -> None:
        """Release the SWA side of tokens that left the sliding window.

        Their virtual ids stay live on the full side (and are recycled only by
        :meth:`free`); pages whose SWA side is already released are skipped.

        Args:
            ids: shape ``[N]`` int32/int64 virtual token ids (host or device, as for
                :meth:`free`).

        Raises:
            InvalidIdError: an id that is not live on the full side.
            ArgumentError: wrong dtype, rank or contiguity.
        """
        self._rt.free(self._index, ids, self._core_free_swa, "ids")

    def _core_free_swa(self, ids: np.ndarray) -> None:
        self._arena.swa_free_nonowner(self._index, self._swa, ids)

    def free_swa_now(self, ids: torch.Tensor) -> None:
        """Release the SWA side of those ``ids`` whose SWA side is still bound, at once,
        skipping the others instead of refusing them (already released, freed with their
        full side, queued in an open free group, never bound, negative or beyond the id
        space): SGLang's composite ``free_swa``. Repeated ids are released once.

        Unlike :meth:`free_swa`, it never queues: ids on the GPU are copied to the host
        (one wait for the copy), frees of this id space still queued are applied first
        (waiting for theirs only when there are any, so ids they free are skipped), and
        the core releases the still-bound pages in one plan, executed before the call
        returns: the next translation reads 0 for every one of these tokens. Inside an
        open free group the release is queued with the group, as :meth:`free_swa`'s;
        ids whose full side the group frees are skipped (the group's end releases both
        sides).

        Args:
            ids: shape ``[N]`` int32/int64 virtual token ids (host or device).

        Raises:
            ArgumentError: wrong type, dtype, rank or contiguity; the pool's memory is
                released or the current stream captures a CUDA graph.
            DeferredFreeError: a queued free applied first named ids that were not live
                (as ``pool.sync_frees``); none of ``ids`` is released then.
        """
        host = _convert.host_ids("ids", ids)
        if host.size == 0:
            return
        rt = self._rt
        with rt.lock:
            rt.check_usable()
            rt.check_not_capturing("free_swa_now")
            if rt.frees:
                rt.settle(wait=rt.frees.blocks(self._index))
            self._arena.swa_free_window(self._index, self._swa, host)
            rt.execute()

    def bind_swa_pages(self, virtual_pages: torch.Tensor) -> bool:
        """Bind the SWA side of full's virtual pages that are live on full and unbound
        on SWA (an engine that allocated on the full side alone and binds the window's
        side afterwards, as SGLang's ``alloc_with_virtual`` does).

        Args:
            virtual_pages: shape ``[N]`` int32/int64 virtual **page** ids (host ids).

        Returns:
            bool: True when they were bound; False when the SWA side has no room for
            them (nothing changes then).

        Raises:
            InvalidIdError: a page negative, reserved or beyond the id space.
            ArgumentError: a page not live on full or already bound on SWA; wrong dtype,
                rank or contiguity. Nothing is bound then.
        """
        pages = _convert.host_ids("virtual_pages", virtual_pages)
        if pages.size == 0:
            return True
        arena, s = self._arena, self._swa
        res, _ = self._rt.allocate(
            lambda: True if arena.alloc_with_virtual(s, pages) else None, s, False
        )
        return res is not None

    def transfer_swa_pages(self, from_pages: object, to_pages: object) -> None:
        """Hand the SWA page of full's virtual page ``from_pages[k]`` over to
        ``to_pages[k]``, for every ``k``: the page keeps its bytes and is read through
        ``to_pages[k]`` from now on; ``from_pages[k]`` stays live on full with no SWA page
        (it translates to the padding sink). No byte moves and no page is allocated or
        freed, so the counts and capacities do not change. A radix cache that keeps a
        prefix under old ids while a request has just written the same tokens under new
        ones moves the window's pages to the kept ids this way (SGLang 0.5.23's SWA
        recovery).

        A later compaction moves the page as any other; an in-flight forward that wrote
        ``from_pages[k]`` (its reported write set) keeps the page where it is until it
        completes.

        Args:
            from_pages: shape ``[N]`` int32/int64 virtual **page** ids bound on SWA (host
                or device; a device tensor is copied to the host, which waits for it).
            to_pages: shape ``[N]`` virtual page ids live on full with no SWA page.

        Raises:
            InvalidIdError: a page negative, reserved or beyond the id space.
            ArgumentError: lists of different lengths, a ``from`` page with no SWA page
                (or queued in an open free group), a ``to`` page not live on full (or
                queued to be freed) or already bound on SWA, or a page repeated within or
                across the lists; wrong dtype or rank. Nothing changes then.
        """
        src = _convert.host_ids("from_pages", from_pages)
        dst = _convert.host_ids("to_pages", to_pages)
        arena, s = self._arena, self._swa
        # Not an allocation that can fall short: the op answers True (``allocate`` settles
        # queued frees first, so a freed id is seen as freed, and executes the row plan).
        self._rt.allocate(lambda: arena.transfer(s, src, dst) or True, s, False)

    def translate_loc_from_full_to_swa(
        self, ids: torch.Tensor, *, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Virtual token ids → SWA physical token ids, int32, on the tables' device.

        Tokens whose SWA side is released (or never bound) map to 0, the padding sink.

        Args:
            ids: shape ``[N]`` int32/int64 virtual ids on the tables' device.
            out: optional shape ``[N]`` int32, written in place and returned.

        Returns:
            Tensor: shape ``[N]`` int32.
        """
        self._rt.check_usable()
        with self._rt.on_device():
            return ops.translate(
                ids, self.swa._tables.v2p, self.page_size, out=out, out_dtype=torch.int32
            )

    def full_available_size(self) -> int:
        """Tokens the full side alone could take now (not the joint capacity)."""
        return self._pool.allocator(self.name).available_size()

    def swa_available_size(self) -> int:
        """Tokens the SWA side alone could take now (not the joint capacity)."""
        return self.swa.available_size()

    def __repr__(self) -> str:
        return (
            f"SWAHybridAllocator(full={self.name!r}, swa={self.swa.name!r}, "
            f"page_size={self.page_size}, joint_available={self.available_size()})"
        )
