"""One comparison: the unified pool against the static splits and the padded pool, on the
same bytes and the same trace.

* ``unified``: the real ukv pool (:class:`~ukv.sim.backends.UnifiedBackend`).
* ``sglang-default``: a static split at SGLang's default ratio
  (:func:`~ukv.sim.backends.sglang_default_share`).
* ``oracle-static``: the best static split in hindsight: every share of ``SWEEP`` is run,
  then ``REFINE`` steps around the best, and the one that served most is kept.
* ``padded``: vLLM's single page size (:class:`~ukv.sim.backends.PaddedBackend`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ukv.models import ModelShape
from ukv.sim import metrics
from ukv.sim.backends import PaddedBackend, SplitBackend, UnifiedBackend, sglang_default_share
from ukv.sim.engine import CHUNK, Run, simulate
from ukv.sim.traces import Trace

SWEEP = tuple(round(0.05 * i, 2) for i in range(1, 20))
"""State / SWA byte shares the oracle tries first (5% to 95%)."""
REFINE = (-0.025, -0.0125, 0.0125, 0.025)
"""Offsets tried around the best share of ``SWEEP``."""
GOAL_STATIONARY = 1.0
GOAL_PHASE = 1.3
GOAL_DEFAULT = 1.5


@dataclass
class Comparison:
    """The four layouts on one trace.

    Attributes:
        summaries: ``{label: metrics.summarize(...)}`` for unified, sglang-default,
            oracle-static and padded.
        runs: ``{label: Run}`` (timelines for the plot).
        oracle_share: The share the oracle picked; ``sweep``: ``[(share, served)]``.
    """

    summaries: dict[str, dict]
    runs: dict[str, Run]
    oracle_share: float
    sweep: list[tuple[float, float]] = field(default_factory=list)

    def ratio(self, label: str) -> float:
        """Unified's ``served_tok_s`` over ``label``'s (inf when that one served none)."""
        base = self.summaries[label]["served_tok_s"]
        mine = self.summaries["unified"]["served_tok_s"]
        return float(mine / base) if base else float("inf")


def compare(
    shape: ModelShape,
    total_bytes: int,
    trace: Trace,
    *,
    page_size: int = 16,
    progress: bool = False,
    sweep: tuple[float, ...] = SWEEP,
) -> Comparison:
    """Run the trace on every layout (see the module docstring).

    Args:
        shape: The model, one rank (already sharded).
        total_bytes: Bytes per rank.
        trace: The requests.
        page_size: Tokens per KV page.
        progress: Progress bars on stderr.
        sweep: The oracle's first grid of shares.

    Returns:
        Comparison: the summaries, the runs and the oracle's sweep.
    """
    ctx = int((trace.prompt_len + trace.output_len).max())
    runs: dict[str, Run] = {}
    runs["unified"] = simulate(
        trace, UnifiedBackend(shape, total_bytes, page_size, ctx, chunk=CHUNK), progress=progress
    )
    default = sglang_default_share(shape)
    runs["sglang-default"] = _split(
        shape, total_bytes, trace, default, page_size, "sglang-default", progress
    )
    share, best, tried = _oracle(shape, total_bytes, trace, page_size, sweep, progress)
    runs["oracle-static"] = best
    runs["padded"] = simulate(trace, PaddedBackend(shape, total_bytes), progress=progress)
    summaries = {k: metrics.summarize(v, trace) for k, v in runs.items()}
    summaries["sglang-default"]["share"] = round(default, 4)
    summaries["oracle-static"]["share"] = share
    return Comparison(summaries, runs, share, tried)


def _split(
    shape: ModelShape, total: int, trace: Trace, share: float, page: int, name: str, progress: bool
) -> Run:
    return simulate(trace, SplitBackend(shape, total, share, page, name), progress=progress)


def _oracle(
    shape: ModelShape, total: int, trace: Trace, page: int, sweep: tuple[float, ...], progress: bool
) -> tuple[float, Run, list[tuple[float, float]]]:
    """Best share by served tokens per second (ties: the smaller share)."""
    tried: dict[float, Run] = {}

    def run(share: float) -> None:
        share = round(share, 4)
        if 0 < share < 1 and share not in tried:
            tried[share] = _split(shape, total, trace, share, page, "oracle-static", False)

    for s in sweep:
        run(s)
    first = max(sorted(tried), key=lambda s: (_served(tried[s]), -s))
    for d in REFINE:
        run(first + d)
    best = max(sorted(tried), key=lambda s: (_served(tried[s]), -s))
    if progress:
        import sys

        sys.stderr.write(f"oracle-static: {len(tried)} splits tried, best share {best}\n")
    table = [(s, _served(tried[s])) for s in sorted(tried)]
    return best, tried[best], table


def _served(run: Run) -> float:
    return run.generated / max(run.steps, 1)


def goals(results: list[dict]) -> dict[str, dict]:
    """The issue's goals over a list of ``{"model", "trace", "kind", "ratios"}`` rows.

    Returns:
        dict: per goal, ``met`` (bool), the worst ratio and where it was.
    """
    checks = {
        "unified >= oracle on stationary traces": (
            lambda r: r["trace"] != "phase",
            "oracle-static",
            GOAL_STATIONARY,
        ),
        "unified >= 1.3x oracle on phase traces": (
            lambda r: r["trace"] == "phase",
            "oracle-static",
            GOAL_PHASE,
        ),
        "unified >= 1.5x SGLang default ratios": (lambda r: True, "sglang-default", GOAL_DEFAULT),
        "unified > padded single page on state models": (
            lambda r: r["kind"] == "mamba",
            "padded",
            None,
        ),
    }
    out = {}
    for goal, (pick, label, need) in checks.items():
        rows = [r for r in results if pick(r)]
        if not rows:
            continue
        worst = min(rows, key=lambda r: r["ratios"][label])
        w = worst["ratios"][label]
        met = all(
            (r["ratios"][label] > 1.0) if need is None else (r["ratios"][label] >= need)
            for r in rows
        )
        out[goal] = {
            "met": bool(met),
            "worst_ratio": round(w, 3),
            "worst_at": f"{worst['model']} / {worst['trace']}",
            "geomean_ratio": round(
                float(np.exp(np.mean([np.log(r["ratios"][label]) for r in rows]))), 3
            ),
        }
    return out
