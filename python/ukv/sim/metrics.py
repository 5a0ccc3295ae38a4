"""Summaries of a run: throughput, goodput under latency SLOs, prefix-cache hits, queueing.

Rates are per simulated second over the run's makespan (first arrival to last completion),
so a layout that holds more requests at once finishes the same trace sooner and scores
higher. ``served_tok_s`` (output tokens per second) is the figure ratios compare;
``goodput_req_s`` counts only the requests that met both SLOs: time to first token
``<= TTFT_SLO_S`` and time per output token after it ``<= TPOT_SLO_S``.
"""

from __future__ import annotations

import numpy as np

from ukv.sim.engine import Run
from ukv.sim.traces import Trace

PERCENTILES = (50, 90, 99)
TTFT_SLO_S = 10.0
"""Time-to-first-token objective, seconds (queueing included)."""
TPOT_SLO_S = 0.1
"""Time-per-output-token objective after the first token, seconds."""


def slo_met(
    run: Run, trace: Trace, ttft: float = TTFT_SLO_S, tpot: float = TPOT_SLO_S
) -> np.ndarray:
    """shape ``[N]`` bool: completed within both objectives."""
    done = ~np.isnan(run.finished_at)
    t_first = run.first_at - trace.arrival
    steps = np.maximum(trace.output_len - 1, 1)
    per_tok = np.where(trace.output_len > 1, (run.finished_at - run.first_at) / steps, 0.0)
    with np.errstate(invalid="ignore"):
        return done & (t_first <= ttft) & (per_tok <= tpot)


def summarize(run: Run, trace: Trace) -> dict:
    """The JSON-ready summary of one run.

    Returns:
        dict: ``served_tok_s`` (output tokens / s), ``completed_req_s``, ``completed``,
        ``rejected``, ``generated_tokens``, ``goodput_req_s`` and ``goodput_tok_s`` (SLOs
        met), ``slo_met``, ``ttft_s`` and ``tpot_s`` (p50/p90/p99), ``token_hit_rate``
        (prompt tokens served by the prefix cache, first admissions), ``peak_running``,
        ``mean_running`` (time-weighted), ``queue_delay_s`` (p50/p90/p99 of first
        admission − arrival), ``retractions``, ``bytes_moved``, ``bytes_freed``,
        ``moved_per_freed``, ``makespan_s``, ``steps`` (no host timings: the same trace
        gives the same dict).
    """
    makespan = run.makespan
    done = ~np.isnan(run.finished_at)
    delay = (run.admitted_at - trace.arrival)[done]
    ttft = (run.first_at - trace.arrival)[done]
    multi = done & (trace.output_len > 1)
    tpot = ((run.finished_at - run.first_at) / np.maximum(trace.output_len - 1, 1))[multi]
    met = slo_met(run, trace)
    dt = run.durations
    mean_running = float((run.running * dt).sum() / dt.sum()) if dt.size and dt.sum() else 0.0
    return {
        "backend": run.backend,
        "served_tok_s": _r(run.generated / makespan),
        "completed_req_s": _r(int(done.sum()) / makespan),
        "completed": int(done.sum()),
        "rejected": run.rejected,
        "generated_tokens": run.generated,
        "goodput_req_s": _r(int(met.sum()) / makespan),
        "goodput_tok_s": _r(float(trace.output_len[met].sum()) / makespan),
        "slo_met": _r(float(met.sum()) / max(int(done.sum()), 1)),
        "ttft_s": _pct(ttft),
        "tpot_s": _pct(tpot),
        "token_hit_rate": _r(run.hit_tokens / run.prompt_tokens) if run.prompt_tokens else 0.0,
        "prefill_tokens": run.prefill_tokens,
        "peak_running": int(run.running.max()) if run.running.size else 0,
        "mean_running": _r(mean_running),
        "queue_delay_s": _pct(delay),
        "retractions": run.retractions,
        "bytes_moved": run.bytes_moved,
        "bytes_freed": run.bytes_freed,
        "moved_per_freed": _r(run.bytes_moved / run.bytes_freed) if run.bytes_freed else 0.0,
        "makespan_s": _r(makespan),
        "steps": run.steps,
        "cache": run.cache,
    }


def _pct(x: np.ndarray) -> dict:
    return {f"p{p}": _r(float(np.percentile(x, p))) if x.size else None for p in PERCENTILES}


def _r(x: float) -> float:
    """Rounded for stable, readable JSON (6 significant digits)."""
    return float(f"{x:.6g}")
