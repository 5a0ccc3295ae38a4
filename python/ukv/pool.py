"""``UnifiedKVPool``: one byte buffer, two sub-pools growing from its ends (API.md §3).

The pool owns the zeroed ``uint8`` buffer (on ``cuda`` or ``cpu``; ``meta`` keeps only the
bookkeeping, for planning at production sizes), the strided views each sub-pool's kernels
read, and the native arena that decides where every page lives. After each operation the
arena leaves a plan; the pool executes it before returning: it makes the current stream
wait on any in-flight forward the plan names, moves every page of a sub-pool in one
kernel launch, and scatters the changed table rows into the device mirrors.

Stream contract: moves and table updates are queued on the **current** stream, in order
with the caller's later work on that stream. A caller whose forward runs on another
stream must make the current stream wait on it before ``free``/``flush`` (eager mode
moves bytes the forward may still read), or use lazy mode and report forwards with
:meth:`UnifiedKVPool.set_inflight_forward`.

Thread safety: a pool may be shared by threads. Every operation holds the pool's lock
from the call into the core until its plan has been executed, so operations are atomic
with respect to each other; reads of sizes are single calls into the core. The native
arena itself refuses a concurrent call with an error rather than racing. Physical ids
(``translate_kv_loc``) stay valid only until the next free or flush by any thread moves
pages: a thread that translates and then writes or reads bytes while other threads
allocate and free holds :attr:`UnifiedKVPool.lock` across both steps.
"""

from __future__ import annotations

import itertools
import logging
import numbers
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ukv import _core, layout, ops
from ukv._convert import host_ids
from ukv._tables import DeviceTables, to_device
from ukv.allocator import SubPoolAllocator
from ukv.errors import ArgumentError, PoolConfigError
from ukv.specs import MambaSpec, MHASpec, MLASpec, Spec, check_page_size

logger = logging.getLogger("ukv")

DEVICE_TYPES = ("cuda", "cpu", "meta")


@dataclass(frozen=True)
class SubPoolStats:
    """Occupancy and compaction counters of one sub-pool."""

    name: str
    live_pages: int
    holes: int
    pending_pages: int
    span_pages: int
    used_bytes: int
    pages_moved: int
    bytes_moved: int
    compactions: int
    flushes: int


@dataclass(frozen=True)
class PoolStats:
    """A snapshot of the whole pool (``UnifiedKVPool.stats()``)."""

    total_bytes: int
    reserved_floor_bytes: int
    free_gap_bytes: int
    sub_pools: tuple[SubPoolStats, ...]

    @property
    def pages_moved(self) -> int:
        """Pages moved by compaction so far, all sub-pools."""
        return sum(s.pages_moved for s in self.sub_pools)

    @property
    def bytes_moved(self) -> int:
        """Bytes moved by compaction so far, all sub-pools."""
        return sum(s.bytes_moved for s in self.sub_pools)

    @property
    def compactions(self) -> int:
        """Operations that moved at least one page, all sub-pools."""
        return sum(s.compactions for s in self.sub_pools)


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

    Raises:
        PoolConfigError: bad sizes, specs, directions, names, or a buffer too small to hold
            the reserved floor plus one page per sub-pool.
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
    ) -> None:
        self.total_bytes = _positive("total_bytes", total_bytes)
        self.page_size = check_page_size(page_size)
        self.device = _device(device)
        self._specs = _check_specs(specs)
        self._index = {s.name: i for i, s in enumerate(self._specs)}
        pools = [
            (s.name, s.entry_bytes, s.effective_page_size(self.page_size), s.grow, None)
            for s in self._specs
        ]
        self._arena = _core.Arena(
            self.total_bytes,
            pools,
            lazy=bool(lazy),
            max_moves_per_flush=_positive("max_moves_per_flush", max_moves_per_flush),
        )
        self.lazy = bool(lazy)
        # One lock per pool: an operation and the execution of its plan are one step, so a
        # second thread can never replace a plan before it has been executed.
        self._lock = threading.RLock()
        self.raw = _buffer(self.total_bytes, self.device)
        table_device = torch.device("cpu") if self.device.type == "meta" else self.device
        self._tables = [DeviceTables(self._arena, i, table_device) for i in range(len(self._specs))]
        self._info = [self._arena.pool_info(i) for i in range(len(self._specs))]
        self._views = [self._build_views(s, info) for s, info in zip(self._specs, self._info)]
        # set_kv's validated views and launch geometry, per MHA sub-pool and layer (lazily).
        self._store_targets: dict[str, list[ops.StoreTarget]] = {}
        self._allocators = [SubPoolAllocator(self, i) for i in range(len(self._specs))]
        # Host tables are live views: changed rows need no work unless a device mirrors them.
        mirrored = any(t.mirrored for t in self._tables)
        self._work_mask = PLAN_WAITS | PLAN_MOVES | PLAN_RESETS | (PLAN_ROWS if mirrored else 0)
        # CPU pools move pages with NumPy indexing unless Triton's interpreter is on (tests).
        self._use_triton = ops.use_triton(self.raw.device)
        self._ids_on_host = self._tables[0].device.type == "cpu"
        self._host_rows = (
            None
            if self._use_triton or self.device.type != "cpu"
            else [
                _as_records(
                    layout.page_envelope_view(
                        self.raw, int(i["page_bytes"]), int(i["num_pages"])
                    ).numpy()
                )
                for i in self._info
            ]
        )
        self._events: dict[int, Any] = {}
        self._write_locs: dict[int, torch.Tensor] = {}
        self._tokens = itertools.count(1)
        logger.info("%s", self.summary())

    # ----- construction helpers -----------------------------------------------------------

    def _build_views(self, spec: Spec, info: dict[str, Any]) -> Any:
        if isinstance(spec, MHASpec):
            return layout.mha_views(self.raw, spec, info["page_size"], info["num_pages"])
        if isinstance(spec, MLASpec):
            return layout.mla_views(self.raw, spec, info["page_size"], info["num_pages"])
        return layout.state_views(self.raw, spec, info["num_pages"])

    def summary(self) -> str:
        """One line describing the pool: size, floor, and each sub-pool's geometry."""
        parts = [
            f"{i['name']}({type(s).__name__}, grow={i['grow']}, entry={i['entry_bytes']}B, "
            f"page={i['page_size']}, pages={i['num_pages']}, first={i['min_page_index']})"
            for s, i in zip(self._specs, self._info)
        ]
        return (
            f"ukv pool on {self.device}: {self.total_bytes} bytes, floor {self._arena.reserved_floor()}B, "
            f"{'lazy' if self.lazy else 'eager'}; " + "; ".join(parts)
        )

    # ----- introspection ------------------------------------------------------------------

    def _idx(self, name: str) -> int:
        try:
            return self._index[name]
        except (KeyError, TypeError):
            raise ArgumentError(
                f"bad argument name = {name!r}: no such sub-pool (have {list(self._index)})"
            ) from None

    def spec(self, name: str) -> Spec:
        """The spec of sub-pool ``name``."""
        return self._specs[self._idx(name)]

    @property
    def names(self) -> tuple[str, ...]:
        """Sub-pool names, in the order the specs were given."""
        return tuple(self._index)

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
        """
        i = self._idx(name)
        if not isinstance(self._specs[i], MHASpec):
            raise ArgumentError(
                f"bad argument name = {name!r}: {type(self._specs[i]).__name__} has no K/V views"
            )
        k, v = self._views[i]
        return k, v

    def latent_views(self, name: str) -> list[torch.Tensor]:
        """Per-layer views of an MLA sub-pool, shape ``[num_pages, page_size, kv_lora_rank + qk_rope_head_dim]``."""
        i = self._idx(name)
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
        """
        i = self._idx(name)
        if not isinstance(self._specs[i], MambaSpec):
            raise ArgumentError(
                f"bad argument name = {name!r}: {type(self._specs[i]).__name__} has no state views"
            )
        conv, temporal = self._views[i]
        return conv, temporal

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
        targets = self._store_targets.get(name)
        if targets is None:
            spec = self.spec(name)
            ks, vs = self.kv_views(name)
            fp8 = spec.dtype if spec.store_dtype != spec.dtype else None  # type: ignore[attr-defined]
            targets = [ops.store_target(kl, vl, fp8) for kl, vl in zip(ks, vs)]
            self._store_targets[name] = targets
        if (
            isinstance(layer, bool)
            or not isinstance(layer, numbers.Integral)
            or not 0 <= layer < len(targets)
        ):
            raise ArgumentError(
                f"bad argument layer = {layer!r}: sub-pool {name!r} has {len(targets)} layers"
            )
        ops.store_kv_to(targets[int(layer)], loc, k, v, k_scale=k_scale, v_scale=v_scale)

    def get_cpu_copy(self, name: str, ids: torch.Tensor) -> list[torch.Tensor]:
        """Host copies of the bytes of these virtual tokens (KV) or slots (state), for offload.

        Args:
            name: Sub-pool name.
            ids: shape ``[N]`` virtual ids (live ones).

        Returns:
            list[Tensor]: one CPU tensor per view (KV: K then V per layer; state: each conv
            then temporal), each with the token/slot dimension of length N.
        """
        with self._lock:  # translate + gather in one step: a compaction may not intervene
            views, phys = self._gather_targets(name, ids)
            return [gather(view, phys).cpu() for view, gather in views]

    def load_cpu_copy(self, name: str, copy: Sequence[torch.Tensor], ids: torch.Tensor) -> None:
        """Write host copies made by :meth:`get_cpu_copy` back at these (live) virtual ids."""
        with self._lock:
            views, phys = self._gather_targets(name, ids)
            if len(copy) != len(views):
                raise ArgumentError(
                    f"bad argument copy: {len(copy)} tensors, expected {len(views)}"
                )
            for (view, _), src in zip(views, copy):
                _scatter(view, phys, src.to(view.device), self._specs[self._idx(name)])

    def _gather_targets(self, name: str, ids: torch.Tensor) -> tuple[list[Any], torch.Tensor]:
        i = self._idx(name)
        if self.device.type == "meta":
            raise ArgumentError("bad argument device = meta: a meta pool holds no bytes")
        alloc = self._allocators[i]
        host = host_ids("ids", ids)
        for t in host[: min(len(host), 1 << 20)]:
            if (
                not alloc.is_slot_allocated(int(t))
                or int(t) < alloc.min_page_index * alloc.page_size
            ):
                raise ArgumentError(
                    f"bad argument ids: virtual id {int(t)} of {name!r} is not live"
                )
        phys = alloc.translate_kv_loc(to_device(host.astype(np.int64), self._tables[i].device))
        spec = self._specs[i]
        if isinstance(spec, MambaSpec):
            conv, temporal = self._views[i]
            return [(t, _slot_gather) for t in [*conv, temporal]], phys
        if isinstance(spec, MLASpec):
            return [(t, _token_gather) for t in self._views[i]], phys
        k, v = self._views[i]
        return [(t, _token_gather) for pair in zip(k, v) for t in pair], phys

    # ----- lazy compaction lifecycle ------------------------------------------------------

    def flush(self, urgent: bool = False) -> int:
        """Lazy mode's compaction pass on every sub-pool; 0 in eager mode.

        Non-urgent passes skip pages the in-flight forward writes and park vacated pages
        until it completes; urgent passes wait for it and pack fully.

        Returns:
            int: page moves performed.
        """
        if not self.lazy:
            return 0
        with self._lock:
            return self._flush_locked(bool(urgent))

    def _flush_locked(self, urgent: bool) -> int:
        self._retire_locked()
        latest = self._arena.latest_token()
        loc = self._write_locs.get(latest) if latest is not None else None
        if loc is not None and not urgent:
            host = host_ids("out_cache_loc", loc)
            for i, spec in enumerate(self._specs):
                if spec.is_paged:
                    self._arena.set_inflight_writes(i, latest, host)
            self._write_locs.pop(latest, None)
        moves = int(self._arena.flush(urgent))
        self._apply_plan()
        return moves

    def set_inflight_forward(self, event: Any, out_cache_loc: torch.Tensor | None = None) -> None:
        """Report a forward just launched: ``event`` completes when it ends (an object with
        ``query() -> bool``, e.g. ``torch.cuda.Event``), and it writes KV at the virtual
        tokens ``out_cache_loc`` of every KV sub-pool. Only references are stored."""
        if not hasattr(event, "query"):
            raise ArgumentError(f"bad argument event = {event!r}: needs a query() method")
        if out_cache_loc is not None:
            # Metadata only (no device read): the ids themselves are read at the next flush.
            if not isinstance(out_cache_loc, torch.Tensor):
                raise ArgumentError(
                    f"bad argument out_cache_loc: {type(out_cache_loc).__name__} must be a torch.Tensor"
                )
            if out_cache_loc.dtype not in (torch.int32, torch.int64) or out_cache_loc.dim() != 1:
                raise ArgumentError(
                    f"bad argument out_cache_loc: dtype {out_cache_loc.dtype} shape "
                    f"{tuple(out_cache_loc.shape)} must be 1-D int32/int64"
                )
            # Checked now, not at the next flush (which would then fail until it completes).
            if not out_cache_loc.is_contiguous() or out_cache_loc.device.type == "meta":
                raise ArgumentError(
                    f"bad argument out_cache_loc: stride {out_cache_loc.stride()} on "
                    f"{out_cache_loc.device} must be contiguous and hold ids"
                )
        with self._lock:
            token = next(self._tokens)
            self._events[token] = event
            if out_cache_loc is not None:
                self._write_locs[token] = out_cache_loc
            self._arena.set_latest_token(token)

    def retire_completed(self) -> None:
        """Release what completed forwards were holding (pending pages, write blockers)."""
        with self._lock:
            self._retire_locked()

    def _retire_locked(self) -> None:
        for token, event in list(self._events.items()):
            if event.query():
                self._arena.retire_token(token)
                del self._events[token]
                self._write_locs.pop(token, None)

    # ----- plan execution --------------------------------------------------------------------

    def _apply_plan(self) -> None:
        """Execute the arena's last plan: waits, page moves, table updates."""
        flags = self._arena.plan_flags()
        if not flags & self._work_mask:
            return
        if flags & PLAN_WAITS:
            self._wait(self._arena.plan_waits())
        if flags & PLAN_RESETS:
            for i in self._arena.plan_resets():
                self._tables[i].reupload()
        if self.device.type == "meta":
            return
        moves = self._arena.plan_moves() if flags & PLAN_MOVES else []
        if self._host_rows is not None:
            # CPU without Triton: NumPy fancy indexing on a view of the same memory (the
            # right side is materialised first, as the move contract requires).
            for i, src, dst in moves:
                rows = self._host_rows[i]
                rows[dst] = rows[src]
            return
        self._launch_plan(moves, bool(flags & PLAN_ROWS))

    def _launch_plan(self, moves: list[tuple[int, np.ndarray, np.ndarray]], rows: bool) -> None:
        """Per sub-pool with work: one host-to-device copy of everything the plan needs,
        then one launch (the move kernel with the table scatter fused in, or a plain
        scatter when only table rows changed)."""
        by_pool = {i: (src, dst) for i, src, dst in moves}
        for i, tables in enumerate(self._tables):
            upd = self._arena.plan_table_updates(i) if rows and tables.mirrored else None
            if i not in by_pool and upd is None:
                continue
            src, dst = by_pool.get(i, (_EMPTY, _EMPTY))
            tab_idx, tab_val = upd if upd is not None else (_EMPTY, _EMPTY)
            sizes = [len(src), len(dst), len(tab_idx), len(tab_val)]
            packed = to_device(np.concatenate([src, dst, tab_idx, tab_val]), self.device)
            d_src, d_dst, d_idx, d_val = torch.split(packed, sizes)
            if len(src) == 0 and tables.both is not None:
                tables.both.index_copy_(0, d_idx, d_val)
                continue
            ops.move_pages(
                self.raw,
                int(self._info[i]["page_bytes"]),
                d_src,
                d_dst,
                tables=tables.both if upd is not None else None,
                tab_idx=d_idx if upd is not None else None,
                tab_val=d_val if upd is not None else None,
            )

    def _wait(self, tokens: list[int]) -> None:
        for token in tokens:
            event = self._events.get(token)
            if event is None:
                continue
            if isinstance(event, torch.cuda.Event):
                torch.cuda.current_stream().wait_event(event)
            elif hasattr(event, "synchronize"):
                event.synchronize()

    def _ids_out(self, ids: np.ndarray) -> torch.Tensor:
        if self._ids_on_host:
            return torch.from_numpy(ids)
        return to_device(ids, self._tables[0].device)

    # ----- checks and stats -----------------------------------------------------------------

    def stats(self) -> PoolStats:
        """Bytes used per side, the free gap, holes, pending pages, moves so far."""
        with self._lock:  # one consistent snapshot, not fields of different moments
            return self._stats_locked()

    def _stats_locked(self) -> PoolStats:
        subs = []
        for i, info in enumerate(self._info):
            wm, live, holes, pending, span = self._arena.pool_state(i)
            moved, moved_bytes, compactions, flushes = self._arena.pool_stats(i)
            subs.append(
                SubPoolStats(
                    name=info["name"],
                    live_pages=live,
                    holes=holes,
                    pending_pages=pending,
                    span_pages=span,
                    used_bytes=span * info["page_bytes"],
                    pages_moved=moved,
                    bytes_moved=moved_bytes,
                    compactions=compactions,
                    flushes=flushes,
                )
            )
        return PoolStats(
            total_bytes=self.total_bytes,
            reserved_floor_bytes=self.reserved_floor,
            free_gap_bytes=int(self._arena.gap_bytes(0)),
            sub_pools=tuple(subs),
        )

    def check_invariants(self) -> None:
        """Check the arena's invariants and that device tables mirror the host ones.

        Raises:
            InvariantError: with the out-of-sync values. (On CUDA this reads the device
                tables back: a synchronisation, meant for tests and debugging.)
        """
        with self._lock:  # the core check runs without the GIL: keep writers out
            self._check_invariants_locked()

    def _check_invariants_locked(self) -> None:
        self._arena.check_invariants()
        from ukv.errors import InvariantError

        for i, tables in enumerate(self._tables):
            if not tables.mirrored:
                continue
            host_v2p = torch.from_numpy(self._arena.v2p(i))
            host_p2v = torch.from_numpy(self._arena.p2v(i))
            for label, dev, host in (("v2p", tables.v2p, host_v2p), ("p2v", tables.p2v, host_p2v)):
                diff = (dev.cpu() != host).nonzero()
                if diff.numel():
                    r = int(diff[0, 0])
                    raise InvariantError(
                        f"device {label} of {self._info[i]['name']!r} row {r} = {int(dev[r])} but host has {int(host[r])}"
                    )

    def __repr__(self) -> str:
        return f"UnifiedKVPool({self.summary()})"


_EMPTY = np.empty(0, dtype=np.int64)
# Bits of ``Arena.plan_flags()``.
PLAN_WAITS, PLAN_MOVES, PLAN_RESETS, PLAN_ROWS = 1, 2, 4, 8


def _token_gather(view: torch.Tensor, phys: torch.Tensor) -> torch.Tensor:
    ps = view.shape[1]
    return view[phys // ps, phys % ps]


def _slot_gather(view: torch.Tensor, phys: torch.Tensor) -> torch.Tensor:
    return view[:, phys].transpose(0, 1)


def _scatter(view: torch.Tensor, phys: torch.Tensor, src: torch.Tensor, spec: Spec) -> None:
    if isinstance(spec, MambaSpec):
        view[:, phys] = src.transpose(0, 1)
    else:
        ps = view.shape[1]
        view[phys // ps, phys % ps] = src


def _positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise PoolConfigError(f"invalid {name} = {value!r}: must be a positive int")
    if value >= 1 << 64:
        raise PoolConfigError(f"invalid {name} = {value!r}: must be below 2**64")
    return int(value)


def _device(device: str | torch.device) -> torch.device:
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise PoolConfigError(f"invalid device = {device!r}: not a torch device") from None
    if dev.type not in DEVICE_TYPES:
        raise PoolConfigError(f"invalid device = {device!r}: must be cuda, cpu or meta")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise PoolConfigError(f"invalid device = {device!r}: CUDA is not available")
    return dev


def _check_specs(specs: Sequence[Spec]) -> list[Spec]:
    """Two specs (one ``grow="up"``, one ``"down"``), or three with one ``"middle"`` band
    floating between them; unique names."""
    specs = list(specs) if isinstance(specs, (list, tuple)) else []
    if len(specs) not in (2, 3) or not all(isinstance(s, Spec) for s in specs):
        raise PoolConfigError(
            f"invalid specs = {specs!r}: need two specs (one grow='up', one grow='down'), "
            "or three with one grow='middle' between them"
        )
    grows = sorted(s.grow for s in specs)
    if grows not in (["down", "up"], ["down", "middle", "up"]):
        raise PoolConfigError(
            f"invalid specs grow = {grows}: need one 'up' and one 'down', plus at most one 'middle'"
        )
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise PoolConfigError(f"invalid specs name = {dup!r}: names must be unique")
    return specs


def _buffer(total_bytes: int, device: torch.device) -> torch.Tensor:
    if device.type == "meta":
        return torch.empty(total_bytes, dtype=torch.uint8, device=device)
    return torch.zeros(total_bytes, dtype=torch.uint8, device=device)


def _as_records(rows: np.ndarray) -> np.ndarray:
    """``(num_pages, page_bytes)`` uint8 rows as a 1-D array of ``page_bytes``-sized
    records over the same memory: NumPy's fancy indexing then copies a whole page per
    element, about twice as fast for small pages as indexing uint8 rows."""
    if not rows.flags.c_contiguous:
        return rows
    return rows.view(np.dtype((np.void, rows.shape[1]))).reshape(rows.shape[0])
