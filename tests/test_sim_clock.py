"""The step clock: the fixed clock, the measured model (monotone, fitted to measurements,
refused without them), the compute profiles, and the measurement script on CPU."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from script_loader import load_script

from ukv import models
from ukv.cli import main
from ukv.errors import ArgumentError
from ukv.sim import clock

ROOT = Path(__file__).resolve().parent.parent
QWEN = models.load("Qwen3-Next-80B-A3B")
GEMMA = models.load("Gemma-3-27B")
# Round constants of the right order for an H200-class card (a test fixture, not a claim).
TRUE = {
    "copy_bw": 4.0e12, "weight_bw": 3.5e12, "matmul_flops": 7.0e14, "mm_floor_s": 8e-6,
    "attn_bw": 3.0e12, "attn_floor_s": 1.2e-5, "prefill_attn_flops": 4.5e14,
    "prefill_attn_floor_s": 2e-5, "state_bw": 2.5e12, "state_floor_s": 6e-6,
    "launch_s": 2e-6, "launch_eager_s": 5e-6,
}  # fmt: skip


def _synthetic_raw(noise: float = 0.03, seed: int = 0) -> dict:
    """Measurements as the model with ``TRUE`` would give them, with multiplicative noise."""
    rng = np.random.default_rng(seed)

    def jit(t: float) -> float:
        return float(t * (1 + rng.uniform(-noise, noise)))

    raw: dict = {"copy": [], "matmul": [], "decode_attention": [], "prefill_attention": [],
                 "state_update": []}  # fmt: skip
    for b in (64 << 20, 256 << 20, 1 << 30):
        raw["copy"].append({"bytes": 2 * b, "s": jit(2 * b / TRUE["copy_bw"])})
    for k, n in ((8192, 28672), (8192, 8192), (4096, 4096)):  # the GPU run's shapes
        for m in (1, 8, 32, 128, 512, 2048, 8192):
            p = {"m": m, "k": k, "n": n}
            p["s"] = jit(clock.predict("matmul", p, TRUE, mm_compute_floor=TRUE["mm_floor_s"]))
            raw["matmul"].append(p)
    for bsz in (1, 16, 64, 256):
        for ctx in (1024, 8192, 32768):
            by = 2 * bsz * ctx * 8 * 128 * 2
            raw["decode_attention"].append(
                {"bytes": by, "s": jit(TRUE["attn_floor_s"] + by / TRUE["attn_bw"])}
            )
    for n in (1024, 4096, 16384):
        f = 4.0 * 32 * 128 * n * n / 2
        raw["prefill_attention"].append(
            {"flops": f, "s": jit(TRUE["prefill_attn_floor_s"] + f / TRUE["prefill_attn_flops"])}
        )
    for bsz in (1, 16, 64, 256, 512):
        by = 2 * bsz * 128 * 64 * 128 * 4
        raw["state_update"].append(
            {"bytes": by, "s": jit(TRUE["state_floor_s"] + by / TRUE["state_bw"])}
        )
    raw["launch"] = {"eager_s": TRUE["launch_eager_s"], "graph_s": TRUE["launch_s"]}
    return raw


def test_fixed_clock_is_25_ms_a_step():
    c = clock.FixedClock()
    assert c.step_time(np.array([10, 100_000]), [(0, 8192)]) == pytest.approx(0.025)
    assert "not measured" in c.describe()["source"]


def test_fit_recovers_the_constants_and_reproduces_the_points():
    consts, check = clock.fit(_synthetic_raw())
    for k in ("weight_bw", "matmul_flops", "attn_bw", "prefill_attn_flops", "state_bw"):
        assert consts[k] == pytest.approx(TRUE[k], rel=0.08), k
    for fam in ("matmul", "decode_attention", "prefill_attention", "state_update"):
        assert check[fam]["max_rel_err"] < 0.10, fam


def test_measured_clock_is_monotone_in_bytes_and_flops():
    c = clock.MeasuredClock(QWEN, TRUE)
    base = c.step_time(np.full(32, 4096), [])
    assert c.step_time(np.full(32, 8192), []) > base  # more KV read
    assert c.step_time(np.full(64, 4096), []) > base  # more requests: state, experts
    assert c.step_time(np.full(32, 4096), [(0, 2048)]) > base  # prefill FLOPs
    assert c.step_time(np.full(32, 4096), [(0, 8192)]) > c.step_time(np.full(32, 4096), [(0, 2048)])
    assert c.step_time(np.full(32, 4096), [(65536, 2048)]) > c.step_time(
        np.full(32, 4096), [(0, 2048)]
    )  # attention over a longer prefix
    parts = c.parts(np.full(32, 4096), [])
    assert parts["floor"] > 0 and parts["linear"] > 0 and parts["attn"] > 0 and parts["state"] > 0
    # A sliding layer reads its window only: Gemma's step grows less than linearly.
    g = clock.MeasuredClock(GEMMA, TRUE)
    a, b = g.parts(np.full(8, 2048), [])["attn"], g.parts(np.full(8, 65536), [])["attn"]
    assert b < 32 * a


def test_compute_profiles_match_the_published_totals():
    # Every parameter (matmuls and the input embedding) against the model cards.
    published = {"Qwen3-Next-80B-A3B": 80e9, "Nemotron-Nano-9B-v2": 8.9e9,
                 "Jamba-1.5-Mini": 52e9, "Granite-4.0-H-Micro": 3.2e9,
                 "gpt-oss-120b": 117e9, "Gemma-3-27B": 27e9}  # fmt: skip
    for name, total in published.items():
        prof = clock.COMPUTE[name]
        assert prof.total_params + prof.embed_params == pytest.approx(total, rel=0.05), name
    q = clock.COMPUTE["Qwen3-Next-80B-A3B"]
    assert q.weight_bytes(1) < q.weight_bytes(64) < q.weight_bytes(4096) <= 2 * q.total_params
    with pytest.raises(ArgumentError, match="no compute profile"):
        clock.compute_profile(models.load(str(ROOT / "tests/fixtures/configs/Gemma-3-4B")))


def test_the_measured_clock_refuses_to_run_without_its_constants(tmp_path, capsys):
    missing = tmp_path / "nope.json"
    with pytest.raises(ArgumentError, match="measure_step_clock.py.*--clock fixed"):
        clock.make_clock("measured", QWEN, missing)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"constants": {"copy_bw": 1.0}}))
    with pytest.raises(ArgumentError, match="no constant weight_bw"):
        clock.load_constants(bad)
    argv = ["simulate", "--model", "Jamba-1.5-Mini", "--memory", "4GiB", "--trace", "chat",
            "--requests", "5", "--clock-json", str(missing), "--no-progress"]  # fmt: skip
    assert main(argv) == 2
    assert "measure_step_clock.py" in capsys.readouterr().err


def test_the_default_constants_are_whichever_card_was_committed(tmp_path):
    """``benches/results/step-clock-<card>.json``: the one that exists, h200 before h100."""
    res = tmp_path / "benches" / "results"
    res.mkdir(parents=True)
    assert clock.default_clock_path([tmp_path]) is None
    src = json.loads(json.dumps({"schema": clock.SCHEMA, "meta": {"device": "NVIDIA H100"},
                                 "constants": dict(TRUE)}))  # fmt: skip
    (res / "step-clock-h100.json").write_text(json.dumps(src))
    assert clock.default_clock_path([tmp_path]) == res / "step-clock-h100.json"
    (res / "step-clock-h200.json").write_text(json.dumps(src))
    assert clock.default_clock_path([tmp_path]) == res / "step-clock-h200.json"
    c = clock.make_clock("measured", QWEN, clock.default_clock_path([tmp_path]))
    assert "NVIDIA H100" in c.source and "(--quick" not in c.source
    src["meta"]["quick"] = True
    (res / "step-clock-h100.json").write_text(json.dumps(src))
    c = clock.make_clock("measured", QWEN, res / "step-clock-h100.json")
    assert "smoke run" in c.source


def _load_script():
    return load_script("benches/measure_step_clock.py")


def test_measure_script_runs_on_cpu_and_feeds_the_clock(tmp_path):
    out = tmp_path / "clock.json"
    assert _load_script().main(["--device", "cpu", "--quick", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["schema"] == clock.SCHEMA
    for k in ("device", "versions", "date_utc", "command", "impl", "errors"):
        assert k in data["meta"], k
    assert data["meta"]["versions"]["torch"] and data["meta"]["quick"] is True
    assert set(clock.RAW_KEYS) <= set(data["raw"]) and set(clock.CONSTANT_KEYS) <= set(
        data["constants"]
    )
    for v in data["constants"].values():
        assert math.isfinite(v) and v >= 0
    # The stored fit is the clock's own prediction of every point.
    for fam, pts in data["raw"].items():
        if fam == "launch":
            continue
        stored = [p["predicted_s"] for p in data["fit"][fam]["points"]]
        again = [
            clock.predict(fam, p, data["constants"], data["fit"]["mm_compute_floor_s"]) for p in pts
        ]
        assert stored == pytest.approx(again)
    c = clock.make_clock("measured", QWEN, out)
    assert c.step_time(np.full(4, 1000), [(0, 512)]) > 0
    # How each family was timed is recorded (CUDA: graph replays; here the wall clock).
    assert data["meta"]["timing"]["decode_attention"] == "wall clock"


def test_decode_attention_takes_its_length_from_the_caller():
    """The timed call must not read the lengths back from the device (a sync inside the
    timed window, part of the ~220 µs intercept of step-clock-h100.json): given ``ctx``,
    both implementations never look at ``lens`` on the host, and compute the same."""
    script = _load_script()
    cfg = script.QUICK
    q, kc, vc, table, lens, o1 = script.attn_inputs(cfg, 2, 200, "cpu", seed=3)
    o2 = torch.empty_like(o1)
    script.paged_decode_torch(q, kc, vc, table, lens, o1, cfg["attn"]["page"])

    class NoHostRead(torch.Tensor):
        def __int__(self):
            raise AssertionError("read the lengths on the host")

        def __index__(self):
            raise AssertionError("read the lengths on the host")

    script.paged_decode_torch(
        q, kc, vc, table, lens.as_subclass(NoHostRead), o2, cfg["attn"]["page"], ctx=200
    )
    assert torch.equal(o1, o2)


def test_triton_kernels_match_the_torch_references():
    """The kernels the GPU run times, under Triton's interpreter on CPU."""
    pytest.importorskip("triton")
    import os

    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("needs TRITON_INTERPRET=1 on CPU (tests/conftest.py sets it)")
    errs = _load_script().check_kernels("cpu")
    assert errs["decode_attention_max_abs_err"] < 2e-2
    assert errs["state_update_max_abs_err"] < 1e-4
