"""SGLang 0.5.23's SWA page handover on the drop-in: ``bind`` + the tombstone write.

When an insert into the radix cache meets an SWA tombstone whose full KV a running request
locks, 0.5.23's SWA component gives the node's (kept) virtual pages the incoming request's
SWA pages: it reads their physical pages from the SWA side's ``virtual_to_physical``,
calls ``swa_attn_allocator.bind(kept_pages, physical)``, writes -1 into the table at the
incoming pages (``index_fill_``) and calls ``clear_inverse_history()``. No page is taken
or freed; only ownership moves.

On the drop-in, ``bind`` on the SWA side (:func:`hand_over`) does the whole move in ukv's
core (:meth:`ukv.SWAHybridAllocator.transfer_swa_pages`): each physical page names its
current virtual owner through ``physical_to_virtual``, and that owner hands the page to
the kept id. The incoming rows of the table already read -1 afterwards, so the tombstone
write that follows changes nothing: the SWA side's table is then served as a
:class:`HandedOverTable`, which takes an ``index_fill_(0, pages, -1)`` onto exactly the
pages just handed over (and their rows already -1) as a no-op; any other write is refused
as before (the table stays read-only). The record lasts until that write, the next
handover, or ``clear_inverse_history()``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ukv._readonly import ReadOnlyTable
from ukv.integrations.sglang.errors import SGLangArgumentError, translated

__all__ = ["HandedOverTable", "hand_over", "table_after_handover"]


def _pages(value: Any, name: str) -> np.ndarray:
    try:
        t = torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise SGLangArgumentError(f"bind: {name} = {value!r:.80} is not page ids") from exc
    if t.dtype.is_floating_point or t.dtype == torch.bool or t.dtype.is_complex:
        raise SGLangArgumentError(f"bind: {name} dtype {t.dtype} must be an integer dtype")
    return t.detach().reshape(-1).to(torch.int64).cpu().numpy()


def hand_over(alloc: Any, virtual_ids: Any, physical_ids: Any) -> None:
    """``bind(virtual_ids, physical_ids)`` on the SWA side: give virtual page
    ``virtual_ids[k]`` the physical page ``physical_ids[k]``, which another live full id
    holds now (that id keeps its full side and has no SWA page afterwards). Pairs already
    bound that way are left as they are. Nothing changes on error.

    Raises:
        SGLangArgumentError: lengths differ; a physical page out of range, repeated, or
            bound to no virtual id on this side; a virtual page that is not live on the
            full side or already holds an SWA page (ukv's checks, translated).
        SGLangInvalidIdError: a virtual page outside the id space.
    """
    virt = _pages(virtual_ids, "virtual_ids")
    phys = _pages(physical_ids, "physical_ids")
    name = alloc.sub_pool_name
    if virt.size != phys.size:
        raise SGLangArgumentError(
            f"bind on {name!r}: {virt.size} virtual for {phys.size} physical pages"
        )
    p2v = alloc.physical_to_virtual
    p2v = p2v.numpy() if p2v.device.type == "cpu" else p2v.cpu().numpy()
    seen: set[int] = set()
    for p in phys.tolist():
        # Row 0 is the padding sink; the last row is a sentinel.
        if not 0 < p < p2v.size - 1 or p2v[p] <= 0:
            raise SGLangArgumentError(
                f"bind on {name!r}: physical page {p} is bound to no virtual page here "
                "(ukv binds every physical page to a virtual id; bind hands a bound page "
                "to another id)"
            )
        if p in seen:
            raise SGLangArgumentError(f"bind on {name!r}: physical page {p} is repeated")
        seen.add(p)
    holders = p2v[phys]
    moving = holders != virt
    src, dst = holders[moving], virt[moving]
    swa = alloc.unified_buffer.swa_hybrid()
    assert swa is not None, "a non-owner is always the SWA side of a bound pair"
    with translated():
        swa.transfer_swa_pages(src, dst)
    alloc._handed_over = frozenset(src.tolist())


def table_after_handover(alloc: Any, table: torch.Tensor) -> torch.Tensor:
    """The SWA side's ``virtual_to_physical`` while a handover's tombstone write may
    follow: ``table`` served as a :class:`HandedOverTable` of ``alloc``."""
    with torch._C.DisableTorchFunctionSubclass():
        view = table.as_subclass(HandedOverTable)
    view._ukv_label = getattr(table, "_ukv_label", "a ukv table")
    view._ukv_allocator = alloc
    return view


class HandedOverTable(ReadOnlyTable):
    """A read-only table that takes the tombstone write after a handover as a no-op."""

    _ukv_allocator: Any = None

    @classmethod
    def __torch_function__(
        cls,
        func: Callable[..., Any],
        types: tuple[type, ...],
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        target = args[0] if args else None
        if (
            getattr(func, "__name__", "") == "index_fill_"
            and isinstance(target, HandedOverTable)
            and _is_tombstone_write(target, args[1:], kwargs or {})
        ):
            target._ukv_allocator._handed_over = frozenset()
            return target
        return super().__torch_function__(func, types, args, kwargs)


def _is_tombstone_write(table: HandedOverTable, rest: tuple[Any, ...], kwargs: dict) -> bool:
    """``index_fill_(0, pages, -1)`` with ``pages`` exactly the pages just handed over,
    whose rows already hold -1: a write that changes nothing."""
    names = ("dim", "index", "value")
    given = dict(zip(names, rest))
    given.update({k: v for k, v in kwargs.items() if k in names})
    dim, index, value = (given.get(n) for n in names)
    handed = getattr(table._ukv_allocator, "_handed_over", frozenset())
    if dim != 0 or not handed or not isinstance(index, torch.Tensor):
        return False
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            return False
        value = value.item()
    if value != -1:
        return False
    pages = index.detach().reshape(-1).to(torch.int64).cpu()
    if set(pages.tolist()) != handed:
        return False
    with torch._C.DisableTorchFunctionSubclass():
        rows = table[pages.to(table.device)]
    return bool((rows == -1).all())
