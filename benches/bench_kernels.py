"""Kernel bench (BENCHMARKS.md, suite 3): ukv's kernels against the copy ceiling and peers.

Everything is measured side by side in one run, because the figures that matter are
ratios: a page move or a K/V store as a fraction of a contiguous ``Tensor.copy_`` of the
same byte count (bytes read + written), next to the naive torch peer.

- move: one-launch page moves of 16 KiB .. 4 MiB pages (random disjoint src/dst pages,
  about ``--move-bytes`` moved per plan) vs ``index_select`` + ``index_copy_`` on rows.
- store: K/V stores of 4K, 64K and 256K tokens at random physical slots of a paged,
  multi-layer pool vs advanced-index assignment ``k_view[page, tok] = k``.
- translate: 256 and 64K ids, host time per call (``time.perf_counter`` over many calls,
  one synchronize at the end) and device time, vs the torch op chain; plus a CUDA-graph
  capture and replay check.

Usage (from the repository root)::

    PYTHONPATH=python python benches/bench_kernels.py --out benches/results/kernels.md

writes the markdown table there (and prints it) and the raw numbers beside it as JSON.
``--sweep`` also times the move and store kernels over their tiling parameters. On a
machine without CUDA it prints "needs CUDA" and exits 0.
"""

from __future__ import annotations

import argparse
import functools
import platform
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import command, gpu_versions, host_us_per_call, utc_now, write_results  # noqa: E402

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB
PAGE_SIZES_BYTES = (16 * KIB, 64 * KIB, 256 * KIB, 1 * MIB, 4 * MIB)
STORE_BATCHES = (4 * KIB, 64 * KIB, 256 * KIB)
TRANSLATE_IDS = (256, 64 * KIB)  # a decode batch; a large prefill
TRANSLATE_HOST_CALLS = 2000
STORE_LOOP_CALLS = 200

# Store geometry: a Llama-like full-attention layer (8 KV heads x 128, bf16), 16-token
# pages, 4 layers per page envelope so the views are strided like the pool's.
STORE_HEADS, STORE_HEAD_DIM, STORE_PAGE_SIZE, STORE_LAYERS = 8, 128, 16, 4
STORE_DTYPE = torch.bfloat16
STORE_POOL_FACTOR = 2  # pool slots per stored token, so the slots are scattered

TRANSLATE_PAGE_SIZE = 16
TRANSLATE_NUM_PAGES = 256 * KIB

MOVE_SWEEP = [  # (MOVE_TILE_BYTES, MOVE_TILES, MOVE_NUM_WARPS)
    (tile, tiles, warps)
    for tile in (2 * KIB, 4 * KIB, 8 * KIB, 16 * KIB)
    for tiles in (1, 2, 4, 8)
    for warps in (4, 8)
]
STORE_SWEEP = [  # (STORE_TILE_BYTES, STORE_NUM_WARPS)
    (tile, warps) for tile in (2 * KIB, 4 * KIB, 8 * KIB, 16 * KIB) for warps in (2, 4, 8)
]


# ------------------------------------------------------------------------------ timing


def _bench_ms(fn: Callable[[], object]) -> float:
    """Median device time of ``fn`` in ms (``do_bench`` flushes L2 between runs)."""
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median"))


def _gbps(bytes_moved: int, ms: float) -> float:
    return bytes_moved / (ms * 1e-3) / 1e9


def _graph_ms(fn: Callable[[], object]) -> float:
    """Device time of ``fn`` captured in a CUDA graph (no host launch cost in the way)."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return _bench_ms(graph.replay)


def _copy_ceiling_ms(num_bytes: int) -> float:
    """Contiguous ``copy_`` of ``num_bytes`` (the ceiling for everything here)."""
    src = torch.empty(num_bytes, dtype=torch.uint8, device="cuda")
    ms = _bench_ms(functools.partial(torch.empty_like(src).copy_, src))
    torch.cuda.empty_cache()
    return ms


# ------------------------------------------------------------------------------- move


def _move_plan(page_bytes: int, move_bytes: int):
    """A buffer and a plan of random disjoint (src, dst) pages moving ``move_bytes``."""
    num_pairs = max(1, move_bytes // page_bytes)
    num_pages = 2 * num_pairs + 2
    buf = torch.randint(0, 256, (num_pages * page_bytes,), dtype=torch.uint8, device="cuda")
    pages = torch.randperm(num_pages, device="cuda")
    return buf, pages[:num_pairs].contiguous(), pages[num_pairs : 2 * num_pairs].contiguous()


def _check_move(buf, page_bytes, src, dst) -> None:
    from ukv import ops, reference

    expected = buf.clone()
    reference.move_pages_ref(expected, page_bytes, src, dst)
    ops.move_pages(buf, page_bytes, src, dst)
    if not torch.equal(buf, expected):
        raise AssertionError(f"move_pages differs from its reference at {page_bytes} B pages")


def bench_move(move_bytes: int) -> list[dict]:
    from ukv import ops

    rows = []
    for page_bytes in PAGE_SIZES_BYTES:
        buf, src, dst = _move_plan(page_bytes, move_bytes)
        _check_move(buf, page_bytes, src, dst)
        moved = src.numel() * page_bytes
        kernel_ms = _bench_ms(functools.partial(ops.move_pages, buf, page_bytes, src, dst))
        naive_ms = _bench_ms(functools.partial(_naive_move, buf.view(-1, page_bytes), src, dst))
        copy_ms = _copy_ceiling_ms(moved)
        rows.append(
            {
                "page_bytes": page_bytes,
                "pages": src.numel(),
                "bytes_moved": moved,
                "copy_ms": copy_ms,
                "kernel_ms": kernel_ms,
                "naive_ms": naive_ms,
                "copy_gbps": _gbps(2 * moved, copy_ms),
                "kernel_gbps": _gbps(2 * moved, kernel_ms),
                "naive_gbps": _gbps(2 * moved, naive_ms),
            }
        )
        torch.cuda.empty_cache()
    return rows


def _naive_move(pages: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> None:
    """The naive peer: gather the page rows, then scatter them."""
    pages.index_copy_(0, dst, pages.index_select(0, src))


def sweep_move(move_bytes: int) -> list[dict]:
    """Time the move kernel over its tiling constants (patched into ``ukv.ops``)."""
    from ukv import ops

    saved = (ops.MOVE_TILE_BYTES, ops.MOVE_TILES, ops.MOVE_NUM_WARPS)
    rows = []
    try:
        for page_bytes in PAGE_SIZES_BYTES:
            buf, src, dst = _move_plan(page_bytes, move_bytes)
            moved = src.numel() * page_bytes
            for tile, tiles, warps in MOVE_SWEEP:
                ops.MOVE_TILE_BYTES, ops.MOVE_TILES, ops.MOVE_NUM_WARPS = tile, tiles, warps
                ms = _bench_ms(functools.partial(ops.move_pages, buf, page_bytes, src, dst))
                rows.append(
                    {
                        "page_bytes": page_bytes,
                        "tile_bytes": tile,
                        "tiles": tiles,
                        "num_warps": warps,
                        "gbps": _gbps(2 * moved, ms),
                    }
                )
            torch.cuda.empty_cache()
    finally:
        ops.MOVE_TILE_BYTES, ops.MOVE_TILES, ops.MOVE_NUM_WARPS = saved
    return rows


# ------------------------------------------------------------------------------ store


def _store_setup(num_tokens: int):
    """A paged multi-layer pool buffer, layer 1's (K, V) views, loc, k and v."""
    itemsize = STORE_DTYPE.itemsize
    row = STORE_HEADS * STORE_HEAD_DIM  # elements, K and V alike
    num_pages = STORE_POOL_FACTOR * num_tokens // STORE_PAGE_SIZE
    page = STORE_LAYERS * STORE_PAGE_SIZE * 2 * row
    raw = torch.zeros(num_pages * page * itemsize, dtype=torch.uint8, device="cuda")
    typed = raw.view(STORE_DTYPE)
    shape = (num_pages, STORE_PAGE_SIZE, STORE_HEADS, STORE_HEAD_DIM)
    strides = (page, row, STORE_HEAD_DIM, 1)
    k_offset = 1 * STORE_PAGE_SIZE * 2 * row
    k_view = typed.as_strided(shape, strides, k_offset)
    v_view = typed.as_strided(shape, strides, k_offset + STORE_PAGE_SIZE * row)
    loc = torch.randperm(num_pages * STORE_PAGE_SIZE, device="cuda")[:num_tokens]
    k = torch.randn(num_tokens, STORE_HEADS, STORE_HEAD_DIM, device="cuda", dtype=STORE_DTYPE)
    v = torch.randn_like(k)
    return raw, k_view, v_view, loc, k, v


def _check_store(raw, k_view, v_view, loc, k, v) -> None:
    from ukv import ops

    ops.store_kv(k_view, v_view, loc, k, v)
    page, tok = loc // STORE_PAGE_SIZE, loc % STORE_PAGE_SIZE
    if not (torch.equal(k_view[page, tok], k) and torch.equal(v_view[page, tok], v)):
        raise AssertionError(f"store_kv wrote wrong rows for {loc.numel()} tokens")


def _store_peer(k_view, v_view, loc, k, v) -> None:
    """The torch peer: advanced-index assignment, as SGLang's fallback store does."""
    page, tok = loc // STORE_PAGE_SIZE, loc % STORE_PAGE_SIZE
    k_view[page, tok] = k
    v_view[page, tok] = v


def bench_store() -> list[dict]:
    from ukv import ops

    rows = []
    for num_tokens in STORE_BATCHES:
        raw, k_view, v_view, loc, k, v = _store_setup(num_tokens)
        _check_store(raw, k_view, v_view, loc, k, v)
        payload = k.numel() * k.element_size() + v.numel() * v.element_size()
        kernel = functools.partial(ops.store_kv, k_view, v_view, loc, k, v)
        kernel_ms = _bench_ms(kernel)
        peer_ms = _bench_ms(functools.partial(_store_peer, k_view, v_view, loc, k, v))
        copy_ms = _copy_ceiling_ms(payload)
        rows.append(
            {
                "tokens": num_tokens,
                "bytes_stored": payload,
                "copy_ms": copy_ms,
                "kernel_ms": kernel_ms,
                "kernel_loop_us": host_us_per_call(kernel, STORE_LOOP_CALLS),
                "kernel_graph_ms": _graph_ms(kernel),
                "peer_ms": peer_ms,
                "copy_gbps": _gbps(2 * payload, copy_ms),
                "kernel_gbps": _gbps(2 * payload, kernel_ms),
                "peer_gbps": _gbps(2 * payload, peer_ms),
            }
        )
        del raw
        torch.cuda.empty_cache()
    return rows


def sweep_store() -> list[dict]:
    from ukv import ops

    saved = (ops.STORE_TILE_BYTES, ops.STORE_NUM_WARPS)
    rows = []
    try:
        for num_tokens in STORE_BATCHES:
            raw, k_view, v_view, loc, k, v = _store_setup(num_tokens)
            payload = k.numel() * k.element_size() + v.numel() * v.element_size()
            for tile, warps in STORE_SWEEP:
                ops.STORE_TILE_BYTES, ops.STORE_NUM_WARPS = tile, warps
                ms = _bench_ms(functools.partial(ops.store_kv, k_view, v_view, loc, k, v))
                rows.append(
                    {
                        "tokens": num_tokens,
                        "tile_bytes": tile,
                        "num_warps": warps,
                        "gbps": _gbps(2 * payload, ms),
                    }
                )
            del raw
            torch.cuda.empty_cache()
    finally:
        ops.STORE_TILE_BYTES, ops.STORE_NUM_WARPS = saved
    return rows


# -------------------------------------------------------------------------- translate


def _translate_inputs(num_ids: int):
    ps = TRANSLATE_PAGE_SIZE
    v2p = torch.randperm(TRANSLATE_NUM_PAGES, device="cuda")
    v2p[::7] = -1  # some tombstones
    ids = torch.randint(0, TRANSLATE_NUM_PAGES * ps, (num_ids,), device="cuda")
    return ids, v2p, ps


def _translate_chain(ids, v2p, ps) -> torch.Tensor:
    """The torch op chain the kernel replaces."""
    return (v2p[ids // ps] * ps + ids % ps).clamp_(min=0)


def _graph_capture_ok(ids, v2p, ps) -> bool:
    from ukv import ops, reference

    out = torch.zeros_like(ids)
    ops.translate(ids, v2p, ps, out=out)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ops.translate(ids, v2p, ps, out=out)
    ids.copy_(ids.flip(0))
    out.zero_()
    graph.replay()
    torch.cuda.synchronize()
    return bool(torch.equal(out, reference.translate_ref(ids, v2p, ps)))


def bench_translate() -> list[dict]:
    from ukv import ops

    rows = []
    for num_ids in TRANSLATE_IDS:
        ids, v2p, ps = _translate_inputs(num_ids)
        if not torch.equal(ops.translate(ids, v2p, ps), _translate_chain(ids, v2p, ps)):
            raise AssertionError("translate differs from the torch op chain on valid ids")
        kernel = functools.partial(ops.translate, ids, v2p, ps, out=torch.empty_like(ids))
        chain = functools.partial(_translate_chain, ids, v2p, ps)
        rows.append(
            {
                "ids": num_ids,
                "page_size": ps,
                "kernel_host_us": host_us_per_call(kernel, TRANSLATE_HOST_CALLS),
                "chain_host_us": host_us_per_call(chain, TRANSLATE_HOST_CALLS),
                "kernel_device_us": 1e3 * _bench_ms(kernel),
                "chain_device_us": 1e3 * _bench_ms(chain),
                "cuda_graph_ok": _graph_capture_ok(ids, v2p, ps),
            }
        )
    return rows


# ----------------------------------------------------------------------------- report


def _size(num_bytes: int) -> str:
    for unit, scale in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if num_bytes >= scale:
            return f"{num_bytes / scale:g} {unit}"
    return f"{num_bytes} B"


def _move_table(rows: list[dict]) -> list[str]:
    lines = [
        (
            "| page | pages | moved | copy_ GB/s | move_pages GB/s | of copy_ "
            "| index_select+index_copy_ GB/s | of copy_ |"
        ),
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {_size(r['page_bytes'])} | {r['pages']} | {_size(r['bytes_moved'])} "
            f"| {r['copy_gbps']:.0f} | {r['kernel_gbps']:.0f} "
            f"| {r['kernel_gbps'] / r['copy_gbps']:.0%} | {r['naive_gbps']:.0f} "
            f"| {r['naive_gbps'] / r['copy_gbps']:.0%} |"
        )
    return lines


def _store_table(rows: list[dict]) -> list[str]:
    lines = [
        (
            "| tokens | K+V bytes | copy_ GB/s | store_kv GB/s | of copy_ | store_kv µs "
            "| in a CUDA graph µs | µs/call back to back | k_view[page, tok] = k GB/s "
            "| of copy_ | speed-up |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['tokens']} | {_size(r['bytes_stored'])} | {r['copy_gbps']:.0f} "
            f"| {r['kernel_gbps']:.0f} | {r['kernel_gbps'] / r['copy_gbps']:.0%} "
            f"| {1e3 * r['kernel_ms']:.1f} | {1e3 * r['kernel_graph_ms']:.1f} "
            f"| {r['kernel_loop_us']:.1f} | {r['peer_gbps']:.0f} "
            f"| {r['peer_gbps'] / r['copy_gbps']:.0%} | {r['peer_ms'] / r['kernel_ms']:.1f}x |"
        )
    return lines


def _translate_table(rows: list[dict]) -> list[str]:
    lines = [
        (
            "| ids | page size | host µs/call | device µs | torch chain host µs/call "
            "| torch chain device µs | chain host / ukv host | CUDA graph |"
        ),
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['ids']} | {r['page_size']} | {r['kernel_host_us']:.1f} "
            f"| {r['kernel_device_us']:.1f} "
            f"| {r['chain_host_us']:.1f} | {r['chain_device_us']:.1f} "
            f"| {r['chain_host_us'] / r['kernel_host_us']:.1f}x "
            f"| {'ok' if r['cuda_graph_ok'] else 'FAILED'} |"
        )
    return lines


def _sweep_table(rows: list[dict], keys: tuple[str, ...]) -> list[str]:
    lines = ["| " + " | ".join(keys) + " | GB/s |", "|" + "---|" * (len(keys) + 1)]
    for r in rows:
        lines.append("| " + " | ".join(str(r[k]) for k in keys) + f" | {r['gbps']:.0f} |")
    return lines


def _header(argv: list[str]) -> list[str]:
    props = torch.cuda.get_device_properties(0)
    machine = (
        f"{props.name}, {props.multi_processor_count} SMs, "
        f"{props.total_memory / GIB:.0f} GiB; host {platform.node()}"
    )
    method = (
        "GB/s count bytes read + written; median of `triton.testing.do_bench` (L2 flushed); "
        "every ratio is against a contiguous `copy_` of the same byte count, same run."
    )
    return [
        "# ukv kernel bench",
        "",
        f"- command: `{command('bench_kernels.py', argv, prefix='PYTHONPATH=python python')}`",
        f"- machine: {machine}",
        f"- versions: {gpu_versions()}",
        f"- date: {utc_now()}",
        f"- method: {method}",
        "",
    ]


def _section(title: str, run: Callable[[], object], render, results: dict, key: str):
    """Run one bench section; a failure is reported in place instead of ending the run."""
    lines = [f"## {title}", ""]
    try:
        results[key] = run()
        lines += render(results[key])
    except Exception as exc:  # noqa: BLE001 - report the failure, run the other sections
        traceback.print_exc()
        results[key] = {"error": repr(exc)}
        lines.append(f"FAILED: `{exc!r}`")
    torch.cuda.empty_cache()
    return lines + [""]


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benches/results/kernels.md"))
    parser.add_argument("--json", type=Path, default=None, help="default: --out with .json")
    parser.add_argument("--move-bytes", type=int, default=1 * GIB, help="bytes per move plan")
    parser.add_argument("--sweep", action="store_true", help="also sweep tiling parameters")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = _parse(argv)
    if not torch.cuda.is_available():
        print("needs CUDA")
        return 0
    torch.manual_seed(0)
    results: dict = {}
    lines = _header(argv)
    lines += _section(
        "Page moves (one launch per plan)",
        lambda: bench_move(args.move_bytes),
        _move_table,
        results,
        "move",
    )
    lines += _section(
        f"K/V store ({STORE_HEADS}x{STORE_HEAD_DIM} {str(STORE_DTYPE).removeprefix('torch.')}, "
        f"page size {STORE_PAGE_SIZE}, random slots)",
        bench_store,
        _store_table,
        results,
        "store",
    )
    lines += _section("Translate", bench_translate, _translate_table, results, "translate")
    if args.sweep:
        move_keys = ("page_bytes", "tile_bytes", "tiles", "num_warps")
        lines += _section(
            "Sweep: move tiling",
            lambda: sweep_move(args.move_bytes),
            lambda rows: _sweep_table(rows, move_keys),
            results,
            "sweep_move",
        )
        lines += _section(
            "Sweep: store tiling",
            sweep_store,
            lambda rows: _sweep_table(rows, ("tokens", "tile_bytes", "num_warps")),
            results,
            "sweep_store",
        )
    report = "\n".join(lines)
    print(report)
    write_results(args.out, report + "\n", results, json_path=args.json, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
