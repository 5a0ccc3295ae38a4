"""One comparison: ukv's unified pool against the layouts engines run, on the same bytes,
the same trace and the same step clock, each with prefix caching as its engine does it.

Layouts (:data:`LAYOUTS`; every one counts the same bytes per GPU):

* ``ukv`` — the real ukv pool (:class:`~ukv.sim.backends.UnifiedBackend`), SGLang's dtypes
  and radix-cache checkpoints, cached KV and cached states as **one evictable pool**
  (least recently used first, whatever ran short); running requests capped at SGLang's
  estimate (2048), not by a state-slot count.
* ``ukv-marconi`` — the same pool with Marconi's policy: checkpoints only at branch points
  and sequence ends, eviction by FLOPs saved per byte and recency.
* ``sglang-default`` — SGLang as it runs by default: a static split at
  ``mamba_full_memory_ratio`` / ``swa_full_tokens_ratio``, radix cache on (its Mamba / SWA
  radix cache: per-side LRU eviction), ``max_running_requests = min(2048, state slots / 3)``
  (the slot cap the radix cache imposes). Gemma 2/3: SGLang turns hybrid SWA memory off, so
  every layer keeps full KV in one pool (:func:`all_full_shape`).
* ``sglang-tuned`` — the same split at a share tuned on *another* workload (the caller
  says which share: the oracle of another trace).
* ``sglang-unified`` — SGLang's own unified pool (``--enable-unified-memory``, the design
  ukv's SGLang drop-in mirrors): one byte range, but SGLang's per-side radix eviction and the
  running cap of the default split (its slots / 3). Not for Gemma (SGLang refuses it there).
* ``jenga`` — Jenga's LCM large pages (:mod:`ukv.sim.jenga`), vLLM's dtypes, the same
  checkpoints and one LRU pool as ``ukv``.
* ``vllm`` — vLLM's single page size (:class:`~ukv.sim.backends.PaddedBackend`) in vLLM's
  dtypes, prefix caching in ``align`` mode (states on the block grid).
* ``vllm-equal`` — the same in SGLang's dtypes (dtype against layout).
* ``ukv-vllm`` — ``ukv`` in vLLM's dtypes (only where they differ): the peer of ``vllm``
  and ``jenga``, so their ratios compare layouts, not dtypes.
* ``oracle`` — the best static split in hindsight (SGLang's semantics): every share of the
  grid, then steps around the best; ``oracle-phase`` (phase traces) — a split that changes
  at every phase boundary, the best pair of shares (one for chat phases, one for long).
* ``sglang-radix-off`` — SGLang's default split with the radix cache off (the previous
  study's setting; its cap is the slot count).
* ``sglang-nocap`` — SGLang's default split with the radix cache on but without the slot
  cap (a diagnostic: how much of a gap is the cap's, not the split's).

A ratio compares two runs that served the same requests: a run that rejected any request
(one that does not fit its layout even alone) enters no ratio; the comparison reports it
as a failure instead (:meth:`Comparison.failures`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ukv.models import ModelShape
from ukv.sim import metrics
from ukv.sim.backends import (
    Backend,
    PaddedBackend,
    SplitBackend,
    UnifiedBackend,
    engine_shape,
    sglang_default_share,
)
from ukv.sim.clock import Clock, FixedClock, ModelCompute, compute_profile
from ukv.sim.engine import CHUNK, Run, simulate
from ukv.sim.jenga import JengaBackend
from ukv.sim.prefix import Identity, RadixCache, build_identity
from ukv.sim.single import SingleKindBackend
from ukv.sim.traces import Trace

GRID = tuple(round(0.1 * i, 1) for i in range(1, 10))
"""State / SWA byte shares the oracle tries first (10% to 90%)."""
FINE_STEPS = (0.05, 0.025, 0.0125)
"""Then, in turn, the best share so far ± each of these (1.25% resolution, 15 runs)."""
COARSE_STEPS = (0.05,)
"""The coarse search's refinement (5% resolution, 11 runs)."""
PHASE_GRID = tuple(round(0.1 * i, 1) for i in range(1, 10))
"""Shares the per-phase oracle tries for each kind of phase (around the static best)."""
SGLANG_EST_REQS = 2048
"""SGLang's floor of its ``max_running_requests`` estimate (``resolve_max_num_reqs``)."""
SGLANG_EST_CAP = 4096
SGLANG_SLOTS_PER_REQ = 3
"""``MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO``: state slots per running request with
the radix cache on (1 with it off)."""
GEMMA_NO_HYBRID = ("gemma2", "gemma3", "gemma3_text", "gemma3n")
"""Architectures SGLang serves with hybrid SWA memory off (every layer full KV)."""


@dataclass(frozen=True)
class Layout:
    """How one column runs (see the module docstring)."""

    label: str
    backend: str  # "unified" | "split" | "padded" | "jenga" | "all-full"
    engine: str  # "sglang" | "vllm": whose cache dtypes
    policy: str  # prefix checkpoints (ukv.sim.prefix.POLICIES); "off": no prefix cache
    eviction: str  # ukv.sim.prefix.EVICTIONS
    cap: str  # "sglang" | "sglang-default-split" | "estimate" | "none"
    share: str = ""  # split layouts: "default" | "tuned" | "oracle"
    text: str = ""


LAYOUTS: dict[str, Layout] = {
    x.label: x
    for x in (
        Layout("ukv", "unified", "sglang", "sglang", "lru", "estimate",
               text="ukv unified pool, one evictable pool (LRU)"),
        Layout("ukv-marconi", "unified", "sglang", "marconi", "flops", "estimate",
               text="ukv unified pool, Marconi admission and FLOP-aware eviction"),
        Layout("sglang-default", "split", "sglang", "sglang", "split", "sglang", "default",
               text="SGLang default split, radix cache on, its slot cap"),
        Layout("sglang-tuned", "split", "sglang", "sglang", "split", "sglang", "tuned",
               text="SGLang split tuned on another workload, radix cache on"),
        Layout("sglang-unified", "unified", "sglang", "sglang", "split", "sglang-default-split",
               text="SGLang's own unified pool: per-side radix eviction, the default split's cap"),
        Layout("jenga", "jenga", "vllm", "sglang", "lru", "none",
               text="Jenga LCM large pages (vLLM dtypes), one LRU pool"),
        Layout("vllm", "padded", "vllm", "vllm", "lru", "none",
               text="vLLM single page size, its dtypes, prefix caching (align mode)"),
        Layout("vllm-equal", "padded", "sglang", "vllm", "lru", "none",
               text="vLLM single page size in SGLang's dtypes, prefix caching (align)"),
        Layout("ukv-vllm", "unified", "vllm", "sglang", "lru", "estimate",
               text="ukv unified pool in vLLM's dtypes"),
        Layout("oracle", "split", "sglang", "sglang", "split", "sglang", "oracle",
               text="best static split in hindsight (SGLang semantics)"),
        Layout("oracle-phase", "split", "sglang", "sglang", "split", "sglang", "phase",
               text="best split per phase in hindsight (phase traces)"),
        Layout("sglang-radix-off", "split", "sglang", "off", "split", "sglang", "default",
               text="SGLang default split, radix cache off"),
        Layout("sglang-nocap", "split", "sglang", "sglang", "split", "estimate", "default",
               text="SGLang default split, radix cache on, without its slot cap (diagnostic)"),
    )
}  # fmt: skip
"""Every column, by label."""
PEERS = {"vllm": "ukv-vllm", "jenga": "ukv-vllm"}
"""The ukv column a layout's ratio is taken against where dtypes differ (else ``ukv``)."""
LABELS = {k: v.text for k, v in LAYOUTS.items()}
GOAL_STATIONARY = 1.0
GOAL_PHASE = 1.3
GOAL_DEFAULT = 1.5


def all_full_shape(shape: ModelShape) -> ModelShape:
    """``shape`` with every sliding layer kept as a full-attention layer (SGLang's layout
    for Gemma 2/3, whose hybrid SWA memory it turns off)."""
    assert shape.full is not None and shape.swa is not None
    full = dataclasses.replace(shape.full, num_layers=shape.full.num_layers + shape.swa.num_layers)
    return dataclasses.replace(shape, full=full, swa=None, layer_kinds=None)


def sglang_runs_hybrid(shape: ModelShape) -> bool:
    """Whether SGLang keeps the hybrid layout (False: Gemma 2/3, every layer full KV)."""
    return not (shape.kind == "swa" and shape.architecture in GEMMA_NO_HYBRID)


@dataclass
class Comparison:
    """The layouts on one trace.

    Attributes:
        summaries: ``{label: metrics.summarize(...)}``.
        runs: ``{label: Run}`` (timelines for the plot).
        oracle_share: The share the oracle picked; ``sweep``: ``[(share, served)]``.
        shares: ``{label: share}`` of the split layouts.
    """

    summaries: dict[str, dict]
    runs: dict[str, Run]
    oracle_share: float
    sweep: list[tuple[float, float]] = field(default_factory=list)
    shares: dict[str, Any] = field(default_factory=dict)

    def peer(self, label: str) -> str:
        """The ukv run ``label`` is compared with (``ukv-vllm`` for vLLM's dtypes when there
        is one)."""
        p = PEERS.get(label)
        return p if p is not None and p in self.summaries else "ukv"

    def failed(self, label: str) -> bool:
        """Whether ``label``'s run rejected any request."""
        return bool(self.summaries[label]["rejected"])

    def ratio(self, label: str, metric: str = "served_tok_s") -> float | None:
        """The peer's ``metric`` over ``label``'s; None when either run rejected requests."""
        mine = self.peer(label)
        if label not in self.summaries or mine not in self.summaries:
            return None
        if self.failed(mine) or self.failed(label):
            return None
        base = self.summaries[label][metric]
        return float(self.summaries[mine][metric] / base) if base else None

    def failures(self) -> dict[str, str]:
        """``{label: why}`` for every run that rejected requests."""
        return {
            k: f"{v['rejected']} of {v['rejected'] + v['completed']} requests rejected"
            for k, v in self.summaries.items()
            if v["rejected"]
        }

    def ratios(self, metric: str = "served_tok_s") -> dict[str, float | None]:
        """:meth:`ratio` of every non-ukv layout, rounded (None: a failed run)."""
        out: dict[str, float | None] = {}
        for k in self.summaries:
            if not k.startswith("ukv"):
                r = self.ratio(k, metric)
                out[k] = None if r is None else round(r, 4)
        return out


@dataclass
class Setup:
    """What every run of one comparison shares."""

    shape: ModelShape
    total: int
    trace: Trace
    clock_of: Callable[[ModelShape], Clock]
    page: int
    ident: Identity | None
    cache: bool


def _cap(layout: Layout, s: Setup, shape: ModelShape, backend: Backend) -> int | None:
    """SGLang's ``max_running_requests`` for this layout (None: no cap)."""
    if layout.cap == "none":
        return None
    ctx = shape.max_position_embeddings or 131072
    if layout.cap == "sglang-default-split":
        ref: Any = SplitBackend(shape, s.total, sglang_default_share(shape), s.page, "ref")
    else:
        ref = backend
    if isinstance(ref, SplitBackend):
        tokens = ref.full_cap * ref.P
    else:
        tokens = s.total // max(shape.kv_bytes_per_token(), 1)
    est = max(min(int(tokens / ctx * 512), SGLANG_EST_CAP), SGLANG_EST_REQS)
    cap = min(est, tokens // 2)
    if layout.cap == "estimate" or not isinstance(ref, SplitBackend) or ref.kind != "mamba":
        return max(cap, 1)
    per = SGLANG_SLOTS_PER_REQ if layout.policy != "off" else 1
    return max(min(cap, ref.other_cap // per), 1)


def make_backend(
    layout: Layout, s: Setup, share: float | None = None
) -> tuple[Backend, ModelShape]:
    """The backend of ``layout`` (and the shape it counts, its dtypes applied)."""
    shape = engine_shape(s.shape, layout.engine) if layout.engine == "vllm" else s.shape
    ctx = int((s.trace.prompt_len + s.trace.output_len).max())
    if layout.backend == "unified":
        return UnifiedBackend(shape, s.total, s.page, ctx, layout.label, chunk=CHUNK), shape
    if layout.backend == "split":
        assert share is not None
        return SplitBackend(shape, s.total, share, s.page, layout.label), shape
    if layout.backend == "padded":
        return PaddedBackend(shape, s.total, layout.label, engine=None), shape
    if layout.backend == "jenga":
        return JengaBackend(shape, s.total, s.page, layout.label), shape
    if layout.backend == "all-full":
        full = all_full_shape(shape)
        return SingleKindBackend(full, s.total, s.page, layout.label), full
    raise ValueError(layout.backend)


def run_layout(
    layout: Layout, s: Setup, share: float | None = None, phases: Any = None, progress: bool = False
) -> Run:
    """Serve ``s.trace`` on one layout (``share``: a split's; ``phases``: a per-phase
    split's ``[(start s, share)]``)."""
    if layout.backend == "split" and not sglang_runs_hybrid(s.shape) and layout.share == "default":
        layout = dataclasses.replace(layout, backend="all-full")
    if phases is not None:
        backend: Backend = PhasedSplitBackend(s.shape, s.total, phases, s.page, layout.label)
        shape = s.shape
    else:
        backend, shape = make_backend(layout, s, share)
    cache = None
    if s.cache and s.ident is not None and layout.policy != "off":
        cache = _cache(layout, s, shape, backend)
    return simulate(
        s.trace,
        backend,
        clock=s.clock_of(shape),
        cache=cache,
        max_running=_cap(layout, s, shape, backend),
        progress=progress,
    )


def _cache(layout: Layout, s: Setup, shape: ModelShape, backend: Backend) -> RadixCache:
    hybrid = shape.is_hybrid
    policy = layout.policy if hybrid else "none"
    prof: ModelCompute | None
    try:
        prof = compute_profile(s.shape)
    except Exception:
        prof = None
    if prof is not None:
        per_tok = 2.0 * prof.active_params
        coef = 4.0 * prof.q_heads * prof.head_dim * (shape.full.num_layers if shape.full else 0)

        def flops(a: int, b: int) -> float:
            n = b - a
            return per_tok * n + coef * n * (a + n / 2.0)
    else:

        def flops(a: int, b: int) -> float:
            return float(b - a)

    page_bytes = shape.kv_bytes_per_token() * backend.page_tokens if shape.full else 1
    if shape.kind == "mamba":
        ckpt_bytes = shape.state_bytes_per_request()
    elif shape.kind == "swa":
        ckpt_bytes = shape.swa_bytes_per_token() * backend.page_tokens
    else:
        ckpt_bytes = 1
    assert s.ident is not None
    return RadixCache(
        s.ident,
        backend,
        backend.page_tokens,
        policy,
        layout.eviction,
        needs_ckpt=hybrid,
        flops=flops,
        ckpt_bytes=ckpt_bytes,
        page_bytes=page_bytes,
    )


class PhasedSplitBackend(SplitBackend):
    """A static split whose share changes at given times (the per-phase oracle): when a
    side's budget shrinks below what it holds, it takes nothing more until it drains."""

    def __init__(
        self, shape: ModelShape, total: int, phases: list[tuple[float, float]], page: int, name: str
    ) -> None:
        self.phases = sorted(phases)
        super().__init__(shape, total, self.phases[0][1], page, name)
        self._at = 0

    def on_time(self, now: float) -> None:
        i = self._at
        while i + 1 < len(self.phases) and now >= self.phases[i + 1][0]:
            i += 1
        if i != self._at:
            self._at = i
            self.share = self.phases[i][1]
            self.other_cap = int(self.total_bytes * self.share) // self.other_unit
            self.full_cap = (self.total_bytes - self.other_cap * self.other_unit) // self.full_page


def compare(
    shape: ModelShape,
    total_bytes: int,
    trace: Trace,
    *,
    page_size: int = 16,
    clock: Callable[[ModelShape], Clock] | None = None,
    cache: bool = True,
    layouts: tuple[str, ...] | None = None,
    tuned_share: float | None = None,
    grid: str = "fine",
    phases: list[float] | None = None,
    progress: bool = False,
    sweep: tuple[float, ...] | None = None,
) -> Comparison:
    """Run the trace on the layouts (see the module docstring).

    Args:
        shape: The model, one rank (already sharded).
        total_bytes: Bytes per rank.
        trace: The requests.
        page_size: Tokens per KV page (vLLM's layouts use their own block).
        clock: ``clock(shape)`` → the step clock (default: the fixed 25 ms clock).
        cache: Prefix caching on (the engines' default); off: no layout caches.
        layouts: Labels to run (default: every one that applies); ``oracle`` is always run
            when a tuned or per-phase split is asked for.
        tuned_share: The share for ``sglang-tuned`` (skipped when None).
        grid: The oracle's search, ``"fine"`` (10% steps, then ±5%, ±2.5%, ±1.25% around
            the best so far) or ``"coarse"`` (10% steps, then ±5%).
        phases: Start times of the phases (phase traces: enables ``oracle-phase``; every
            even phase is chat, every odd one long).
        progress: Progress bars on stderr.
        sweep: The oracle's first grid of shares (overrides ``grid``).

    Returns:
        Comparison: the summaries, the runs and the oracle's sweep.
    """
    clock_of = clock or (lambda sh: FixedClock())
    hashes = list(trace.hash_ids) if trace.hash_ids is not None else None
    ident = build_identity(trace.prompt_len, trace.output_len, hashes) if cache else None
    s = Setup(shape, int(total_bytes), trace, clock_of, page_size, ident, cache)
    want = list(layouts) if layouts is not None else list(LAYOUTS)
    vshape = engine_shape(shape, "vllm")
    runs: dict[str, Run] = {}
    shares: dict[str, Any] = {}
    for label in want:
        lay = LAYOUTS[label]
        if label == "ukv-vllm" and vshape == shape:
            continue
        if label == "sglang-unified" and not sglang_runs_hybrid(shape):
            continue
        if label in ("oracle", "oracle-phase", "sglang-tuned"):
            continue
        if not shape.is_hybrid:
            if label != "ukv":
                continue
            runs[label] = simulate(trace, SingleKindBackend(shape, s.total, page_size),
                                   clock=clock_of(shape))  # fmt: skip
            continue
        share = sglang_default_share(shape) if lay.share == "default" else None
        if share is not None:
            shares[label] = round(share, 4) if sglang_runs_hybrid(shape) else "all layers full"
        runs[label] = run_layout(lay, s, share, progress=progress)
    oshare, tried = 0.0, []  # type: tuple[float, list[tuple[float, float]]]
    if shape.is_hybrid and ("oracle" in want or "oracle-phase" in want):
        steps = FINE_STEPS if grid == "fine" else COARSE_STEPS
        oshare, best, tried = _oracle(s, sweep or GRID, steps, progress)
        runs["oracle"], shares["oracle"] = best, oshare
    if shape.is_hybrid and tuned_share is not None and "sglang-tuned" in want:
        runs["sglang-tuned"] = run_layout(LAYOUTS["sglang-tuned"], s, tuned_share)
        shares["sglang-tuned"] = tuned_share
    if shape.is_hybrid and phases and "oracle-phase" in want:
        pshares, prun = _phase_oracle(s, phases, oshare)
        runs["oracle-phase"], shares["oracle-phase"] = prun, pshares
    summaries = {k: metrics.summarize(v, trace) for k, v in runs.items()}
    for k, v in summaries.items():
        v["label"] = LABELS[k]
        if k in shares:
            v["share"] = shares[k]
    return Comparison(summaries, runs, oshare, tried, shares)


def compare_single(
    shape: ModelShape,
    total_bytes: int,
    trace: Trace,
    *,
    page_size: int = 16,
    clock: Callable[[ModelShape], Clock] | None = None,
    progress: bool = False,
) -> Comparison:
    """Serve ``trace`` on the one pool of a single-kind model (no prefix cache).

    Returns:
        A comparison with one layout, ``"ukv"``, and no ratios.
    """
    clk = (clock or (lambda sh: FixedClock()))(shape)
    run = simulate(trace, SingleKindBackend(shape, total_bytes, page_size), clock=clk,
                   progress=progress)  # fmt: skip
    return Comparison({"ukv": metrics.summarize(run, trace)}, {"ukv": run}, 0.0, [])


def _served(run: Run) -> float:
    return run.generated / run.makespan


def _rank(run: Run, share: float) -> tuple[bool, float, float]:
    return run.rejected == 0, _served(run), -share


def _oracle(
    s: Setup, grid: tuple[float, ...], steps: tuple[float, ...], progress: bool
) -> tuple[float, Run, list[tuple[float, float]]]:
    """Best share by served tokens per second among the splits that rejected no request
    (ties: the smaller share): the grid, then the best ± each step in turn. A split that
    drops requests serves less work, so it is chosen only when every split does."""
    tried: dict[float, Run] = {}
    lay = LAYOUTS["oracle"]

    def run(share: float) -> None:
        share = round(share, 4)
        if 0 < share < 1 and share not in tried:
            tried[share] = run_layout(lay, s, share)

    def best() -> float:
        return max(sorted(tried), key=lambda x: _rank(tried[x], x))

    for x in grid:
        run(x)
    for d in steps:
        b = best()
        run(b - d)
        run(b + d)
    top = best()
    if progress:
        import sys

        sys.stderr.write(f"oracle: {len(tried)} splits tried, best share {top}\n")
    table = [(x, round(_served(tried[x]), 4)) for x in sorted(tried)]
    return top, tried[top], table


def _phase_oracle(s: Setup, starts: list[float], static: float) -> tuple[list[float], Run]:
    """The best (chat share, long share) pair by coordinate search from the static best:
    the chat phases' share over :data:`PHASE_GRID` with the long one fixed, then the
    long phases' share with that chat share."""
    lay = LAYOUTS["oracle-phase"]
    tried: dict[tuple[float, float], Run] = {}

    def run(c: float, lg: float) -> Run:
        key = (round(c, 4), round(lg, 4))
        if key not in tried:
            ph = [(t, key[i % 2]) for i, t in enumerate(starts)]
            tried[key] = run_layout(lay, s, phases=ph)
        return tried[key]

    best = (static, static)
    run(*best)
    for axis in (0, 1):
        for x in PHASE_GRID:
            cand = (x, best[1]) if axis == 0 else (best[0], x)
            run(*cand)
        best = max(tried, key=lambda k: _rank(tried[k], 0.0))
    return [best[0], best[1]], tried[best]


def _peer(row: dict, label: str) -> str:
    """The ukv run of a JSON row that ``label``'s ratio was taken against."""
    p = PEERS.get(label)
    return p if p is not None and p in row["layouts"] else "ukv"


def goals(results: list[dict]) -> dict[str, dict]:
    """The issue's goals over a list of ``{"model", "trace", "kind", "ratios"}`` rows.

    A row whose ratio is None (a run rejected requests) is left out of the ratios and
    listed under ``excluded``; when it is the ukv run that rejected requests the goal is
    not met (it failed where a baseline did not).

    Returns:
        dict: per goal, ``met`` (bool), the worst ratio and where it was, the geometric
        mean, ``runs`` (rows with a ratio) and ``excluded`` (``"model / trace"`` of the
        rows without one).
    """
    checks = {
        "ukv >= oracle on stationary traces": (
            lambda r: "phase" not in r["trace"],
            "oracle",
            GOAL_STATIONARY,
        ),
        "ukv >= 1.3x oracle on phase traces": (
            lambda r: "phase" in r["trace"],
            "oracle",
            GOAL_PHASE,
        ),
        "ukv >= 1.5x SGLang default": (lambda r: True, "sglang-default", GOAL_DEFAULT),
        "ukv > vLLM single page (same dtypes) on state models": (
            lambda r: r["kind"] == "mamba",
            "vllm",
            None,
        ),
    }
    out = {}
    for goal, (pick, label, need) in checks.items():
        picked = [r for r in results if pick(r)]
        rows = [r for r in picked if r["ratios"].get(label) is not None]
        excluded = [r for r in picked if r["ratios"].get(label) is None]
        if not rows:
            continue
        worst = min(rows, key=lambda r: r["ratios"][label])
        mine_failed = any(r["layouts"].get(_peer(r, label), {}).get("rejected") for r in excluded)
        met = not mine_failed and all(
            (r["ratios"][label] > 1.0) if need is None else (r["ratios"][label] >= need)
            for r in rows
        )
        out[goal] = {
            "met": bool(met),
            "worst_ratio": round(worst["ratios"][label], 3),
            "worst_at": f"{worst['model']} / {worst['trace']}",
            "geomean_ratio": round(
                float(np.exp(np.mean([np.log(r["ratios"][label]) for r in rows]))), 3
            ),
            "runs": len(rows),
            "excluded": [f"{r['model']} / {r['trace']}" for r in excluded],
        }
    return out
