"""Soak through the public API on a real pool (CUDA on the GPU machine; CPU for a smoke run).

A seeded mix of token allocs (device and host ids), requests growing by ``alloc_decode`` /
``alloc_extend`` with ``last_loc`` on the device, ``set_kv`` of a per-token stamp through
``translate_kv_loc``, frees of device and host ids, free groups, state-slot allocs with a
stamp written into the temporal state, state copies (``ops.copy_slots``) and frees, lazy
flushes. Every ``--check-every`` operations: ``check_invariants``, ``check_device_errors``
(no device ``last_loc`` may have failed), every held token's K row
and every held state read back through translation and compared with its stamp (compaction
moved them in between), and the process's device memory and RSS recorded. At the end
everything is freed and the pool must drain to empty. Writes ``soak.md``/``soak.json`` under
``--out`` after every check, so a run cut short still reports what it did.

    python benches/soak_cuda.py --device cuda --ops 1000000 --out $OUT     # per mode
    python benches/soak_cuda.py --device cpu --ops 2000 --check-every 500  # smoke (tests)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import time
from pathlib import Path
from typing import Any

import torch

import ukv

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import command, utc_now, write_results  # noqa: E402

HEADS, DIM = 2, 16
MAX_STATES = 128
"""States held at once: without a cap, state slots (allocated more often than freed in the
mix) fill the pool and starve the token side (the 2026-12-04 H200 run, before the cap, held
up to 10,911 states and at most 96 tokens)."""


def _rss_mib() -> float:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096 / (1 << 20)
    except OSError:
        return 0.0


def _stamp(k: int) -> float:
    return float(1 + k % 200)  # small integers: exact in bf16


def run(
    device: str,
    ops: int,
    lazy: bool,
    page_size: int,
    check_every: int,
    seed: int,
    progress: Path | None = None,
    total_kib: int = 4096,
) -> dict:
    """One soak on a pool of ``total_kib`` KiB; returns its summary (and raises
    AssertionError on any lost byte). Each check's sample is appended to ``progress`` (JSON
    lines) when given."""
    full = ukv.MHASpec("full", 2, HEADS, DIM, torch.bfloat16, grow="up")
    mamba = ukv.MambaSpec(
        "mamba", 2, ((4, 8),), torch.bfloat16, (2, 4, 4), torch.float32, grow="down"
    )
    hp = ukv.build_mamba_hybrid(
        full, mamba, total_bytes=total_kib << 10, max_context_len=256, page_size=page_size,
        device=device, lazy=lazy,
    )  # fmt: skip
    pool, a = hp.pool, hp.allocator
    slots = a.mamba_slots
    ma = pool.allocator("mamba")
    dev = pool.device
    k_views, _ = pool.kv_views("full")
    _, temporal = pool.state_views("mamba")
    rng = random.Random(seed)
    tokens: list[tuple[torch.Tensor, float]] = []  # host ids, stamp
    states: list[tuple[int, float]] = []
    kinds = "alloc grow set_kv free_dev free_host group state copy flush none"
    counts = dict.fromkeys(kinds.split(), 0)
    samples: list[dict[str, Any]] = []
    t0 = time.perf_counter()

    def check(at: int) -> None:
        pool.check_invariants()
        pool.check_device_errors()  # every device last_loc given was valid
        if tokens:
            ids = torch.cat([t for t, _ in tokens])
            want = torch.cat([torch.full((len(t),), s) for t, s in tokens])
            phys = a.translate_kv_loc(ids.to(dev))
            for layer in (0, 1):
                got = k_views[layer][phys // page_size, phys % page_size, 0, 0].float().cpu()
                assert torch.equal(got, want), f"op {at}: a token's K row lost its bytes"
        if states:
            virt = torch.tensor([s for s, _ in states], device=dev)
            got = temporal[0, slots.translate(virt), 0, 0, 0].cpu()
            want = torch.tensor([v for _, v in states])
            assert torch.equal(got, want), f"op {at}: a state lost its bytes"
        if dev.type == "cuda":
            torch.cuda.synchronize()
        samples.append({
            "ops": at, "s": round(time.perf_counter() - t0, 2), "tokens": sum(map(len, (t for t, _ in tokens))),
            "states": len(states), "rss_mib": round(_rss_mib(), 1),
            "cuda_mib": round(torch.cuda.memory_allocated() / (1 << 20), 2) if dev.type == "cuda" else None,
            "pages_moved": pool.stats().pages_moved, "lazy": lazy,
        })  # fmt: skip
        if progress is not None:
            with progress.open("a") as f:
                f.write(json.dumps(samples[-1]) + "\n")

    for op in range(1, ops + 1):
        # Phases of 5,000 operations alternately fill the pool and drain it.
        grow = (op // 5000) % 2 == 0
        if rng.random() < (0.45 if grow else 0.2):
            r = 0.0
        else:
            r = 0.34 + 0.66 * rng.random()
        if r < 0.34:
            host = rng.random() < 0.5
            grown = rng.randrange(len(tokens)) if tokens and rng.random() < 0.4 else None
            if grown is None:
                ids = a.alloc(page_size * rng.randint(1, 4), host=host)
                s = _stamp(op)
            else:
                # A request grows by decode or extend with last_loc on the device: the
                # kernel finishes (and checks) the tokens continuing its partial page.
                held, s = tokens[grown]
                n = rng.randint(1, 3)
                pre, seq = torch.tensor([len(held)]), torch.tensor([len(held) + n])
                last = held[-1:].to(dev)
                if n == 1:
                    ids = a.alloc_decode(seq.to(dev), seq, last)
                else:
                    ids = a.alloc_extend(pre.to(dev), pre, seq.to(dev), seq, last, n)
            if ids is None:
                counts["none"] += 1
            else:
                phys = a.translate_kv_loc(ids.to(dev))
                kv = torch.full((len(ids), HEADS, DIM), s, dtype=torch.bfloat16, device=dev)
                for layer in (0, 1):
                    pool.set_kv("full", layer, phys, kv, kv)
                if grown is None:
                    tokens.append((ids.cpu(), s))
                    counts["alloc"] += 1
                else:
                    tokens[grown] = (torch.cat([tokens[grown][0], ids.cpu()]), s)
                    counts["grow"] += 1
                counts["set_kv"] += 1
        elif r < 0.62 and tokens:
            ids, _ = tokens.pop(rng.randrange(len(tokens)))
            if rng.random() < 0.5:
                a.free(ids.to(dev))
                counts["free_dev"] += 1
            else:
                a.free(ids)
                counts["free_host"] += 1
        elif r < 0.66 and len(tokens) > 3:
            a.free_group_begin()
            for _ in range(3):
                a.free(tokens.pop(rng.randrange(len(tokens)))[0])
            a.free_group_end()
            counts["group"] += 1
        elif r < 0.78 and len(states) < MAX_STATES:
            got = slots.alloc(1, host=True)
            if got is None:
                counts["none"] += 1
            else:
                s = _stamp(op)
                temporal[:, slots.translate(got.to(dev))] = s
                states.append((int(got[0]), s))
                counts["state"] += 1
        elif r < 0.84 and states and len(states) < MAX_STATES:
            src = states[rng.randrange(len(states))]
            got = slots.alloc(1, host=True)
            if got is not None:
                ukv.ops.copy_slots(
                    pool.raw, ma.page_bytes,
                    slots.translate(torch.tensor([src[0]], device=dev)),
                    slots.translate(got.to(dev)),
                )  # fmt: skip
                states.append((int(got[0]), src[1]))
                counts["copy"] += 1
        elif r < 0.96 and states:
            slot, _ = states.pop(rng.randrange(len(states)))
            slots.free(torch.tensor([slot]))
        else:
            pool.flush(urgent=rng.random() < 0.2)
            counts["flush"] += 1
        if op % check_every == 0:
            check(op)
    if ops % check_every:
        check(ops)
    for ids, _ in tokens:
        a.free(ids)
    for slot, _ in states:
        slots.free(torch.tensor([slot]))
    pool.sync_frees()
    pool.flush(urgent=True)
    pool.check_invariants()
    drained = all(sp.live_pages == 0 and sp.span_pages == 0 for sp in pool.stats().sub_pools)
    assert drained, f"the pool did not drain: {pool.stats()}"
    first = samples[len(samples) // 5] if len(samples) >= 5 else samples[0]
    last = samples[-1]
    return {
        "device": str(dev), "lazy": lazy, "page_size": page_size, "ops": ops,
        "total_kib": total_kib, "seconds": round(time.perf_counter() - t0, 1), "checks": len(samples), "counts": counts,
        "pages_moved": last["pages_moved"], "drained": drained,
        "rss_mib_from_fifth_to_end": [first["rss_mib"], last["rss_mib"]],
        "cuda_mib_from_fifth_to_end": [first["cuda_mib"], last["cuda_mib"]],
        "gpu_waits": pool.stats().gpu_waits, "samples": samples,
    }  # fmt: skip


def _write(out: Path, results: list[dict], argv: list[str]) -> None:
    gpu = (
        torch.cuda.get_device_name()
        if torch.cuda.is_available()
        else f"{platform.machine()} CPU, {os.cpu_count()} cores"
    )
    lines = [
        "# ukv soak through the public API",
        "",
        f"- command: `{command('soak_cuda.py', argv)}`",
        f"- machine: {gpu}; Python {sys.version.split()[0]}, torch {torch.__version__}",
        f"- date: {utc_now()}",
        "",
        "| mode | page size | ops | s | checks (all bytes intact) | pages moved | RSS MiB (1/5 → end) | CUDA MiB (1/5 → end) | GPU waits | drained |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for r in results:
        lines.append(
            f"| {'lazy' if r['lazy'] else 'eager'} | {r['page_size']} | {r['ops']:,} | "
            f"{r['seconds']} | {r['checks']} | {r['pages_moved']:,} | "
            f"{r['rss_mib_from_fifth_to_end'][0]} → {r['rss_mib_from_fifth_to_end'][1]} | "
            f"{r['cuda_mib_from_fifth_to_end'][0]} → {r['cuda_mib_from_fifth_to_end'][1]} | "
            f"{r['gpu_waits']} | {r['drained']} |"
        )
    write_results(out / "soak.md", "\n".join(lines) + "\n", results)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--ops", type=int, default=1_000_000, help="operations per mode")
    p.add_argument("--check-every", type=int, default=10_000)
    p.add_argument("--page-size", type=int, default=16)
    p.add_argument("--modes", nargs="+", default=["eager", "lazy"], choices=["eager", "lazy"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--total-kib", type=int, default=4096, help="pool size (128: the pool runs full)"
    )
    p.add_argument("--out", type=Path, default=Path("."))
    args = p.parse_args(argv)
    results: list[dict] = []
    for mode in args.modes:
        args.out.mkdir(parents=True, exist_ok=True)
        res = run(args.device, args.ops, mode == "lazy", args.page_size, args.check_every,
                  args.seed, args.out / "soak-progress.jsonl", args.total_kib)  # fmt: skip
        results.append(res)
        _write(args.out, results, sys.argv[1:] if argv is None else argv)
        print({k: v for k, v in res.items() if k != "samples"}, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
