"""SGLang defects and drop-in gaps the driver works around, each named in the run's
summary (``release.Release*.scheduling_patches`` says which a release needs).

SGLang 0.5.16:

Two concern only SGLang's own unified Mamba pool (the drop-in has neither defect):

* ``mamba_factory_keyword``: ``init_unified_mamba_pools`` raises ``TypeError``: its
  ``UnifiedHybridReqToTokenPool._init_mamba_pool`` lacks the ``enable_gdn_replayssm_spec``
  keyword the base ``HybridReqToTokenPool.__init__`` passes. The keyword (False: the
  feature is off) is accepted and dropped.
* ``mamba_pool_replayssm_attrs``: its ``UnifiedMambaPool`` skips ``MambaPool.__init__``
  and never sets ``replayssm_cache_base`` / ``replayssm_is_flush``, which
  ``HybridReqToTokenPool.alloc`` reads for every new request (``AttributeError``). They
  are set to None, what ``MambaPool`` sets with the ReplaySSM ring off.

Two concern SGLang's scheduling code on *any* unified pool, and are applied to both
pools alike (the comparison stays fair; the drop-in shares SGLang's API here):

* ``swa_locked_full_recovery``: both SWA radix caches, when an insert meets an SWA
  tombstone whose full KV a running request still locks, re-point the node's full ids at
  the incoming request's SWA slots (``SWARadixCache._recover_tombstone_keeping_locked_full``,
  ``SWAComponent._restore_device_value_with_locked_full``): ``set_full_to_swa_mapping``,
  then ``allocator.full_to_swa_index_mapping[incoming] = 0``. That is the non-unified
  allocator's API: a unified pool binds the SWA side to full's virtual ids, there is no
  mapping to re-point (SGLang's unified allocator has no ``full_to_swa_index_mapping``,
  ``AttributeError``; its ``set_full_to_swa_mapping`` is a no-op stub). Any trace whose
  prefixes are shared past the sliding window gets there. Replaced by the same outcome
  through a unified pool's calls (:func:`rebind`).
* ``mamba_slot_full_eviction``: the Mamba radix caches allocate a state slot to donate a
  copy of a request's state to the tree (``_alloc_mamba_slot``) and, when none is free,
  evict only tree states before asserting "Can not alloc mamba cache". On a unified pool
  the slot may be missing because the full side holds the shared bytes (the tree's
  evictable full KV among them): admission reserves the gap for a request's running slot
  only (``PrefillAdder._mamba_gap_budget_for_req``'s FIXME), not for this copy. SGLang's
  own pool dies there too (seed 3 of the default CPU trace). The patched method then
  also evicts the full KV one slot's bytes take (``mamba_slot_full_token_cost``).

SGLang 0.5.23 fixed both scheduling defects on its own pool and needs no patch: its SWA
component's page handover (``SWAComponent._transfer_swa_pages``: ``bind`` of the incoming
request's physical SWA pages to the node's ids, then a tombstone write into the SWA v2p
table), which the driver replaced by value on both pools while the drop-in refused
``bind``, runs as SGLang ships it on both (``paths`` counts its calls).
"""

from __future__ import annotations

import types
from typing import Any

import torch

#: Names of the patches applied in this process, in order.
APPLIED: list[str] = []
#: How many times each patch's fallback ran.
COUNTS: dict[str, int] = {}

_stack: Any = None


def _note(name: str) -> None:
    if name not in APPLIED:
        APPLIED.append(name)
        COUNTS.setdefault(name, 0)


def mamba_factory_keyword(pool_module: Any) -> None:
    """SGLang's pool only: see the module docstring."""
    cls = pool_module.UnifiedHybridReqToTokenPool
    original = cls._init_mamba_pool
    if getattr(original, "_driver_patched", False):
        return

    def _init_mamba_pool(self: Any, *args: Any, enable_gdn_replayssm_spec: bool = False, **kw: Any):
        assert not enable_gdn_replayssm_spec, "GDN ReplaySSM spec is off in this driver"
        return original(self, *args, **kw)

    _init_mamba_pool._driver_patched = True  # type: ignore[attr-defined]
    cls._init_mamba_pool = _init_mamba_pool
    _note("mamba_factory_keyword")


def mamba_pool_replayssm_attrs(req_to_token_pool: Any) -> None:
    """SGLang's pool only: see the module docstring."""
    pool = req_to_token_pool.mamba_pool
    for name in ("replayssm_cache_base", "replayssm_is_flush"):
        if not hasattr(pool, name):
            setattr(pool, name, None)
    _note("mamba_pool_replayssm_attrs")


def scheduling(stack: Any) -> None:
    """The patches of SGLang's scheduling code, bound to ``stack``'s pool."""
    from sglang_scheduler import release

    global _stack
    _stack = stack
    wanted = release.current().scheduling_patches
    if stack.is_swa and "swa_locked_full_recovery" in wanted:
        from sglang.srt.mem_cache.swa_radix_cache import SWARadixCache
        from sglang.srt.mem_cache.unified_cache_components.swa_component import SWAComponent

        SWARadixCache._recover_tombstone_keeping_locked_full = _swa_radix_recover
        SWAComponent._restore_device_value_with_locked_full = _component_recover
        _note("swa_locked_full_recovery")
    elif stack.is_mamba and "mamba_slot_full_eviction" in wanted:
        from sglang.srt.mem_cache.mamba_radix_cache import MambaRadixCache
        from sglang.srt.mem_cache.unified_cache_components.mamba_component import (
            MambaComponent,
        )

        MambaRadixCache._alloc_mamba_slot = lambda self: _alloc_slot(self)
        MambaComponent._alloc_mamba_slot = lambda self: _alloc_slot(self.cache)
        _note("mamba_slot_full_eviction")


# ----- swa_locked_full_recovery -------------------------------------------------------------


def rebind(full_value: torch.Tensor, incoming: torch.Tensor) -> None:
    """Give the node's virtual tokens ``full_value`` the SWA content of ``incoming``, then
    free ``incoming``: read the incoming SWA bytes (after the in-flight forward lands: a
    chunk being stashed may still be written), release their SWA slots (``free_swa``),
    bind the node's pages on the SWA side (``swa_attn_allocator.alloc_with_virtual``),
    write the bytes there with the pool's own ``set_kv_buffer``, free the incoming tokens."""
    from sglang_scheduler import release

    st = _stack
    pool, alloc = st.token_to_kv_pool, st.allocator
    st.forward_stream.synchronize()
    src = pool.translate_loc_from_full_to_swa(incoming).to(torch.int64)
    assert bool((src > 0).all()), "the incoming tokens must hold their SWA slots"
    saved = {
        layer_id: (
            _rows(pool.get_key_buffer(layer_id), src),
            _rows(pool.get_value_buffer(layer_id), src),
        )
        for layer_id in st.swa_layers
    }
    alloc.free_swa(incoming)
    pages = torch.unique(full_value.to(torch.int64) // alloc.page_size)
    alloc.swa_attn_allocator.alloc_with_virtual(pages)
    dst = pool.translate_loc_from_full_to_swa(full_value).to(torch.int64)
    assert bool((dst > 0).all()), "alloc_with_virtual left a token without an SWA slot"
    for layer_id, (k, v) in saved.items():
        loc = release.current().write_loc(full_value, alloc.translate_kv_loc(full_value), dst)
        pool.set_kv_buffer(types.SimpleNamespace(layer_id=layer_id), loc, k, v)
    alloc.free(incoming)
    COUNTS["swa_locked_full_recovery"] += 1


def _rows(view: torch.Tensor, phys: torch.Tensor) -> torch.Tensor:
    if view.dim() == 4:
        ps = view.shape[1]
        return view[phys // ps, phys % ps].clone()
    return view[phys].clone()


def _swa_radix_recover(self: Any, node: Any, incoming_full: torch.Tensor) -> None:
    assert len(node.value) == len(incoming_full)
    rebind(node.value, incoming_full)
    node.swa_tombstone = False
    self.swa_lru_list.insert_mru(node)
    self.swa_evictable_size_ += len(node.value)


def _component_recover(
    self: Any, node: Any, full_value: torch.Tensor, incoming: torch.Tensor
) -> None:
    rebind(full_value, incoming)
    self._restore_device_value(node, self._translate_full_to_swa(full_value))


# ----- mamba_slot_full_eviction ---------------------------------------------------------------


def _alloc_slot(cache: Any) -> torch.Tensor:
    """SGLang's ``_alloc_mamba_slot``, plus a last step: evict the full KV one slot takes."""
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams

    alloc = cache.req_to_token_pool.mamba_allocator
    slot = alloc.alloc(1)
    if slot is None:
        cache.evict(EvictParams(num_tokens=0, mamba_num=1))
        slot = alloc.alloc(1)
    if slot is None:
        cost = cache.token_to_kv_pool_allocator.mamba_slot_full_token_cost()
        cache.evict(EvictParams(num_tokens=cost))
        slot = alloc.alloc(1)
        COUNTS["mamba_slot_full_eviction"] += 1
    assert slot is not None, "Can not alloc mamba cache"
    return slot
