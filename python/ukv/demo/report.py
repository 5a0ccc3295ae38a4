"""The demo's printed report and its picture of the arena over time.

The picture (matplotlib, Agg backend: no display needed) has one panel per model: x is the
serving step, y the position in the pool in MiB. Full attention grows up from 0, the other side
(Mamba state or sliding-window KV) grows down from the top, the free gap lies between;
their two frontiers are the boundary that moves with the load, and a dashed line marks
where a static split at the trace's mean ratio would put a fixed wall.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ukv.demo.run import VariantResult

MIB = 1 << 20

#: Figure size (inches) per panel and resolution: the PNG is ``FIG_WIDTH * DPI`` wide and
#: ``PANEL_HEIGHT * DPI`` high per model (plus :data:`TITLE_HEIGHT` for the heading).
FIG_WIDTH = 11.0
PANEL_HEIGHT = 3.4
TITLE_HEIGHT = 0.8
DPI = 100

#: Colours by side: live pages, then holes (lazy compaction: freed, not yet compacted).
LIVE = {"up": "tab:blue", "down": "tab:orange"}
HOLES = {"up": "#9ecae1", "down": "#fdd0a2"}
FRONTIER = "black"
STATIC = "tab:red"

#: What the side that grows down holds, by demo variant.
OTHER_SIDE = {"mamba": "Mamba state", "swa": "sliding-window KV"}
MODEL_NAME = {
    "mamba": "Mamba hybrid (2 full-attention + 2 Mamba layers)",
    "swa": "SWA hybrid (2 full-attention + 2 sliding-window layers)",
}


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


def png_size(num_models: int) -> tuple[int, int]:
    """The picture's ``(width, height)`` in pixels for ``num_models`` panels."""
    return round(FIG_WIDTH * DPI), round((TITLE_HEIGHT + PANEL_HEIGHT * num_models) * DPI)


def arena_png(results: list[VariantResult], path: Path) -> None:
    """Write :func:`arena_figure` of ``results`` to ``path`` (PNG, :func:`png_size`)."""
    import matplotlib.pyplot as plt

    fig = arena_figure(results)
    fig.savefig(path)
    plt.close(fig)


def arena_figure(results: list[VariantResult]) -> Any:
    """The figure of each run's arena over time, one titled panel per run.

    Args:
        results: Demo runs (one per model), in panel order.

    Returns:
        A ``matplotlib.figure.Figure`` of :func:`png_size` pixels; the caller closes it.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    width, height = png_size(len(results))
    fig, axes = plt.subplots(
        len(results), 1, figsize=(width / DPI, height / DPI), dpi=DPI, squeeze=False
    )
    for ax, r in zip(axes[:, 0], results):
        _panel(ax, r)
    pool = results[0].cache.pool  # type: ignore[attr-defined]
    fig.suptitle(
        f"ukv demo: each model's cache in a {pool.total_bytes / MIB:.1f} MiB pool of its own, "
        "step by step\n"
        "full attention fills it from the bottom, the other layers' cache from the top; "
        "the boundary between them moves with the load",
        fontsize=11,
    )
    fig.tight_layout()
    return fig


@dataclass
class _Sides:
    """One run's arena per step, in MiB from the bottom of the pool: where each side's live
    bytes end and where its frontier is (past its holes and pages waiting on a forward)."""

    steps: list[int]
    live: dict[str, list[float]]
    frontier: dict[str, list[float]]


def _sides(r: VariantResult) -> _Sides:
    """Per-step edges of the grow-up and grow-down sides of ``r``'s pool."""
    pool = r.cache.pool  # type: ignore[attr-defined]
    total = pool.total_bytes
    grow = {n: pool.spec(n).grow for n in pool.names}
    page = {n: pool.spec(n).page_bytes(pool.page_size) for n in pool.names}
    # The pooled run snapshots the pool after each step that ran a batch.
    steps = [i for i, batch in enumerate(r.pooled.schedule.steps) if batch]
    assert len(steps) == len(r.pooled.snapshots), (len(steps), len(r.pooled.snapshots))
    out = _Sides(steps, {"up": [], "down": []}, {"up": [], "down": []})
    for snap in r.pooled.snapshots:
        for s in snap.sub_pools:
            side = grow[s.name]
            live, span = s.live_pages * page[s.name], s.used_bytes
            out.live[side].append((live if side == "up" else total - live) / MIB)
            out.frontier[side].append((span if side == "up" else total - span) / MIB)
    return out


def _panel(ax: Any, r: VariantResult) -> None:
    """Draw one run's arena on ``ax``: the two sides, the boundary, the static split."""
    total = r.cache.pool.total_bytes / MIB  # type: ignore[attr-defined]
    d = _sides(r)
    handles = _fill_sides(ax, d, total, OTHER_SIDE[r.variant], r.lazy)
    handles += _lines(ax, d, r, total)
    ax.set_xlim(0, len(r.pooled.schedule.steps))
    ax.set_ylim(0, total)
    ax.set_xlabel("serving step (one batched forward each)")
    ax.set_ylabel("position in the pool (MiB)")
    ax.set_title(
        f"{MODEL_NAME[r.variant]}, {'lazy' if r.lazy else 'eager'} compaction: "
        f"peak {r.pooled.schedule.peak_running} requests at once",
        fontsize=10,
    )
    _legend(ax, handles)


def _lines(ax: Any, d: _Sides, r: VariantResult, total: float) -> list[Any]:
    """Draw both frontiers (solid) and the static split (dashed); their legend pairs."""
    (line,) = ax.step(d.steps, d.frontier["up"], where="mid", color=FRONTIER, lw=1.2)
    ax.step(d.steps, d.frontier["down"], where="mid", color=FRONTIER, lw=1.2)
    k, other = r.static_split
    static = (
        "cannot serve this trace" if r.static_peak is None else f"peak {r.static_peak} requests"
    )
    dashed = ax.axhline(total * k / (k + other), color=STATIC, ls="--", lw=1.5)
    return [
        (line, "moving boundary: each side's frontier\n(the free bytes between go to either)"),
        (dashed, f"static split at the trace's mean ratio\n(KV below, the rest above: {static})"),
    ]


def _legend(ax: Any, handles: list[Any]) -> None:
    """The legend, right of the panel (it would hide the arena inside it)."""
    from matplotlib.legend_handler import HandlerTuple

    ax.legend(
        *zip(*handles),
        handler_map={tuple: HandlerTuple(ndivide=None)},  # the holes' two tints side by side
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        fontsize=8,
        frameon=False,
    )


def _fill_sides(ax: Any, d: _Sides, total: float, other: str, lazy: bool) -> list[Any]:
    """Shade each side's live bytes (and, when ``lazy``, its holes in a lighter tint);
    returns ``(handle, label)`` pairs for the legend."""
    up = ax.fill_between(d.steps, 0, d.live["up"], color=LIVE["up"], lw=0, step="mid")
    down = ax.fill_between(d.steps, d.live["down"], total, color=LIVE["down"], lw=0, step="mid")
    out = [
        (up, "full-attention KV (grows up from 0)"),
        (down, f"{other} (grows down from the top)"),
    ]
    if lazy:
        holes = tuple(
            ax.fill_between(d.steps, *edges, color=HOLES[side], lw=0, step="mid")
            for side, edges in (
                ("up", (d.live["up"], d.frontier["up"])),
                ("down", (d.frontier["down"], d.live["down"])),
            )
        )
        out.append((holes, "holes awaiting compaction (lazy mode;\na lighter tint of each side)"))
    return out
