"""One demo run: the pooled model, the reference replay, the static-split comparison."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ukv.demo.model import HybridModel, ModelConfig, Variant
from ukv.demo.pooled import MambaPooledCache, SWAPooledCache
from ukv.demo.reference import ReferenceCache
from ukv.demo.serve import (
    Budget,
    PooledRun,
    Request,
    make_trace,
    run_pooled,
    run_reference,
    schedule,
)

#: Logit tolerance when the cache dtype is bf16 (the two sides store the same bf16 bytes
#: and run the same math, so on one device the logits agree exactly; the tolerance only
#: absorbs a nondeterministic GPU kernel choice). Greedy tokens must match in every case.
BF16_LOGIT_ATOL = 1e-3


@dataclass(frozen=True)
class DemoConfig:
    """Sizes of one run (defaults: the README's demo, well under a minute on 2 cores)."""

    num_requests: int = 160
    total_bytes: int = 2 << 20
    page_size: int = 16
    max_running: int = 48
    chunk: int = 32
    prefill_budget: int = 128
    seed: int = 0


@dataclass
class VariantResult:
    """The outcome of one variant: the pooled run, the reference outputs, the verdict."""

    variant: Variant
    lazy: bool
    dtype: torch.dtype
    pooled: PooledRun
    reference: list[Request]
    identical: bool
    max_logit_diff: float
    static_peak: int | None
    static_split: tuple[int, int]
    cache: object


def run_variant(
    variant: Variant,
    *,
    lazy: bool,
    device: torch.device | str,
    dtype: torch.dtype = torch.float32,
    demo: DemoConfig = DemoConfig(),
) -> VariantResult:
    """Serve the trace through a ukv pool, replay it on the reference, compare.

    Args:
        variant: ``"mamba"`` or ``"swa"``.
        lazy: Lazy compaction (with a flush every step) instead of eager.
        device: Where the model and the pool live.
        dtype: K/V (and conv state) storage dtype.
        demo: Sizes.
    """
    cfg = ModelConfig(variant=variant, seed=demo.seed)
    model = HybridModel(cfg, device)
    trace = make_trace(demo.num_requests, cfg.vocab, demo.seed)
    cls = MambaPooledCache if variant == "mamba" else SWAPooledCache
    cache = cls(
        cfg,
        total_bytes=demo.total_bytes,
        max_context_len=max(r.num_tokens for r in trace),
        dtype=dtype,
        page_size=demo.page_size,
        device=device,
        lazy=lazy,
    )
    if isinstance(cache, SWAPooledCache):
        cache.set_chunk(demo.chunk)
    usable = _usable_bytes(cache)
    sched = dict(max_running=demo.max_running, chunk=demo.chunk, prefill_budget=demo.prefill_budget)
    pooled = run_pooled(model, cache, trace, Budget(usable), **sched)
    ref = run_reference(model, ReferenceCache(cfg, dtype, device), trace, pooled.schedule)
    identical, diff = compare(pooled.requests, ref, exact=dtype == torch.float32)
    split = _static_split(trace, cache.request_bytes, usable)
    try:
        fresh = [r.fresh() for r in trace]
        static_peak: int | None = schedule(
            fresh, Budget(*split), cache.request_bytes, **sched
        ).peak_running
    except ValueError:  # a request larger than its side of the split: it cannot serve the trace
        static_peak = None
    return VariantResult(
        variant, lazy, dtype, pooled, ref, identical, diff, static_peak, split, cache
    )


def compare(pooled: list[Request], ref: list[Request], *, exact: bool) -> tuple[bool, float]:
    """Whether every request's greedy tokens match and its logits agree (bit for bit when
    ``exact``, else within :data:`BF16_LOGIT_ATOL`); and the largest logit difference."""
    same, worst = True, 0.0
    for a, b in zip(pooled, ref, strict=True):
        same &= a.outputs == b.outputs and len(a.logits) == len(b.logits)
        for x, y in zip(a.logits, b.logits):
            worst = max(worst, float((x - y).abs().max()))
            same &= (
                bool(torch.equal(x, y))
                if exact
                else bool(torch.allclose(x, y, rtol=0, atol=BF16_LOGIT_ATOL))
            )
    return bool(same), worst


def _usable_bytes(cache: object) -> int:
    """The pool's bytes past the reserved floor, less two pages (or states) of each side:
    the frontiers align pages, and the scheduler must never over-admit."""
    pool = cache.pool  # type: ignore[attr-defined]
    slack = 0
    for name in pool.names:
        spec = pool.spec(name)
        slack += 2 * (spec.page_bytes(pool.page_size) if spec.is_paged else spec.entry_bytes)
    return pool.total_bytes - pool.reserved_floor - slack


def _static_split(trace: list[Request], cost: object, usable: int) -> tuple[int, int]:
    """The same usable bytes split once, in the trace's mean proportion of KV to the rest:
    the best a fixed ratio can do knowing the whole trace in advance."""
    kv = sum(cost(r.num_tokens)[0] for r in trace)  # type: ignore[operator]
    other = sum(cost(r.num_tokens)[1] for r in trace)  # type: ignore[operator]
    k = usable * kv // (kv + other)
    return k, usable - k
