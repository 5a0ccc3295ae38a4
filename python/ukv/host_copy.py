"""Host copies of live tokens' KV or slots' states, for offload and retraction.

``UnifiedKVPool.get_cpu_copy`` gathers the bytes of live virtual ids into CPU tensors (one
per view: K then V per layer, or each conv then temporal) and ``load_cpu_copy`` scatters
them back at live ids, possibly other ones after the pool compacted. Both translate under
the pool's lock, so no compaction can fall between translating and copying.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ukv._convert import first_dead_id, host_ids
from ukv._tables import to_device
from ukv.errors import ArgumentError, InvalidIdError
from ukv.specs import MambaSpec, MHASpec, Spec

if TYPE_CHECKING:
    from ukv.allocator import SubPoolAllocator
    from ukv.execution.runtime import PoolRuntime


class HostCopy(list):
    """What :meth:`UnifiedKVPool.get_cpu_copy` returns: a list of CPU tensors, plus
    ``wait()`` for a non-blocking copy (a no-op otherwise)."""

    event: Any = None

    def wait(self) -> HostCopy:
        """Wait until an asynchronous copy has landed; returns self."""
        if self.event is not None:
            self.event.synchronize()
        return self


def targets(
    rt: PoolRuntime, alloc: SubPoolAllocator, spec: Spec, views: Any, ids: object
) -> tuple[list[tuple[torch.Tensor, Any]], torch.Tensor]:
    """The views of ``alloc``'s sub-pool with their gathers, and the physical ids of
    live virtual ``ids`` (call under the pool's lock). Queued frees are not applied (a
    query moves no page): ids they name still hold their bytes.

    Raises:
        ArgumentError: a meta pool (no bytes), or bad ids.
        InvalidIdError: an id that is not live (every id is checked, vectorised).
    """
    if rt.device.type == "meta":
        raise ArgumentError("bad argument device = meta: a meta pool holds no bytes")
    i = rt.index(alloc.name)
    host = host_ids("ids", ids).astype(np.int64, copy=False)
    # The id space's floor: a pool binding another's ids checks the owner's floor.
    floor = int(rt.info[i]["min_virtual_page"]) * alloc.page_size
    bad = first_dead_id(host, rt.arena.v2p(i), alloc.page_size, floor)
    if bad is not None:
        raise InvalidIdError(f"bad argument ids: virtual id {bad} of {alloc.name!r} is not live")
    phys = alloc.translate_kv_loc(to_device(host, rt.tables[i].device))
    return views_of(spec, views), phys


def views_of(spec: Spec, views: Any) -> list[tuple[torch.Tensor, Any]]:
    """Every view of a sub-pool with the gather that reads ids from it."""
    if isinstance(spec, MambaSpec):
        conv, temporal = views
        return [(t, _slot_gather) for t in [*conv, temporal]]
    if isinstance(spec, MHASpec):
        k, v = views
        return [(t, _token_gather) for pair in zip(k, v) for t in pair]
    return [(t, _token_gather) for t in views]  # MLA: one latent view per layer


def copy_out(
    views: list[tuple[torch.Tensor, Any]], phys: torch.Tensor, non_blocking: bool
) -> HostCopy:
    """Gather ``phys`` from each view into host tensors. ``non_blocking`` (CUDA): into
    pinned memory, with an event recorded on the pool device's current stream (the one
    the copies were queued on, whatever device is current)."""
    if not (non_blocking and phys.is_cuda):
        return HostCopy([gather(view, phys).cpu() for view, gather in views])
    out = HostCopy()
    for view, gather in views:
        part = gather(view, phys)
        host = torch.empty(part.shape, dtype=part.dtype, pin_memory=True)
        out.append(host.copy_(part, non_blocking=True))
    out.event = torch.cuda.Event()
    out.event.record(torch.cuda.current_stream(phys.device))
    return out


def check_copy(
    views: list[tuple[torch.Tensor, Any]], copy: Sequence[torch.Tensor], n: int, slots: bool
) -> None:
    """Check every tensor's count, shape and dtype before anything is written."""
    if not isinstance(copy, Sequence) or len(copy) != len(views):
        got = len(copy) if isinstance(copy, Sequence) else type(copy).__name__
        raise ArgumentError(f"bad argument copy: {got} tensors, expected {len(views)}")
    for k, ((view, _), src) in enumerate(zip(views, copy)):
        want = _gathered_shape(view, n, slots)
        if not isinstance(src, torch.Tensor) or tuple(src.shape) != want or src.dtype != view.dtype:
            desc = (
                f"shape {tuple(src.shape)} dtype {src.dtype}"
                if isinstance(src, torch.Tensor)
                else type(src).__name__
            )
            raise ArgumentError(
                f"bad argument copy[{k}]: {desc}, expected shape {want} dtype {view.dtype}"
            )


def copy_in(
    views: list[tuple[torch.Tensor, Any]],
    copy: Sequence[torch.Tensor],
    phys: torch.Tensor,
    slots: bool,
) -> None:
    """Scatter checked host tensors back at ``phys``."""
    for (view, _), src in zip(views, copy):
        src = src.to(view.device)
        if slots:
            view[:, phys] = src.transpose(0, 1)
        else:
            ps = view.shape[1]
            view[phys // ps, phys % ps] = src


def _gathered_shape(view: torch.Tensor, n: int, slots: bool) -> tuple[int, ...]:
    if slots:  # [layer, slot, ...] gathered per slot: [n, layer, ...]
        return (n, view.shape[0], *view.shape[2:])
    return (n, *view.shape[2:])  # [page, token, ...] gathered per token


def _token_gather(view: torch.Tensor, phys: torch.Tensor) -> torch.Tensor:
    ps = view.shape[1]
    return view[phys // ps, phys % ps]


def _slot_gather(view: torch.Tensor, phys: torch.Tensor) -> torch.Tensor:
    return view[:, phys].transpose(0, 1)
