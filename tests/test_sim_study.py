"""The capacity study end to end, tiny: probes, the main section with its tuned split, the
rate sweep, confidence intervals, and output without machine paths."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load():
    spec = importlib.util.spec_from_file_location("capacity", ROOT / "benches" / "capacity.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["capacity"] = mod  # dataclasses and the worker processes look it up
    spec.loader.exec_module(mod)
    return mod


def test_confidence_interval_is_students_t():
    cap = _load()
    x = cap.ci([1.0, 1.2, 1.1, 1.3, 0.9])
    assert x["mean"] == pytest.approx(1.1) and x["n"] == 5
    half = 2.776 * 0.158114 / 5**0.5  # t(0.975, 4) * sd / sqrt(n)
    assert x["lo"] == pytest.approx(1.1 - half, abs=1e-3)
    assert cap.ci([None, 2.0]) == {"mean": 2.0, "lo": None, "hi": None, "n": 1}
    assert cap._verdict({"mean": 1.2, "lo": 1.05, "hi": 1.3}) == "wins"
    assert cap._verdict({"mean": 1.02, "lo": 0.98, "hi": 1.06}) == "ties"
    assert cap._verdict({"mean": 0.9, "lo": 0.85, "hi": 0.95}) == "LOSES"


@pytest.mark.skipif(not (_load().DATA / "mooncake").is_dir(), reason="needs the shared real traces")
def test_quick_study_runs_end_to_end(tmp_path):
    cap = _load()
    argv = ["--clock", "fixed", "--quick", "--jobs", "1", "--out", str(tmp_path),
            "--models", "Qwen3-Next-80B-A3B", "--traces", "mooncake", "azure",
            "--sections", "main", "rate", "--seeds", "2"]  # fmt: skip
    assert cap.main(argv) == 0
    data = json.loads((tmp_path / "capacity-fixed-quick.json").read_text())
    text = (tmp_path / "capacity-fixed-quick.md").read_text()
    assert "/work/" not in json.dumps(data["meta"]) and "/work/" not in text
    assert data["meta"]["clock"]["name"] == "fixed"
    assert set(data["meta"]["capacity_req_s"]) == {
        "Qwen3-Next-80B-A3B / mooncake / 8GiB",
        "Qwen3-Next-80B-A3B / azure / 8GiB",
    }
    main = [r for r in data["rows"] if r["section"] == "main"]
    assert {r["trace"] for r in main} == {"mooncake", "azure"}
    moon = next(r for r in main if r["trace"] == "mooncake")
    assert moon["seeds"] == 2 and "oracle" in moon["ratios"]
    # The tuned split comes from the other trace's oracle (azure's, same seed).
    cells = [c for c in data["cells"] if c["section"] == "main" and c["trace"] == "mooncake"]
    azure = {c["seed"]: c["oracle_share"] for c in data["cells"]
             if c["section"] == "main" and c["trace"] == "azure"}  # fmt: skip
    for c in cells:
        assert c["layouts"]["sglang-tuned"]["share"] == azure[c["seed"]]
        assert c["layouts"]["ukv"]["token_hit_rate"] >= 0
    assert any(r["section"] == "rate" and r["load"] == "1x" for r in data["rows"])
    assert "What survives" in text and "fixed 25 ms per step (not measured)" in text
