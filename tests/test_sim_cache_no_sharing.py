"""Prefix caching on a trace that shares nothing can hit nothing, and so cannot serve more
than the same layout with caching off: every page the cache holds is either a page the
request holds anyway, or one that caching off would have freed. (In the 3-seed study,
vLLM on the sliding-window models served *more* with caching on at a 0% hit rate: the
window checkpoints a running request still attended to were unlocked, so they counted as
free and were evicted under it.)"""

from __future__ import annotations

import pytest

from ukv import models
from ukv.sim import baselines, metrics, traces
from ukv.sim.clock import FixedClock
from ukv.sim.prefix import build_identity

TOLERANCE = 1.01
"""Caching on may serve at most 1% more than caching off. Without hits the two runs hold
the same memory, but the cache changes when admission and eviction happen (its tree is
evictable, so admission counts it as free), so the two schedules differ slightly; the
defect this test was written for was +3% (gpt-oss-120b) to +169% (Gemma-3-27B)."""
MEMORY_GIB = {"gpt-oss-120b": 2.0}
"""Bytes small enough that memory binds (the default is 4 GiB)."""
LAYOUTS = [x for x in baselines.LAYOUTS if x not in ("oracle", "oracle-phase", "sglang-radix-off")]


def _served(shape, label: str, trace, ident) -> tuple[float, int, int]:
    mem = int(MEMORY_GIB.get(shape.name, 4.0) * (1 << 30))
    s = baselines.Setup(shape, mem, trace, lambda sh: FixedClock(), 16, ident, ident is not None)
    run = baselines.run_layout(baselines.LAYOUTS[label], s, share=0.5)
    return metrics.summarize(run, trace)["served_tok_s"], run.hit_tokens, int(run.rejected)


@pytest.mark.parametrize("name", models.preset_names())
def test_caching_without_sharing_never_serves_more(name):
    shape = models.load(name)
    if not shape.is_hybrid:
        pytest.skip("one kind of layer: every layout is the same pool")
    trace = traces.chat(120, seed=1, rate=50.0)
    ident = build_identity(trace.prompt_len, trace.output_len, None)
    for label in LAYOUTS:
        off, _, rej_off = _served(shape, label, trace, None)
        on, hits, rej_on = _served(shape, label, trace, ident)
        assert hits == 0, (name, label)
        assert rej_on == rej_off, (name, label)
        assert on <= off * TOLERANCE, (name, label, on, off)
