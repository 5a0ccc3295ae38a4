"""Tokens that continue a request's partial page, finished from a ``last_loc`` on the device.

``alloc_extend`` / ``alloc_decode`` with ``last_loc`` on the GPU cannot read it on the host
without waiting for the GPU. The core then leaves each continuing token encoded as
``k + page_size * e``: its distance ``k >= 1`` from ``last_loc[r]`` and the in-page offset
``e`` that ``last_loc[r]`` must have (``ukv_core::continue_token``). The device finishes it
as ``last_loc[r] + k`` after checking that ``last_loc[r]`` can be that request's last
token: inside the owner's id space above the padding page, at offset ``e``, on a bound
page. A token that fails (a ``-1``, a stale id from a freed page, a wrong offset) gets id 0,
the padding sink, so its K/V never lands in another request's page, and the pool's
:class:`FaultRecord` counts it. ``UnifiedKVPool.check_device_errors()`` reads that record
(the one wait, at a moment the caller picks) and raises
:class:`~ukv.errors.InvalidIdError` naming the first bad request and value.

Not detectable without the request's own page list: a stale ``last_loc`` that names a
*bound* page at the right offset (another request's page). The request table
(``RequestTable.last_loc``) hands out a host ``last_loc``, which the core checks exactly.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ukv.errors import InvalidIdError

NO_FAULT = (1 << 63) - 1
"""The record's "first fault" word when nothing failed (every real key is smaller)."""

VALUE_BITS = 32
"""A fault key is ``request << 32 | clamp(last_loc + 1, 0, 2^32 - 1)``."""


class ContinuationCheck(NamedTuple):
    """What the device checks a ``last_loc`` against, for one id-owning sub-pool."""

    page_size: int
    id_lo: int
    """First id of the first real page (``min_virtual_page * page_size``)."""
    id_hi: int
    """One past the owner's last id (``num_virtual_pages * page_size``)."""
    v2p: torch.Tensor
    """The owner's v2p table on the pool's device (-1 rows are unbound)."""


class FaultRecord:
    """Two int64 words on the pool's device: ``[bad tokens, first fault key]``.

    Kernels add to the count and lower the key with atomics; only :meth:`raise_if_any`
    reads it on the host.
    """

    def __init__(self, device: torch.device) -> None:
        self.tensor = torch.tensor([0, NO_FAULT], dtype=torch.int64, device=device)

    def raise_if_any(self) -> None:
        """Wait for the work queued so far on the current stream, then raise
        :class:`InvalidIdError` if any continuation failed since the last call (the record
        is cleared either way)."""
        count, key = (int(v) for v in self.tensor.cpu())
        if count == 0:
            return
        self.tensor.copy_(torch.tensor([0, NO_FAULT], dtype=torch.int64))
        req, val = key >> VALUE_BITS, (key & ((1 << VALUE_BITS) - 1)) - 1
        shown = f">= {val}" if val == (1 << VALUE_BITS) - 2 else str(val)
        raise InvalidIdError(
            f"bad argument last_loc = {shown} (request {req}): on the device, {count} "
            "token(s) continued a last_loc that is not a bound token at its request's "
            "page offset (-1, the padding page, out of range, freed, or stale); they were "
            "given id 0, the padding sink"
        )


class DeviceLast(NamedTuple):
    """A ``last_loc`` on the device, the check its continuations must pass and the
    record their failures go to."""

    loc: torch.Tensor
    check: ContinuationCheck
    record: FaultRecord


def finish_with_torch(tokens: torch.Tensor, req: torch.Tensor, last: DeviceLast) -> torch.Tensor:
    """The kernel's continuation step in torch ops on the device (no host read): for
    executors that do not write ids themselves. ``tokens``/``req`` are the core's arrays
    on ``last.loc``'s device."""
    c = last.check
    has = req >= 0
    loc = last.loc.to(torch.int64).gather(0, req.clamp(min=0))
    k, want = tokens % c.page_size, tokens // c.page_size
    in_range = has & (loc >= c.id_lo) & (loc < c.id_hi)
    page = torch.where(in_range, loc // c.page_size, torch.zeros_like(loc))
    bound = c.v2p.to(loc.device).gather(0, page) >= 0
    ok = in_range & bound & (loc % c.page_size == want) & (k >= 1)
    out = torch.where(has, torch.where(ok, loc + k, torch.zeros_like(loc)), tokens)
    bad = has & ~ok
    if bad.numel():
        value = (loc + 1).clamp(0, (1 << VALUE_BITS) - 1)
        key = torch.where(bad, (req << VALUE_BITS) | value, torch.full_like(req, NO_FAULT))
        rec = last.record.tensor
        rec[0:1].add_(bad.sum().view(1))
        torch.minimum(rec[1:2], key.min().view(1), out=rec[1:2])
    return out
