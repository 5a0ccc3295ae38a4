"""``SubPoolAllocator``: the token-level allocator of one sub-pool (API.md §4).

Method names follow SGLang's token allocators so a serving engine can swap ukv in. All
sizes are in tokens (slots) unless a name says pages, and every id is **virtual**: it
stays valid while the slot is live, however often compaction moves the bytes behind it.
Use :meth:`SubPoolAllocator.translate_kv_loc` to get physical ids for kernels.

Each method validates its arguments, calls the native core once, and has the pool's
runtime (:class:`~ukv.execution.runtime.PoolRuntime`, the one interface between a pool and
its allocators) execute whatever the core planned (page moves, table updates) before
returning. A call that raises has changed nothing.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch

from ukv import _convert, ops
from ukv._readonly import read_only
from ukv.errors import ArgumentError
from ukv.execution.continuation import ContinuationCheck, DeviceLast, finish_with_torch
from ukv.execution.fastpath import TranslateLauncher

if TYPE_CHECKING:
    from ukv.execution.runtime import PoolRuntime


class SubPoolAllocator:
    """Allocator of one sub-pool of a :class:`~ukv.pool.UnifiedKVPool`.

    Obtain it with ``pool.allocator(name)``; do not construct it directly.
    """

    def __init__(self, runtime: PoolRuntime, index: int) -> None:
        self._rt = runtime
        self._arena = runtime.arena
        self._index = index
        info = self._arena.pool_info(index)
        self.name: str = info["name"]
        self.page_size: int = info["page_size"]
        self.num_pages: int = info["num_pages"]
        self.min_page_index: int = info["min_page_index"]
        self.num_virtual_pages: int = info["num_virtual_pages"]
        self.entry_bytes: int = info["entry_bytes"]
        self.page_bytes: int = info["page_bytes"]
        self.grow: str = info["grow"]
        self.is_id_owner: bool = info["id_owner"]
        self._tables = runtime.tables[index]
        self._lock = runtime.lock
        self._translate_fast = TranslateLauncher.for_table(self._tables.v2p, self.page_size)
        self._slots_fast: dict[torch.dtype, TranslateLauncher | None] = {}
        self._v2p_ro = read_only(self._tables.v2p, f"v2p of sub-pool {self.name!r}")
        self._p2v_ro = read_only(self._tables.p2v, f"p2v of sub-pool {self.name!r}")
        self._bind_core()

    # ----- tables ---------------------------------------------------------------------

    @property
    def v2p(self) -> torch.Tensor:
        """Virtual → physical page table, shape ``[num_virtual_pages + 1]``, int64.

        Row 0 is the padding anchor (0), the last row a -1 sentinel, unbound rows -1. Its
        address is fixed for the pool's lifetime. Read-only: the pool maintains it, so an
        in-place op, ``out=`` or item assignment on it (or on a view of it) raises
        :class:`~ukv.errors.ArgumentError`, and ``numpy()`` gives a non-writable array
        (on a CPU pool this is the core's own memory).
        """
        return self._v2p_ro

    @property
    def p2v(self) -> torch.Tensor:
        """Physical → virtual page table, shape ``[num_pages + 1]``, int64; read-only like
        ``v2p``."""
        return self._p2v_ro

    @property
    def watermark(self) -> int:
        """Up: the first free page. Down: the highest free page."""
        return int(self._arena.pool_state(self._index)[0])

    def free_virtual_pages(self) -> np.ndarray | None:
        """The free virtual page ids in hand-out order (allocation takes from the front,
        frees append at the back), as a fresh int64 array; None for a sub-pool that
        binds another's ids (it mints none). For integrations and tests that mirror
        an engine's own free list."""
        if not self.is_id_owner:
            return None
        return np.array(self._arena.free_ids(self._index), dtype=np.int64)

    # ----- capacity -------------------------------------------------------------------

    def available_size(self) -> int:
        """Tokens ``alloc`` can take right now without compacting anything. A pure
        query: queued frees (ids on the GPU, or host ids queued behind them) count once
        the next mutating call has applied them; it never applies them nor moves pages."""
        self._rt.check_usable()
        return int(self._core_available()) * self.page_size

    def schedulable_available_size(self) -> int:
        """Tokens ``alloc`` is guaranteed to get: also counts what an urgent flush of the
        neighbour frees. ``n <= schedulable_available_size()`` ⇒ ``alloc(n)`` succeeds.
        A pure query, like :meth:`available_size`."""
        self._rt.check_usable()
        return int(self._core_schedulable()) * self.page_size

    def allocated_count(self) -> int:
        """Live tokens (live pages × page size)."""
        return int(self._arena.pool_state(self._index)[1]) * self.page_size

    def is_slot_allocated(self, slot: int) -> bool:
        """Whether virtual token ``slot`` is live. Out-of-range ids are not; 0 (the padding
        anchor) always is. Reads the host tables, never the device: after a ``free`` of
        device ids, they read as live until that free lands (``pool.sync_frees()``)."""
        if isinstance(slot, torch.Tensor) and slot.numel() == 1 and not slot.is_floating_point():
            slot = int(slot)
        if isinstance(slot, bool) or not isinstance(slot, numbers.Integral):
            raise ArgumentError(f"bad argument slot = {slot!r}: must be an int")
        s = int(slot)
        if not -(1 << 63) <= s < 1 << 63:
            return False  # beyond any id space
        return bool(self._arena.is_token_allocated(self._index, s))

    # ----- allocation -----------------------------------------------------------------

    def alloc(self, need_size: int, *, host: bool = False) -> torch.Tensor | None:
        """Allocate ``need_size`` tokens as whole pages.

        Args:
            need_size: Tokens to allocate; a multiple of ``page_size``.
            host: Return the ids on the host (CPU) even for a CUDA pool: no device copy
                at all, for engines that keep their id bookkeeping on the host.

        Returns:
            Tensor | None: virtual token ids, shape ``[need_size]``, int64, on the pool's
            device (the CPU for ``meta`` pools and with ``host=True``), ascending inside
            each page; None when they do not fit (nothing changes then). Before
            answering None, queued frees of any sub-pool are applied (waiting for GPU
            ids still in flight: the one case an allocation waits, counted in
            ``stats()``).

        Raises:
            ArgumentError: ``need_size`` negative, not an int, or not a page multiple;
                or the current stream is capturing a CUDA graph.
            DeferredFreeError: a queued free applied first was rejected (see
                :meth:`free`); this allocation was not performed.
        """
        n = _convert.count("need_size", need_size)
        ids, out = self._rt.allocate(lambda: self._core_alloc(n), self._index, not host)
        if ids is None:
            return None
        return out if out is not None else torch.from_numpy(ids)

    def alloc_extend(
        self,
        prefix_lens: torch.Tensor,
        prefix_lens_cpu: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_cpu: torch.Tensor,
        last_loc: torch.Tensor,
        extend_num_tokens: int,
        *,
        host: bool = False,
    ) -> torch.Tensor | None:
        """Allocate the new tokens of an extend batch, reusing each request's last page.

        Args:
            prefix_lens: shape ``[B]``; accepted for signature compatibility (unused).
            prefix_lens_cpu: shape ``[B]`` on the CPU: tokens each request already has.
            seq_lens: shape ``[B]``; accepted for signature compatibility (unused).
            seq_lens_cpu: shape ``[B]`` on the CPU: tokens after the extension.
            last_loc: shape ``[B]``: virtual id of each request's last token (-1 when its
                prefix is empty). On the CPU it is checked here. On the pool's GPU it is
                read by the kernel only (no wait): a value that cannot be its request's
                last token gives its continuing tokens id 0, the padding sink, and is
                reported by ``pool.check_device_errors()`` (see that method).
            extend_num_tokens: ``sum(seq_lens - prefix_lens)``.
            host: Return host (CPU) ids, as for :meth:`alloc` (needs a CPU ``last_loc``).

        Returns:
            Tensor | None: shape ``[extend_num_tokens]`` int64 virtual ids, requests in
            order; None when the new pages do not fit.

        Raises:
            ArgumentError: mismatched lengths, a prefix longer than its sequence, a wrong
                ``extend_num_tokens``, a GPU ``last_loc`` on another device than the
                pool's, or (CPU ``last_loc``) a last token that is not live or not at its
                request's page offset. Only requests that continue a page (the prefix ends
                inside one and the request grows) read ``last_loc``, so only theirs is
                checked; the others' entries are ignored.
        """
        del prefix_lens, seq_lens
        pre = _convert.cpu_lengths("prefix_lens_cpu", prefix_lens_cpu)
        seq = _convert.cpu_lengths("seq_lens_cpu", seq_lens_cpu)
        want = _convert.count("extend_num_tokens", extend_num_tokens)
        if (
            pre.shape == seq.shape
            and int(seq.sum(dtype=np.int64) - pre.sum(dtype=np.int64)) != want
        ):
            raise ArgumentError(
                f"bad argument extend_num_tokens = {want}: sum(seq_lens - prefix_lens) is "
                f"{int(seq.sum(dtype=np.int64) - pre.sum(dtype=np.int64))}"
            )
        host_last, dev_last = self._split_last_loc(last_loc, len(pre), host)
        return self._alloc_tokens(lambda: self._core_extend(pre, seq, host_last), dev_last, host)

    def alloc_decode(
        self,
        seq_lens: torch.Tensor,
        seq_lens_cpu: torch.Tensor,
        last_loc: torch.Tensor,
        *,
        host: bool = False,
    ) -> torch.Tensor | None:
        """Allocate one decode token per request (valid at every page size).

        Args:
            seq_lens: shape ``[B]``; accepted for signature compatibility (unused).
            seq_lens_cpu: shape ``[B]`` on the CPU: lengths including the new token.
            last_loc: shape ``[B]``: virtual id of each request's last token; on the GPU
                checked by the kernel, as for :meth:`alloc_extend`.
            host: Return host (CPU) ids, as for :meth:`alloc` (needs a CPU ``last_loc``).

        Returns:
            Tensor | None: shape ``[B]`` int64 virtual ids; None when the new pages do not fit.

        Raises:
            ArgumentError: mismatched lengths, a length below 1, a GPU ``last_loc`` on
                another device than the pool's, or (CPU ``last_loc``) a last token that is
                not live or not at its request's page offset (checked for the requests whose
                new token continues a page; one that starts a page does not read it).
        """
        del seq_lens
        seq = _convert.cpu_lengths("seq_lens_cpu", seq_lens_cpu)
        host_last, dev_last = self._split_last_loc(last_loc, len(seq), host)
        return self._alloc_tokens(lambda: self._core_decode(seq, host_last), dev_last, host)

    def alloc_at(self, virtual_pages: object) -> torch.Tensor | None:
        """Bind caller-chosen free virtual pages (not the ones the free queue would hand
        out next) to physical pages, holes first, as :meth:`alloc` binds its own; they
        leave the free queue. For engines whose allocator picks its ids.

        Args:
            virtual_pages: shape ``[N]`` page ids of this owner sub-pool (CPU, CUDA or
                NumPy; a CUDA tensor is copied to the host, which waits for it).

        Returns:
            Tensor | None: the physical pages, shape ``[N]`` int64, on the tables'
            device; None when they do not fit (checked before the ids; nothing changes).

        Raises:
            ArgumentError: a non-owner sub-pool, or a page that is live or repeated.
            InvalidIdError: a page outside the id space.
        """
        pages = _convert.host_ids("virtual_pages", virtual_pages)
        ok, _ = self._rt.allocate(
            lambda: bool(self._arena.alloc_at(self._index, pages)) or None, self._index, False
        )
        if ok is None:
            return None
        phys = self._arena.v2p(self._index)[pages]
        return torch.from_numpy(phys).to(self._rt.tables[self._index].device)

    def rebind(self, from_pages: object, to_pages: object) -> None:
        """Hand each live page ``from_pages[k]`` over to the free id ``to_pages[k]``: the
        physical page keeps its bytes and takes the new name, and ``from_pages[k]`` goes
        back to the front of the free queue (as if it had never been taken).

        Raises:
            ArgumentError: a non-owner sub-pool, lists of different lengths, a ``from``
                page not live (or bound by a dependent sub-pool), a ``to`` page not free,
                or a repeated page; nothing changes then.
            InvalidIdError: a page outside the id space.
        """
        src = _convert.host_ids("from_pages", from_pages)
        dst = _convert.host_ids("to_pages", to_pages)
        # Not an allocation that can fall short: the op answers True (``allocate`` retries
        # an op that answers None after applying queued frees).
        self._rt.allocate(
            lambda: self._arena.rebind(self._index, src, dst) or True, self._index, False
        )

    def _alloc_tokens(
        self,
        op: Callable[[], tuple[np.ndarray, np.ndarray | None] | None],
        dev_last: DeviceLast | None,
        host: bool,
    ) -> torch.Tensor | None:
        """Run a token-level allocation and execute its plan (see :meth:`alloc`)."""
        res, out = self._rt.allocate(op, self._index, not host, dev_last)
        if res is None:
            return None
        return out if out is not None else self._finish_tokens(res, dev_last, host)

    def _split_last_loc(
        self, last_loc: object, batch: int, host: bool
    ) -> tuple[np.ndarray | None, DeviceLast | None]:
        if isinstance(last_loc, torch.Tensor) and last_loc.device.type == "cuda":
            if last_loc.device != self._rt.device:
                raise ArgumentError(
                    f"bad argument last_loc: on {last_loc.device}, the pool is on "
                    f"{self._rt.device} (pass it there, or on the CPU)"
                )
            if last_loc.dtype not in _convert.ID_DTYPES or last_loc.shape != (batch,):
                raise ArgumentError(
                    f"bad argument last_loc: shape {tuple(last_loc.shape)} dtype {last_loc.dtype} "
                    f"must be ({batch},) int32/int64"
                )
            if not last_loc.is_contiguous():
                raise ArgumentError(
                    f"bad argument last_loc: stride {last_loc.stride()} must be contiguous"
                )
            if host:
                raise ArgumentError(
                    f"bad argument last_loc: on {last_loc.device} with host=True (host ids "
                    "would need the device's last_loc read back; pass it on the CPU)"
                )
            return None, DeviceLast(last_loc, self._continuation(), self._rt.faults)
        return _convert.host_ids("last_loc", last_loc), None

    def _continuation(self) -> ContinuationCheck:
        """What the device checks this owner's ``last_loc`` values against."""
        ps = self.page_size
        lo = self._arena.pool_info(self._index)["min_virtual_page"] * ps
        return ContinuationCheck(ps, lo, self.num_virtual_pages * ps, self._tables.v2p)

    def _finish_tokens(
        self,
        res: tuple[np.ndarray, np.ndarray | None],
        dev_last: DeviceLast | None,
        host: bool,
    ) -> torch.Tensor:
        tokens, req = res
        out = torch.from_numpy(tokens) if host else self._rt.ids_out(tokens)
        if req is not None and dev_last is not None:
            # Continuations of a partial page, checked and finished on the device.
            out = finish_with_torch(out, self._rt.ids_out(req), dev_last)
        return out

    # ----- free -----------------------------------------------------------------------

    def free(self, free_index: torch.Tensor) -> None:
        """Free the pages of these virtual tokens (any token frees its whole page).

        Eager pools compact at once (moving bytes on the current stream before returning);
        lazy pools leave holes for ``flush``. Inside a free group the pages are queued.

        Args:
            free_index: shape ``[N]`` int32/int64 virtual token ids (CPU, CUDA or NumPy).
                Host ids are applied at once, unless frees of the same id space are
                queued: then they queue behind them (a free never overtakes an earlier
                one). Ids on the pool's GPU are copied to pinned memory asynchronously and
                applied by a later mutating call once they have landed (this call never
                waits for the GPU). A queued free's errors come from the call that
                applies it, as :class:`~ukv.errors.DeferredFreeError`, or from
                ``pool.sync_frees()``. Empty is a no-op.

        Raises:
            InvalidIdError: a negative, reserved or out-of-range id.
            DoubleFreeError: an id that is not live, or repeated at page size 1.
            DeferredFreeError: an earlier queued free applied first was rejected; this
                free was not performed.
            ArgumentError: wrong dtype, rank or contiguity, or the current stream is
                capturing a CUDA graph.
        """
        self._rt.free(self._index, free_index, self._core_free, "free_index")

    def free_group_begin(self) -> None:
        """Queue frees until :meth:`free_group_end` (one compaction for the whole batch).
        Behind queued frees of the same id space, the boundary is queued with them.

        Raises:
            ArgumentError: a group is already open.
        """
        self._group_boundary("group_begin")

    def free_group_end(self) -> None:
        """Free everything queued since :meth:`free_group_begin` in one pass (queued
        behind queued frees of the same id space: it never waits for the GPU).

        Raises:
            ArgumentError: no group is open.
        """
        self._group_boundary("group_end")

    def _group_boundary(self, kind: Literal["group_begin", "group_end"]) -> None:
        self._rt.group_boundary(
            self._index, self._group_pools(), kind, self._core_group(kind), self.name
        )

    def _group_pools(self) -> tuple[int, ...]:
        """The sub-pools whose free groups this allocator opens and closes."""
        return (self._index,)

    # ----- what the core does for this allocator (a composite overrides these) ----------

    def _bind_core(self) -> None:
        """What the core does for this allocator, as C-level partials (the hot paths call
        them without a Python frame). A composite rebinds them to its joint operations."""
        a, i = self._arena, self._index
        self._core_alloc: Callable[[int], np.ndarray | None] = partial(a.alloc, i)
        self._core_extend: Callable[..., Any] = partial(a.alloc_extend, i)
        self._core_decode: Callable[..., Any] = partial(a.alloc_decode, i)
        self._core_free: Callable[[np.ndarray], None] = partial(a.free, i)
        self._core_available: Callable[[], int] = partial(a.available_pages, i)
        self._core_schedulable: Callable[[], int] = partial(a.schedulable_pages, i)

    def _core_group(self, kind: str) -> Callable[[object], None]:
        """Open or close the free group of every sub-pool this allocator frees on."""
        i = self._index
        if kind == "group_begin":
            return lambda _ids: self._arena.free_group_begin(i)
        return lambda _ids: self._arena.free_group_end(i)

    def clear(self) -> None:
        """Free every slot of this sub-pool (bytes are not zeroed). Queued frees are
        applied first (waiting for GPU ids still in flight)."""
        rt = self._rt
        with self._lock:
            rt.check_not_capturing("clear")
            if rt.frees:
                rt.settle(wait=True)
            self._arena.clear(self._index)
            rt.execute()
            for i in range(len(rt.info)):
                rt.frees.group_open[i] = bool(self._arena.in_free_group(i))

    # ----- translation ----------------------------------------------------------------

    def translate_kv_loc(
        self, ids: torch.Tensor, *, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Virtual token ids → physical token ids, on the tables' device, in one launch.

        Tombstoned pages, negative ids and ids beyond the table map to 0 (the padding
        sink). No host synchronisation; CUDA-graph capturable with a fixed ``out``.

        Args:
            ids: shape ``[N]`` int32/int64 on the tables' device.
            out: optional shape ``[N]`` int64 on the same device; written in place and
                returned (same object, same ``data_ptr``); may alias ``ids``.

        Returns:
            Tensor: shape ``[N]`` int64 physical token ids.

        Raises:
            ArgumentError: wrong dtype, shape or device of ``ids`` or ``out``.
        """
        if self._rt.poisoned is not None:
            self._rt.check_usable()
        fast = self._translate_fast
        if fast is not None:
            res = fast(ids, out)
            if res is not None:
                return res
        with self._rt.on_device():
            return ops.translate(ids, self._tables.v2p, self.page_size, out=out)

    def translate_slots(
        self,
        ids: torch.Tensor,
        *,
        out: torch.Tensor | None = None,
        out_dtype: torch.dtype = torch.int64,
    ) -> torch.Tensor:
        """State-slot translate (page size 1): virtual slots → physical slots in one
        launch; what names no live slot stays -1 ("no state"), and so do -1 (padding) and
        slot 0 (the padding anchor). No host synchronisation; graph-capturable.

        Args:
            ids: shape ``[N]`` int32/int64 on the tables' device.
            out: optional shape ``[N]`` ``out_dtype`` on the same device; written in
                place and returned; may alias ``ids``.
            out_dtype: ``torch.int64`` or ``torch.int32`` (SGLang's state kernels).

        Raises:
            ArgumentError: wrong dtype, shape or device of ``ids`` or ``out``, or a paged
                sub-pool.
        """
        if self._rt.poisoned is not None:
            self._rt.check_usable()
        fast = self._slots_fast.get(out_dtype)
        if fast is None and out_dtype in ops.TRANSLATE_OUT_DTYPES:
            fast = TranslateLauncher.for_table(self._tables.v2p, 1, True, out_dtype)
            self._slots_fast[out_dtype] = fast
        if fast is not None and self.page_size == 1:
            res = fast(ids, out)
            if res is not None:
                return res
        with self._rt.on_device():
            return ops.translate(
                ids, self._tables.v2p, self.page_size, out=out, out_dtype=out_dtype, slots=True
            )

    def __repr__(self) -> str:
        wm, live, holes, pending, _ = self._arena.pool_state(self._index)
        return (
            f"SubPoolAllocator({self.name!r}, grow={self.grow}, page_size={self.page_size}, "
            f"live_pages={live}, holes={holes}, pending={pending}, watermark={wm})"
        )
