"""Where the drop-in's host time per scheduler step goes: cProfile of its pool calls only.

The per-step bench (``benches/bench_sglang_dropin.py``) says how long each phase of a step
takes; this says which functions inside the pool's calls take it. It builds the drop-in's
side of one row of that bench (same trace, ``benches/sglang_step_trace.py``; same
geometry, ``--quick`` sizes or the full ones), warms it up, then runs ``--steps`` steps
with the profiler switched on only inside the pool's calls (the scheduler's own work
around them is not profiled, as the bench does not time it), or only inside one phase's
calls (``--phase "window free"``). Prints, and writes to
``--out``: host µs per step by phase, then the functions by own time and by cumulative
time (``--top`` of each), with their share of the profiled time.

On CPU the drop-in's plans run in Triton's interpreter where a GPU pool launches a kernel
(the bench sets ``TRITON_INTERPRET=1``); ``--no-interpret`` profiles the CPU pool's torch
executor instead (no Triton: the host path a GPU pool takes, minus the launch), which
needs ``--forward graph`` (the eager forward's metadata is a Triton kernel of SGLang's).

Usage (repository root; SGLang as for the bench)::

    PYTHONPATH=python python benches/profile_sglang_step.py --device cpu --quick \\
        --page-size 16 --batch 8 --forward graph --out OUT.txt
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shlex
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import bench_sglang_dropin as bench  # noqa: E402


def _args(argv: list[str] | None) -> tuple[argparse.Namespace, argparse.Namespace]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hybrid", choices=("swa", "mamba"), default="swa")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--page-size", type=int, default=16)
    p.add_argument("--lazy", action="store_true", help="lazy compaction (eager by default)")
    p.add_argument("--forward", choices=("eager", "graph"), default="graph")
    p.add_argument("--steps", type=int, default=64, help="profiled steps")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--phase", default=None, help="profile only this phase's calls")
    p.add_argument("--interpret", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--out", type=Path, default=None)
    own, rest = p.parse_known_args(argv)
    b = ["--hybrid", own.hybrid, "--batch", str(own.batch), "--page-size", str(own.page_size)]
    b += ["--forward", own.forward, "--steps", str(own.steps), "--rounds", "1", *rest]
    return own, bench._args(b)


def main(argv: list[str] | None = None) -> int:
    own, args = _args(argv)
    bench._prepare(args)
    if args.device == "cpu" and not own.interpret:
        os.environ["TRITON_INTERPRET"] = "0"  # before Triton is imported
    import torch

    torch.set_num_threads(1)
    import launch_count as lc
    import sglang_step_trace as trace

    sides = bench.Sides(trace)
    geo = bench._geometry(args, trace)
    shape = trace.Shape(own.hybrid, own.batch, own.page_size, own.lazy)
    graph = own.forward == "graph"
    t = trace.StepTrace(
        trace.build(sides.ours, shape, geo, args.device),
        shape,
        geo,
        args.device,
        lc.LaunchCounter(args.device == "cuda"),
    )
    t.populate()
    t.run(own.steps, graph)  # warm-up: every kernel and path the trace reaches
    plain = t.run(own.steps, graph)  # the same steps' phases without the profiler
    prof = cProfile.Profile()
    timed = t._t

    def profiled(phase: str, fn: Any, *a: Any, **kw: Any) -> Any:
        if own.phase is not None and phase != own.phase:
            return timed(phase, fn, *a, **kw)
        prof.enable()
        try:
            return timed(phase, fn, *a, **kw)
        finally:
            prof.disable()

    t._t = profiled  # type: ignore[method-assign]
    start = time.perf_counter()
    phases = t.run(own.steps, graph)
    wall = time.perf_counter() - start
    t._t = timed  # type: ignore[method-assign]
    leaked = t.drain()
    text = _report(own, args, plain, phases, prof, wall, leaked)
    print(text)
    if own.out is not None:
        own.out.parent.mkdir(parents=True, exist_ok=True)
        own.out.write_text(text)
    return 0


def _report(
    own: argparse.Namespace,
    args: argparse.Namespace,
    plain: dict[str, float],
    phases: dict[str, float],
    prof: cProfile.Profile,
    wall: float,
    leaked: int,
) -> str:
    import torch

    lines = [
        "# cProfile of the ukv drop-in's pool calls, one row of the per-step bench",
        "",
        f"- command: `python benches/profile_sglang_step.py {_command(sys.argv[1:])}`",
        f"- device: {args.device}; TRITON_INTERPRET={os.environ.get('TRITON_INTERPRET')}; "
        f"torch {torch.__version__}; Python {sys.version.split()[0]}",
        f"- row: {own.hybrid}, batch {own.batch}, page size {own.page_size}, "
        f"{'lazy' if own.lazy else 'eager'}, {own.forward} forward; {own.steps} profiled "
        f"steps after twice as many unprofiled ones; {'quick' if args.quick else 'full'} geometry",
        f"- date: {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}; the steps took "
        f"{wall:.2f} s with the profiler on (its overhead inflates every figure); full-side "
        f"tokens left after the drain: {leaked}; profiled: "
        f"{'the ' + repr(own.phase) + ' calls' if own.phase else 'every pool call'}",
        "",
        "Host µs per step by phase (pool calls only; a second warm-up run of the same",
        "number of steps without the profiler, then the profiled run):",
        "",
        "| run | " + " | ".join(phases) + " | total |",
        "|" + "---|" * (len(phases) + 2),
    ]
    for name, row in (("profiler off", plain), ("profiler on", phases)):
        cells = " | ".join(f"{v:.1f}" for v in row.values())
        lines.append(f"| {name} | {cells} | {sum(row.values()):.1f} |")
    st = pstats.Stats(prof)
    total = st.total_tt or 1e-12  # type: ignore[attr-defined]
    rows = [
        (f"{Path(file).name}:{line}({name})", nc, tt, ct)
        for (file, line, name), (_, nc, tt, ct, _) in st.stats.items()  # type: ignore[attr-defined]
    ]
    steps = own.steps
    for col, title in ((2, "own time"), (3, "cumulative time")):
        lines += [
            "",
            f"## By {title} (top {own.top}; µs are per profiled step, profiler on)",
            "",
            "| function | calls per step | own µs | cumulative µs | own % of profiled |",
            "|---|---|---|---|---|",
        ]
        for name, nc, tt, ct in sorted(rows, key=lambda r: -r[col])[: own.top]:
            lines.append(
                f"| `{name}` | {nc / steps:.2f} | {tt / steps * 1e6:.2f} | "
                f"{ct / steps * 1e6:.2f} | {100 * tt / total:.1f} |"
            )
    return "\n".join(lines) + "\n"


def _command(argv: list[str]) -> str:
    """The command line, quoted, without machine paths (SGLang's and the output's)."""
    out = list(argv)
    for i, a in enumerate(out[:-1]):
        if a in ("--sglang-path", "--out"):
            out[i + 1] = "SGLANG_PATH" if a == "--sglang-path" else Path(out[i + 1]).name
    return shlex.join(out)


if __name__ == "__main__":
    sys.exit(main())
