"""Capacity planning from the command line: ``ukv plan`` and ``ukv simulate``.

``ukv plan --model <preset|config.json|ORG/NAME> --memory 40GiB [--tp 4] [--page-size 16]``
    What one rank's pool holds: tokens, states, worst-case requests, and how many requests
    of typical lengths fit in the unified pool, SGLang's default static split and vLLM's
    padded single-page pool. Requests are prefilled in chunks of ``--chunk`` tokens (8192,
    as ``simulate`` does), and no request is longer than the model's
    ``max_position_embeddings``. ``--plot out.png`` draws requests held vs request length.

``ukv simulate --model ... --memory ... --trace chat|long|phase|FILE [--plot out.png]``
    Serve a trace on the unified pool and the baselines (same bytes), print the table,
    optionally write the PNG (``--plot``). ``FILE`` is a ukv or Mooncake ``.jsonl`` or an
    Azure 2023 ``.csv`` (:mod:`ukv.sim.traces`), replayed at its timestamps, faster with
    ``--rate-scale K`` or at a mean ``--rate R`` requests/s; ``--requests N`` keeps its
    first N requests. ``--clock measured`` (the default) times each step from the
    constants measured on the GPU (``--clock-json``, default the committed
    ``benches/results/step-clock-<card>.json``, h200 before h100; refused when
    missing), ``--clock fixed``
    charges 25 ms a step; ``--no-prefix-cache`` turns every layout's prefix cache off;
    ``--layouts`` picks columns; ``--grid coarse`` makes the oracle's search shorter.

Both take ``--engine sglang|vllm`` (whose cache-dtype convention to follow, see
:mod:`ukv.models.dtypes`), ``--kv-dtype`` / ``--state-dtype`` (explicit dtypes), and
``--dtype`` (the serving dtype; an fp32 checkpoint is served in bf16 unless told) and
``--json [PATH]`` (the result as JSON, on stdout without a path). Every output names the
dtypes it used. Bad input is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
import time
from typing import Any

import numpy as np

from ukv.errors import ArgumentError, PoolConfigError, UkvError

UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "ki": 1 << 10, "kib": 1 << 10,
         "m": 10**6, "mb": 10**6, "mi": 1 << 20, "mib": 1 << 20,
         "g": 10**9, "gb": 10**9, "gi": 1 << 30, "gib": 1 << 30,
         "t": 10**12, "tb": 10**12, "ti": 1 << 40, "tib": 1 << 40}  # fmt: skip
PLAN_LENGTHS = (1024, 8192, 32768, 131072)
"""Request lengths (tokens) of the plan's concurrency table."""
PLOT_LENGTHS = (256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144)
"""Request lengths the plan's plot adds (those up to the longest request)."""
DEFAULT_CONTEXT = 131072
"""Longest request when the model names no ``max_position_embeddings``."""
DEFAULT_REQUESTS = 2000


def parse_bytes(text: str) -> int:
    """``"40GiB"``, ``"40Gi"``, ``"512MiB"``, ``"40GB"`` / ``"40G"`` (decimal), ``"4e10"``
    or plain bytes → bytes.

    Raises:
        ArgumentError: not a positive size with a known unit.
    """
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+]?[0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
    unit = m.group(2).lower() if m else None
    if m is None or unit not in UNITS or float(m.group(1)) * UNITS[unit] < 1:
        raise ArgumentError(
            f"bad memory size {text!r}: expected a positive number with an optional unit "
            "(B, KiB/Ki, MiB/Mi, GiB/Gi, TiB/Ti, or KB/MB/GB/TB and K/M/G/T; e.g. 40GiB, 4e10)"
        )
    return int(float(m.group(1)) * UNITS[unit])


def add_subcommands(sub: Any) -> None:
    """Register ``plan`` and ``simulate`` on an ``argparse`` subparsers object."""
    plan = sub.add_parser("plan", help="what a pool of this size holds, unified vs static splits")
    _common(plan)
    plan.add_argument("--max-context", help="longest request in tokens (default: the model's "
                      f"max_position_embeddings, else {DEFAULT_CONTEXT})")  # fmt: skip
    plan.add_argument("--chunk", default="8192",
                      help="prefill chunk in tokens, as simulate (default %(default)s)")  # fmt: skip
    plan.add_argument("--plot", help="write a PNG: requests held vs request length per layout")
    plan.set_defaults(func=cmd_plan)
    sim = sub.add_parser("simulate", help="serve a trace on the unified pool and the baselines")
    _common(sim)
    sim.add_argument("--trace", required=True,
                     help="chat, long, phase, or a trace file: ukv or Mooncake .jsonl, Azure "
                     "2023 .csv (replayed at its timestamps)")  # fmt: skip
    sim.add_argument("--requests",
                     help=f"requests of a generated trace (default {DEFAULT_REQUESTS}); of a "
                     "file, its first N by arrival (default all)")  # fmt: skip
    rate = sim.add_mutually_exclusive_group()
    rate.add_argument("--rate-scale", help="replay arrivals this many times faster (2: twice "
                      "the recorded request rate)")  # fmt: skip
    rate.add_argument("--rate", help="replay arrivals scaled to this mean rate, requests/s")
    sim.add_argument("--seed", type=int, default=0, help="trace seed (default 0)")
    sim.add_argument("--clock", choices=("measured", "fixed"), default="measured",
                     help="step time: measured on the GPU (the default; needs the "
                     "constants file) or a fixed 25 ms")  # fmt: skip
    sim.add_argument("--clock-json", help="the measured clock's constants (default the "
                     "committed benches/results/step-clock-<card>.json, h200 before h100)")  # fmt: skip
    sim.add_argument("--no-prefix-cache", action="store_true",
                     help="no layout caches prefixes (default: each as its engine does)")  # fmt: skip
    sim.add_argument("--layouts", help="comma-separated columns (default: all that apply)")
    sim.add_argument("--tuned-share", help="the share of sglang-tuned (a split tuned on "
                     "another workload; default: no such column)")  # fmt: skip
    sim.add_argument("--grid", choices=("fine", "coarse"), default="fine",
                     help="the oracle's search (default fine)")  # fmt: skip
    sim.add_argument("--plot", help="write the PNG here")
    sim.add_argument("--no-progress", action="store_true", help="no progress bars")
    sim.set_defaults(func=cmd_simulate)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True,
                   help="a preset name, a config.json path, or a model id in the HF cache")  # fmt: skip
    p.add_argument("--memory", required=True, help="KV-cache bytes per GPU, e.g. 40GiB, 4e10")
    p.add_argument("--tp", default="1", help="tensor-parallel size (default 1)")
    p.add_argument("--page-size", default="16", help="tokens per page (default 16)")
    p.add_argument("--engine", default="sglang",
                   help="whose cache dtypes: sglang (fp32 SSM state) or vllm (default sglang)")  # fmt: skip
    p.add_argument("--dtype", help="serving dtype (bf16, fp16, fp32); default the config's, "
                   "an fp32 checkpoint served in bf16")  # fmt: skip
    p.add_argument("--kv-dtype", help="KV cache dtype (bf16, fp16, fp32, fp8); default serving")
    p.add_argument("--state-dtype", help="recurrent-state dtype; default the engine's convention")
    p.add_argument("--json", nargs="?", const="-", metavar="PATH",
                   help="write the result as JSON to PATH (stdout, without the table, if no PATH)")  # fmt: skip


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line on stderr (exit status 2), like
    every other ukv error, instead of the usage block and the message."""

    def error(self, message: str) -> Any:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def main(argv: list[str] | None = None, prog: str = "ukv") -> int:
    """Entry point of the ``ukv`` console script and of ``python -m ukv``: ``demo``,
    ``plan`` and ``simulate``."""
    from ukv.demo import cli as demo_cli

    parser = OneLineParser(
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
    :func:`add_subcommands`, e.g. ``python -m ukv``'s). A ukv error, or a reader that closed
    the output early (``ukv plan ... | head``), prints one line on stderr and returns 2."""
    try:
        code = int(args.func(args))
        sys.stdout.flush()
        return code
    except UkvError as e:
        print(f"ukv {args.command}: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader is gone: point stdout at /dev/null so the interpreter's final flush
        # cannot raise again, and say so once.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        print(f"ukv {args.command}: error: output closed early (broken pipe)", file=sys.stderr)
        return 2


# ----- shared setup -------------------------------------------------------------------------


def _int_arg(value: object, flag: str, minimum: int = 1) -> int:
    """A command-line integer ``>= minimum``, or an ArgumentError naming the flag."""
    try:
        number = int(str(value).strip())
    except ValueError:
        number = None
    if number is None or number < minimum:
        raise ArgumentError(f"bad {flag} {value!r}: expected an integer >= {minimum}")
    return number


def _float_arg(value: object, flag: str) -> float | None:
    """A command-line positive number (None stays None), or an ArgumentError naming the flag."""
    if value is None:
        return None
    try:
        number = float(str(value).strip())
    except ValueError:
        number = float("nan")
    if not (number > 0 and number != float("inf")):
        raise ArgumentError(f"bad {flag} {value!r}: expected a positive number")
    return number


@dataclasses.dataclass
class Setup:
    """What plan and simulate share: the rank's shape (engine dtypes applied, sharded), its
    dtypes, the byte budget and the page size."""

    shape: Any
    dtypes: Any
    total: int
    page_size: int
    tp: int
    engine: str
    state_bytes_by_engine: dict[str, int]


def _setup(args: argparse.Namespace) -> Setup:
    from ukv import models
    from ukv.models.dtypes import ENGINES, apply_engine_dtypes, parse_dtype

    tp = _int_arg(args.tp, "--tp")
    page_size = _int_arg(args.page_size, "--page-size")
    total = parse_bytes(args.memory)
    kv = None if args.kv_dtype is None else parse_dtype(args.kv_dtype, "--kv-dtype")
    state = None if args.state_dtype is None else parse_dtype(args.state_dtype, "--state-dtype")
    shape = models.load(args.model)
    if args.dtype is not None:
        shape = dataclasses.replace(shape, model_dtype=parse_dtype(args.dtype, "--dtype"))
    served, dtypes = apply_engine_dtypes(shape, args.engine, kv=kv, state=state)
    served = served.sharded(tp) if tp != 1 else served
    # What each engine's convention gives this rank (the same unless --*-dtype say otherwise).
    by_engine: dict[str, int] = {}
    if served.state is not None:
        for engine in ENGINES:
            other, _ = apply_engine_dtypes(shape, engine, kv=kv, state=state)
            other = other.sharded(tp) if tp != 1 else other
            by_engine[engine] = other.state_bytes_per_request()
    return Setup(served, dtypes, total, page_size, tp, args.engine, by_engine)


def _header(s: Setup) -> list[str]:
    shape = s.shape
    lines = [
        f"model {shape.name} ({shape.architecture}, {shape.kind}), tp={s.tp}, "
        f"page_size={s.page_size}, memory {s.total:,} B = {s.total / (1 << 30):.2f} GiB per rank",
        f"dtypes: {s.dtypes.describe()}",
    ]
    if shape.full is not None:
        what = "MLA latent" if shape.full.is_mla else "full attention"
        lines.append(f"{what}: {shape.kv_bytes_per_token():,} B/token")
    if shape.state is not None:
        engines = ", ".join(f"{e} {b:,}" for e, b in s.state_bytes_by_engine.items())
        lines.append(
            f"state ({shape.state.mixer.kind}): {shape.state_bytes_per_request():,} B/request "
            f"(by engine convention: {engines})"
        )
    if shape.swa is not None:
        what = "chunked attention" if shape.swa.chunked else "sliding window"
        lines.append(f"{what}: {shape.swa_bytes_per_token():,} B/token, window {shape.swa.window}")
    return lines


def _emit_json(data: dict, target: str) -> None:
    text = json.dumps(data, indent=1)
    if target == "-":
        print(text)
    else:
        with open(target, "w") as f:
            f.write(text + "\n")


# ----- plan ---------------------------------------------------------------------------------


def _max_context(args: argparse.Namespace, shape: Any) -> int:
    limit = shape.max_position_embeddings
    if args.max_context is None:
        return int(limit) if limit is not None else DEFAULT_CONTEXT
    ctx = _int_arg(args.max_context, "--max-context")
    if limit is not None and ctx > limit:
        raise ArgumentError(
            f"bad --max-context {ctx}: the model's max_position_embeddings is {limit} "
            f"(engines refuse a longer max_model_len)"
        )
    return ctx


def plan_data(args: argparse.Namespace) -> dict:
    """The plan as a JSON-ready dict (what ``ukv plan --json`` prints)."""
    from ukv.sim.backends import PaddedBackend, SplitBackend, UnifiedBackend, sglang_default_share
    from ukv.sim.single import SingleKindBackend

    s = _setup(args)
    shape = s.shape
    ctx = _max_context(args, shape)
    chunk = _int_arg(args.chunk, "--chunk")
    hint = "; pass a shorter --max-context (default: the model's max_position_embeddings)"
    if shape.is_hybrid:
        try:
            uni = UnifiedBackend(shape, s.total, s.page_size, ctx, chunk=chunk)
        except PoolConfigError as e:
            raise PoolConfigError(f"{e}{hint}") from e
        layouts: dict[str, Any] = {
            "unified": uni,
            "sglang-default": SplitBackend(
                shape, s.total, sglang_default_share(shape), s.page_size, "sglang"
            ),
            "padded": PaddedBackend(shape, s.total),
        }
    else:
        layouts = {"single-pool": SingleKindBackend(shape, s.total, s.page_size)}
        if not layouts["single-pool"].fits_alone(ctx):
            raise PoolConfigError(
                f"invalid pool size: one request of {ctx} tokens does not fit {s.total} bytes{hint}"
            )
    lengths = {*PLAN_LENGTHS, ctx} | (set(PLOT_LENGTHS) if args.plot else set())
    rows = []
    for n in sorted(x for x in lengths if x <= ctx):
        row: dict[str, Any] = {"length": n}
        row.update({label: _fill(b, n, chunk) for label, b in layouts.items()})
        row["state_share"] = round(_state_share(shape, n), 4)
        rows.append(row)
    data: dict[str, Any] = {
        "model": shape.name,
        "architecture": shape.architecture,
        "kind": shape.kind,
        "tp": s.tp,
        "page_size": s.page_size,
        "memory_bytes": s.total,
        "dtypes": s.dtypes.as_dict(),
        "chunk": chunk,
        "max_context": ctx,
        "max_position_embeddings": shape.max_position_embeddings,
        "kv_bytes_per_token": shape.kv_bytes_per_token(),
        "state_bytes_per_request": shape.state_bytes_per_request() if shape.state else None,
        "state_bytes_by_engine": s.state_bytes_by_engine,
        "swa_bytes_per_token": shape.swa_bytes_per_token() if shape.swa else None,
        "window": shape.swa.window if shape.swa else None,
        "layouts": list(layouts),
        "rows": rows,
    }
    if shape.is_hybrid:
        padded: Any = layouts["padded"]
        data["unified_pool"] = {
            "max_tokens": uni.full.available_size(),
            "max_other": uni.other.available_size(),
            "reserved_floor_bytes": uni._floor,
        }
        data["padded_block"] = {
            "tokens": padded.B,
            "bytes": padded.block,
            "blocks": padded.cap,
            # The padded layout is vLLM's, so it counts in vLLM's dtypes (ukv.sim.backends).
            "state_bytes_per_request": (
                padded.shape.state_bytes_per_request() if shape.state else None
            ),
        }
    return data


def cmd_plan(args: argparse.Namespace) -> int:
    """Print what the pool holds (see the module docstring)."""
    data = plan_data(args)
    if args.plot:
        _plot_plan(data, args.plot)
    if args.json is not None:
        _emit_json(data, args.json)
        if args.json == "-":
            return 0
    s = _setup(args)
    for line in _header(s):
        print(line)
    ctx, labels = data["max_context"], data["layouts"]
    print(f"prefill chunk {data['chunk']:,} tokens; longest request {ctx:,} tokens "
          f"(max_position_embeddings {data['max_position_embeddings']})")  # fmt: skip
    if "unified_pool" in data:
        u, p = data["unified_pool"], data["padded_block"]
        other = "states" if s.shape.kind == "mamba" else "SWA tokens"
        print(f"unified pool: up to {u['max_tokens']:,} full-attention tokens (no {other}), "
              f"up to {u['max_other']:,} {other} (no tokens), reserved floor "
              f"{u['reserved_floor_bytes']:,} B")  # fmt: skip
        vllm_state = p["state_bytes_per_request"]
        if vllm_state is not None and vllm_state != s.shape.state_bytes_per_request():
            print(f"padded counts in vLLM's dtypes: state {vllm_state:,} B/request")
        print(f"padded single page (vLLM): block {p['tokens']} tokens = {p['bytes']:,} B, "
              f"{p['blocks']:,} blocks")  # fmt: skip
    else:
        print(f"one kind of cache ({s.shape.kind}): the unified pool, SGLang's and vLLM's "
              "pools are the same single pool")  # fmt: skip
    worst = data["rows"][-1]
    print(f"worst case: {worst[labels[0]]:,} requests of {ctx:,} tokens at once")
    print()
    print(f"{'request length':>15} | " + " | ".join(f"{x:>14}" for x in labels) + " | state share")
    for row in data["rows"]:
        if row["length"] in PLAN_LENGTHS or row["length"] == ctx:
            cells = " | ".join(f"{row[x]:>14,}" for x in labels)
            print(f"{row['length']:>15,} | {cells} | {row['state_share']:6.1%}")
    counted = "unified: counted by the real pool on meta" if "unified_pool" in data else "counted"
    print(f"\nrequests of that length held at once, prefilled in chunks ({counted})")
    return 0


def _plot_plan(data: dict, path: str) -> None:
    """Requests held vs request length, one line per layout (matplotlib imported here)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=90)
    xs = [r["length"] for r in data["rows"]]
    for label in data["layouts"]:
        ax.plot(xs, [max(r[label], 0.5) for r in data["rows"]], marker="o", lw=1.2, label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("request length (tokens)")
    ax.set_ylabel("requests held at once")
    d = data["dtypes"]
    ax.set_title(f"{data['model']} tp={data['tp']}, {data['memory_bytes'] / (1 << 30):.1f} GiB, "
                 f"{d['engine']} dtypes (kv {d['kv']}, state {d['state']})", fontsize=9)  # fmt: skip
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _state_share(shape: Any, n: int) -> float:
    total = shape.request_bytes(n)
    return (total - n * shape.kv_bytes_per_token()) / total if total else 0.0


def _fill(backend: Any, n: int, chunk: int) -> int:
    """How many requests of ``n`` tokens fit at once: each is admitted and prefilled in
    chunks of ``chunk`` tokens (as the simulator's scheduler does) until one is refused."""
    count = 0
    zero = np.zeros(1, dtype=np.int64)
    while backend.admit(count):
        held, ok = 0, True
        while held < n:
            nxt = min(held + chunk, n)
            if not backend.grow(np.array([count]), np.array([held]), np.array([nxt])):
                ok = False
                break
            held = nxt
        if not ok:
            backend.release(np.array([count]), np.array([held]) if held else zero)
            break
        count += 1
    backend.release(np.arange(count), np.full(count, n, dtype=np.int64))
    return count


# ----- simulate -----------------------------------------------------------------------------


def _within_context(trace: Any, limit: int | None) -> tuple[Any, int]:
    """The trace without requests longer than ``limit`` (engines refuse them at input), and
    how many were dropped."""
    if limit is None:
        return trace, 0
    keep = (trace.prompt_len + trace.output_len) <= limit
    dropped = int((~keep).sum())
    if not dropped:
        return trace, 0
    if not keep.any():
        raise ArgumentError(
            f"every request of trace {trace.name!r} is longer than the model's "
            f"max_position_embeddings {limit}"
        )
    return (
        dataclasses.replace(
            trace,
            arrival=trace.arrival[keep],
            prompt_len=trace.prompt_len[keep],
            output_len=trace.output_len[keep],
        ),
        dropped,
    )


def cmd_simulate(args: argparse.Namespace) -> int:
    """Run the comparison, print the table, write the plot and JSON when asked."""
    from ukv.sim import baselines, clock, traces

    s = _setup(args)
    shape = s.shape
    requests = None if args.requests is None else _int_arg(args.requests, "--requests")
    if args.plot and not shape.is_hybrid:
        raise ArgumentError(
            f"--plot compares layouts, but model {shape.name!r} has one kind of cache "
            f"({shape.kind}): every layout is the same single pool"
        )
    kind = getattr(args, "clock", "measured")
    path = getattr(args, "clock_json", None)
    clock.make_clock(kind, shape, path)  # refuse a missing constants file up front

    def clock_of(sh: Any) -> Any:
        return clock.make_clock(kind, sh, path)

    trace = traces.rescale(
        traces.make(args.trace, requests, args.seed),
        rate_scale=_float_arg(getattr(args, "rate_scale", None), "--rate-scale"),
        rate=_float_arg(getattr(args, "rate", None), "--rate"),
    )
    trace, dropped = _within_context(trace, shape.max_position_embeddings)
    progress = not args.no_progress and sys.stderr.isatty()
    layouts = None
    if getattr(args, "layouts", None):
        layouts = tuple(x.strip() for x in args.layouts.split(",") if x.strip())
        bad = [x for x in layouts if x not in baselines.LAYOUTS]
        if bad:
            raise ArgumentError(
                f"bad --layouts {', '.join(bad)}: expected some of {', '.join(baselines.LAYOUTS)}"
            )
    tuned = _float_arg(getattr(args, "tuned_share", None), "--tuned-share")
    t0 = time.perf_counter()
    if shape.is_hybrid:
        cmp = baselines.compare(
            shape,
            s.total,
            trace,
            page_size=s.page_size,
            clock=clock_of,
            cache=not getattr(args, "no_prefix_cache", False),
            layouts=layouts,
            tuned_share=tuned,
            grid=getattr(args, "grid", "fine"),
            progress=progress,
        )
    else:
        cmp = baselines.compare_single(
            shape, s.total, trace, page_size=s.page_size, clock=clock_of, progress=progress
        )
    wall = time.perf_counter() - t0
    summary = summary_json(shape, s.total, args, trace, cmp)
    summary["dtypes"] = s.dtypes.as_dict()
    summary["dropped_over_max_context"] = dropped
    summary["clock"] = clock_of(shape).describe()
    summary["prefix_cache"] = not getattr(args, "no_prefix_cache", False)
    if args.json == "-":
        _emit_json(summary, "-")
    else:
        print(f"dtypes: {s.dtypes.describe()}; clock: {summary['clock']['source']}")
        print_table(summary)
        if dropped:
            print(f"({dropped} requests longer than max_position_embeddings "
                  f"{shape.max_position_embeddings} dropped, as engines refuse them)")  # fmt: skip
        print(f"({len(trace)} requests, {wall:.1f} s wall)")
        if args.json:
            _emit_json(summary, args.json)
    if args.plot:
        from ukv.sim import plot

        plot.save(cmp, args.plot, f"{shape.name} tp={s.tp}, {args.memory}, trace {trace.name}")
    return 0


def summary_json(shape: Any, total: int, args: Any, trace: Any, cmp: Any) -> dict:
    """The JSON summary of one ``simulate`` run (deterministic for a given trace)."""
    return {
        "model": shape.name,
        "kind": shape.kind,
        "tp": args.tp if isinstance(args.tp, int) else _int_arg(args.tp, "--tp"),
        "engine": getattr(args, "engine", "sglang"),
        "memory_bytes": total,
        "page_size": args.page_size
        if isinstance(args.page_size, int)
        else _int_arg(args.page_size, "--page-size"),
        "trace": trace.name,
        "trace_origin": trace.origin,
        "requests": len(trace),
        "seed": getattr(args, "seed", None),
        "layouts": cmp.summaries,
        "ratios": cmp.ratios(),
        "goodput_ratios": cmp.ratios("goodput_req_s"),
        "failures": cmp.failures(),
        "oracle_sweep": [[s, round(v, 4)] for s, v in cmp.sweep],
    }


def print_table(summary: dict) -> None:
    """The comparison table of one summary."""
    print(f"{summary['model']} ({summary['kind']}), tp={summary['tp']}, "
          f"{summary['memory_bytes'] / (1 << 30):.1f} GiB, trace {summary['trace']}")  # fmt: skip
    head = (f"{'layout':<17} {'share':>11} {'tok/s':>9} {'ukv x':>6} {'goodput':>8} {'hit':>5} "
            f"{'peak':>5} {'mean':>7} {'ttft p50':>8} {'ttft p99':>8} {'retract':>7} "
            f"{'reject':>6} {'moved/freed':>11}")  # fmt: skip
    print(head)
    for label, s in summary["layouts"].items():
        share = s.get("share")
        ratio = summary["ratios"].get(label)
        # A run that rejected requests enters no ratio (it served other work): say so.
        cell = (
            "failed"
            if label in summary.get("failures", {})
            else ("" if ratio is None else f"{ratio:.2f}")
        )
        q = s["ttft_s"]
        print(f"{label:<17} {_share(share):>11} {s['served_tok_s']:>9,.0f} {cell:>6} "
              f"{s['goodput_req_s']:>8.2f} {s['token_hit_rate']:>5.2f} "
              f"{s['peak_running']:>5} {s['mean_running']:>7.1f} {_f(q['p50']):>8} {_f(q['p99']):>8} "
              f"{s['retractions']:>7} {s['rejected']:>6} {s['moved_per_freed']:>11.3f}")  # fmt: skip


def _share(share: Any) -> str:
    if share is None:
        return ""
    if isinstance(share, float | int):
        return f"{share:.3f}"
    if isinstance(share, list):
        return "/".join(f"{x:.2f}" for x in share)
    return str(share)[:11]


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


if __name__ == "__main__":
    sys.exit(main())
