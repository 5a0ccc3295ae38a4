"""``benches/harness.py``: the shared method of the benches (rounds, calibration, failures)
and the result files, without timing anything real."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from script_loader import load_script


def _load_harness():
    return load_script("benches/harness.py", register=True)


harness = _load_harness()


def _cfg(**kw):
    base = dict(rounds=3, round_s=0.01, warm_iters=2, min_iters=5, max_iters=40)
    return harness.Config(**{**base, **kw})


def test_rounds_interleave_and_calibrate() -> None:
    calls: list[tuple[str, int, int]] = []
    per_op = [0.001, 1e-6, 1.0]  # 10, 10000 and 0.01 ops fill 0.01 s: clamped to [5, 40]

    def warm(j: int, n: int) -> float:
        calls.append(("warm", j, n))
        return per_op[j]

    def timed(j: int, n: int) -> float:
        calls.append(("timed", j, n))
        return n * 2e-6 * (j + 1)

    iters, rounds = harness.interleave(_cfg(), 3, warm, timed)
    assert iters == [10, 40, 5]
    assert calls[:3] == [("warm", 0, 2), ("warm", 1, 2), ("warm", 2, 2)]
    assert [c[1] for c in calls[3:]] == [0, 1, 2] * 3  # contenders alternate every round
    assert rounds == [[pytest.approx(2.0)] * 3, [pytest.approx(4.0)] * 3, [pytest.approx(6.0)] * 3]


def test_a_failing_contender_is_dropped_or_ends_the_run() -> None:
    def warm(j: int, n: int) -> float:
        if j == 0:
            raise RuntimeError("no build")
        return 0.001

    def timed(j: int, n: int) -> float:
        if j == 2 and len(seen) == 1:
            raise ValueError("round 2 broke")
        seen.append(j)
        return 1e-3

    seen: list[int] = []
    errors: dict[int, str] = {}
    iters, rounds = harness.interleave(
        _cfg(), 3, warm, timed, lambda j, exc: errors.setdefault(j, str(exc))
    )
    assert errors == {0: "no build", 2: "round 2 broke"}
    assert iters == [None, 10, None]
    assert [len(r) for r in rounds] == [0, 3, 0]
    with pytest.raises(RuntimeError, match="no build"):
        harness.interleave(_cfg(), 3, warm, timed)


def test_write_results_and_formats(tmp_path: Path) -> None:
    md = tmp_path / "deep" / "r.md"
    harness.write_results(md, "# t\n", {"a": [1, 2]})
    assert md.read_text() == "# t\n"
    assert json.loads(md.with_suffix(".json").read_text()) == {"a": [1, 2]}
    other = tmp_path / "x" / "y.json"
    harness.write_results(md, "# u\n", {"b": 1}, json_path=other, indent=2)
    assert json.loads(other.read_text()) == {"b": 1} and md.read_text() == "# u\n"
    assert harness.fmt_us(None) == "—"
    assert harness.fmt_us(3.14159) == "3.14" and harness.fmt_us(123.45) == "123.5"
    assert harness.command("b.py", ["--quick"]) == "python benches/b.py --quick"


def test_load_peer_skipped_keeps_threads() -> None:
    import torch

    before = torch.get_num_threads()
    assert harness.load_peer(skip=True) == (None, "skipped (--no-peer)")
    assert torch.get_num_threads() == before
