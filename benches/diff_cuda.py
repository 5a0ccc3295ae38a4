"""The differential test (tests/differential) at length: N seeds × configurations in
parallel processes, the pool on the GPU.

Each worker process runs engines of the differential driver one after another (a fresh
seed per engine, configurations in turn), ``--chunk`` steps each, then drains the pool.
Every step checks the bytes it touched, every ``--full-every`` steps all live bytes, the
live sets, counts, queue and ``check_invariants`` (which on CUDA compares the device
tables with the host ones); on CUDA frees of device ids are real ones. Workers stop when
the steps of all of them reach ``--steps`` or at ``--time-limit`` seconds. A failing
engine is recorded (configuration, seed, step, message) and the worker goes on with the
next one. ``diff.json`` and ``diff.md`` under ``--out`` summarise it (steps,
configurations, bytes checked, failures); each worker's progress is written as it goes.

    python benches/diff_cuda.py --device cuda --procs 16 --steps 1000000 --out $OUT
    python benches/diff_cuda.py --device cpu --procs 2 --steps 20000 --time-limit 60  # CPU
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from differential.driver import KINDS, Config, DiffFailure, Engine  # noqa: E402
from harness import command  # noqa: E402


def configs(page_sizes: list[int]) -> list[Config]:
    """Every pool kind, eager and lazy, at each page size (no defect triggers)."""
    return [Config(k, ps, lazy) for k in KINDS for ps in page_sizes for lazy in (False, True)]


def worker(
    rank: int,
    args: dict[str, Any],
    counter: Any,
    deadline: float,
) -> None:
    """Run engines until the shared step counter reaches the target or the deadline."""
    if args["device"] == "cuda":
        torch.cuda.set_device(0)
    torch.set_num_threads(1)
    cfgs = configs(args["page_sizes"])
    out = Path(args["out"])
    done: list[dict[str, Any]] = []
    n = 0
    while time.time() < deadline and counter.value < args["steps"]:
        cfg = cfgs[(rank + n * args["procs"]) % len(cfgs)]
        seed = args["seed"] + rank * 100_000 + n
        n += 1
        t0 = time.perf_counter()
        rec: dict[str, Any] = {"config": cfg.label, "seed": seed, "steps": 0}
        eng = None
        try:
            eng = Engine(cfg, seed, args["device"])
            steps = 0
            while steps < args["chunk"] and time.time() < deadline:
                k = min(200, args["chunk"] - steps)
                eng.run(k, args["full_every"])
                steps += k
                with counter.get_lock():
                    counter.value += k
            eng.drain()
            rec.update(
                steps=steps,
                full_checks=eng.totals.full_checks,
                bytes_checked=eng.totals.bytes_checked,
                pages_moved=eng.pool.stats().pages_moved,
                ops=eng.totals.ops,
                ok=True,
            )
        except DiffFailure as e:
            rec.update(ok=False, failure=str(e)[:2000], steps=eng.totals.steps if eng else 0)
        except Exception as e:  # a crash of the engine itself is a failure too
            rec.update(ok=False, failure=f"{type(e).__name__}: {e}"[:2000])
        rec["seconds"] = round(time.perf_counter() - t0, 2)
        done.append(rec)
        (out / f"worker-{rank}.json").write_text(json.dumps(done))


def summarise(runs: list[dict[str, Any]], wall: float, args: dict[str, Any]) -> dict[str, Any]:
    per: dict[str, dict[str, int]] = {}
    for r in runs:
        p = per.setdefault(r["config"], {"runs": 0, "steps": 0, "bytes_checked": 0, "failures": 0})
        p["runs"] += 1
        p["steps"] += r.get("steps", 0)
        p["bytes_checked"] += r.get("bytes_checked", 0)
        p["failures"] += 0 if r.get("ok") else 1
    steps = sum(r.get("steps", 0) for r in runs)
    return {
        "device": args["device"],
        "gpu": torch.cuda.get_device_name(0) if args["device"] == "cuda" else None,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "torch": torch.__version__,
        "procs": args["procs"],
        "full_every": args["full_every"],
        "chunk": args["chunk"],
        "steps": steps,
        "engines": len(runs),
        "configurations": len(per),
        "bytes_checked": sum(r.get("bytes_checked", 0) for r in runs),
        "full_checks": sum(r.get("full_checks", 0) for r in runs),
        "pages_moved": sum(r.get("pages_moved", 0) for r in runs),
        "failures": [r for r in runs if not r.get("ok")],
        "wall_s": round(wall, 1),
        "steps_per_s": round(steps / wall, 1) if wall else None,
        "per_config": per,
    }


def write(out: Path, summary: dict[str, Any], argv: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "diff.json").write_text(json.dumps(summary, indent=1))
    lines = [
        "# ukv differential test, long run",
        "",
        f"- command: `{command('diff_cuda.py', argv)}`",
        f"- device: {summary['device']} {summary['gpu'] or ''}; {summary['machine']}; "
        f"torch {summary['torch']}",
        f"- {summary['procs']} processes, {summary['wall_s']} s: {summary['steps']:,} steps "
        f"({summary['steps_per_s']} steps/s) in {summary['engines']} engines over "
        f"{summary['configurations']} configurations",
        f"- touched bytes checked every step, all live bytes every {summary['full_every']} "
        f"steps: {summary['bytes_checked']:,} bytes compared, {summary['full_checks']:,} "
        f"full checks, {summary['pages_moved']:,} pages moved",
        f"- failures: {len(summary['failures'])}",
        "",
        "| configuration | engines | steps | bytes checked | failures |",
        "|---|---|---|---|---|",
    ]
    for name, p in sorted(summary["per_config"].items()):
        lines.append(
            f"| {name} | {p['runs']} | {p['steps']:,} | {p['bytes_checked']:,} | {p['failures']} |"
        )
    for f in summary["failures"]:
        lines += ["", f"- {f['config']} seed {f['seed']}: {f['failure']}"]
    (out / "diff.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--procs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--steps", type=int, default=1_000_000, help="steps of all workers")
    p.add_argument("--chunk", type=int, default=4000, help="steps per engine (seed)")
    p.add_argument("--full-every", type=int, default=50)
    p.add_argument("--page-sizes", type=int, nargs="+", default=[1, 4, 16])
    p.add_argument("--time-limit", type=float, default=420.0, help="seconds")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("diff-out"))
    a = p.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    args = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()}
    ctx = mp.get_context("spawn")
    counter = ctx.Value("q", 0)
    t0 = time.time()
    deadline = t0 + a.time_limit
    procs = [ctx.Process(target=worker, args=(r, args, counter, deadline)) for r in range(a.procs)]
    for pr in procs:
        pr.start()
    for pr in procs:  # an engine checks the deadline every 200 steps
        pr.join(timeout=max(1.0, deadline + 60 - time.time()))
    runs: list[dict[str, Any]] = []
    for r, pr in enumerate(procs):
        if pr.is_alive():
            pr.terminate()
        f = a.out / f"worker-{r}.json"
        runs += json.loads(f.read_text()) if f.exists() else []
        if pr.exitcode not in (0, None) and pr.exitcode != -15:
            runs.append({"config": "?", "seed": -1, "ok": False, "steps": 0,
                         "failure": f"worker {r} exited with {pr.exitcode}"})  # fmt: skip
    summary = summarise(runs, time.time() - t0, args)
    write(a.out, summary, argv)
    print(json.dumps({k: v for k, v in summary.items() if k != "per_config"}, indent=1))
    return 1 if summary["failures"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
