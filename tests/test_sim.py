"""The capacity simulator: traces, baseline arithmetic, determinism, the CLI."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from ukv import models
from ukv.cli import main, parse_bytes
from ukv.errors import ArgumentError
from ukv.hybrid.swa import SWAHybridAllocator
from ukv.sim import baselines, engine, traces
from ukv.sim.backends import (
    SplitBackend,
    UnifiedBackend,
    sglang_default_share,
)

QWEN = models.load("Qwen3-Next-80B-A3B")  # 24,576 B/token, 77,266,944 B/state
GPT_OSS = models.load("gpt-oss-120b")  # 36,864 B/token both sides, window 128
STATE, KV = QWEN.state_bytes_per_request(), QWEN.kv_bytes_per_token()
SMALL_SWEEP = (0.2, 0.4, 0.6, 0.8)
HAS_MPL = importlib.util.find_spec("matplotlib") is not None


def _one(n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.zeros(n, np.int64), np.zeros(n, np.int64)


# ----- traces -------------------------------------------------------------------------------


def test_generators_are_seeded_and_in_range():
    a, b = traces.chat(500, seed=3), traces.chat(500, seed=3)
    assert np.array_equal(a.arrival, b.arrival) and np.array_equal(a.prompt_len, b.prompt_len)
    assert not np.array_equal(a.prompt_len, traces.chat(500, seed=4).prompt_len)
    assert a.prompt_len.min() >= 1024 and a.prompt_len.max() <= 4096
    long = traces.long(100)
    assert long.prompt_len.min() >= 32 * 1024 and long.prompt_len.max() <= 128 * 1024
    ph = traces.phase(1000)
    assert len(ph) == 1000 and np.all(np.diff(ph.arrival) >= 0)
    assert (ph.prompt_len >= 32 * 1024).any() and (ph.prompt_len <= 4096).any()


def test_jsonl_round_trip_sorts_and_names_bad_lines(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text(
        '{"arrival": 2.0, "prompt_len": 10, "output_len": 3}\n\n'
        '{"arrival": 0.5, "prompt_len": 7, "output_len": 1}\n'
    )
    t = traces.load_jsonl(p)
    assert t.arrival.tolist() == [0.5, 2.0] and t.prompt_len.tolist() == [7, 10]
    out = tmp_path / "u.jsonl"
    t.to_jsonl(out)
    assert traces.make(str(out)).output_len.tolist() == [1, 3]
    p.write_text('{"arrival": 0, "prompt_len": 0, "output_len": 3}\n')
    with pytest.raises(ArgumentError, match="line 1"):
        traces.load_jsonl(p)
    p.write_text("not json\n")
    with pytest.raises(ArgumentError, match="line 1"):
        traces.load_jsonl(p)
    with pytest.raises(ArgumentError, match="no such file"):
        traces.load_jsonl(tmp_path / "missing.jsonl")
    with pytest.raises(ArgumentError, match="bad trace 'bogus'"):
        traces.make("bogus", 10)


# ----- baselines' arithmetic ------------------------------------------------------------


def test_static_split_counts_slots_and_pages():
    total = 10 * STATE + 100 * 16 * KV  # exactly 10 states and 100 pages
    share = 10 * STATE / total + 1e-9
    b = SplitBackend(QWEN, total, share, 16, "s")
    assert (b.other_cap, b.full_cap) == (10, 100)
    assert all(b.admit(i) for i in range(10)) and not b.admit(10)
    old, _ = _one(1)
    assert b.grow(np.array([0]), old, np.array([1600]))  # 100 pages
    assert not b.grow(np.array([1]), old, np.array([1]))  # one more page: over
    b.release(np.array([0]), np.array([1600]))
    assert (b.full_used, b.other_used) == (0, 9)


def test_static_split_swa_window_slides_after_the_chunk():
    page_bytes = 16 * GPT_OSS.swa_bytes_per_token()
    total = 2000 * page_bytes
    b = SplitBackend(GPT_OSS, total, 0.5, 16, "s")  # 1000 SWA pages, 1000 full pages
    assert (b.other_cap, b.full_cap) == (1000, 1000)
    z, _ = _one(1)
    assert b.grow(np.array([0]), z, np.array([8192]))  # 512 pages on each side at the peak
    assert (b.full_used, b.other_used) == (512, 128 // 16 + 1)  # the window + one page stay
    assert not b.grow(np.array([1]), z, np.array([16 * 992]))  # SWA peak 992 + 9 > 1000


def test_sglang_default_shares():
    assert sglang_default_share(QWEN) == pytest.approx(0.9 / 1.9)
    # swa_full_tokens_ratio 0.8 with equal bytes per token: 0.8 / 1.8 of the bytes.
    assert sglang_default_share(GPT_OSS) == pytest.approx(0.8 / 1.8)


def test_unified_backend_counts_moves_and_returns_everything():
    b = UnifiedBackend(QWEN, 4 << 30, 16, 8192)
    z = np.zeros(3, np.int64)
    assert all(b.admit(i) for i in range(3))
    assert b.grow(np.arange(3), z, np.array([100, 2000, 33]))
    assert b.usage() == ((7 + 125 + 3) * 16 * KV, 3 * STATE)
    b.release(np.array([0]), np.array([100]))  # not the top: compaction moves pages
    b.release(np.array([1, 2]), np.array([2000, 33]))
    assert b.usage() == (0, 0) and b.bytes_moved() > 0
    assert b.full.allocated_count() == 0 and b.other.allocated_count() == 0


def test_unified_swa_binds_both_sides_and_releases_past_the_window():
    b = UnifiedBackend(GPT_OSS, 2 << 30, 16, 8192)
    assert b.pool.owner_of("swa") == "full" and isinstance(b.alloc, SWAHybridAllocator)
    page = 16 * GPT_OSS.kv_bytes_per_token()  # both sides 36,864 B/token
    win = 128 // 16 + 1
    z = np.zeros(2, np.int64)
    assert b.admit(0) and b.admit(1)
    # One composite call binds 512 + 3 pages on both sides; the long request's SWA side
    # then slides to its window in the pool itself (the short one is inside its window).
    assert b.grow(np.arange(2), z, np.array([8192, 40]))
    assert b.full.allocated_count() == (512 + 3) * 16
    assert b.other.allocated_count() == (win + 3) * 16
    assert b.usage() == ((512 + 3) * page, (win + 3) * page)
    assert b.bytes_freed == (512 - win) * page
    b.release(np.array([1, 0]), np.array([40, 8192]))
    assert b.full.allocated_count() == 0 and b.other.allocated_count() == 0
    assert b.usage() == (0, 0) and b.bytes_freed == 2 * (512 + 3) * page
    # Admission: one page of floor, 3,639 pages of gap; a window (9 pages, both sides)
    # plus 3,630 full pages fill it exactly.
    assert b.alloc.available_size() == (3639 // 2) * 16
    assert b.fits(1, 3630 * 16) and not b.fits(1, 3630 * 16 + 1)
    assert b.fits(0, 3639 * 16) and not b.fits(0, 3639 * 16 + 1)


def test_unified_swa_side_stays_within_the_windows_along_a_run():
    win = 128 // 16 + 1

    class Checked(UnifiedBackend):
        peak = 0

        def grow(self, rids, old, new):
            ok = super().grow(rids, old, new)
            # The pool's own SWA count, not the backend's bookkeeping: a slide that did
            # not release the SWA side in the pool would leave it above the windows.
            live = self.other.allocated_count() // 16
            assert live == self._other_live <= win * len(self.swa)
            assert self.full.allocated_count() // 16 == self._full_live
            self.peak = max(self.peak, live)
            return ok

    b = Checked(GPT_OSS, 2 << 30, 16, 8192)
    run = engine.simulate(traces.chat(80, seed=5), b)
    assert run.rejected == 0 and np.isfinite(run.finished_at).all()
    assert b.peak > 0 and b.usage() == (0, 0) and b.other.allocated_count() == 0
    swa_page = 16 * GPT_OSS.swa_bytes_per_token()
    assert (run.timeline[:, 2] <= run.timeline[:, 3] * win * swa_page).all()


# ----- the loop -----------------------------------------------------------------------------


def test_every_request_completes_or_is_rejected():
    t = traces.Trace("t", np.zeros(3), np.array([100, 10**7, 200]), np.array([5, 5, 5]))
    run = engine.simulate(t, UnifiedBackend(QWEN, 4 << 30, 16, 1024))
    assert run.rejected == 1 and np.isnan(run.finished_at[1])
    assert run.generated == 10 and not np.isnan(run.finished_at[[0, 2]]).any()


def test_same_seed_same_json():
    cols = ("ukv", "sglang-default", "oracle")
    a = baselines.compare(QWEN, 4 << 30, traces.phase(150, seed=7), sweep=(0.5,), layouts=cols)
    b = baselines.compare(QWEN, 4 << 30, traces.phase(150, seed=7), sweep=(0.5,), layouts=cols)
    assert json.dumps(a.summaries, sort_keys=True) == json.dumps(b.summaries, sort_keys=True)
    assert a.summaries["ukv"]["completed"] == 150


def test_unified_matches_the_oracle_on_a_stationary_trace():
    # Radix cache off and the fixed clock (the pure capacity question): the unified pool
    # pays one state of reserved floor that the static splits do not, so on tiny pools it
    # only ties.
    c = baselines.compare(QWEN, 8 << 30, traces.chat(400, seed=7), sweep=SMALL_SWEEP,
                          cache=False, layouts=("ukv", "sglang-default", "oracle"))  # fmt: skip
    assert c.summaries["ukv"]["completed"] == 400
    assert c.ratio("oracle") >= 1.0
    assert c.ratio("sglang-default") >= 1.0


# ----- CLI ----------------------------------------------------------------------------------


def test_parse_bytes():
    assert parse_bytes("40GiB") == 40 << 30 and parse_bytes("512 MiB") == 512 << 20
    assert parse_bytes("1e9") == 10**9 and parse_bytes("2G") == 2 * 10**9
    for bad in ("", "-1GiB", "40 parsecs", "0"):
        with pytest.raises(ArgumentError, match="bad memory size"):
            parse_bytes(bad)


def test_cli_plan(capsys):
    assert main(["plan", "--model", "Jamba-1.5-Mini", "--memory", "8GiB", "--tp", "2"]) == 0
    out = capsys.readouterr().out
    assert "unified pool" in out and "sglang-default" in out and "131,072" in out
    assert main(["plan", "--model", "Jamba-1.5-Mini", "--memory", "8 furlongs"]) == 2
    assert "bad memory size '8 furlongs'" in capsys.readouterr().err


def test_cli_simulate(tmp_path, capsys):
    js, png = tmp_path / "s.json", tmp_path / "s.png"
    argv = ["simulate", "--model", "gpt-oss-120b", "--memory", "2GiB", "--trace", "chat",
            "--requests", "60", "--json", str(js), "--no-progress", "--clock", "fixed",
            "--grid", "coarse", "--layouts", "ukv,sglang-default,oracle,vllm"]  # fmt: skip
    if HAS_MPL:
        argv += ["--plot", str(png)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    for label in ("ukv", "sglang-default", "oracle", "vllm"):
        assert label in out
    summary = json.loads(js.read_text())
    assert summary["layouts"]["ukv"]["completed"] == 60
    assert summary["clock"]["name"] == "fixed" and summary["prefix_cache"]
    if HAS_MPL:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ----- ratios only between runs that served the same requests ------------------------------


def _summary(served: float, rejected: int, completed: int = 10) -> dict:
    return {"served_tok_s": served, "rejected": rejected, "completed": completed}


def test_a_run_with_rejections_enters_no_ratio():
    c = baselines.Comparison(
        {
            "ukv": _summary(100.0, 0),
            "sglang-default": _summary(150.0, 2, 8),
            "oracle": _summary(50.0, 0),
        },  # fmt: skip
        {},
        0.5,
    )
    # The split "served" more only because it dropped two requests: no ratio, a failure.
    assert c.ratio("sglang-default") is None and c.ratio("oracle") == 2.0
    assert c.ratios() == {"sglang-default": None, "oracle": 2.0}
    assert c.failures() == {"sglang-default": "2 of 10 requests rejected"}


def _row(trace: str, ratio: float | None, unified_rejected: int = 0) -> dict:
    return {"model": "m", "trace": trace, "kind": "mamba",
            "layouts": {"ukv": {"rejected": unified_rejected}},
            "ratios": {"oracle": ratio, "sglang-default": 2.0, "vllm": 1.1}}  # fmt: skip


def test_goals_leave_out_failed_runs_and_fail_when_unified_rejects():
    g = baselines.goals([_row("chat", 1.2), _row("long", None)])
    stationary = g["ukv >= oracle on stationary traces"]
    assert stationary["met"] and stationary["runs"] == 1 and stationary["excluded"] == ["m / long"]
    g = baselines.goals([_row("chat", 1.2), _row("long", None, unified_rejected=1)])
    assert not g["ukv >= oracle on stationary traces"]["met"]


def test_oracle_never_picks_a_split_that_rejects_requests():
    # 4 GiB: at a 0.8 state share the full side holds ~35K tokens, so the 100K-token
    # request is rejected there while the chat requests run 4x wider; at 0.2 it fits.
    chat = traces.chat(150, seed=2)
    t = traces.Trace(
        "mix",
        np.append(chat.arrival, 0.0)[np.r_[150, :150]],
        np.append(chat.prompt_len, 100_000)[np.r_[150, :150]],
        np.append(chat.output_len, 8)[np.r_[150, :150]],
    )
    assert not SplitBackend(QWEN, 4 << 30, 0.8, 16, "s").fits_alone(100_008)
    c = baselines.compare(QWEN, 4 << 30, t, sweep=(0.2, 0.8), layouts=("ukv", "sglang-default",
                          "oracle"), cache=False)  # fmt: skip
    assert c.summaries["oracle"]["rejected"] == 0 and c.oracle_share < 0.8
    assert dict(c.sweep)[0.8] > dict(c.sweep)[c.oracle_share]  # it served more, by dropping one
    assert c.ratio("oracle") is not None
    assert c.summaries["sglang-default"]["label"] == baselines.LAYOUTS["sglang-default"].text
