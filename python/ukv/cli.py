"""Capacity planning from the command line: ``ukv plan`` and ``ukv simulate``.

``ukv plan --model <preset|config.json> --memory 40GiB [--tp 4] [--page-size 16]``
    What one rank's pool holds: tokens, states, worst-case requests, and how many requests
    of typical lengths fit in the unified pool, SGLang's default static split and vLLM's
    padded single-page pool.

``ukv simulate --model ... --memory ... --trace chat|long|phase|file.jsonl [--plot out.png]``
    Serve a trace on the unified pool and the baselines (same bytes), print the table,
    optionally write the PNG (``--plot``) and the JSON summary (``--json``).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from typing import Any

import numpy as np

from ukv.errors import ArgumentError, UkvError

UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "kib": 1 << 10, "m": 10**6, "mb": 10**6,
         "mib": 1 << 20, "g": 10**9, "gb": 10**9, "gib": 1 << 30, "t": 10**12, "tb": 10**12,
         "tib": 1 << 40}  # fmt: skip
PLAN_LENGTHS = (1024, 8192, 32768, 131072)
"""Request lengths (tokens) of the plan's concurrency table."""
DEFAULT_CONTEXT = 131072
DEFAULT_REQUESTS = 2000


def parse_bytes(text: str) -> int:
    """``"40GiB"``, ``"512MiB"``, ``"40G"`` (decimal), ``"1e9"`` or plain bytes → bytes.

    Raises:
        ArgumentError: not a positive size with a known unit.
    """
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
    unit = m.group(2).lower() if m else None
    if m is None or unit not in UNITS or float(m.group(1)) * UNITS[unit] < 1:
        raise ArgumentError(
            f"bad memory size {text!r}: expected a positive number with an optional unit "
            "(B, KiB, MiB, GiB, TiB, or KB/MB/GB/TB)"
        )
    return int(float(m.group(1)) * UNITS[unit])


def add_subcommands(sub: Any) -> None:
    """Register ``plan`` and ``simulate`` on an ``argparse`` subparsers object."""
    plan = sub.add_parser("plan", help="what a pool of this size holds, unified vs static splits")
    _common(plan)
    plan.add_argument("--max-context", type=int, default=DEFAULT_CONTEXT,
                      help="worst-case request length in tokens (default %(default)s)")  # fmt: skip
    plan.set_defaults(func=cmd_plan)
    sim = sub.add_parser("simulate", help="serve a trace on the unified pool and the baselines")
    _common(sim)
    sim.add_argument("--trace", required=True, help="chat, long, phase, or a .jsonl file")
    sim.add_argument("--requests", type=int, default=DEFAULT_REQUESTS,
                     help="requests of a generated trace (default %(default)s)")  # fmt: skip
    sim.add_argument("--seed", type=int, default=0, help="trace seed (default 0)")
    sim.add_argument("--plot", help="write the PNG here")
    sim.add_argument("--json", help="write the JSON summary here")
    sim.add_argument("--no-progress", action="store_true", help="no progress bars")
    sim.set_defaults(func=cmd_simulate)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="a preset name or a config.json path")
    p.add_argument("--memory", required=True, help="KV-cache bytes per GPU, e.g. 40GiB")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel size (default 1)")
    p.add_argument("--page-size", type=int, default=16, help="tokens per page (default 16)")


def main(argv: list[str] | None = None, prog: str = "ukv") -> int:
    """Entry point of the ``ukv`` console script and of ``python -m ukv``: ``demo``,
    ``plan`` and ``simulate``."""
    from ukv.demo import cli as demo_cli

    parser = argparse.ArgumentParser(
        prog=prog, description="ukv: the hybrid KV-cache pool's demo and capacity planning"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser(
        "demo", help="serve a small hybrid model through ukv and check it against a reference"
    )
    demo_cli.add_arguments(demo)
    demo.set_defaults(func=demo_cli.run)
    add_subcommands(sub)
    return run(parser.parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """Run parsed ``plan`` / ``simulate`` arguments (for a parser built with
    :func:`add_subcommands`, e.g. ``python -m ukv``'s); a ukv error prints and returns 2."""
    try:
        return int(args.func(args))
    except UkvError as e:
        print(f"ukv {args.command}: error: {e}", file=sys.stderr)
        return 2


# ----- plan ---------------------------------------------------------------------------------


def _shape(args: argparse.Namespace) -> Any:
    from ukv import models

    shape = models.load(args.model)
    return shape.sharded(args.tp) if args.tp != 1 else shape


def cmd_plan(args: argparse.Namespace) -> int:
    """Print what the pool holds (see the module docstring)."""
    from ukv.sim.backends import PaddedBackend, SplitBackend, UnifiedBackend, sglang_default_share

    shape, total = _shape(args), parse_bytes(args.memory)
    uni = UnifiedBackend(shape, total, args.page_size, args.max_context)
    default = SplitBackend(shape, total, sglang_default_share(shape), args.page_size, "sglang")
    padded = PaddedBackend(shape, total)
    _plan_header(shape, total, args, uni, padded)
    print()
    print(
        f"{'request length':>15} | {'unified':>8} | {'sglang-default':>14} | {'padded':>7} | state share"
    )
    for n in sorted({*PLAN_LENGTHS, args.max_context}):
        counts = [_fill(b, n) for b in (uni, default, padded)]
        share = _state_share(shape, n)
        print(f"{n:>15,} | {counts[0]:>8,} | {counts[1]:>14,} | {counts[2]:>7,} | {share:6.1%}")
    print("\nrequests of that length held at once (unified: counted by the real pool on meta)")
    return 0


def _plan_header(shape: Any, total: int, args: argparse.Namespace, uni: Any, padded: Any) -> None:
    print(f"model {shape.name} ({shape.kind}), tp={args.tp}, page_size={args.page_size}, "
          f"memory {total:,} B = {total / (1 << 30):.2f} GiB per rank")  # fmt: skip
    print(f"full attention: {shape.kv_bytes_per_token():,} B/token")
    if shape.kind == "mamba":
        print(f"state: {shape.state_bytes_per_request():,} B/request")
    else:
        print(
            f"sliding window: {shape.swa_bytes_per_token():,} B/token, window {shape._swa().window}"
        )
    tokens = uni.full.available_size()
    states = uni.other.available_size()
    print(f"unified pool: up to {tokens:,} full-attention tokens (no states), up to {states:,} "
          f"{'states' if shape.kind == 'mamba' else 'SWA tokens'} (no tokens), reserved floor "
          f"{uni._floor:,} B")  # fmt: skip
    print(f"worst case: {_fill(uni, args.max_context):,} requests of {args.max_context:,} "
          "tokens at once")  # fmt: skip
    print(f"padded single page (vLLM): block {padded.B} tokens = {padded.block:,} B, "
          f"{padded.cap:,} blocks")  # fmt: skip


def _state_share(shape: Any, n: int) -> float:
    other = (
        shape.state_bytes_per_request() if shape.kind == "mamba" else shape.swa_bytes_per_request(n)
    )
    return other / (other + n * shape.kv_bytes_per_token())


def _fill(backend: Any, n: int) -> int:
    """How many requests of ``n`` tokens fit at once, filling ``backend`` until it refuses."""
    count = 0
    one, zero = np.array([n], dtype=np.int64), np.zeros(1, dtype=np.int64)
    while backend.admit(count):
        if not backend.grow(np.array([count]), zero, one):
            backend.release(np.array([count]), zero)
            break
        count += 1
    backend.release(np.arange(count), np.full(count, n, dtype=np.int64))
    return count


# ----- simulate -----------------------------------------------------------------------------


def cmd_simulate(args: argparse.Namespace) -> int:
    """Run the comparison, print the table, write the plot and JSON when asked."""
    from ukv.sim import baselines, traces

    shape, total = _shape(args), parse_bytes(args.memory)
    trace = traces.make(args.trace, args.requests, args.seed)
    t0 = time.perf_counter()
    cmp = baselines.compare(shape, total, trace, page_size=args.page_size,
                            progress=not args.no_progress and sys.stderr.isatty())  # fmt: skip
    wall = time.perf_counter() - t0
    summary = summary_json(shape, total, args, trace, cmp)
    print_table(summary)
    print(f"({len(trace)} requests, {wall:.1f} s wall)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
    if args.plot:
        from ukv.sim import plot

        plot.save(cmp, args.plot, f"{shape.name} tp={args.tp}, {args.memory}, trace {trace.name}")
    return 0


def summary_json(shape: Any, total: int, args: Any, trace: Any, cmp: Any) -> dict:
    """The JSON summary of one ``simulate`` run (deterministic for a given trace)."""
    return {
        "model": shape.name,
        "kind": shape.kind,
        "tp": args.tp,
        "memory_bytes": total,
        "page_size": args.page_size,
        "trace": trace.name,
        "requests": len(trace),
        "seed": getattr(args, "seed", None),
        "layouts": cmp.summaries,
        "ratios": {k: round(cmp.ratio(k), 4) for k in cmp.summaries if k != "unified"},
        "oracle_sweep": [[s, round(v, 4)] for s, v in cmp.sweep],
    }


def print_table(summary: dict) -> None:
    """The comparison table of one summary."""
    print(f"{summary['model']} ({summary['kind']}), tp={summary['tp']}, "
          f"{summary['memory_bytes'] / (1 << 30):.1f} GiB, trace {summary['trace']}")  # fmt: skip
    head = (f"{'layout':<15} {'share':>6} {'tok/s':>9} {'unified x':>9} {'req/s':>7} {'peak':>5} "
            f"{'mean':>7} {'q p50 s':>8} {'q p99 s':>8} {'retract':>7} {'reject':>6} {'moved/freed':>11}")  # fmt: skip
    print(head)
    for label, s in summary["layouts"].items():
        share = s.get("share")
        ratio = summary["ratios"].get(label)
        q = s["queue_delay_s"]
        print(f"{label:<15} {'' if share is None else f'{share:.3f}':>6} {s['served_tok_s']:>9,.0f} "
              f"{'' if ratio is None else f'{ratio:.2f}':>9} {s['completed_req_s']:>7.2f} "
              f"{s['peak_running']:>5} {s['mean_running']:>7.1f} {_f(q['p50']):>8} {_f(q['p99']):>8} "
              f"{s['retractions']:>7} {s['rejected']:>6} {s['moved_per_freed']:>11.3f}")  # fmt: skip


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


if __name__ == "__main__":
    sys.exit(main())
