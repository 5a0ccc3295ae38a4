"""Capacity simulator: trace-driven serving against the real ukv pool (on ``device="meta"``)
and against the layouts engines use today, on the same bytes.

Modules: :mod:`~ukv.sim.traces` (generators and the JSONL loader),
:mod:`~ukv.sim.backends` (the unified pool, static splits, vLLM's padded pool),
:mod:`~ukv.sim.engine` (the serving loop), :mod:`~ukv.sim.baselines` (one comparison and
the goals), :mod:`~ukv.sim.metrics` (summaries), :mod:`~ukv.sim.plot` (the PNG).
"""

from ukv.sim.baselines import Comparison, compare, goals
from ukv.sim.engine import Run, simulate
from ukv.sim.traces import Trace, load_jsonl

__all__ = ["Comparison", "Run", "Trace", "compare", "goals", "load_jsonl", "simulate"]
