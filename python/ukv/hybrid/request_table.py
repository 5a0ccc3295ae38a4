"""``RequestTable``: request slot → its virtual tokens and its state slot, device + host.

Attention kernels read a request's tokens from a device table (SGLang's
``req_to_token``); the scheduler frees and evicts requests on the host. Reading the
device table back to free a request would wait for the GPU, so this table keeps a host
mirror of every row it writes and frees from the mirror: :meth:`free_request` never reads
the device. Rows are written through pinned host memory with non-blocking copies on the
current stream, in order with the kernels that read them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ukv import _convert
from ukv.errors import ArgumentError, DeferredFreeError, InvalidIdError


class RequestTable:
    """Request slots for a composite (or any token allocator) of a pool.

    Args:
        allocator: The token allocator (``SWAHybridAllocator``, ``MambaHybridAllocator``
            or a ``SubPoolAllocator``); freeing a request frees its tokens through it.
        max_requests: Request slots.
        max_context_len: Tokens per request row.
        device: Where the kernels' tables live (default: the allocator's tables' device).

    Attributes:
        req_to_token: shape ``[max_requests, max_context_len]`` int32 virtual token ids
            on ``device`` (0 where unset: the padding anchor; −1 where a middle span was
            freed, which translates to the padding sink).
        req_to_state: shape ``[max_requests]`` int32 virtual state slots (−1: none).
    """

    def __init__(
        self,
        allocator: Any,
        max_requests: int,
        max_context_len: int,
        *,
        device: str | torch.device | None = None,
    ) -> None:
        self.max_requests = _positive("max_requests", max_requests)
        self.max_context_len = _positive("max_context_len", max_context_len)
        self.allocator = allocator
        self.device = torch.device(device) if device is not None else allocator.v2p.device
        pin = self.device.type == "cuda"
        shape = (self.max_requests, self.max_context_len)
        self._host = torch.zeros(shape, dtype=torch.int32, pin_memory=pin)
        self._host_state = torch.full((self.max_requests,), -1, dtype=torch.int32, pin_memory=pin)
        self.req_to_token = torch.zeros(shape, dtype=torch.int32, device=self.device)
        self.req_to_state = torch.full(
            (self.max_requests,), -1, dtype=torch.int32, device=self.device
        )
        self._lens = np.zeros(self.max_requests, dtype=np.int64)
        self._free = list(range(self.max_requests))
        self._live = np.zeros(self.max_requests, dtype=bool)

    # ----- request slots ----------------------------------------------------------------

    def alloc_request(self) -> int | None:
        """A free request slot (lowest first), or None when all are taken."""
        if not self._free:
            return None
        r = self._free.pop(0)
        self._live[r] = True
        self._lens[r] = 0
        return r

    def available_requests(self) -> int:
        """Free request slots."""
        return len(self._free)

    def length(self, r: int) -> int:
        """Tokens recorded for request ``r``."""
        return int(self._lens[self._check(r)])

    # ----- rows ---------------------------------------------------------------------------

    def append_tokens(self, r: int, ids: torch.Tensor | np.ndarray) -> None:
        """Append virtual token ids (host ids, e.g. from ``alloc(..., host=True)``) to
        request ``r``'s row, on the host and (asynchronously) on the device.

        Raises:
            ArgumentError: the row would pass ``max_context_len``, or bad ids.
            InvalidIdError: ``r`` is not a live request, or an id that is not a live
                token of the allocator (checked on the host tables, no device read).
        """
        r = self._check(r)
        arr = _convert.host_ids("ids", ids)
        start, n = int(self._lens[r]), int(arr.size)
        if start + n > self.max_context_len:
            raise ArgumentError(
                f"bad argument ids: {n} more tokens for request {r} make {start + n}, "
                f"past max_context_len {self.max_context_len}"
            )
        if n == 0:
            return
        self._check_live_tokens(arr)
        self._host[r, start : start + n] = torch.from_numpy(arr.astype(np.int32, copy=False))
        self._lens[r] = start + n
        self._push(self.req_to_token[r, start : start + n], self._host[r, start : start + n])

    def tokens(self, r: int) -> torch.Tensor:
        """Request ``r``'s virtual tokens from the host mirror, shape ``[length]`` int64
        (−1 where a middle span was freed)."""
        r = self._check(r)
        return self._host[r, : self._lens[r]].to(torch.int64)

    def last_loc(self, rs: list[int] | np.ndarray) -> torch.Tensor:
        """Each request's last virtual token from the host mirror (−1 when empty), int64 on
        the CPU: what ``alloc_extend`` / ``alloc_decode`` take as a host ``last_loc``.

        Raises:
            InvalidIdError: a request slot that is not live.
        """
        rows = np.array([self._check(r) for r in np.asarray(rs).reshape(-1).tolist()], np.int64)
        lens = self._lens[rows]
        host = self._host.numpy()
        out = np.where(lens > 0, host[rows, np.maximum(lens - 1, 0)], -1)
        return torch.from_numpy(out.astype(np.int64))

    def set_state(self, r: int, slot: int) -> None:
        """Record request ``r``'s virtual state slot (−1: none).

        Raises:
            ArgumentError: ``slot`` is not an int.
            InvalidIdError: ``r`` is not a live request, or ``slot`` is not a live state
                slot of the allocator's ``mamba_slots``.
        """
        r = self._check(r)
        if isinstance(slot, bool) or not isinstance(slot, (int, np.integer)):
            raise ArgumentError(f"bad argument slot = {slot!r}: must be an int state slot")
        slots = getattr(self.allocator, "mamba_slots", None)
        if int(slot) != -1 and (slots is None or not _is_live(slots, int(slot))):
            raise InvalidIdError(f"bad argument slot = {slot}: not a live state slot")
        self._host_state[r] = int(slot)
        self._push(self.req_to_state[r : r + 1], self._host_state[r : r + 1])

    def state(self, r: int) -> int:
        """Request ``r``'s virtual state slot from the host mirror (−1: none)."""
        return int(self._host_state[self._check(r)])

    def translate_mamba_indices(self, req_indices: torch.Tensor) -> torch.Tensor:
        """Physical state slots of these requests, int32 on the device, −1 kept (no
        state); the allocator must be a ``MambaHybridAllocator``."""
        slots = getattr(self.allocator, "mamba_slots", None)
        if slots is None:
            raise ArgumentError(
                "bad call translate_mamba_indices: the allocator has no state slots"
            )
        if not isinstance(req_indices, torch.Tensor) or req_indices.dtype not in (
            torch.int32,
            torch.int64,
        ):
            raise ArgumentError(
                f"bad argument req_indices: {req_indices!r} must be an int32/int64 tensor"
            )
        idx = req_indices.to(self.device, torch.int64)
        if req_indices.device.type == "cpu":
            bad = (req_indices < 0) | (req_indices >= self.max_requests)
            if bool(bad.any()):
                raise InvalidIdError(
                    f"bad argument req_indices: {req_indices[bad][:8].tolist()} outside "
                    f"[0, {self.max_requests})"
                )
            virt = self.req_to_state[idx]
        else:
            # A range check would wait for the GPU: rows outside the table read as -1
            # (no state), like padding, instead of reading out of bounds.
            inside = (idx >= 0) & (idx < self.max_requests)
            virt = torch.where(inside, self.req_to_state[idx.clamp(0, self.max_requests - 1)], -1)
        return slots.translate(virt).to(torch.int32)

    # ----- freeing ------------------------------------------------------------------------

    def free_tokens(self, r: int, start: int, end: int | None = None) -> None:
        """Free request ``r``'s tokens ``[start, end)`` from the host mirror (no device read).

        ``end`` defaults to the row's length: the eviction of a suffix, which shortens the
        row to ``start``. A middle span stays in the row as −1 entries (on the host and
        the device), which later frees skip. Only pages that no token left in the row
        uses are freed: a page shared with a kept token (a span that starts or ends inside
        a page) stays allocated with that token, and is freed with it.

        Raises:
            ArgumentError: ``start``/``end`` not ints or outside ``[0, length]``.
            InvalidIdError: ``r`` is not a live request.
        """
        r = self._check(r)
        length = int(self._lens[r])
        for name, v in (("start", start), ("end", end)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer))):
                raise ArgumentError(f"bad argument {name} = {v!r}: must be an int")
        end = length if end is None else int(end)
        start = int(start)
        if not 0 <= start <= end <= length:
            raise ArgumentError(
                f"bad argument span [{start}, {end}): request {r} has {length} tokens"
            )
        if start == end:
            return
        row = self._host[r, :length].numpy().astype(np.int64)
        span = row[start:end]
        span = span[span >= 0]
        ps = int(self.allocator.page_size)
        kept = np.concatenate([row[:start], row[end:]])
        kept_pages = np.unique(kept[kept >= 0] // ps)
        doomed = span[~np.isin(span // ps, kept_pages)]
        if doomed.size:
            self.allocator.free(torch.from_numpy(np.ascontiguousarray(doomed)))
        if end == length:
            self._lens[r] = start
        else:
            self._host[r, start:end] = -1
            self._push(self.req_to_token[r, start:end], self._host[r, start:end])

    def free_request(self, r: int) -> None:
        """Free every token of request ``r`` and its state slot, then the request slot;
        reads only the host mirror. Atomic: every token and the slot are checked live
        first, so a refused call changes nothing; the row is cleared before freeing.

        Raises:
            InvalidIdError: ``r`` is not a live request, or a token or the state slot in
                its row is no longer live (freed elsewhere): nothing is freed then.
        """
        r = self._check(r)
        row = self._host[r, : self._lens[r]].numpy().astype(np.int64)
        ids = row[row >= 0]
        slot = int(self._host_state[r])
        if ids.size:
            self._check_live_tokens(ids)
        slots = getattr(self.allocator, "mamba_slots", None)
        if slot >= 0 and (slots is None or not _is_live(slots, slot)):
            raise InvalidIdError(f"bad argument r = {r}: its state slot {slot} is not live")
        # Clear the row first: whatever happens below, the row never names these again.
        self._lens[r] = 0
        self._live[r] = False
        self._free.append(r)
        self._host_state[r] = -1
        self._push(self.req_to_state[r : r + 1], self._host_state[r : r + 1])
        earlier: list[DeferredFreeError] = []
        if ids.size:
            _despite_earlier(lambda: self.allocator.free(torch.from_numpy(ids)), earlier)
        if slot >= 0:
            slot_ids = torch.tensor([slot], dtype=torch.int64)
            _despite_earlier(lambda: self.allocator.mamba_slots.free(slot_ids), earlier)
        if earlier:
            raise earlier[0]

    def _push(self, dst: torch.Tensor, rows: torch.Tensor) -> None:
        """Copy host mirror ``rows`` to the device table, in order with later kernels and
        without a wait. On CUDA the copy reads a pinned snapshot of its own, never the
        mirror itself: the mirror row may be rewritten (a freed suffix re-appended, a
        row reused) before the copy has run (review round 3, S5); the caching host
        allocator keeps the snapshot until its copy is done."""
        if dst.is_cuda:
            snap = torch.empty(rows.shape, dtype=rows.dtype, pin_memory=True)
            snap.copy_(rows)
            dst.copy_(snap, non_blocking=True)
        else:
            dst.copy_(rows)

    def _check_live_tokens(self, ids: np.ndarray) -> None:
        a = self.allocator
        ok = a._rt.live_mask(a._index, ids.astype(np.int64, copy=False))
        if not ok.all():
            bad = int(ids[int(np.argmin(ok))])
            raise InvalidIdError(f"bad argument ids: {bad} is not a live token of {a.name!r}")

    def _check(self, r: object) -> int:
        if isinstance(r, bool) or not isinstance(r, (int, np.integer)):
            raise ArgumentError(f"bad argument r = {r!r}: must be an int request slot")
        if not (0 <= int(r) < self.max_requests and self._live[int(r)]):
            raise InvalidIdError(f"bad argument r = {r}: not a live request slot")
        return int(r)


def _despite_earlier(free: Any, earlier: list[DeferredFreeError]) -> None:
    """Run ``free``; an earlier queued free's rejection, raised before ``free`` did
    anything, is kept for the caller and ``free`` is run again (it cannot repeat: each
    queued free is applied once)."""
    for _ in range(64):
        try:
            free()
            return
        except DeferredFreeError as exc:
            earlier.append(exc)
    raise earlier[-1]


def _positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ArgumentError(f"bad argument {name} = {value!r}: must be a positive int")
    return value


def _is_live(slots: Any, slot: int) -> bool:
    if slot <= 0:  # slot 0 is the padding anchor, never a request's state
        return False
    try:
        return bool(slots.is_slot_allocated(slot))
    except (IndexError, ValueError):  # ukv's InvalidIdError / ArgumentError subclass these
        return False
