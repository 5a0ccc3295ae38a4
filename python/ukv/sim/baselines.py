"""One comparison: the unified pool against the static splits and the padded pool, on the
same bytes and the same trace.

* ``unified``: the real ukv pool (:class:`~ukv.sim.backends.UnifiedBackend`).
* ``sglang-default``: a static split at SGLang's default ratio
  (:func:`~ukv.sim.backends.sglang_default_share`), radix cache off (no prefix caching).
* ``oracle-static``: the best static split in hindsight: every share of ``SWEEP`` is run,
  then ``REFINE`` steps around the best, and the one that served most without rejecting a
  request is kept.
* ``padded``: vLLM's single page size (:class:`~ukv.sim.backends.PaddedBackend`), in
  vLLM's dtypes, prefix caching off.
* ``unified-vllm``: the unified pool again in vLLM's dtypes, only where they differ from
  the given shape's (a state model whose recurrent state vLLM keeps in another dtype than
  SGLang). ``padded``'s ratio is taken against it, so that it compares layouts, not dtypes.

A ratio compares two runs that served the same requests: a run that rejected any request
(one that does not fit its layout even alone) enters no ratio; the comparison reports it
as a failure instead (:meth:`Comparison.failures`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ukv.models import ModelShape
from ukv.sim import metrics
from ukv.sim.backends import (
    PaddedBackend,
    SplitBackend,
    UnifiedBackend,
    engine_shape,
    sglang_default_share,
)
from ukv.sim.engine import CHUNK, Run, simulate
from ukv.sim.traces import Trace

SWEEP = tuple(round(0.05 * i, 2) for i in range(1, 20))
"""State / SWA byte shares the oracle tries first (5% to 95%)."""
REFINE = (-0.025, -0.0125, 0.0125, 0.025)
"""Offsets tried around the best share of ``SWEEP``."""
LABELS = {
    "unified": "ukv unified pool",
    "sglang-default": "SGLang default ratios, radix cache off",
    "oracle-static": "best static split in hindsight",
    "padded": "vLLM single page size (vLLM dtypes, prefix caching off)",
    "unified-vllm": "ukv unified pool in vLLM's dtypes",
}
"""What each layout is, for tables and JSON (the keys are the layouts' labels)."""
GOAL_STATIONARY = 1.0
GOAL_PHASE = 1.3
GOAL_DEFAULT = 1.5


@dataclass
class Comparison:
    """The four layouts on one trace.

    Attributes:
        summaries: ``{label: metrics.summarize(...)}`` for unified, sglang-default,
            oracle-static, padded and (where vLLM's dtypes differ) unified-vllm.
        runs: ``{label: Run}`` (timelines for the plot).
        oracle_share: The share the oracle picked; ``sweep``: ``[(share, served)]``.
    """

    summaries: dict[str, dict]
    runs: dict[str, Run]
    oracle_share: float
    sweep: list[tuple[float, float]] = field(default_factory=list)

    def ratio(self, label: str) -> float | None:
        """Unified's ``served_tok_s`` over ``label``'s (:meth:`peer`: in vLLM's dtypes for
        ``padded``); None when either run rejected a request (they did not serve the same
        requests: see :meth:`failures`)."""
        mine_label = self.peer(label)
        if self.failed(mine_label) or self.failed(label):
            return None
        base = self.summaries[label]["served_tok_s"]
        mine = self.summaries[mine_label]["served_tok_s"]
        return float(mine / base) if base else float("inf")

    def peer(self, label: str) -> str:
        """The unified run ``label`` is compared with: ``unified-vllm`` for ``padded`` when
        there is one (same dtypes as vLLM's), else ``unified``."""
        if label == "padded" and "unified-vllm" in self.summaries:
            return "unified-vllm"
        return "unified"

    def failed(self, label: str) -> bool:
        """Whether ``label``'s run rejected any request."""
        return bool(self.summaries[label]["rejected"])

    def failures(self) -> dict[str, str]:
        """``{label: why}`` for every run that rejected requests."""
        return {
            k: f"{v['rejected']} of {v['rejected'] + v['completed']} requests rejected"
            for k, v in self.summaries.items()
            if v["rejected"]
        }

    def ratios(self) -> dict[str, float | None]:
        """:meth:`ratio` of every other layout, rounded (None: a failed run)."""
        out: dict[str, float | None] = {}
        for k in self.summaries:
            if not k.startswith("unified"):
                r = self.ratio(k)
                out[k] = None if r is None else round(r, 4)
        return out


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
    vshape = engine_shape(shape, "vllm")
    if vshape != shape:
        uni = UnifiedBackend(vshape, total_bytes, page_size, ctx, "unified-vllm", chunk=CHUNK)
        runs["unified-vllm"] = simulate(trace, uni, progress=progress)
    padded = PaddedBackend(vshape, total_bytes, engine=None)
    runs["padded"] = simulate(trace, padded, progress=progress)
    summaries = {k: metrics.summarize(v, trace) for k, v in runs.items()}
    for k, v in summaries.items():
        v["label"] = LABELS[k]
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
    """Best share by served tokens per second among the splits that rejected no request
    (ties: the smaller share); a split that drops requests serves less work, so it is
    chosen only when every split does."""
    tried: dict[float, Run] = {}

    def run(share: float) -> None:
        share = round(share, 4)
        if 0 < share < 1 and share not in tried:
            tried[share] = _split(shape, total, trace, share, page, "oracle-static", False)

    for s in sweep:
        run(s)
    first = max(sorted(tried), key=lambda s: _rank(tried[s], s))
    for d in REFINE:
        run(first + d)
    best = max(sorted(tried), key=lambda s: _rank(tried[s], s))
    if progress:
        import sys

        sys.stderr.write(f"oracle-static: {len(tried)} splits tried, best share {best}\n")
    table = [(s, _served(tried[s])) for s in sorted(tried)]
    return best, tried[best], table


def _peer(row: dict, label: str) -> str:
    """The unified run of a JSON row that ``label``'s ratio was taken against."""
    return "unified-vllm" if label == "padded" and "unified-vllm" in row["layouts"] else "unified"


def _served(run: Run) -> float:
    return run.generated / max(run.steps, 1)


def _rank(run: Run, share: float) -> tuple[bool, float, float]:
    return run.rejected == 0, _served(run), -share


def goals(results: list[dict]) -> dict[str, dict]:
    """The issue's goals over a list of ``{"model", "trace", "kind", "ratios"}`` rows.

    A row whose ratio is None (a run rejected requests) is left out of the ratios and
    listed under ``excluded``; when it is the unified pool that rejected requests the
    goal is not met (it failed where a baseline did not). ``padded``'s ratios are against
    ``unified-vllm`` where a row has one (vLLM's dtypes on both sides).

    Returns:
        dict: per goal, ``met`` (bool), the worst ratio and where it was, the geometric
        mean, ``runs`` (rows with a ratio) and ``excluded`` (``"model / trace"`` of the
        rows without one).
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
        "unified >= 1.5x SGLang default ratios (radix cache off)": (
            lambda r: True,
            "sglang-default",
            GOAL_DEFAULT,
        ),
        "unified > padded single page on state models": (
            lambda r: r["kind"] == "mamba",
            "padded",
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
        unified_failed = any(r["layouts"][_peer(r, label)]["rejected"] for r in excluded)
        met = not unified_failed and all(
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
