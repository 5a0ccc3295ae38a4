"""SGLang's allocator path with the ukv drop-in installed vs not, in one process.

Both sides are built by SGLang's factory entry point of the same module name,
``sglang.srt.mem_cache.unified_memory_pool.init_unified_swa_pools`` (SGLang 0.5.16): first
SGLang's own module, then, after ``ukv.integrations.sglang.install()``, the drop-in served
under that name. Each side then runs the same scheduler trace through the composite
allocator SGLang's scheduler holds (``UnifiedSWATokenToKVPoolAllocator``):

* ``--requests`` requests prefill (``alloc_extend`` from an empty prefix, lengths drawn
  from a seeded generator);
* every step, one decode token per request (``alloc_decode``), the attention metadata's
  translations of every live token (``translate_kv_loc`` and
  ``translate_loc_from_full_to_swa``), a forward reported (``set_inflight_forward``, lazy
  mode) and ``flush_opportunistic``;
* every ``--finish-every`` steps the oldest request finishes and a new one prefills: a
  free group with ``free_swa`` of the tokens every request has pushed out of its window and
  ``free`` of the finished request's tokens (radix-cache style), then ``alloc_extend``.

A figure is host µs per step (median of ``--rounds`` rounds; one untimed warm-up round
first). On CUDA nothing inside a round synchronises; the round ends with one
``torch.cuda.synchronize`` that is timed with it. SGLang's Mamba factory is not timed:
0.5.16's own ``init_unified_mamba_pools`` raises ``TypeError`` (its
``_init_mamba_pool`` lacks the ``enable_gdn_replayssm_spec`` keyword its base passes). The
model has as many SWA as full layers: with more SWA layers, SGLang's SWA-side table is
shorter than full's id space and indexes out of bounds (its known defect 1, which the
drop-in does not have).

SGLang must be importable: installed ``--no-deps`` (``docs/SGLANG.md``, "Testing against
SGLang"), named by ``--sglang-path`` or ``UKV_SGLANG_PATH``; the third-party packages it
imports at module level but this path never calls are served as stand-ins
(``tests/sglang_stubs.py``), and on CUDA ``sgl_kernel`` too when it is missing
(``benches/peer_sglang.py``). On CPU, SGLang's paged allocation is a Triton kernel with no
CPU driver, so ``--device cpu`` runs under ``TRITON_INTERPRET=1`` (set here, before
Triton is imported): the CPU figures prove the script works, they are not a comparison.

Usage (from the repository root)::

    python benches/bench_sglang_dropin.py --device cpu --quick
    python benches/bench_sglang_dropin.py --device cuda --out benches/results/sglang-dropin-h200.md
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--sglang-path", default=os.environ.get("UKV_SGLANG_PATH", ""))
    p.add_argument("--page-size", type=int, default=16)
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--steps", type=int, default=200, help="decode steps per round")
    p.add_argument("--finish-every", type=int, default=4)
    p.add_argument("--window", type=int, default=256, help="sliding window in tokens")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--lazy", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--quick", action="store_true", help="a smoke run: tiny sizes, 1 round")
    p.add_argument("--out", type=Path, default=None, help="write a markdown table here")
    a = p.parse_args()
    if a.quick:
        a.requests, a.steps, a.rounds, a.window, a.page_size = 4, 12, 1, 16, 4
    return a


def _prepare(args: argparse.Namespace) -> None:
    """Make SGLang importable (before torch/Triton are imported on CPU)."""
    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    os.environ["UKV_SGLANG_PATH"] = args.sglang_path
    # ukv itself comes from the environment (the installed wheel, or PYTHONPATH=python in a
    # checkout with a built extension): ./python has no compiled _core on a GPU machine.
    sys.path[:0] = [str(ROOT / "tests"), str(HERE)]
    import sglang_stubs

    if not sglang_stubs.sglang_paths():
        sys.exit("SGLang not found: pass --sglang-path or set UKV_SGLANG_PATH (docs/SGLANG.md)")
    sys.path[:0] = sglang_stubs.sglang_paths()
    if args.device == "cuda":
        import peer_sglang

        peer_sglang.install_standin()
    sglang_stubs.pytest_configure(None)


def _sides(args: argparse.Namespace) -> dict[str, Trace]:
    """SGLang's own stack, then (after ``install()``) the drop-in's, built by the factory of
    the same module name. SGLang's factory imports its allocator class when called, so its
    side is built before the drop-in is installed."""
    import importlib

    import ukv.integrations.sglang as dropin

    theirs = importlib.import_module("sglang.srt.mem_cache.unified_memory_pool")
    sglang_side = Trace(theirs, args)
    # SGLang's module is already imported (its side was built from it): a mixed
    # installation on purpose, and nothing exported to child processes.
    dropin.install(replace_loaded=True, propagate=False)
    ours = importlib.import_module("sglang.srt.mem_cache.unified_memory_pool")
    assert getattr(ours, "__ukv_dropin__", False) and ours is not theirs
    return {"sglang 0.5.16": sglang_side, "ukv drop-in": Trace(ours, args)}


class Event:
    """A forward's completion event (CUDA: a real event; CPU: completes at once)."""

    def __init__(self, device: str) -> None:
        import torch

        self._ev = torch.cuda.Event() if device == "cuda" else None
        if self._ev is not None:
            self._ev.record()

    def query(self) -> bool:
        return True if self._ev is None else self._ev.query()


class Trace:
    """The scheduler's calls on one side, with the live requests' virtual tokens."""

    def __init__(self, module: Any, args: argparse.Namespace) -> None:
        import torch

        self.torch = torch
        self.args = args
        self.dev = args.device
        ps = args.page_size
        ctx = args.window * 4
        tokens = args.requests * ctx
        self.bundle = module.init_unified_swa_pools(
            device=self.dev,
            kv_cache_dtype=torch.bfloat16,
            head_num=8,
            head_dim=128,
            v_head_dim=128,
            swa_head_num=8,
            swa_head_dim=128,
            swa_v_head_dim=128,
            page_size=ps,
            start_layer=0,
            end_layer=5,
            # As many SWA as full layers: SGLang 0.5.16 sizes the SWA side's table by its
            # own page count, which must then cover full's ids (its known defect 1).
            swa_attention_layer_ids=[0, 2, 4],
            full_attention_layer_ids=[1, 3, 5],
            full_max_total_num_tokens=tokens,
            swa_max_total_num_tokens=tokens // 2,
            enable_memory_saver=False,
            need_sort=False,
            forward_stream=None,
            lazy_compaction=args.lazy,
        )
        self.alloc = self.bundle.token_to_kv_pool_allocator
        self.gen = torch.Generator().manual_seed(0)
        self.reqs: list[Any] = []  # per request: virtual tokens (host int64)
        self.swa_done: list[int] = []  # per request: tokens already released on SWA

    def _ids(self, t: Any) -> Any:
        return t.to(self.dev)

    def prefill(self, n: int) -> None:
        torch = self.torch
        lens = torch.randint(8, self.args.window, (n,), generator=self.gen)
        pre = torch.zeros(n, dtype=torch.int64)
        out = self.alloc.alloc_extend(
            self._ids(pre),
            pre,
            self._ids(lens),
            lens,
            self._ids(torch.full((n,), -1)),
            int(lens.sum()),
        )
        assert out is not None, "the pool is too small for the trace"
        for part in torch.split(out.cpu(), lens.tolist()):
            self.reqs.append(part)
            self.swa_done.append(0)

    def step(self) -> None:
        torch = self.torch
        last = torch.stack([r[-1] for r in self.reqs])
        seq = torch.tensor([r.numel() + 1 for r in self.reqs], dtype=torch.int64)
        new = self.alloc.alloc_decode(self._ids(seq), seq, self._ids(last))
        assert new is not None, "the pool is too small for the trace"
        new_cpu = new.cpu()
        self.reqs = [torch.cat([r, n.view(1)]) for r, n in zip(self.reqs, new_cpu)]
        live = self._ids(torch.cat(self.reqs))
        self.alloc.translate_kv_loc(live)
        self.alloc.translate_loc_from_full_to_swa(live)
        if self.args.lazy:
            self.alloc.set_inflight_forward(Event(self.dev), new)
            self.alloc.flush_opportunistic()

    def finish_one(self) -> None:
        ps, win = self.args.page_size, self.args.window
        self.alloc.free_group_begin()
        for i, r in enumerate(self.reqs):
            out_of_window = ((r.numel() - win) // ps) * ps
            if out_of_window > self.swa_done[i]:
                self.alloc.free_swa(self._ids(r[self.swa_done[i] : out_of_window]))
                self.swa_done[i] = out_of_window
        done = self.reqs.pop(0)
        self.swa_done.pop(0)
        self.alloc.free(self._ids(done))
        self.alloc.free_group_end()
        self.prefill(1)

    def round(self) -> float:
        """One round: prefill, steps, finishes; host µs per step. Frees all at the end."""
        torch = self.torch
        self.prefill(self.args.requests)
        t0 = time.perf_counter()
        for s in range(self.args.steps):
            self.step()
            if (s + 1) % self.args.finish_every == 0:
                self.finish_one()
        if self.dev == "cuda":
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        for r in self.reqs:
            self.alloc.free(self._ids(r))
        self.reqs, self.swa_done = [], []
        return dt / self.args.steps * 1e6


def main() -> None:
    args = _args()
    _prepare(args)
    import torch

    torch.set_num_threads(1)
    sides = _sides(args)
    for trace in sides.values():
        trace.round()  # warm-up (compiles Triton kernels)
    results: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(args.rounds):
        for name, trace in sides.items():  # interleaved
            results[name].append(trace.round())
    for name, trace in sides.items():
        left = trace.alloc.full_attn_allocator.allocated_count()
        assert left == 0, f"{name}: {left} tokens still allocated after the trace"
    med = {name: statistics.median(v) for name, v in results.items()}
    ratio = med["sglang 0.5.16"] / med["ukv drop-in"]
    lines = [
        f"SGLang SWA-hybrid allocator path, {args.device}, page size {args.page_size}, "
        f"{'lazy' if args.lazy else 'eager'}, {args.requests} requests, {args.steps} steps, "
        f"window {args.window}, median of {args.rounds} round(s)",
        "",
        "| side | host µs per step | rounds (µs) |",
        "|---|---|---|",
    ]
    for name, v in results.items():
        lines.append(f"| {name} | {med[name]:.1f} | {', '.join(f'{x:.1f}' for x in v)} |")
    lines += ["", f"SGLang ÷ drop-in: {ratio:.2f}x"]
    if args.device == "cpu":
        lines.append("(CPU under TRITON_INTERPRET=1: a smoke run, not a comparison)")
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        from harness import command, ukv_commit, utc_now

        cmd = command("bench_sglang_dropin.py", None)
        head = f"{utc_now()}, ukv {ukv_commit()}, torch {torch.__version__}\n\n```\n{cmd}\n```"
        args.out.write_text(f"{head}\n\n{text}\n")


if __name__ == "__main__":
    main()
