"""The demo: a hybrid model serving through ukv computes exactly what it computes without.

These runs use the CPU pool's NumPy move path and torch's reference store rather than the
Triton kernels under the interpreter (``TRITON_INTERPRET=0`` for the pool): the kernels
have their own tests against the same references, and hundreds of relocations under the
interpreter would take minutes. What is under test here is the pool's bookkeeping: that
every byte a model wrote is where translation says it is, after every move.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ukv.demo import report
from ukv.demo.run import DemoConfig, run_variant
from ukv.execution.base import PLAN_MOVES
from ukv.execution.host import HostExecutor

SMALL = DemoConfig(num_requests=80, total_bytes=1 << 20)
#: Enough for tens of moves on each side before and after the skipped one.
SABOTAGE = DemoConfig(num_requests=40, total_bytes=1 << 19)


@pytest.fixture(autouse=True)
def _host_path(monkeypatch: pytest.MonkeyPatch):
    """The NumPy move path, and one intra-op thread (the model's ops are tiny)."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _moved(result) -> dict[str, int]:
    return {s.name: s.pages_moved for s in result.cache.pool.stats().sub_pools}


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
@pytest.mark.parametrize("variant", ["mamba", "swa"])
def test_outputs_match_reference_through_many_relocations(variant: str, lazy: bool) -> None:
    r = run_variant(variant, lazy=lazy, device="cpu", demo=SMALL)
    assert r.identical, f"max logit difference {r.max_logit_diff}"
    assert r.max_logit_diff == 0.0
    assert all(len(q.outputs) == q.max_new for q in r.pooled.requests)
    moved = _moved(r)
    # Every side relocated pages many times (measured at this size: 75 to 480 per side).
    assert min(moved.values()) >= 30, moved
    assert r.pooled.schedule.peak_running > 1


@pytest.mark.parametrize("variant", ["mamba", "swa"])
def test_outputs_match_reference_on_the_kernel_path(
    monkeypatch: pytest.MonkeyPatch, variant: str
) -> None:
    """A few requests with the Triton kernels (in the interpreter on CPU): the packed
    executor's moves, the store and translate kernels, as a CUDA pool runs them."""
    if os.environ.get("UKV_TEST_DEVICE", "cpu") != "cpu":
        pytest.skip("Triton was imported without its interpreter; the gpu tests cover this")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    demo = DemoConfig(num_requests=12, total_bytes=1 << 19, max_running=8)
    r = run_variant(variant, lazy=variant == "swa", device="cpu", demo=demo)
    assert type(r.cache.pool._exec).__name__ == "PackedExecutor"
    assert r.identical, f"max logit difference {r.max_logit_diff}"
    assert min(_moved(r).values()) >= 10, _moved(r)


def test_bf16_cache_matches_reference() -> None:
    demo = DemoConfig(num_requests=40, total_bytes=1 << 19)
    r = run_variant("mamba", lazy=False, device="cpu", dtype=torch.bfloat16, demo=demo)
    assert r.identical, f"max logit difference {r.max_logit_diff}"


def _skip_one_move(monkeypatch: pytest.MonkeyPatch, sub_pool: int, after: int) -> list[int]:
    """Make the CPU executor drop the first page move of ``sub_pool`` once ``after`` plans
    with moves on that sub-pool have run; returns a list that records the skipped page."""
    skipped: list[int] = []
    seen = [0]

    def run(self, want_ids=False, last=None):
        flags = self.arena.plan_flags()
        if not flags & self.work_mask:
            return None
        self.prologue(flags)
        if flags & PLAN_MOVES:
            for i, src, dst in self.arena.plan_moves():
                if i == sub_pool and len(src):
                    seen[0] += 1
                    if seen[0] > after and not skipped:
                        skipped.append(int(dst[0]))
                        src, dst = src[1:], dst[1:]
                self._rows[i][dst] = self._rows[i][src]
        return None

    monkeypatch.setattr(HostExecutor, "run", run)
    return skipped


@pytest.mark.parametrize("variant", ["mamba", "swa"])
@pytest.mark.parametrize("side", [0, 1], ids=["full-side", "other-side"])
def test_one_skipped_move_is_caught(
    monkeypatch: pytest.MonkeyPatch, variant: str, side: int
) -> None:
    skipped = _skip_one_move(monkeypatch, side, after=10)
    r = run_variant(variant, lazy=False, device="cpu", demo=SABOTAGE)
    assert skipped, "the sabotage never found a move to skip"
    assert not r.identical


def test_cli_reports_identical_outputs(tmp_path: Path) -> None:
    png = tmp_path / "arena.png"
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    out = subprocess.run(
        [sys.executable, "-m", "ukv", "demo", "--requests", "40", "--png", str(png)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr + out.stdout
    assert "outputs identical to reference: yes" in out.stdout
    assert "mamba-hybrid" in out.stdout and "swa-hybrid" in out.stdout
    assert _png_size(png) == report.png_size(2)


def _png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's header (its IHDR chunk opens at byte 8)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def _legend(ax) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()]


def test_arena_picture_names_what_it_shows(tmp_path: Path) -> None:
    """One titled panel per model with axis labels and a legend naming both sides, the
    moving boundary and the static split; the dashed line sits at the split's ratio."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    demo = DemoConfig(num_requests=24, total_bytes=1 << 19, max_running=8)
    results = [
        run_variant("mamba", lazy=False, device="cpu", demo=demo),
        run_variant("swa", lazy=True, device="cpu", demo=demo),
    ]
    fig = report.arena_figure(results)
    try:
        assert "0.5 MiB pool of its own" in fig.get_suptitle()
        mamba, swa = fig.axes
        assert mamba.get_title().startswith("Mamba hybrid (2 full-attention + 2 Mamba layers)")
        assert "eager compaction" in mamba.get_title()
        assert swa.get_title().startswith("SWA hybrid (2 full-attention + 2 sliding-window")
        assert "lazy compaction" in swa.get_title()
        for ax, other in ((mamba, "Mamba state"), (swa, "sliding-window KV")):
            assert ax.get_xlabel().startswith("serving step")
            assert ax.get_ylabel() == "position in the pool (MiB)"
            assert ax.get_ylim() == (0.0, 0.5)
            labels = _legend(ax)
            assert labels[0] == "full-attention KV (grows up from 0)"
            assert labels[1] == f"{other} (grows down from the top)"
            assert labels[-2].startswith("moving boundary")
            assert labels[-1].startswith("static split at the trace's mean ratio")
        assert not any(t.startswith("holes") for t in _legend(mamba))  # eager: none
        assert any(t.startswith("holes") for t in _legend(swa))
        for ax, r in zip(fig.axes, results):
            k, other_bytes = r.static_split
            (dashed,) = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]
            assert dashed.get_ydata()[0] == pytest.approx(0.5 * k / (k + other_bytes))
    finally:
        plt.close(fig)
    png = tmp_path / "arena.png"
    report.arena_png(results, png)
    assert _png_size(png) == report.png_size(2) == (1100, 760)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("variant", ["mamba", "swa"])
def test_gpu_outputs_match_reference(variant: str, dtype: torch.dtype) -> None:
    r = run_variant(variant, lazy=variant == "swa", device="cuda", dtype=dtype, demo=SMALL)
    assert r.identical, f"max logit difference {r.max_logit_diff}"
    assert min(_moved(r).values()) >= 30
