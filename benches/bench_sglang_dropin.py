"""Host time per scheduler step under SGLang 0.5.16 or 0.5.23: its own unified pool vs ukv's drop-in.

Issue 29, item 2. Both sides run in one process on the same device, built by the factory
of SGLang's module name ``sglang.srt.mem_cache.unified_memory_pool``: SGLang's own module,
and the drop-in served under that name after ``ukv.integrations.sglang.install(
replace_loaded=True, propagate=False)`` (a mixed installation on purpose; SGLang's modules
are put back under their names while its factories run, since they import SGLang's
composite allocator when called). Each side then runs the same scheduler trace,
``benches/sglang_step_trace.py`` (its docstring lists every call of a step, in order):
a decode batch that stays full, a finish and a new request's prefill every
``finish_every`` steps, SWA window frees, the forward's attention-metadata translations,
its report to the pool, and ``flush_opportunistic``.

Rows: SWA and Mamba hybrids x decode batches of 64 and 256 requests x page sizes 1 and 16
x eager and lazy compaction x the decode forward run eagerly or under CUDA-graph replay
(the translations then write the graph's static buffers with ``out=``).

Figures, per row and side:

* host µs per step: the host time of the pool's calls only (each call timed on its own
  with ``time.perf_counter``; the scheduler's own work around them, the same on both
  sides, is not counted), summed over a round of ``--steps`` steps and divided by them;
  median and range over ``--rounds`` rounds, after one untimed warm-up round. Rounds are
  interleaved: for each round, each forward kind, SGLang's side then the drop-in's; the
  garbage collector is off inside a round. The goal the issue sets, drop-in <= 1/5 of
  SGLang's host time per step, is "met" where SGLang ÷ drop-in >= 5 (medians);
* kernel launches per step: after the timed rounds, ``--count-steps`` more steps per
  side and forward kind under ``torch.profiler`` (CPU and CUDA activity), every pool
  call in its own ``record_function`` scope; a device kernel counts for the pool when
  the host API call that launched it (matched by CUPTI's correlation id) started inside
  a pool call's scope (``benches/launch_count.py``). Memcpys and host-device syncs
  (``cu*Synchronize`` calls) are counted the same way. The scheduler's own kernels
  (building ``kv_indices``, writing ``req_to_token``) fall outside every scope and are
  not counted.

Cadences: a finish and an arrival every ``--finish-every`` (4) steps, an SWA window-free
pass every ``--evict-every`` (16) steps (SGLang's ``SGLANG_SWA_EVICTION_INTERVAL``
defaults to 128: the window-free phase weighs more here than at SGLang's default; the
tables split the time by phase); ``--count-steps`` defaults to one period of both.

The release is the one ``--sglang-path`` holds, 0.5.16 or 0.5.23, answered by the
scheduler driver's version seam (``benches/sglang_scheduler/release.py``: which modules
the drop-in serves, the factories' keywords, whether SGLang's Mamba stack needs the
repairs below). SGLang 0.5.23's runs as shipped. SGLang 0.5.16's own Mamba stack does
not build or run as shipped; the bench repairs
exactly two things, on SGLang's side only (``sglang_step_trace.build``): its
``init_unified_mamba_pools`` raises ``TypeError`` (``UnifiedHybridReqToTokenPool.
_init_mamba_pool`` lacks the ``enable_gdn_replayssm_spec`` keyword that its base class
``HybridReqToTokenPool.__init__`` passes), so while the factory runs the module's
``UnifiedHybridReqToTokenPool`` is a subclass whose ``_init_mamba_pool`` accepts that
keyword (asserting it is False) and calls SGLang's without it; and its ``UnifiedMambaPool``
lacks ``replayssm_cache_base`` and ``replayssm_is_flush``, which its request table's
``alloc`` reads (``AttributeError``), so both are set to None on the built pool (the
ReplaySSM ring off, as its ``replayssm_write_pos = None`` says). The model has as many SWA
as full layers: with more, SGLang's SWA-side table indexes out of bounds (its defect 1).

On CPU there is neither a kernel nor a comparison: SGLang's paged allocation is a Triton
kernel, run by Triton's interpreter (``TRITON_INTERPRET=1``, set here), and the counts
are aten ops; ``--device cpu --quick`` is a smoke run that proves the script works.

SGLang must be importable: installed ``--no-deps`` (``docs/SGLANG.md``, "Testing against
SGLang"), named by ``--sglang-path`` or ``UKV_SGLANG_PATH``; the third-party packages it
imports at module level but this path never calls are served as stand-ins
(``tests/sglang_stubs.py``), and on CUDA ``sgl_kernel`` too when it is missing
(``benches/peer_sglang.py``). ukv comes from the environment (an installed wheel, or
``PYTHONPATH=python`` in a checkout with the built extension).

Usage (from the repository root)::

    python benches/bench_sglang_dropin.py --device cpu --quick --out benches/results/sglang-step-cpu.md
    python benches/bench_sglang_dropin.py --device cuda --out $OUT/sglang-step-h100.md --max-seconds 300

``--out`` names the markdown file; its JSON twin is written beside it (``.json``). Both
are rewritten after every row, so a run cut short keeps the rows it finished (the title
says PARTIAL); ``--max-seconds`` stops starting rows after that many seconds, and the
rows left are listed as not run.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import importlib
import math
import os
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
T0 = time.perf_counter()
GOAL = 5.0  # SGLang ÷ drop-in, host µs per step (issue 29)
SIDES = ("sglang", "dropin")
SIDE_NAMES = {"sglang": "SGLang", "dropin": "ukv drop-in"}  # main() adds the release


def _args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--sglang-path", default=os.environ.get("UKV_SGLANG_PATH", ""))
    p.add_argument("--quick", action="store_true", help="a smoke run: tiny sizes, 1 round")
    p.add_argument("--hybrid", nargs="+", choices=("swa", "mamba"), default=["swa", "mamba"])
    p.add_argument("--batch", nargs="+", type=int, default=None, help="decode batch sizes")
    p.add_argument("--page-size", nargs="+", type=int, default=[1, 16])
    p.add_argument(
        "--lazy",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="only lazy (--lazy) or only eager (--no-lazy) compaction; both by default",
    )
    p.add_argument("--forward", nargs="+", choices=("eager", "graph"), default=["eager", "graph"])
    p.add_argument("--steps", type=int, default=None, help="decode steps per round")
    p.add_argument("--rounds", type=int, default=None, help="timed rounds")
    p.add_argument("--finish-every", type=int, default=4, help="steps between finishes")
    p.add_argument(
        "--evict-every",
        type=int,
        default=None,
        help="steps between SWA window-free passes (SGLANG_SWA_EVICTION_INTERVAL's role; "
        "default 16, 8 with --quick; SGLang's own default is 128)",
    )
    p.add_argument(
        "--count-steps",
        type=int,
        default=None,
        help="steps under the profiler (default: a whole period of the finish and "
        "window-free cadences)",
    )
    p.add_argument("--max-seconds", type=float, default=None, help="start no row after this")
    p.add_argument("--out", type=Path, default=None, help="markdown file (and .json beside it)")
    a = p.parse_args(argv)
    a.argv = sys.argv[1:] if argv is None else argv
    if a.batch is None:
        a.batch = [4, 8] if a.quick else [64, 256]
    if a.steps is None:
        a.steps = 8 if a.quick else 64
    if a.rounds is None:
        a.rounds = 1 if a.quick else 5
    if a.evict_every is None:
        a.evict_every = 8 if a.quick else 16
    if a.count_steps is None:
        a.count_steps = math.lcm(a.finish_every, a.evict_every)
    return a


def _prepare(args: argparse.Namespace) -> None:
    """Make SGLang importable (before torch/Triton are imported on CPU)."""
    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    os.environ["UKV_SGLANG_PATH"] = args.sglang_path
    sys.path[:0] = [str(ROOT / "tests"), str(HERE)]
    import sglang_stubs

    if not sglang_stubs.sglang_paths():
        sys.exit("SGLang not found: pass --sglang-path or set UKV_SGLANG_PATH (docs/SGLANG.md)")
    sys.path[:0] = sglang_stubs.sglang_paths()
    if args.device == "cuda":
        import peer_sglang

        peer_sglang.install_standin()
    sglang_stubs.pytest_configure(None)


def _geometry(args: argparse.Namespace, trace: Any) -> Any:
    forwards = len(args.forward)
    steps = (1 + args.rounds) * forwards * args.steps + forwards * args.count_steps
    if args.quick:
        return trace.Geometry(
            heads=2,
            head_dim=16,
            layers=3,
            window=32,
            prompt=(16, 64),
            finish_every=args.finish_every,
            evict_every=args.evict_every,
            steps_per_side=steps,
            conv=(16, 3),
            temporal=(2, 4, 4),
        )
    return trace.Geometry(
        heads=8,
        head_dim=128,
        layers=3,
        window=256,
        prompt=(128, 512),
        finish_every=args.finish_every,
        evict_every=args.evict_every,
        steps_per_side=steps,
        conv=(2048, 3),
        temporal=(8, 64, 64),
    )


class Sides:
    """SGLang's module and the drop-in's, served under the same name."""

    def __init__(self, trace: Any) -> None:
        import ukv.integrations.sglang as dropin

        # SGLang's own modules first (the drop-in then replaces them in sys.modules; they
        # come back under their names while SGLang's factories run).
        served = trace.served()
        self.theirs = importlib.import_module(served[0])
        for name in served[1:]:
            importlib.import_module(name)
        self.own = {name: sys.modules[name] for name in served}
        dropin.install(replace_loaded=True, propagate=False)
        self.ours = importlib.import_module(served[0])
        assert getattr(self.ours, "__ukv_dropin__", False) and self.ours is not self.theirs


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def run_shape(args: argparse.Namespace, trace: Any, lc: Any, sides: Sides, shape: Any, geo: Any):
    """One configuration: both sides built, warmed up, timed in interleaved rounds,
    counted under the profiler, drained and checked. Returns one result per forward."""
    import torch

    cuda = args.device == "cuda"
    counter = lc.LaunchCounter(cuda)
    t: dict[str, Any] = {}
    try:
        t["sglang"] = trace.StepTrace(
            trace.build(sides.theirs, shape, geo, args.device, sides.own),
            shape,
            geo,
            args.device,
            counter,
        )
        t["dropin"] = trace.StepTrace(
            trace.build(sides.ours, shape, geo, args.device), shape, geo, args.device, counter
        )
        rounds, counts = _measure(args, t, counter)
    finally:  # both stacks go before the next row's (a failed row's too)
        t.clear()
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
    out = []
    for f in args.forward:
        res: dict[str, Any] = {
            "hybrid": shape.hybrid,
            "batch": shape.batch,
            "page_size": shape.page_size,
            "compaction": "lazy" if shape.lazy else "eager",
            "forward": f,
        }
        for side in SIDES:
            rs = rounds[(f, side)]
            totals = [sum(r.values()) for r in rs]
            c = counts[(f, side)]
            pool = {k: v for k, v in c.items() if k not in (lc.OUTSIDE, lc.UNATTRIBUTED)}
            res[side] = {
                "us_per_step": _spread(totals),
                "rounds_us": totals,
                "phases_us": {p: statistics.median(r[p] for r in rs) for p in trace.PHASES},
                "per_step": {
                    k: sum(v[k] for v in pool.values())
                    for k in (
                        "kernels",
                        "triton",
                        "memcpys",
                        "memsets",
                        "syncs",
                        "launch_calls",
                        "aten_ops",
                    )
                },
                "phases_per_step": pool,
                # The bench's own work launches kernels every step: none at all means
                # the profiler recorded no device activity (CUPTI), not a pool without any.
                "device_activity_seen": any(v["kernels"] or v["memcpys"] for v in c.values()),
                "outside_per_step": c.get(lc.OUTSIDE),
                "unattributed_per_step": c.get(lc.UNATTRIBUTED),
            }
        s, d = (res[k]["us_per_step"]["median"] for k in SIDES)
        res["ratio"] = s / d if d > 0 else None
        res["goal_met"] = None if not cuda or res["ratio"] is None else res["ratio"] >= GOAL
        out.append(res)
    return out


def _measure(args: argparse.Namespace, t: dict[str, Any], counter: Any) -> tuple[Any, Any]:
    """Warm-up, interleaved timed rounds, the profiled steps, then drain and check both
    sides: (host µs per phase of each round, counts per step) by (forward, side)."""
    for side in SIDES:
        t[side].populate()
    graph = {f: f == "graph" for f in args.forward}
    for f in args.forward:  # warm-up: compiles every kernel the trace reaches
        for side in SIDES:
            t[side].run(args.steps, graph[f])
    rounds: dict[tuple[str, str], list[dict[str, float]]] = {
        (f, s): [] for f in args.forward for s in SIDES
    }
    for _ in range(args.rounds):
        for f in args.forward:
            for side in SIDES:
                gc.collect()
                gc.disable()
                try:
                    rounds[(f, side)].append(t[side].run(args.steps, graph[f]))
                finally:
                    gc.enable()
    counts: dict[tuple[str, str], dict[str, Any]] = {}
    for f in args.forward:
        for side in SIDES:
            with counter.recording():
                t[side].run(args.count_steps, graph[f])
            counts[(f, side)] = {k: v.per(args.count_steps) for k, v in counter.counts().items()}
    left = {side: t[side].drain() for side in SIDES}
    bad = {side: n for side, n in left.items() if n}
    assert not bad, f"tokens still allocated after the trace: {bad}"
    return rounds, counts


# ----- output --------------------------------------------------------------------------------


def _us(x: dict[str, float]) -> str:
    from harness import fmt_us

    return f"{fmt_us(x['median'])} [{fmt_us(x['min'])}–{fmt_us(x['max'])}]"


def _n(x: float | None) -> str:
    return "—" if x is None else f"{x:.1f}" if x < 100 else f"{x:.0f}"


def markdown(meta: dict[str, Any], rows: list[dict[str, Any]], trace: Any) -> str:
    cuda = meta["device"] == "cuda"
    kern = "kernels" if cuda else "aten_ops"
    kname = "kernels" if cuda else "aten ops"
    sync = "syncs / memcpys" if cuda else "syncs / memcpys (none on CPU)"
    partial = "" if meta["complete"] else " (PARTIAL: the run had not finished)"
    geo = meta["geometry"]
    lines = [
        f"# Host time per scheduler step under SGLang {meta['sglang']}: its own pool vs the ukv "
        f"drop-in, {meta['device'].upper()}{partial}",
        "",
    ]
    if not cuda:
        lines += [
            "**A CPU smoke run, not a comparison**: SGLang's paged allocation runs in "
            "Triton's interpreter and nothing is launched; it shows that the script works. "
            "The count columns are aten ops (CPU), not kernel launches.",
            "",
        ]
    lines += [
        f"- command: `{meta['command']}`",
        f"- machine: {meta['machine']}",
        f"- versions: {meta['versions']}",
        f"- date: {meta['date']} (run took {meta['wall_s']:.0f} s); ukv commit {meta['commit']}",
        f"- model: {geo['layers']} full-attention layers and as many SWA (or Mamba) layers, "
        f"{geo['heads']} K/V heads x {geo['head_dim']} bf16; Mamba state per layer conv "
        f"{tuple(geo['conv'])} bf16 + SSM {tuple(geo['temporal'])} fp32; SWA window "
        f"{geo['window']} tokens",
        f"- trace (`benches/sglang_step_trace.py`): a decode batch that stays full; prompts "
        f"uniform in [{geo['prompt'][0]}, {geo['prompt'][1]}) tokens; every "
        f"{geo['finish_every']} steps the oldest request finishes and a new one is "
        f"prefilled; an SWA window-free pass every {geo['evict_every']} steps (SGLang's "
        "`SGLANG_SWA_EVICTION_INTERVAL`, 128 by default: the `window free` phase weighs "
        "more here than at SGLang's default); per step the decode allocation (page size 1: "
        "`alloc(batch)`, paged: `alloc_decode`), the forward's translations, its report "
        "(`set_latest_forward_done_event`, `set_inflight_forward`), one device sync, "
        "`flush_opportunistic`",
        f"- method: host µs per step = host time of the pool's calls only (each timed with "
        f"`perf_counter`), per round of {meta['steps']} steps; median [min–max] over "
        f"{meta['rounds']} rounds after a warm-up round, rounds interleaved (SGLang, "
        f"drop-in, per forward kind), GC off in a round. {kname} per step: "
        f"{meta['count_steps']} more steps under `torch.profiler`, every pool call in a "
        "`record_function` scope; a device kernel counts when the API call that launched it "
        "started inside a pool call (CUPTI correlation; a Triton launch is also marked by an "
        "op-kind range its kernel links to; `benches/launch_count.py`); syncs are "
        "`cu*Synchronize` calls inside pool calls",
        "- decode forward: `eager` = the Triton backend's `init_forward_metadata`; `graph` "
        "= CUDA-graph replay: the same translations into the graph's static buffers "
        "(`translate_kv_loc(ids, out=...)`, `translate_loc_from_full_to_swa(ids, out=...)`; "
        "no graph is captured: it would hold no pool call)",
        "- SGLang's Mamba stack needs two repairs to run (nothing else of SGLang is "
        "changed): its `init_unified_mamba_pools` raises `TypeError` "
        "(`UnifiedHybridReqToTokenPool._init_mamba_pool` lacks the "
        "`enable_gdn_replayssm_spec` keyword its base passes): while the factory runs, that "
        "class is a subclass that takes the keyword (False) and calls SGLang's without it; "
        "its `UnifiedMambaPool` lacks `replayssm_cache_base` / `replayssm_is_flush`, which "
        "its request table's `alloc` reads: both set to None on the built pool",
        "- as many SWA as full layers: with more, SGLang's own SWA-side table indexes out of "
        "bounds (its defect 1)",
        f"- goal (issue 29): drop-in host time per step <= 1/{GOAL:.0f} of SGLang's "
        "(SGLang ÷ drop-in >= 5, medians)",
        "",
        f"| hybrid | batch | page | compaction | decode forward | SGLang µs/step | drop-in "
        f"µs/step | SGLang ÷ drop-in | {kname} per step SGLang (Triton) | drop-in (Triton) | "
        f"SGLang ÷ drop-in | {sync} per step SGLang, drop-in | goal |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        head = f"| {r['hybrid']} | {r['batch']} | {r['page_size']} | {r['compaction']} | "
        if "error" in r or "skipped" in r:
            what = (r.get("error") or r["skipped"]).replace("|", "\\|").replace("\n", " ")[:300]
            cells = " | ".join([what] + ["—"] * 7)
            lines.append(head + f"{r.get('forward', '—')} | {cells} |")
            continue
        s, d = r["sglang"], r["dropin"]
        ks, kd = s["per_step"][kern], d["per_step"][kern]
        kratio = f"{ks / kd:.1f}x" if kd else "—"
        ps, pd = s["per_step"], d["per_step"]
        counted = (
            f"{_n(ks)} ({_n(ps['triton'])}) | {_n(kd)} ({_n(pd['triton'])}) | {kratio} | "
            f"{_n(ps['syncs'])} / {_n(ps['memcpys'])}, {_n(pd['syncs'])} / {_n(pd['memcpys'])}"
        )
        if cuda and not (s["device_activity_seen"] and d["device_activity_seen"]):
            counted = " | ".join(["— (the profiler recorded no device activity)"] + ["—"] * 3)
        ratio = f"{r['ratio']:.2f}x" if r["ratio"] else "—"
        goal = {True: "met", False: "**not met**", None: "— (CPU smoke)"}[r["goal_met"]]
        lines.append(
            head + f"{r['forward']} | {_us(s['us_per_step'])} | {_us(d['us_per_step'])} | "
            f"{ratio} | {counted} | {goal} |"
        )
    lines += [
        "",
        f"## Where the host time goes: µs per step (median) and {kname} per step, by phase",
        "",
        "| row | side | " + " | ".join(trace.PHASES) + " |",
        "|---|---|" + "---|" * len(trace.PHASES),
    ]
    for r in rows:
        if "sglang" not in r:
            continue
        label = f"{r['hybrid']} {r['batch']} ps{r['page_size']} {r['compaction']} {r['forward']}"
        for side in SIDES:
            x = r[side]
            cells = []
            for p in trace.PHASES:
                k = x["phases_per_step"].get(p, {}).get(kern, 0.0)
                cells.append(f"{_n(x['phases_us'][p])} ({_n(k)})")
            lines.append(f"| {label} | {SIDE_NAMES[side]} | " + " | ".join(cells) + " |")
    notes = meta["notes"]
    if notes:
        lines += ["", "Notes:", ""] + [f"- {n}" for n in notes]
    lines.append("")
    return "\n".join(lines)


def _notes(rows: list[dict[str, Any]], cuda: bool) -> list[str]:
    notes = []
    for r in rows:
        for side in SIDES:
            x = r.get(side)
            if not x:
                continue
            un = x.get("unattributed_per_step") or {}
            if un.get("kernels") or un.get("memcpys"):
                notes.append(
                    f"{r['hybrid']} {r['batch']} ps{r['page_size']} {r['compaction']} "
                    f"{r['forward']}, {SIDE_NAMES[side]}: {un['kernels']:.1f} kernels and "
                    f"{un['memcpys']:.1f} memcpys per step could not be attributed"
                )
            if cuda and not x["device_activity_seen"]:
                notes.append(
                    f"{r['hybrid']} {r['batch']} ps{r['page_size']} {r['compaction']} "
                    f"{r['forward']}, {SIDE_NAMES[side]}: the profiler recorded no device "
                    "activity at all (CUPTI unavailable?): no launch counts"
                )
            elif cuda and x["per_step"]["launch_calls"] != x["per_step"]["kernels"]:
                notes.append(
                    f"{r['hybrid']} {r['batch']} ps{r['page_size']} {r['compaction']} "
                    f"{r['forward']}, {SIDE_NAMES[side]}: {x['per_step']['launch_calls']:.1f} "
                    f"launch API calls but {x['per_step']['kernels']:.1f} kernels per step"
                )
    return notes


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    _prepare(args)
    import torch

    torch.set_num_threads(1)
    import harness
    import launch_count as lc
    import sglang_step_trace as trace

    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        print("no CUDA device here: run with --device cpu for a smoke run")
        return 2
    sides = Sides(trace)
    release = trace._release().version
    SIDE_NAMES["sglang"] = f"SGLang {release}"
    harness.freeze_gc()
    geo = _geometry(args, trace)
    lazies = [False, True] if args.lazy is None else [args.lazy]
    # Hybrids alternate, so a run cut short (--max-seconds) still covers both; the
    # tables sort the rows.
    shapes = [
        trace.Shape(h, b, ps, lazy)
        for b in args.batch
        for ps in args.page_size
        for lazy in lazies
        for h in args.hybrid
    ]
    meta: dict[str, Any] = {
        "command": harness.command("bench_sglang_dropin.py", args.argv),
        "device": args.device,
        "sglang": release,
        "machine": harness.machine(cuda),
        "versions": harness.versions(),
        "date": harness.utc_now(),
        "commit": harness.ukv_commit(),
        "geometry": dataclasses.asdict(geo),
        "steps": args.steps,
        "rounds": args.rounds,
        "count_steps": args.count_steps,
        "goal": f"SGLang ÷ drop-in >= {GOAL}",
    }
    rows: list[dict[str, Any]] = []

    def write(done: bool) -> str:
        m = {
            **meta,
            "complete": done,
            "wall_s": time.perf_counter() - T0,
            "notes": _notes(rows, cuda),
        }
        order = {"swa": 0, "mamba": 1, "eager": 0, "lazy": 1, "graph": 1}
        table = sorted(
            rows,
            key=lambda r: (
                order[r["hybrid"]],
                r["batch"],
                r["page_size"],
                order[r["compaction"]],
                order.get(r.get("forward", "eager"), 0),
            ),
        )
        text = markdown(m, table, trace)
        if args.out is not None:
            harness.write_results(args.out, text, {**m, "rows": table})
        return text

    for shape in shapes:
        base = {
            "hybrid": shape.hybrid,
            "batch": shape.batch,
            "page_size": shape.page_size,
            "compaction": "lazy" if shape.lazy else "eager",
        }
        elapsed = time.perf_counter() - T0
        if args.max_seconds is not None and elapsed > args.max_seconds:
            rows.append({**base, "skipped": f"not run (--max-seconds {args.max_seconds:g})"})
            continue
        t_row = time.perf_counter()
        try:
            got = run_shape(args, trace, lc, sides, shape, geo)
        except Exception as exc:  # noqa: BLE001 - recorded in the row, the run goes on
            tb = harness.relative_paths(traceback.format_exc())
            print(tb, file=sys.stderr)
            rows.append({**base, "error": f"error: {type(exc).__name__}: {exc}", "trace": tb})
            write(False)
            continue
        rows.extend(got)
        for r in got:
            ratio = f"{r['ratio']:.2f}x" if r["ratio"] else "—"
            print(
                f"{shape.label()} {r['forward']}: SGLang "
                f"{r['sglang']['us_per_step']['median']:.1f} µs/step, drop-in "
                f"{r['dropin']['us_per_step']['median']:.1f} µs/step, ratio {ratio} "
                f"(row {time.perf_counter() - t_row:.1f} s, run {time.perf_counter() - T0:.0f} s)",
                flush=True,
            )
        write(False)
    text = write(True)
    print()
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
