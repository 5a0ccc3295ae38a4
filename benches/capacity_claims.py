"""The figures README's capacity section quotes, read off a capacity study's JSON.

    python3 benches/capacity_claims.py benches/results/capacity-measured.json

Prints, per claim, the range of the per-row means (and which rows tie or lose, read off the
95% interval as the table prints it), so the prose can say only what the table shows:

* ukv ÷ SGLang's split tuned on another trace, per model and trace (the headline table), at
  every memory size of the sweep;
* ukv ÷ each other layout (the best static split in hindsight, the per-phase split, SGLang's
  default split and unified pool, vLLM and Jenga), per trace, over the models;
* vLLM in its own dtypes against ukv (served tokens, vLLM ÷ ukv), the prefix-cache token hit
  rates, Marconi's policy on the same pool, and the rate sweep.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

TRACES = ("mooncake", "azure", "chat", "long", "phase")


def _r2(x: float) -> str:
    return f"{x:.2f}"


def verdict(c: dict) -> str:
    """``wins``, ``ties`` or ``LOSES``: the interval as printed (two decimals)."""
    lo, hi = c.get("lo"), c.get("hi")
    if lo is None or hi is None:
        return "n=1"
    if float(_r2(lo)) > 1.0:
        return "wins"
    if float(_r2(hi)) < 1.0:
        return "LOSES"
    return "ties"


def span(xs: list[float]) -> str:
    if not xs:
        return "–"
    lo, hi = min(xs), max(xs)
    return _r2(lo) if _r2(lo) == _r2(hi) else f"{_r2(lo)}-{_r2(hi)}"


def _short(model: str) -> str:
    return model.split("-")[0] if not model.startswith("gpt") else "gpt-oss"


def claims(data: dict) -> list[str]:
    rows = data["rows"]
    out: list[str] = []

    def pick(section: str, trace: str | None = None, memory: str | None = None, load=None):
        return [
            r
            for r in rows
            if r["section"] == section
            and (trace is None or r["trace"] == trace)
            and (memory is None or r["memory"] == memory)
            and (load is None or str(r["load"]) == str(load))
        ]

    out.append(f"seeds: {data['meta'].get('seeds')}")
    out.append("== ukv ÷ sglang-tuned (main, 40 GiB) ==")
    for r in pick("main"):
        c = r["ratios"].get("sglang-tuned")
        cell = "rejects" if c is None else f"{c['mean']:.2f} [{c['lo']}, {c['hi']}] {verdict(c)}"
        out.append(f"  {r['model']:<22} {r['trace']:<9} {cell}")
    for sec in ("memory",):
        out.append("== ukv ÷ sglang-tuned (memory sweep, mooncake) ==")
        for r in pick(sec):
            c = r["ratios"].get("sglang-tuned")
            cell = "rejects" if c is None else f"{c['mean']:.2f} {verdict(c)}"
            out.append(f"  {r['model']:<22} {r['memory']:<7} {cell}")
    for layout in ("oracle", "oracle-phase", "sglang-default", "sglang-unified", "vllm",
                   "vllm-equal", "jenga"):  # fmt: skip
        out.append(f"== ukv ÷ {layout} (main, 40 GiB): range of means; ties/losses ==")
        for tr in TRACES:
            xs, odd = [], []
            for r in pick("main", tr):
                c = r["ratios"].get(layout)
                if c is None:
                    continue
                xs.append(c["mean"])
                v = verdict(c)
                if v != "wins":
                    odd.append(f"{_short(r['model'])} {v} {c['mean']:.2f}")
            if xs:
                out.append(f"  {tr:<9} {span(xs)}   " + ", ".join(odd))
    out.append("== memory sweep: ukv ÷ layout at each size (mooncake) ==")
    for r in pick("memory"):
        cells = []
        for k, c in sorted(r["ratios"].items()):
            if c is None:
                cells.append(f"{k} rejects")
                continue
            cells.append(f"{k} {c['mean']:.2f}{'' if verdict(c) == 'wins' else ' ' + verdict(c)}")
        out.append(f"  {r['model']:<22} {r['memory']:<7} " + "; ".join(cells))
    out.append("== vLLM in its own dtypes ÷ ukv (served tok/s, main) ==")
    for r in pick("main"):
        s = r["served_tok_s"]
        if "vllm" in s and "ukv" in s and r["kind"] == "mamba":
            out.append(
                f"  {r['model']:<22} {r['trace']:<9} {s['vllm']['mean'] / s['ukv']['mean']:.2f}"
            )
    out.append("== token hit rate (main, mooncake), % of prompt tokens ==")
    for r in pick("main", "mooncake"):
        h = r.get("hit_rate", {})
        cells = [f"{k} {100 * v['mean']:.1f}" for k, v in sorted(h.items()) if v]
        out.append(f"  {r['model']:<22} " + "; ".join(cells))
    out.append("== ukv-marconi ÷ ukv (served tok/s, main) ==")
    xs = []
    for r in pick("main"):
        s = r["served_tok_s"]
        if "ukv-marconi" in s:
            xs.append(s["ukv-marconi"]["mean"] / s["ukv"]["mean"])
    out.append(f"  {span(xs)}")
    out.append("== rate sweep (mooncake, 40 GiB): ukv ÷ layout ==")
    for r in pick("rate"):
        cells = [f"{k} {c['mean']:.2f}" if c else f"{k} –" for k, c in sorted(r["ratios"].items())]
        out.append(f"  {r['model']:<22} load={r['load']:<4} " + "; ".join(cells))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("json", type=Path)
    a = p.parse_args(argv)
    try:
        data = json.loads(a.json.read_text())
    except (OSError, ValueError) as e:
        print(f"capacity_claims.py: cannot read {str(a.json)!r}: {e}", file=sys.stderr)
        return 2
    print("\n".join(claims(data)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
