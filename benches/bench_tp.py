"""Per-step cost of ukv's tensor-parallel modes: two gloo ranks, pools on one device.

Two processes on 127.0.0.1 form a gloo group; each holds its head shard (tp_size 2) of a
preset model's cache in its own pool on ``--device`` (on one GPU both ranks share it, as
the issue asks: the collectives are host traffic either way). A steady serving step is
simulated for ``--batch`` running requests: a few finish (their tokens and state slot
freed, so pages move), as many arrive (``alloc_extend`` of a prompt and a state slot),
and every other request decodes one token (``alloc_decode``). Per step and mode:

- ``plain``: the allocator calls on an untapped pool (the baseline).
- ``replicated``: the same calls on every rank with the plan tap, then
  ``ReplicatedPool.step()`` (one 8-byte all-gather when checking).
- ``leader``: the calls on rank 0 only, then ``LeaderPool.step()`` (the broadcast of the
  step's packed plans, plus the check); the follower's ``FollowerPool.step()`` receives
  and applies them.

Both ranks meet at a barrier before ``step()``, so its time is the mode's own cost, not
waiting for the other rank's allocator calls. On CUDA the follower's timed region ends
with a ``torch.cuda.synchronize()`` (its launches included). Medians over ``--steps``.

Usage::

    python benches/bench_tp.py --device cuda --out benches/results/tp-h200.md
    TRITON_INTERPRET=0 python benches/bench_tp.py --device cpu --steps 200 --out tp-cpu.md
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import socket
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

MODEL = "Qwen3-Next-80B-A3B"
PAGE = 16
PROMPT = 200


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Requests:
    """Running requests' virtual ids on the deciding rank."""

    def __init__(self, hp: Any, batch: int) -> None:
        self.alloc = hp.allocator
        self.slots = hp.allocator.mamba_slots
        self.ids: dict[int, torch.Tensor] = {}
        self.slot: dict[int, torch.Tensor] = {}
        self.next = 0
        self.rng = random.Random(0)
        self.admit(batch)

    def admit(self, n: int) -> None:
        if not n:
            return
        seq = torch.full((n,), PROMPT, dtype=torch.int64)
        pre = torch.zeros_like(seq)
        got = self.alloc.alloc_extend(pre, pre, seq, seq, pre - 1, n * PROMPT, host=True)
        assert got is not None, "the bench pool is too small"
        for i in range(n):
            self.ids[self.next] = got[i * PROMPT : (i + 1) * PROMPT]
            s = self.slots.alloc(1, host=True)
            assert s is not None
            self.slot[self.next] = s
            self.next += 1

    def step(self, churn: int) -> None:
        """Finish ``churn`` random requests, admit as many, decode the rest."""
        for r in self.rng.sample(sorted(self.ids), churn):
            self.alloc.free(self.ids.pop(r))
            self.slots.free(self.slot.pop(r))
        live = sorted(self.ids)
        seq = torch.tensor([len(self.ids[r]) + 1 for r in live])
        last = torch.stack([self.ids[r][-1] for r in live])
        dec = self.alloc.alloc_decode(seq, seq, last, host=True)
        assert dec is not None, "the bench pool is too small"
        for i, r in enumerate(live):
            self.ids[r] = torch.cat([self.ids[r], dec[i : i + 1]])
        self.admit(churn)


def _hybrid(rank: int, batch: int, device: str, model: str) -> Any:
    import ukv

    return ukv.build_mamba_hybrid(
        model=model,
        tp_size=2,
        tp_rank=rank,
        max_tokens=batch * (PROMPT + 2 * 512),
        max_requests=2 * batch,
        max_context_len=PROMPT + 1024,
        page_size=PAGE,
        device=device,
    )


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _case(rank: int, mode: str, batch: int, check: bool, args: Any) -> dict[str, Any]:
    import torch.distributed as dist

    from ukv import models
    from ukv.distributed import FollowerPool, LeaderPool, ReplicatedPool

    dev = args.device
    churn = max(1, batch // 16)
    decides = rank == 0 or mode != "leader"
    hp = _hybrid(rank, batch, dev, args.model) if decides else None
    tp: Any = None
    if mode == "replicated":
        tp = ReplicatedPool(hp.pool, check=check)
    elif mode == "leader" and rank == 0:
        tp = LeaderPool(hp.pool, check=check)
    elif mode == "leader":
        specs = list(models.preset(args.model, tp_size=2, tp_rank=rank).specs())
        tp = FollowerPool(specs, device=dev, check=check)
    reqs = _Requests(hp, batch) if decides else None
    if tp is not None:
        tp.step()  # the initial admissions
    decide_us, step_us, words = [], [], []
    for i in range(args.warmup + args.steps):
        _sync(dev)
        t0 = time.perf_counter()
        if reqs is not None:
            reqs.step(churn)
        _sync(dev)
        t1 = time.perf_counter()
        dist.barrier()
        t2 = time.perf_counter()
        if tp is not None:
            sent = tp.channel.sent_words if mode == "leader" and rank == 0 else 0
            tp.step()
            if mode == "leader" and rank == 0:
                words.append(tp.channel.sent_words - sent)
        _sync(dev)
        t3 = time.perf_counter()
        if i >= args.warmup:
            decide_us.append((t1 - t0) * 1e6)
            step_us.append((t3 - t2) * 1e6)
    return {
        "rank": rank,
        "mode": mode,
        "batch": batch,
        "check": check,
        "decide_us": statistics.median(decide_us),
        "step_us": statistics.median(step_us),
        "words": statistics.median(words) if words else 0,
    }


def _worker(rank: int, port: int, out: str, args: Any) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    rows = []
    # the collectives alone: an 8 KiB broadcast (leader mode's first chunk), one word
    chunk = torch.zeros(1024, dtype=torch.int64)
    word = torch.zeros(1, dtype=torch.int64)
    both = torch.zeros(2, dtype=torch.int64)
    for name, fn in (
        ("broadcast 8 KiB", lambda: dist.broadcast(chunk, 0)),
        ("all_gather 8 B", lambda: dist.all_gather_into_tensor(both, word)),
    ):
        ts = []
        for _ in range(args.warmup + args.steps):
            dist.barrier()
            t0 = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t0) * 1e6)
        rows.append({"rank": rank, "collective": name, "us": statistics.median(ts[args.warmup :])})
    for batch in args.batch:
        for mode, check in (
            ("plain", False),
            ("replicated", False),
            ("replicated", True),
            ("leader", False),
            ("leader", True),
        ):
            rows.append(_case(rank, mode, batch, check, args))
            dist.barrier()
    Path(out, f"rank{rank}.json").write_text(json.dumps(rows))
    dist.destroy_process_group()


def _table(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| batch | mode | check | rank 0: calls µs | rank 0: step µs | rank 1: calls µs "
        "| rank 1: step µs | words sent |",
        "|---|---|---|---|---|---|---|---|",
    ]
    cases = [r for r in rows if "mode" in r]
    for r0 in (r for r in cases if r["rank"] == 0):
        r1 = next(
            r
            for r in cases
            if r["rank"] == 1
            and (r["mode"], r["batch"], r["check"]) == (r0["mode"], r0["batch"], r0["check"])  # noqa: E501
        )
        lines.append(
            f"| {r0['batch']} | {r0['mode']} | {'on' if r0['check'] else 'off'} "
            f"| {r0['decide_us']:.1f} | {r0['step_us']:.1f} | {r1['decide_us']:.1f} "
            f"| {r1['step_us']:.1f} | {r0['words']:.0f} |"
        )
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--model", default=MODEL, help="a Mamba-hybrid preset (ukv.models)")
    p.add_argument("--batch", type=int, nargs="+", default=[8, 64, 256])
    p.add_argument("--steps", type=int, default=500)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--out", default=None, help="markdown file (a .json goes next to it)")
    p.add_argument("--note", default="", help="a line about the machine, for the results")
    args = p.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("needs CUDA")
        return
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        mp.start_processes(
            _worker, args=(_free_port(), tmp, args), nprocs=2, join=True, start_method="spawn"
        )
        rows = [row for r in range(2) for row in json.loads(Path(tmp, f"rank{r}.json").read_text())]
    where = (
        torch.cuda.get_device_name(0)
        if args.device.startswith("cuda")
        else f"{platform.machine()}, {os.cpu_count()} CPUs"
    )
    head = [
        f"# ukv tensor-parallel step cost ({args.device}, 2 gloo ranks on one host)",
        "",
        f"{datetime.date.today()}, {where}, torch {torch.__version__}, {args.model} sharded tp_size 2, "
        f"page size {PAGE}, prompt {PROMPT}, batch/16 requests finish and arrive per step; "
        f"medians of {args.steps} steps. Command: `python benches/bench_tp.py --device "
        f"{args.device} --model {args.model} --batch {' '.join(map(str, args.batch))} "
        f"--steps {args.steps}`"
        + (
            f" (TRITON_INTERPRET={os.environ.get('TRITON_INTERPRET')})"
            if args.device == "cpu"
            else ""
        ),
        "",
        *([args.note, ""] if args.note else []),
        "calls: the step's allocator calls (rank 1 makes none in leader mode); step: "
        "`step()` after a barrier (leader: broadcast; follower: receive + apply).",
        "",
    ]
    coll = [
        f"- {r['collective']}: rank 0 {r['us']:.1f} µs, rank 1 "
        f"{next(x['us'] for x in rows if x.get('collective') == r['collective'] and x['rank'] == 1):.1f} µs"
        for r in rows
        if r.get("collective") and r["rank"] == 0
    ]
    text = "\n".join(head + ["Collectives alone:", "", *coll, "", *_table(rows), ""])
    print(text)
    if args.out:
        Path(args.out).write_text(text)
        Path(args.out).with_suffix(".json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
