"""Capacity suite: every preset × (chat, long, phase) on the unified pool and the baselines.

    PYTHONPATH=python python3 benches/capacity.py --memory 40GiB --out benches/results

writes ``capacity.json`` (every summary, the oracle sweeps, the goals), ``capacity.md``
(the tables, the goals met or not, the command, machine and versions) and the PNGs named
by ``--plots`` (``model:trace`` pairs). ``--jobs`` runs models in parallel processes.

    PYTHONPATH=python python3 benches/capacity.py --models gpt-oss-120b Gemma-3-27B --merge

re-runs only the named models and reuses the rows of every other model from the
``capacity.json`` already in ``--out`` (same memory, tp, page size, traces and seed, else
it refuses); the goals are recomputed over all rows, and both files say which models were
run at which commit.

    PYTHONPATH=python python3 benches/capacity.py --replay \
        Qwen3-Next-80B-A3B:/work/shared/data/traces/mooncake/conversation_trace.jsonl:10:3000

replays real traces instead (``MODEL:FILE:RATE_SCALE[:REQUESTS]``: the file's first
REQUESTS requests at RATE_SCALE times their recorded rate, see ``ukv.sim.traces``) and
adds them to the ``capacity.json`` in ``--out`` as its own section (same memory, tp and
page size); the other rows and the goals are kept as they are.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import torch

from ukv import models
from ukv.cli import parse_bytes, summary_json
from ukv.sim import baselines, plot, traces

TRACES = {"chat": 2000, "long": 300, "phase": 2000}
"""Requests per trace (all overload every preset at 40 GiB; see ukv.sim.traces)."""
DEFAULT_PLOTS = ("Qwen3-Next-80B-A3B:phase", "Nemotron-Nano-9B-v2:chat")


def run_model(
    name: str, memory: str, tp: int, page: int, seed: int, out: str, plots: tuple
) -> list:
    """All traces of one model; returns their JSON summaries (and writes asked-for PNGs)."""
    shape = models.load(name)
    shape = shape.sharded(tp) if tp != 1 else shape
    total = parse_bytes(memory)
    rows = []
    for tname, n in TRACES.items():
        trace = traces.make(tname, n, seed)
        t0 = time.perf_counter()
        cmp = baselines.compare(shape, total, trace, page_size=page)
        args = argparse.Namespace(tp=tp, page_size=page, seed=seed)
        row = summary_json(shape, total, args, trace, cmp)
        row["wall_s"] = round(time.perf_counter() - t0, 1)
        rows.append(row)
        if f"{name}:{tname}" in plots:
            png = Path(out) / f"capacity-{name}-{tname}.png"
            plot.save(cmp, png, f"{name} tp={tp}, {memory} per rank, trace {tname} ({n} requests)")
        print(f"{name:<22} {tname:<6} done in {row['wall_s']:.0f} s", file=sys.stderr)
    return rows


def run_replay(spec: str, memory: str, tp: int, page: int) -> dict:
    """One real-trace replay, ``MODEL:FILE:RATE_SCALE[:REQUESTS]``; returns its summary."""
    parts = spec.split(":")
    if len(parts) not in (3, 4):
        sys.exit(f"capacity.py: --replay {spec!r}: expected MODEL:FILE:RATE_SCALE[:REQUESTS]")
    name, path, scale = parts[0], parts[1], float(parts[2])
    n = int(parts[3]) if len(parts) == 4 else None
    shape = models.load(name)
    shape = shape.sharded(tp) if tp != 1 else shape
    trace = traces.rescale(traces.make(path, n), rate_scale=scale)
    t0 = time.perf_counter()
    cmp = baselines.compare(shape, parse_bytes(memory), trace, page_size=page)
    row = summary_json(shape, parse_bytes(memory), argparse.Namespace(tp=tp, page_size=page),
                       trace, cmp)  # fmt: skip
    row["replay"] = spec
    row["wall_s"] = round(time.perf_counter() - t0, 1)
    print(f"{name:<22} {trace.name} done in {row['wall_s']:.0f} s", file=sys.stderr)
    return row


def main_replay(a: argparse.Namespace) -> int:
    """``--replay``: add real-trace rows to the capacity.json in ``--out``."""
    path = Path(a.out, "capacity.json")
    if not path.is_file():
        sys.exit(f"capacity.py: --replay: no {path} to add to")
    base = json.loads(path.read_text())
    for k, v in (("memory", a.memory), ("tp", a.tp), ("page_size", a.page_size)):
        if base["meta"].get(k) != v:
            sys.exit(f"capacity.py: --replay: {path} has {k} = {base['meta'].get(k)!r}, "
                     f"this run {v!r}")  # fmt: skip
    t0 = time.perf_counter()
    with ProcessPoolExecutor(a.jobs) as ex:
        futs = [ex.submit(run_replay, r, a.memory, a.tp, a.page_size) for r in a.replay]
        rows = [f.result() for f in futs]
    meta = _meta(a, time.perf_counter() - t0)
    base["replays"] = rows
    base["meta"]["replay_run"] = {k: meta[k] for k in ("command", "date_utc", "versions", "wall_s")}
    path.write_text(json.dumps(base, indent=1))
    text = _markdown(base["meta"], base["goals"], base["runs"], rows)
    Path(a.out, "capacity.md").write_text(text)
    print(text)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--memory", default="40GiB")
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--page-size", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="benches/results")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--models", nargs="*", default=list(models.preset_names()))
    p.add_argument("--plots", nargs="*", default=list(DEFAULT_PLOTS))
    p.add_argument(
        "--merge",
        action="store_true",
        help="keep the other models' rows of the capacity.json in --out (re-run only --models)",
    )
    p.add_argument("--replay", nargs="+", metavar="MODEL:FILE:RATE_SCALE[:REQUESTS]",
                   help="replay real traces and add them to the capacity.json in --out")  # fmt: skip
    a = p.parse_args()
    if a.replay:
        return main_replay(a)
    base = _load_base(a) if a.merge else None
    t0 = time.perf_counter()
    with ProcessPoolExecutor(a.jobs) as ex:
        futs = [ex.submit(run_model, m, a.memory, a.tp, a.page_size, a.seed, a.out, tuple(a.plots))
                for m in a.models]  # fmt: skip
        rows = [r for f in futs for r in f.result()]
    meta = _meta(a, time.perf_counter() - t0)
    if base is not None:
        rows, meta["runs_at"] = _merge(base, rows, a.models, meta)
    goal = baselines.goals(rows)
    out: dict = {"meta": meta, "goals": goal, "runs": rows}
    if base is not None and "replays" in base:
        out["replays"] = base["replays"]
        meta["replay_run"] = base["meta"].get("replay_run")
    Path(a.out, "capacity.json").write_text(json.dumps(out, indent=1))
    text = _markdown(meta, goal, rows, out.get("replays", []))
    Path(a.out, "capacity.md").write_text(text)
    print(text)
    return 0


_SAME = ("memory", "tp", "page_size", "traces", "seed")
"""Settings a merged file's rows must share."""


def _load_base(a: argparse.Namespace) -> dict:
    """The ``capacity.json`` in ``--out`` that ``--merge`` keeps rows of (checked before
    anything runs: same settings as this run)."""
    path = Path(a.out, "capacity.json")
    if not path.is_file():
        sys.exit(f"capacity.py: --merge: no {path} to merge with")
    base = json.loads(path.read_text())
    now = {"memory": a.memory, "tp": a.tp, "page_size": a.page_size, "traces": TRACES,
           "seed": a.seed}  # fmt: skip
    for k in _SAME:
        if base["meta"].get(k) != now[k]:
            sys.exit(f"capacity.py: --merge: {path} has {k} = {base['meta'].get(k)!r}, "
                     f"this run {now[k]!r}; re-run every model instead")  # fmt: skip
    return base


def _stamp(meta: dict) -> str:
    return f"{meta['versions'].split(',')[0]} ({meta['date_utc']} UTC)"


def _merge(base: dict, rows: list, rerun: list, meta: dict) -> tuple[list, dict]:
    """Every model of ``base`` in its order, the re-run ones replaced by ``rows``; new
    models go last. Returns the rows and, per model, the run it comes from."""
    old_at = base["meta"].get("runs_at", {})
    fresh = {m: [r for r in rows if r["model"] == m] for m in rerun}
    order = list(dict.fromkeys([r["model"] for r in base["runs"]] + list(rerun)))
    merged, at = [], {}
    for m in order:
        if m in fresh:
            merged += fresh[m]
            at[m] = _stamp(meta)
        else:
            merged += [r for r in base["runs"] if r["model"] == m]
            at[m] = old_at.get(m, _stamp(base["meta"]))
    return merged, at


def _meta(a: argparse.Namespace, wall: float) -> dict:
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return {
        "command": "PYTHONPATH=python python3 " + " ".join(sys.argv),
        "date_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M"),
        "machine": f"{platform.machine()}, {platform.processor() or platform.system()}, {a.jobs} jobs",
        "versions": f"ukv {rev.stdout.strip()}, python {platform.python_version()}, "
        f"numpy {np.__version__}, torch {torch.__version__}",
        "memory": a.memory,
        "tp": a.tp,
        "page_size": a.page_size,
        "traces": TRACES,
        "seed": a.seed,
        "wall_s": round(wall, 1),
    }


def _markdown(meta: dict, goal: dict, rows: list, replays: list | None = None) -> str:
    lines = [
        "# Capacity: unified pool vs static splits vs padded single page",
        "",
        f"Command: `{meta['command']}`  ",
        f"Date: {meta['date_utc']} UTC; machine: {meta['machine']}; {meta['versions']}; "
        f"wall {meta['wall_s']} s.  ",
        f"Setup: {meta['memory']} of KV cache per rank, tp={meta['tp']}, page size "
        f"{meta['page_size']}, traces {meta['traces']} requests, seed {meta['seed']}. "
        'Simulated on `device="meta"` (the real allocator, no bytes); the rules are in '
        "docs/SIMULATOR.md.",
        "",
        "Served = output tokens per simulated second over the whole trace. Ratio columns are "
        "unified ÷ that layout: `sglang-default` is SGLang's default ratios with the radix "
        "cache off, `padded` is vLLM's single page size in vLLM's dtypes (prefix caching off), "
        "its ratio taken against the unified pool in the same dtypes (`uni-vllm`, run where "
        "vLLM's state dtype differs from SGLang's). A run that rejected "
        "requests (one did not fit its layout even alone) enters no ratio: its cell says "
        "`failed` with the count, and the goals leave it out (listed under the table).",
        "",
    ]
    if "runs_at" in meta:
        by: dict[str, list[str]] = {}
        for m, at in meta["runs_at"].items():
            by.setdefault(at, []).append(m)
        lines += [
            "Merged (`--merge`): the command above re-ran only its `--models`; the wall time is "
            "theirs. Rows by run: "
            + "; ".join(f"{', '.join(ms)} at {at}" for at, ms in by.items())
            + ".",
            "",
        ]
    lines += [
        "## Goals",
        "",
        "| goal | met | worst ratio (where) | geometric mean |",
        "|---|---|---|---|",
    ]
    for g, v in goal.items():
        lines.append(f"| {g} | {'met' if v['met'] else 'NOT met'} | {v['worst_ratio']:.2f} "
                     f"({v['worst_at']}) | {v['geomean_ratio']:.2f} ({v['runs']} runs) |")  # fmt: skip
    left_out = {g: v["excluded"] for g, v in goal.items() if v["excluded"]}
    if left_out:
        lines.append("")
        for g, where in left_out.items():
            lines.append(f"Left out of *{g}* (a run rejected requests): {', '.join(where)}.")
    lines += [
        "",
        "## Runs",
        "",
        "| model | trace | unified tok/s | ÷ sglang-default (radix off) | ÷ oracle (share) | "
        "÷ padded (vLLM dtypes) | peak req (uni / oracle / uni-vllm / padded) | "
        "retractions uni | moved/freed uni |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        L = r["layouts"]
        lines.append(
            f"| {r['model']} | {r['trace']} | {_served(L['unified'])} | "
            f"{_ratio(r, 'sglang-default')} | {_ratio(r, 'oracle-static')} "
            f"({L['oracle-static']['share']:.3f}) | {_ratio(r, 'padded')} | "
            f"{_peaks(L)} | {L['unified']['retractions']} | "
            f"{L['unified']['moved_per_freed']:.2f} |"
        )
    lines.append("")
    if replays:
        lines += _replay_markdown(meta, replays)
    return "\n".join(lines)


def _replay_markdown(meta: dict, replays: list) -> list[str]:
    """The real-trace section: one row per replay, not part of the goals."""
    run = meta.get("replay_run") or {}
    lines = [
        "## Real-trace replay",
        "",
        f"Command: `{run.get('command', '?')}`  ",
        f"Date: {run.get('date_utc', '?')} UTC; {run.get('versions', '?')}; wall "
        f"{run.get('wall_s', '?')} s. Same memory, tp and page size as above. Arrivals are "
        "the trace's own timestamps, compressed by the rate scale so that memory, not "
        "arrivals, bounds what is served. Prefix caching is not simulated (Mooncake's "
        "`hash_ids` are ignored; every layout runs with it off). Not part of the goals.",
        "",
        "| model | trace | unified tok/s | ÷ sglang-default (radix off) | ÷ oracle (share) | "
        "÷ padded (vLLM dtypes) | peak req (uni / oracle / uni-vllm / padded) | "
        "queue p50 s uni / oracle |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in replays:
        L = r["layouts"]
        qu, qo = L["unified"]["queue_delay_s"]["p50"], L["oracle-static"]["queue_delay_s"]["p50"]
        lines.append(
            f"| {r['model']} | {r['trace_origin']} | {_served(L['unified'])} | "
            f"{_ratio(r, 'sglang-default')} | {_ratio(r, 'oracle-static')} "
            f"({L['oracle-static']['share']:.3f}) | {_ratio(r, 'padded')} | "
            f"{_peaks(L)} | {_q(qu)} / {_q(qo)} |"
        )
    lines.append("")
    return lines


def _peaks(layouts: dict) -> str:
    """Peak requests in memory; ``uni-vllm`` is ``=`` where vLLM's dtypes are the engine's."""
    vllm = layouts.get("unified-vllm")
    cells = [layouts["unified"], layouts["oracle-static"], vllm, layouts["padded"]]
    return " / ".join("=" if c is None else str(c["peak_running"]) for c in cells)


def _q(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def _served(summary: dict) -> str:
    """Served tokens per second, or the failure when the run rejected requests."""
    if summary["rejected"]:
        return f"failed ({summary['rejected']} rejected)"
    return f"{summary['served_tok_s']:,.0f}"


def _ratio(row: dict, label: str) -> str:
    """A ratio cell: the number, or why there is none (a run rejected requests)."""
    q = row["ratios"].get(label)
    if q is not None:
        return f"{q:.2f}"
    why = row.get("failures", {})
    return "failed: " + "; ".join(f"{k} {v}" for k, v in why.items())


if __name__ == "__main__":
    sys.exit(main())
