"""``UnifiedKVPool``: one byte buffer, two sub-pools growing from its ends (API.md §3).

The pool owns the zeroed ``uint8`` buffer (on ``cuda`` or ``cpu``; ``meta`` keeps only the
bookkeeping, for planning at production sizes), the strided views each sub-pool's kernels
read, and the native arena that decides where every page lives. After each operation the
arena leaves a plan; the pool executes it before returning: it makes the current stream
wait on any in-flight forward the plan names, moves every page of a sub-pool in one
kernel launch, and scatters the changed table rows into the device mirrors.

Stream contract: moves and table updates are queued on the **current** stream, in order
with the caller's later work on that stream. A caller whose forward runs on another
stream reports it with :meth:`UnifiedKVPool.set_inflight_forward`: an eager pool's moves
then wait on every reported forward not retired yet (a free of GPU ids is applied by a
later call, while a later forward may be writing the pages it moves), and a lazy pool's
flushes leave that forward's pages alone. Otherwise it must make the current stream wait
on the forward before ``free``/``flush`` and every call after a free of GPU ids.

Thread safety: a pool may be shared by threads. Every operation holds the pool's lock
from the call into the core until its plan has been executed, so operations are atomic
with respect to each other; reads of sizes are single calls into the core. The native
arena itself refuses a concurrent call with an error rather than racing. Physical ids
(``translate_kv_loc``) stay valid until the next mutating call (alloc, free, group
boundary, flush, clear, ``sync_frees``) by any thread; queries (sizes, ``stats``,
``get_cpu_copy``) never move pages. A thread that translates and then writes or reads
bytes while other threads allocate and free holds :attr:`UnifiedKVPool.lock` across both.

This module is the pool's public API only; the machinery is in :mod:`ukv.execution` (plan
execution, flushes, queued frees, forwards, the buffer and its release),
:mod:`ukv.host_copy`, :mod:`ukv._pool_args` and :mod:`ukv.stats`.
"""

from __future__ import annotations

import logging
import numbers
import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

import numpy as np
import torch

from ukv import _core, _pool_args, host_copy, layout, ops, stats
from ukv.allocator import SubPoolAllocator
from ukv.errors import ArgumentError
from ukv.execution import memory
from ukv.execution.fastpath import StoreLauncher
from ukv.execution.frees import FailedFree
from ukv.execution.runtime import PoolRuntime
from ukv.host_copy import HostCopy
from ukv.specs import MambaSpec, MHASpec, MLASpec, Spec, check_page_size
from ukv.stats import PoolStats as PoolStats
from ukv.stats import SubPoolStats as SubPoolStats

logger = logging.getLogger("ukv")


class UnifiedKVPool:
    """One byte buffer shared by a grow-up and a grow-down sub-pool.

    Args:
        total_bytes: Size of the buffer.
        specs: One spec with ``grow="up"`` and one with ``grow="down"``, plus at most one
            with ``grow="middle"`` (a band floating between them, API.md §3).
        page_size: Tokens per page of KV (MHA/MLA) sub-pools; state sub-pools use 1.
        device: ``"cuda"`` (or ``"cuda:N"``), ``"cpu"``, or ``"meta"`` (bookkeeping only).
        lazy: Lazy compaction (frees leave holes; ``flush`` packs) instead of eager.
        max_moves_per_flush: Page-move cap of one non-urgent flush.
        bind: ``{non_owner: owner}``: sub-pools that hold no ids of their own and bind
            their owner's virtual ids (the SWA side of a full + SWA hybrid). Both must be
            paged with the same page size.
        virtual_memory: How a ``cuda`` pool gets its buffer: ``None`` (default) maps it
            through CUDA's virtual memory API where the driver supports it, so
            :meth:`release_memory` keeps its address (:attr:`memory_release_keeps_address`),
            and falls back to torch's allocator otherwise; ``True`` requires virtual
            memory; ``False`` uses torch's allocator.
        allocation_context: A zero-argument callable returning a context manager the
            buffer is allocated in, so an engine's allocator owns the memory (SGLang:
            ``lambda: memory_saver_adapter.region(GPU_MEMORY_TYPE_KV_CACHE)``) and the
            engine pauses it after :meth:`release_memory` and resumes it before
            :meth:`resume_memory`; the pool never frees or reallocates it.

    Raises:
        PoolConfigError: bad sizes, specs, directions, names, or a buffer too small to hold
            the reserved floor plus one page per sub-pool; ``virtual_memory=True`` on a
            device or driver without CUDA virtual memory, or with an ``allocation_context``;
            an ``allocation_context`` that is not callable.
    """

    def __init__(
        self,
        total_bytes: int,
        specs: Sequence[Spec],
        *,
        page_size: int = 1,
        device: str | torch.device = "cuda",
        lazy: bool = False,
        max_moves_per_flush: int = _core.DEFAULT_MAX_MOVES_PER_FLUSH,
        bind: Mapping[str, str] | None = None,
        virtual_memory: bool | None = None,
        allocation_context: Callable[[], AbstractContextManager[Any]] | None = None,
    ) -> None:
        self.total_bytes = _pool_args.positive("total_bytes", total_bytes)
        self.page_size = check_page_size(page_size)
        self.device = _pool_args.device_of(device)
        self._specs = _pool_args.check_specs(specs)
        self._owners = _pool_args.check_bind(bind, self._specs)
        pools = [
            (
                s.name,
                s.entry_bytes,
                s.effective_page_size(self.page_size),
                s.grow,
                self._owners.get(s.name),
            )
            for s in self._specs
        ]
        self._arena = _core.Arena(
            self.total_bytes,
            pools,
            lazy=bool(lazy),
            max_moves_per_flush=_pool_args.positive("max_moves_per_flush", max_moves_per_flush),
        )
        self.lazy = bool(lazy)
        buffer = memory.allocate(
            self.total_bytes,
            self.device,
            virtual_memory=virtual_memory,
            allocation_context=allocation_context,
        )
        self.raw = buffer.raw
        # The machinery every operation goes through (lock, plan execution, queued frees,
        # reported forwards); the allocators talk to it, never to the pool.
        names = [s.name for s in self._specs]
        owners = {names.index(name): owner for name, owner in self._owners.items()}
        paged = tuple(i for i, s in enumerate(self._specs) if s.is_paged)
        self._runtime = PoolRuntime(self._arena, buffer, self.device, owners, paged)
        rt = self._runtime
        # One lock per pool: an operation and the execution of its plan are one step, so a
        # second thread can never replace a plan before it has been executed.
        self._lock = rt.lock
        self._tables = rt.tables
        self._info = rt.info
        self._views = [
            layout.views_for(self.raw, s, info["page_size"], info["num_pages"])
            for s, info in zip(self._specs, self._info)
        ]
        # set_kv's validated views and launch geometry, per MHA sub-pool and layer (lazily).
        self._store_targets: dict[str, list[ops.StoreTarget]] = {}
        self._store_fast: dict[str, list[StoreLauncher | None]] = {}
        self._allocators = [SubPoolAllocator(rt, i) for i in range(len(self._specs))]
        logger.info("%s", self.summary())

    @property
    def _exec(self) -> Any:
        """The executor of plans (internal; tests look at its kind)."""
        return self._runtime.executor

    # ----- construction helpers -----------------------------------------------------------

    def summary(self) -> str:
        """One line describing the pool: size, floor, and each sub-pool's geometry."""
        return stats.summary(self.device, self.lazy, self._arena, self._specs, self._info)

    # ----- introspection ------------------------------------------------------------------

    def _idx(self, name: str) -> int:
        return self._runtime.index(name)

    def spec(self, name: str) -> Spec:
        """The spec of sub-pool ``name``."""
        return self._specs[self._idx(name)]

    def owner_of(self, name: str) -> str | None:
        """The sub-pool whose virtual ids ``name`` binds, or None if it owns its ids."""
        owner = self._owners.get(self._specs[self._idx(name)].name)
        return None if owner is None else self._specs[owner].name

    @property
    def names(self) -> tuple[str, ...]:
        """Sub-pool names, in the order the specs were given."""
        return self._runtime.names

    def max_slots(self, name: str) -> int:
        """Slots in ``name``'s index space (``num_pages * page_size``)."""
        i = self._info[self._idx(name)]
        return int(i["num_pages"] * i["page_size"])

    def min_slot_index(self, name: str) -> int:
        """First slot of ``name`` above the reserved floor."""
        i = self._info[self._idx(name)]
        return int(i["min_page_index"] * i["page_size"])

    @property
    def lock(self) -> threading.RLock:
        """The pool's re-entrant lock; every operation takes it. Hold it across
        ``translate_kv_loc`` and the use of the physical ids when other threads may free or
        flush meanwhile (their compaction moves pages and makes those ids stale)."""
        return self._lock

    @property
    def reserved_floor(self) -> int:
        """Bytes ``[0, reserved_floor)`` are the padding sink."""
        return int(self._arena.reserved_floor())

    def allocator(self, name: str) -> SubPoolAllocator:
        """The allocator of sub-pool ``name``."""
        return self._allocators[self._idx(name)]

    def kv_views(self, name: str) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Per-layer K and V views of an MHA sub-pool.

        Returns:
            (k, v): lists of ``layer_num`` tensors of shape
            ``[num_pages, page_size, head_num, head_dim]`` (V: ``v_head_dim``).

        Raises:
            ArgumentError: not an MHA sub-pool, or the memory is released.
        """
        i = self._view_index(name, "kv_views")
        if not isinstance(self._specs[i], MHASpec):
            raise ArgumentError(
                f"bad argument name = {name!r}: {type(self._specs[i]).__name__} has no K/V views"
            )
        k, v = self._views[i]
        return k, v

    def latent_views(self, name: str) -> list[torch.Tensor]:
        """Per-layer views of an MLA sub-pool, shape ``[num_pages, page_size, kv_lora_rank + qk_rope_head_dim]``.

        Raises:
            ArgumentError: not an MLA sub-pool, or the memory is released.
        """
        i = self._view_index(name, "latent_views")
        if not isinstance(self._specs[i], MLASpec):
            raise ArgumentError(
                f"bad argument name = {name!r}: {type(self._specs[i]).__name__} has no latent views"
            )
        return list(self._views[i])

    def state_views(self, name: str) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Conv and temporal views of a Mamba sub-pool.

        Returns:
            (conv, temporal): conv[i] of shape ``[layer_num, max_slots, *conv_shapes[i]]``,
            temporal of shape ``[layer_num, max_slots, *temporal_shape]``.

        Raises:
            ArgumentError: not a Mamba sub-pool, or the memory is released.
        """
        i = self._view_index(name, "state_views")
        if not isinstance(self._specs[i], MambaSpec):
            raise ArgumentError(
                f"bad argument name = {name!r}: {type(self._specs[i]).__name__} has no state views"
            )
        conv, temporal = self._views[i]
        return conv, temporal

    def _view_index(self, name: str, what: str) -> int:
        """The index of ``name``; refuses views of a released buffer, whose memory a
        touch would fault on (a segfault on the CPU: review round 4, N2)."""
        if self._runtime.released is not None:
            self._runtime.check_resident(what)
        return self._idx(name)

    # ----- bytes ------------------------------------------------------------------------------

    def set_kv(
        self,
        name: str,
        layer: int,
        loc: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        *,
        k_scale: float | torch.Tensor | None = None,
        v_scale: float | torch.Tensor | None = None,
    ) -> None:
        """Store K/V rows at **physical** token ids (translate virtual ids first).

        Args:
            name: An MHA sub-pool.
            layer: Layer index within the sub-pool.
            loc: shape ``[N]`` int32/int64 physical token ids on the pool's device.
            k: shape ``[N, head_num, head_dim]``; cast to the store dtype.
            v: shape ``[N, head_num, v_head_dim]``.
            k_scale: Divide K by this before an fp8 cast.
            v_scale: Divide V by this before an fp8 cast.

        Raises:
            ArgumentError: bad layer, shapes, dtypes or devices.
        """
        if self._runtime.poisoned is not None or self._runtime.released is not None:
            self._runtime.check_usable()
            self._runtime.check_resident("set_kv")
        fast = self._store_fast.get(name)
        if (
            fast is not None
            and k_scale is None
            and v_scale is None
            and type(layer) is int
            and 0 <= layer < len(fast)
        ):
            launcher = fast[layer]
            if launcher is not None and launcher(loc, k, v):
                return
        targets = self._store_targets.get(name)
        if targets is None:
            spec = self.spec(name)
            ks, vs = self.kv_views(name)
            fp8 = spec.dtype if spec.store_dtype != spec.dtype else None  # type: ignore[attr-defined]
            targets = [ops.store_target(kl, vl, fp8) for kl, vl in zip(ks, vs)]
            self._store_targets[name] = targets
            self._store_fast[name] = [StoreLauncher.for_target(t) for t in targets]
        if (
            isinstance(layer, bool)
            or not isinstance(layer, numbers.Integral)
            or not 0 <= layer < len(targets)
        ):
            raise ArgumentError(
                f"bad argument layer = {layer!r}: sub-pool {name!r} has {len(targets)} layers"
            )
        with self._runtime.on_device():
            ops.store_kv_to(targets[int(layer)], loc, k, v, k_scale=k_scale, v_scale=v_scale)

    def get_cpu_copy(self, name: str, ids: torch.Tensor, *, non_blocking: bool = False) -> HostCopy:
        """Host copies of the bytes of these virtual tokens (KV) or slots (state), for offload.

        Args:
            name: Sub-pool name.
            ids: shape ``[N]`` live virtual ids (host or device).
            non_blocking: On CUDA, copy into pinned memory asynchronously and return at
                once; call ``.wait()`` on the result before reading it.

        Returns:
            HostCopy: a list of CPU tensors, one per view (KV: K then V per layer; state:
            each conv then temporal), each with the token/slot dimension of length N.

        Raises:
            InvalidIdError: an id that is not live (every id is checked, vectorised).
            ArgumentError: a meta pool, or bad ids.
        """
        with self._lock:  # translate + gather in one step: a compaction may not intervene
            self._runtime.check_usable()
            self._runtime.check_resident("get_cpu_copy")
            views, phys = self._copy_targets(name, ids)
            return host_copy.copy_out(views, phys, non_blocking)

    def load_cpu_copy(self, name: str, copy: Sequence[torch.Tensor], ids: torch.Tensor) -> None:
        """Write host copies made by :meth:`get_cpu_copy` back at these (live) virtual ids.

        Every tensor's count, shape and dtype is checked before anything is written, so a
        bad argument leaves the pool's bytes as they were.

        Raises:
            InvalidIdError: an id that is not live.
            ArgumentError: a wrong number of tensors, or a tensor of the wrong shape/dtype.
        """
        with self._lock:
            self._runtime.check_usable()
            self._runtime.check_resident("load_cpu_copy")
            views, phys = self._copy_targets(name, ids)
            slots = isinstance(self._specs[self._idx(name)], MambaSpec)
            host_copy.check_copy(views, copy, phys.numel(), slots)
            host_copy.copy_in(views, copy, phys, slots)

    def _copy_targets(self, name: str, ids: torch.Tensor) -> tuple[list[Any], torch.Tensor]:
        i = self._idx(name)
        return host_copy.targets(
            self._runtime, self._allocators[i], self._specs[i], self._views[i], ids
        )

    # ----- lazy compaction lifecycle ------------------------------------------------------

    def flush(self, urgent: bool = False) -> int:
        """Lazy mode's compaction pass on every sub-pool; 0 in eager mode.

        Non-urgent passes skip pages the in-flight forward writes and park vacated pages
        until it completes; urgent passes wait for it and pack fully. Every call also
        retires completed forwards and applies frees of device ids that have landed (an
        urgent pass applies them all, waiting if it must). A non-urgent pass whose
        in-flight forward's ``out_cache_loc`` is still on its way from the GPU leaves
        the KV sub-pools for the next pass rather than wait.

        Returns:
            int: page moves performed.
        """
        with self._lock:
            return self._runtime.flush(bool(urgent))

    @property
    def max_moves_per_flush(self) -> int:
        """The page-move cap of one non-urgent :meth:`flush`; settable (the next flush
        obeys it; a value that is not a positive int raises ``PoolConfigError``)."""
        return int(self._arena.max_moves_per_flush())

    @max_moves_per_flush.setter
    def max_moves_per_flush(self, value: int) -> None:
        with self._lock:
            self._arena.set_max_moves_per_flush(_pool_args.positive("max_moves_per_flush", value))

    def set_inflight_forward(self, event: Any, out_cache_loc: torch.Tensor | None = None) -> None:
        """Report a forward just launched: ``event`` completes when it ends (an object with
        ``query() -> bool``, e.g. ``torch.cuda.Event``), and it writes KV at the virtual
        tokens ``out_cache_loc`` of every KV sub-pool. Ids on the GPU are copied to the
        host asynchronously (never waited for); host ids are copied now, so the caller may
        reuse its tensor at once. Until the event completes, a non-urgent flush moves no
        page of any unretired forward's ``out_cache_loc`` and no state slot; in an eager
        pool (which keeps no write set) every plan that moves pages waits on it first.
        Completed forwards are retired by ``flush`` (in both modes), ``retire_completed``
        and, in an eager pool, the next report.

        Raises:
            ArgumentError: ``event`` has no ``query()``, ``out_cache_loc`` is not a 1-D
                contiguous int32/int64 tensor of ids, or the memory is released.
        """
        self._runtime.report_forward(event, out_cache_loc)

    def add_move_listener(
        self, listener: Callable[[list[tuple[str, np.ndarray, np.ndarray]]], None]
    ) -> None:
        """Call ``listener`` after every executed plan that moved pages.

        For engines whose own objects mirror the pool's bytes (an integration that
        reports relocations to the engine's cache object, or a test shadow): the bytes
        in this pool have already moved when it is called, under the pool's lock.

        Args:
            listener: Called with ``[(sub_pool_name, src_pages, dst_pages), ...]``, one
                entry per sub-pool with moves, in execution order; ``src_pages`` and
                ``dst_pages`` are int64 NumPy arrays of physical **page** ids (page i
                moved from ``src_pages[i]`` to ``dst_pages[i]``). It should not raise:
                its exception propagates from the call whose plan it heard, after that
                plan took effect (the pool stays consistent, but an allocation's ids
                are then not returned).
        """
        with self._lock:
            self._runtime.move_listeners.add(listener)

    def remove_move_listener(
        self, listener: Callable[[list[tuple[str, np.ndarray, np.ndarray]]], None]
    ) -> None:
        """Stop calling ``listener`` (see :meth:`add_move_listener`).

        Raises:
            ArgumentError: ``listener`` is not registered.
        """
        with self._lock:
            self._runtime.move_listeners.remove(listener)

    def retire_completed(self) -> None:
        """Release what completed forwards were holding (pending pages, write blockers)."""
        with self._lock:
            self._runtime.forwards.retire(self._arena)

    # ----- queued frees ---------------------------------------------------------------------

    def sync_frees(self) -> None:
        """Apply every queued free now, waiting for the GPU if it must.

        Raises:
            DeferredFreeError: a queued free named ids that were not live (its valid ids
                were freed; the record stays in :attr:`failed_frees`).
        """
        with self._lock:
            self._runtime.check_not_capturing("sync_frees")
            self._runtime.settle(wait=True)

    @property
    def inflight_frees(self) -> int:
        """Frees accepted but not applied yet: frees of GPU ids waiting for their copy to
        the host, and host-id frees queued behind them (0 on a CPU pool). O(1), without
        the lock: ``stats().inflight_frees`` without building a snapshot."""
        return self._runtime.frees.frees()

    # ----- giving the buffer's memory back (memory saver) ------------------------------------

    def release_memory(
        self, *, keep_contents: bool = False, force: bool = False, keep_address: bool = False
    ) -> None:
        """Give the byte buffer's device memory back, keeping every table, id and size.

        SGLang's memory saver around weight updates: the allocator state stays, the
        bytes go. It applies every queued free (waiting for the GPU if it must), waits
        for the device, then gives the memory back: a CUDA virtual-memory buffer frees
        its physical memory and keeps its address; a torch-allocated one shrinks its
        storage (and empties torch's cache); an engine's (``allocation_context``) is
        left for the engine to pause. Until :meth:`resume_memory`, calls that read,
        write or move bytes (alloc, free, group boundaries, flush, clear, ``set_kv``,
        host copies, views) raise :class:`~ukv.errors.ArgumentError`; queries answer.
        Views handed out before see the buffer again after the resume; do not touch
        them in between (docs/DESIGN.md, "Giving the buffer's memory back").

        Args:
            keep_contents: Copy the bytes to host memory first and put them back on
                resume (costs a host copy of the whole buffer). Without it the buffer
                comes back zeroed, as a KV cache whose radix tree is flushed around a
                weight update; that is refused while any page is live, unless ``force``.
            force: Drop the contents even though pages are live (their ids stay live
                and read zeros after the resume).
            keep_address: Require the buffer to come back at the same address (CUDA
                graphs and kernels captured before the release stay valid); refused
                where it cannot (:attr:`memory_release_keeps_address` is False).

        Raises:
            ArgumentError: forwards reported in flight have not completed, the pool is
                already released, it runs in a tensor-parallel mode, the current stream
                is capturing a CUDA graph, ``keep_contents`` on a ``meta`` pool (no
                bytes), ``keep_address`` where the address would move, or pages are
                live without ``keep_contents`` or ``force``. The pool is unchanged then,
                but for queued frees: they are applied before the live pages are counted
                (a free issued before counts).
            PoolPoisonedError: the pool was poisoned.
        """
        with self._lock:
            self._store_fast.clear()  # their launches hold the buffer's address
            self._store_targets.clear()
            self._runtime.release(bool(keep_contents), bool(force), bool(keep_address))
        logger.info("ukv pool released its %d-byte buffer", self.total_bytes)

    def resume_memory(self) -> None:
        """Take the byte buffer's memory back after :meth:`release_memory`: the bytes as
        they were (``keep_contents=True``) or zeros, every table and id as they were (an
        engine's buffer: call it after the engine has resumed its memory).

        Raises:
            ArgumentError: the pool's memory is not released.
            torch.OutOfMemoryError: a torch-allocated buffer found no memory.
            ukv.execution.vmm.DriverError: a virtual-memory buffer could not map memory
                (``.code`` 2: out of memory).
            In both failure cases the pool stays released; the call may be repeated.
        """
        with self._lock:
            self._runtime.resume()
        logger.info("ukv pool resumed its %d-byte buffer", self.total_bytes)

    @property
    def memory_release_keeps_address(self) -> bool:
        """Whether :meth:`release_memory` / :meth:`resume_memory` keep the buffer's
        address: a CUDA virtual-memory buffer, or an engine's (``allocation_context``).
        False on the CPU, ``meta``, drivers without virtual memory management and with
        ``virtual_memory=False``: the memory then comes back at a new address."""
        return self._runtime.buffer.keeps_address

    @property
    def memory_released(self) -> bool:
        """Whether the byte buffer's memory is given back (:meth:`release_memory`)."""
        return self._runtime.released is not None

    @property
    def failed_frees(self) -> list[FailedFree]:
        """Queued frees the core rejected when they were applied (the newest 64), each
        with the ids that were not freed and those that were."""
        return list(self._runtime.frees.failures)

    def check_device_errors(self) -> None:
        """Raise what the GPU found since the last check; waits for the current stream.

        ``alloc_extend`` / ``alloc_decode`` with ``last_loc`` on the GPU never read it on
        the host. The kernel checks each request's ``last_loc`` (inside this sub-pool's
        ids, above the padding page, at the in-page offset the request's prefix length
        implies, on a bound page); a request that fails gets id 0, the padding sink, for
        each token that continues its partial page, so its K/V writes land there and never
        in another request's page. This call reports those: it clears the record and
        raises :class:`~ukv.errors.InvalidIdError` naming the first failing request and
        its ``last_loc`` and the count of tokens affected. Call it where the engine
        synchronizes anyway (e.g. after sampling). Pools without a GPU never fail here
        (their ``last_loc`` is checked by the call itself).
        """
        with self._lock:
            self._runtime.raise_device_faults()

    # ----- checks and stats -----------------------------------------------------------------

    def stats(self) -> PoolStats:
        """Bytes used per side, the free gap, holes, pending pages, moves so far, frees
        still queued and waits for the GPU. A pure query: applies no queued free."""
        with self._lock:  # one consistent snapshot, not fields of different moments
            rt = self._runtime
            rt.check_usable()
            return stats.read(self._arena, self._info, rt.frees.frees(), rt.gpu_waits)

    def check_invariants(self) -> None:
        """Check the arena's invariants and that device tables mirror the host ones.

        Raises:
            InvariantError: with the out-of-sync values. (On CUDA this reads the device
                tables back: a synchronisation, meant for tests and debugging.)
        """
        with self._lock:  # the core check runs without the GIL: keep writers out
            self._runtime.check_invariants()

    def __repr__(self) -> str:
        return f"UnifiedKVPool({self.summary()})"
