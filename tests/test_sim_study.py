"""The capacity study end to end, tiny: probes, the main section with its tuned split, the
rate sweep, confidence intervals, and output without machine paths. One run uses only the
generated traces (it runs on a clean clone); one replays the shared real traces (skipped
where they are absent)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from script_loader import load_script

ROOT = Path(__file__).resolve().parent.parent


def _load():
    return load_script("benches/capacity.py", register=True)


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


@pytest.mark.parametrize(
    "x, verdict",
    [
        # gpt-oss / long in the 3-seed study: printed "1.00 [1.00, 1.00]" next to LOSES.
        ({"mean": 0.9985, "lo": 0.9971, "hi": 0.9996, "n": 3}, "ties"),
        ({"mean": 1.0021, "lo": 1.0011, "hi": 1.0031, "n": 3}, "ties"),
        ({"mean": 1.23, "lo": 1.0004, "hi": 1.46, "n": 3}, "ties"),  # prints [1.00, 1.46]
        ({"mean": 1.02, "lo": 1.006, "hi": 1.03, "n": 3}, "wins"),  # prints [1.01, 1.03]
        ({"mean": 0.98, "lo": 0.97, "hi": 0.994, "n": 3}, "LOSES"),  # prints [0.97, 0.99]
        ({"mean": 1.004, "lo": None, "hi": None, "n": 1}, "ties"),
        ({"mean": 0.98, "lo": None, "hi": None, "n": 1}, "LOSES"),
        (None, "n/a"),
    ],
)
def test_verdict_follows_the_printed_interval(x, verdict):
    """A verdict never contradicts the interval printed beside it: a tie whenever the
    printed interval includes 1.00."""
    cap = _load()
    assert cap._verdict(x) == verdict
    if x is not None and x["lo"] is not None:
        shown = cap._c(x)
        lo, hi = (float(v) for v in shown.split("[")[1].rstrip("]").split(", "))
        assert (verdict == "ties") == (lo <= 1.0 <= hi), shown


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


def test_quick_study_on_generated_traces(tmp_path, monkeypatch):
    """The study on chat, long and phase alone: no trace file is read (``UKV_TRACES`` points
    nowhere), so this runs on any checkout. Two seeds give every ratio an interval."""
    monkeypatch.setenv("UKV_TRACES", str(tmp_path / "no-traces-here"))
    cap = _load()
    assert not cap.DATA.exists()
    out = tmp_path / "out"
    argv = ["--clock", "fixed", "--quick", "--jobs", "1", "--out", str(out),
            "--models", "Qwen3-Next-80B-A3B", "--traces", "chat", "long", "phase",
            "--sections", "main", "--seeds", "2"]  # fmt: skip
    assert cap.main(argv) == 0
    data = json.loads((out / "capacity-fixed-quick.json").read_text())
    text = (out / "capacity-fixed-quick.md").read_text()
    assert not (out / "capacity-fixed-quick.cells.jsonl").exists()  # the partial log is gone
    # No machine paths: the output folder is named, not where it lies.
    meta = json.dumps(data["meta"])
    for leak in (str(tmp_path), "/tmp/", "/work/", "../"):
        assert leak not in meta and leak not in text, leak
    assert data["meta"]["command"].endswith(
        "--quick --jobs 1 --out out --models Qwen3-Next-80B-A3B --traces chat long phase "
        "--sections main --seeds 2"
    )
    assert data["meta"]["seeds"] == 2 and data["meta"]["clock"]["name"] == "fixed"
    # The phase trace's rates come from the chat and long probes: two probes in all.
    assert set(data["meta"]["capacity_req_s"]) == {
        "Qwen3-Next-80B-A3B / chat / 8GiB",
        "Qwen3-Next-80B-A3B / long / 8GiB",
    }
    assert all(v > 0 for v in data["meta"]["capacity_req_s"].values())
    rows = {r["trace"]: r for r in data["rows"]}
    assert set(rows) == {"chat", "long", "phase"}
    for tr, r in rows.items():
        assert r["section"] == "main" and r["seeds"] == 2
        want = {"sglang-default", "sglang-unified", "oracle", "jenga", "vllm", "vllm-equal",
                "sglang-nocap", "sglang-radix-off", "sglang-tuned"}  # fmt: skip
        if tr == "phase":
            want.add("oracle-phase")
        assert set(r["ratios"]) == want, tr
        # Every ratio without a failed seed has a 95% interval over the two seeds.
        for lab, x in r["ratios"].items():
            if r["failed_seeds"].get(lab):
                continue
            assert x is not None and x["n"] == 2, (tr, lab)
            assert x["lo"] <= x["mean"] <= x["hi"], (tr, lab)
        assert 0 < r["ratios"]["oracle"]["mean"] < 10
        # Generated traces carry no prefix information: no layout hits its cache.
        assert all(h["mean"] == 0 for h in r["hit_rate"].values() if h is not None)
    # Rejecting runs leave no ratio and are said so, per seed.
    for r in rows.values():
        for lab, n in r["failed_seeds"].items():
            if n == r["seeds"]:
                assert r["ratios"][lab] is None
            assert any(f.startswith(f"{lab}:") for f in r["failures"])
    # sglang-tuned runs at the share the oracle chose on the other workload, same seed.
    cells = [c for c in data["cells"] if c["section"] == "main"]
    oracle = {(c["trace"], c["seed"]): c["oracle_share"] for c in cells}
    for c in cells:
        other = cap.TUNED_ON[c["trace"]]
        assert c["layouts"]["sglang-tuned"]["share"] == oracle[(other, c["seed"])]
        assert c["layouts"]["sglang-tuned"]["tuned_on"] == other
        assert isinstance(c["layouts"]["oracle-phase" if c["trace"] == "phase" else "oracle"]
                          ["share"], (float, list))  # fmt: skip
    phase = next(c for c in cells if c["trace"] == "phase")
    assert set(phase["arrivals"]) == {"chat_rate", "long_rate"}
    assert "What survives" in text and "fixed 25 ms per step (not measured)" in text
    assert "| Qwen3-Next-80B-A3B | phase" in text


def test_quick_study_on_the_measured_clock(tmp_path, monkeypatch):
    """``--clock measured --clock-json PATH``: the file's constants time every step, the
    results say which file (by name) and which constants."""
    monkeypatch.setenv("UKV_TRACES", str(tmp_path / "no-traces-here"))
    cap = _load()
    # Round constants of an H200-class card: a fixture for this test, not a measurement.
    consts = {"copy_bw": 4.0e12, "weight_bw": 3.5e12, "matmul_flops": 7.0e14,
              "mm_floor_s": 8e-6, "attn_bw": 3.0e12, "attn_floor_s": 1.2e-5,
              "prefill_attn_flops": 4.5e14, "prefill_attn_floor_s": 2e-5, "state_bw": 2.5e12,
              "state_floor_s": 6e-6, "launch_s": 2e-6, "launch_eager_s": 5e-6}  # fmt: skip
    src = tmp_path / "step-clock-test.json"
    src.write_text(json.dumps({"schema": "ukv-step-clock/1", "constants": consts,
                               "meta": {"device": "TEST CARD", "date_utc": "2026-01-01 00:00"}}))  # fmt: skip
    out = tmp_path / "out"
    argv = ["--clock", "measured", "--clock-json", str(src), "--quick", "--jobs", "1",
            "--out", str(out), "--models", "Qwen3-Next-80B-A3B", "--traces", "chat",
            "--sections", "main", "--seeds", "2"]  # fmt: skip
    assert cap.main(argv) == 0
    data = json.loads((out / "capacity-measured-quick.json").read_text())
    text = (out / "capacity-measured-quick.md").read_text()
    clk = data["meta"]["clock"]
    assert clk["name"] == "measured" and clk["constants"] == consts
    assert "TEST CARD" in clk["source"] and "step-clock-test.json" in clk["source"]
    assert str(tmp_path) not in json.dumps(data["meta"]) and str(tmp_path) not in text
    assert "Constants: weights 3.50 TB/s" in text and "fixed 25 ms" not in text
    # Steps cost what they read and compute: not one constant time.
    (row,) = data["rows"]
    assert row["ratios"]["sglang-default"]["n"] == 2
    cells = data["cells"]
    assert all(c["layouts"]["ukv"]["steps"] > 0 for c in cells)
    per_step = [c["layouts"]["ukv"]["makespan_s"] / c["layouts"]["ukv"]["steps"] for c in cells]
    assert all(0 < x < 1 and x != 0.025 for x in per_step)


def test_missing_clock_constants_stop_the_study_before_any_work(tmp_path, capsys):
    cap = _load()
    argv = ["--clock", "measured", "--clock-json", str(tmp_path / "none.json"), "--quick",
            "--out", str(tmp_path / "out")]  # fmt: skip
    assert cap.main(argv) == 2
    assert "measure_step_clock.py" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_merge_replaces_a_rerun_models_cells_only():
    """``--merge``: a later run's models replace theirs; every other row is unchanged."""
    cap = _load()
    path = cap.ROOT / "benches" / "results" / "capacity-measured.json"
    if not path.exists():
        pytest.skip("no committed study")
    base = json.loads(path.read_text())
    assert cap.merge([base, base])["rows"] == base["rows"]
    model = base["cells"][-1]["model"]
    rerun = copy.deepcopy(base)
    rerun["cells"] = [c for c in rerun["cells"] if c["model"] == model]
    for c in rerun["cells"]:
        c["ratios"] = {k: (None if v is None else v * 2) for k, v in c["ratios"].items()}
    out = cap.merge([base, rerun])
    assert [m["models"] for m in out["meta"]["merged"]][1] == [model]
    assert model not in out["meta"]["merged"][0]["models"]
    for new, old in zip(out["rows"], base["rows"]):
        assert (new == old) == (new["model"] != model), (new["model"], new["trace"])
    assert "Merged from runs" in cap.markdown(out["meta"], out["rows"])
