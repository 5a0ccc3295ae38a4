"""The version seam: everything that differs between the SGLang releases the driver drives.

The driver drives SGLang 0.5.16 and 0.5.23. What moved between them (module paths, the
keywords of the factories and of the scheduler's collaborators, the scheduler methods
themselves) is answered here and nowhere else: :func:`current` returns the
:class:`Release` of the SGLang this process imports, and the rest of the driver asks it.

* 0.5.16: :class:`Release0516`, the scheduler methods of ``loop.Loop``.
* 0.5.23: :class:`Release0523`, the scheduler methods of ``loop0523.Loop0523`` (its
  ``get_next_batch_to_run`` returns a plan and filters the running batch every step,
  ``update_running_batch`` may skip a decode, ``retract_decode`` takes no arguments,
  request memory fields moved to ``req.kv``; see that module).

Keyword sets: SGLang's dataclass collaborators (``SchedulerInvariantChecker``,
``SchedulerBatchResultProcessor``, ...) grew fields between releases. The driver passes
the union of what either release takes, and :func:`construct` hands a class only the
fields it declares; a field a class requires that the driver does not know is an error
(a release the seam was not written for), never silently defaulted.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
from typing import Any


def _accepted(cls: Any) -> tuple[set[str], set[str], bool]:
    """(every keyword ``cls`` takes, the required ones, whether it takes ``**kwargs``)."""
    if dataclasses.is_dataclass(cls):
        names = {f.name for f in dataclasses.fields(cls) if f.init}
        required = {
            f.name
            for f in dataclasses.fields(cls)
            if f.init
            and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING  # type: ignore[misc]
        }
        return names, required, False
    if hasattr(cls, "__struct_fields__"):  # a msgspec Struct: defaults are the last fields
        names_t = tuple(cls.__struct_fields__)
        n_required = len(names_t) - len(cls.__struct_defaults__)
        return set(names_t), set(names_t[:n_required]), False
    sig = inspect.signature(cls)
    names, required, var = set(), set(), False
    for p in sig.parameters.values():
        if p.kind is p.VAR_KEYWORD:
            var = True
        elif p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD):
            names.add(p.name)
            if p.default is p.empty:
                required.add(p.name)
    return names, required, var


def construct(cls: Any, **fields: Any) -> Any:
    """``cls(**fields)`` with only the keywords ``cls`` takes.

    Raises:
        TypeError: ``cls`` requires a keyword not in ``fields``.
    """
    names, required, var = _accepted(cls)
    missing = required - set(fields)
    if missing:
        raise TypeError(
            f"{cls.__name__} requires {sorted(missing)}, which the driver does not know "
            "(an SGLang release the seam in benches/sglang_scheduler/release.py lacks)"
        )
    return cls(**(fields if var else {k: v for k, v in fields.items() if k in names}))


class Release0516:
    """SGLang 0.5.16."""

    version = "0.5.16"
    #: The module of SGLang's unified allocator (its ``torch.cuda.current_stream()``
    #: calls are routed to the host stream on the CPU).
    allocator_module = "sglang.srt.mem_cache.multi_ended_allocator"
    #: Environment SGLang reads at run time that this release needs set.
    environ: dict[str, str] = {}
    #: ``ServerArgs`` fields a launched server derives from the model (the driver sets
    #: them): passed to ``override_server_args`` (True), or set on the published object.
    derived_server_args_as_fields = False
    #: The tree cache's eviction entry points (each evicts on its own, none through another).
    evict_entry_points: tuple[str, ...] = ("evict",)
    #: The tree caches this release builds (``config.CACHES``).
    caches: tuple[str, ...] = ("radix", "hybrid", "chunk")
    #: SGLang's own SWA pool with more SWA than full layers: 0.5.16 indexes its SWA table
    #: out of bounds (its defect 1), so that configuration runs on the drop-in only.
    sglang_runs_more_swa = False
    #: SGLang's own unified Mamba pool with ``speculative_num_draft_tokens`` and the extra
    #: buffer (``config.speculative``).
    spec_on_sglang = True
    #: The patches of SGLang's scheduling code this release needs (``patches``).
    scheduling_patches: tuple[str, ...] = ("swa_locked_full_recovery", "mamba_slot_full_eviction")
    #: SGLang methods whose calls the driver counts, running them unchanged (``paths``):
    #: (module, class, method).
    counted_paths: tuple[tuple[str, str, str], ...] = ()
    #: SGLang's module names the drop-in serves, the pool module first
    #: (``benches/sglang_step_trace.py``: SGLang's own must be in place while its
    #: factories run, since they import its composite allocators when called).
    served_modules: tuple[str, ...] = (
        "sglang.srt.mem_cache.unified_memory_pool",
        "sglang.srt.mem_cache.multi_ended_allocator",
    )
    #: Whether SGLang's own ``init_unified_mamba_pools`` needs the per-step bench's two
    #: repairs to build and run (``benches/sglang_step_trace.py``, module docstring).
    mamba_factory_repairs = True
    #: The dtype of the SWA side's translated ids (``translate_loc_from_full_to_swa``'s
    #: result, and of the ``out=`` buffer a CUDA graph hands it).
    swa_loc_dtype = "int32"
    #: Whether the pools' constructors read SGLang's published process-wide settings
    #: (``get_parallel()``): a caller outside a server publishes ``ServerArgs`` first
    #: (``bootstrap.publish_server_args``).
    needs_published_server_args = False

    def loop_class(self) -> Any:
        from sglang_scheduler.loop import Loop

        return Loop

    def factory_fields(self) -> dict[str, Any]:
        """Keywords of ``init_unified_*_pools`` only this release takes."""
        return {}

    def collaborators(self, stack: Any) -> dict[str, Any]:
        """Fields of the checker / result processor only this release takes."""
        return {}

    def write_loc(self, vids: Any, full: Any, swa: Any) -> Any:
        """The ``KVWriteLoc`` of a write of virtual tokens ``vids`` whose physical ids are
        ``full`` (full sub-pool) and ``swa`` (SWA sub-pool; None without): 0.5.16's
        attention metadata carries the virtual ids with the translated ones."""
        from sglang.srt.mem_cache.memory_pool import KVWriteLoc

        return KVWriteLoc(vids, swa, full_loc=full)

    def ratio_tracker(self, cls: Any, server_args: Any) -> Any:
        """SGLang's ``NewTokenRatioTracker`` as the scheduler builds it."""
        return cls.from_server_args(server_args)

    def component_type(self) -> Any:
        """``ComponentType`` of ``UnifiedRadixCache``'s nodes."""
        from sglang.srt.mem_cache.unified_cache_components import ComponentType

        return ComponentType

    # ----- a request's memory fields (``Req``; 0.5.23 moved them to ``req.kv``) -----------

    def holds_kv(self, req: Any) -> bool:
        return req.kv is not None

    def row(self, req: Any) -> Any:
        """The request's ``req_to_token`` row, or None."""
        return req.req_pool_idx

    def allocated_len(self, req: Any) -> int:
        return req.kv.kv_allocated_len

    def committed_len(self, req: Any) -> int:
        return req.kv_committed_len

    def protected_len(self, req: Any) -> int:
        """``[0, here)`` of the request's row is the tree's."""
        return req.cache_protected_len

    def swa_evicted_len(self, req: Any) -> int:
        """``[.., here)`` of the request's row has lost its SWA slots."""
        return req.kv.swa_evicted_seqlen

    def mamba_idx(self, req: Any) -> Any:
        """The request's state slot (virtual), or None."""
        return req.mamba_pool_idx

    def set_mamba_idx(self, req: Any, value: Any) -> None:
        req.mamba_pool_idx = value

    def extend_len(self, req: Any) -> int:
        """New tokens of the request's extend (admitted)."""
        return req.extend_range.length

    def prefix_len(self, req: Any) -> int:
        """Tokens of the request's prompt the tree served."""
        return len(req.prefix_indices)


class Release0523(Release0516):
    """SGLang 0.5.23: the allocators moved to ``mem_cache.allocator.unified_*``, a
    request's memory fields to ``req.kv``, the scheduler's process-wide settings to the
    runtime context (``get_parallel()``, ``get_schedule()``)."""

    version = "0.5.23"
    allocator_module = "sglang.srt.mem_cache.allocator.unified_sub_pool"
    # SGLang's Python tree core: the wheel's compiled one is built for another torch
    # (tests/test_sglang_0523.py runs the radix caches the same way).
    environ = {"SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND": "python"}
    derived_server_args_as_fields = True  # ServerArgs refuses attributes set after
    caches: tuple[str, ...] = ("radix", "chunk")  # no per-hybrid radix caches any more
    # Allocation-time eviction goes through evict_for_alloc (both call _evict directly).
    evict_entry_points: tuple[str, ...] = ("evict", "evict_for_alloc")
    sglang_runs_more_swa = True
    # No patch: its SWA component's page handover (_transfer_swa_pages), which the driver
    # used to replace by value on both pools, runs as SGLang ships it on both (the drop-in
    # serves bind and the tombstone write since); counted to show the runs reach it.
    scheduling_patches: tuple[str, ...] = ()
    counted_paths: tuple[tuple[str, str, str], ...] = (
        (
            "sglang.srt.mem_cache.unified_cache.components.swa",
            "SWAComponent",
            "_transfer_swa_pages",
        ),
    )
    served_modules: tuple[str, ...] = (
        "sglang.srt.mem_cache.unified_memory_pool",
        "sglang.srt.mem_cache.allocator.unified_sub_pool",
        "sglang.srt.mem_cache.allocator.unified_mamba",
        "sglang.srt.mem_cache.allocator.unified_hybrid_swa",
    )
    mamba_factory_repairs = False  # its Mamba factory builds and runs as shipped
    swa_loc_dtype = "int64"  # its SWA translation writes int64 only (SGLang's own check)
    needs_published_server_args = True  # its Mamba allocator reads get_parallel()

    def loop_class(self) -> Any:
        from sglang_scheduler.loop0523 import Loop0523

        return Loop0523

    def factory_fields(self) -> dict[str, Any]:
        return {"enable_mamba_extra_buffer_lazy": False}

    def write_loc(self, vids: Any, full: Any, swa: Any) -> Any:
        """0.5.23: the plan's physical write ids, marked physical (``KVLocPlan.bind``);
        its unified pools refuse anything else."""
        from sglang.srt.mem_cache.memory_pool import KVWriteLoc

        return KVWriteLoc(full, swa_loc=swa, full_loc=full, physical=True)

    def ratio_tracker(self, cls: Any, server_args: Any) -> Any:
        return cls.from_config()  # reads the published ServerArgs' schedule settings

    def collaborators(self, stack: Any) -> dict[str, Any]:
        from sglang.srt.observability.scheduler_stage_metrics import (
            SchedulerStageMetricsRecorder,
        )

        return {
            "scheduler_stage_metrics": SchedulerStageMetricsRecorder(enabled=False),
            "get_chunked_req": lambda: None,
            "beam_coordinator": _beam_coordinator(stack),
        }

    def component_type(self) -> Any:
        from sglang.srt.mem_cache.unified_cache.component_type import ComponentType

        return ComponentType

    def holds_kv(self, req: Any) -> bool:
        return req.kv.holds_kv

    def row(self, req: Any) -> Any:
        return req.kv.req_pool_idx

    def committed_len(self, req: Any) -> int:
        return req.kv.kv_committed_len

    def protected_len(self, req: Any) -> int:
        return req.kv.cache_protected_len

    def swa_evicted_len(self, req: Any) -> int:
        return req.kv.get_evicted_seqlen(self.component_type().SWA)

    def mamba_idx(self, req: Any) -> Any:
        return req.kv.mamba_pool_idx

    def set_mamba_idx(self, req: Any, value: Any) -> None:
        req.kv.mamba_pool_idx = value

    def extend_len(self, req: Any) -> int:
        return req.extend_len

    def prefix_len(self, req: Any) -> int:
        return req.prefix_len


def _beam_coordinator(stack: Any) -> Any:
    """SGLang's ``BeamCoordinator`` as the scheduler builds it (beam search off: the
    result processor asks it to commit each decode, which it does for beam groups only)."""
    from sglang.srt.beam_search.coordinator import BeamCoordinator
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    return construct(
        BeamCoordinator,
        model_config=stack.model_config,
        spec_algorithm=SpeculativeAlgorithm.NONE,
        dllm_enabled=False,
        max_req_len=stack.config.context_len,
        req_to_token_pool=stack.req_to_token_pool,
        token_to_kv_pool_allocator=stack.allocator,
        tree_cache=stack.tree_cache,
        future_map=None,
    )


_RELEASES = {r.version: r for r in (Release0516(), Release0523())}


@functools.cache
def current() -> Release0516:
    """The release of the SGLang on ``UKV_SGLANG_PATH`` (read without importing it)."""
    import sys
    from pathlib import Path

    tests = str(Path(__file__).resolve().parents[2] / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    import sglang_stubs

    version = sglang_stubs.sglang_release() or "0.5.16"
    if version not in _RELEASES:
        raise SystemExit(f"the scheduler driver drives SGLang 0.5.16 and 0.5.23, not {version}")
    return _RELEASES[version]


def import_allocator_module() -> Any:
    return importlib.import_module(current().allocator_module)
