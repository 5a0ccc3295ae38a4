"""SGLang's pool and the drop-in on the same trace: admitted tokens step by step.

Both pools see the same arrivals; the scheduler is SGLang's in both, so as long as the
two pools report the same capacities the runs are identical, iteration by iteration.
They part at the first iteration where admission (``PrefillAdder``) or retraction sees
different numbers; from there on each runs its own trace. So the comparison is:

* ``first_divergence``: the first iteration whose admitted tokens or retracted requests
  differ, with both pools' numbers and capacity views there: the drop-in must admit at
  least as many and retract no more (it reports at least SGLang's capacity for the same
  state). Admitted tokens alone would mislead: a pool with more room retracts later, and
  the iteration after, admits less than the pool that already retracted;
* the totals after it, for the record: iterations to drain the trace (fewer: served
  sooner), tokens admitted (prompt tokens computed, recomputation after retraction
  included), prompt tokens served by the tree, decode tokens, retractions, evictions.
"""

from __future__ import annotations

from typing import Any

_DECISIONS = ("admitted", "retracted", "evicted")


def _decisions(r: dict[str, Any]) -> list[tuple[int, ...]]:
    """Per iteration what SGLang's scheduler decided from the capacities it read."""
    return list(zip(*(r.get(f"{d}_per_step", []) for d in _DECISIONS)))


def first_divergence(sglang: dict[str, Any], ukv: dict[str, Any]) -> dict[str, Any] | None:
    """The first iteration whose decisions (admitted tokens, retracted requests, evicted
    tokens) differ, with both pools' numbers and capacity views there; None when the runs
    are identical."""
    a, b = _decisions(sglang), _decisions(ukv)
    for i in range(max(len(a), len(b))):
        x = a[i] if i < len(a) else None
        y = b[i] if i < len(b) else None
        if x != y:
            return {
                "step": i,
                "sglang": dict(zip(_DECISIONS, x)) if x else None,
                "ukv": dict(zip(_DECISIONS, y)) if y else None,
                "sglang_views": _views(sglang, i),
                "ukv_views": _views(ukv, i),
            }
    return None


def _views(r: dict[str, Any], i: int) -> Any:
    views = r.get("views_per_step") or []
    return views[i] if i < len(views) else None


def verdict(sglang: dict[str, Any], ukv: dict[str, Any], div: dict[str, Any] | None) -> str:
    """``same`` (identical runs) or, at the first difference, ``ukv more`` (the drop-in
    admitted more, or retracted or evicted less), ``ukv fewer`` (the opposite), ``mixed``;
    ``sglang failed`` / ``ukv failed`` when a run ended in an exception there."""
    if div is None:
        return "same"
    x, y = div["sglang"], div["ukv"]
    if x is None or y is None:
        return "sglang failed" if x is None else "ukv failed"
    more = (
        y["admitted"] > x["admitted"]
        or y["retracted"] < x["retracted"]
        or y["evicted"] < x["evicted"]
    )
    fewer = (
        y["admitted"] < x["admitted"]
        or y["retracted"] > x["retracted"]
        or y["evicted"] > x["evicted"]
    )
    if more and not fewer:
        return "ukv more"
    if fewer and not more:
        return "ukv fewer"
    return "mixed"


#: Capacity views where more is more room (``slot_cost``: fewer full tokens per state slot).
_MORE_IS_ROOM = ("available", "full", "swa", "mamba", "mamba_schedulable")


def capacity_shortfalls(sglang: dict[str, Any], ukv: dict[str, Any]) -> list[dict[str, Any]]:
    """Where the drop-in reported less room than SGLang's pool in the same state: every
    iteration up to the first divergence (the states are identical until then), every
    capacity view SGLang's admission and eviction read."""
    div = first_divergence(sglang, ukv)
    sv, uv = sglang.get("views_per_step", []), ukv.get("views_per_step", [])
    last = div["step"] if div is not None else min(len(sv), len(uv)) - 1
    out = []
    for i in range(min(last + 1, len(sv), len(uv))):
        if any(sv[i][k] != uv[i].get(k) for k in sv[i] if k.endswith("evictable")):
            break  # the trees differ: the states parted in a way the decisions miss
        for key, theirs in sv[i].items():
            ours = uv[i].get(key)
            worse = (
                ours < theirs if key in _MORE_IS_ROOM else (key == "slot_cost" and ours > theirs)
            )
            if worse:
                out.append({"step": i, "view": key, "sglang": theirs, "ukv": ours})
    return out


def compare(sglang: dict[str, Any], ukv: dict[str, Any]) -> dict[str, Any]:
    """One configuration's two summaries (``cli.run_one``) side by side."""
    div = first_divergence(sglang, ukv)
    v = verdict(sglang, ukv, div)
    return {
        "config": ukv["config"],
        "first_divergence": div,
        "verdict": v,
        "capacity_shortfalls": capacity_shortfalls(sglang, ukv),
        "ukv_admits_fewer": v in ("ukv fewer", "mixed", "ukv failed"),
        "sglang": _brief(sglang),
        "ukv": _brief(ukv),
    }


def _brief(r: dict[str, Any]) -> dict[str, Any]:
    t = r.get("totals", {})
    return {
        "error": r.get("error"),
        "iterations": r.get("steps"),
        "admitted": r.get("admitted_tokens"),
        "cached": r.get("cached_tokens"),
        "decoded": r.get("decode_tokens"),
        "retracted": t.get("retracted"),
        "aborted": t.get("aborted"),
        "evicted_full": t.get("evicted_full"),
        "evicted_swa": t.get("evicted_swa"),
        "evicted_mamba": t.get("evicted_mamba"),
        "offload": t.get("offload_round_trips"),
        "offload_unsupported": t.get("offload_unsupported"),
        "checks": r.get("checks"),
        "tokens_checked": r.get("tokens_checked"),
        "states_checked": r.get("states_checked"),
        "idle_checks": t.get("idle_checks"),
        "busy_checks": t.get("busy_checks"),
        "seconds": r.get("seconds"),
        "patches": r.get("sglang_patches"),
        "paths": r.get("sglang_paths"),
        "spec": r.get("spec"),
        "moved": r.get("moved"),
    }
