"""Summaries of a run: concurrency, throughput, queueing delay, retractions, compaction.

Rates are per simulated second over the run's makespan (first arrival to last completion),
so a layout that holds more requests at once finishes the same trace sooner and scores
higher. ``served`` (output tokens per second) is the figure the goals compare.
"""

from __future__ import annotations

import numpy as np

from ukv.sim.engine import STEP_S, Run
from ukv.sim.traces import Trace

PERCENTILES = (50, 90, 99)


def summarize(run: Run, trace: Trace) -> dict:
    """The JSON-ready summary of one run.

    Returns:
        dict: ``served_tok_s`` (output tokens / s), ``completed_req_s``, ``completed``,
        ``rejected``, ``generated_tokens``, ``peak_running``, ``mean_running``,
        ``queue_delay_s`` (p50/p90/p99 of first admission − arrival, completed requests),
        ``retractions``, ``bytes_moved``, ``bytes_freed``, ``moved_per_freed``,
        ``makespan_s``, ``steps`` (no host timings: the same trace gives the same dict).
    """
    makespan = max(run.steps * STEP_S, STEP_S)
    done = ~np.isnan(run.finished_at)
    delay = (run.admitted_at - trace.arrival)[done]
    q = {f"p{p}": _r(float(np.percentile(delay, p))) if delay.size else None for p in PERCENTILES}
    return {
        "backend": run.backend,
        "served_tok_s": _r(run.generated / makespan),
        "completed_req_s": _r(int(done.sum()) / makespan),
        "completed": int(done.sum()),
        "rejected": run.rejected,
        "generated_tokens": run.generated,
        "peak_running": int(run.running.max()) if run.running.size else 0,
        "mean_running": _r(float(run.running.mean())) if run.running.size else 0.0,
        "queue_delay_s": q,
        "retractions": run.retractions,
        "bytes_moved": run.bytes_moved,
        "bytes_freed": run.bytes_freed,
        "moved_per_freed": _r(run.bytes_moved / run.bytes_freed) if run.bytes_freed else 0.0,
        "makespan_s": _r(makespan),
        "steps": run.steps,
    }


def _r(x: float) -> float:
    """Rounded for stable, readable JSON (4 significant decimals)."""
    return float(f"{x:.6g}")
