"""``PoolRuntime``: what a pool's allocators may ask of the pool, in one named place.

The user-facing :class:`~ukv.pool.UnifiedKVPool` builds one runtime and hands it to each of
its allocators; they never call the pool itself. The runtime owns the machinery every
operation goes through: the native arena and the pool's lock, executing the arena's plan
on the pool's device (a failure poisons the pool), the queue of frees not applied yet
(:mod:`ukv.execution.frees`), the forwards reported in flight
(:mod:`ukv.execution.forwards`) and the device record of bad ``last_loc`` values.

Which calls apply queued frees: only the mutating ones (alloc, free, group boundaries,
flush, clear, ``sync_frees``). Queries (sizes, ``stats``, ``get_cpu_copy``) never apply a
free nor move a page, so physical ids from ``translate_kv_loc`` stay valid until the next
mutating call by any thread.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
import torch

from ukv import _convert
from ukv._tables import DeviceTables, to_device
from ukv.errors import (
    ArgumentError,
    InvalidIdError,
    InvariantError,
    PoolConfigError,
    PoolPoisonedError,
)
from ukv.execution import make_executor
from ukv.execution.continuation import DeviceLast, FaultRecord
from ukv.execution.deferred import Deferred, LandingIds
from ukv.execution.forwards import Forwards
from ukv.execution.frees import DeferredFrees
from ukv.execution.listeners import MoveListeners
from ukv.execution.memory import Buffer

logger = logging.getLogger("ukv")

Boundary = Literal["group_begin", "group_end"]


class PoolRuntime:
    """The internal interface between a pool, its allocators and its executor.

    Args:
        arena: The native arena (``ukv._core.Arena``).
        buffer: The pool's byte buffer (:mod:`ukv.execution.memory`).
        device: The pool's device.
        owners: ``{sub-pool index: owner index}`` for sub-pools that bind another's ids.
        paged: The indices of the paged (KV) sub-pools; the others hold state slots.
    """

    def __init__(
        self,
        arena: Any,
        buffer: Buffer,
        device: torch.device,
        owners: dict[int, int],
        paged: tuple[int, ...] = (),
    ):
        self.arena = arena
        self.device = device
        self.lock = threading.RLock()
        n = arena.num_pools()
        self.info = [arena.pool_info(i) for i in range(n)]
        # Lazy pools flush; eager ones compact at once (their moves wait on forwards).
        self.lazy = bool(self.info[0]["lazy"])
        self.paged = paged
        table_device = torch.device("cpu") if device.type == "meta" else device
        self.tables = [DeviceTables(arena, i, table_device) for i in range(n)]
        self.poisoned: str | None = None
        # Continuations of a device last_loc that failed their check (on the tables' device).
        self.faults = FaultRecord(table_device)
        self.forwards = Forwards()
        self.buffer = buffer
        self.raw = buffer.raw
        self.cuda_index = device.index if device.type == "cuda" else -1
        self.names = tuple(i["name"] for i in self.info)
        self._index = {name: i for i, name in enumerate(self.names)}
        self.frees = DeferredFrees(
            list(self.names), [owners.get(i, i) for i in range(n)], self.live_mask
        )
        # The tensor-parallel tap (ukv.distributed.tap), when one is set: a hook that
        # wraps the executor's ``run`` again whenever ``run`` is bound (see ``_bind_run``).
        self.tap: Any = None
        # Why the byte buffer's memory is given back (release_memory), None while it is held.
        self.released: str | None = None
        self._backup: torch.Tensor | None = None
        # Called with each executed plan's page moves (see ``add_move_listener``). Made
        # once: they outlive executors (a resume builds a new one).
        self.move_listeners = MoveListeners()
        self._build_executor()

    def _build_executor(self) -> None:
        """The executor for the buffer as it is now (its launches cache the buffer's
        address, so a buffer given back and resumed needs a new one)."""
        inflight = None if self.lazy else self.forwards.events
        self.executor = make_executor(
            self.raw, self.arena, self.tables, self.info, self.forwards.wait, inflight
        )
        self.ring = getattr(self.executor, "ring", None) if self.cuda_index >= 0 else None
        if self.ring is not None:
            self.ring.on_reuse = self._settle_segment
        self._bind_run()

    def _bind_run(self) -> None:
        """Bind ``run``, the one callable every plan goes through: the executor's, or a
        refusal while the buffer is given back, wrapped by the tap when one is set. Bound
        here and only here, so a new executor never sheds the tap (review round 4, F7)."""
        run = self.executor.run if self.released is None else _released_run
        self.run = run if self.tap is None else self.tap.wrap(run)

    def set_tap(self, tap: Any) -> None:
        """Install the tensor-parallel tap: ``tap.wrap(run)`` returns what runs every plan
        from now on, across resumes.

        Raises:
            PoolConfigError: a tap is already set.
        """
        with self.lock:
            if self.tap is not None:
                raise PoolConfigError(
                    "invalid pool: it is already tapped by a tensor-parallel mode"
                )
            self.tap = tap
            self._bind_run()

    def index(self, name: str) -> int:
        """The index of sub-pool ``name``.

        Raises:
            ArgumentError: no sub-pool has that name.
        """
        return _convert.sub_pool_index(self._index, name)

    # ----- plans --------------------------------------------------------------------------

    def on_device(self) -> Any:
        """A context that makes the pool's GPU current (a no-op when it is, or off CUDA):
        Triton launches on, and compiles for, the current device."""
        if self.cuda_index >= 0 and torch._C._cuda_getDevice() != self.cuda_index:
            return torch.cuda.device(self.cuda_index)
        return contextlib.nullcontext()

    def execute(self, want_ids: bool = False, last: DeviceLast | None = None) -> Any:
        """Execute the arena's last plan; a failure poisons the pool.

        Returns the allocation's ids on the pool's device when ``want_ids`` and the
        executor writes them (CUDA), else None (the caller wraps the host array).
        """
        try:
            if self.cuda_index >= 0 and torch._C._cuda_getDevice() != self.cuda_index:
                with torch.cuda.device(self.cuda_index):
                    out = self.run(want_ids, last)
            else:
                out = self.run(want_ids, last)
        except BaseException as exc:  # any failure: tables and bytes may now disagree
            raise self.poison(f"executing a plan failed: {exc!r}") from exc
        if self.move_listeners:
            self.move_listeners.report(self.arena, self.info)
        return out

    def raise_device_faults(self) -> None:
        """Raise the continuation faults the GPU recorded (see ``check_device_errors``),
        reading them on the pool's GPU."""
        with self.on_device():
            self.faults.raise_if_any()

    def poison(self, why: str) -> PoolPoisonedError:
        """Refuse every later call: the core's tables may no longer match the device."""
        self.poisoned = why
        self.arena.poison(why)
        logger.error("ukv pool poisoned: %s", why)
        return PoolPoisonedError(f"the pool is unusable: {why}")

    def check_usable(self) -> None:
        """Raise :class:`~ukv.errors.PoolPoisonedError` if the pool was poisoned."""
        if self.poisoned is not None:
            raise PoolPoisonedError(f"the pool is unusable: {self.poisoned}")

    def check_not_capturing(self, what: str) -> None:
        """Refuse a mutating call while the current stream captures a CUDA graph (its
        host tables would commit while its kernels were only captured), or while the
        buffer's memory is given back (a plan may move bytes)."""
        if self.released is not None:
            self.check_resident(what)
        if self.cuda_index >= 0 and torch._C._cuda_isCurrentStreamCapturing():
            raise ArgumentError(
                f"bad call {what}: the current stream is capturing a CUDA graph; allocate, "
                "free and flush outside capture (translate_kv_loc and set_kv are capturable)"
            )

    def check_resident(self, what: str) -> None:
        """Refuse a call that reads, writes or moves the buffer's bytes while its memory is
        given back."""
        if self.released is not None:
            raise ArgumentError(
                f"bad call {what}: the pool's memory is released ({self.released}); call "
                "resume_memory() first"
            )

    # ----- lazy compaction and forwards in flight -----------------------------------------

    def flush(self, urgent: bool) -> int:
        """The body of :meth:`ukv.UnifiedKVPool.flush` (under the lock): retire completed
        forwards, apply landed frees (all with ``urgent``), then lazy compaction."""
        self.check_usable()
        self.check_not_capturing("flush")
        self.forwards.retire(self.arena)
        if self.frees:
            self.settle(wait=urgent)
        if not self.lazy:
            return 0
        arena = self.arena
        if urgent:
            moves = int(arena.flush(True))
            self.execute()
            return moves
        # KV pages: never one that an unretired forward writes (every write set must have
        # landed to know which); state slots: none at all while a forward is unretired,
        # since a forward updates its batch's states in place.
        kv_blocked = self.forwards.hand_write_sets(arena, list(self.paged))
        states_blocked = bool(self.forwards)
        if not kv_blocked and not states_blocked:
            moves = int(arena.flush(False))
            self.execute()
            return moves
        moves = 0
        for i in range(len(self.info)):
            if kv_blocked if i in self.paged else states_blocked:
                continue
            moves += int(arena.flush_pool(i, False))
            self.execute()
        return moves

    def report_forward(self, event: Any, out_cache_loc: torch.Tensor | None) -> None:
        """The body of :meth:`ukv.UnifiedKVPool.set_inflight_forward`: check, then record
        the forward (its write set only in lazy mode, the one that reads it)."""
        if not hasattr(event, "query"):
            raise ArgumentError(f"bad argument event = {event!r}: needs a query() method")
        if out_cache_loc is not None:
            check_out_cache_loc(out_cache_loc)
        with self.lock:
            self.check_usable()
            self.check_resident("set_inflight_forward")
            if not self.lazy:
                # Eager pools hold no pages for a forward: retire what completed now, so
                # an engine that never calls flush keeps no events (memory stays flat).
                self.forwards.retire(self.arena)
            # Write sets steer lazy flushes only: an eager pool stages no copy of them.
            writes = None
            if out_cache_loc is not None and self.lazy:
                writes = self.forwards.landing(out_cache_loc, self.ring)
            token = self.forwards.report(event, writes)
            self.arena.set_latest_token(token)

    def check_invariants(self) -> None:
        """The core's invariants, and that device tables mirror the host ones (a read
        back of the device tables: tests and debugging)."""
        self.arena.check_invariants()
        for i, tables in enumerate(self.tables):
            if not tables.mirrored:
                continue
            host_v2p = torch.from_numpy(self.arena.v2p(i))
            host_p2v = torch.from_numpy(self.arena.p2v(i))
            for label, dev, host in (("v2p", tables.v2p, host_v2p), ("p2v", tables.p2v, host_p2v)):
                diff = (dev.cpu() != host).nonzero()
                if diff.numel():
                    r = int(diff[0, 0])
                    raise InvariantError(
                        f"device {label} of {self.names[i]!r} row {r} = {int(dev[r])} but "
                        f"host has {int(host[r])}"
                    )

    # ----- giving the buffer's memory back -------------------------------------------------

    def release(self, keep_contents: bool, force: bool, keep_address: bool = False) -> None:
        """Give the byte buffer's memory back; tables and ids stay (see
        :meth:`ukv.UnifiedKVPool.release_memory`). Every refusal comes before anything
        changes, but for queued frees, applied before the live pages are counted."""
        self.check_usable()
        self.check_not_capturing("release_memory")
        if self.tap is not None:
            raise ArgumentError(
                "bad call release_memory: the pool runs in a tensor-parallel mode; release "
                "is not supported there"
            )
        if keep_contents and self.device.type == "meta":
            raise ArgumentError(
                "bad argument keep_contents = True: a meta pool holds no bytes to keep"
            )
        if keep_address and not self.buffer.keeps_address:
            raise ArgumentError(
                f"bad argument keep_address = True: this pool's buffer would move "
                f"({self.buffer.why_moves})"
            )
        self.forwards.retire(self.arena)
        if self.forwards:
            raise ArgumentError(
                f"bad call release_memory: {len(self.forwards.events)} reported forward(s) "
                "have not completed; wait for them (and retire_completed()) first"
            )
        self.settle(wait=True)  # queued frees may move pages: apply them while bytes exist
        if not (keep_contents or force or self.device.type == "meta"):
            self._refuse_dropping_live()
        if self.cuda_index >= 0:
            with torch.cuda.device(self.cuda_index):
                torch.cuda.synchronize()  # no kernel may still read or write the buffer
        self._backup = self.raw.to("cpu", copy=True) if keep_contents else None
        self.buffer.release()
        if not self.buffer.keeps_address:
            # Its launches and NumPy rows hold the old address: a new one comes at resume.
            self.executor = None  # type: ignore[assignment]
            self.ring = None
        self.released = "contents kept on the host" if keep_contents else "contents dropped"
        self._bind_run()

    def _refuse_dropping_live(self) -> None:
        """Raise when live ids would come back zeroed (review round 4, N3)."""
        live = [
            f"{int(self.arena.pool_state(i)[1])} of {info['name']!r}"
            for i, info in enumerate(self.info)
            if self.arena.pool_state(i)[1]
        ]
        if live:
            raise ArgumentError(
                f"bad argument keep_contents = False: live pages ({', '.join(live)}) would "
                "come back zeroed; free them first, pass keep_contents=True to keep their "
                "bytes, or force=True to drop them"
            )

    def resume(self) -> None:
        """Take the buffer's memory back: its bytes as they were (``keep_contents``) or
        zeros; a new executor if the address changed. A failure to get the memory back
        leaves the pool released (the call may be repeated)."""
        if self.released is None:
            raise ArgumentError("bad call resume_memory: the pool's memory is not released")
        self.buffer.resume()
        if self._backup is not None:
            self.raw.copy_(self._backup)
            self._backup = None
        elif self.raw.device.type != "meta":
            self.raw.zero_()
        self.released = None
        if self.executor is None:
            self._build_executor()
        else:
            self._bind_run()

    def ids_out(self, ids: np.ndarray) -> torch.Tensor:
        """Host ids as the pool hands them out: on the tables' device (CPU for meta)."""
        if self.tables[0].device.type == "cpu":
            return torch.from_numpy(ids)
        return to_device(ids, self.tables[0].device)

    @property
    def returns_ids(self) -> bool:
        """Whether the executor writes an allocation's ids on the device itself."""
        return bool(self.executor.returns_ids)

    @property
    def gpu_waits(self) -> int:
        """Times a call waited for the GPU (queued frees, staging memory)."""
        return self.frees.waits + (self.ring.waits if self.ring is not None else 0)

    def live_mask(self, i: int, ids: np.ndarray) -> np.ndarray:
        """Which of these virtual ids are live on sub-pool ``i`` (vectorised)."""
        ps = int(self.info[i]["page_size"])
        floor = int(self.info[i]["min_virtual_page"]) * ps
        return _convert.live_mask(ids, self.arena.v2p(i), ps, floor)

    # ----- queued frees -------------------------------------------------------------------

    def _check_range(self, index: int, ids: np.ndarray, name: str) -> None:
        """Raise InvalidIdError for a negative, reserved or out-of-range id of ``index``."""
        info = self.info[index]
        ps = int(info["page_size"])
        lo, hi = int(info["min_virtual_page"]) * ps, int(info["num_virtual_pages"]) * ps
        bad = (ids < lo) | (ids >= hi)
        if bad.any():
            raise InvalidIdError(
                f"bad argument {name}: id {int(ids[int(np.argmax(bad))])} of "
                f"{info['name']!r} is negative, reserved or out of range (ids are [{lo}, {hi}))"
            )

    def settle(self, wait: bool = False) -> None:
        """Apply queued frees whose ids have landed (all of them with ``wait``)."""
        self.frees.settle(self._apply, wait)

    def _apply(self, entry: Deferred, ids: np.ndarray | None) -> None:
        assert entry.apply is not None, "every queued entry says how it applies"
        entry.apply(ids)
        self.execute()

    def free(
        self, index: int, value: object, core_free: Callable[[np.ndarray], None], name: str
    ) -> None:
        """Free through ``core_free``: now (host ids, nothing of their id space queued),
        queued behind that space's queued frees (host ids), or once landed (GPU ids)."""
        if self.ring is not None and type(value) is torch.Tensor and value.is_cuda:
            self._free_device_ids(index, value, core_free, name)
            return
        ids = _convert.host_ids(name, value)
        if ids.size == 0:
            return
        with self.lock:
            self.check_usable()
            self.check_not_capturing("free")
            if self.frees:
                self.settle()
                if self.frees.blocks(index):
                    # Liveness is only known once the queue ahead is applied; what does
                    # not depend on it is refused now, as the core would.
                    self._check_range(index, ids, name)
                    self.frees.push_host_free(index, ids, core_free)
                    return
            core_free(ids)
            self.execute()

    def _free_device_ids(
        self, index: int, ids: torch.Tensor, apply: Callable[[np.ndarray], None], name: str
    ) -> None:
        """Queue a free of ids on the pool's GPU: an async copy to pinned memory, applied
        once it has landed. Checks what it can without reading the ids."""
        if ids.dtype not in (torch.int32, torch.int64) or ids.dim() != 1:
            raise ArgumentError(
                f"bad argument {name}: dtype {ids.dtype} shape {tuple(ids.shape)} must be "
                "1-D int32/int64"
            )
        if not ids.is_contiguous():
            raise ArgumentError(f"bad argument {name}: stride {ids.stride()} must be contiguous")
        if ids.get_device() != self.cuda_index:
            raise ArgumentError(
                f"bad argument {name}: device {ids.device} is not the pool's {self.device}"
            )
        if ids.numel() == 0:
            return
        ring = self.ring
        assert ring is not None
        with self.lock:
            self.check_usable()
            self.check_not_capturing("free")
            if self.cuda_index >= 0 and torch._C._cuda_getDevice() != self.cuda_index:
                with torch.cuda.device(self.cuda_index):
                    landing = LandingIds.stage(ring, ids)
            else:
                landing = LandingIds.stage(ring, ids)
            self.queue_free(index, landing, apply)

    def queue_free(
        self, index: int, landing: LandingIds, apply: Callable[[np.ndarray], None]
    ) -> Deferred:
        """Queue a free whose ids arrive in ``landing`` (the one entry point of frees of
        GPU ids; tests on the CPU queue stand-in landings through it); the entry."""
        entry = Deferred(index, "free", landing, apply)
        with self.lock:
            self.check_usable()
            self.frees.push(entry)
        return entry

    def group_boundary(
        self,
        index: int,
        pools: tuple[int, ...],
        kind: Boundary,
        apply: Callable[[object], None],
        label: str,
    ) -> None:
        """Open or close a free group of ``pools`` (``index``'s id space) through ``apply``;
        queued behind that space's queued frees so a group holds exactly the frees issued
        inside it."""
        opening = kind == "group_begin"
        with self.lock:
            self.check_usable()
            self.check_not_capturing(kind)
            for i in pools:
                if self.frees.group_open[i] == opening:
                    state = "already open" if opening else "not open"
                    raise ArgumentError(
                        f"bad call {kind.replace('group', 'free_group')} on sub-pool "
                        f"{self.info[i]['name']!r}: a free group is {state} ({label})"
                    )
            if self.frees:
                self.settle()
            if self.frees.blocks(index):
                self.frees.push(Deferred(index, kind, apply=apply))
            else:
                apply(None)
                if not opening:
                    self.execute()
            for i in pools:
                self.frees.group_open[i] = opening

    def _settle_segment(self, seg: int) -> None:
        """The staging ring needs segment ``seg`` back: the queued frees and write sets
        landing there keep private copies of their ids (waiting if still in flight)."""
        for landing in self.frees.in_segment(seg) + self.forwards.in_segment(seg):
            if not landing.landed():
                self.frees.waits += 1
            landing.detach()

    # ----- allocation helpers -------------------------------------------------------------

    def allocate(
        self, op: Callable[[], Any], index: int, want_ids: bool, last: Any = None
    ) -> tuple[Any, Any]:
        """Run an allocation through the core and execute its plan; returns ``(result,
        device ids or None)``. When it does not fit and frees of its id space (or any
        space: a neighbour's frees give bytes too) are in flight, they are applied first,
        waiting for them (counted in ``gpu_waits``)."""
        with self.lock:
            self.check_not_capturing("alloc")
            if self.frees:
                self.settle()
            res = op()
            if res is None and self.frees.frees():
                self.settle(wait=True)
                res = op()
            out = self.execute(res is not None and want_ids and self.returns_ids, last)
        return res, out


def check_out_cache_loc(out_cache_loc: object) -> None:
    """Refuse a write set that is not a 1-D contiguous int32/int64 tensor of ids (checked
    at report time, not at the next flush, which would then fail until it completes)."""
    if not isinstance(out_cache_loc, torch.Tensor):
        raise ArgumentError(
            f"bad argument out_cache_loc: {type(out_cache_loc).__name__} must be a torch.Tensor"
        )
    if out_cache_loc.dtype not in (torch.int32, torch.int64) or out_cache_loc.dim() != 1:
        raise ArgumentError(
            f"bad argument out_cache_loc: dtype {out_cache_loc.dtype} shape "
            f"{tuple(out_cache_loc.shape)} must be 1-D int32/int64"
        )
    if not out_cache_loc.is_contiguous() or out_cache_loc.device.type == "meta":
        raise ArgumentError(
            f"bad argument out_cache_loc: stride {out_cache_loc.stride()} on "
            f"{out_cache_loc.device} must be contiguous and hold ids"
        )


def _released_run(want_ids: bool = False, last: Any = None) -> Any:
    """The executor's place while the buffer is given back: every path that plans refuses
    before it reaches this, so reaching it is a bug."""
    raise AssertionError("a plan was executed while the pool's memory was released")
