"""The PNG of one comparison (matplotlib, Agg backend: no display needed).

Top: the ukv pool's bytes over time: full attention growing up from 0, the state or SWA
side growing down from the top, the free gap between (their meeting point is the
frontier; with prefix caching, cached KV and states count on their side); dashed lines
mark where the static splits (SGLang's default and the oracle) put their fixed boundary.
Bottom: requests held in memory over simulated time, for every layout.
"""

from __future__ import annotations

from pathlib import Path

from ukv.sim.baselines import Comparison

GIB = float(1 << 30)
COLORS = {
    "ukv": "tab:blue",
    "ukv-marconi": "tab:olive",
    "ukv-vllm": "tab:cyan",
    "sglang-tuned": "tab:orange",
    "sglang-unified": "tab:pink",
    "sglang-radix-off": "tab:gray",
    "jenga": "tab:brown",
    "vllm": "tab:purple",
    "vllm-equal": "mediumpurple",
    "oracle": "tab:green",
    "oracle-phase": "darkgreen",
    "sglang-default": "tab:red",
}


def save(cmp: Comparison, path: str | Path, title: str) -> None:
    """Write the two-panel PNG of ``cmp`` to ``path``.

    Args:
        cmp: A :func:`ukv.sim.baselines.compare` result.
        path: Output ``.png``.
        title: Figure title (model, memory, trace).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bot) = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True, dpi=90)
    _bytes_panel(top, cmp)
    _running_panel(bot, cmp)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _bytes_panel(ax, cmp: Comparison) -> None:  # type: ignore[no-untyped-def]
    run = cmp.runs["ukv"]
    tl = run.timeline
    total = run.total_bytes / GIB
    t, full, other = tl[:, 0], tl[:, 1] / GIB, tl[:, 2] / GIB
    ax.fill_between(t, 0, full, color="tab:blue", alpha=0.55, lw=0, label="ukv: full attention")
    ax.fill_between(
        t, total - other, total, color="tab:orange", alpha=0.55, lw=0, label="ukv: state / SWA"
    )
    for label in ("sglang-default", "oracle"):
        share = cmp.summaries.get(label, {}).get("share")
        if isinstance(share, float):
            y = total * (1 - share)
            ax.axhline(
                y, color=COLORS[label], ls="--", lw=1.2, label=f"{label} split ({share:.0%} state)"
            )
    ax.set_ylim(0, total)
    ax.set_ylabel("GiB")
    ax.legend(loc="upper right", fontsize=7, framealpha=0.8)
    ax.set_title("ukv pool: bytes by side (the frontier floats; splits are fixed)", fontsize=9)


def _running_panel(ax, cmp: Comparison) -> None:  # type: ignore[no-untyped-def]
    for label, run in cmp.runs.items():
        s = cmp.summaries[label]["served_tok_s"]
        ax.plot(
            run.times, run.running, color=COLORS.get(label), lw=1, label=f"{label}: {s:,.0f} tok/s"
        )
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("requests in memory")
    ax.legend(loc="upper right", fontsize=7, framealpha=0.8)
