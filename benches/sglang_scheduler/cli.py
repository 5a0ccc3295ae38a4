"""Command line: run configurations on one pool, print per-step lines and a summary JSON.

One process runs one pool (the drop-in must be installed before SGLang imports its
pool, and SGLang's own pool cannot be served after that), any number of
configurations: ``--matrix FILE`` (JSON, ``config.dumps``) or the single configuration
the flags describe. The last line printed is ``SUMMARY <json>``: per configuration the
per-step admitted tokens, the totals, the checks that ran and the error (null when
every check passed).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from typing import Any

from sglang_scheduler import bootstrap
from sglang_scheduler.config import CACHES, Config, loads, make


def parse(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[Config]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--pool", choices=("sglang", "ukv"), default="ukv", help="SGLang's own pool or the drop-in"
    )
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--hybrid", choices=("swa", "mamba"), default="swa", help="the model stand-in")
    p.add_argument("--page-size", type=int, default=1)
    p.add_argument(
        "--lazy", action=argparse.BooleanOptionalAction, default=True, help="--lazy / --no-lazy"
    )
    p.add_argument("--eager", dest="lazy", action="store_false", help="same as --no-lazy")
    p.add_argument(
        "--cache",
        choices=CACHES,
        default=None,
        help="default: radix (Mamba at page size > 1: chunk)",
    )
    p.add_argument(
        "--steps", type=int, default=12, help="iterations with arrivals (then it drains)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--more-swa", action="store_true", help="3 SWA layers and 1 full one")
    p.add_argument("--scale", type=int, default=1, help="multiply pool sizes and arrival rate")
    p.add_argument(
        "--forward-delay-us", type=int, default=0, help="CUDA: each forward sleeps first"
    )
    p.add_argument(
        "--spec-drafts",
        type=int,
        default=0,
        help="Mamba: speculative_num_draft_tokens; every decode is then a verify step",
    )
    p.add_argument(
        "--matrix", default=None, help="a JSON file of configurations (overrides the flags)"
    )
    p.add_argument("--sglang-path", default=os.environ.get("UKV_SGLANG_PATH", ""))
    p.add_argument("--quiet", action="store_true", help="no per-step lines")
    p.add_argument(
        "--side-by-side",
        action="store_true",
        help="run config.matrix() on both pools (two child processes) and compare",
    )
    p.add_argument("--serial", action="store_true", help="--side-by-side: one pool after the other")
    p.add_argument("--out", default=None, help="--side-by-side: write the markdown table here")
    p.add_argument("--json", default=None, help="--side-by-side: write the results here")
    a = p.parse_args(argv)
    if a.side_by_side:
        return a, []
    if a.matrix:
        with open(a.matrix) as f:
            configs = loads(f.read())
        configs = [
            Config.from_json({**c.to_json(), "pool": a.pool, "device": a.device}) for c in configs
        ]
        return a, configs
    return a, [config_from_flags(a)]


def config_from_flags(a: argparse.Namespace) -> Config:
    return make(
        a.hybrid,
        a.page_size,
        a.lazy,
        cache=a.cache,
        more_swa=a.more_swa,
        scale=a.scale,
        pool=a.pool,
        device=a.device,
        steps=a.steps,
        seed=a.seed,
        forward_delay_us=a.forward_delay_us,
        spec_drafts=a.spec_drafts,
    )


def run_one(cfg: Config, quiet: bool) -> dict[str, Any]:
    from sglang_scheduler import release

    Loop = release.current().loop_class()  # noqa: N806 - the release's scheduler

    if cfg.device == "cpu":
        from sglang_scheduler import events

        events.install_host_streams()
    from sglang_scheduler import patches, paths

    t0 = time.perf_counter()
    counts_before = dict(patches.COUNTS)
    paths_before = dict(paths.COUNTS)
    out: dict[str, Any] = {"config": cfg.name, "pool": cfg.pool, "error": None}
    loop = None
    try:
        loop = Loop(cfg)

        def on_step(rec: Any) -> None:
            if not quiet:
                print(
                    f"[{cfg.pool} {cfg.name}] step {rec.step:4d} {rec.kind:12s} "
                    f"admitted {rec.admitted_tokens:4d} tok / {rec.admitted_reqs} req "
                    f"decode {rec.decode_tokens:3d} running {rec.running:3d} "
                    f"waiting {rec.waiting:3d} retracted {rec.retracted}",
                    flush=True,
                )

        loop.run(on_step)
    except BaseException as exc:  # noqa: BLE001 - reported, the next config still runs
        if isinstance(exc, KeyboardInterrupt):
            raise
        out["error"] = f"{type(exc).__name__}: {exc}"
        out["traceback"] = traceback.format_exc()[-4000:]
    out["seconds"] = round(time.perf_counter() - t0, 2)
    if loop is not None:
        recs = loop.records
        out.update(
            steps=len(recs),
            requests=len(loop.arrivals),
            admitted_per_step=[r.admitted_tokens for r in recs],
            retracted_per_step=[r.retracted for r in recs],
            evicted_per_step=[r.evicted for r in recs],
            views_per_step=[r.views for r in recs],
            admitted_tokens=sum(r.admitted_tokens for r in recs),
            cached_tokens=sum(r.cached_tokens for r in recs),
            decode_tokens=sum(r.decode_tokens for r in recs),
            totals=dict(vars(loop.totals)),
            checks=loop.shadow.checks,
            tokens_checked=loop.shadow.tokens_checked,
            states_checked=loop.shadow.states_checked,
            spec=dict(loop.forward.spec),
            moved=_moved(loop),
        )
    out["sglang_patches"] = {
        name: patches.COUNTS.get(name, 0) - counts_before.get(name, 0) for name in patches.APPLIED
    }
    out["sglang_paths"] = {name: n - paths_before.get(name, 0) for name, n in paths.COUNTS.items()}
    return out


def _moved(loop: Any) -> dict[str, int] | None:
    """Pages (state slots on a state sub-pool) ukv's compaction moved, per sub-pool: the
    drop-in's own count (SGLang's pool keeps none)."""
    buffer = getattr(loop.stack.allocator, "unified_buffer", None)
    pool = getattr(buffer, "ukv_pool", None) if buffer is not None else None
    if pool is None:
        return None
    return {s.name: int(s.pages_moved) for s in pool.stats().sub_pools}


def side_by_side(a: argparse.Namespace) -> int:
    """``--side-by-side``: both pools over the matrix; prints the table and a verdict."""
    from sglang_scheduler import config, sidebyside

    os.environ["UKV_SGLANG_PATH"] = a.sglang_path  # the matrix follows its release
    env = dict(os.environ)
    t0 = time.perf_counter()
    res = sidebyside.run(
        config.matrix(
            scale=a.scale, steps=a.steps, seed=a.seed, forward_delay_us=a.forward_delay_us
        ),
        a.device,
        env,
        not a.serial,
        extra_ukv=tuple(config.self_tests(seed=a.seed)),
    )
    table = sidebyside.markdown(res)
    print(table)
    print(f"side by side: {time.perf_counter() - t0:.0f} s wall")
    if a.out:
        with open(a.out, "w") as f:
            f.write(table)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    runs = [r for r in res["ukv"] + res["sglang"] if "-corrupt-" not in r["config"]]
    failed = [r["config"] for r in runs if r["error"]]
    blind = [
        r["config"] for r in res["self_tests"] if not (r["error"] or "").startswith("LostBytes")
    ]
    short = [p["config"] for p in res["pairs"] if p.get("capacity_shortfalls")]
    fewer = [p["config"] for p in res["pairs"] if p.get("ukv_admits_fewer")]
    verdict = {"failed": failed, "self_tests_not_caught": blind, "capacity_shortfalls": short}
    print("SIDE-BY-SIDE " + json.dumps({**verdict, "ukv_admits_fewer_first": fewer}))
    return 0 if not any(verdict.values()) else 1


def main(argv: list[str] | None = None) -> int:
    a, configs = parse(argv)
    if a.side_by_side:
        return side_by_side(a)
    bootstrap.prepare(a.pool, a.device, a.sglang_path)
    results = []
    for cfg in configs:
        res = run_one(cfg, a.quiet)
        results.append(res)
        status = "ok" if res["error"] is None else f"FAILED {res['error'][:300]}"
        print(f"[{cfg.pool} {cfg.name}] {status} ({res['seconds']} s)", flush=True)
    print("SUMMARY " + json.dumps(results), flush=True)
    return 0 if all(r["error"] is None for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
