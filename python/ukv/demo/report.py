"""The demo's printed report and its picture of the arena over time (a PNG written with
zlib alone: matplotlib is not a dependency of ukv)."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

from ukv.demo.run import VariantResult

MIB = 1 << 20

#: Colours (RGB) of the picture: a side's live pages, its holes (lazy mode), the free gap.
LIVE = {"up": (31, 119, 180), "down": (255, 127, 14)}
HOLES = {"up": (158, 202, 225), "down": (253, 208, 162)}
GAP = (255, 255, 255)
RULE = (120, 120, 120)


def describe(r: VariantResult) -> list[str]:
    """The report's lines for one variant."""
    pool = r.cache.pool  # type: ignore[attr-defined]
    st = pool.stats()
    run = r.pooled
    other = "recurrent" if r.variant == "mamba" else "sliding-window"
    moved = ", ".join(f"{s.name} {s.pages_moved}" for s in st.sub_pools)
    static = "cannot serve this trace" if r.static_peak is None else f"{r.static_peak} requests"
    how = (
        "bit for bit"
        if r.identical and r.max_logit_diff == 0
        else f"max |Δ| {r.max_logit_diff:.2e}"
    )
    return [
        f"{r.variant}-hybrid: 2 full-attention + 2 {other} layers, {_dtype(r)} cache, "
        f"{'lazy' if r.lazy else 'eager'} compaction, {pool.total_bytes / MIB:.1f} MiB pool on {pool.device}",
        f"  requests served     {len(run.requests)} ({run.tokens} tokens in "
        f"{len(run.schedule.steps)} steps, {run.seconds:.1f} s: {run.tokens / run.seconds:.0f} tokens/s)",
        f"  compactions         {st.compactions} ({st.bytes_moved / MIB:.1f} MiB moved; pages moved: "
        f"{moved}; {max(s.flushes for s in st.sub_pools)} flushes)",
        f"  peak concurrency    {run.schedule.peak_running} requests "
        f"(static split of the same bytes at the trace's mean ratio: {static})",
        f"  identical to reference: {'yes' if r.identical else 'NO'} "
        f"(greedy tokens of every request; logits {how})",
    ]


def _dtype(r: VariantResult) -> str:
    return str(r.dtype).removeprefix("torch.")


def arena_png(results: list[VariantResult], path: Path, height: int = 160) -> None:
    """Draw each run's arena, one panel per run, one column per step: the grow-up side
    from the bottom, the grow-down side from the top, holes lighter, the gap white."""
    steps = max(len(r.pooled.snapshots) for r in results)
    col = max(1, 720 // max(steps, 1))
    width = steps * col
    rows: list[list[tuple[int, int, int]]] = []
    for k, r in enumerate(results):
        if k:
            rows.extend([[RULE] * width] * 3)
        rows.extend(_panel(r, steps, col, height))
    write_png(path, rows)


def _panel(r: VariantResult, steps: int, col: int, height: int) -> list[list[tuple[int, int, int]]]:
    pool = r.cache.pool  # type: ignore[attr-defined]
    page = {n: pool.spec(n).page_bytes(pool.page_size) for n in pool.names}
    grow = {n: pool.spec(n).grow for n in pool.names}
    columns = []
    for snap in r.pooled.snapshots:
        colour = [GAP] * height
        for s in snap.sub_pools:
            live = round(s.live_pages * page[s.name] / pool.total_bytes * height)
            span = round(s.used_bytes / pool.total_bytes * height)
            for y in range(min(span, height)):
                c = LIVE[grow[s.name]] if y < live else HOLES[grow[s.name]]
                colour[y if grow[s.name] == "up" else height - 1 - y] = c
        columns.extend([colour] * col)
    columns.extend([[GAP] * height] * (steps * col - len(columns)))
    # Row 0 of the image is its top: the top of the arena.
    return [[columns[x][height - 1 - y] for x in range(len(columns))] for y in range(height)]


def write_png(path: Path, rows: list[list[tuple[int, int, int]]]) -> None:
    """Write an 8-bit RGB PNG.

    Args:
        path: Output file.
        rows: The image, top row first, each a list of ``(r, g, b)`` of equal length.
    """
    height, width = len(rows), len(rows[0])
    raw = b"".join(b"\x00" + bytes(v for px in row for v in px) for row in rows)

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 9))
    path.write_bytes(png + chunk(b"IEND", b""))
