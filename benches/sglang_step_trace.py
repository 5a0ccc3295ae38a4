"""SGLang's scheduler, one step at a time, against a unified pool: the trace that
``benches/bench_sglang_dropin.py`` times on SGLang 0.5.16's own pool and on ukv's drop-in.

:func:`build` makes one side's stack with the factory of SGLang's module name
(``init_unified_swa_pools`` or ``init_unified_mamba_pools``), given that module: SGLang's
own, or the drop-in's served under the same name. :class:`StepTrace` then drives the
stack the way SGLang 0.5.16's overlap scheduler does (``managers/scheduler.py``,
``mem_cache/allocation.py``, ``mem_cache/common.py``, ``mem_cache/chunk_cache.py``,
``layers/attention/triton_backend.py``, ``hybrid_linear_attn_backend.py``), with a chunk
cache (no radix tree) and a batch of ``batch`` requests that stays full: every
``finish_every`` steps the oldest request finishes and a new one arrives.

One step, in order; the calls marked * are the pool's and are timed (host µs, each call
on its own with ``time.perf_counter``), everything else is the scheduler's own work done
here with plain torch and not timed (the same code on both sides):

1. finish (every ``finish_every`` steps, the oldest request; ``release_kv_cache``):
   *``free_group_begin``, *``free(req_to_token[row, :seq_len])`` (the chunk cache's
   ``cache_finished_req``: int32 device ids, SWA pages already released included; the
   composite filters them), Mamba: *``req_to_token_pool.free_mamba_cache(req)`` (its
   state slot) and *``req_to_token_pool.free(req)``, then *``free_group_end``;
2. prefill (right after a finish, the arriving request, an extend batch of one with an
   empty prefix): Mamba: *``req_to_token_pool.alloc([req])`` (the request row and its
   state slot through the drop-in's or SGLang's slot allocator); page size 1:
   *``alloc(n)`` (SGLang's ``alloc_token_slots``), paged: *``alloc_extend(prefix_lens,
   prefix_lens_cpu, seq_lens, seq_lens_cpu, last_loc=[-1], n)``; its forward's metadata:
   *``translate_kv_loc(out_cache_loc)``, SWA: *``translate_loc_from_full_to_swa`` of it
   (the KV pool's), Mamba: *``translate_mamba_indices`` of its slot; its forward reported
   (*``set_latest_forward_done_event``, *``set_inflight_forward(event, out_cache_loc)``);
3. window frees (SWA, every ``evict_every`` steps: SGLang's ``maybe_evict_swa``, whose
   interval is ``SGLANG_SWA_EVICTION_INTERVAL``, 128 by default): per request whose
   window moved past a page, *``free_swa(req_to_token[row, evicted:new])`` with
   ``new = floor_page(seq_len - window)`` (the chunk cache's threshold), one call per
   request and outside any free group, as ``free_swa_out_of_window_slots`` makes them;
4. decode allocation (``alloc_for_decode``): page size 1: *``alloc(batch)``; paged:
   ``last_loc = req_to_token[req_pool_indices, seq_lens - 1]`` (int32, before the
   increment), then *``alloc_decode(seq_lens + 1, seq_lens_cpu + 1, last_loc)``; the new
   ids are written to ``req_to_token`` and ``seq_lens`` incremented;
5. the decode forward's attention metadata (the Triton backend's ``init_forward_metadata``
   with the unified pool): the batch's virtual ids (``kv_indices``, every live token,
   gathered from ``req_to_token``) and, SWA, the window's (``window_kv_indices``, the last
   ``min(seq_len, window)`` tokens of each request); then
   *``translate_kv_loc(kv_indices)``, SWA: *``token_to_kv_pool.translate_loc_from_full_to_swa``
   of the window and of ``out_cache_loc``, *``translate_kv_loc(out_cache_loc)``, Mamba:
   *``req_to_token_pool.translate_mamba_indices(get_mamba_indices(req_pool_indices))``.
   Under CUDA-graph replay (``graph=True``; ``_translate_cuda_graph_shared_pool_locs``
   and the Mamba backend's ``_replay_metadata``) the same translations write the graph's
   static buffers: *``translate_kv_loc(kv_in[:n], out=kv_out[:n])``,
   *``translate_loc_from_full_to_swa(win_in[:m], out=win_out[:m])`` and of
   ``out_cache_loc`` into its buffer (the composite allocator's, whose ``out=`` takes
   int32), *``translate_kv_loc(out_cache_loc, out=full_out[:batch])``; Mamba's
   ``translate_mamba_indices`` has no ``out=`` on either side: its result is copied into
   the static buffer, as SGLang does. No graph is captured or replayed: the graph holds
   no pool call (SGLang translates before ``graph.replay()``), so replaying it would add
   the same time to both sides;
6. the decode forward reported (the overlap loop): *``set_latest_forward_done_event(ev)``
   and *``set_inflight_forward(ev, out_cache_loc)``, ``ev`` a CUDA event recorded after
   the (empty) forward;
7. the end of the step: one ``torch.cuda.synchronize()`` (standing for the sampler's
   copy of the next tokens to the host that ends every engine step; it keeps the
   device's queue short), then *``flush_opportunistic()`` (where the device is drained,
   as SGLang places it; SGLang 0.5.16's loop calls it only at a disable-overlap boundary
   and when idle, so once per step is at least as often).

SGLang 0.5.23 (``benches/sglang_scheduler/release.py``, the driver's version seam, says
which release ``UKV_SGLANG_PATH`` holds) runs the same trace: its allocators moved to
``mem_cache.allocator.unified_*`` (all served by the drop-in, :func:`served`), its
request tables read a request's memory fields from ``req.kv`` (:class:`Req` is its own
``kv``), its Mamba factory takes ``enable_mamba_extra_buffer_lazy`` (off) and builds and
runs as shipped. SGLang 0.5.16's own stack needs two repairs to run this trace
(:func:`build` with ``sglang_own=True``; nothing else of SGLang is changed):

* Mamba: its ``init_unified_mamba_pools`` raises ``TypeError``: its
  ``UnifiedHybridReqToTokenPool._init_mamba_pool`` lacks the ``enable_gdn_replayssm_spec``
  keyword its base class ``HybridReqToTokenPool.__init__`` passes. While the factory runs,
  the module's ``UnifiedHybridReqToTokenPool`` is a subclass whose ``_init_mamba_pool``
  takes that keyword (it must be False, as it is) and calls SGLang's without it.
* Mamba: its ``UnifiedMambaPool`` sets ``replayssm_write_pos = None`` but not
  ``replayssm_cache_base`` / ``replayssm_is_flush``, which its request table's ``alloc``
  reads (``AttributeError``); both are set to None (the spec-verify ReplaySSM ring off,
  as ``replayssm_write_pos = None`` says) on the built pool.

The model has as many SWA layers as full ones, each side's K/V of the same size: with
more SWA layers, SGLang's SWA-side table (sized by its own pages) is shorter than full's
id space and indexes out of bounds (its known defect 1; the drop-in sizes it by full's).
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
import types
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

#: Timed phases of a step (a call's host time is added to its phase).
PHASES = (
    "finish",
    "prefill",
    "window free",
    "decode alloc",
    "translate",
    "forward report",
    "flush",
)


def _release() -> Any:
    """The release seam of the scheduler driver (``benches/`` is on the path)."""
    from sglang_scheduler import release

    return release.current()


def served() -> tuple[str, ...]:
    """SGLang's module names the drop-in serves, the pool module first (all must be
    SGLang's own while its factories run: they import its composite allocators when
    called)."""
    return _release().served_modules


@dataclass(frozen=True)
class Shape:
    """One row's configuration."""

    hybrid: str  # "swa" or "mamba"
    batch: int  # decode requests per step
    page_size: int
    lazy: bool  # lazy compaction (SGLang's default) or eager

    def label(self) -> str:
        mode = "lazy" if self.lazy else "eager"
        return f"{self.hybrid} bs={self.batch} ps={self.page_size} {mode}"


@dataclass(frozen=True)
class Geometry:
    """The model and the trace's constants, the same for every row of a run."""

    heads: int  # K/V heads of every attention layer (full and SWA alike)
    head_dim: int
    layers: int  # full-attention layers; as many SWA (or Mamba) layers
    window: int  # SWA window, tokens
    prompt: tuple[int, int]  # prompt lengths, uniform in [lo, hi)
    finish_every: int  # steps between a finish (and an arrival)
    evict_every: int  # steps between SWA window-free passes
    steps_per_side: int  # steps a side runs in all (sizes the pools)
    conv: tuple[int, int]  # Mamba conv state per layer (bf16)
    temporal: tuple[int, int, int]  # Mamba SSM state per layer (fp32)
    seed: int = 20261205


class Req:
    """What SGLang's request tables read of a request, plus the trace's own fields."""

    def __init__(self, rid: int, seq_len: int) -> None:
        self.rid = rid
        # SGLang 0.5.23 reads these fields from ``req.kv`` (0.5.16 from the request).
        self.kv = self
        self.kv_allocated_len = 0
        self.req_pool_idx: int | None = None
        self.mamba_pool_idx: Any = None
        self.mamba_needs_clear = False
        self.mamba_ping_pong_track_buffer: Any = None
        self.mamba_next_track_idx: Any = None
        self.inflight_middle_chunks = 0
        self.kv_committed_len = 0
        self.seq_len = seq_len  # tokens in the KV cache
        self.swa_evicted = 0  # tokens released on the SWA side

    @property
    def holds_kv(self) -> bool:  # 0.5.23's ``req.kv.holds_kv``
        return self.req_pool_idx is not None

    @property
    def holds_mamba(self) -> bool:  # 0.5.23's ``req.kv.holds_mamba``
        return self.mamba_pool_idx is not None


class HostEvent:
    """A forward's completion event on CPU (completes at once)."""

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass


# ----- building a side -----------------------------------------------------------------------


@contextlib.contextmanager
def modules_in_place(own: dict[str, types.ModuleType]) -> Iterator[None]:
    """Serve ``own`` (SGLang's modules of :func:`served`) under their names for the
    duration, whatever is installed; restore what was there after."""
    before = {name: sys.modules.get(name) for name in own}
    try:
        for name, module in own.items():
            _bind(name, module)
        yield
    finally:
        for name, module in before.items():
            _bind(name, module)


def _bind(name: str, module: types.ModuleType | None) -> None:
    parent_name, _, child = name.rpartition(".")
    parent = sys.modules.get(parent_name)
    if module is None:
        sys.modules.pop(name, None)
        if parent is not None and child in vars(parent):
            delattr(parent, child)
        return
    sys.modules[name] = module
    if parent is not None:
        setattr(parent, child, module)


def _layer_ids(geo: Geometry) -> tuple[list[int], list[int]]:
    """(other layers, full layers): interleaved, as many of each."""
    return list(range(0, 2 * geo.layers, 2)), list(range(1, 2 * geo.layers, 2))


def sizes(shape: Shape, geo: Geometry) -> dict[str, int]:
    """Pool sizes that hold the whole trace: full tokens, SWA tokens, state slots,
    request rows and the longest context."""
    ps, b = shape.page_size, shape.batch
    max_len = geo.prompt[1] + geo.steps_per_side + ps
    full = math.ceil(b * (max_len + ps) * 1.1 / ps) * ps
    swa = math.ceil(b * (geo.prompt[1] + geo.evict_every + geo.window + 2 * ps) * 1.1 / ps) * ps
    return {
        "full_tokens": full,
        "swa_tokens": swa,
        "state_slots": b + 16,
        "rows": b + 8,
        "max_len": max_len,
    }


def build(
    module: types.ModuleType,
    shape: Shape,
    geo: Geometry,
    device: str,
    sglang_own: dict[str, types.ModuleType] | None = None,
) -> Any:
    """One side's stack from ``module``'s factory: the bundle, with ``req_to_token_pool``
    (the SWA factory builds none: SGLang's own ``ReqToTokenPool`` is added, as its model
    runner does).

    Args:
        module: ``sglang.srt.mem_cache.unified_memory_pool``, SGLang's or the drop-in's.
        sglang_own: For SGLang's side: SGLang's own modules of :func:`served` (put back
            under their names while the factory runs) and the repairs of the module
            docstring; None for the drop-in.
    """
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool

    other_ids, full_ids = _layer_ids(geo)
    n = sizes(shape, geo)
    if _release().needs_published_server_args:
        from sglang_scheduler import bootstrap

        bootstrap.publish_server_args(page_size=shape.page_size, enable_unified_memory=True)
    common = dict(
        device=device,
        kv_cache_dtype=torch.bfloat16,
        head_num=geo.heads,
        head_dim=geo.head_dim,
        page_size=shape.page_size,
        start_layer=0,
        end_layer=2 * geo.layers - 1,
        full_attention_layer_ids=full_ids,
        enable_memory_saver=False,
        need_sort=False,
        forward_stream=None,
        lazy_compaction=shape.lazy,
    )
    place = modules_in_place(sglang_own) if sglang_own else contextlib.nullcontext()
    if shape.hybrid == "swa":
        with place:
            bundle = module.init_unified_swa_pools(
                v_head_dim=geo.head_dim,
                swa_head_num=geo.heads,
                swa_head_dim=geo.head_dim,
                swa_v_head_dim=geo.head_dim,
                swa_attention_layer_ids=other_ids,
                full_max_total_num_tokens=n["full_tokens"],
                swa_max_total_num_tokens=n["swa_tokens"],
                **common,
            )
        rtp = ReqToTokenPool(
            size=n["rows"], max_context_len=n["max_len"], device=device, enable_memory_saver=False
        )
        return types.SimpleNamespace(
            allocator=bundle.token_to_kv_pool_allocator,
            kvpool=bundle.token_to_kv_pool,
            rtp=rtp,
            pool=bundle.unified_memory_pool,
        )
    cache_params = types.SimpleNamespace(
        shape=types.SimpleNamespace(conv=[geo.conv], temporal=geo.temporal),
        dtype=types.SimpleNamespace(conv=torch.bfloat16, temporal=torch.float32),
        layers=other_ids,
    )
    kw = dict(
        is_draft_worker=False,
        use_mla_backend=False,
        mamba_layer_ids=other_ids,
        mamba2_cache_params=cache_params,
        model_context_len=n["max_len"],
        extra_max_context_len=0,
        max_total_num_tokens=n["full_tokens"],
        max_mamba_cache_size=n["state_slots"],
        max_num_reqs=n["rows"],
        enable_mamba_extra_buffer=False,
        speculative_num_draft_tokens=None,
        disable_overlap_schedule=False,
        **_release().factory_fields(),
        **common,
    )
    if sglang_own and _release().mamba_factory_repairs:
        with place, _keyword_repair(module):
            bundle = module.init_unified_mamba_pools(**kw)
        state = bundle.req_to_token_pool.mamba_pool
        for attr in ("replayssm_cache_base", "replayssm_is_flush"):
            if not hasattr(state, attr):
                setattr(state, attr, None)
    else:
        with place:
            bundle = module.init_unified_mamba_pools(**kw)
    return types.SimpleNamespace(
        allocator=bundle.token_to_kv_pool_allocator,
        kvpool=bundle.token_to_kv_pool,
        rtp=bundle.req_to_token_pool,
        pool=bundle.unified_memory_pool,
    )


@contextlib.contextmanager
def _keyword_repair(module: types.ModuleType) -> Iterator[None]:
    """SGLang 0.5.16's request table with an ``_init_mamba_pool`` that takes the
    ``enable_gdn_replayssm_spec`` keyword its base class passes (module docstring)."""
    base = module.UnifiedHybridReqToTokenPool

    class Repaired(base):  # type: ignore[misc, valid-type]
        def _init_mamba_pool(self, *args: Any, enable_gdn_replayssm_spec: bool = False, **kw):
            assert not enable_gdn_replayssm_spec, "the bench never turns it on"
            return super()._init_mamba_pool(*args, **kw)

    Repaired.__name__ = Repaired.__qualname__ = base.__name__
    module.UnifiedHybridReqToTokenPool = Repaired
    try:
        yield
    finally:
        module.UnifiedHybridReqToTokenPool = base


# ----- the trace ----------------------------------------------------------------------------


class StepTrace:
    """One side's requests and the scheduler's calls on its stack (module docstring).

    Both sides of a row get the same seed, so they see the same requests, lengths and
    cadence step for step.

    Args:
        stack: What :func:`build` returned.
        counter: A ``launch_count.LaunchCounter``; while it records, each pool call runs
            in a scope named after its phase.
    """

    def __init__(self, stack: Any, shape: Shape, geo: Geometry, device: str, counter: Any) -> None:
        self.s = stack
        self.shape = shape
        self.geo = geo
        self.dev = device
        self.cuda = device == "cuda"
        self.counter = counter
        self.gen = torch.Generator().manual_seed(geo.seed)
        self.reqs: list[Req] = []
        self.next_rid = 0
        self.step_no = 0
        self.acc: dict[str, float] = defaultdict(float)
        self.r2t = stack.rtp.req_to_token  # [rows, max_len] int32
        b = shape.batch
        n = sizes(shape, geo)
        z64 = dict(dtype=torch.int64, device=device)
        z32 = dict(dtype=torch.int32, device=device)
        swa = dict(dtype=getattr(torch, _release().swa_loc_dtype), device=device)
        cap = b * n["max_len"]
        win = b * geo.window
        # The CUDA graph's static buffers (the Triton backend's and the Mamba backend's).
        self.static = types.SimpleNamespace(
            kv_in=torch.zeros(cap, **z64),
            kv_out=torch.zeros(cap, **z64),
            win_in=torch.zeros(win, **z64),
            win_out=torch.zeros(win, **swa),
            full_out=torch.zeros(b, **z64),
            swa_out=torch.zeros(b, **swa),
            state=torch.zeros(b, **z32),
        )

    # -- helpers --

    def _t(self, phase: str, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        """Call a pool method, its host time added to ``phase``."""
        if self.counter is not None and self.counter.active:
            with self.counter.scope(phase):
                t0 = time.perf_counter()
                out = fn(*args, **kw)
                self.acc[phase] += time.perf_counter() - t0
            return out
        t0 = time.perf_counter()
        out = fn(*args, **kw)
        self.acc[phase] += time.perf_counter() - t0
        return out

    def _event(self) -> Any:
        if not self.cuda:
            return HostEvent()
        ev = torch.cuda.Event()
        ev.record()
        return ev

    def _batch(self) -> None:
        """The running batch's tensors (after its composition changed)."""
        rows = [r.req_pool_idx for r in self.reqs]
        lens = [r.seq_len for r in self.reqs]
        self.rpi = torch.tensor(rows, dtype=torch.int64).to(self.dev)
        self.seq_cpu = torch.tensor(lens, dtype=torch.int64)
        self.seq = self.seq_cpu.to(self.dev)

    def _gather(self, lens: torch.Tensor, lens_cpu: torch.Tensor, first: Any, out: Any) -> Any:
        """Virtual ids of tokens ``[first, first + lens)`` of each request of the batch,
        request after request (as ``create_flashinfer_kv_indices_triton``), int64, into
        ``out`` when given; no host sync."""
        n = int(lens_cpu.sum())
        b = lens.numel()
        which = torch.repeat_interleave(torch.arange(b, device=self.dev), lens, output_size=n)
        starts = torch.cumsum(lens, 0) - lens
        pos = torch.arange(n, device=self.dev) - starts[which]
        if first is not None:
            pos = pos + first[which]
        ids = self.r2t[self.rpi[which], pos]
        if out is None:
            return ids.to(torch.int64)
        out[:n].copy_(ids)
        return out[:n]

    # -- the scheduler's steps --

    def populate(self) -> None:
        """The initial batch: ``batch`` requests prefilled in one extend batch (untimed)."""
        reqs = [self._new_req() for _ in range(self.shape.batch)]
        self._prefill(reqs, timed=False)
        self.reqs = reqs
        self._batch()

    def _new_req(self) -> Req:
        lo, hi = self.geo.prompt
        n = int(torch.randint(lo, hi, (1,), generator=self.gen))
        self.next_rid += 1
        return Req(self.next_rid, n)

    def _prefill(self, reqs: list[Req], timed: bool) -> None:
        a, rtp, ps = self.s.allocator, self.s.rtp, self.shape.page_size
        call = self._t if timed else (lambda _phase, fn, *x, **k: fn(*x, **k))
        mamba = self.shape.hybrid == "mamba"
        if mamba:
            rows = call("prefill", rtp.alloc, reqs)
        else:
            rows = rtp.alloc(reqs)
        assert rows is not None, "no request rows left"
        lens_cpu = torch.tensor([r.seq_len for r in reqs], dtype=torch.int64)
        total = int(lens_cpu.sum())
        if ps == 1:
            out = call("prefill", a.alloc, total)
        else:
            zeros = torch.zeros(len(reqs), dtype=torch.int64)
            out = call(
                "prefill",
                a.alloc_extend,
                zeros.to(self.dev),
                zeros,
                lens_cpu.to(self.dev),
                lens_cpu,
                torch.full((len(reqs),), -1, dtype=torch.int64, device=self.dev),
                total,
            )
        assert out is not None, f"{self.shape.label()}: the pool is too small for the trace"
        at = 0
        for r in reqs:
            self.r2t[r.req_pool_idx, : r.seq_len] = out[at : at + r.seq_len].to(torch.int32)
            at += r.seq_len
        if not timed:
            return
        call("prefill", a.translate_kv_loc, out)
        if mamba:
            rpi = torch.tensor(rows, dtype=torch.int64).to(self.dev)
            call("prefill", rtp.translate_mamba_indices, rtp.get_mamba_indices(rpi))
        else:
            call("prefill", self.s.kvpool.translate_loc_from_full_to_swa, out)
        ev = self._event()
        call("prefill", a.set_latest_forward_done_event, ev)
        call("prefill", a.set_inflight_forward, ev, out)

    def _finish_oldest(self) -> None:
        a, rtp = self.s.allocator, self.s.rtp
        req = self.reqs.pop(0)
        self._t("finish", a.free_group_begin)
        self._t("finish", a.free, self.r2t[req.req_pool_idx, : req.seq_len])
        if self.shape.hybrid == "mamba":
            self._t("finish", rtp.free_mamba_cache, req)
            self._t("finish", rtp.free, req)
        else:
            rtp.free(req)
        self._t("finish", a.free_group_end)

    def _evict_window(self) -> None:
        a, ps, w = self.s.allocator, self.shape.page_size, self.geo.window
        for r in self.reqs:
            new = max(r.swa_evicted, r.seq_len - w)
            if ps > 1:
                new = new // ps * ps
            if new > r.swa_evicted:
                self._t("window free", a.free_swa, self.r2t[r.req_pool_idx, r.swa_evicted : new])
                r.swa_evicted = new

    def step(self, graph: bool) -> None:
        """One scheduler step (module docstring); ``graph``: decode under CUDA-graph replay."""
        a, rtp, ps, b = self.s.allocator, self.s.rtp, self.shape.page_size, self.shape.batch
        swa = self.shape.hybrid == "swa"
        self.step_no += 1
        if self.step_no % self.geo.finish_every == 0:
            self._finish_oldest()
            new = self._new_req()
            self._prefill([new], timed=True)
            self.reqs.append(new)
            self._batch()
        if swa and self.step_no % self.geo.evict_every == 0:
            self._evict_window()
        # decode allocation
        if ps == 1:
            out = self._t("decode alloc", a.alloc, b)
        else:
            last_loc = self.r2t[self.rpi, self.seq - 1]
            seq_next, seq_next_cpu = self.seq + 1, self.seq_cpu + 1
            out = self._t("decode alloc", a.alloc_decode, seq_next, seq_next_cpu, last_loc)
        assert out is not None, f"{self.shape.label()}: the pool is too small for the trace"
        self.r2t[self.rpi, self.seq] = out.to(torch.int32)
        self.seq = self.seq + 1
        self.seq_cpu = self.seq_cpu + 1
        for r in self.reqs:
            r.seq_len += 1
        # the decode forward's metadata
        st = self.static
        if swa:
            wlen_cpu = self.seq_cpu.clamp(max=self.geo.window)
            wlen = self.seq.clamp(max=self.geo.window)
        if not graph:
            kv = self._gather(self.seq, self.seq_cpu, None, None)
            self._t("translate", a.translate_kv_loc, kv)
            if swa:
                win = self._gather(wlen, wlen_cpu, self.seq - wlen, None)
                self._t("translate", self.s.kvpool.translate_loc_from_full_to_swa, win)
                self._t("translate", self.s.kvpool.translate_loc_from_full_to_swa, out)
            self._t("translate", a.translate_kv_loc, out)
        else:
            kv = self._gather(self.seq, self.seq_cpu, None, st.kv_in)
            self._t("translate", a.translate_kv_loc, kv, out=st.kv_out[: kv.numel()])
            if swa:
                win = self._gather(wlen, wlen_cpu, self.seq - wlen, st.win_in)
                m = win.numel()
                self._t("translate", a.translate_loc_from_full_to_swa, win, out=st.win_out[:m])
                self._t("translate", a.translate_loc_from_full_to_swa, out, out=st.swa_out[:b])
            self._t("translate", a.translate_kv_loc, out, out=st.full_out[:b])
        if not swa:
            phys = self._t(
                "translate", rtp.translate_mamba_indices, rtp.get_mamba_indices(self.rpi)
            )
            if graph:
                st.state[:b].copy_(phys)
        # the forward, reported
        ev = self._event()
        self._t("forward report", a.set_latest_forward_done_event, ev)
        self._t("forward report", a.set_inflight_forward, ev, out)
        if self.cuda:
            torch.cuda.synchronize()
        self._t("flush", a.flush_opportunistic)

    def run(self, steps: int, graph: bool) -> dict[str, float]:
        """``steps`` steps; host µs per step of each phase."""
        self.acc = defaultdict(float)
        for _ in range(steps):
            self.step(graph)
        return {p: self.acc.get(p, 0.0) / steps * 1e6 for p in PHASES}

    def drain(self) -> int:
        """Finish every request (one free group), flush; the full side's tokens still
        allocated after (0 when nothing leaked)."""
        a, rtp = self.s.allocator, self.s.rtp
        a.free_group_begin()
        for req in self.reqs:
            a.free(self.r2t[req.req_pool_idx, : req.seq_len])
            if self.shape.hybrid == "mamba":
                rtp.free_mamba_cache(req)
            rtp.free(req)
        a.free_group_end()
        self.reqs = []
        if self.cuda:
            torch.cuda.synchronize()
        a.flush_opportunistic()
        return int(a.full_attn_allocator.allocated_count())
